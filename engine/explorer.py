"""The attention explorer: one self-contained HTML page per example (inline JS/CSS, no network).

A person picks the attention group, layer and head (or "all heads" as a grid) and sees the attention matrix with
the query tokens down the side and the key tokens along the top (target x source for cross-attention), a colour
scale, the weight under the pointer, and per-head entropy / max logit / sink mass / score mean and std beside it.
The selection lives in the URL hash (``page.html#group=cross&layer=1&head=all``), so a link opens a given view.

``write_explorer`` writes the page; ``explorer_html`` returns it (for ``wandb.Html``); ``example_view`` turns one
row of a batch's ``AttentionStats`` (reference backend, with weights) into the inputs of both.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Optional

import numpy as np

STAT_FIELDS = ("entropy", "max_logit", "sink", "logit_mean", "logit_std")
STAT_NAMES = {"entropy": "entropy (nats)", "max_logit": "max logit", "sink": "sink (key 0)",
              "logit_mean": "score mean", "logit_std": "score std"}
AXES = {"encoder_self": ("source", "source"), "decoder_self": ("target", "target"), "cross": ("target", "source")}


def _finite(x: float) -> Optional[float]:
    return round(float(x), 4) if math.isfinite(float(x)) else None


def _page_data(weights_by_group: Mapping[str, Any], labels_by_group: Mapping[str, tuple[Sequence[str], Sequence[str]]],
               stats_by_group: Optional[Mapping[str, Mapping[str, Any]]], title: str) -> dict:
    if not weights_by_group:
        raise ValueError("explorer: weights_by_group is empty; expected group -> [layers, heads, Tq, Tk] weights")
    groups = []
    for name, w in weights_by_group.items():
        w = np.asarray(w, np.float64)
        if w.ndim != 4:
            raise ValueError(f"explorer: weights of group {name!r} have shape {w.shape}; expected [L, H, Tq, Tk]")
        if name not in labels_by_group:
            raise ValueError(f"explorer: no labels for group {name!r}; expected (query labels, key labels)")
        q_labels, k_labels = labels_by_group[name]
        L, H, Tq, Tk = w.shape
        if len(q_labels) != Tq or len(k_labels) != Tk:
            raise ValueError(f"explorer: group {name!r} has {len(q_labels)} query / {len(k_labels)} key labels "
                             f"for weights with Tq={Tq}, Tk={Tk}")
        stats = {}
        for field, values in ((stats_by_group or {}).get(name) or {}).items():
            values = np.asarray(values, np.float64)
            if values.shape != (L, H):
                raise ValueError(f"explorer: stats {name}/{field} have shape {values.shape}; expected [L, H] = "
                                 f"{(L, H)}")
            stats[field] = [[_finite(x) for x in row] for row in values]
        q_axis, k_axis = AXES.get(name, ("query", "key"))
        groups.append({"name": name, "q_axis": q_axis, "k_axis": k_axis, "layers": L, "heads": H,
                       "q_labels": [str(t) for t in q_labels], "k_labels": [str(t) for t in k_labels],
                       "weights": np.round(w, 4).tolist(), "stats": stats})
    return {"title": title, "groups": groups, "stat_names": STAT_NAMES}


def explorer_html(weights_by_group: Mapping[str, Any], labels_by_group: Mapping[str, tuple[Sequence[str], Sequence[str]]],
                  stats_by_group: Optional[Mapping[str, Mapping[str, Any]]] = None, title: str = "") -> str:
    """The explorer page as one HTML string.

    weights_by_group: group -> [L, H, Tq, Tk] weights of one example (real tokens only).
    labels_by_group: group -> (query labels [Tq], key labels [Tk]).
    stats_by_group: group -> {field: [L, H]} per-head numbers shown beside the map (any of ``STAT_FIELDS``).
    """
    data = json.dumps(_page_data(weights_by_group, labels_by_group, stats_by_group, title), separators=(",", ":"))
    data = data.replace("</", "<\\/")  # no "</script>" inside the inline script
    safe_title = (title or "attention explorer").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _TEMPLATE.replace("__TITLE__", safe_title).replace("__DATA__", data)


def write_explorer(path: str, weights_by_group: Mapping[str, Any],
                   labels_by_group: Mapping[str, tuple[Sequence[str], Sequence[str]]],
                   stats_by_group: Optional[Mapping[str, Mapping[str, Any]]] = None, title: str = "") -> str:
    """Write the explorer page (see ``explorer_html``) to ``path``; returns ``path``."""
    html = explorer_html(weights_by_group, labels_by_group, stats_by_group, title)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(html)
    return path


def example_view(stats_by_group: Mapping[str, Sequence[Any]], row: int,
                 lengths_by_group: Mapping[str, tuple[int, int]]) -> tuple[dict, dict]:
    """One example's explorer inputs from batch statistics.

    stats_by_group: group -> per layer ``AttentionStats`` with ``weights`` [B, H, Tq, Tk] (reference backend;
    ``engine.doctor.attention_maps`` gives them). row: the example's row. lengths_by_group: group -> (real query
    tokens, real key tokens) of that row, from position 0.
    Returns (weights_by_group {group: [L, H, tq, tk]}, stats_by_group {group: {field: [L, H]}}); per-head numbers
    are means over the example's real query rows (max for max_logit).
    """
    weights, stats = {}, {}
    for group, layers in stats_by_group.items():
        if not layers:
            continue
        if layers[0].weights is None:
            raise ValueError(f"explorer: stats of group {group!r} carry no weights; use the reference backend")
        tq, tk = lengths_by_group[group]
        weights[group] = np.stack([np.asarray(s.weights)[row, :, :tq, :tk] for s in layers])
        fields = {}
        for field in STAT_FIELDS:
            if getattr(layers[0], field, None) is None:
                continue
            per_layer = []
            for s in layers:
                x = np.asarray(getattr(s, field))[row, :, :tq]  # [H, tq]
                ok = np.asarray(s.valid)[row, :, :tq]
                if field == "max_logit":
                    per_layer.append(np.max(np.where(ok, x, -np.inf), axis=-1))
                else:
                    per_layer.append(np.sum(np.where(ok, x, 0.0), axis=-1) / np.maximum(ok.sum(-1), 1))
            fields[field] = np.stack(per_layer)
        stats[group] = fields
    return weights, stats


def write_batch_explorers(model, batch: Mapping[str, Any], out_dir: str, *, rows: Sequence[int],
                          source_piece: Callable[[int], str], target_piece: Callable[[int], str],
                          prefix: str = "example", title: str = "", task=None) -> dict[int, str]:
    """Explorer pages for ``rows`` of a training-pipeline batch, teacher-forced on the reference backend.

    model: a model of any task (``engine.tasks``); task: its ``Task`` or name (default: the task that trains the
    model's class). batch: as the data pipeline gives it (the first example of each row is shown).
    source_piece / target_piece: token id -> piece for the task's "source" / "target" side (the tokenizers'
    ``id_to_piece``). Writes ``<out_dir>/<prefix><row>.html``; returns row -> path.
    """
    from engine import doctor

    task = doctor.resolve_task(model, task)
    full = doctor.complete_batch(batch, task, model.cfg, rows=len(np.asarray(batch[task.sides[0].tokens])))
    picked = {k: np.asarray(v)[list(rows)] for k, v in full.items()}
    maps = doctor.attention_maps(model, picked, task)
    real = task.real_positions(picked, model.cfg)
    piece = {"source": source_piece, "target": target_piece}
    tokens = {s.name: task.side_tokens(picked, s.name, model.cfg) for s in task.sides}
    paths = {}
    for i, row in enumerate(rows):
        lengths, labels = {}, {}
        for side in real:  # the row's first example: its length and token labels per side
            seg = picked.get(task.side(side).segmentation) if side in tokens else None
            if seg is None:
                n = int(real[side][i].sum())
            else:
                n = int(np.sum(seg[i] == seg[i][0])) if seg[i][0] > 0 else 0
            lengths[side] = n
            labels[side] = ([piece[side](int(x)) for x in tokens[side][i, :n]] if side in tokens
                            else [f"<{side}>"] * n)
        group_lengths = {g: (lengths[q], lengths[k]) for g, (q, k) in task.group_sides.items() if g in maps}
        group_labels = {g: (labels[q], labels[k]) for g, (q, k) in task.group_sides.items() if g in maps}
        weights, stats = example_view(maps, i, group_lengths)
        paths[row] = write_explorer(os.path.join(out_dir, f"{prefix}{row}.html"), weights, group_labels, stats,
                                    title=f"{title}, row {row}" if title else f"row {row}")
    return paths


_TEMPLATE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font:13px/1.35 system-ui,-apple-system,"Segoe UI",sans-serif;margin:14px;color:#222;background:#fff}
h1{font-size:16px;margin:0 0 8px}
#controls{display:flex;gap:14px;align-items:center;flex-wrap:wrap;margin-bottom:8px}
#controls label{font-weight:600}
select{font:inherit;padding:1px 4px}
#main{display:flex;gap:22px;align-items:flex-start}
#readout{min-height:1.4em;margin:4px 0 8px;font-family:ui-monospace,Menlo,monospace;font-size:12px}
table.map{border-collapse:collapse}
table.map td.c{width:var(--cell);height:var(--cell);padding:0;border:0}
table.map td.c:hover{outline:2px solid #e4572e;outline-offset:-2px}
table.map th{font-weight:400;font-size:11px;padding:0 3px;white-space:nowrap;font-family:ui-monospace,Menlo,monospace}
table.map th.k{writing-mode:vertical-rl;transform:rotate(180deg);text-align:left;padding:3px 0;height:auto}
table.map th.q{text-align:right}
table.map th.axis{font-family:inherit;font-style:italic;color:#666}
.grid{display:grid;grid-template-columns:repeat(var(--cols),auto);gap:12px}
.panel{cursor:pointer;border:1px solid #ddd;padding:4px;border-radius:3px}
.panel.sel{border-color:#e4572e}
.panel .cap{font-size:11px;margin-bottom:3px;font-family:ui-monospace,Menlo,monospace}
#legend{display:flex;align-items:center;gap:6px;margin:6px 0;font-size:11px}
#bar{width:180px;height:12px;border:1px solid #aaa}
table.stats{border-collapse:collapse;font-size:12px}
table.stats th,table.stats td{border-bottom:1px solid #e5e5e5;padding:2px 8px;text-align:right}
table.stats th:first-child,table.stats td:first-child{text-align:left}
table.stats tr.sel td{background:#fde8e1;font-weight:600}
table.stats tbody tr{cursor:pointer}
.note{color:#666;font-size:11px;max-width:360px}
</style></head>
<body>
<h1 id="title"></h1>
<div id="controls">
 <span><label for="group">group</label> <select id="group"></select></span>
 <span><label for="layer">layer</label> <select id="layer"></select></span>
 <span><label for="head">head</label> <select id="head"></select></span>
 <span><label for="scale">colour scale</label> <select id="scale"><option value="unit">0 to 1</option><option value="max">0 to max</option></select></span>
</div>
<div id="legend"><span id="lo">0</span><div id="bar"></div><span id="hi">1</span><span>attention weight</span></div>
<div id="readout">hover a cell to read its weight</div>
<div id="main"><div id="view"></div><div id="side"><table class="stats" id="stats"></table>
<p class="note">Per head, this example: entropy in nats (uniform = log of the visible keys), max logit (largest scaled
score), sink (mass on key 0), score mean / std (pre-softmax, over visible keys). Click a row to show that head.</p></div></div>
<script>
const DATA = __DATA__;
const STOPS = [[68,1,84],[59,82,139],[33,145,140],[94,201,98],[253,231,37]];
function colour(t){t=Math.min(1,Math.max(0,t));const x=t*(STOPS.length-1),i=Math.min(STOPS.length-2,Math.floor(x)),f=x-i;
  const a=STOPS[i],b=STOPS[i+1];return "rgb("+a.map((v,j)=>Math.round(v+(b[j]-v)*f)).join(",")+")";}
const $=id=>document.getElementById(id);
const state={group:0,layer:0,head:"0",scale:"unit"};
function groupIndex(name){const i=DATA.groups.findIndex(g=>g.name===name);return i<0?0:i;}
function readHash(){const p=new URLSearchParams(location.hash.slice(1));
  if(p.has("group"))state.group=groupIndex(p.get("group"));
  const g=DATA.groups[state.group];
  if(p.has("layer"))state.layer=Math.min(g.layers-1,Math.max(0,parseInt(p.get("layer"))||0));
  if(p.has("head")){const h=p.get("head");state.head=(h==="all")?"all":String(Math.min(g.heads-1,Math.max(0,parseInt(h)||0)));}
  if(p.has("scale"))state.scale=p.get("scale")==="max"?"max":"unit";}
function writeHash(){const g=DATA.groups[state.group];
  history.replaceState(null,"","#group="+g.name+"&layer="+state.layer+"&head="+state.head+(state.scale==="max"?"&scale=max":""));}
function fillSelect(sel,items,value){sel.innerHTML="";for(const [v,t] of items){const o=document.createElement("option");o.value=v;o.textContent=t;sel.appendChild(o);}sel.value=value;}
function fmt(x){return x===null||x===undefined?"-":(Math.abs(x)>=100?x.toFixed(1):x.toFixed(3));}
function mapTable(g,w,vmax,cell,labels,head){
  const t=document.createElement("table");t.className="map";t.style.setProperty("--cell",cell+"px");
  t.dataset.head=head;t.dataset.rows=w.length;t.dataset.cols=w[0].length;
  if(labels){const tr=t.insertRow();const c=document.createElement("th");c.className="axis";c.textContent=g.q_axis+" \\ "+g.k_axis;tr.appendChild(c);
    g.k_labels.forEach((l,j)=>{const th=document.createElement("th");th.className="k";th.textContent=l;th.dataset.k=j;tr.appendChild(th);});}
  w.forEach((row,i)=>{const tr=t.insertRow();
    if(labels){const th=document.createElement("th");th.className="q";th.textContent=g.q_labels[i];th.dataset.q=i;tr.appendChild(th);}
    row.forEach((v,j)=>{const td=tr.insertCell();td.className="c";td.style.background=colour(v/vmax);
      td.dataset.q=i;td.dataset.k=j;td.dataset.w=v;
      td.title=g.q_labels[i]+" \u2192 "+g.k_labels[j]+": "+v.toFixed(4);});});
  t.addEventListener("mouseover",e=>{const td=e.target.closest("td.c");if(!td)return;
    $("readout").textContent=g.name+" L"+state.layer+" H"+head+"  "+g.q_axis+" \u201c"+g.q_labels[td.dataset.q]+"\u201d (row "+td.dataset.q+
      ") \u2192 "+g.k_axis+" \u201c"+g.k_labels[td.dataset.k]+"\u201d (col "+td.dataset.k+"): "+Number(td.dataset.w).toFixed(4);});
  return t;}
function vmaxOf(ws){if(state.scale==="unit")return 1;let m=0;for(const w of ws)for(const r of w)for(const v of r)m=Math.max(m,v);return m>0?m:1;}
function render(){
  const g=DATA.groups[state.group];
  fillSelect($("group"),DATA.groups.map((x,i)=>[i,x.name+" ("+x.q_axis+" \u00d7 "+x.k_axis+")"]),state.group);
  fillSelect($("layer"),[...Array(g.layers).keys()].map(l=>[l,"layer "+l]),state.layer);
  fillSelect($("head"),[...[...Array(g.heads).keys()].map(h=>[String(h),"head "+h]),["all","all heads"]],state.head);
  $("scale").value=state.scale;
  const view=$("view");view.innerHTML="";
  const tq=g.q_labels.length,tk=g.k_labels.length,big=Math.max(tq,tk);
  if(state.head==="all"){
    const ws=g.weights[state.layer],vmax=vmaxOf(ws);
    const grid=document.createElement("div");grid.className="grid";grid.id="grid";
    grid.style.setProperty("--cols",Math.min(g.heads,4));
    const cell=Math.max(2,Math.min(9,Math.floor(200/big)));
    ws.forEach((w,h)=>{const p=document.createElement("div");p.className="panel";p.dataset.head=h;
      const cap=document.createElement("div");cap.className="cap";
      const ent=(g.stats.entropy||[])[state.layer];cap.textContent="head "+h+(ent?"  H="+fmt(ent[h]):"");
      p.appendChild(cap);p.appendChild(mapTable(g,w,vmax,cell,false,h));
      p.addEventListener("click",()=>{state.head=String(h);writeHash();render();});grid.appendChild(p);});
    view.appendChild(grid);setLegend(vmax);
  } else {
    const h=parseInt(state.head),w=g.weights[state.layer][h],vmax=vmaxOf([w]);
    const cell=Math.max(6,Math.min(26,Math.floor(600/big)));
    const t=mapTable(g,w,vmax,cell,true,h);t.id="map";view.appendChild(t);setLegend(vmax);}
  renderStats(g);
  $("title").textContent=(DATA.title||"attention explorer")+" \u2014 "+g.name+", layer "+state.layer+", "+(state.head==="all"?"all heads":"head "+state.head);}
function setLegend(vmax){$("bar").style.background="linear-gradient(to right,"+[0,.25,.5,.75,1].map(colour).join(",")+")";
  $("lo").textContent="0";$("hi").textContent=vmax===1?"1":vmax.toFixed(3);}
function renderStats(g){const t=$("stats");t.innerHTML="";const fields=Object.keys(g.stats);
  const head=t.createTHead().insertRow();["head",...fields.map(f=>DATA.stat_names[f]||f)].forEach(x=>{const th=document.createElement("th");th.textContent=x;head.appendChild(th);});
  const body=t.createTBody();
  for(let h=0;h<g.heads;h++){const tr=body.insertRow();tr.dataset.head=h;if(String(h)===state.head)tr.className="sel";
    tr.insertCell().textContent="H"+h;for(const f of fields)tr.insertCell().textContent=fmt(g.stats[f][state.layer][h]);
    tr.addEventListener("click",()=>{state.head=String(h);writeHash();render();});}}
for(const id of ["group","layer","head","scale"])$(id).addEventListener("change",e=>{
  const v=e.target.value;if(id==="group"){state.group=parseInt(v);const g=DATA.groups[state.group];state.layer=Math.min(state.layer,g.layers-1);
    if(state.head!=="all")state.head=String(Math.min(parseInt(state.head),g.heads-1));}
  else if(id==="layer")state.layer=parseInt(v);else if(id==="head")state.head=v;else state.scale=v;writeHash();render();});
window.addEventListener("hashchange",()=>{readHash();render();});
readHash();render();
</script></body></html>
"""
