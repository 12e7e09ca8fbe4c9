"""The attention explorer page, rendered in a real headless Chromium, and the static PNG heatmaps.

The browser tests need Debian's ``chromium`` (``apt-get install -y chromium``); without it they are skipped.
They open the page with ``--dump-dom`` (the DOM after the page's scripts ran): once with a head chosen in the URL
hash, once with a small script appended that switches head and then shows all heads through the page's own
controls, as a person would.
"""
import html.parser
import json
import shutil
import subprocess

import numpy as np
import pytest

import attention
from engine import explorer, heatmaps

BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no chromium on PATH (apt-get install -y chromium)")

SOURCE = ["\u2581el", "\u2581gato", "\u2581<negro>", "&", "</s>"]
TARGET = ["<s>", "\u2581the", "\u2581black", "\u2581cat"]
L, H = 2, 3


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def example():
    rng = np.random.default_rng(0)
    weights = {"encoder_self": softmax(3 * rng.normal(size=(L, H, 5, 5))),
               "cross": softmax(3 * rng.normal(size=(L, H, 4, 5)))}
    labels = {"encoder_self": (SOURCE, SOURCE), "cross": (TARGET, SOURCE)}
    stats = {g: {"entropy": rng.random((L, H)), "max_logit": 5 * rng.random((L, H)), "sink": rng.random((L, H))}
             for g in weights}
    return weights, labels, stats


class DomCells(html.parser.HTMLParser):
    """Cells, axis labels, panels and stats rows of a dumped explorer DOM."""

    def __init__(self):
        super().__init__()
        self.cells, self.k_labels, self.q_labels, self.panels, self.selected_rows = [], [], [], [], []
        self.maps, self.probes, self._text_into, self._title = [], {}, None, False
        self.title = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        cls = a.get("class", "")
        if tag == "td" and cls == "c":
            self.cells.append((int(a["data-q"]), int(a["data-k"]), float(a["data-w"]), a["title"],
                               a.get("style", "")))
        elif tag == "th" and cls in ("k", "q"):
            self._text_into = self.k_labels if cls == "k" else self.q_labels
            self._text_into.append("")
        elif tag == "table" and cls == "map":
            self.maps.append(a)
        elif tag == "div" and "panel" in cls.split():
            self.panels.append(int(a["data-head"]))
        elif tag == "tr" and cls == "sel":
            self.selected_rows.append(int(a["data-head"]))
        elif tag == "pre" and a.get("id", "").startswith("probe"):
            self._text_into = self.probes.setdefault(a["id"], [])
            self._text_into.append("")
        elif tag == "h1":
            self._title = True

    def handle_endtag(self, tag):
        if tag in ("th", "pre"):
            self._text_into = None
        if tag == "h1":
            self._title = False

    def handle_data(self, data):
        if self._text_into is not None:
            self._text_into[-1] += data
        if self._title:
            self.title += data


def dump_dom(path, fragment: str = "") -> DomCells:
    out = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          f"file://{path}{fragment}"], capture_output=True, text=True, timeout=120, check=True)
    parser = DomCells()
    parser.feed(out.stdout)
    assert parser.title, out.stdout[:500]  # the page's script ran
    return parser


def test_page_is_self_contained_and_escapes_labels():
    weights, labels, stats = example()
    page = explorer.explorer_html(weights, labels, stats, title="<b>ex</b>")
    assert "http://" not in page and "https://" not in page and " src=" not in page
    assert "<title>&lt;b&gt;ex&lt;/b&gt;</title>" in page
    assert "</s>" not in page.split("<script>")[1].split("</script>")[0]  # labels cannot close the script


@needs_browser
def test_hash_selects_group_layer_head_and_cells_carry_the_weights(tmp_path):
    weights, labels, stats = example()
    path = explorer.write_explorer(str(tmp_path / "ex.html"), weights, labels, stats, title="example 0")
    dom = dump_dom(path, "#group=cross&layer=1&head=2")
    assert dom.k_labels == SOURCE and dom.q_labels == TARGET
    assert len(dom.cells) == 4 * 5
    got = np.zeros((4, 5))
    for q, k, w, title, style in dom.cells:
        got[q, k] = w
        assert title.startswith(f"{TARGET[q]} \u2192 {SOURCE[k]}: ")
        assert "background" in style
    np.testing.assert_allclose(got, weights["cross"][1, 2], atol=6e-5)
    assert dom.selected_rows == [2]
    assert "cross, layer 1, head 2" in dom.title


@needs_browser
def test_switching_head_and_all_heads_through_the_controls(tmp_path):
    weights, labels, stats = example()
    page = explorer.explorer_html(weights, labels, stats, title="example 0")
    probe = """<script>
    function cells(){
      return [...document.querySelectorAll('#view td.c')].map(td=>[+td.dataset.q,+td.dataset.k,+td.dataset.w]);}
    function pick(id,v){const s=document.getElementById(id);s.value=v;s.dispatchEvent(new Event('change'));}
    function probe(id,x){
      const p=document.createElement('pre');p.id=id;p.textContent=JSON.stringify(x);document.body.appendChild(p);}
    pick('group','0'); pick('layer','0'); pick('head','1');
    document.querySelector('#view td.c[data-q="2"][data-k="3"]')
      .dispatchEvent(new MouseEvent('mouseover',{bubbles:true}));
    probe('probe1',{hash:location.hash,cells:cells(),readout:document.getElementById('readout').textContent});
    pick('head','all');
    </script></body>"""
    path = tmp_path / "ex.html"
    path.write_text(page.replace("</body>", probe), encoding="utf-8")
    dom = dump_dom(str(path))
    first = json.loads(dom.probes["probe1"][0])
    assert first["hash"] == "#group=encoder_self&layer=0&head=1"
    got = np.zeros((5, 5))
    for q, k, w in first["cells"]:
        got[q, k] = w
    np.testing.assert_allclose(got, weights["encoder_self"][0, 1], atol=6e-5)
    w = weights["encoder_self"][0, 1, 2, 3]
    hover = f"\u201c{SOURCE[2]}\u201d (row 2) \u2192 source \u201c{SOURCE[3]}\u201d (col 3): {w:.4f}"
    assert first["readout"].endswith(hover)  # the weight under the pointer
    # now all heads of encoder_self layer 0: one panel per head, each with the full matrix
    assert dom.panels == list(range(H))
    assert len(dom.cells) == H * 5 * 5
    per_head = [m for m in dom.maps if "data-head" in m]
    assert [int(m["data-head"]) for m in per_head] == list(range(H))


def test_bad_inputs_are_one_clear_error(tmp_path):
    weights, labels, stats = example()
    with pytest.raises(ValueError, match="expected \\[L, H, Tq, Tk\\]"):
        explorer.explorer_html({"cross": weights["cross"][0]}, labels)
    with pytest.raises(ValueError, match="4 query / 4 key labels"):
        explorer.explorer_html({"cross": weights["cross"]}, {"cross": (TARGET, TARGET)})
    with pytest.raises(ValueError, match="no labels"):
        explorer.explorer_html({"cross": weights["cross"]}, {})
    with pytest.raises(ValueError, match="expected \\[L, H\\]"):
        explorer.explorer_html(weights, labels, {"cross": {"entropy": np.zeros(3)}})


def test_example_view_crops_to_the_real_tokens_and_reduces_per_head():
    B, Tq, Tk = 2, 6, 7
    rng = np.random.default_rng(1)
    w = softmax(rng.normal(size=(B, H, Tq, Tk)))
    valid = np.zeros((B, H, Tq), bool)
    valid[:, :, :4] = True
    ent = rng.random((B, H, Tq))
    s = attention.AttentionStats(entropy=ent, max_logit=rng.random((B, H, Tq)), lse=np.zeros((B, H, Tq)),
                                 valid=valid, sink=rng.random((B, H, Tq)), weights=w)
    weights, stats = explorer.example_view({"cross": [s, s]}, row=1, lengths_by_group={"cross": (4, 5)})
    assert weights["cross"].shape == (2, H, 4, 5)
    np.testing.assert_allclose(weights["cross"][1], w[1, :, :4, :5])
    np.testing.assert_allclose(stats["cross"]["entropy"][0], ent[1, :, :4].mean(-1))
    assert set(stats["cross"]) >= {"entropy", "max_logit", "sink"}


def test_png_heatmap_grid_has_labels_and_colour_bar(tmp_path):
    weights, _, _ = example()
    path = str(tmp_path / "grid.png")
    heatmaps.plot_attention_grid(weights["cross"], TARGET, SOURCE, "cross", path)
    import matplotlib.image

    img = matplotlib.image.imread(path)
    assert img.shape[0] > 200 and img.shape[1] > 300
    with pytest.raises(ValueError, match="4 query and 4 key labels"):
        heatmaps.plot_attention_grid(weights["cross"], TARGET, TARGET, "cross", path)
