"""Are sixteen heads really better than one? (Michel, Levy & Neubig, NeurIPS 2019) on attnlab's translation
model with 8 heads per layer (``configs/repro_head_importance.py``), through the engine and head masks.

Per seed: train the model (its BLEU on the test split is the engine's final evaluation), then on
``--eval_batches`` validation batches, with ``models.Interventions(head_mask=...)``:
- the validation NLL with each head alone masked (xi_h = 0), against the unmasked model;
- head importance I_h = mean over batches of |dNLL/dxi_h| at xi = 1 (Michel et al.'s eq. for the head mask
  gradient), normalised per layer by its l2 norm as in the paper;
- the progressive pruning curve: NLL with the least important fraction of all heads masked, and per group
  (encoder self, decoder self, cross) with only that group's heads pruned.
The interventions are measured as teacher-forced validation NLL, not BLEU: masked heads would need
interventions in KV-cache decoding, and decoding a BLEU set per masked head is too slow on 2 CPU cores.

    python scripts/repro_head_importance.py                  # 3 seeds x 12 min -> docs/results/head_importance/
    python scripts/repro_head_importance.py --seeds 1 --minutes 3
    python scripts/repro_head_importance.py --quick          # seconds: tiny sizes, for tests
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _report import Report, environment_line, markdown_table, mean_std, write_csv  # noqa: E402
from _runs import load, with_overrides  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

import engine  # noqa: E402
import models  # noqa: E402
from engine.hooks import Hook  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(ROOT, "configs", "repro_head_importance.py")
OUT = os.path.join(ROOT, "docs", "results", "head_importance")
GROUPS = ("encoder_self", "decoder_self", "cross")
FRACTIONS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
PAPER = """
Michel, Levy & Neubig, *Are Sixteen Heads Really Better than One?*, NeurIPS 2019 (arXiv:1905.10650): on a
WMT'14 En-Fr Transformer-large (6+6 layers, 16 heads) "a large percentage of attention heads can be removed at
test time without significantly impacting performance" and "some layers can even be reduced to a single head";
in the pruning analysis "the self-attention layers can be significantly pruned, while the encoder-decoder
layers are more dependent on multi-headedness" (abstract, papers.nips.cc). Their importance score is the
expected |∂L/∂ξ_h| with per-layer l2 normalisation, and they prune by it progressively.
"""


class KeepModel(Hook):
    """Keeps the trained parameters, the setup, the task and the data when training ends."""

    def end(self, run) -> None:
        self.params, self.setup, self.task, self.data = run.state["params"], run.setup, run.task, run.data


def measure(model: nnx.Module, task, batches: list) -> dict:
    """NLL of masks, importance and pruning curves of one trained model on ``batches``."""
    graphdef, state = nnx.split(model)
    unit = models.unit_head_mask(model)
    shapes = {g: unit[g].shape for g in GROUPS}

    @jax.jit
    def nll_terms(state, mask, batch):
        m = nnx.merge(graphdef, state)
        logits = task.forward(m, batch, deterministic=True, interventions=models.Interventions(head_mask=mask))
        t = task.loss_terms(logits, batch, 0.0)
        return t["nll_sum"], t["weight_sum"]

    grad_fn = jax.jit(jax.grad(lambda mask, state, batch: (lambda s, w: s / w)(*nll_terms(state, mask, batch))))
    dev = [{k: jnp.asarray(v) for k, v in b.items()} for b in batches]

    def nll(mask) -> float:
        sums = [nll_terms(state, mask, b) for b in dev]
        return float(sum(float(s) for s, _ in sums) / max(sum(float(w) for _, w in sums), 1.0))

    base = nll(unit)
    single = {}
    for g in GROUPS:
        L, H = shapes[g]
        single[g] = np.zeros((L, H))
        for layer in range(L):
            for h in range(H):
                mask = dict(unit, **{g: unit[g].at[layer, h].set(0.0)})
                single[g][layer, h] = nll(mask) - base
    grads = [grad_fn(unit, state, b) for b in dev]
    raw = {g: np.mean([np.abs(np.asarray(gr[g])) for gr in grads], 0) for g in GROUPS}
    norm = {g: raw[g] / np.maximum(np.linalg.norm(raw[g], axis=1, keepdims=True), 1e-20) for g in GROUPS}

    order = sorted(((float(norm[g][l, h]), g, l, h) for g in GROUPS for l in range(shapes[g][0])
                    for h in range(shapes[g][1])))
    total = len(order)

    def pruned(heads) -> dict:
        mask = {g: np.ones(shapes[g], np.float32) for g in GROUPS}
        for _, g, l, h in heads:
            mask[g][l, h] = 0.0
        return {g: jnp.asarray(m) for g, m in mask.items()}

    curve = [nll(pruned(order[:int(round(f * total))])) for f in FRACTIONS]
    group_curves = {}
    for g in GROUPS:
        mine = [o for o in order if o[1] == g]
        group_curves[g] = [nll(pruned(mine[:int(round(f * len(mine)))])) for f in FRACTIONS]
    return {"base": base, "single": single, "raw": raw, "norm": norm, "curve": curve, "group_curves": group_curves}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--minutes", type=float, default=12.0, help="training budget per seed")
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--eval_batches", type=int, default=8, help="validation batches for the NLL measurements")
    ap.add_argument("--split_examples", type=int, default=500, help="test sentences decoded for the final BLEU")
    ap.add_argument("--quick", action="store_true", help="tiny sizes and a few steps (tests)")
    ap.add_argument("--out", default=OUT)
    a = ap.parse_args(argv)
    if a.quick:
        a.seeds, a.eval_batches = 1, min(a.eval_batches, 1)
    for name in ("seeds", "eval_batches", "steps", "split_examples"):
        if getattr(a, name) < 1:
            raise SystemExit(f"--{name}={getattr(a, name)}; expected a positive int")
    if not a.minutes > 0:
        raise SystemExit(f"--minutes={a.minutes}; expected a positive number")
    spec = SPEC + (":quick" if a.quick else f":steps={a.steps},minutes={a.minutes},split_examples={a.split_examples}")

    t0 = time.time()
    runs = []
    for seed in range(a.seeds):
        keep = KeepModel()
        result = engine.run(with_overrides(load(spec), {"seed": seed}), hooks=[keep])
        model = keep.setup.model(keep.params)
        batches = keep.task.eval_batches(keep.data, "validation")[:a.eval_batches]
        m = measure(model, keep.task, batches)
        m.update(bleu=result.get("test/bleu"), steps=result["step"], val_nll=result.get("validation/nll"))
        runs.append(m)
        print(f"seed {seed}: {m['steps']} steps, test BLEU {m['bleu']}, NLL {m['base']:.3f}; "
              f"{time.time() - t0:.0f}s", flush=True)
    config = load(spec)
    L = {g: runs[0]["single"][g].shape[0] for g in GROUPS}
    H = runs[0]["single"]["cross"].shape[1]

    r = Report(a.out, "Which heads matter? Michel et al. (2019) on the translation model, 8 heads per layer")
    r.text(f"""
{environment_line()} Total {(time.time() - t0) / 60:.1f} min.

`python scripts/repro_head_importance.py --seeds {a.seeds} --minutes {a.minutes} --steps {a.steps}
--eval_batches {a.eval_batches} --split_examples {a.split_examples}{' --quick' if a.quick else ''}`

**Protocol.** `configs/repro_head_importance.py`: Spanish → English Bible translation, d_model
{config.model.d_model}, {config.model.num_encoder_layers}+{config.model.num_decoder_layers} layers, {H} heads
per layer (head width {config.model.d_model // H}), pre-LN with QK-LayerNorm; training stops at
{config.train.num_steps} steps or {config.train.max_minutes} minutes, whichever first; seeds 0..{a.seeds - 1}.
Measurements are the teacher-forced validation NLL (nats per target token) on the first {a.eval_batches}
validation batches, with the head mask ξ (`models.Interventions(head_mask=...)`) multiplying each head's output
before the output projection. **Not BLEU**: masked heads are not threaded into KV-cache decoding, and a
decoded BLEU set per masked head is too slow on 2 CPU cores; BLEU of the unmasked model is the engine's
final test evaluation. Importance I_h = mean over batches of |∂NLL/∂ξ_h| at ξ = 1, normalised per layer (l2),
as in Michel et al.; pruning removes the heads with the lowest normalised importance first.
""")
    r.section("What the paper reports")
    r.text(PAPER)
    r.section("Trained models")
    r.table(["seed", "steps", f"test BLEU ({config.eval.split_examples} sentences)", "validation NLL (measured batches)"],
            [[i, m["steps"], m["bleu"], m["base"]] for i, m in enumerate(runs)], csv_name="models.csv")

    r.section("Masking one head at a time: NLL increase (mean over seeds)")
    rows, csv_rows = [], []
    for g in GROUPS:
        stack = np.stack([m["single"][g] for m in runs])  # [seeds, L, H]
        imp = np.stack([m["norm"][g] for m in runs])
        for layer in range(L[g]):
            rows.append([g, layer] + [float(x) for x in stack[:, layer].mean(0)])
            for h in range(H):
                for s in range(len(runs)):
                    csv_rows.append([s, g, layer, h, float(stack[s, layer, h]), float(runs[s]["raw"][g][layer, h]),
                                     float(imp[s, layer, h])])
    r.text(markdown_table(["group", "layer"] + [f"h{h}" for h in range(H)], rows, digits=2))
    write_csv(os.path.join(a.out, "per_head.csv"),
              ["seed", "group", "layer", "head", "nll_increase_masked_alone", "importance_raw", "importance_norm"],
              csv_rows)
    r.text("Per head and seed (NLL increase, raw and normalised importance): [per_head.csv](per_head.csv).")

    r.section("Per group")
    group_rows = []
    for g in GROUPS:
        inc = [float(m["single"][g].mean()) for m in runs]
        worst = [float(m["single"][g].max()) for m in runs]
        frac_small = [float(np.mean(m["single"][g] < 0.01)) for m in runs]
        half = FRACTIONS.index(0.5)
        at_half = [m["group_curves"][g][half] - m["base"] for m in runs]
        group_rows.append([g, mean_std(inc), mean_std(worst), mean_std(frac_small), mean_std(at_half)])
    r.table(["group", "mean NLL increase, one head masked", "largest single-head increase",
             "fraction of heads with increase < 0.01", "NLL increase with 50% of the group's heads pruned"],
            group_rows, csv_name="groups.csv")

    r.section("Progressive pruning (by normalised importance)")
    curve_rows = []
    for i, f in enumerate(FRACTIONS):
        curve_rows.append([f, mean_std([m["curve"][i] for m in runs])]
                          + [mean_std([m["group_curves"][g][i] for m in runs]) for g in GROUPS])
    r.table(["fraction pruned", "all heads: NLL", "encoder_self only", "decoder_self only", "cross only"],
            curve_rows, csv_name="pruning.csv")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(FRACTIONS, np.mean([m["curve"] for m in runs], 0), "k-o", label="all heads")
    for g in GROUPS:
        ax.plot(FRACTIONS, np.mean([m["group_curves"][g] for m in runs], 0), "-o", label=f"{g} only", ms=3)
    ax.set_xlabel("fraction of heads pruned")
    ax.set_ylabel("validation NLL")
    ax.legend(fontsize=7)
    r.figure(fig, "pruning", f"Validation NLL vs fraction of heads pruned by importance (mean over {a.seeds} seed(s)).")
    r.write()
    print(f"wrote {a.out}/README.md")


if __name__ == "__main__":
    main()
