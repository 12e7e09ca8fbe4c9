"""Tasks: what the engine trains. One object per task owns its data, its model, its forward pass, which
positions count in the loss, its batch layout and its evaluators; the loop never asks which task it runs.

- ``translation``: ``EncoderDecoder`` on a parallel corpus (``data.build_translation``); evaluators: loss and
  perplexity, BLEU/chrF of decoded sentences, attention heatmaps.

A task lists its evaluators as ``(name, arguments)`` entries of ``engine.evaluation.EVALUATORS`` (as big_vision
configs list theirs); ``Evaluator.evaluate`` runs them in order and logs their results once.
- ``lm``: ``DecoderOnly`` on a synthetic task (``data.build_synthetic``); loss on the task's answer positions
  (``train.loss_on="answers"``) or on every real target (``"all"``); evaluators: loss, token and sequence
  accuracy on the answers, and optionally the loss per position (``eval.position_loss``).
- ``classification``: ``EncoderClassifier`` on Bible verses (``data.build_classification``); evaluators: loss
  and accuracy.

Besides training, a task describes its batches to the tools that take a model apart (the doctor, the explorer,
eval.py): its token ``sides`` (which batch keys hold tokens, segment ids and positions), which side each
attention group's queries and keys come from, which side the logits follow, which side (if any) is causal,
the splits it evaluates and what it prints at the end. Nothing outside this module asks which task it runs.

Adding a task: subclass ``Task``, fill in the methods and the batch description, register it in ``TASKS``,
and give it a config file (docs/extending.md walks through one).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional

import flax.nnx as nnx
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

import attention as attn
import models
from engine import metrics as metrics_lib
from engine.errors import ConfigError
from engine.sharding import segment_positions

Batch = Mapping[str, jax.Array]
EvaluatorSpec = tuple[str, dict]  # (a name of engine.evaluation.EVALUATORS, its keyword arguments)


@dataclasses.dataclass(frozen=True)
class Side:
    """One token sequence of a task's batch: the keys of its token ids, segment ids (0 = padding) and
    positions, all [B, T]. ``aligned_tokens`` / ``aligned``: other [B, T] keys that follow its columns (padded
    with ``pad_id`` / 0).
    ``needs_segmentation``: False when a batch without segment ids has no padding the model must mask (a
    causal decoder: right padding comes after every real token)."""

    name: str
    tokens: str
    segmentation: str
    position: str
    aligned_tokens: tuple[str, ...] = ()
    aligned: tuple[str, ...] = ()
    needs_segmentation: bool = True


class Task:
    """The interface the engine uses; ``SequenceTask`` implements the loss for token predictions."""

    name = ""
    groups: tuple[str, ...] = ()  # attention groups the model reports statistics for
    can_shard_sequence = False  # one sequence per example, splittable over config.mesh.context (ring attention)
    model_class: type = nnx.Module  # the model the task trains (``task_of`` finds a model's task by it)
    # The batch, as the doctor and the explorer read it:
    sides: tuple[Side, ...] = ()
    group_sides: Mapping[str, tuple[str, str]] = {}  # group -> (side of its queries, side of its keys)
    logits_side = "target"  # the side whose positions the logits' rows follow
    causal_side: Optional[str] = None  # the side a causal decoder reads, or None
    causal_shift = 0  # 1: the logits at column c read that side's tokens before c (teacher forcing); 0: up to c
    splits: tuple[str, ...] = ("validation",)  # the splits eval.py can evaluate
    decodes = False  # evaluation decodes sequences (greedy or beam search, ``config.eval.decode``)
    draws_heatmaps = False  # eval.py --examples draws attention heatmaps of split examples

    def __init__(self, config: ml_collections.ConfigDict):
        self.config = config

    def check_config(self) -> Optional[str]:
        """Why this task cannot run ``config`` (a message naming the field), or None."""
        return None

    # ------------------------------------------------------------------------------------------- data/model
    def build_data(self, workdir: Optional[str], process_index: int, process_count: int) -> Any:
        raise NotImplementedError

    def create_model(self, cfg: models.TransformerConfig, rngs: nnx.Rngs) -> nnx.Module:
        raise NotImplementedError

    def forward(self, model: nnx.Module, batch: Batch, *, deterministic: bool, return_stats: bool = False,
                interventions: Optional[models.Interventions] = None):
        """logits [B, T, V] (or (logits, stats dict)); ``interventions``: head masks and attention-weight
        overrides passed to the model (``models.interventions``)."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------------ loss
    def targets(self, batch: Batch) -> jax.Array:
        """[B, T] int ids the logits predict."""
        return batch["targets"]

    def loss_weights(self, batch: Batch) -> jax.Array:
        """Which target positions count in the loss and accuracy: [B, T] float32."""
        raise NotImplementedError

    def real_targets(self, batch: Batch) -> jax.Array:
        """Every non-padding target position: [B, T] float32 (for the loss per position)."""
        return self.loss_weights(batch)

    def tokens(self, batch: Batch) -> jax.Array:
        """Real (non-padding) tokens processed in a batch, for tokens/s."""
        raise NotImplementedError

    def visible_keys(self, batch: Batch) -> dict[str, jax.Array]:
        """Keys each query row sees, per attention group: group -> [B, 1, Tq] float32."""
        raise NotImplementedError

    def eval_weights(self, batch: Batch) -> jax.Array:
        """Which target positions the evaluators score: [B, T] float32 (default: the loss's)."""
        return self.loss_weights(batch)

    def loss_terms(self, logits: jax.Array, batch: Batch, label_smoothing: float,
                   weights: Optional[jax.Array] = None) -> dict[str, jax.Array]:
        """Sums over the batch: smoothed loss, NLL, weight (counted targets), correct argmax predictions, and
        sequences whose every counted position is correct (``seq_correct`` of ``seq_count``).
        ``weights`` [B, T]: the counted positions (default ``loss_weights``)."""
        targets = self.targets(batch)
        w = self.loss_weights(batch) if weights is None else weights
        loss_sum, weight_sum = models.cross_entropy(logits, targets, w, label_smoothing=label_smoothing)
        if label_smoothing > 0:
            nll_sum, _ = models.cross_entropy(logits, targets, w, label_smoothing=0.0)
        else:
            nll_sum = loss_sum
        hit = jnp.argmax(logits, axis=-1) == targets
        counted = jnp.any(w > 0, axis=-1)
        seq_ok = jnp.all(hit | (w == 0), axis=-1) & counted
        return {"loss_sum": loss_sum, "nll_sum": nll_sum, "weight_sum": weight_sum, "correct": jnp.sum(hit * w),
                "seq_correct": jnp.sum(seq_ok), "seq_count": jnp.sum(counted)}

    def token_nll(self, logits: jax.Array, batch: Batch) -> jax.Array:
        """NLL of every target: [B, T] float32."""
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        return -jnp.take_along_axis(logp, self.targets(batch)[..., None].astype(jnp.int32), axis=-1)[..., 0]

    # ------------------------------------------------------------------------------------ batch description
    def side(self, name: str) -> Side:
        return next(s for s in self.sides if s.name == name)

    def causal_groups(self) -> tuple[str, ...]:
        """Attention groups whose queries and keys are both the causal side (masked to earlier keys)."""
        return tuple(g for g, (q, k) in self.group_sides.items() if q == k == self.causal_side is not None)

    def complete_batch(self, batch: Mapping[str, Any], cfg: models.TransformerConfig, rows: int
                       ) -> dict[str, np.ndarray]:
        """The first ``rows`` rows of ``batch`` as numpy, with segment ids (token != pad) and positions filled
        in where missing; ValueError naming the missing token keys."""
        need = [s.tokens for s in self.sides]
        missing = [k for k in need if k not in batch]
        if missing:
            raise ValueError(f"a {self.name} batch needs {need}; missing {missing} (got {sorted(batch)})")
        out = {k: np.asarray(v)[:rows] for k, v in batch.items()}
        for s in self.sides:
            if s.segmentation not in out:
                if not s.needs_segmentation:
                    continue
                out[s.segmentation] = (out[s.tokens] != cfg.pad_id).astype(np.int32)
            if s.position not in out:
                out[s.position] = segment_positions(out[s.segmentation])
        return out

    def real_positions(self, batch: Mapping[str, np.ndarray], cfg: models.TransformerConfig
                       ) -> dict[str, np.ndarray]:
        """Real (non-padding) positions per side: side name -> [B, T] bool."""
        out = {}
        for s in self.sides:
            if s.segmentation in batch:
                out[s.name] = np.asarray(batch[s.segmentation]) > 0
            else:
                out[s.name] = np.asarray(batch[s.tokens]) != cfg.pad_id
        return out

    def side_tokens(self, batch: Mapping[str, np.ndarray], side: str, cfg: models.TransformerConfig
                    ) -> np.ndarray:
        """Token ids the positions of ``side`` read: [B, T] (default: the side's tokens)."""
        return np.asarray(batch[self.side(side).tokens])

    def pad_batch(self, batch: Mapping[str, np.ndarray], extra: int, cfg: models.TransformerConfig
                  ) -> dict[str, np.ndarray]:
        """``extra`` more padding columns on every side: token ``pad_id``; segment, position and aligned keys 0
        (a side without segment ids gets its positions, so the model sees where the padding is)."""
        out = dict(batch)
        for s in self.sides:
            B = batch[s.tokens].shape[0]
            out[s.tokens] = np.concatenate([batch[s.tokens], np.full((B, extra), cfg.pad_id, np.int32)], axis=1)
            for name in (s.segmentation, s.position) + s.aligned_tokens + s.aligned:
                if name in batch:
                    fill = cfg.pad_id if name in s.aligned_tokens else 0
                    out[name] = np.concatenate([batch[name], np.full((B, extra), fill, batch[name].dtype)], axis=1)
            if s.position not in batch:
                out[s.position] = np.broadcast_to(np.arange(out[s.tokens].shape[1], dtype=np.int32),
                                                  out[s.tokens].shape).copy()
        return out

    def attention_modules(self, model: nnx.Module) -> dict[tuple[str, int], models.MultiHeadAttention]:
        """(group, layer) -> the model's attention module (encoder and decoder stacks; override for others)."""
        out = {}
        encoder = getattr(model, "encoder", None)
        for i, layer in enumerate(encoder.layers if encoder is not None else ()):
            out[("encoder_self", i)] = layer.self_attention
        decoder = getattr(model, "decoder", None)
        for i, layer in enumerate(decoder.layers if decoder is not None else ()):
            out[("decoder_self", i)] = layer.self_attention
            if layer.cross_attention is not None:
                out[("cross", i)] = layer.cross_attention
        return out

    # ------------------------------------------------------------------------------------------ evaluation
    def default_split(self) -> str:
        """The split eval.py evaluates without --split."""
        return "validation"

    def checkpoint_evaluators(self, split: str) -> list[EvaluatorSpec]:
        """What eval.py runs on ``split`` beyond the loss metrics and attention tables (decoding, scores)."""
        return []

    def eval_split(self, final: bool) -> str:
        """The split the loss evaluators use."""
        return "validation"

    def eval_batches(self, data: Any, split: str) -> list[dict[str, np.ndarray]]:
        return list(data.eval_batches(split))

    def evaluators(self, final: bool) -> list[EvaluatorSpec]:
        """The evaluators of one evaluation round during training (``final``: the one after training)."""
        return [("loss", {"split": self.eval_split(final)})]


class TranslationTask(Task):
    name = "translation"
    groups = ("encoder_self", "decoder_self", "cross")
    model_class = models.EncoderDecoder
    sides = (Side("source", "inputs", "inputs_segmentation", "inputs_position"),
             Side("target", "targets", "targets_segmentation", "targets_position"))
    group_sides = {"encoder_self": ("source", "source"), "decoder_self": ("target", "target"),
                   "cross": ("target", "source")}
    causal_side, causal_shift = "target", 1
    splits = ("train", "validation", "test")
    decodes = True
    draws_heatmaps = True

    def side_tokens(self, batch, side, cfg):
        """The target side reads the decoder inputs: targets shifted right, BOS at each segment start."""
        if side != "target":
            return super().side_tokens(batch, side, cfg)
        targets, seg = np.asarray(batch["targets"]), np.asarray(batch["targets_segmentation"])
        shifted = np.concatenate([np.full((targets.shape[0], 1), cfg.bos_id), targets[:, :-1]], axis=1)
        starts = (np.asarray(batch["targets_position"]) == 0 if "targets_position" in batch
                  else segment_positions(seg) == 0)
        shifted = np.where(starts, cfg.bos_id, shifted)
        return np.where(seg == 0, cfg.pad_id, shifted).astype(np.int32)

    def default_split(self):
        return self.config.eval.split

    def checkpoint_evaluators(self, split):
        return [("bleu", {"split": split, "prefix": split, "detail": True})]

    def build_data(self, workdir, process_index, process_count):
        import data as data_lib

        return data_lib.build_translation(self.config.data, workdir=workdir, seed=int(self.config.seed),
                                          process_index=process_index, process_count=process_count)

    def create_model(self, cfg, rngs):
        return models.EncoderDecoder(cfg, rngs=rngs)

    def forward(self, model, batch, *, deterministic, return_stats=False, interventions=None):
        return model(
            batch["inputs"], batch["targets"], interventions=interventions,
            inputs_segmentation=batch["inputs_segmentation"], targets_segmentation=batch["targets_segmentation"],
            inputs_position=batch["inputs_position"], targets_position=batch["targets_position"],
            deterministic=deterministic, return_stats=return_stats,
        )

    def loss_weights(self, batch):
        return (batch["targets_segmentation"] > 0).astype(jnp.float32)

    def tokens(self, batch):
        return jnp.sum(batch["inputs_segmentation"] > 0) + jnp.sum(batch["targets_segmentation"] > 0)

    def visible_keys(self, batch):
        src_seg, tgt_seg = batch["inputs_segmentation"], batch["targets_segmentation"]
        return {
            "encoder_self": metrics_lib.same_segment_count(src_seg, src_seg),
            "decoder_self": (batch["targets_position"] + 1).astype(jnp.float32)[:, None, :],
            "cross": metrics_lib.same_segment_count(tgt_seg, src_seg),
        }

    def check_config(self):
        m = self.config.model
        for field in ("num_encoder_layers", "num_decoder_layers"):
            value = m[field]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                return f"config.model.{field}={value!r}; expected a number > 0 (translation needs an encoder and a decoder)"
        refusal = attn.kind_refusal(m.get("attention_kind", "softmax"), "kv_cache")
        if refusal is not None:
            return (f"config.model.attention_kind: {refusal}, and task 'translation' decodes its evaluation "
                    f"sentences with a KV cache; use the kind with task 'lm' or 'classification'")
        return None

    @staticmethod
    def batch_from_ids(sources: list[list[int]], targets: list[list[int]]) -> dict[str, np.ndarray]:
        """One example per row, padded to the longest: the batch layout every translation batch has
        (``inputs``/``targets`` [N, S]/[N, T] with ``*_segmentation`` and ``*_position``)."""
        S = max(len(x) for x in sources)
        T = max(len(x) for x in targets)
        batch = {k: np.zeros((len(sources), n), np.int32) for k, n in
                 (("inputs", S), ("inputs_segmentation", S), ("inputs_position", S),
                  ("targets", T), ("targets_segmentation", T), ("targets_position", T))}
        for row, (s, t) in enumerate(zip(sources, targets)):
            for side, ids in (("inputs", s), ("targets", t)):
                batch[side][row, :len(ids)] = ids
                batch[f"{side}_segmentation"][row, :len(ids)] = 1
                batch[f"{side}_position"][row, :len(ids)] = np.arange(len(ids))
        return batch

    def eval_split(self, final):
        return "validation"

    def evaluators(self, final):
        e = self.config.eval
        out = [("loss", {"split": "validation"})]
        limit = int(e.split_examples) if final else int(e.bleu_examples)
        if final or limit > 0:
            split = e.split if final else e.bleu_split
            out.append(("bleu", {"split": split, "limit": limit, "prefix": split if final else f"{split}_subset"}))
        out.append(("heatmaps", {"split": e.bleu_split}))
        return out


class LanguageModelTask(Task):
    name = "lm"
    groups = ("decoder_self",)
    can_shard_sequence = True
    model_class = models.DecoderOnly
    sides = (Side("target", "inputs", "segmentation", "position", aligned_tokens=("targets",),
                  aligned=("loss_mask",), needs_segmentation=False),)
    group_sides = {"decoder_self": ("target", "target")}
    causal_side, causal_shift = "target", 0

    def build_data(self, workdir, process_index, process_count):
        import data as data_lib

        return data_lib.build_synthetic(self.config.data, seed=int(self.config.seed), process_index=process_index,
                                        process_count=process_count)

    def create_model(self, cfg, rngs):
        return models.DecoderOnly(cfg, rngs=rngs)

    def forward(self, model, batch, *, deterministic, return_stats=False, interventions=None):
        return model(batch["inputs"], segmentation=batch.get("segmentation"), position=batch.get("position"),
                     deterministic=deterministic, return_stats=return_stats, interventions=interventions)

    def real_targets(self, batch):
        w = (batch["targets"] != self.config.model.get("pad_id", 0)).astype(jnp.float32)
        if "segmentation" in batch:
            w = w * (batch["segmentation"] > 0)
        return w

    def loss_weights(self, batch):
        return self.real_targets(batch) if self.config.train.loss_on == "all" else self.eval_weights(batch)

    def eval_weights(self, batch):
        """The task's answer positions: evaluation scores these whatever ``train.loss_on`` is."""
        w = batch["loss_mask"].astype(jnp.float32)
        if "segmentation" in batch:
            w = w * (batch["segmentation"] > 0)
        return w

    def tokens(self, batch):
        if "segmentation" in batch:
            return jnp.sum(batch["segmentation"] > 0)
        return jnp.asarray(batch["inputs"].size)

    def visible_keys(self, batch):
        tokens = batch["inputs"]
        pos = batch.get("position")
        if pos is None:
            pos = jnp.broadcast_to(jnp.arange(tokens.shape[1]), tokens.shape)
        return {"decoder_self": (pos + 1).astype(jnp.float32)[:, None, :]}

    def eval_batches(self, data, split):
        return list(data.eval_batches())


class ClassificationTask(Task):
    """Sequence classification; the logits are [B, 1, C] (one prediction per sequence) so the loss, accuracy
    and sequence accuracy are the sequence tasks' with T = 1."""

    name = "classification"
    groups = ("encoder_self", "pool")
    model_class = models.EncoderClassifier
    sides = (Side("source", "inputs", "inputs_segmentation", "inputs_position"),)
    group_sides = {"encoder_self": ("source", "source"), "pool": ("pooled", "source")}
    logits_side = "pooled"  # one prediction per sequence, from the pooling query
    splits = ("train", "validation", "test")

    def real_positions(self, batch, cfg):
        real = super().real_positions(batch, cfg)
        return dict(real, pooled=real["source"].any(axis=1, keepdims=True))

    def attention_modules(self, model):
        return {**super().attention_modules(model), ("pool", 0): model.pool}

    def build_data(self, workdir, process_index, process_count):
        import data as data_lib

        data = data_lib.build_classification(self.config.data, workdir=workdir, seed=int(self.config.seed),
                                             process_index=process_index, process_count=process_count)
        self.num_classes = data.num_classes
        return data

    def create_model(self, cfg, rngs):
        return models.EncoderClassifier(cfg, self.num_classes, rngs=rngs)

    def forward(self, model, batch, *, deterministic, return_stats=False, interventions=None):
        out = model(batch["inputs"], inputs_segmentation=batch["inputs_segmentation"], deterministic=deterministic,
                    return_stats=return_stats, interventions=interventions)
        return (out[0][:, None], out[1]) if return_stats else out[:, None]

    def targets(self, batch):
        return batch["label"][:, None]

    def loss_weights(self, batch):
        return jnp.any(batch["inputs_segmentation"] > 0, axis=-1, keepdims=True).astype(jnp.float32)

    def tokens(self, batch):
        return jnp.sum(batch["inputs_segmentation"] > 0)

    def visible_keys(self, batch):
        seg = batch["inputs_segmentation"]
        return {"encoder_self": metrics_lib.same_segment_count(seg, seg),
                "pool": jnp.sum(seg > 0, axis=-1).astype(jnp.float32)[:, None, None]}

    def check_config(self):
        if not self.config.model.num_encoder_layers:
            return "config.model.num_encoder_layers=0; the classification task needs an encoder (>= 1 layer)"
        return None

    def evaluators(self, final):
        if final:
            return [("loss", {"split": "test"}), ("loss", {"split": "validation"})]
        return [("loss", {"split": "validation"})]


TASKS: dict[str, type[Task]] = {t.name: t for t in (TranslationTask, LanguageModelTask, ClassificationTask)}


def task_of(model: nnx.Module, config: Optional[ml_collections.ConfigDict] = None) -> Task:
    """The task that trains ``model`` (found by its class), with ``config`` (None: tools that only read the
    task's batch description)."""
    for t in TASKS.values():
        if isinstance(model, t.model_class):
            return t(config)
    raise ValueError(f"no task trains a {type(model).__name__}; the tasks train "
                     f"{', '.join(t.model_class.__name__ for t in TASKS.values())}")


def get_task(config: ml_collections.ConfigDict) -> Task:
    """The task object of ``config.task``."""
    if config.task not in TASKS:
        raise ConfigError(f"config.task={config.task!r}; expected one of {tuple(TASKS)}")
    return TASKS[config.task](config)
