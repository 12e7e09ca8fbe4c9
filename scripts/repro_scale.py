"""Reproduction 2: why attention logits are scaled by 1/sqrt(d_k) (Vaswani et al. 2017, section 3.2.1).

At initialization, queries and keys have unit-variance entries, so q.k has variance d_k. For d_k in
{16, 64, 256} and logit scales 1, 1/sqrt(d_k) and 1/d_k this measures, through ``attention.attention``
(reference backend, with its statistics and full weights) and ``jax.grad``:

- the standard deviation of the scaled logits,
- the mean of each query's largest attention weight and the mean entropy against log(num keys),
- how many keys receive gradient: per query, the keys whose gradient norm dL/dk_j is at least 1% of the
  largest one, and the effective number exp(H(g)) of the normalized gradient norms,
- the root-mean-square gradient reaching the queries.

Then a short training comparison: the same small decoder on multi-query associative recall with the three
scales (``model.attention_scale``), loss and accuracy over training.

    python scripts/repro_scale.py            # full: a few minutes on 2 CPU cores, writes docs/results/scale/
    python scripts/repro_scale.py --quick    # seconds; for tests
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import sys
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

import attention
from _report import Report, environment_line, plt

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCALES = ("1", "1/sqrt(d_k)", "1/d_k")


def scale_value(name: str, d_k: int) -> float:
    """The logit scale called ``name`` (one of SCALES) for head dim ``d_k``."""
    if name == "1":
        return 1.0
    if name == "1/sqrt(d_k)":
        return 1.0 / math.sqrt(d_k)
    if name == "1/d_k":
        return 1.0 / d_k
    raise ValueError(f"scale_value: unknown scale {name!r}; expected one of {SCALES}")


def init_statistics(d_k: int, scale: float, *, num_queries: int, num_keys: int, num_heads: int,
                    seed: int) -> dict[str, float]:
    """Attention statistics for unit-variance random q, k, v: what a freshly initialized layer sees.

    Every query is its own example (q: [N, 1, H, d_k], k, v: [N, Tk, H, d_k]) so gradients stay per query.
    """
    out = _init_statistics(jax.random.PRNGKey(seed), jnp.float32(scale), num_queries, num_keys, num_heads, d_k)
    return {k: float(v) for k, v in out.items()}


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5))
def _init_statistics(key, scale, num_queries: int, num_keys: int, num_heads: int, d_k: int) -> dict:
    kq, kk, kv, kg = jax.random.split(key, 4)
    q = jax.random.normal(kq, (num_queries, 1, num_heads, d_k), jnp.float32)
    k = jax.random.normal(kk, (num_queries, num_keys, num_heads, d_k), jnp.float32)
    v = jax.random.normal(kv, (num_queries, num_keys, num_heads, d_k), jnp.float32)
    g = jax.random.normal(kg, (num_queries, 1, num_heads, d_k), jnp.float32)

    _, stats = attention.attention(q, k, v, implementation="reference", scale=scale, return_stats=True)
    logits_NxHxK = jnp.einsum("nqhd,nkhd->nhk", q, k) * scale

    def loss(q_, k_):
        return jnp.sum(attention.attention(q_, k_, v, implementation="reference", scale=scale) * g)

    dq, dk = jax.grad(loss, argnums=(0, 1))(q, k)
    gk_NxKxH = jnp.linalg.norm(dk, axis=-1)
    gk_max = jnp.max(gk_NxKxH, axis=1, keepdims=True)
    receiving = jnp.sum(gk_NxKxH >= 0.01 * gk_max, axis=1)  # [N, H]
    p = gk_NxKxH / jnp.maximum(jnp.sum(gk_NxKxH, axis=1, keepdims=True), 1e-30)
    effective = jnp.exp(-jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=1))
    weights_NxHx1xK = stats.weights
    return {
        "logit_std": jnp.std(logits_NxHxK),
        "max_weight": jnp.mean(jnp.max(weights_NxHx1xK, axis=-1)),
        "entropy": jnp.mean(stats.entropy),
        "keys_with_grad": jnp.mean(receiving),
        "effective_keys": jnp.mean(effective),
        "q_grad_rms": jnp.sqrt(jnp.mean(dq ** 2)),
    }


def run_init(report: Report, d_ks: Sequence[int], num_queries: int, num_keys: int, seed: int) -> list[dict]:
    rows = []
    for d_k in d_ks:
        for name in SCALES:
            s = init_statistics(d_k, scale_value(name, d_k), num_queries=num_queries, num_keys=num_keys,
                                num_heads=4, seed=seed)
            rows.append({"d_k": d_k, "scale": name, **s})
    report.section("At initialization")
    report.text(
        f"Random unit-variance q, k, v (what LeCun-initialized projections of LayerNorm'd inputs give), "
        f"{num_keys} keys per query, {num_queries} queries x 4 heads per cell, reference backend. "
        f"Uniform attention has entropy log({num_keys}) = {math.log(num_keys):.3f} nats and max weight "
        f"1/{num_keys} = {1 / num_keys:.4f}. 'Keys with gradient': keys whose dL/dk_j norm is at least 1% of "
        "the query's largest, for L = sum(out * g) with random g; 'effective keys': exp of the entropy of the "
        "normalized gradient norms."
    )
    report.table(
        ["d_k", "scale", "logit std", "mean max weight", "entropy (nats)", "keys with gradient",
         "effective keys", "dL/dq RMS"],
        [[r["d_k"], r["scale"], r["logit_std"], r["max_weight"], r["entropy"], r["keys_with_grad"],
          r["effective_keys"], r["q_grad_rms"]] for r in rows],
        csv_name="init.csv",
    )
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    for name, marker in zip(SCALES, ("o", "s", "^")):
        sub = [r for r in rows if r["scale"] == name]
        x = [r["d_k"] for r in sub]
        axes[0].plot(x, [r["logit_std"] for r in sub], marker=marker, label=f"scale {name}")
        axes[1].plot(x, [r["max_weight"] for r in sub], marker=marker, label=f"scale {name}")
        axes[2].plot(x, [r["keys_with_grad"] for r in sub], marker=marker, label=f"scale {name}")
    for ax, title in zip(axes, ("logit std", "mean max attention weight", f"keys with gradient (of {num_keys})")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("d_k")
        ax.set_title(title, fontsize=9)
    axes[0].set_yscale("log")
    axes[2].set_yscale("log")
    axes[0].legend(fontsize=7)
    report.figure(fig, "init", "Attention at initialization vs d_k for three logit scales.")
    return rows


def verdict_init(rows: list[dict], num_keys: int) -> str:
    """What the init measurements say, computed from them."""
    by = {(r["d_k"], r["scale"]): r for r in rows}
    d_ks = sorted({r["d_k"] for r in rows})
    lines = []
    std_sqrt = [by[(d, "1/sqrt(d_k)")]["logit_std"] for d in d_ks]
    std_one = [by[(d, "1")]["logit_std"] for d in d_ks]
    lines.append(
        f"- With 1/sqrt(d_k) the logit std stays at {min(std_sqrt):.2f}-{max(std_sqrt):.2f} for every d_k; "
        f"unscaled it grows like sqrt(d_k) ({', '.join(f'{s:.1f}' for s in std_one)} for d_k = "
        f"{', '.join(map(str, d_ks))})."
    )
    big = d_ks[-1]
    one, sq, lin = by[(big, "1")], by[(big, "1/sqrt(d_k)")], by[(big, "1/d_k")]
    lines.append(
        f"- At d_k = {big}, unscaled attention is nearly one-hot (mean max weight {one['max_weight']:.2f}, "
        f"{one['keys_with_grad']:.1f} of {num_keys} keys get gradient, dL/dq RMS {one['q_grad_rms']:.3g}); "
        f"1/sqrt(d_k) keeps {sq['keys_with_grad']:.0f} keys in play (max weight {sq['max_weight']:.3f}); "
        f"1/d_k is almost uniform (entropy {lin['entropy']:.3f} of {math.log(num_keys):.3f}, max weight "
        f"{lin['max_weight']:.4f}) and the gradient reaching q shrinks to RMS {lin['q_grad_rms']:.3g} "
        f"(1/sqrt(d_k): {sq['q_grad_rms']:.3g})."
    )
    return "\n".join(lines)


def run_training(report: Report, quick: bool, seed: int) -> Optional[list[dict]]:
    """Short training comparison of the three scales on MQAR (``configs/repro_scale.py``, ``engine.run``)."""
    from _runs import config_path, load, run_point

    spec = config_path("repro_scale") + f":seed={seed}" + (",quick" if quick else "")
    base = load(spec)
    d_k, steps, d_model, v_dim = base.model.qk_dim, base.train.num_steps, base.model.d_model, base.model.v_dim
    layers, num_pairs = base.model.num_decoder_layers, base.data.mqar_num_kv_pairs
    seq_len, vocab, batch = base.data.seq_len, base.data.vocab_size, base.data.batch_size
    results = []
    for name in SCALES:
        hist = run_point(spec, {"model.attention_scale": scale_value(name, d_k)})
        results.append({"scale": name, "history": hist})
    report.section("Short training comparison")
    report.text(
        f"A {layers}-layer pre-LN decoder (d_model {d_model}, 2 heads, "
        f"d_k = {d_k}, d_v = {v_dim}) on multi-query "
        f"associative recall ({num_pairs} key-value pairs, sequence {seq_len}, vocabulary "
        f"{vocab}), AdamW lr 1e-3 with warmup and cosine decay, {steps} steps, batch "
        f"{batch}, seed {seed} (config `configs/repro_scale.py`, each run through `engine.run`); only "
        "``model.attention_scale`` changes. Accuracy is on the "
        "answer positions of held-out batches."
    )
    report.table(
        ["scale", "final train loss", "eval loss", "eval accuracy", "max logit at end", "mean entropy at end"],
        [[r["scale"], r["history"]["loss"][-1], r["history"]["eval_loss"], r["history"]["eval_accuracy"],
          float(np.max(r["history"]["max_logit"][-1])), float(np.mean(r["history"]["entropy"][-1]))]
         for r in results],
        csv_name="training.csv",
    )
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for r in results:
        h = r["history"]
        axes[0].plot(h["step"], h["loss"], label=f"scale {r['scale']}")
        axes[1].plot(h["stats_step"], [float(np.mean(e)) for e in h["entropy"]], label=f"scale {r['scale']}")
    axes[0].set_title("train loss", fontsize=9)
    axes[1].set_title("mean attention entropy (nats)", fontsize=9)
    for ax in axes:
        ax.set_xlabel("step")
    axes[0].legend(fontsize=7)
    report.figure(fig, "training", f"Training with the three logit scales at d_k = {d_k}.")
    return results


def main(argv: Optional[Sequence[str]] = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, runs in seconds (for tests)")
    parser.add_argument("--out", default=None, help="report folder (default docs/results/scale, or "
                        "runs/repro/scale_quick with --quick)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip_training", action="store_true", help="only the initialization measurements")
    args = parser.parse_args(argv)
    out = args.out or os.path.join(REPO, "runs/repro/scale_quick" if args.quick else "docs/results/scale")
    report = Report(out, "Why 1/sqrt(d_k): attention logit scale at initialization and in training")
    report.text(environment_line() + (" Quick mode (tiny sizes)." if args.quick else ""))
    num_keys = 32 if args.quick else 128
    rows = run_init(report, (16, 64, 256), num_queries=16 if args.quick else 512, num_keys=num_keys, seed=args.seed)
    report.section("What the initialization data say")
    report.text(verdict_init(rows, num_keys))
    if not args.skip_training:
        run_training(report, args.quick, args.seed)
    path = report.write()
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
