"""Packing and bucketing invariants: segments separate examples, positions restart, rows never overflow."""
import numpy as np
import pytest

from data import batching
from data.tokenizer import EOS_ID


@pytest.fixture(scope="module")
def pairs():
    rng = np.random.default_rng(0)
    src_len = rng.integers(1, 30, size=200)
    tgt_len = rng.integers(1, 30, size=200)
    # Example i's tokens all equal 10 + i, so a batch tells which example every token came from.
    src = [[10 + i] * int(n) for i, n in enumerate(src_len)]
    tgt = [[10 + i] * int(n) for i, n in enumerate(tgt_len)]
    return batching.EncodedPairs.from_lists(src, tgt)


def check_segments(batch, side, max_len):
    tok, seg, pos = batch[side], batch[f"{side}_segmentation"], batch[f"{side}_position"]
    assert tok.shape[1] == max_len
    for r in range(tok.shape[0]):
        ids = sorted(set(seg[r][seg[r] > 0]))
        assert ids == list(range(1, len(ids) + 1))
        for s in ids:
            where = np.flatnonzero(seg[r] == s)
            assert np.all(np.diff(where) == 1), "a segment must be contiguous"
            np.testing.assert_array_equal(pos[r, where], np.arange(len(where)))  # positions restart at 0
            body = tok[r, where[:-1]]
            assert tok[r, where[-1]] == EOS_ID
            assert len(set(body.tolist())) <= 1, "tokens of two examples share a segment"
        assert np.all(tok[r][seg[r] == 0] == 0) and np.all(pos[r][seg[r] == 0] == 0)


def test_packed_batches_keep_examples_in_their_own_segments(pairs):
    src_len, tgt_len = pairs.lengths(32, 24)
    order = np.random.default_rng(1).permutation(len(pairs))
    rows = batching.pack_rows(order, src_len, tgt_len, 32, 24)
    assert sorted(i for row in rows for i in row) == list(range(len(pairs)))  # each example exactly once
    for row in rows:
        assert src_len[row].sum() <= 32 and tgt_len[row].sum() <= 24
    batch = batching.packed_batch(rows[:8], pairs, 32, 24)
    check_segments(batch, "inputs", 32)
    check_segments(batch, "targets", 24)
    # Segment k of a row is the same example on both sides.
    for r, row in enumerate(rows[:8]):
        for k, i in enumerate(row, start=1):
            assert set(batch["inputs"][r][batch["inputs_segmentation"][r] == k]) <= {10 + i, EOS_ID}
            assert set(batch["targets"][r][batch["targets_segmentation"][r] == k]) <= {10 + i, EOS_ID}


def test_packing_fills_rows_with_short_examples():
    rng = np.random.default_rng(2)
    src_len, tgt_len = rng.integers(2, 11, size=2000), rng.integers(2, 11, size=2000)
    rows = batching.pack_rows(np.arange(2000), src_len, tgt_len, 64, 64)
    fill = max(src_len.sum(), tgt_len.sum()) / (len(rows) * 64)
    assert fill > 0.9, f"packing too loose: {fill:.2f}"


def test_truncation_keeps_eos(pairs):
    long = batching.EncodedPairs.from_lists([[7] * 50], [[8] * 3])
    batch = batching.padded_batch([0], long, 16, 16)
    assert batch["inputs"][0].tolist() == [7] * 15 + [EOS_ID]
    assert batch["targets"][0, :4].tolist() == [8, 8, 8, EOS_ID]


def test_padded_batch_pads_with_empty_rows(pairs):
    batch = batching.padded_batch([3, 4], pairs, 32, 32, rows=4)
    assert batch["inputs"].shape == (4, 32)
    assert batch["inputs_segmentation"][:2].max() == 1 and not batch["inputs_segmentation"][2:].any()


def test_bucket_plan_respects_lengths_budget_and_multiple(pairs):
    lengths = batching.bucket_lengths((8, 16, 64), 32, 32)
    assert lengths == [8, 16, 32]
    sizes = batching.bucket_batch_sizes(lengths, batch_tokens=128, multiple=4)
    assert sizes == [16, 8, 4]
    src_len, tgt_len = pairs.lengths(32, 32)
    plan = batching.bucket_plan(np.arange(len(pairs)), src_len, tgt_len, lengths, sizes,
                                np.random.default_rng(0))
    used = [i for _, ids in plan for i in ids]
    assert len(used) == len(set(used))
    for k, ids in plan:
        assert len(ids) == sizes[k]
        assert np.maximum(src_len[ids], tgt_len[ids]).max() <= lengths[k]
        assert k == 0 or np.maximum(src_len[ids], tgt_len[ids]).min() > lengths[k - 1]
    with pytest.raises(ValueError, match="positive ints"):
        batching.bucket_lengths((0, 8), 16, 16)
