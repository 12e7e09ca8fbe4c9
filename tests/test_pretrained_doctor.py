"""The attention doctor on an encoder-only checkpoint: a random-weight BERT (masked-LM head) written with
``transformers`` and loaded by ``pretrained.load``, end to end as ``eval.py --pretrained --diagnose`` runs it, and
the doctor catching a padding mask planted away on it. Skipped without torch/transformers (the checkpoint is
written with them)."""
from __future__ import annotations

import json
import os

import jax
import pytest

pytest.importorskip("torch", reason="needs torch (pip install '.[reference]')")
pytest.importorskip("transformers", reason="needs transformers (pip install '.[reference]')")
pytest.importorskip("safetensors", reason="needs safetensors (pip install '.[pretrained]')")

import attention  # noqa: E402
import pretrained  # noqa: E402
from engine import doctor  # noqa: E402
from pretrained import analysis, random_checkpoints  # noqa: E402

MASK_CHECKS = {"padding_weight", "padding_invariance", "two_token_padding", "head_permutation"}


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return random_checkpoints.make("bert", str(tmp_path_factory.mktemp("ckpt") / "bert"))


def test_bert_doctor_end_to_end(bert, tmp_path):
    """What ``eval.py --pretrained=<bert> --diagnose`` runs (the CLI itself: tests/test_pretrained_analysis.py)."""
    r = analysis.run(bert, str(tmp_path), diagnose=True)
    report = json.load(open(os.path.join(tmp_path, "diagnose", "report.json"), encoding="utf-8"))
    assert r["family"] == "bert" and report["summary"] == r["summary"] and report["meta"]["family"] == "bert"
    findings = report["findings"]
    assert {f["group"] for f in findings} == {None, "encoder_self"}
    assert not {f["check"] for f in findings} & {"causal_weight", "causal_leakage", "two_token_causal"}
    by_check = {}
    for f in findings:
        by_check.setdefault(f["check"], []).append(f["status"])
    assert MASK_CHECKS | {"score_std", "entropy", "special_mass", "sink"} <= set(by_check)
    for check in MASK_CHECKS:  # random weights may doze (entropy), but the masks and heads are exact
        assert set(by_check[check]) == {"ok"}, (check, by_check[check])
    assert len(by_check["score_std"]) == 2 * 4  # layers x heads of random_checkpoints' BERT


def test_bert_special_tokens_count_as_special(bert):
    task = analysis.PretrainedTask(pretrained.load(bert))
    pieces = task.piece_labels()
    assert {"[CLS]", "[SEP]"} <= {pieces[i] for i in task.special_ids()}


def test_bert_without_its_padding_mask_is_flagged(bert, monkeypatch):
    original = attention.attention

    def no_padding_mask(q, k, v, mask=None, **kwargs):
        if mask is not None:
            mask = mask.replace(q_segment_ids=None, kv_segment_ids=None)
        return original(q, k, v, mask, **kwargs)

    monkeypatch.setattr(attention, "attention", no_padding_mask)
    jax.clear_caches()
    task = analysis.PretrainedTask(pretrained.load(bert, attention_impl="reference"))
    findings = doctor.diagnose(task.p.model, task.batches("test", limit=16), task="mlm",
                               special_ids=task.special_ids())
    jax.clear_caches()
    fails = {f.check for f in findings if f.status == "fail"}
    assert {"padding_weight", "padding_invariance", "two_token_padding"} <= fails, fails
    assert all(f.advice == doctor.make_finding("x", None, None, None, 1.0, "", "fail", "padding").advice
               for f in findings if f.status == "fail" and f.check.startswith("padding"))


def test_encoder_only_without_an_lm_head_is_one_clear_error(bert):
    import models
    from flax import nnx

    cfg = pretrained.load(bert).cfg
    model = models.EncoderOnly(cfg, lm_head=False, num_classes=2, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="no masked-LM head"):
        doctor.diagnose(model, [{"inputs": [[5, 6, 7, 0]]}])
