"""Per-head attention scores (previous-token, prefix-matching) and the hook that records them over training.

Scores are functions over attention weights [B, H, Tq, Tk] (rows queries, columns keys), as in
TransformerLens's ``head_detector``; ``HeadScores`` computes them for every decoder head of a run at the
evaluation steps, from the ``reference`` backend's weights, and keeps a head-masked loss probe for ablations.
"""
from __future__ import annotations

import math
import re
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

import models
from engine.hooks import Hook
from engine.state import reference_graphdef
from engine.steps import to_device

from analysis.curves import half_final_step

Head = tuple[int, int]  # (layer, head)
HEAD_SUMMARY = ["layer", "head"] + [f"{score} {x}" for score in ("previous-token", "prefix-matching")  # the columns
                                   for x in ("score (first)", "score (end)", "half-final step")]  # of head_summaries


def previous_token_score(weights: jax.Array, valid: jax.Array) -> jax.Array:
    """Mean attention weight from each valid query position t >= 1 to key t - 1, per head.

    weights: [B, H, T, T]; valid: [B, T] bool, the real query positions. Returns [H] (NaN when no query
    t >= 1 is valid)."""
    prev_BxHxT1 = jnp.diagonal(weights, offset=-1, axis1=2, axis2=3)  # [B, H, T - 1]: weight of t on t - 1
    rows_Bx1xT1 = valid[:, None, 1:].astype(weights.dtype)
    return jnp.sum(prev_BxHxT1 * rows_Bx1xT1, axis=(0, 2)) / jnp.sum(rows_Bx1xT1, axis=(0, 2))


def prefix_matching_score(weights: jax.Array, tokens: jax.Array, valid: jax.Array) -> jax.Array:
    """Mean attention mass, per head, that a query t puts on the keys j + 1 right after the earlier
    occurrences j < t of its own token (tokens[j] == tokens[t]), over the valid queries whose token occurred
    before (Olsson et al. 2022's prefix-matching score).

    weights: [B, H, T, T]; tokens: [B, T] int; valid: [B, T] bool. Returns [H] (NaN when no valid query
    repeats a token)."""
    T = tokens.shape[1]
    earlier_TxT = jnp.tril(jnp.ones((T, T), bool), k=-1)  # [t, j]: j < t
    match_BxTxT = (tokens[:, :, None] == tokens[:, None, :]) & earlier_TxT
    after_BxTxT = jnp.pad(match_BxTxT[:, :, :-1], ((0, 0), (0, 0), (1, 0)))  # key j + 1 of every matched j
    rows_Bx1xT = (jnp.any(match_BxTxT, axis=-1) & valid)[:, None].astype(weights.dtype)
    mass_BxHxT = jnp.sum(weights * after_BxTxT[:, None].astype(weights.dtype), axis=-1)
    return jnp.sum(mass_BxHxT * rows_Bx1xT, axis=(0, 2)) / jnp.sum(rows_Bx1xT, axis=(0, 2))


class HeadScores(Hook):
    """Records the previous-token and prefix-matching scores of every decoder head ([L, H] each, in ``prev``
    and ``prefix``, with ``steps``) on the run's held-out batches, every ``every`` steps and after the last.

    When training ends, ``position_loss(head_mask)`` gives the held-out loss per position [T] of the trained
    model with its decoder self-attention heads scaled by ``head_mask`` [L, H]."""

    def __init__(self, every: int):
        if int(every) < 1:
            raise ValueError(f"HeadScores: every={every!r}; expected a positive number of steps")
        self.every = int(every)
        self.steps: list[int] = []
        self.prev: list[np.ndarray] = []
        self.prefix: list[np.ndarray] = []
        self.position_loss: Callable[[np.ndarray], np.ndarray] | None = None

    def start(self, run) -> None:
        batches = run.evaluator.batches(run.task.eval_split(False))
        self.batch = to_device({k: np.concatenate([b[k] for b in batches]) for k in batches[0]}, run.setup.mesh)
        graphdef, rest, task = reference_graphdef(run.setup), run.setup.rest, run.task

        def scores(params, batch):
            _, stats = task.forward(nnx.merge(graphdef, params, rest), batch, deterministic=True, return_stats=True)
            valid_BxT = task.real_targets(batch) > 0
            layers = stats["decoder_self"]
            return (jnp.stack([previous_token_score(s.weights, valid_BxT) for s in layers]),
                    jnp.stack([prefix_matching_score(s.weights, batch["inputs"], valid_BxT) for s in layers]))

        self._scores = jax.jit(scores)

    def after_step(self, run) -> None:
        if run.step % self.every == 0 or run.step == run.num_steps:
            prev, prefix = jax.device_get(self._scores(run.state["params"], self.batch))
            self.steps.append(int(run.step))
            self.prev.append(np.asarray(prev, np.float64))
            self.prefix.append(np.asarray(prefix, np.float64))

    def end(self, run) -> None:
        setup, task, params = run.setup, run.task, run.state["params"]

        def position_loss(params, batch, mask_LxH):
            logits = task.forward(setup.model(params), batch, deterministic=True,
                                  interventions=models.Interventions(head_mask={"decoder_self": mask_LxH}))
            real_BxT = task.real_targets(batch)
            return jnp.sum(task.token_nll(logits, batch) * real_BxT, axis=0) / jnp.sum(real_BxT, axis=0)

        fn = jax.jit(position_loss)
        self.position_loss = lambda mask: np.asarray(
            jax.device_get(fn(params, self.batch, jnp.asarray(mask, jnp.float32))), np.float64)


def icl_score(position_loss: np.ndarray, early: tuple[int, int], late: tuple[int, int]) -> float:
    """Olsson et al.'s in-context-learning score: mean loss over positions [late) minus mean loss over
    positions [early) (NaN positions ignored). position_loss: [T] held-out loss per sequence position."""
    return float(np.nanmean(position_loss[late[0]:late[1]]) - np.nanmean(position_loss[early[0]:early[1]]))


def icl_windows(T: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The early [T/8, T/4) and late [T - T/4, T) position windows of ``icl_score`` for sequences of length T:
    inside the first block and in the repeats of the induction data."""
    return (T // 8, T // 4), (T - T // 4, T)


def ablation_heads(prev: np.ndarray, prefix: np.ndarray) -> list[tuple[str, tuple[Head, ...]]]:
    """The (condition, heads masked together) of an induction ablation, from final scores prev, prefix [L, H]:
    no mask; the top prefix-matching head, the lowest prefix-matching head of its layer (control), the top
    k = 2..H heads by prefix-matching score; the top previous-token head of layer 0, the lowest one
    (control), the top k = 2..H of layer 0 by previous-token score."""
    if prev.shape != prefix.shape or prev.ndim != 2:
        raise ValueError(f"ablation_heads: scores of shapes {prev.shape} and {prefix.shape}; expected two [L, H]")
    H = prefix.shape[1]
    by_prefix = [divmod(int(i), H) for i in np.argsort(-prefix, axis=None, kind="stable")]  # highest first
    by_prev = [(0, int(h)) for h in np.argsort(-prev[0], kind="stable")]
    top_layer = by_prefix[0][0]
    return ([("no mask", ()), ("top prefix-matching head", tuple(by_prefix[:1])),
             ("lowest prefix-matching head of that layer", ((top_layer, int(np.nanargmin(prefix[top_layer]))),))]
            + [(f"top {k} prefix-matching heads", tuple(by_prefix[:k])) for k in range(2, H + 1)]
            + [("top previous-token head of layer 0", tuple(by_prev[:1])),
               ("lowest previous-token head of layer 0", tuple(by_prev[-1:]))]
            + [(f"top {k} previous-token heads of layer 0", tuple(by_prev[:k])) for k in range(2, H + 1)])


def ablate(hook: HeadScores, early: tuple[int, int], late: tuple[int, int]) -> list[tuple[str, tuple[Head, ...],
                                                                                       float]]:
    """The ICL score of the trained model in ``hook`` (after ``engine.run``) with each group of ``ablation_heads``
    masked, from its last scores: (condition, heads, ICL score) triples, the unmasked one first."""
    prev, prefix = np.stack(hook.prev), np.stack(hook.prefix)
    return [(condition, heads, icl_score(hook.position_loss(head_mask(prev.shape[1:], heads)), early, late))
            for condition, heads in ablation_heads(prev[-1], prefix[-1])]


def score_rows(prev: np.ndarray, prefix: np.ndarray) -> list[tuple[int, int, int, float, float]]:
    """Scores over training (prev, prefix [steps, L, H]) as (step index, layer, head, previous-token score,
    prefix-matching score) rows, steps first."""
    return [(i, layer, head, float(prev[i, layer, head]), float(prefix[i, layer, head]))
            for i, layer, head in np.ndindex(*prev.shape)]


def score_arrays(rows: Sequence[tuple[int, int, int, float, float]]) -> tuple[np.ndarray, np.ndarray]:
    """The inverse of ``score_rows``: (prev, prefix [steps, L, H]) from (step index, layer, head, previous-token
    score, prefix-matching score) rows."""
    shape = tuple(max(r[k] for r in rows) + 1 for k in range(3))
    prev, prefix = np.zeros(shape), np.zeros(shape)
    for i, layer, head, p, q in rows:
        prev[i, layer, head], prefix[i, layer, head] = p, q
    return prev, prefix


def head_mask(shape: tuple[int, int], heads: Sequence[Head]) -> np.ndarray:
    """A [L, H] float32 mask of ones with ``heads`` ((layer, head) pairs) zeroed."""
    mask = np.ones(shape, np.float32)
    for head in heads:
        mask[head] = 0.0
    return mask


def head_label(heads: Sequence[Head]) -> str:
    """'L1H3+L1H0' for heads ((1, 3), (1, 0)); '—' for none."""
    return "+".join(f"L{layer}H{head}" for layer, head in heads) or "—"


def parse_heads(label: str) -> tuple[Head, ...]:
    """The heads of a ``head_label``: ((1, 3), (1, 0)) for 'L1H3+L1H0'; () for '—'."""
    return tuple((int(layer), int(head)) for layer, head in re.findall(r"L(\d+)H(\d+)", label))


def top_heads(prev: np.ndarray, prefix: np.ndarray) -> tuple[Head, Head]:
    """From final scores prev, prefix [L, H]: the (layer, head) with the highest prefix-matching score, and
    layer 0's head with the highest previous-token score."""
    top = tuple(int(i) for i in np.unravel_index(np.nanargmax(prefix), prefix.shape))
    return (top[0], top[1]), (0, int(np.nanargmax(prev[0])))


def share_lost(ablation: Sequence[tuple[str, Sequence[Head], float]], condition: str) -> float:
    """1 - (ICL score with ``condition``'s heads masked) / (unmasked ICL score) over an ablation's (condition,
    heads, ICL score) triples, the unmasked one first: 0 = masking changes nothing, 1 = the context no longer
    helps; NaN when the unmasked score is not negative (nothing learned in context)."""
    base = ablation[0][2]
    icl = next((s for c, _, s in ablation if c == condition), None)
    if icl is None:
        raise ValueError(f"share_lost: condition {condition!r}; expected one of {[c for c, _, _ in ablation]}")
    return 1.0 - icl / base if base < 0 else math.nan


def formation_lags(steps: Sequence[int], scores: np.ndarray, phase: Optional[int],
                   threshold: float) -> list[Optional[int]]:
    """Half-final step minus ``phase`` of every head whose last score (``scores`` [steps, H]) is >= ``threshold``:
    None for a head whose score did not rise; no lag at all when the run had no phase change."""
    if phase is None:
        return []
    halves = [half_final_step(steps, scores[:, h]) for h in np.flatnonzero(scores[-1] >= threshold)]
    return [None if t is None else t - phase for t in halves]


def induction_lags(steps: Sequence[int], prev: np.ndarray, prefix: np.ndarray, phase: Optional[int],
                   threshold: float) -> tuple[list[Optional[int]], list[Optional[int]]]:
    """``formation_lags`` of layer 1's prefix-matching (induction) heads and of layer 0's previous-token heads, from
    scores over training prev, prefix [steps, L, H] with L >= 2."""
    return formation_lags(steps, prefix[:, 1], phase, threshold), formation_lags(steps, prev[:, 0], phase, threshold)


def head_summaries(steps: Sequence[int], prev: np.ndarray, prefix: np.ndarray) -> list[list]:
    """Per head, layer first: [layer, head, then for the previous-token and the prefix-matching score its first value,
    last value and ``half_final_step``] from scores over training prev, prefix [steps, L, H]."""
    return [[layer, head] + [x for s in (prev, prefix) for x in (s[0, layer, head], s[-1, layer, head],
                                                                 half_final_step(steps, s[:, layer, head]))]
            for layer, head in np.ndindex(*prev.shape[1:])]

