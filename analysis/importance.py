"""Which heads matter: head masks, gradient importance (Michel et al. 2019), attention behaviour per head
(Voita et al. 2019) and cross-attention overrides (Vashishth et al. 2019) on a trained encoder-decoder.

A ``Subject`` is the translation model under study: one attnlab trained (``trained_subject``) or a pretrained
encoder-decoder checkpoint (``pretrained_subject``, e.g. Marian). ``Probe`` measures it under
``models.Interventions``: teacher-forced NLL and next-token distribution change on fixed validation batches, BLEU
of greedy decodes, |dNLL/dxi| per head. ``measure`` runs the whole battery of the head-importance study on one
model; ``to_json`` / ``from_json`` turn its result into a JSON record's section and back, losslessly.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from scipy import stats as scipy_stats

import models
from analysis.keep import KeepModel
from engine.tasks import Task

GROUPS = ("encoder_self", "decoder_self", "cross")
SELF_GROUPS = ("encoder_self", "decoder_self")
POSITIONAL = 0.9  # Voita et al.: positional when the maximum sits at one relative position in >= 90% of queries
GroupHead = tuple[str, int, int]  # (group, layer, head)


def crop(batch: dict) -> dict:
    """A translation evaluation batch without the columns that are padding in every row (the results do not
    change; the forward passes get shorter)."""
    out = dict(batch)
    for side in ("inputs", "targets"):
        seg = np.asarray(batch[f"{side}_segmentation"])
        used = np.nonzero(seg.any(axis=0))[0]
        n = int(used[-1]) + 1 if used.size else 1
        for k, v in batch.items():
            if k.startswith(side):
                out[k] = np.asarray(v)[:, :n]
    return out


def head_list(shapes: dict[str, tuple[int, int]]) -> list[GroupHead]:
    """Every (group, layer, head) of ``shapes`` ({group: (L, H)}), groups in GROUPS order."""
    return [(g, l, h) for g in GROUPS for l in range(shapes[g][0]) for h in range(shapes[g][1])]


def spearman(x, y) -> float:
    """Spearman's rank correlation of two sequences, flattened (NaN when one is constant)."""
    x, y = np.ravel(x), np.ravel(y)
    if x.shape != y.shape:
        raise ValueError(f"spearman: {x.size} and {y.size} values; expected the same number")
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return float("nan")
    return float(scipy_stats.spearmanr(x, y)[0])


def within_layer_spearman(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman correlation of x and y [L, H] over the heads of each layer: [L] (NaN for a constant layer).

    Compares heads only with heads of the same layer, so a correlation cannot come from differences between
    layers alone."""
    x, y = np.asarray(x), np.asarray(y)
    if x.shape != y.shape or x.ndim != 2:
        raise ValueError(f"within_layer_spearman: shapes {x.shape} and {y.shape}; expected two [L, H]")
    return np.array([spearman(x[l], y[l]) for l in range(x.shape[0])])


def normalise_per_layer(importance: np.ndarray) -> np.ndarray:
    """Michel et al.'s l2 normalisation of head importance [L, H] within each layer."""
    return importance / np.maximum(np.linalg.norm(importance, axis=1, keepdims=True), 1e-20)


def positional_fraction(behaviour: dict[str, np.ndarray]) -> np.ndarray:
    """[L, H]: the fraction of queries whose largest weight sits on the previous or the next token (the larger),
    from a self-attention group's ``Probe.attention_behaviour`` entry."""
    return np.maximum(behaviour["prev_arg"], behaviour["next_arg"])


def cross_overrides(kind: str, layers: Sequence[int], key: jax.Array) -> models.Interventions:
    """Cross-attention weights replaced in ``layers``: ``kind`` "permute" (among the source tokens, a key per
    layer from ``key``) or "uniform"."""
    if kind not in ("permute", "uniform"):
        raise ValueError(f"cross_overrides: kind={kind!r}; expected 'permute' or 'uniform'")
    return models.Interventions(overrides=tuple(
        models.WeightOverride("cross", l, kind, key=jax.random.fold_in(key, l) if kind == "permute" else None)
        for l in layers))


@dataclasses.dataclass
class Subject:
    """A translation model as the probes see it: the model, the same model on the ``reference`` backend (for
    attention weights), the task that runs its batches, the teacher-forced validation batches, and
    ``bleu(interventions) -> (BLEU, hypotheses)`` on a fixed list of test sentences (greedy decoding)."""

    model: nnx.Module
    reference: nnx.Module
    task: Task
    batches: list[dict[str, np.ndarray]]
    bleu: Callable[[Optional[models.Interventions]], tuple[float, list[str]]]


def _check_sizes(owner: str, eval_batches: int, sentences: int) -> None:
    if eval_batches < 1 or sentences < 1:
        raise ValueError(f"{owner}: eval_batches={eval_batches}, sentences={sentences}; expected positive ints")


def trained_subject(keep: KeepModel, eval_batches: int, sentences: int) -> Subject:
    """A model attnlab trained (``KeepModel``): its first ``eval_batches`` validation batches and its first
    ``sentences`` test sentences."""
    _check_sizes("trained_subject", eval_batches, sentences)

    def bleu(iv):
        r = keep.evaluator.bleu(keep.params, "test", 0, limit=sentences, write=False, interventions=iv)
        return r["bleu"], list(r["hypotheses"])

    return Subject(keep.setup.model(keep.params), keep.evaluator.reference_model(keep.params), keep.task,
                   keep.task.eval_batches(keep.data, "validation")[:eval_batches], bleu)


def pretrained_subject(p, eval_batches: int, sentences: int, *, batch_size: int = 64, max_len: int = 64) -> Subject:
    """A pretrained encoder-decoder checkpoint (``pretrained.load(...)``, e.g. Marian) on our Bible corpus in its
    own token ids: ``eval_batches`` validation batches of ``batch_size`` verse pairs (Spanish -> English, at
    most ``max_len`` tokens a side), BLEU on the first ``sentences`` test verses (greedy, the checkpoint's
    banned tokens banned)."""
    from engine import doctor
    from engine.evaluation import cut_at_eos, score
    from pretrained.analysis import PretrainedTask, bible_pairs, decoding_model

    _check_sizes("pretrained_subject", eval_batches, sentences)
    if not isinstance(p.model, models.EncoderDecoder):
        raise ValueError(f"head importance measures an encoder-decoder translation model (BLEU, cross-attention); "
                         f"{p.directory} is a {p.family} checkpoint ({type(p.model).__name__})")
    view = PretrainedTask(p, max_len=max_len)
    task, cfg = doctor.resolve_task(p.model), p.cfg
    batches = [task.complete_batch(b, cfg, len(b["inputs"]))
               for b in view.batches("validation", batch_size=batch_size, limit=eval_batches * batch_size)]
    pairs = bible_pairs("test")[:sentences]
    generator = decoding_model(p)

    def bleu(iv):
        hyps = []
        for i in range(0, len(pairs), batch_size):
            src = view.batch(pairs[i:i + batch_size])["inputs"]
            out = models.greedy_decode(generator, jnp.asarray(src), max_len=min(2 * src.shape[1] + 10, 512),
                                       interventions=iv)
            hyps += [p.tokenizer.decode(cut_at_eos(row, cfg.eos_id, cfg.pad_id)) for row in np.asarray(out)]
        return score(hyps, [en for _, en in pairs])["bleu"], hyps

    return Subject(p.model, doctor.reference_model(p.model), task, batches, bleu)


class Probe:
    """One translation model's measurements under interventions: NLL and next-token distribution change on its
    validation batches (teacher forced), BLEU of its test sentences (greedy decoding), gradient importance and
    attention behaviour per head."""

    def __init__(self, subject: Subject):
        self.subject = subject
        self.decoded: dict[str, list[str]] = {}  # condition -> hypotheses, for the decodes asked to be kept
        self.model = subject.model
        self.shapes = models.head_shapes(self.model)
        self.unit = models.unit_head_mask(self.model)
        self.graphdef, self.state = nnx.split(self.model)
        self.batches = [{k: jnp.asarray(v) for k, v in crop(b).items()} for b in subject.batches]
        task, graphdef = subject.task, self.graphdef

        def nll_terms(state, iv, batch):
            logits = task.forward(nnx.merge(graphdef, state), batch, deterministic=True, interventions=iv)
            t = task.loss_terms(logits, batch, 0.0)
            return t["nll_sum"], t["weight_sum"]

        def tvd_terms(state, iv, batch):
            m = nnx.merge(graphdef, state)
            p = jax.nn.softmax(task.forward(m, batch, deterministic=True).astype(jnp.float32))
            logits = task.forward(m, batch, deterministic=True, interventions=iv)
            q = jax.nn.softmax(logits.astype(jnp.float32))
            t = task.loss_terms(logits, batch, 0.0)
            return 0.5 * jnp.abs(p - q).sum(-1), t["nll_sum"], t["weight_sum"]  # [B, T], scalars

        self._nll = jax.jit(nll_terms)
        self._tvd = jax.jit(tvd_terms)
        self._grad = jax.jit(jax.grad(lambda mask, state, batch: (lambda s, w: s / w)(
            *nll_terms(state, models.Interventions(head_mask=mask), batch))))

    def masks(self, heads: Sequence[GroupHead]) -> models.Interventions:
        """Head masks with ``heads`` zeroed; every group present, so one compiled program serves every mask."""
        mask = {g: np.ones(self.shapes[g], np.float32) for g in GROUPS}
        for g, l, h in heads:
            mask[g][l, h] = 0.0
        return models.Interventions(head_mask={g: jnp.asarray(m) for g, m in mask.items()})

    def nll(self, iv: Optional[models.Interventions]) -> float:
        """Teacher-forced validation NLL (nats per target token) under ``iv``."""
        sums = [self._nll(self.state, iv, b) for b in self.batches]
        return float(sum(float(s) for s, _ in sums) / max(sum(float(w) for _, w in sums), 1.0))

    def change(self, iv: models.Interventions) -> dict[str, float]:
        """Teacher-forced next-token distribution change against the unmodified model: total variation
        distance per target token (``tvd_mean``, ``tvd_median``) and the NLL with ``iv``."""
        tvds, nll, weight = [], 0.0, 0.0
        for b in self.batches:
            tvd, s, w = self._tvd(self.state, iv, b)
            tvds.append(np.asarray(tvd)[np.asarray(b["targets_segmentation"]) > 0])
            nll, weight = nll + float(s), weight + float(w)
        tvd = np.concatenate(tvds)
        return {"tvd_mean": float(tvd.mean()), "tvd_median": float(np.median(tvd)), "nll": nll / max(weight, 1.0)}

    def bleu(self, iv: Optional[models.Interventions], keep_as: str = "") -> float:
        """BLEU of the subject's test sentences under ``iv``; with ``keep_as``, the hypotheses are kept in
        ``decoded[keep_as]``."""
        bleu, hyps = self.subject.bleu(iv)
        if keep_as:
            self.decoded[keep_as] = hyps
        return bleu

    def importance(self) -> dict[str, np.ndarray]:
        """Michel et al.'s raw importance: mean over batches of |dNLL/dxi_h| at xi = 1, {group: [L, H]}."""
        grads = [self._grad(self.unit, self.state, b) for b in self.batches]
        return {g: np.mean([np.abs(np.asarray(gr[g])) for gr in grads], 0) for g in GROUPS}

    def attention_behaviour(self) -> dict[str, dict[str, np.ndarray]]:
        """Per head ([L, H] per group): ``confidence`` (mean max weight over non-padding queries); for
        self-attention the mean weight on the previous / next token (``prev``, ``next``) and the fraction of
        queries whose maximum sits there (``prev_arg``, ``next_arg``)."""
        graphdef, state = nnx.split(self.subject.reference)
        task = self.subject.task

        @jax.jit
        def sums(state, batch):
            _, st = task.forward(nnx.merge(graphdef, state), batch, deterministic=True, return_stats=True)
            out = {}
            for g in GROUPS:
                seg = batch["inputs_segmentation" if g == "encoder_self" else "targets_segmentation"] > 0  # [B, Tq]
                per_layer = []
                for s in st[g]:
                    w = s.weights.astype(jnp.float32)  # [B, H, Tq, Tk]
                    q = seg[:, None, :].astype(jnp.float32)  # [B, 1, Tq]
                    r = {"conf": (w.max(-1) * q).sum((0, 2)), "n": jnp.broadcast_to(q.sum((0, 2)), w.shape[1:2])}
                    if g in SELF_GROUPS:
                        arg = w.argmax(-1)  # [B, H, Tq]
                        pos = jnp.arange(w.shape[2])
                        prev_ok = q * (pos >= 1)[None, None, :]
                        nxt_ok = q * jnp.pad(seg[:, 1:], ((0, 0), (0, 1)))[:, None, :]
                        prev_w = jnp.pad(jnp.diagonal(w, offset=-1, axis1=2, axis2=3), ((0, 0), (0, 0), (1, 0)))
                        next_w = jnp.pad(jnp.diagonal(w, offset=1, axis1=2, axis2=3), ((0, 0), (0, 0), (0, 1)))
                        r.update(prev=(prev_w * prev_ok).sum((0, 2)), next=(next_w * nxt_ok).sum((0, 2)),
                                 prev_arg=((arg == pos - 1) * prev_ok).sum((0, 2)),
                                 next_arg=((arg == pos + 1) * nxt_ok).sum((0, 2)),
                                 n_prev=jnp.broadcast_to(prev_ok.sum((0, 2)), w.shape[1:2]),
                                 n_next=jnp.broadcast_to(nxt_ok.sum((0, 2)), w.shape[1:2]))
                    per_layer.append(r)
                out[g] = {k: jnp.stack([r[k] for r in per_layer]) for k in per_layer[0]}  # [L, H]
            return out

        total = None
        for b in self.batches:
            s = jax.device_get(sums(state, b))
            total = s if total is None else jax.tree.map(np.add, total, s)
        out = {}
        for g, t in total.items():
            out[g] = {"confidence": t["conf"] / np.maximum(t["n"], 1)}
            if g in SELF_GROUPS:
                out[g].update(prev=t["prev"] / np.maximum(t["n_prev"], 1), next=t["next"] / np.maximum(t["n_next"], 1),
                              prev_arg=t["prev_arg"] / np.maximum(t["n_prev"], 1),
                              next_arg=t["next_arg"] / np.maximum(t["n_next"], 1))
        return out


def measure(subject: Subject, seed: int, fractions: Sequence[float], log: Callable[[str], None] = print) -> dict:
    """The head-importance battery on one model: single-head masks (BLEU, NLL), raw and per-layer normalised
    importance, the pruning order and curves at ``fractions`` (all heads, and each group alone), attention
    behaviour, and cross-attention permuted / uniform (all layers, and each layer) at decode time."""
    t0 = time.time()
    p = Probe(subject)
    shapes = {g: p.shapes[g] for g in GROUPS}
    heads = head_list(shapes)
    m = {"shapes": shapes, "fractions": tuple(fractions), "base_nll": p.nll(p.masks([]))}
    tb = time.time()
    m["base_bleu"] = p.bleu(None, keep_as="unmasked")
    m["seconds_per_decode"] = time.time() - tb
    log(f"  unmasked: NLL {m['base_nll']:.4f}, BLEU {m['base_bleu']:.2f} ({m['seconds_per_decode']:.1f}s per decode)")

    m["single_nll"] = {g: np.zeros(shapes[g]) for g in GROUPS}
    m["single_bleu"] = {g: np.zeros(shapes[g]) for g in GROUPS}
    for g, l, h in heads:
        iv = p.masks([(g, l, h)])
        m["single_nll"][g][l, h] = p.nll(iv)
        m["single_bleu"][g][l, h] = p.bleu(iv)
    log(f"  single-head masks done ({time.time() - t0:.0f}s)")

    raw = p.importance()
    norm = {g: normalise_per_layer(raw[g]) for g in GROUPS}
    m["raw"], m["norm"] = raw, norm
    order = sorted(heads, key=lambda x: (float(norm[x[0]][x[1], x[2]]), x))  # least important first
    m["order"] = order

    def curve(pool):
        nll, bleu = [], []
        for f in fractions:
            iv = p.masks(pool[:int(round(f * len(pool)))])
            nll.append(m["base_nll"] if f == 0 else p.nll(iv))
            bleu.append(m["base_bleu"] if f == 0 else p.bleu(iv))
        return nll, bleu

    m["curve_nll"], m["curve_bleu"] = curve(order)
    m["group_nll"], m["group_bleu"] = {}, {}
    for g in GROUPS:
        m["group_nll"][g], m["group_bleu"][g] = curve([o for o in order if o[0] == g])
    log(f"  pruning curves done ({time.time() - t0:.0f}s)")

    m["behaviour"] = p.attention_behaviour()

    key = jax.random.key(1000 + seed)
    L = shapes["cross"][0]
    variants = {"permute, all layers": cross_overrides("permute", range(L), key),
                "uniform, all layers": cross_overrides("uniform", range(L), key)}
    if L > 1:
        for l in range(L):
            variants[f"permute, layer {l}"] = cross_overrides("permute", [l], key)
            variants[f"uniform, layer {l}"] = cross_overrides("uniform", [l], key)
    m["vashishth"] = {}
    for name, iv in variants.items():
        m["vashishth"][name] = dict(p.change(iv), bleu=p.bleu(iv, keep_as=f"cross {name}" if "all" in name else ""))
    m["decoded"] = p.decoded
    m["measure_minutes"] = (time.time() - t0) / 60
    log(f"  cross-attention overrides done ({time.time() - t0:.0f}s)")
    return m


# ------------------------------------------------------------------------------------------- JSON records
def to_json(value: Any) -> Any:
    """``measure``'s result (or any part of it) as JSON values: arrays as ``{"array": nested lists, "dtype"}``,
    tuples as lists; every float exactly (``from_json`` gives back equal arrays of the same dtype)."""
    if isinstance(value, np.ndarray):
        return {"array": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    raise ValueError(f"to_json: a {type(value).__name__} ({value!r}); expected arrays, dicts, lists, numbers, str")


def from_json(value: Any, key: str = "") -> Any:
    """The inverse of ``to_json`` on a ``measure`` result: arrays back with their dtype, ``order`` as (group,
    layer, head) tuples, ``shapes`` and ``fractions`` as tuples."""
    if isinstance(value, dict):
        if set(value) == {"array", "dtype"}:
            return np.asarray(value["array"], dtype=value["dtype"])
        if key == "shapes":
            return {g: tuple(shape) for g, shape in value.items()}
        return {k: from_json(v, k) for k, v in value.items()}
    if isinstance(value, list):
        if key == "order":
            return [tuple(v) for v in value]
        return tuple(value) if key == "fractions" else [from_json(v) for v in value]
    return value


TOP = ("seed", "commit", "measured_utc", "steps", "base_nll", "base_bleu", "decoded")  # not in "measurements"


def record(m: dict, name: str, config: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The JSON record of one model's measurements ``m`` (``measure``'s result plus ``seed``, ``commit``,
    ``measured_utc``, ``steps``): ``studies.records.Record``'s fields (``validation.nll``, ``test.bleu``, ...)
    and the rest under ``measurements`` (``to_json``); the kept decodes are not part of it."""
    return {"schema": 1, "point": name, "config": config, "overrides": to_json(overrides), "seed": m.get("seed"),
            "commit": m.get("commit"), "measured_utc": m.get("measured_utc"), "steps": m.get("steps"),
            "validation": {"nll": m["base_nll"]}, "test": {"bleu": m["base_bleu"]},
            "measurements": to_json({k: v for k, v in m.items() if k not in TOP})}


def from_record(raw: dict[str, Any]) -> dict:
    """The measurements of a record written by ``record``."""
    m = dict(from_json(raw["measurements"]), base_nll=raw["validation"]["nll"], base_bleu=raw["test"]["bleu"])
    m.update({k: raw[k] for k in ("seed", "commit", "measured_utc", "steps") if raw.get(k) is not None})
    return m
