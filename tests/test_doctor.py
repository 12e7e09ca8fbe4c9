"""The attention doctor finds real, planted faults in trained tiny models and stays quiet on a healthy one.

Each model is an encoder-decoder (or decoder-only) Transformer trained for a few dozen Adam steps on reversing
short token sequences with padding. The faults: the 1/sqrt(d_k) scale missing (``attention_scale=1.0`` with a
large ``qk_dim``), a far too high attention temperature (a tiny ``attention_scale``: blurry attention), the
padding mask dropped and the causal mask dropped (both planted at the attention API, since the models always
pass their masks; the causal one is planted in a trained decoder-only model). Models run on the ``reference``
backend so the doctor needs no second model.
"""
import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

import attention
import models
from engine import doctor, sharding
from engine.tasks import TASKS

VOCAB, LENGTH, BATCH = 24, 12, 16
FAULT_CHECKS = {
    "padding": {"padding_weight", "padding_invariance", "two_token_padding"},
    "causal": {"causal_weight", "causal_leakage", "two_token_causal"},
    # A decoder-only model without a segmentation hides its right padding by causality alone.
    "causal_lm": {"causal_weight", "causal_leakage", "two_token_causal", "padding_weight", "padding_invariance"},
    "scale": {"score_std"},
    "blurry": {"score_std", "entropy"},
}
# Sharp (scale missing) or broken attention also moves where the mass goes: sink / special-token warnings are
# symptoms the doctor may add, never failures.
SYMPTOMS = {"special_mass", "sink"}
# A planted scale also warns on the modules' configured scale (a warning only: the score checks fail).
FAULT_WARNS = {"scale": {"scale"}, "blurry": {"scale"}}


def reverse_batch(rng: np.random.Generator, rows: int = BATCH) -> dict[str, np.ndarray]:
    """Source: 3..LENGTH-2 random tokens + EOS, right-padded; target: the tokens reversed + EOS."""
    inputs = np.zeros((rows, LENGTH), np.int32)
    targets = np.zeros((rows, LENGTH), np.int32)
    for r in range(rows):
        n = int(rng.integers(3, LENGTH - 1))
        x = rng.integers(5, VOCAB, n)
        inputs[r, : n + 1] = list(x) + [1]
        targets[r, : n + 1] = list(x[::-1]) + [1]
    return {"inputs": inputs, "targets": targets}


def lm_batch(rng: np.random.Generator, rows: int = BATCH) -> dict[str, np.ndarray]:
    """Decoder-only rows: BOS x SEP reversed(x), right-padded."""
    b = reverse_batch(rng, rows)
    inputs = np.zeros((rows, 2 * LENGTH), np.int32)
    for r in range(rows):
        n = int(np.sum(b["inputs"][r] != 0)) - 1
        seq = [2] + list(b["inputs"][r, :n]) + [4] + list(b["targets"][r, :n])
        inputs[r, : len(seq)] = seq
    return {"inputs": inputs}


def train_tiny(kind: str = "translation", steps: int = 60, **overrides) -> nnx.Module:
    """A tiny model trained with Adam for ``steps`` steps on reversal; ``overrides`` are TransformerConfig fields."""
    fields = dict(vocab_size=VOCAB, d_model=32, num_heads=4, d_ff=64, num_encoder_layers=1, num_decoder_layers=1,
                  dropout_rate=0.0, max_len=2 * LENGTH, attention_impl="reference", position="learned")
    cfg = models.TransformerConfig(**(fields | overrides))
    if kind == "classification":
        model = models.EncoderClassifier(cfg, 2, rngs=nnx.Rngs(0))
    else:
        model = (models.EncoderDecoder if kind == "translation" else models.DecoderOnly)(cfg, rngs=nnx.Rngs(0))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)  # rest: e.g. a sampling kind's RNG state
    tx = optax.adam(3e-3)

    def loss_fn(params, inputs, targets):
        m = nnx.merge(graphdef, params, rest)
        if kind == "translation":
            logits, labels = m(inputs, targets), targets
        elif kind == "classification":  # the class: is the first token in the upper half of the vocabulary
            logits, labels = m(inputs)[:, None], (inputs[:, :1] >= (VOCAB + 5) // 2).astype(jnp.int32) + 1
            return models.cross_entropy(logits, labels - 1, jnp.ones(labels.shape, jnp.float32))[0] / len(inputs)
        else:
            logits, labels = m(inputs)[:, :-1], inputs[:, 1:]
        loss, weight = models.cross_entropy(logits, labels, (labels != 0).astype(jnp.float32))
        return loss / weight

    @functools.partial(jax.jit, compiler_options=doctor._FAST_COMPILE)  # CPU: compile time dominates
    def step(params, opt_state, inputs, targets):
        grads = jax.grad(loss_fn)(params, inputs, targets)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    opt_state = tx.init(params)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        b = lm_batch(rng) if kind == "lm" else reverse_batch(rng)
        params, opt_state = step(params, opt_state, b["inputs"], b.get("targets", b["inputs"]))
    return nnx.merge(graphdef, params, rest)


def eval_batches(kind: str = "translation") -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    return [lm_batch(rng) if kind == "lm" else reverse_batch(rng)]


@pytest.fixture
def planted_mask_fault(monkeypatch):
    """``plant(drop)`` makes every attention call drop part of its mask ("padding": segment ids; "causal": the
    causal flag) until the test ends. Compiled functions are cleared so nothing traced before is reused."""

    def plant(drop: str) -> None:
        original = attention.attention

        def faulty(q, k, v, mask=None, **kwargs):
            if mask is not None:
                mask = (mask.replace(q_segment_ids=None, kv_segment_ids=None) if drop == "padding"
                        else mask.replace(causal=False))
            return original(q, k, v, mask, **kwargs)

        monkeypatch.setattr(attention, "attention", faulty)
        jax.clear_caches()

    yield plant
    jax.clear_caches()


def problems(findings: list[doctor.Finding]) -> tuple[set[str], set[str]]:
    """(checks with a fail, checks with a warn)."""
    return ({f.check for f in findings if f.status == "fail"}, {f.check for f in findings if f.status == "warn"})


def assert_flags_exactly(findings, fault: str) -> None:
    fails, warns = problems(findings)
    assert fails == FAULT_CHECKS[fault], [(f.check, f.where, f.value) for f in findings if f.status != "ok"]
    assert warns <= FAULT_CHECKS[fault] | SYMPTOMS | FAULT_WARNS.get(fault, set()), warns


@pytest.fixture(scope="module")
def healthy():
    return train_tiny()


def test_healthy_model_is_quiet_and_report_is_written(healthy, tmp_path):
    findings, summary = doctor.run_diagnosis(healthy, eval_batches(), str(tmp_path), task="translation",
                                             title="healthy")
    fails, warns = problems(findings)
    assert not fails and not warns, [(f.check, f.where, f.value) for f in findings if f.status != "ok"]
    assert summary == f"0 fail, 0 warn, {len(findings)} ok"
    checks = {f.check for f in findings}
    assert checks >= {"padding_weight", "padding_invariance", "causal_weight", "causal_leakage", "score_std",
                      "entropy", "special_mass", "sink", "head_permutation", "two_token_padding", "two_token_causal"}
    assert {f.group for f in findings if f.check == "score_std"} == {"encoder_self", "decoder_self", "cross"}
    assert len([f for f in findings if f.check == "score_std"]) == 3 * 4  # groups x heads
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["summary"] == summary
    assert len(report["findings"]) == len(findings)
    assert set(report["findings"][0]) >= {"check", "group", "layer", "head", "value", "status"}
    md = (tmp_path / "report.md").read_text()
    assert summary in md and "| check | layer/head | value | threshold | status | what to try |" in md


def test_classifier_is_quiet_when_healthy_and_flagged_without_its_padding_mask(planted_mask_fault):
    """The doctor reads the classification task's batches too: encoder and pooling attention, no causal side."""
    model = train_tiny("classification")
    findings = doctor.diagnose(model, eval_batches("classification"))
    fails, _ = problems(findings)
    assert not fails, [(f.check, f.where, f.value) for f in findings if f.status == "fail"]
    assert {f.group for f in findings if f.check == "padding_weight"} == {"encoder_self", "pool"}
    assert not {"causal_weight", "causal_leakage", "two_token_causal"} & {f.check for f in findings}
    planted_mask_fault("padding")
    fails, _ = problems(doctor.diagnose(model, eval_batches("classification"), task="classification"))
    assert {"padding_weight", "padding_invariance", "two_token_padding"} <= fails


def test_missing_scale_is_flagged():
    model = train_tiny(attention_scale=1.0, d_model=64, num_heads=1, qk_dim=64, v_dim=64)
    findings = doctor.diagnose(model, eval_batches())
    assert_flags_exactly(findings, "scale")
    high = [f for f in findings if f.check == "score_std"]
    assert all(f.value > 8.0 for f in high), [f.value for f in high]
    assert "1/sqrt(d_k)" in next(f for f in high if f.status == "fail").advice


def test_blurry_attention_is_flagged():
    model = train_tiny(attention_scale=0.01)
    findings = doctor.diagnose(model, eval_batches())
    assert_flags_exactly(findings, "blurry")
    assert all(f.status == "fail" for f in findings if f.check == "entropy")
    assert "dozes" in next(f for f in findings if f.check == "entropy").advice


def test_dropped_padding_mask_is_flagged(planted_mask_fault):
    planted_mask_fault("padding")
    model = train_tiny()
    findings = doctor.diagnose(model, eval_batches())
    assert_flags_exactly(findings, "padding")
    weights = {f.group: f.value for f in findings if f.check == "padding_weight"}
    assert weights["encoder_self"] > 0.01 and weights["cross"] > 0.01


def test_decoder_only_healthy_then_causal_leak_flagged(planted_mask_fault):
    """The same trained decoder-only weights: quiet with the causal mask, flagged once the mask is dropped."""
    model = train_tiny("lm")
    findings = doctor.diagnose(model, eval_batches("lm"), task="lm")
    fails, warns = problems(findings)
    assert not fails and not warns, [(f.check, f.where, f.value) for f in findings if f.status != "ok"]
    planted_mask_fault("causal")
    findings = doctor.diagnose(model, eval_batches("lm"), task="lm")
    assert_flags_exactly(findings, "causal_lm")
    assert next(f for f in findings if f.check == "causal_leakage").value > 0.01


def test_head_permutation_and_two_token_catch_a_head_mixing_backend(healthy, monkeypatch):
    """A backend bug that writes head h's output to head h+1 fails the permutation check (and the two-token test,
    whose expected output is per head), not the mask checks."""
    model = healthy
    original = attention.attention

    def mixing(q, k, v, mask=None, **kwargs):
        out = original(q, k, v, mask, **kwargs)
        if kwargs.get("return_stats"):
            return jnp.roll(out[0], 1, axis=2), out[1]
        return jnp.roll(out, 1, axis=2)

    monkeypatch.setattr(attention, "attention", mixing)
    jax.clear_caches()
    try:
        fails, _ = problems(doctor.diagnose(model, eval_batches()))
    finally:
        jax.clear_caches()
    assert fails == {"head_permutation", "two_token_padding", "two_token_causal"}


def test_bad_arguments_are_one_clear_error(healthy):
    model = healthy
    with pytest.raises(ValueError, match="task 'lm' trains a DecoderOnly; got a EncoderDecoder"):
        doctor.diagnose(model, eval_batches(), task="lm")
    with pytest.raises(ValueError, match="task='parsing'; expected one of"):
        doctor.diagnose(model, eval_batches(), task="parsing")
    with pytest.raises(ValueError, match="no batches"):
        doctor.diagnose(model, [])
    with pytest.raises(ValueError, match="unknown threshold fields"):
        doctor.diagnose(model, eval_batches(), thresholds=doctor.ml_collections.ConfigDict({"entropy_wrn": 1.0}))
    with pytest.raises(ValueError, match="missing"):
        doctor.diagnose(model, [{"inputs": np.ones((2, 4), np.int32)}])


def test_default_thresholds_are_ordered_and_punctuation_pieces_are_special():
    th = doctor.default_thresholds()
    assert (th.score_std_fail_low < th.score_std_warn_low < 1.0 < th.score_std_warn_high < th.score_std_fail_high
            < th.score_std_fail_saturated)
    assert th.entropy_warn < th.entropy_fail <= 1.0
    assert th.invariance_warn < th.invariance_fail and th.exact_warn < th.exact_fail
    assert doctor.punctuation_ids(["<pad>", "\u2581the", ",", "\u2581.", "\u2581", "...", "a,"]) == [2, 3, 5]
    perm_q, perm_kv = doctor.head_permutation(8, 2)
    assert sorted(perm_q) == list(range(8)) and list(perm_kv) == [1, 0]
    assert all(perm_q[h] // 4 == perm_kv[h // 4] for h in range(8))  # query heads move with their kv head


def test_score_std_flags_a_lifted_model_not_sharp_layers():
    th = doctor.default_thresholds()  # warn 5, fail 8 when every layer's median is above 5; fail 52 whatever
    status = lambda s, floor: doctor.score_std_status(s, floor, th)[:2]  # noqa: E731
    assert status(6.2, 1.0) == ("ok", "score_high")  # one sharp cross-attention head among ordinary ones
    assert status(24.4, 3.9) == ("ok", "score_high")  # solved MQAR: a one-hot last layer over an ordinary first
    assert status(6.2, 5.7) == ("warn", "score_high")  # every layer lifted: a missing scale at d_k ~ 32
    assert status(9.0, 5.7) == ("fail", "score_high")
    assert status(60.0, 1.0) == ("fail", "score_high")  # the softmax saturated past float32 (logit growth)
    assert status(float("nan"), 1.0) == ("fail", "score_high")
    assert status(1.0, 1.0) == ("ok", "score_low")
    assert status(0.2, 1.0) == ("warn", "score_low") and status(0.05, 1.0) == ("fail", "score_low")


def test_numpy_positions_and_decoder_inputs_match_the_models():
    seg = np.array([[1, 1, 1, 2, 2, 0, 0], [1, 1, 1, 1, 1, 1, 1]], np.int32)
    targets = np.array([[7, 8, 1, 9, 1, 0, 0], [5, 6, 7, 8, 9, 10, 1]], np.int32)
    assert np.array_equal(sharding.segment_positions(seg), np.asarray(models.positions_from_segmentation(seg)))
    cfg = models.TransformerConfig(vocab_size=VOCAB, d_model=8, num_heads=2, d_ff=8)
    task = TASKS["translation"](None)
    batch = doctor.complete_batch({"inputs": targets, "targets": targets, "targets_segmentation": seg}, task, cfg,
                                  rows=2)
    assert np.array_equal(task.side_tokens(batch, "target", cfg),
                          np.asarray(models.shift_right(targets, seg, cfg.bos_id, cfg.pad_id)))


def test_explorer_pages_for_batch_rows(healthy, tmp_path):
    from engine import explorer

    batch = eval_batches()[0]
    pieces = [f"t{i}" for i in range(VOCAB)]
    paths = explorer.write_batch_explorers(healthy, batch, str(tmp_path), rows=[0, 3], source_piece=pieces.__getitem__,
                                           target_piece=pieces.__getitem__, title="tiny")
    assert sorted(paths) == [0, 3]
    n = int(np.sum(batch["inputs"][3] != 0))
    page = open(paths[3], encoding="utf-8").read()
    data = json.loads(page.split("const DATA = ")[1].split(";\n")[0].replace("<\\/", "</"))
    groups = {g["name"]: g for g in data["groups"]}
    assert groups["cross"]["k_labels"] == [pieces[i] for i in batch["inputs"][3, :n]]
    assert groups["cross"]["q_labels"][0] == "t2"  # BOS starts the decoder inputs
    assert np.asarray(groups["encoder_self"]["weights"]).shape == (1, 4, n, n)
    assert set(groups["cross"]["stats"]) >= {"entropy", "max_logit", "sink"}


@pytest.mark.parametrize("kind", ["lm", "classification"])
def test_explorer_pages_for_the_other_tasks(kind, tmp_path):
    from engine import explorer

    model = train_tiny(kind, steps=2)
    batch = eval_batches(kind)[0]
    pieces = [f"t{i}" for i in range(VOCAB)]
    paths = explorer.write_batch_explorers(model, batch, str(tmp_path), rows=[1], source_piece=pieces.__getitem__,
                                           target_piece=pieces.__getitem__)
    page = open(paths[1], encoding="utf-8").read()
    data = json.loads(page.split("const DATA = ")[1].split(";\n")[0].replace("<\\/", "</"))
    groups = {g["name"]: g for g in data["groups"]}
    n = int(np.sum(batch["inputs"][1] != 0))
    if kind == "lm":
        assert set(groups) == {"decoder_self"} and groups["decoder_self"]["k_labels"] == [
            pieces[i] for i in batch["inputs"][1, :n]]
    else:
        assert set(groups) == {"encoder_self", "pool"}
        assert groups["pool"]["q_labels"] == ["<pooled>"] and len(groups["pool"]["k_labels"]) == n
        assert np.asarray(groups["pool"]["weights"]).shape == (1, 1, 1, n)
