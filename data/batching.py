"""Fixed-shape translation batches: packing, length bucketing, and padded evaluation batches.

Every batch is a dict of int32 numpy arrays in the Flax-WMT layout:

    inputs [B, S], targets [B, T]                     token ids, each example ending with EOS, 0-padded
    inputs_segmentation, targets_segmentation         0 = padding, 1, 2, 3... = example within the row
    inputs_position, targets_position                 position within its own example (0 on padding)

Packed rows hold several examples (segments 1, 2, ...); bucketed and evaluation rows hold one (segment 1).
Plans (which examples go into which row and batch) are pure functions of the lengths, the order and the
settings, so a loader can rebuild any epoch's plan from its seed.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from data.errors import DataError
from data.tokenizer import EOS_ID

# Packing keeps this many rows open; an example goes into the first open row with room on both sides.
PACK_OPEN_ROWS = 16


@dataclasses.dataclass(frozen=True)
class EncodedPairs:
    """Token ids of many (source, target) pairs, flat: pair i's source is src[src_offsets[i]:src_offsets[i+1]].

    Ids exclude EOS; batches add it. Effective lengths (with EOS, after truncation) come from `lengths`.
    """

    src: np.ndarray  # [total source tokens] int32
    src_offsets: np.ndarray  # [N + 1] int64
    tgt: np.ndarray  # [total target tokens] int32
    tgt_offsets: np.ndarray  # [N + 1] int64

    @classmethod
    def from_lists(cls, src: list[list[int]], tgt: list[list[int]]) -> "EncodedPairs":
        if len(src) != len(tgt):
            raise ValueError(f"{len(src)} source and {len(tgt)} target sequences")

        def flat(seqs):
            offsets = np.zeros(len(seqs) + 1, np.int64)
            np.cumsum([len(s) for s in seqs], out=offsets[1:])
            values = np.fromiter((t for s in seqs for t in s), np.int32, count=int(offsets[-1]))
            return values, offsets

        (s, so), (t, to) = flat(src), flat(tgt)
        return cls(s, so, t, to)

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    def raw_lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Token counts without EOS: ([N], [N])."""
        return np.diff(self.src_offsets), np.diff(self.tgt_offsets)

    def lengths(self, max_src: int, max_tgt: int) -> tuple[np.ndarray, np.ndarray]:
        """Lengths with EOS, truncated to the maxima: ([N], [N])."""
        s, t = self.raw_lengths()
        return np.minimum(s + 1, max_src), np.minimum(t + 1, max_tgt)

    def source(self, i: int, max_len: int) -> np.ndarray:
        """Source ids of pair i, truncated to max_len - 1, then EOS: [<= max_len]."""
        lo = self.src_offsets[i]
        hi = min(self.src_offsets[i + 1], lo + max_len - 1)
        return np.append(self.src[lo:hi], np.int32(EOS_ID))

    def target(self, i: int, max_len: int) -> np.ndarray:
        lo = self.tgt_offsets[i]
        hi = min(self.tgt_offsets[i + 1], lo + max_len - 1)
        return np.append(self.tgt[lo:hi], np.int32(EOS_ID))

    def subset(self, ids: np.ndarray) -> "EncodedPairs":
        """The pairs `ids`, in that order."""
        src = [self.src[self.src_offsets[i]:self.src_offsets[i + 1]] for i in ids]
        tgt = [self.tgt[self.tgt_offsets[i]:self.tgt_offsets[i + 1]] for i in ids]
        return EncodedPairs.from_lists(src, tgt)


def pack_rows(order: np.ndarray, src_len: np.ndarray, tgt_len: np.ndarray, max_src: int,
              max_tgt: int) -> list[list[int]]:
    """Greedy first-fit packing of examples (taken in `order`) into rows of max_src / max_tgt tokens.

    src_len / tgt_len: [N] lengths with EOS, each <= its maximum. Returns rows of example ids; a row is closed
    when PACK_OPEN_ROWS newer rows are open.
    """
    rows: list[list[int]] = []
    open_rows: list[tuple[list[int], list[int]]] = []  # (ids, [src room, tgt room])
    for i in order.tolist():
        s, t = int(src_len[i]), int(tgt_len[i])
        for ids, room in open_rows:
            if s <= room[0] and t <= room[1]:
                ids.append(i)
                room[0] -= s
                room[1] -= t
                break
        else:
            if len(open_rows) == PACK_OPEN_ROWS:
                rows.append(open_rows.pop(0)[0])
            open_rows.append(([i], [max_src - s, max_tgt - t]))
    rows.extend(ids for ids, _ in open_rows)
    return rows


def bucket_lengths(boundaries, max_src: int, max_tgt: int) -> list[int]:
    """Sorted bucket lengths: the boundaries below max(max_src, max_tgt), plus that maximum."""
    top = max(max_src, max_tgt)
    bad = [b for b in boundaries if not isinstance(b, (int, np.integer)) or b <= 0]
    if bad:
        raise DataError(f"bucket_boundaries must be positive ints; got {tuple(boundaries)}")
    return sorted({int(b) for b in boundaries if b < top} | {top})


def bucket_batch_sizes(lengths: list[int], batch_tokens: int, multiple: int) -> list[int]:
    """Rows per batch for each bucket length: batch_tokens // length, rounded down to a multiple (>= 1x)."""
    return [max(multiple, (batch_tokens // length) // multiple * multiple) for length in lengths]


def bucket_plan(order: np.ndarray, src_len: np.ndarray, tgt_len: np.ndarray, lengths: list[int],
                sizes: list[int], rng: np.random.Generator) -> list[tuple[int, list[int]]]:
    """Batches (bucket index, example ids): examples in `order` grouped by the smallest bucket length that
    holds both sides, cut into full batches (an incomplete last batch per bucket is left out), shuffled."""
    need = np.maximum(src_len, tgt_len)[order]
    bucket_of = np.searchsorted(np.asarray(lengths), need, side="left")
    batches = []
    for k, size in enumerate(sizes):
        ids = order[bucket_of == k]
        for start in range(0, len(ids) - size + 1, size):
            batches.append((k, ids[start:start + size].tolist()))
    perm = rng.permutation(len(batches))
    return [batches[j] for j in perm]


def _empty_batch(rows: int, src_len: int, tgt_len: int) -> dict[str, np.ndarray]:
    z = lambda n: np.zeros((rows, n), np.int32)  # noqa: E731
    return {"inputs": z(src_len), "targets": z(tgt_len), "inputs_segmentation": z(src_len),
            "targets_segmentation": z(tgt_len), "inputs_position": z(src_len), "targets_position": z(tgt_len)}


def packed_batch(rows: list[list[int]], pairs: EncodedPairs, max_src: int, max_tgt: int) -> dict[str, np.ndarray]:
    """A packed batch: [len(rows), max_src] inputs and [len(rows), max_tgt] targets, examples as segments."""
    batch = _empty_batch(len(rows), max_src, max_tgt)
    for r, ids in enumerate(rows):
        for side, get, max_len in (("inputs", pairs.source, max_src), ("targets", pairs.target, max_tgt)):
            pos = 0
            for seg, i in enumerate(ids, start=1):
                tokens = get(i, max_len)
                n = len(tokens)
                if pos + n > max_len:
                    raise ValueError(f"row {r} overflows {side}: {pos + n} > {max_len} tokens")
                batch[side][r, pos:pos + n] = tokens
                batch[f"{side}_segmentation"][r, pos:pos + n] = seg
                batch[f"{side}_position"][r, pos:pos + n] = np.arange(n, dtype=np.int32)
                pos += n
    return batch


def padded_batch(ids: list[int], pairs: EncodedPairs, src_len: int, tgt_len: int,
                 rows: int | None = None) -> dict[str, np.ndarray]:
    """One example per row ([rows, src_len], [rows, tgt_len]); rows past len(ids) are all padding."""
    return packed_batch([[i] for i in ids] + [[]] * ((rows or len(ids)) - len(ids)), pairs, src_len, tgt_len)
