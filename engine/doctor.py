"""The attention doctor: the practitioner's checklist for attention that misbehaves, run on a model and real batches.

``diagnose(model, batches)`` runs every check on a model of any task (``engine.tasks``: translation, lm,
classification; and ``MaskedLMTask``, encoder-only masked LMs such as BERT; the task describes its batches) and returns ``Finding`` values (ok / warn / fail, with what to try);
``write_report`` writes ``report.md`` and ``report.json``; ``run_diagnosis`` does both. Thresholds, findings and
the report live in ``engine.doctor_report`` (re-exported here). The checks:

- ``padding_weight``: the largest attention weight a real query gives a padding key (group, layer).
- ``padding_invariance``: the largest change of the real positions' logits when the padding tokens are replaced
  by random tokens ("tokens") or the amount of padding changes ("amount"), relative to the largest logit.
- ``causal_weight``: the largest weight a decoder self-attention query gives a later key (group, layer).
- ``causal_leakage``: the largest change of earlier logits when later decoder tokens are replaced (relative;
  tasks with a causal side only).
- ``score_std``: per head, the mean over query rows of the standard deviation of the scaled pre-softmax scores
  over visible keys (the row mean is reported beside it). A high one is flagged only when every layer of the
  model is lifted (a wrong scale lifts them all; learned one-hot attention sharpens some) or when the softmax
  is saturated past float32 (``score_std_status``).
- ``entropy``: per head, the mean over query rows of entropy / log(number of visible keys); 1 is uniform.
  This and the two next per-head symptoms flag a head only when its layer's median is past the bound too
  (``layer_status``): a fault moves a whole layer, one specialised head does not.
- ``special_mass``: per head, the mean attention mass on special keys (BOS, EOS, ``special_ids``,
  punctuation-only pieces; PAD is ``padding_weight``'s), over rows that see enough non-special keys.
- ``sink``: per head, the mean attention mass on the first key of each query's own sequence (key 0).
- ``head_permutation``: permuting the heads of every attention layer's projections (Q, K, V rows and the output
  projection's input) must leave the logits unchanged and permute each layer's per-head statistics the same way.
- ``scale``: each attention module's logit scale against the standard 1/sqrt(d_k) (scale x sqrt(d_k); warn
  only, naming the direction: a missing or too-large scale, or a too-small one).
- ``two_token_padding`` / ``two_token_causal``: through each attention module (its own backend, scale and
  projections), two keys of which one is masked, by padding or by the causal mask, the masked one made the
  better match: the output must be the other key's value.

A model whose attention kind samples (``hard``) is checked through its softmax twin (``deterministic_model``)
everywhere but the two-token test. ``docs/results/diagnose/`` runs the doctor on healthy and planted-fault
checkpoints (``python -m studies train diagnose``) and shows the data behind each threshold.

Thresholds are the fields of ``default_thresholds()`` (mounted as ``config.doctor``), each justified there.
"""
from __future__ import annotations

import functools
import math
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional, Union

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from flax import nnx

import attention as attn
import models
from engine import logs
from engine.doctor_report import (Finding, default_thresholds, make_finding, rule_above, status_above, summary_line,
                                  write_report)
from engine.tasks import TASKS, Side, Task, task_of

GROUPS = ("encoder_self", "decoder_self", "cross", "pool")  # the report's order


class MaskedLMTask(Task):
    """The batch description of an encoder-only masked-LM model (``models.EncoderOnly`` with its LM head,
    BERT-style), as the doctor reads it: inputs [B, S] with optional inputs_segmentation / inputs_position;
    logits [B, S, V], one row per input position; encoder self-attention only, no causal side. No training
    task trains it (``engine.tasks``); the doctor and pretrained BERT checkpoints use it."""

    name = "mlm"
    groups = ("encoder_self",)
    model_class = models.EncoderOnly
    sides = (Side("source", "inputs", "inputs_segmentation", "inputs_position"),)
    group_sides = {"encoder_self": ("source", "source")}
    logits_side = "source"

    def forward(self, model, batch, *, deterministic, return_stats=False, interventions=None):
        return model(batch["inputs"], inputs_segmentation=batch.get("inputs_segmentation"),
                     inputs_position=batch.get("inputs_position"), deterministic=deterministic,
                     return_stats=return_stats, interventions=interventions)


# ------------------------------------------------------------------------------------------------ batches
def resolve_task(model: nnx.Module, task: Union[Task, str, None] = None) -> Task:
    """The ``Task`` whose batches ``model`` reads: ``task`` (a task or a task name, checked against the model's
    class) or, when None, the task that trains the model's class."""
    if isinstance(task, str):  # by name: two tasks may train the same model class
        known = {**TASKS, MaskedLMTask.name: MaskedLMTask}  # read now: tasks may be registered after import
        if task not in known:
            raise ValueError(f"diagnose: task={task!r}; expected one of {tuple(known)}")
        task = known[task](None)
    if task is None and isinstance(model, models.EncoderOnly):
        task = MaskedLMTask(None)
    inferred = task_of(model) if task is None else task
    if isinstance(model, models.EncoderOnly) and model.lm_dense is None:
        raise ValueError("diagnose: this EncoderOnly model has no masked-LM head (lm_head=False); the doctor "
                         "compares per-position logits, so it needs one")
    if not isinstance(model, inferred.model_class):
        raise ValueError(f"diagnose: task {inferred.name!r} trains a {inferred.model_class.__name__}; got a "
                         f"{type(model).__name__}")
    return inferred


def complete_batch(batch: Mapping[str, Any], task: Task, cfg: models.TransformerConfig, rows: int
                   ) -> dict[str, np.ndarray]:
    """``task.complete_batch`` with the doctor's name on its error."""
    try:
        return task.complete_batch(batch, cfg, rows)
    except ValueError as e:
        raise ValueError(f"diagnose: {e}") from None


# The doctor runs each compiled function a few times on small batches: compile time dominates, so on CPU
# XLA's backend optimizations are turned down (about 3x faster compiles; same results up to float32 rounding).
_FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


@functools.cache
def _jitted(fn, static: tuple[str, ...]):
    options = _FAST_COMPILE if jax.default_backend() == "cpu" else None
    return jax.jit(fn, static_argnames=static, compiler_options=options)


def _model_call(graphdef, state, batch, *, task: Task):
    return task.forward(nnx.merge(graphdef, state), batch, deterministic=True, return_stats=True)


def _forward(model: nnx.Module, batch: Mapping[str, Any], task: Task) -> tuple[np.ndarray, dict]:
    """Deterministic (logits [B, T, V], group -> [AttentionStats per layer]) on the host, compiled once per shape
    (every call asks for the statistics, so each shape compiles once)."""
    graphdef, state = nnx.split(model)
    b = {k: jnp.asarray(v) for k, v in batch.items() if k != "loss_mask"}
    logits, stats = _jitted(_model_call, ("graphdef", "task"))(graphdef, state, b, task=task)
    return np.asarray(logits), jax.tree.map(np.asarray, jax.device_get(stats))


def reference_model(model: nnx.Module) -> nnx.Module:
    """The same model on the ``reference`` attention backend (full weights in its stats), sharing the state."""
    modules = [m for _, m in nnx.iter_modules(model) if isinstance(m, models.MultiHeadAttention)]
    if all(m.implementation == "reference" and not m.backend_options for m in modules):
        return model
    ref = nnx.merge(*nnx.split(model))
    for _, m in nnx.iter_modules(ref):
        if isinstance(m, models.MultiHeadAttention):
            m.implementation, m.backend_options = "reference", ()
    return ref


def deterministic_model(model: nnx.Module) -> tuple[nnx.Module, str]:
    """(model, "") when its attention is deterministic; for a random kind without parameters of its own (``hard``:
    one key sampled per query, with the same noise for every call of a shape) the same weights with kind
    ``softmax`` (the distribution it samples from) and a note saying so. Permuting heads or changing the amount
    of padding moves the noise to other heads and positions, and sampled one-hot weights say nothing of a head's
    spread, so every check but the two-token test (which runs each module's own kind) reads this twin."""
    modules = [m for _, m in nnx.iter_modules(model) if isinstance(m, models.MultiHeadAttention)]
    random = sorted({m.kind for m in modules if attn.get_kind(m.kind).random})
    if not random:
        return model, ""
    with_params = [k for k in random if attn.get_kind(k).init is not None]
    if with_params:
        raise ValueError(f"diagnose: attention kind {with_params[0]!r} samples and has parameters of its own; the "
                         f"doctor's invariance checks need a deterministic twin of it")
    twin = nnx.merge(*nnx.split(model))
    for _, m in nnx.iter_modules(twin):
        if isinstance(m, models.MultiHeadAttention):
            m.kind, m.implementation, m.backend_options = "softmax", "reference", ()
    return twin, f"; kind {'/'.join(random)} samples: compared on its softmax twin"


def attention_maps(model: nnx.Module, batch: Mapping[str, Any], task: Union[Task, str, None] = None
                   ) -> dict[str, list[attn.AttentionStats]]:
    """Teacher-forced attention of ``batch`` on the reference backend: group -> per layer ``AttentionStats``
    with ``weights`` [B, H, Tq, Tk] (host numpy). ``task``: default the task that trains ``model``."""
    task = resolve_task(model, task)
    batch = complete_batch(batch, task, model.cfg, rows=len(np.asarray(batch[task.sides[0].tokens])))
    _, stats = _forward(reference_model(model), batch, task)
    return {g: layers for g, layers in stats.items() if layers}


def punctuation_ids(piece_labels: Sequence[str]) -> list[int]:
    """Ids of pieces made only of punctuation (after removing SentencePiece's word-boundary mark)."""
    out = []
    for i, piece in enumerate(piece_labels):
        text = piece.replace("\u2581", "").strip()
        if text and all(unicodedata.category(ch).startswith("P") for ch in text):
            out.append(i)
    return out


# ------------------------------------------------------------------------------------------------ checks
class _Accumulator:
    """Per (check, group, layer) sums over batches: head-wise means, maxima."""

    def __init__(self):
        self.sums: dict[tuple, np.ndarray] = {}
        self.counts: dict[tuple, np.ndarray] = {}
        self.maxima: dict[tuple, float] = {}

    def add_mean(self, key: tuple, values: np.ndarray, rows: np.ndarray) -> None:
        """values [B, H, Tq], rows [B, H, Tq] bool -> running per-head sum and count."""
        s = np.sum(np.where(rows, values, 0.0), axis=(0, 2))
        n = np.sum(rows, axis=(0, 2))
        self.sums[key] = self.sums.get(key, 0.0) + s
        self.counts[key] = self.counts.get(key, 0) + n

    def mean(self, key: tuple) -> tuple[np.ndarray, np.ndarray]:
        n = self.counts[key]
        return self.sums[key] / np.maximum(n, 1), n

    def add_max(self, key: tuple, value: float) -> None:
        self.maxima[key] = max(self.maxima.get(key, 0.0), float(value))


def _relative_change(a: np.ndarray, b: np.ndarray, where: np.ndarray) -> float:
    """max |a - b| / max |a| over positions ``where`` ([B, T] bool; a, b [B, T, V])."""
    if not where.any():
        return 0.0
    a, b = np.asarray(a, np.float64)[where], np.asarray(b, np.float64)[where]
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(a)), 1e-30))


def _random_tokens(rng: np.random.Generator, pool: np.ndarray, shape) -> np.ndarray:
    return rng.choice(pool, size=shape).astype(np.int32)


def _content_pool(batch: Mapping[str, np.ndarray], real: Mapping[str, np.ndarray], special: set[int],
                  task: Task) -> np.ndarray:
    """Non-special token ids seen at real positions of the batch (what the perturbations draw from)."""
    toks = [batch[s.tokens][real[s.name]] for s in task.sides]
    pool = np.unique(np.concatenate(toks))
    pool = pool[~np.isin(pool, list(special))]
    return pool if pool.size else np.unique(np.concatenate(toks))


def _padding_checks(model, batch, base, task: Task, cfg, th, rng, special) -> list[tuple[str, float]]:
    """(variant, relative change of the real positions' logits from ``base``) for "tokens" and "amount"."""
    real = task.real_positions(batch, cfg)
    pool = _content_pool(batch, real, special, task)
    scored = real[task.logits_side]
    results = []
    # tokens: every padding position (and, where the positions allow, a few extra padding columns) gets random ids.
    extra = int(th.extra_padding)
    can_extend = cfg.position != "learned" or max(batch[s.tokens].shape[1] for s in task.sides) + extra <= cfg.max_len
    if not can_extend:
        extra = 0
    changed = task.pad_batch(batch, extra, cfg) if extra else dict(batch)
    for side in task.sides:
        real_side = np.pad(real[side.name], ((0, 0), (0, extra)))
        noise = _random_tokens(rng, pool, changed[side.tokens].shape)
        changed[side.tokens] = np.where(real_side, changed[side.tokens], noise)
    out = _forward(model, changed, task)[0]
    T = base.shape[1]
    results.append(("tokens", _relative_change(base, out[:, :T], scored)))
    # amount: more padding columns, or (positions capped) fewer: drop trailing columns that are padding in every row.
    if can_extend:
        more = task.pad_batch(batch, max(int(th.extra_padding), 1), cfg)
        out = _forward(model, more, task)[0]
        results.append(("amount", _relative_change(base, out[:, :T], scored)))
    else:
        keep = {}
        for side in task.sides:
            used = np.nonzero(real[side.name].any(axis=0))[0]
            keep[side.name] = int(used.max()) + 1 if used.size else 1
        if all(keep[s.name] < batch[s.tokens].shape[1] for s in task.sides):
            cropped = dict(batch)
            for side in task.sides:
                for k in (side.tokens, side.segmentation, side.position) + side.aligned_tokens + side.aligned:
                    if k in batch:
                        cropped[k] = batch[k][:, : keep[side.name]]
            out = _forward(model, cropped, task)[0]
            Tc = out.shape[1]
            results.append(("amount", _relative_change(base[:, :Tc], out, scored[:, :Tc])))
    return results


def _leakage_check(model, batch, base, task: Task, cfg, rng, special) -> Optional[tuple[float, str]]:
    """Replace the causal side's tokens at columns the logits up to c must not read (>= c with
    ``causal_shift`` 1, > c with 0) by random ids, for two cut points c; -> (largest relative change of the
    logits at columns <= c, where it happened), or None for a task without a causal side."""
    if task.causal_side is None:
        return None
    side = task.side(task.causal_side)
    real = task.real_positions(batch, cfg)
    pool = _content_pool(batch, real, special, task)
    tok = side.tokens
    lengths = real[side.name].sum(axis=1)
    longest = int(lengths.max()) if lengths.size else 0
    worst, where = 0.0, ""
    for c in sorted({max(longest // 4, 1), max(longest // 2, 1)}):
        changed = dict(batch)
        cols = np.arange(batch[tok].shape[1])[None, :]
        future = (cols >= c) if task.causal_shift else (cols > c)
        noise = _random_tokens(rng, pool, batch[tok].shape)
        changed[tok] = np.where(future & real[side.name], noise, batch[tok])
        out = _forward(model, changed, task)[0]
        compare = real[task.logits_side] & (cols <= c)
        change = _relative_change(base, out, compare)
        if change >= worst:
            what = f"{tok} from column {c}" if task.causal_shift else f"{tok} after column {c}"
            worst, where = change, f"{what} replaced; logits up to column {c} compared"
    return worst, where


def head_permutation(num_heads: int, num_kv_heads: int) -> tuple[np.ndarray, np.ndarray]:
    """A permutation of the query heads that moves whole key/value groups (reversed) and reverses the heads inside
    each group, and the matching key/value head permutation: (perm_q [H], perm_kv [Hkv]); new head h = old perm[h]."""
    group = num_heads // num_kv_heads
    perm_kv = np.arange(num_kv_heads)[::-1]
    perm_q = np.array([perm_kv[h // group] * group + (group - 1 - h % group) for h in range(num_heads)])
    return perm_q, perm_kv.copy()


def _permuted_model(model: nnx.Module, task: Task) -> tuple[nnx.Module, dict[tuple[str, int], np.ndarray]]:
    """A copy of ``model`` whose attention heads are permuted in every layer's projections."""
    clone = nnx.clone(model)
    perms = {}
    for key, m in task.attention_modules(clone).items():
        perm_q, perm_kv = head_permutation(m.num_heads, m.num_kv_heads)
        perms[key] = perm_q
        for lin, perm in ((m.query, perm_q), (m.key, perm_kv), (m.value, perm_kv)):
            lin.kernel[...] = lin.kernel[...][:, perm]  # [d_model, H, D]
            if lin.bias is not None:
                lin.bias[...] = lin.bias[...][perm]  # [H, D]
        m.out.kernel[...] = m.out.kernel[...][perm_q]  # [H, Dv, d_model]
        for p in m.kind_parameters().values():  # the attention kind's per-head parameters, [H, ...] each
            p[...] = p[...][perm_q]
    return clone, perms


def _attend_and_expected(graphdef, state, q, k, v, expected_heads, mask):
    """(attention module output, output projection of the expected per-head values): both [B, T, d_model]."""
    m = nnx.merge(graphdef, state)
    return m.attend(q, k, v, mask)[0], m.out(expected_heads)


def _two_token(m: models.MultiHeadAttention, causal: bool, seed: int) -> float:
    """Relative error of ``m.attend`` against the visible key's value through ``m.out``, with the other key
    masked and made the better match for the query."""
    rng = np.random.default_rng(seed)
    H, Hkv, Dk, Dv = m.num_heads, m.num_kv_heads, m.qk_dim, m.v_dim
    B, T = 2, 2
    q = rng.normal(size=(B, T, H, Dk))
    q /= np.linalg.norm(q, axis=-1, keepdims=True)
    group = H // Hkv
    k = rng.normal(size=(B, T, Hkv, Dk)) * 0.1
    v = rng.normal(size=(B, T, Hkv, Dv))
    if causal:  # query 0 may see key 0 only; key 1 is the best match of query 0
        visible = np.array([[0, 0], [0, 0]])
        masked = 1
        mask = attn.Mask(causal=True)
        check_rows = np.array([[True, False], [True, False]])
    else:  # row 0 masks key 1, row 1 masks key 0 (padding)
        visible = np.array([[0, 0], [1, 1]])
        masked = None
        kv_seg = np.array([[1, 0], [0, 1]], np.int32)
        mask = attn.Mask(q_segment_ids=jnp.ones((B, T), jnp.int32), kv_segment_ids=jnp.asarray(kv_seg))
        check_rows = np.ones((B, T), bool)
    for b in range(B):
        hidden = masked if masked is not None else 1 - visible[b, 0]
        # the hidden key matches every query head of its group strongly
        k[b, hidden] = (8.0 / m.scale) * q[b, 0].reshape(Hkv, group, Dk).mean(axis=1)
    dtype = m.query.kernel[...].dtype
    kv_head = np.arange(H) // group
    expected_heads = np.stack([v[b][visible[b]][:, kv_head] for b in range(B)])  # [B, T, H, Dv]
    graphdef, state = nnx.split(m)
    arrays = (jnp.asarray(x, dtype) for x in (q, k, v, expected_heads))
    out, expected = _jitted(_attend_and_expected, ("graphdef",))(graphdef, state, *arrays, mask)
    out, expected = np.asarray(out, np.float64), np.asarray(expected, np.float64)
    err = np.abs(out - expected)[check_rows]
    return float(err.max() / max(np.abs(expected[check_rows]).max(), 1e-30))


def score_std_status(s: float, model_floor: float, th) -> tuple[str, str, str]:
    """(status, advice key, rule) of one head's score std ``s`` given ``model_floor``, the smallest median over
    the heads of one layer among all the model's attention layers.

    Above ``score_std_fail_saturated`` (or not finite) fails whatever the rest of the model; between the warn and
    saturated bounds warns (fails above ``score_std_fail_high``) only when every layer of the model is lifted
    (``model_floor`` above the warn bound): a wrong scale multiplies the scores of every attention module, while
    training sharpens only the layers whose job needs it (a solved retrieval task attends one-hot in its last
    layer with ordinary heads in the first; a cross-attention head aligns on one source word)."""
    rule = (f"ok {th.score_std_warn_low:g}-{th.score_std_warn_high:g} (up to {th.score_std_fail_saturated:g} "
            f"unless every layer's median is > {th.score_std_warn_high:g}, then warn > "
            f"{th.score_std_warn_high:g}, fail > {th.score_std_fail_high:g}); fail < {th.score_std_fail_low:g} "
            f"or > {th.score_std_fail_saturated:g}")
    if s > th.score_std_warn_high or not math.isfinite(s):
        if not s <= th.score_std_fail_saturated:
            return "fail", "score_high", rule
        if model_floor <= th.score_std_warn_high:
            return "ok", "score_high", rule
        return status_above(s, th.score_std_warn_high, th.score_std_fail_high), "score_high", rule
    status = "fail" if s < th.score_std_fail_low else "warn" if s < th.score_std_warn_low else "ok"
    return status, "score_low", rule


def layer_status(value: float, layer_median: float, warn: float, fail: float) -> tuple[str, str]:
    """(status, rule) of one head's ``value`` of a per-head symptom (entropy, special_mass, sink) given the median
    over its layer's heads: above ``warn`` (``fail``) it warns (fails) only when the layer's median is above
    ``warn`` too. A fault (a too-small scale or too-high temperature, a broken mask) moves every head of a layer,
    while one head that dozes or parks its mass on BOS/EOS among heads that do not is a head the model does not
    use, which trained Transformers have many of (Michel et al. 2019, Xiao et al. 2023)."""
    rule = f"warn > {warn:g}, fail > {fail:g} when the layer's median is > {warn:g}"
    status = status_above(value, warn, fail)
    if status != "ok" and math.isfinite(value) and layer_median <= warn:
        status = "ok"
    return status, rule


def diagnose(
    model: nnx.Module,
    batches: Iterable[Mapping[str, Any]],
    *,
    task: Union[Task, str, None] = None,
    special_ids: Sequence[int] = (),
    piece_labels: Optional[Sequence[str]] = None,
    thresholds: Optional[ml_collections.ConfigDict] = None,
) -> list[Finding]:
    """Run the attention checklist on ``model`` with (up to ``thresholds.max_batches`` of) ``batches``.

    model: a model of any task of ``engine.tasks``; task: its ``Task`` (default: the task that trains the model's
    class; ``MaskedLMTask`` for an encoder-only ``models.EncoderOnly``), whose batch description the checks follow.
    batches: training-pipeline batches (translation: inputs/targets [B, S]/[B, T] with optional *_segmentation,
    *_position; lm: inputs [B, T] with optional segmentation, position; classification and mlm: inputs [B, S]
    with optional inputs_segmentation, inputs_position).
    special_ids: token ids counted as special besides the model's BOS/EOS. piece_labels: the vocabulary's pieces
    by id (punctuation-only pieces count as special). thresholds: ``default_thresholds()`` or ``config.doctor``.
    Returns the findings, model-wide checks first, then per group, layer and head.
    """
    task = resolve_task(model, task)
    refusal = attn.kind_refusal(model.cfg.attention_kind, "statistics")
    if refusal is not None:
        raise ValueError(f"diagnose: {refusal}; the doctor reads attention weights and statistics")
    th = default_thresholds()
    if thresholds is not None:
        unknown = sorted(set(thresholds.keys()) - set(th.keys()))
        if unknown:
            raise ValueError(f"diagnose: unknown threshold fields {unknown}; expected some of {sorted(th.keys())}")
        th.update(thresholds)
    cfg = model.cfg
    taken = []
    for b in batches:
        if len(taken) >= int(th.max_batches):
            break
        taken.append(complete_batch(b, task, cfg, int(th.rows_per_batch)))
    if not taken:
        raise ValueError("diagnose: no batches given; expected at least one evaluation batch")
    special = {cfg.bos_id, cfg.eos_id} | {int(i) for i in special_ids}
    if piece_labels is not None:
        special |= set(punctuation_ids(piece_labels))
    special.discard(cfg.pad_id)
    rng = np.random.default_rng(int(th.seed))
    exact, note = deterministic_model(model)
    ref = reference_model(exact)
    permuted, perms = _permuted_model(exact, task)
    acc = _Accumulator()
    model_checks: dict[str, tuple[float, str]] = {}

    def worst(name: str, value: float, detail: str) -> None:
        if name not in model_checks or not value <= model_checks[name][0]:
            model_checks[name] = (value, detail)

    for batch in logs.progress(taken, "attention doctor", unit="batches"):
        logits, stats = _forward(exact, batch, task)
        for variant, change in _padding_checks(exact, batch, logits, task, cfg, th, rng, special):
            worst(f"padding_invariance/{variant}", change, f"padding {variant} changed{note}")
        leakage = _leakage_check(exact, batch, logits, task, cfg, rng, special)
        if leakage is not None:
            worst("causal_leakage", leakage[0], leakage[1] + note)
        p_logits, p_stats = _forward(permuted, batch, task)
        real = task.real_positions(batch, cfg)
        worst("head_permutation", _relative_change(np.asarray(logits), np.asarray(p_logits), real[task.logits_side]),
              f"logits after permuting the heads of every layer{note}")
        for group, layers in stats.items():
            for layer, (s, ps) in enumerate(zip(layers, p_stats[group])):
                perm = perms[(group, layer)]
                rows = np.asarray(s.valid)
                err = 0.0
                # relative to the largest value; entropy (lse - E[score], so rounded on the logits' scale: with
                # logits in the thousands its float32 error is ~1e-2 nats) relative to at least 1 nat and the
                # largest logit
                seen = rows[:, perm]
                logit_scale = np.abs(np.asarray(s.max_logit)[:, perm][seen]).max(initial=0.0)
                for field, floor in (("entropy", max(1.0, logit_scale)), ("max_logit", 1e-30)):
                    a = np.asarray(getattr(s, field))[:, perm]
                    b = np.asarray(getattr(ps, field))
                    scale = max(np.abs(a[seen]).max(initial=0.0), floor)
                    err = max(err, float(np.abs(a - b)[seen].max(initial=0.0)) / scale)
                acc.add_max(("head_permutation", group, layer), err)
        ref_stats = stats if ref is exact else _forward(ref, batch, task)[1]
        for group, layers in ref_stats.items():
            if not layers:
                continue
            q_side, k_side = task.group_sides[group]
            q_real, k_real = real[q_side], real[k_side]
            tokens = task.side_tokens(batch, k_side, cfg)
            pos = batch.get(task.side(k_side).position)
            first = (pos == 0) if pos is not None else (np.arange(tokens.shape[1])[None, :] == 0)
            is_special = np.isin(tokens, list(special)) & k_real
            for layer, s in enumerate(layers):
                w = np.asarray(s.weights, np.float64)  # [B, H, Tq, Tk]
                rows = np.asarray(s.valid) & q_real[:, None, :]
                pad_w = np.where(rows[..., None] & ~k_real[:, None, None, :], w, 0.0)
                acc.add_max(("padding_weight", group, layer), pad_w.max(initial=0.0))
                if group in task.causal_groups():
                    later = np.arange(w.shape[3])[None, :] > np.arange(w.shape[2])[:, None]  # [Tq, Tk]
                    acc.add_max(("causal_weight", group, layer),
                                np.where(rows[..., None] & later[None, None], w, 0.0).max(initial=0.0))
                support = np.sum(w > 0, axis=-1)  # keys the row actually sees: [B, H, Tq]
                enough = rows & (support >= int(th.min_keys))
                acc.add_mean(("score_std", group, layer), np.asarray(s.logit_std), enough)
                acc.add_mean(("score_mean", group, layer), np.asarray(s.logit_mean), enough)
                ratio = np.asarray(s.entropy) / np.log(np.maximum(support, 2))
                acc.add_mean(("entropy", group, layer), ratio, enough)
                content = np.sum((w > 0) & ~is_special[:, None, None, :], axis=-1)
                spec_rows = rows & (content >= int(th.min_keys))
                acc.add_mean(("special_mass", group, layer), np.sum(w * is_special[:, None, None, :], -1), spec_rows)
                sink_rows = enough & (np.sum((w > 0) & ~first[:, None, None, :], axis=-1) >= int(th.min_keys))
                acc.add_mean(("sink", group, layer), np.sum(w * (first & k_real)[:, None, None, :], -1), sink_rows)

    findings: list[Finding] = []
    inv = rule_above(th.invariance_warn, th.invariance_fail)
    for name in sorted(model_checks):
        value, detail = model_checks[name]
        check = name.split("/")[0]
        key = {"padding_invariance": "padding", "causal_leakage": "causal", "head_permutation": "permutation"}[check]
        rule = inv if check != "head_permutation" else rule_above(th.exact_warn, th.exact_fail)
        warn = th.invariance_warn if check != "head_permutation" else th.exact_warn
        fail = th.invariance_fail if check != "head_permutation" else th.exact_fail
        findings.append(make_finding(check, None, None, None, value, rule, status_above(value, warn, fail), key, detail))

    modules = task.attention_modules(model)
    order = {g: i for i, g in enumerate(GROUPS)}
    for (group, layer), m in sorted(modules.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])):
        for check, causal in (("two_token_padding", False), ("two_token_causal", True)):
            if causal and group not in task.causal_groups():
                continue
            err = _two_token(m, causal, int(th.seed) + layer)
            findings.append(make_finding(check, group, layer, None, err, rule_above(th.exact_warn, th.exact_fail),
                                     status_above(err, th.exact_warn, th.exact_fail), "two_token",
                                     "causal mask" if causal else "padding mask"))

    for (group, layer), m in sorted(modules.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])):
        ratio = m.scale * math.sqrt(m.qk_dim)
        low, high = th.scale_ratio_warn_low, th.scale_ratio_warn_high
        findings.append(make_finding("scale", group, layer, None, ratio, f"warn < {low:g} or > {high:g}",
                                     "ok" if low <= ratio <= high else "warn",
                                     "score_high" if ratio > high else "score_low",
                                     f"logit scale {m.scale:.3g} x sqrt(d_k = {m.qk_dim})"))

    layers = sorted(modules, key=lambda k: (order[k[0]], k[1]))
    std_medians = [float(np.median(std[n > 0])) for std, n in (acc.mean(("score_std", g, i)) for g, i in layers)
                   if np.any(n > 0)]
    model_floor = min((m for m in std_medians if math.isfinite(m)), default=0.0)
    for (group, layer) in layers:
        v = acc.maxima[("padding_weight", group, layer)]
        findings.append(make_finding("padding_weight", group, layer, None, v, rule_above(None, th.padding_weight_fail),
                                 status_above(v, None, th.padding_weight_fail), "padding", "max weight on a padding key"))
        if ("causal_weight", group, layer) in acc.maxima:
            v = acc.maxima[("causal_weight", group, layer)]
            findings.append(make_finding("causal_weight", group, layer, None, v, rule_above(None, th.causal_weight_fail),
                                     status_above(v, None, th.causal_weight_fail), "causal", "max weight on a later key"))
        v = acc.maxima[("head_permutation", group, layer)]
        findings.append(make_finding("head_permutation", group, layer, None, v, rule_above(th.exact_warn, th.exact_fail),
                                 status_above(v, th.exact_warn, th.exact_fail), "permutation",
                                 "entropy / max logit per head after the permutation"))
        std, n = acc.mean(("score_std", group, layer))
        mean, _ = acc.mean(("score_mean", group, layer))
        ent, n_ent = acc.mean(("entropy", group, layer))
        spec, n_spec = acc.mean(("special_mass", group, layer))
        sink, n_sink = acc.mean(("sink", group, layer))
        fail_special = th.special_mass_fail if th.fail_on_special else math.inf
        fail_sink = th.sink_fail if th.fail_on_special else math.inf
        layer_median = float(np.median(std[n > 0])) if np.any(n > 0) else 0.0
        medians = {name: float(np.median(x[k > 0])) if np.any(k > 0) else 0.0
                   for name, x, k in (("entropy", ent, n_ent), ("special", spec, n_spec), ("sink", sink, n_sink))}
        for head in range(len(std)):
            if n[head]:
                s = float(std[head])
                status, key, rule = score_std_status(s, model_floor, th)
                findings.append(make_finding("score_std", group, layer, head, s, rule, status, key,
                                         f"score mean {float(mean[head]):.3g}, std {s:.3g}; layer median "
                                         f"{layer_median:.3g}, smallest layer median {model_floor:.3g}"))
            if n_ent[head]:
                e = float(ent[head])
                status, rule = layer_status(e, medians["entropy"], th.entropy_warn, th.entropy_fail)
                findings.append(make_finding("entropy", group, layer, head, e, rule, status, "entropy",
                                             f"entropy / log(visible keys); layer median {medians['entropy']:.3g}"))
            if n_spec[head]:
                x = float(spec[head])
                status, rule = layer_status(x, medians["special"], th.special_mass_warn, fail_special)
                findings.append(make_finding("special_mass", group, layer, head, x, rule, status, "special",
                                             f"mass on BOS/EOS/special/punctuation keys; layer median "
                                             f"{medians['special']:.3g}"))
            if n_sink[head]:
                x = float(sink[head])
                status, rule = layer_status(x, medians["sink"], th.sink_warn, fail_sink)
                findings.append(make_finding("sink", group, layer, head, x, rule, status, "sink",
                                             f"mass on key 0; layer median {medians['sink']:.3g}"))
    return findings


def run_diagnosis(
    model: nnx.Module,
    batches: Iterable[Mapping[str, Any]],
    out_dir: str,
    *,
    task: Union[Task, str, None] = None,
    special_ids: Sequence[int] = (),
    piece_labels: Optional[Sequence[str]] = None,
    thresholds: Optional[ml_collections.ConfigDict] = None,
    title: str = "Attention doctor",
    meta: Optional[Mapping[str, Any]] = None,
    write: bool = True,
) -> tuple[list[Finding], str]:
    """``diagnose`` then (when ``write``: False on the processes of a multi-host run that do not write shared
    files) ``write_report`` into ``out_dir``; returns (findings, summary line)."""
    findings = diagnose(model, batches, task=task, special_ids=special_ids, piece_labels=piece_labels,
                        thresholds=thresholds)
    if write:
        write_report(findings, out_dir, title=title, meta=meta)
    return findings, summary_line(findings)
