"""The head-importance study on a pretrained encoder-decoder checkpoint (a random-weight Marian written with
transformers): measured, recorded and reported end to end, and refused for a decoder-only checkpoint. Skipped
without torch/transformers (the checkpoints are written with them)."""
from __future__ import annotations

import csv
import json
import os

import pytest

pytest.importorskip("torch", reason="needs torch (pip install '.[reference]')")
pytest.importorskip("transformers", reason="needs transformers (pip install '.[reference]')")
pytest.importorskip("safetensors", reason="needs safetensors (pip install '.[pretrained]')")

from pretrained import random_checkpoints  # noqa: E402
from scripts import repro_head_importance  # noqa: E402


def test_head_importance_on_a_pretrained_marian(tmp_path):
    ckpt = random_checkpoints.make("marian", str(tmp_path / "marian"), d_model=32, layers=1, heads=2, d_ff=64,
                                   vocab=200)
    out = tmp_path / "hi"
    readme = repro_head_importance.main(["--pretrained", ckpt, "--out", str(out), "--quick"])
    text = open(readme, encoding="utf-8").read()
    assert f"The pretrained marian checkpoint `{ckpt}`" in text and "## Verdicts" not in text
    rec = json.load(open(out / "points" / "pretrained.json"))
    assert rec["family"] == "marian" and rec["sentences"] == 8 and rec["measurements"]["shapes"]["cross"] == [1, 2]
    with open(out / "per_head.csv") as f:
        rows = list(csv.DictReader(f))
    assert {r["group"] for r in rows} == {"encoder_self", "decoder_self", "cross"} and len(rows) == 3 * 2
    assert sorted(os.listdir(out / "decoded")) == [
        f"pretrained_{c}.txt" for c in ("cross_permute_all_layers", "cross_uniform_all_layers", "unmasked")]
    os.remove(readme)  # a rerun reports from the record without measuring
    assert repro_head_importance.main(["--report_only", "--out", str(out)]) == readme and os.path.exists(readme)


def test_head_importance_refuses_a_decoder_only_checkpoint(tmp_path):
    ckpt = random_checkpoints.make("gpt2", str(tmp_path / "gpt2"), d_model=32, layers=1, heads=2, d_ff=64,
                                   tokenizer=False, vocab=64)
    with pytest.raises(ValueError, match="encoder-decoder translation model"):
        repro_head_importance.main(["--pretrained", ckpt, "--out", str(tmp_path / "hi"), "--quick"])
    with pytest.raises(SystemExit, match="needs --out"):
        repro_head_importance.main(["--pretrained", ckpt])
