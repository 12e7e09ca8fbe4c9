"""grain pipelines with checkpointable iterator state.

`EpochBatches` is an infinite `grain.IterDataset` of batches built from per-epoch plans: `plan(epoch)` returns
that epoch's list of global batch specs (a pure function of the seed and the epoch), `make(spec)` builds this
host's part of the batch. Its iterator state is ``{"epoch", "batch", "fingerprint"}`` (JSON-serializable, as
grain's orbax integration expects), so restoring rebuilds one epoch plan and continues exactly where the
saved run was: a resumed run sees the same batches as an uninterrupted one. `set_state` rejects a state
whose fingerprint (a hash of the data settings and seed) differs from the pipeline's.

`indexed_batches` serves random-access batch streams (the synthetic tasks): batch i is a pure function of i,
and the iterator state is grain's own ``{"next_index"}``.
"""
from __future__ import annotations

import atexit
import sys
import weakref
from collections.abc import Callable
from typing import Any

import grain

from data.errors import DataError

Batch = dict[str, Any]


class EpochBatches(grain.IterDataset):
    """Infinite stream: epoch 0's batches in plan order, then epoch 1's, ..."""

    def __init__(self, plan: Callable[[int], list], make: Callable[[Any], Batch], fingerprint: str):
        super().__init__()
        self._plan = plan
        self._make = make
        self._fingerprint = fingerprint
        if not plan(0):
            raise DataError("the training split yields no complete batch; lower batch_size / batch_tokens or "
                            "use more data")

    def __iter__(self) -> "_EpochBatchesIterator":
        return _EpochBatchesIterator(self._plan, self._make, self._fingerprint)

    def __str__(self) -> str:
        return f"EpochBatches(fingerprint={self._fingerprint})"


class _EpochBatchesIterator(grain.DatasetIterator):
    def __init__(self, plan, make, fingerprint):
        super().__init__()
        self._plan_fn, self._make, self._fingerprint = plan, make, fingerprint
        self._epoch, self._batch = 0, 0
        self._plan_epoch, self._plan = -1, []

    def _epoch_plan(self) -> list:
        if self._plan_epoch != self._epoch:
            self._plan, self._plan_epoch = self._plan_fn(self._epoch), self._epoch
        return self._plan

    def __next__(self) -> Batch:
        plan = self._epoch_plan()
        if self._batch >= len(plan):
            self._epoch, self._batch = self._epoch + 1, 0
            plan = self._epoch_plan()
        spec = plan[self._batch]
        self._batch += 1
        return self._make(spec)

    def get_state(self) -> dict[str, Any]:
        return {"epoch": self._epoch, "batch": self._batch, "fingerprint": self._fingerprint}

    def set_state(self, state: dict[str, Any]) -> None:
        if state.get("fingerprint") != self._fingerprint:
            raise DataError(f"data iterator state was saved with fingerprint {state.get('fingerprint')!r}, but "
                            f"this pipeline has {self._fingerprint!r}: the data config or seed changed, so the "
                            f"saved position does not identify the same batches")
        epoch, batch = int(state["epoch"]), int(state["batch"])
        if epoch < 0 or batch < 0:
            raise DataError(f"invalid data iterator state {state}")
        self._epoch, self._batch = epoch, batch

    def __str__(self) -> str:
        return f"EpochBatchesIterator(epoch={self._epoch}, batch={self._batch})"


def resolve_batch_multiple(batch_multiple: int) -> int:
    """What global batch sizes must divide by: `batch_multiple`, or the number of devices when it is 0."""
    if batch_multiple < 0:
        raise DataError(f"batch_multiple must be >= 0 (0 = device count); got {batch_multiple}")
    if batch_multiple:
        return batch_multiple
    import jax  # only here: the data package itself does not need jax

    return jax.device_count()


def epoch_iterator(plan: Callable[[int], list], make: Callable[[Any], Batch], fingerprint: str,
                   prefetch: int) -> grain.DatasetIterator:
    """A checkpointable iterator over `EpochBatches`, with `prefetch` batches prepared in a background thread."""
    ds: grain.IterDataset = EpochBatches(plan, make, fingerprint)
    if prefetch > 0:
        ds = grain.experimental.ThreadPrefetchIterDataset(ds, prefetch_buffer_size=prefetch)
    return _close_at_exit(iter(ds))


def indexed_batches(make: Callable[[int], Batch], prefetch: int) -> grain.DatasetIterator:
    """A checkpointable iterator over batches make(0), make(1), ... (grain MapDataset, state next_index)."""
    ds = grain.MapDataset.range(0, sys.maxsize).map(make)
    options = grain.ReadOptions(num_threads=1 if prefetch > 0 else 0, prefetch_buffer_size=max(prefetch, 1))
    return _close_at_exit(iter(ds.to_iter_dataset(options)))


def _close_at_exit(it: grain.DatasetIterator) -> grain.DatasetIterator:
    """Closes the iterator before interpreter teardown: grain's prefetch iterators close again from __del__,
    which fails noisily once their modules are torn down, so the second close becomes a no-op."""
    ref = weakref.ref(it)

    def close() -> None:
        live = ref()
        if live is not None:
            live.close()
            live.close = lambda: None

    atexit.register(close)
    return it
