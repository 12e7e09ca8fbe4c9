"""Bring-your-own corpora: file specs, bad input (empty, non-UTF-8, malformed, mismatched, missing, overlong),
BOM / CRLF normalization, and the start-up checks of data.check_config."""
import gzip
import os
import subprocess
import sys

import pytest

import data
from data import text_files


def write(path, lines, *, encoding="utf-8"):
    data_bytes = b"".join((line if isinstance(line, bytes) else line.encode(encoding)) + b"\n" for line in lines)
    if str(path).endswith(".gz"):
        data_bytes = gzip.compress(data_bytes)
    path.write_bytes(data_bytes)
    return str(path)


def read(spec, **kw):
    return text_files.read_parallel(spec, source_lang="es", target_lang="en", **kw)


def test_tsv_and_prefix_specs_read_the_same_pairs(tmp_path):
    pairs = [("hola mundo", "hello world"), ("buenos días", "good morning")]
    tsv = write(tmp_path / "c.tsv", [f"{s}\t{t}" for s, t in pairs])
    write(tmp_path / "c.es", [s for s, _ in pairs])
    write(tmp_path / "c.en.gz", [t for _, t in pairs])  # .gz accepted per side
    got_tsv, counts = read(tsv)
    got_prefix, _ = read(str(tmp_path / "c"))
    assert got_tsv == pairs and got_prefix == pairs
    assert counts == {"lines": 2, "skipped_empty": 0, "skipped_invalid_utf8": 0, "skipped_bad_fields": 0,
                      "bom_stripped": 0, "crlf_lines": 0}


def test_crlf_line_endings_are_stripped_and_counted(tmp_path):
    tsv = write(tmp_path / "c.tsv", [b"uno\tone\r", b"dos\ttwo\r", b"tres\tthree"])
    pairs, counts = read(tsv)
    assert pairs == [("uno", "one"), ("dos", "two"), ("tres", "three")] and counts["crlf_lines"] == 2


def test_byte_order_mark_is_dropped_and_counted(tmp_path):
    tsv = write(tmp_path / "c.tsv", [b"\xef\xbb\xbfuno\tone", "dos\ttwo"])
    write(tmp_path / "c.es", [b"\xef\xbb\xbfuno", "dos"])
    write(tmp_path / "c.en.gz", [b"\xef\xbb\xbfone", "two"])
    for spec, files in ((tsv, 1), (str(tmp_path / "c"), 2)):
        pairs, counts = read(spec)
        assert pairs == [("uno", "one"), ("dos", "two")] and counts["bom_stripped"] == files
    assert text_files.file_identity(tsv, "es", "en", field="f")[0][3:] == ("bom",)


@pytest.mark.parametrize("kind, lines", [
    ("empty", ["uno\tone", "\ttwo", "tres\t  ", "cuatro\tfour"]),
    ("invalid_utf8", ["uno\tone", b"d\xffos\ttwo", b"tres\tth\xc3ree", "cuatro\tfour"]),
    ("bad_fields", ["uno\tone", "dos two", "tres\tthree\textra", "cuatro\tfour"]),
])
def test_bad_lines_are_counted_when_skipped_and_named_when_error(tmp_path, kind, lines):
    tsv = write(tmp_path / "c.tsv", lines)
    pairs, counts = read(tsv, on_bad_line="skip")
    assert pairs == [("uno", "one"), ("cuatro", "four")]  # neighbours keep their partners
    assert counts[f"skipped_{kind}"] == 2 and counts["lines"] == 4
    with pytest.raises(ValueError, match=r"c\.tsv:2"):
        read(tsv, on_bad_line="error")


def test_bad_line_in_one_side_file_skips_the_whole_pair(tmp_path):
    write(tmp_path / "c.es", ["uno", b"\xff\xfe", "tres"])
    write(tmp_path / "c.en", ["one", "two", "three"])
    pairs, counts = read(str(tmp_path / "c"))
    assert pairs == [("uno", "one"), ("tres", "three")] and counts["skipped_invalid_utf8"] == 1


def test_mismatched_line_counts_always_raise(tmp_path):
    write(tmp_path / "c.es", ["uno", "dos", "tres"])
    write(tmp_path / "c.en", ["one", "two"])
    with pytest.raises(ValueError, match="3 lines but .* has 2"):
        read(str(tmp_path / "c"), on_bad_line="skip")


def test_missing_files_name_the_path_and_field(tmp_path):
    with pytest.raises(data.DataError, match="data.train_files.*nope.tsv"):
        read(str(tmp_path / "nope.tsv"), field="data.train_files")
    write(tmp_path / "c.es", ["uno"])
    with pytest.raises(data.DataError, match=r"c\.en"):
        read(str(tmp_path / "c"))


def test_unknown_policy_is_rejected(tmp_path):
    tsv = write(tmp_path / "c.tsv", ["uno\tone"])
    with pytest.raises(ValueError, match="on_bad_line"):
        read(tsv, on_bad_line="ignore")


def text_cfg(tmp_path, train, **overrides):
    cfg = data.default_translation_config()
    cfg.source = "text_files"
    cfg.train_files = train
    cfg.cache_dir = str(tmp_path / "cache")
    cfg.vocab_size = 60
    cfg.batch_multiple = 2
    cfg.batch_size = 2
    cfg.eval_batch_size = 2
    cfg.prefetch = 0
    cfg.update(overrides)
    return cfg


def test_overlong_pairs_are_truncated_or_dropped_and_counted(tmp_path):
    short = [(f"uno dos {i}", f"one two {i}") for i in range(30)]
    long = [(" ".join(["palabra"] * 40), "word"), ("corto", " ".join(["word"] * 40))]
    tsv = write(tmp_path / "c.tsv", [f"{s}\t{t}" for s, t in short + long])
    common = dict(validation_fraction=0.0, test_fraction=0.0, max_source_len=12, max_target_len=12)

    kept = data.build_translation(text_cfg(tmp_path, tsv, overlong="truncate", **common), workdir="", seed=0)
    assert kept.stats["train"]["truncated_source"] == 1 and kept.stats["train"]["truncated_target"] == 1
    assert kept.num_train_examples == 32
    batch = next(kept.train_iter())
    assert batch["inputs"].shape == (2, 12) and batch["targets"].shape == (2, 12)

    dropped = data.build_translation(text_cfg(tmp_path, tsv, overlong="drop", **common), workdir="", seed=0)
    assert dropped.stats["train"]["dropped_overlong"] == 2 and dropped.num_train_examples == 30
    assert dropped.stats["train"]["truncated_source"] == 0


def test_pipeline_reports_skipped_lines_and_errors_on_request(tmp_path):
    lines = [f"frase {i}\tsentence {i}" for i in range(40)] + ["\tvacía", b"mal\xff\tbad"]
    tsv = write(tmp_path / "c.tsv", lines)
    ds = data.build_translation(text_cfg(tmp_path, tsv, validation_fraction=0.0, test_fraction=0.0), workdir="",
                                seed=0)
    assert ds.stats["train"]["skipped_empty"] == 1 and ds.stats["train"]["skipped_invalid_utf8"] == 1
    assert ds.stats["train"]["examples"] == 40
    with pytest.raises(ValueError, match=r"c\.tsv:41: empty sentence"):
        data.build_translation(text_cfg(tmp_path, tsv, on_bad_line="error", cache_dir=str(tmp_path / "c2")),
                               workdir="", seed=0)


def test_check_config_names_missing_sources_and_bad_options(tmp_path):
    tsv = write(tmp_path / "c.tsv", ["uno\tone"])
    data.check_config(text_cfg(tmp_path, tsv))
    with pytest.raises(data.DataError, match=r"^data.validation_files: TSV file '.*val.tsv' does not exist$"):
        data.check_config(text_cfg(tmp_path, tsv, validation_files=str(tmp_path / "val.tsv")))
    with pytest.raises(data.DataError, match=r"^data.test_files: neither '.*t.es' nor"):
        data.check_config(text_cfg(tmp_path, tsv, test_files=str(tmp_path / "t")))
    with pytest.raises(data.DataError, match=r"^data.source='textfiles'; expected one of .*did you mean 'text_files'"):
        data.check_config(text_cfg(tmp_path, tsv, source="textfiles"))
    with pytest.raises(data.DataError, match=r"^data.on_bad_line='skp'; expected one of .*did you mean 'skip'"):
        data.check_config(text_cfg(tmp_path, tsv, on_bad_line="skp"))
    synthetic = data.default_synthetic_config()
    synthetic.task = "copyy"
    with pytest.raises(data.DataError, match=r"^data.task='copyy'; expected one of .*did you mean 'copy'"):
        data.check_config(synthetic)


def test_bad_evaluation_file_fails_before_the_tokenizer_is_trained(tmp_path):
    train = write(tmp_path / "train.tsv", [f"frase {i}\tsentence {i}" for i in range(40)])
    val = write(tmp_path / "val.tsv", ["uno\tone", "dos two"])
    with pytest.raises(data.DataError, match=r"val\.tsv:2: expected 2 tab-separated fields"):
        data.build_translation(text_cfg(tmp_path, train, validation_files=val, on_bad_line="error"), workdir="",
                               seed=0)
    assert not os.path.exists(tmp_path / "cache" / "tokenizers")


def test_describe_counts_what_reading_normalized(tmp_path):
    lines = [b"\xef\xbb\xbffrase 0\tsentence 0\r"] + [f"frase {i}\tsentence {i}\r".encode() for i in range(1, 40)]
    tsv = write(tmp_path / "c.tsv", lines)
    val = write(tmp_path / "v.tsv", ["uno\tone\r"])
    ds = data.build_translation(text_cfg(tmp_path, tsv, validation_files=val, test_fraction=0.0), workdir="",
                                seed=0)
    assert ds.stats["train"]["bom_stripped"] == 1 and ds.stats["train"]["crlf_lines"] == 40
    assert ds.examples("validation") == [("uno", "one")]
    assert "normalized: byte-order mark dropped from 1 file(s), CRLF line endings on 41 line(s)" in ds.describe()
    plain = write(tmp_path / "p.tsv", [f"frase {i}\tsentence {i}" for i in range(40)])
    assert "normalized" not in data.build_translation(text_cfg(tmp_path, plain), workdir="", seed=0).describe()


def test_text_files_never_import_tfds(tmp_path):
    tsv = write(tmp_path / "c.tsv", [f"frase {i}\tsentence {i}" for i in range(40)])
    code = (f"import sys, data; from tests.test_data_text_files import text_cfg; import pathlib; "
            f"ds = data.build_translation(text_cfg(pathlib.Path({str(tmp_path)!r}), {tsv!r}), workdir='', seed=0); "
            f"next(ds.train_iter()); list(ds.eval_batches('validation')); "
            f"assert 'tensorflow_datasets' not in sys.modules, 'tfds imported'")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=root, JAX_PLATFORMS="cpu"))
    assert r.returncode == 0, r.stderr[-2000:]
