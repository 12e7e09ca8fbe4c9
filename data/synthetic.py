"""Synthetic sequence tasks for attention research, generated on the fly from a seed.

Each batch is decoder-only: ``inputs [B, T]``, ``targets [B, T]`` (int32) and ``loss_mask [B, T]`` (float32,
1 where the target is part of the answer). Token ids: PAD 0, EOS 1, BOS 2 (UNK 3 unused), SEP 4; task tokens
are ``FIRST_TOKEN = 5 .. vocab_size - 1``.

- ``copy`` / ``reverse`` / ``sort``: ``BOS x_1..x_n SEP y_1..y_n EOS`` with y = x, reversed x, or sorted x
  (n uniform in [min_items, max_items]); inputs = sequence[:-1], targets = sequence[1:], padded with PAD to
  T; the loss mask covers the targets y_1..y_n.
- ``mqar`` (multi-query associative recall, Arora et al. 2023, "Zoology"): ``k_1 v_1 .. k_N v_N`` with N
  distinct keys from the lower half of the task tokens and N distinct values from the upper half, then a
  query region in which every key appears once at an even offset (gaps drawn from Zoology's power law with
  exponent ``mqar_power_a``) and all other positions hold random task tokens. At a query key's position the
  target is the value bound to that key and the mask is 1; every other target is PAD with mask 0.
- ``induction``: ``induction_layout`` "segment": random task tokens with one segment of
  ``induction_segment_len`` distinct tokens that occur nowhere else, repeated later at a random offset.
  "repeat": ``BOS`` then a block of n distinct random task tokens (n uniform in [induction_segment_len // 2,
  induction_segment_len], per row) repeated until the sequence is full, so every token after the first block
  is predictable from context but the period differs between rows (no fixed-offset shortcut). inputs/targets
  are the shifted sequence; the mask covers the targets inside each repeat after its first token, which an
  induction head predicts by copying what followed the current token at its previous occurrence.

Batch i of the training stream is a pure function of (seed, i), so the iterator state is just the index.
Hosts generate the same global batch and keep their rows.
"""
from __future__ import annotations

import dataclasses

import ml_collections
import numpy as np

from data import loader
from data.errors import DataError, did_you_mean
from data.tokenizer import BOS_ID, EOS_ID

SEP_ID = 4
FIRST_TOKEN = 5
TASKS = ("copy", "reverse", "sort", "mqar", "induction")
INDUCTION_LAYOUTS = ("segment", "repeat")

_TRAIN_STREAM, _EVAL_STREAM = 0, 1


def default_synthetic_config() -> ml_collections.ConfigDict:
    """Default data config for the synthetic tasks; every field is documented inline."""
    c = ml_collections.ConfigDict()
    c.task = "copy"  # copy | reverse | sort | mqar | induction
    c.vocab_size = 64  # total ids including the 5 reserved ones
    c.seq_len = 64  # T of inputs/targets
    c.batch_size = 32  # global rows per batch
    c.batch_multiple = 0  # batch_size must divide by this; 0 = jax.device_count()
    c.min_items = 4  # copy/reverse/sort: fewest items to process
    c.max_items = 16  # copy/reverse/sort: most items (2 * max_items + 2 <= seq_len)
    c.mqar_num_kv_pairs = 8  # mqar: key-value pairs, all queried (4 * pairs <= seq_len)
    c.mqar_power_a = 0.01  # mqar: power-law exponent of the query gaps (1.0 = uniform)
    c.induction_segment_len = 8  # induction: length of the repeated segment
    c.induction_layout = "segment"  # induction: "segment" (one repeat among random tokens) or "repeat" (a block tiled)
    c.num_eval_batches = 8  # size of the fixed evaluation set, in batches
    c.prefetch = 2  # batches prepared ahead in a background thread
    return c


def _uniform_tokens(rng: np.random.Generator, shape, vocab_size: int) -> np.ndarray:
    return rng.integers(FIRST_TOKEN, vocab_size, size=shape, dtype=np.int64)


def _seq2seq_batch(rng, cfg, rows: int, transform) -> dict[str, np.ndarray]:
    T = cfg.seq_len
    inputs = np.zeros((rows, T), np.int32)
    targets = np.zeros((rows, T), np.int32)
    mask = np.zeros((rows, T), np.float32)
    lengths = rng.integers(cfg.min_items, cfg.max_items + 1, size=rows)
    for r, n in enumerate(lengths):
        x = _uniform_tokens(rng, n, cfg.vocab_size)
        seq = np.concatenate([[BOS_ID], x, [SEP_ID], transform(x), [EOS_ID]])
        inputs[r, :len(seq) - 1] = seq[:-1]
        targets[r, :len(seq) - 1] = seq[1:]
        mask[r, n + 1:2 * n + 1] = 1.0  # targets y_1..y_n sit at input positions n+1 .. 2n
    return {"inputs": inputs, "targets": targets, "loss_mask": mask}


def _mqar_batch(rng, cfg, rows: int) -> dict[str, np.ndarray]:
    T, n_pairs = cfg.seq_len, cfg.mqar_num_kv_pairs
    half = (cfg.vocab_size - FIRST_TOKEN) // 2
    context = 2 * n_pairs
    space = (T - context) // 2
    p = cfg.mqar_power_a * np.arange(1, space + 1) ** (cfg.mqar_power_a - 1)
    p = p / p.sum()
    inputs = _uniform_tokens(rng, (rows, T), cfg.vocab_size).astype(np.int32)
    targets = np.zeros((rows, T), np.int32)
    mask = np.zeros((rows, T), np.float32)
    for r in range(rows):
        keys = FIRST_TOKEN + rng.choice(half, size=n_pairs, replace=False)
        values = FIRST_TOKEN + half + rng.choice(half, size=n_pairs, replace=False)
        inputs[r, 0:context:2] = keys
        inputs[r, 1:context:2] = values
        query_pos = context + 2 * rng.choice(space, size=n_pairs, replace=False, p=p)
        inputs[r, query_pos] = keys
        targets[r, query_pos] = values
        mask[r, query_pos] = 1.0
    return {"inputs": inputs, "targets": targets, "loss_mask": mask}


def _segment_row(rng, cfg) -> tuple[np.ndarray, int, int]:
    """One "segment" row: T + 1 tokens and the [start, stop) of its masked targets."""
    T, m = cfg.seq_len, cfg.induction_segment_len
    segment = FIRST_TOKEN + rng.choice(cfg.vocab_size - FIRST_TOKEN, size=m, replace=False)
    others = np.setdiff1d(np.arange(FIRST_TOKEN, cfg.vocab_size), segment)
    seq = np.concatenate([[BOS_ID], rng.choice(others, size=T)])
    first = int(rng.integers(1, T + 2 - 2 * m))  # first occurrence at [first, first + m)
    second = int(rng.integers(first + m, T + 2 - m))  # repeat at [second, second + m)
    seq[first:first + m] = segment
    seq[second:second + m] = segment
    return seq, second, second + m - 1  # targets seq[second + 1 .. second + m - 1]


def _repeat_row(rng, cfg) -> tuple[np.ndarray, int, int]:
    """One "repeat" row: T + 1 tokens and the [start, stop) of its masked targets."""
    T, m = cfg.seq_len, cfg.induction_segment_len
    n = int(rng.integers(max(2, m // 2), m + 1))
    block = FIRST_TOKEN + rng.choice(cfg.vocab_size - FIRST_TOKEN, size=n, replace=False)
    seq = np.concatenate([[BOS_ID], np.tile(block, T // n + 1)[:T]])
    return seq, n + 1, T  # input x_1 of the first repeat sits at position n + 1


def _induction_batch(rng, cfg, rows: int) -> dict[str, np.ndarray]:
    T = cfg.seq_len
    row = _repeat_row if cfg.induction_layout == "repeat" else _segment_row
    inputs = np.zeros((rows, T), np.int32)
    targets = np.zeros((rows, T), np.int32)
    mask = np.zeros((rows, T), np.float32)
    for r in range(rows):
        seq, start, stop = row(rng, cfg)
        inputs[r] = seq[:-1]
        targets[r] = seq[1:]
        mask[r, start:stop] = 1.0
    return {"inputs": inputs, "targets": targets, "loss_mask": mask}


_GENERATORS = {
    "copy": lambda rng, cfg, rows: _seq2seq_batch(rng, cfg, rows, lambda x: x),
    "reverse": lambda rng, cfg, rows: _seq2seq_batch(rng, cfg, rows, lambda x: x[::-1]),
    "sort": lambda rng, cfg, rows: _seq2seq_batch(rng, cfg, rows, np.sort),
    "mqar": _mqar_batch,
    "induction": _induction_batch,
}


def validate_synthetic_config(cfg: ml_collections.ConfigDict) -> None:
    """Raises DataError naming the first impossible setting or unknown field."""
    unknown = sorted(set(cfg.keys()) - set(default_synthetic_config().keys()))
    if unknown:
        raise DataError(f"unknown synthetic data config field(s) {unknown}; the fields are those of "
                        f"data.default_synthetic_config(): {sorted(default_synthetic_config().keys())}")
    if cfg.task not in TASKS:
        raise DataError(f"data.task={cfg.task!r}; expected one of {TASKS}{did_you_mean(cfg.task, TASKS)}")
    n_task = cfg.vocab_size - FIRST_TOKEN
    if n_task < 2:
        raise DataError(f"vocab_size must be >= {FIRST_TOKEN + 2} (ids < {FIRST_TOKEN} are reserved); "
                        f"got {cfg.vocab_size}")
    if cfg.seq_len < 4 or cfg.batch_size < 1:
        raise DataError(f"need seq_len >= 4 and batch_size >= 1; got {cfg.seq_len}, {cfg.batch_size}")
    if cfg.task in ("copy", "reverse", "sort"):
        if not 1 <= cfg.min_items <= cfg.max_items:
            raise DataError(f"need 1 <= min_items <= max_items; got {cfg.min_items}, {cfg.max_items}")
        if 2 * cfg.max_items + 2 > cfg.seq_len:
            raise DataError(f"{cfg.task}: 2 * max_items + 2 = {2 * cfg.max_items + 2} exceeds seq_len "
                            f"{cfg.seq_len}")
    if cfg.task == "mqar":
        if cfg.mqar_num_kv_pairs < 1 or 4 * cfg.mqar_num_kv_pairs > cfg.seq_len:
            raise DataError(f"mqar: need 1 <= mqar_num_kv_pairs and 4 * mqar_num_kv_pairs <= seq_len; got "
                            f"{cfg.mqar_num_kv_pairs} pairs, seq_len {cfg.seq_len}")
        if n_task // 2 < cfg.mqar_num_kv_pairs:
            raise DataError(f"mqar: vocab_size {cfg.vocab_size} leaves {n_task // 2} keys; need at least "
                            f"mqar_num_kv_pairs = {cfg.mqar_num_kv_pairs}")
        if cfg.mqar_power_a <= 0:
            raise DataError(f"mqar_power_a must be > 0; got {cfg.mqar_power_a}")
    if cfg.task == "induction":
        m = cfg.induction_segment_len
        if m < 2 or 2 * m > cfg.seq_len:
            raise DataError(f"induction: need 2 <= induction_segment_len and 2 * it <= seq_len; got {m}, "
                            f"seq_len {cfg.seq_len}")
        if n_task <= m:
            raise DataError(f"induction: vocab_size {cfg.vocab_size} leaves {n_task} task tokens; need more "
                            f"than induction_segment_len = {m}")
        if cfg.induction_layout not in INDUCTION_LAYOUTS:
            raise DataError(f"data.induction_layout={cfg.induction_layout!r}; expected one of {INDUCTION_LAYOUTS}"
                            f"{did_you_mean(cfg.induction_layout, INDUCTION_LAYOUTS)}")


@dataclasses.dataclass
class SyntheticData:
    """A synthetic task: an infinite seeded training stream and a fixed evaluation set."""

    config: ml_collections.ConfigDict
    seed: int
    process_index: int
    process_count: int
    batch_multiple: int

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    @property
    def seq_len(self) -> int:
        return self.config.seq_len

    def _global_batch(self, stream: int, index: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([self.seed, stream, index])
        return _GENERATORS[self.config.task](rng, self.config, self.config.batch_size)

    def _host_rows(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        per_host = self.config.batch_size // self.process_count
        lo = self.process_index * per_host
        return {k: v[lo:lo + per_host] for k, v in batch.items()}

    def batch(self, index: int, *, stream: int = _TRAIN_STREAM) -> dict[str, np.ndarray]:
        """This host's rows of global training batch `index`: inputs/targets/loss_mask [B / hosts, T]."""
        return self._host_rows(self._global_batch(stream, index))

    def train_iter(self):
        """Infinite grain iterator over training batches, with get_state()/set_state()."""
        return loader.indexed_batches(self.batch, self.config.prefetch)

    def describe(self) -> str:
        """One line for the run log."""
        c = self.config
        detail = {"mqar": f"{c.mqar_num_kv_pairs} key-value pairs, power_a {c.mqar_power_a}",
                  "induction": f"{c.induction_layout} layout, segment of {c.induction_segment_len}"}.get(
                      c.task, f"{c.min_items}-{c.max_items} items")
        return (f"data: synthetic {c.task} ({detail}), vocab {c.vocab_size}, seq_len {c.seq_len}, "
                f"global batch {c.batch_size}, {c.num_eval_batches} eval batches")

    def eval_batches(self) -> list[dict[str, np.ndarray]]:
        """The fixed evaluation set: num_eval_batches batches from a stream disjoint from training."""
        return [self.batch(i, stream=_EVAL_STREAM) for i in range(self.config.num_eval_batches)]


def build_synthetic(cfg: ml_collections.ConfigDict, *, seed: int, process_index: int = 0,
                    process_count: int = 1) -> SyntheticData:
    """The synthetic task named by `cfg.task` (see `default_synthetic_config` for the fields)."""
    validate_synthetic_config(cfg)
    multiple = loader.resolve_batch_multiple(cfg.batch_multiple)
    if cfg.batch_size % multiple:
        raise DataError(f"batch_size {cfg.batch_size} must be divisible by batch_multiple {multiple} "
                        f"(the device count, so every device gets the same number of rows)")
    if not 0 <= process_index < process_count:
        raise DataError(f"process_index {process_index} out of range for process_count {process_count}")
    if cfg.batch_size % process_count:
        raise DataError(f"batch_size {cfg.batch_size} must divide by process_count {process_count}")
    return SyntheticData(ml_collections.ConfigDict(cfg.to_dict()), seed, process_index, process_count, multiple)
