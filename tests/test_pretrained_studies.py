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
from studies.commands import head_importance_main  # noqa: E402


def test_head_importance_on_a_pretrained_marian(tmp_path):
    ckpt = random_checkpoints.make("marian", str(tmp_path / "marian"), d_model=32, layers=1, heads=2, d_ff=64,
                                   vocab=200)
    out = tmp_path / "hi"
    readme = head_importance_main(["--pretrained", ckpt, "--out", str(out), "--quick"])
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
    assert head_importance_main(["--report_only", "--out", str(out)]) == readme and os.path.exists(readme)


def test_head_importance_refuses_a_decoder_only_checkpoint(tmp_path):
    ckpt = random_checkpoints.make("gpt2", str(tmp_path / "gpt2"), d_model=32, layers=1, heads=2, d_ff=64,
                                   tokenizer=False, vocab=64)
    with pytest.raises(ValueError, match="encoder-decoder translation model"):
        head_importance_main(["--pretrained", ckpt, "--out", str(tmp_path / "hi"), "--quick"])
    with pytest.raises(ValueError, match="needs --out"):
        head_importance_main(["--pretrained", ckpt])


def test_explanation_on_pretrained_bert_and_gpt2(tmp_path):
    """Jain & Wallace's forward-only tests on a BERT classifier and GPT-2: α is the reference's last-layer
    attention of the predicting query averaged over heads; the study writes its per-verse CSV and README."""
    import numpy as np
    import torch
    import transformers

    import pretrained
    from analysis.explanation import pretrained_measures
    from studies.commands import explanation_main

    small = dict(d_model=32, layers=2, heads=2, d_ff=64, vocab=200)
    bert = random_checkpoints.make("bert", str(tmp_path / "bert"), config_overrides={"num_labels": 3}, **small)
    gpt2 = random_checkpoints.make("gpt2", str(tmp_path / "gpt2"), **small)
    texts = ["In the beginning God created the heavens and the earth.", "Jesus wept."]
    for ckpt, cls, query in ((bert, transformers.BertForSequenceClassification, lambda n: 0),
                             (gpt2, transformers.GPT2LMHeadModel, lambda n: n - 1)):
        p = pretrained.load(ckpt)
        m = pretrained_measures(p, texts, permutations=3, seed=0)
        ref = cls.from_pretrained(ckpt, attn_implementation="eager").eval()
        for i, text in enumerate(texts):
            ids = p.tokenizer.encode(text)
            with torch.no_grad():
                att = ref(torch.tensor([ids]), output_attentions=True).attentions[-1][0].numpy()  # [H, T, T]
            assert m["length"][i] == len(ids)
            np.testing.assert_allclose(m["alpha_max"][i], att[:, query(len(ids))].mean(0).max(), rtol=1e-4)
        assert np.all((m["perm_median_tvd"] >= 0) & (m["perm_median_tvd"] <= 1)) and np.all(np.abs(m["tau_loo"]) <= 1)
    readme = explanation_main(["--pretrained", gpt2, "--out", str(tmp_path / "ex"), "--quick",
                                     "--permutations", "3"])
    assert "the last token, predicting" in open(readme, encoding="utf-8").read()
    with open(tmp_path / "ex" / "per_example.csv") as f:
        assert len(list(csv.DictReader(f))) == 8
    with pytest.raises(ValueError, match="without a classification head"):
        pretrained_measures(pretrained.load(random_checkpoints.make("bert", str(tmp_path / "mlm"), **small)), texts,
                            permutations=3, seed=0)
