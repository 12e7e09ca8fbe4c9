"""Synthetic tasks are correct by construction, seeded, resumable and sharded across hosts."""
import numpy as np
import pytest

import data
from data import synthetic
from data.tokenizer import BOS_ID, EOS_ID


def make(task, **overrides):
    cfg = data.default_synthetic_config()
    cfg.update(dict(task=task, batch_multiple=2, batch_size=8, prefetch=0))
    cfg.update(overrides)
    return data.build_synthetic(cfg, seed=7)


def answer(inputs_row, mask_row, targets_row):
    """(items, sep position, answer targets) of one copy/reverse/sort row."""
    sep = int(np.flatnonzero(inputs_row == synthetic.SEP_ID)[0])
    return inputs_row[1:sep], sep, targets_row[mask_row > 0]


@pytest.mark.parametrize("task, transform", [("copy", lambda x: x), ("reverse", lambda x: x[::-1]),
                                             ("sort", np.sort)])
def test_seq2seq_tasks(task, transform):
    ds = make(task, seq_len=40, min_items=3, max_items=12)
    b = ds.batch(0)
    assert b["inputs"].shape == b["targets"].shape == b["loss_mask"].shape == (8, 40)
    assert b["inputs"].dtype == np.int32 and b["loss_mask"].dtype == np.float32
    for r in range(8):
        inp, tgt, mask = b["inputs"][r], b["targets"][r], b["loss_mask"][r]
        items, sep, ans = answer(inp, mask, tgt)
        assert inp[0] == BOS_ID and 3 <= len(items) <= 12 and items.min() >= synthetic.FIRST_TOKEN
        np.testing.assert_array_equal(ans, transform(items))
        n = len(items)
        np.testing.assert_array_equal(np.flatnonzero(mask), np.arange(sep, sep + n))
        np.testing.assert_array_equal(tgt[:2 * n + 2], np.append(inp[1:2 * n + 2], EOS_ID))  # shifted sequence
        assert not inp[2 * n + 2:].any() and not tgt[2 * n + 2:].any()  # padding


def test_mqar_answers_are_the_values_bound_to_the_queried_keys():
    ds = make("mqar", vocab_size=200, seq_len=64, mqar_num_kv_pairs=8)
    b = ds.batch(3)
    half = (200 - synthetic.FIRST_TOKEN) // 2
    for r in range(8):
        inp, tgt, mask = b["inputs"][r], b["targets"][r], b["loss_mask"][r]
        keys, values = inp[0:16:2], inp[1:16:2]
        assert len(set(keys)) == 8 and keys.max() < synthetic.FIRST_TOKEN + half <= values.min()
        bound = dict(zip(keys.tolist(), values.tolist()))
        queries = np.flatnonzero(mask)
        assert len(queries) == 8 and queries.min() >= 16 and np.all((queries - 16) % 2 == 0)
        assert sorted(inp[queries].tolist()) == sorted(keys.tolist())  # every key queried once
        for t in queries:
            assert tgt[t] == bound[int(inp[t])]
        assert not tgt[mask == 0].any()


def test_induction_repeat_is_predictable_from_the_first_occurrence():
    ds = make("induction", vocab_size=50, seq_len=48, induction_segment_len=6)
    b = ds.batch(1)
    for r in range(8):
        inp, tgt, mask = b["inputs"][r], b["targets"][r], b["loss_mask"][r]
        seq = np.append(inp, tgt[-1])
        np.testing.assert_array_equal(tgt, seq[1:])
        positions = np.flatnonzero(mask)
        assert len(positions) == 5 and np.all(np.diff(positions) == 1)
        for t in positions:
            current = inp[t]
            earlier = np.flatnonzero(inp[:t] == current)
            assert len(earlier) == 1, "the cue token must occur exactly once before"
            assert inp[earlier[0] + 1] == tgt[t], "the answer is what followed the cue the first time"


def test_batches_are_seeded_and_eval_is_a_separate_stream():
    a, b = make("copy"), make("copy")
    assert a.describe().startswith("data: synthetic copy (4-16 items), vocab 64")
    np.testing.assert_array_equal(a.batch(5)["inputs"], b.batch(5)["inputs"])
    assert not np.array_equal(a.batch(5)["inputs"], a.batch(6)["inputs"])
    evals = a.eval_batches()
    assert len(evals) == 8 and all(not np.array_equal(e["inputs"], a.batch(i)["inputs"]) for i, e in
                                   enumerate(evals))


def test_iterator_state_restores_exactly():
    it = make("mqar", vocab_size=100, prefetch=2).train_iter()
    for _ in range(3):
        next(it)
    state = it.get_state()
    want = [next(it)["inputs"] for _ in range(3)]
    again = make("mqar", vocab_size=100, prefetch=2).train_iter()
    again.set_state(state)
    for w in want:
        np.testing.assert_array_equal(next(again)["inputs"], w)


def test_hosts_split_the_global_batch():
    cfg = data.default_synthetic_config()
    cfg.update(dict(task="sort", batch_multiple=2, batch_size=8, prefetch=0))
    whole = data.build_synthetic(cfg, seed=1).batch(0)
    parts = [data.build_synthetic(cfg, seed=1, process_index=p, process_count=2).batch(0) for p in range(2)]
    np.testing.assert_array_equal(np.concatenate([p["inputs"] for p in parts]), whole["inputs"])


@pytest.mark.parametrize("overrides, match", [
    (dict(task="addition"), "data.task='addition'; expected one of"),
    (dict(task="revers"), "did you mean 'reverse'"),
    (dict(task="copy", max_items=40, seq_len=64), "exceeds seq_len"),
    (dict(task="mqar", mqar_num_kv_pairs=20, seq_len=64), "4 \\* mqar_num_kv_pairs"),
    (dict(task="mqar", vocab_size=12, mqar_num_kv_pairs=8), "leaves 3 keys"),
    (dict(task="induction", induction_segment_len=40, seq_len=64), "2 \\* it <= seq_len"),
    (dict(vocab_size=5), "vocab_size must be >= 7"),
    (dict(batch_size=7), "divisible by batch_multiple 2"),
    (dict(num_pairs=3), "unknown synthetic data config field"),
])
def test_config_errors(overrides, match):
    with pytest.raises(data.DataError, match=match):
        make(**{"task": "copy", **overrides})
