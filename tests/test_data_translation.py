"""build_translation end to end: splits, tokenizer isolation, batches, resumable loader, hosts, TFDS paths."""
import gzip

import numpy as np
import pytest

import data
from data import tokenizer as tokenizer_lib
from data.builders import bible_es_en

KEYS = ("inputs", "targets", "inputs_segmentation", "targets_segmentation", "inputs_position", "targets_position")


@pytest.fixture(scope="module")
def corpus_tsv(tmp_path_factory):
    """600 real verse pairs of the committed corpus as a bring-your-own TSV."""
    rows = bible_es_en.read_pairs(bible_es_en.CORPUS_PATH)[:600]
    path = tmp_path_factory.mktemp("corpus") / "bible.tsv"
    path.write_text("".join(f"{r[3]}\t{r[4]}\n" for r in rows), encoding="utf-8")
    return str(path)


def make_cfg(tmp_path, train, **overrides):
    cfg = data.default_translation_config()
    cfg.update(dict(source="text_files", train_files=train, cache_dir=str(tmp_path / "cache"), vocab_size=300,
                    max_source_len=96, max_target_len=96, batch_size=4, batch_multiple=2, eval_batch_size=4,
                    validation_fraction=0.1, test_fraction=0.1, prefetch=0))
    cfg.update(overrides)
    return cfg


@pytest.fixture(scope="module")
def built(tmp_path_factory, corpus_tsv):
    tmp = tmp_path_factory.mktemp("built")
    return data.build_translation(make_cfg(tmp, corpus_tsv), workdir=str(tmp / "run"), seed=3)


def test_splits_are_disjoint_and_the_tokenizer_sees_only_training_text(tmp_path, corpus_tsv, monkeypatch):
    seen = []
    real_train = tokenizer_lib.train_tokenizer

    def recording_train(texts, *args, **kwargs):
        seen.extend(texts)
        return real_train(seen, *args, **kwargs)

    monkeypatch.setattr(tokenizer_lib, "train_tokenizer", recording_train)
    ds = data.build_translation(make_cfg(tmp_path, corpus_tsv), workdir="", seed=0)
    train, val, test = (set(ds.examples(s)) for s in ("train", "validation", "test"))
    assert train and val and test and not (train & val) and not (train & test) and not (val & test)
    assert len(train) + len(val) + len(test) == 600
    held_out = {s for pair in val | test for s in pair}
    assert seen and not held_out & set(seen), "a validation/test sentence reached tokenizer training"
    assert set(seen) == {s for pair in train for s in pair}


def test_batches_have_the_contract_layout(built):
    batch = next(built.train_iter())
    assert set(batch) == set(KEYS)
    for k in KEYS:
        assert batch[k].dtype == np.int32 and batch[k].shape == (4, 96)
    for side in ("inputs", "targets"):
        seg, tok = batch[f"{side}_segmentation"], batch[side]
        assert np.all((seg == 0) == (tok == data.PAD_ID))
        ends = (seg > 0) & (np.roll(seg, -1, axis=1) != seg)  # last token of each segment
        assert np.all(tok[ends] == data.EOS_ID)


def test_eval_batches_follow_examples_order_and_pad_the_last_batch(built):
    examples = built.examples("test")
    batches = built.eval_batches("test")
    assert len(batches) == -(-len(examples) // 4)
    rows = [r for b in batches for r, seg in zip(b["targets"], b["targets_segmentation"]) if seg.any()]
    assert len(rows) == len(examples)
    decoded = [built.tokenizer.decode(r) for r in rows]
    refs = [ref for _, ref in examples]
    assert all(ref.startswith(d) for d, ref in zip(decoded, refs))  # truncated rows are prefixes
    exact = sum(d == ref for d, ref in zip(decoded, refs))
    assert exact == len(refs) - built.stats["test"]["truncated_target"] > 0.9 * len(refs)
    assert built.stats["test"]["examples"] == len(examples)
    last = batches[-1]
    assert last["inputs"].shape == (4, 96)
    if len(examples) % 4:
        assert not last["inputs_segmentation"][len(examples) % 4:].any()


def test_loader_resumes_exactly_mid_epoch_and_across_epochs(tmp_path, corpus_tsv):
    ds = data.build_translation(make_cfg(tmp_path, corpus_tsv, prefetch=2), workdir="", seed=1)
    per_epoch = ds.stats["batches"]["per_epoch"]
    stop = per_epoch - 3  # restore 3 batches before the epoch boundary, continue past it
    it = ds.train_iter()
    for _ in range(stop):
        next(it)
    state = it.get_state()
    expected = [next(it) for _ in range(6)]
    assert it.get_state()["epoch"] == 1

    fresh = data.build_translation(make_cfg(tmp_path, corpus_tsv, prefetch=2), workdir="", seed=1).train_iter()
    fresh.set_state(state)
    for want in expected:
        got = next(fresh)
        for k in KEYS:
            np.testing.assert_array_equal(got[k], want[k])
    # Epochs are reshuffled: epoch 1 does not replay epoch 0.
    replay = ds.train_iter()
    assert not np.array_equal(next(replay)["inputs"], expected[-1]["inputs"])


def test_state_from_another_seed_or_config_is_rejected(tmp_path, corpus_tsv):
    state = data.build_translation(make_cfg(tmp_path, corpus_tsv), workdir="", seed=1).train_iter().get_state()
    other = data.build_translation(make_cfg(tmp_path, corpus_tsv), workdir="", seed=2).train_iter()
    with pytest.raises(ValueError, match="fingerprint"):
        other.set_state(state)


def test_hosts_get_disjoint_slices_of_the_same_global_batch(tmp_path, corpus_tsv):
    single = next(data.build_translation(make_cfg(tmp_path, corpus_tsv), workdir="", seed=5).train_iter())
    halves = [next(data.build_translation(make_cfg(tmp_path, corpus_tsv), workdir="", seed=5, process_index=p,
                                          process_count=2).train_iter()) for p in range(2)]
    for k in KEYS:
        assert halves[0][k].shape == (2, 96)
        np.testing.assert_array_equal(np.concatenate([h[k] for h in halves]), single[k])


def test_bucketing_gives_few_fixed_shapes_within_the_token_budget(tmp_path, corpus_tsv):
    cfg = make_cfg(tmp_path, corpus_tsv, packing=False, batch_tokens=256, bucket_boundaries=(16, 32))
    ds = data.build_translation(cfg, workdir="", seed=0)
    allowed = {(tuple(i), tuple(t)) for i, t in ds.train_shapes()}
    assert allowed == {((16, 16), (16, 16)), ((8, 32), (8, 32)), ((2, 96), (2, 96))}
    it = ds.train_iter()
    for _ in range(ds.stats["batches"]["per_epoch"]):
        b = next(it)
        assert (b["inputs"].shape, b["targets"].shape) in allowed
        assert b["inputs"].shape[0] % 2 == 0 and b["inputs"].size <= 256
        assert b["inputs_segmentation"].max() == 1  # one example per row
        assert np.all(b["inputs_segmentation"].any(axis=1))  # no empty rows in training batches


def test_separate_vocabularies(tmp_path, corpus_tsv):
    ds = data.build_translation(make_cfg(tmp_path, corpus_tsv, spm_shared=False), workdir=str(tmp_path / "w"),
                                seed=0)
    assert ds.source_tokenizer is not ds.tokenizer
    assert ds.source_tokenizer.vocab_size == ds.tokenizer.vocab_size == 300
    src, ref = ds.examples("test")[0]
    assert ds.tokenizer.decode(ds.eval_batches("test")[0]["targets"][0]) == ref
    assert ds.source_tokenizer.decode(ds.eval_batches("test")[0]["inputs"][0]) == src


def test_tokenizer_is_cached_and_pinned_to_the_workdir(tmp_path, corpus_tsv):
    run = str(tmp_path / "run")
    first = data.build_translation(make_cfg(tmp_path, corpus_tsv), workdir=run, seed=0)
    assert first.stats["tokenizer"]["trained_now"] and first.tokenizer.path.startswith(run)
    again = data.build_translation(make_cfg(tmp_path, corpus_tsv), workdir=str(tmp_path / "run2"), seed=0)
    assert not again.stats["tokenizer"]["trained_now"]  # reused from the cache
    assert "load_encoded_s" in again.stats["timing"]
    with pytest.raises(ValueError, match="fresh --workdir"):
        data.build_translation(make_cfg(tmp_path, corpus_tsv, vocab_size=280), workdir=run, seed=0)


@pytest.mark.parametrize("overrides, match", [
    (dict(source="wmt"), "data.source"),
    (dict(source_lang="en", target_lang="en"), "must differ"),
    (dict(overlong="cut"), "overlong"),
    (dict(max_source_len=1), "max_source_len"),
    (dict(batch_size=3), "batch_size 3 must be divisible by 2"),
    (dict(source="tfds", tfds_name=""), "tfds_name"),
    (dict(source="bible_es_en", source_lang="de"), "bible_es_en has languages"),
    (dict(max_len=64), r"unknown data config field\(s\) \['max_len'\]"),
])
def test_config_errors_are_clear(tmp_path, corpus_tsv, overrides, match):
    with pytest.raises(ValueError, match=match):
        data.build_translation(make_cfg(tmp_path, corpus_tsv, **overrides), workdir="", seed=0)


def test_tfds_wmt14_resolves_and_explains_how_to_prepare(tmp_path, corpus_tsv):
    cfg = make_cfg(tmp_path, corpus_tsv, source="tfds", tfds_name="wmt14_translate/de-en", source_lang="de",
                   tfds_data_dir=str(tmp_path / "tfds"), tfds_download=False)
    with pytest.raises(ValueError, match=r"'wmt14_translate/de-en' is not prepared in .*array_record"):
        data.build_translation(cfg, workdir="", seed=0)
    cfg.tfds_name = "no_such_dataset_xyz"
    with pytest.raises(ValueError, match="no dataset 'no_such_dataset_xyz'"):
        data.build_translation(cfg, workdir="", seed=0)


def test_bible_source_through_tfds_builder(tmp_path, monkeypatch):
    """The default source on a 1,500-verse slice of the committed corpus (the full one takes longer)."""
    rows = bible_es_en.read_pairs(bible_es_en.CORPUS_PATH)[:1500]
    subset = tmp_path / "pairs.tsv.gz"
    subset.write_bytes(gzip.compress(("book\tchapter\tverse\tes\ten\n" + "".join(
        f"{b}\t{c}\t{v}\t{es}\t{en}\n" for b, c, v, es, en in rows)).encode()))
    monkeypatch.setattr(bible_es_en.BibleEsEn, "CORPUS", str(subset))
    cfg = data.default_translation_config()
    cfg.update(dict(cache_dir=str(tmp_path / "cache"), vocab_size=400, batch_multiple=2, batch_size=8,
                    prefetch=0, source_lang="en", target_lang="es"))
    ds = data.build_translation(cfg, workdir=str(tmp_path / "run"), seed=0)
    counts = {s: len(ds.examples(s)) for s in ("train", "validation", "test")}
    assert sum(counts.values()) == 1500 and min(counts.values()) > 0
    by_ref = {(en, es): (b, c) for b, c, v, es, en in rows}
    for split in ("validation", "test"):  # source_lang="en": pairs come back as (en, es)
        assert {bible_es_en.chapter_split(*by_ref[p]) for p in ds.examples(split)} == {split}
    assert next(ds.train_iter())["inputs"].shape == (8, 128)


def test_tfds_split_fields_are_checked_against_the_dataset_splits():
    from data import translation

    class Builder:
        class info:
            full_name = "stub/1.0.0"
            splits = {"train": None, "validation": None, "test": None}

    cfg = data.default_translation_config()
    cfg.validation_split = "train[:5%]+validation"  # TFDS split expressions name existing splits
    translation._check_tfds_splits(Builder, cfg)
    cfg.test_split = "tset"
    with pytest.raises(data.DataError, match=r"^data.test_split='tset': stub/1.0.0 has no split 'tset'; available: "
                                             r"\['test', 'train', 'validation'\]; did you mean 'test'\?$"):
        translation._check_tfds_splits(Builder, cfg)
