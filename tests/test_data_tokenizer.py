"""SentencePiece: fixed special ids, round trips, determinism, caching."""
import numpy as np
import pytest

import data
from data import tokenizer as tok
from data.builders import bible_es_en

SAMPLE = ["¿Qué es esto? «Ñandú» y el pingüino.", "God’s “light” — 3,000 cubits!", "Él dijo: Sea la luz."]


@pytest.fixture(scope="module")
def sentences():
    rows = bible_es_en.read_pairs(bible_es_en.CORPUS_PATH)[:1500]
    return [s for r in rows for s in r[3:]] + SAMPLE


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def trained(request, tmp_path_factory, sentences):
    path = str(tmp_path_factory.mktemp("spm") / "m.model")
    return tok.train_tokenizer(sentences, path, vocab_size=500, model_type=request.param, max_sentences=5000)


def test_special_ids_are_fixed(trained):
    assert (tok.PAD_ID, tok.EOS_ID, tok.BOS_ID, tok.UNK_ID) == (0, 1, 2, 3)
    assert [trained.id_to_piece(i) for i in range(4)] == ["<pad>", "</s>", "<s>", "<unk>"]
    assert trained.vocab_size == 500


def test_round_trip(trained, sentences):
    for text in SAMPLE + sentences[:50]:
        ids = trained.encode(text)
        assert ids and min(ids) >= tok.NUM_SPECIAL_IDS
        assert trained.decode(ids) == text
    assert trained.decode_batch(np.array([trained.encode(SAMPLE[2]) + [tok.EOS_ID]])) == [SAMPLE[2]]


def test_decode_stops_at_eos_and_skips_pad_and_bos(trained):
    ids = trained.encode("Sea la luz.")
    other = trained.encode("Y fué la luz.")
    assert trained.decode([tok.BOS_ID, *ids, tok.EOS_ID, *other]) == "Sea la luz."
    assert trained.decode(np.array([*ids, tok.PAD_ID, tok.PAD_ID])) == "Sea la luz."


def test_training_is_deterministic(tmp_path, sentences):
    a = tok.train_tokenizer(sentences, str(tmp_path / "a.model"), vocab_size=400, max_sentences=2000)
    b = tok.train_tokenizer(sentences, str(tmp_path / "b.model"), vocab_size=400, max_sentences=2000)
    assert open(a.path, "rb").read() == open(b.path, "rb").read()


def test_cache_reuses_and_workdir_pins(tmp_path, sentences):
    calls = []

    def texts():
        calls.append(1)
        return sentences

    kwargs = dict(vocab_size=300, model_type="bpe", max_sentences=3000, character_coverage=1.0)
    key = tok.tokenizer_key("corpus-a", kwargs)
    first, trained = tok.cached_tokenizer(key, "shared", texts, cache_dir=str(tmp_path), workdir=str(tmp_path / "w"),
                                          **kwargs)
    second, trained_again = tok.cached_tokenizer(key, "shared", texts, cache_dir=str(tmp_path), workdir=None,
                                                 **kwargs)
    assert trained and not trained_again and len(calls) == 1
    assert first.encode(SAMPLE[0]) == second.encode(SAMPLE[0])
    other = tok.tokenizer_key("corpus-b", kwargs)
    with pytest.raises(ValueError, match="other data settings"):
        tok.cached_tokenizer(other, "shared", texts, cache_dir=str(tmp_path), workdir=str(tmp_path / "w"), **kwargs)


def test_bad_settings_are_clear(tmp_path, sentences):
    with pytest.raises(ValueError, match="spm_model_type"):
        tok.train_tokenizer(sentences, str(tmp_path / "x.model"), vocab_size=300, model_type="word_piece")
    with pytest.raises(data.DataError, match=r"^data.vocab_size=100000 is too large for the training split: "
                                             r"SentencePiece \(bpe\) can make at most \d+ pieces from its \d+ "
                                             r"sentences; set data.vocab_size <= \d+"):
        tok.train_tokenizer(SAMPLE, str(tmp_path / "x.model"), vocab_size=100000)
    with pytest.raises(ValueError, match="empty training split"):
        tok.train_tokenizer([], str(tmp_path / "x.model"), vocab_size=300)
    with pytest.raises(FileNotFoundError):
        tok.Tokenizer(str(tmp_path / "missing.model"))
