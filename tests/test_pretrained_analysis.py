"""The doctor, the explorer, translation evaluation and ``eval.py --pretrained`` on random-weight checkpoints of
each family. Skipped without torch/transformers (the checkpoints are written with them)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch", reason="needs torch (pip install '.[reference]')")
pytest.importorskip("transformers", reason="needs transformers (pip install '.[reference]')")
pytest.importorskip("safetensors", reason="needs safetensors (pip install '.[pretrained]')")

from pretrained import analysis, random_checkpoints  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    return {f: random_checkpoints.make(f, str(root / f)) for f in ("gpt2", "llama", "marian", "bert")}


@pytest.mark.parametrize("family", ("gpt2", "llama", "marian", "bert"))
def test_doctor_runs_end_to_end(checkpoints, family, tmp_path):
    r = analysis.run(checkpoints[family], str(tmp_path), diagnose=True)
    assert r["family"] == family
    report = open(r["report"], encoding="utf-8").read()
    assert r["summary"] in report
    records = json.load(open(os.path.join(tmp_path, "diagnose", "report.json")))
    checks = {rec["check"] for rec in (records["findings"] if isinstance(records, dict) else records)}
    assert {"padding_weight", "head_permutation", "entropy", "sink"} <= checks
    if family in ("gpt2", "llama"):  # decoder-only: causal self-attention
        assert "causal_leakage" in checks


@pytest.mark.parametrize("family", ("gpt2", "llama", "marian", "bert"))
def test_explorer_pages(checkpoints, family, tmp_path):
    r = analysis.run(checkpoints[family], str(tmp_path), examples=[0, 4], limit=4, beam_size=2)
    assert sorted(r["explorer"]) == ["0", "4"]
    page = open(r["explorer"]["4"], encoding="utf-8").read()
    groups = {"gpt2": ["decoder_self"], "llama": ["decoder_self"], "marian": ["encoder_self", "cross"],
              "bert": ["encoder_self"]}[family]
    assert all(g in page for g in groups)
    if family == "marian":  # translation evaluation of the first 4 test verses
        assert r["sentences"] == 4 and 0 <= r["bleu"] <= 100 and "nrefs:1" in r["bleu_signature"]
        assert len(open(r["hypotheses_path"], encoding="utf-8").read().splitlines()) == 4


def test_explorer_rejects_out_of_range_examples(checkpoints, tmp_path):
    with pytest.raises(ValueError, match="out of range"):
        analysis.run(checkpoints["gpt2"], str(tmp_path), examples=[10 ** 6])


def test_eval_cli_pretrained(checkpoints, tmp_path):
    env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, "eval.py", f"--pretrained={checkpoints['gpt2']}", "--diagnose",
                          f"--pretrained_out={tmp_path}"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "fail," in out.stdout and os.path.exists(os.path.join(tmp_path, "diagnose", "report.md"))
    bad = subprocess.run([sys.executable, "eval.py", f"--pretrained={tmp_path}/missing"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "no checkpoint directory" in bad.stderr


def test_banned_tokens_are_never_generated(tmp_path):
    """opus-mt bans its padding token (``bad_words_ids``; newer transformers keep it in generation_config.json):
    generation for translation and head importance must ban it too, and leave the loaded model alone."""
    import jax.numpy as jnp
    import numpy as np

    import models
    from pretrained import load

    d = random_checkpoints.make("marian", str(tmp_path / "marian"))
    p = load(d)
    pad = p.cfg.pad_id
    p.model.logits_bias[...] = p.model.logits_bias[...].at[pad].set(50.0)  # greedy would pick padding everywhere
    src = jnp.asarray(analysis.PretrainedTask(p).batch(analysis.bible_pairs("test")[:2])["inputs"])
    assert analysis.banned_tokens(p) == [] and analysis.decoding_model(p) is p.model
    assert (np.asarray(models.greedy_decode(p.model, src, max_len=6)) == pad).all()
    with open(os.path.join(d, "generation_config.json"), encoding="utf-8") as f:
        generation = json.load(f)
    with open(os.path.join(d, "generation_config.json"), "w", encoding="utf-8") as f:
        json.dump(dict(generation, bad_words_ids=[[pad]]), f)
    assert analysis.banned_tokens(p) == [pad]
    banned = np.asarray(models.greedy_decode(analysis.decoding_model(p), src, max_len=6))
    assert not (banned == pad).any()
    assert float(p.model.logits_bias[...][pad]) == 50.0  # the loaded model is not changed
