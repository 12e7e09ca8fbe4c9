"""The analysis primitives on hand-made inputs: head scores, curve events, Spearman within layers, the
initialization statistics, and the explanation measures' distances."""
import math

import numpy as np
import pytest

import analysis


def test_icl_score_and_phase_change():
    loss = np.array([5.0, 5.0, 4.0, 4.0, 1.0, 1.0, 1.0, 1.0])
    assert analysis.icl_score(loss, (0, 2), (6, 8)) == pytest.approx(-4.0)
    assert analysis.phase_change_step([0, 10, 20, 30], [0.0, -0.1, -2.0, -2.1]) == 20
    assert analysis.phase_change_step([0, 10], [0.0, 0.5]) is None
    steps = [0, 10, 20, 30, 40, 50]
    assert analysis.transition(steps, [0.0, -0.05, -0.5, -3.0, -3.9, -4.0]) == (20, 40)
    assert analysis.transition(steps, [0.0, 0.1, 0.2, 0.3, 0.4, 0.5]) == (None, None)
    assert analysis.half_final_step(steps, [0.05, 0.1, 0.2, 0.5, 0.8, 0.9]) == 30
    assert analysis.half_final_step(steps, [0.5, 0.4, 0.3, 0.2, 0.1, 0.1]) is None  # never rose


def test_head_scores_on_hand_made_attention():
    """Tokens BOS a b c a b c a (a block of 3 repeated): a previous-token head, an induction head, uniform
    attention, and a head that splits its weight over both earlier copies' successors."""
    tokens = np.array([[1, 5, 6, 7, 5, 6, 7, 5]])
    T = tokens.shape[1]
    prev_head = np.eye(T, k=-1)
    prev_head[0, 0] = 1.0
    induction = np.zeros((T, T))
    induction[:4, 0] = 1.0  # the first block: nothing to match, attend BOS
    for t, k in ((4, 2), (5, 3), (6, 4), (7, 5)):  # the key after the latest earlier copy of tokens[t]
        induction[t, k] = 1.0
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    split = induction.copy()
    split[7, [2, 5]] = 0.5
    w = np.stack([prev_head, induction, uniform, split])[None].astype(np.float32)  # [1, 4, T, T]
    valid = np.ones((1, T), bool)

    prev = np.asarray(analysis.previous_token_score(w, valid))
    prefix = np.asarray(analysis.prefix_matching_score(w, tokens, valid))
    uniform_prev = np.mean(1.0 / np.arange(2, T + 1))
    np.testing.assert_allclose(prev, [1.0, 1 / 7, uniform_prev, 1 / 7], rtol=1e-5)
    # repeated queries t = 4..7; t = 7 (token 5 at 1 and 4) counts both successors, keys 2 and 5
    np.testing.assert_allclose(prefix, [0.0, 1.0, np.mean([1 / 5, 1 / 6, 1 / 7, 2 / 8]), 1.0], rtol=1e-5)

    # invalid query positions do not count: a padding row, and the last position of the real row
    pad_w = np.concatenate([w, np.full_like(w, 0.3)])
    pad_tokens = np.concatenate([tokens, np.zeros_like(tokens)])
    pad_valid = np.concatenate([valid, np.zeros_like(valid)])
    np.testing.assert_allclose(analysis.previous_token_score(pad_w, pad_valid), prev, rtol=1e-5)
    np.testing.assert_allclose(analysis.prefix_matching_score(pad_w, pad_tokens, pad_valid), prefix, rtol=1e-5)
    short = valid.copy()
    short[0, 7] = False
    np.testing.assert_allclose(analysis.prefix_matching_score(w, tokens, short)[2],
                               np.mean([1 / 5, 1 / 6, 1 / 7]), rtol=1e-5)


def test_ablation_heads_ranks_prefix_matching_and_previous_token_heads():
    prev = np.array([[0.1, 0.9, 0.2], [0.3, 0.1, 0.1]])
    prefix = np.array([[0.0, 0.1, 0.05], [0.2, 0.8, 0.01]])
    assert analysis.ablation_heads(prev, prefix) == [
        ("no mask", ()), ("top prefix-matching head", ((1, 1),)),
        ("lowest prefix-matching head of that layer", ((1, 2),)),
        ("top 2 prefix-matching heads", ((1, 1), (1, 0))),
        ("top 3 prefix-matching heads", ((1, 1), (1, 0), (0, 1))),
        ("top previous-token head of layer 0", ((0, 1),)), ("lowest previous-token head of layer 0", ((0, 0),)),
        ("top 2 previous-token heads of layer 0", ((0, 1), (0, 2))),
        ("top 3 previous-token heads of layer 0", ((0, 1), (0, 2), (0, 0)))]
    with pytest.raises(ValueError, match="ablation_heads"):
        analysis.ablation_heads(prev, prefix[:1])
    assert analysis.top_heads(prev, prefix) == ((1, 1), (0, 1))
    assert analysis.head_label(((1, 3), (1, 0))) == "L1H3+L1H0" and analysis.head_label(()) == "—"
    np.testing.assert_array_equal(analysis.head_mask((2, 3), ((1, 1), (0, 2))), [[1, 1, 0], [1, 0, 1]])


def test_hook_rejects_a_bad_interval():
    with pytest.raises(ValueError, match="every=0"):
        analysis.HeadScores(0)


def test_divergence_and_learning_rate_curves():
    steps = [0, 10, 20, 30, 40]
    assert analysis.divergence_step(steps, [3.0, 2.0, 1.0, 1.2, 0.9], spike=0.5) is None
    assert analysis.divergence_step(steps, [3.0, 2.0, 1.0, 1.6, 0.9], spike=0.5) == 30  # 0.6 above the minimum
    assert analysis.divergence_step(steps, [3.0, math.nan, 1.0, 1.0, 1.0], spike=0.5) == 10
    with pytest.raises(ValueError, match="spike"):
        analysis.divergence_step(steps, [1.0] * 5, spike=0)
    assert analysis.first_step_at_most(steps, [0.5, None, 0.09, 0.05, 0.01], 0.1) == 20
    assert analysis.first_step_at_most(steps, [0.5] * 5, 0.1) is None
    # capped at the initial loss 4: mean(1, 2, 4, 4) - 1
    assert analysis.lr_sensitivity([1.0, 2.0, 9.0, math.inf], 4.0) == pytest.approx(1.75)
    lrs = [1e-3, 3e-3, 1e-2, 3e-2]
    assert analysis.degradation_lr(lrs, [2.0, 1.0, 1.4, 3.0], nats=0.5) == 3e-2
    assert analysis.degradation_lr(lrs, [2.0, 1.0, math.inf, 1.2], nats=0.5) == 1e-2
    assert analysis.degradation_lr(lrs, [2.0, 1.5, 1.2, 1.0], nats=0.5) is None
    with pytest.raises(ValueError, match="degradation_lr"):
        analysis.degradation_lr(lrs, [1.0], nats=0.5)


def test_spearman_within_layers_removes_between_layer_differences():
    """Confidence rises with layer and importance too, but within each layer they run opposite ways: across all
    heads the correlation is positive, within layers it is -1."""
    conf = np.array([[0.1, 0.2, 0.3], [0.6, 0.7, 0.8]])
    imp = np.array([[3.0, 2.0, 1.0], [9.0, 8.0, 7.0]])
    assert analysis.spearman(conf, imp) > 0.4
    np.testing.assert_allclose(analysis.within_layer_spearman(conf, imp), [-1.0, -1.0])
    assert math.isnan(analysis.spearman([1, 1, 1], [1, 2, 3]))
    assert math.isnan(analysis.within_layer_spearman(np.ones((1, 3)), imp[:1])[0])
    with pytest.raises(ValueError, match="within_layer_spearman"):
        analysis.within_layer_spearman(conf, imp[:1])
    with pytest.raises(ValueError, match="spearman"):
        analysis.spearman([1, 2], [1, 2, 3])
    norm = analysis.normalise_per_layer(imp)
    np.testing.assert_allclose(np.linalg.norm(norm, axis=1), [1.0, 1.0])


def test_translation_helpers():
    shapes = {"encoder_self": (1, 2), "decoder_self": (1, 1), "cross": (2, 1)}
    assert analysis.head_list(shapes) == [("encoder_self", 0, 0), ("encoder_self", 0, 1), ("decoder_self", 0, 0),
                                          ("cross", 0, 0), ("cross", 1, 0)]
    batch = {"inputs": np.array([[5, 6, 0, 0], [7, 0, 0, 0]]), "inputs_segmentation": np.array([[1, 1, 0, 0],
                                                                                                [1, 0, 0, 0]]),
             "targets": np.array([[1, 2, 3, 0]] * 2), "targets_segmentation": np.array([[1, 1, 1, 0]] * 2)}
    cropped = analysis.crop(batch)
    assert cropped["inputs"].shape == (2, 2) and cropped["targets_segmentation"].shape == (2, 3)
    behaviour = {"prev_arg": np.array([[0.95, 0.1]]), "next_arg": np.array([[0.0, 0.5]])}
    np.testing.assert_allclose(analysis.positional_fraction(behaviour), [[0.95, 0.5]])
    with pytest.raises(ValueError, match="kind='shuffle'"):
        analysis.cross_overrides("shuffle", [0], None)


def test_distances():
    p = np.array([[1.0, 0.0], [0.5, 0.5]])
    q = np.array([[0.0, 1.0], [0.5, 0.5]])
    np.testing.assert_allclose(analysis.tvd(p, q), [1.0, 0.0])
    np.testing.assert_allclose(analysis.jsd(p, q), [math.log(2), 0.0], atol=1e-6)


def test_init_statistics_follow_the_variance_argument():
    assert analysis.scale_name(analysis.scale_value("1/sqrt(d_k)", 64), 64) == "1/sqrt(d_k)"
    with pytest.raises(ValueError, match="unknown scale"):
        analysis.scale_value("2", 64)
    with pytest.raises(ValueError, match="none of"):
        analysis.scale_name(0.3, 64)
    stats = {name: analysis.init_statistics(64, analysis.scale_value(name, 64), num_queries=64, num_keys=32,
                                            num_heads=2, seed=0) for name in analysis.SCALES}
    assert stats["1"]["logit_std"] == pytest.approx(8.0, rel=0.15)
    assert stats["1/sqrt(d_k)"]["logit_std"] == pytest.approx(1.0, rel=0.15)
    assert stats["1"]["max_weight"] > stats["1/sqrt(d_k)"]["max_weight"] > stats["1/d_k"]["max_weight"]
    assert stats["1/d_k"]["entropy"] == pytest.approx(math.log(32), rel=0.01)
    with pytest.raises(ValueError, match="num_keys=0"):
        analysis.init_statistics(64, 1.0, num_queries=4, num_keys=0, num_heads=1, seed=0)
