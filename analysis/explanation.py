"""Is attention explanation? Jain & Wallace (2019)'s tests of a classifier's attention-pooling distribution.

``explanation_measures`` takes a trained pooling classifier (``models`` classification model with one pooling
query) and a batch of examples and returns, per example: Kendall tau of the pooling weights against gradient x
input and leave-one-out importance, the median output change under random permutations of the weights, and the
largest Jensen-Shannon divergence of an adversarial pooling distribution whose output stays within ``epsilon``.
"""
from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from scipy import stats as scipy_stats

import models

LOO_CHUNK = 256  # leave-one-out variants evaluated per forward pass (one compiled shape)


def tvd(p: jax.Array, q: jax.Array) -> jax.Array:
    """Total variation distance between distributions over the last axis."""
    return 0.5 * jnp.sum(jnp.abs(p - q), axis=-1)


def jsd(p: jax.Array, q: jax.Array) -> jax.Array:
    """Jensen-Shannon divergence (nats, at most ln 2) over the last axis; 0 * log 0 = 0."""
    m = 0.5 * (p + q)

    def kl(a, b):
        return jnp.sum(jnp.where(a > 0, a * (jnp.log(jnp.maximum(a, 1e-30)) - jnp.log(jnp.maximum(b, 1e-30))), 0.0), -1)

    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def explanation_measures(model: nnx.Module, batch: dict, *, permutations: int, epsilon: float, adv_steps: int,
                         seed: int) -> dict[str, np.ndarray]:
    """Per-example measures of the pooling attention on one batch (``inputs``, ``inputs_segmentation``,
    ``label``: [N, S] / [N]); arrays of length N:

    - ``alpha_max``, ``length``, ``correct``: max pooling weight, tokens, whether the prediction is right;
    - ``tau_grad`` / ``tau_loo`` (and ``sig_grad`` / ``sig_loo``, p < 0.05): Kendall tau between the weights and
      |gradient x input| of the predicted class's probability on each token embedding / the output TVD when the
      token is deleted;
    - ``perm_median_tvd``: median output TVD over ``permutations`` random permutations of the weights;
    - ``adv_jsd``: the largest JSD(alpha, alpha') among ``adv_steps`` Adam iterates on the pooling logits whose
      output stayed within TVD ``epsilon`` (0 if none).
    """
    if permutations < 1 or adv_steps < 1 or not epsilon > 0:
        raise ValueError(f"explanation_measures: permutations={permutations}, adv_steps={adv_steps}, "
                         f"epsilon={epsilon}; expected positive values")
    graphdef, state = nnx.split(model)
    inputs = jnp.asarray(batch["inputs"])
    seg = jnp.asarray(batch["inputs_segmentation"])
    pos = models.positions_from_segmentation(seg)
    real = seg > 0
    N, S = inputs.shape

    @jax.jit
    def probs(state, inputs, seg, interventions=None):
        m = nnx.merge(graphdef, state)
        logits, st = m(inputs, inputs_segmentation=seg, interventions=interventions, return_stats=True)
        return jax.nn.softmax(logits, -1), st["pool"][0].weights[:, 0, 0]  # [N, C], [N, S]

    p0, alpha = probs(state, inputs, seg)
    pred = jnp.argmax(p0, -1)

    def predicted_prob(x, seg, pos, pred):  # arrays as arguments, not constants XLA would fold
        m = nnx.merge(graphdef, state)
        p = jax.nn.softmax(m.classify_embedded(x, seg, pos), -1)
        return jnp.sum(jnp.take_along_axis(p, pred[:, None], -1))

    x = nnx.merge(graphdef, state).embed_tokens(inputs)
    g = jax.jit(jax.grad(predicted_prob))(x, seg, pos, pred)
    grad_importance = np.abs(np.asarray(jnp.sum(g * x, -1)))

    # leave one out: the example without token t (later tokens move up one position)
    ids, lengths = np.asarray(inputs), np.asarray(seg.sum(-1))
    loo = np.zeros((N, S))
    rows = [(i, t) for i in range(N) for t in range(lengths[i])]
    for start in range(0, len(rows), LOO_CHUNK):
        chunk = rows[start:start + LOO_CHUNK]
        b_ids = np.zeros((len(chunk), S), np.int32)
        b_seg = np.zeros((len(chunk), S), np.int32)
        for r, (i, t) in enumerate(chunk):
            kept = np.delete(ids[i, :lengths[i]], t)
            b_ids[r, :len(kept)], b_seg[r, :len(kept)] = kept, 1
        pad = LOO_CHUNK - len(chunk)
        b_ids, b_seg = np.pad(b_ids, ((0, pad), (0, 0))), np.pad(b_seg, ((0, pad), (0, 0)))
        b_seg[len(chunk):, 0] = 1
        p_loo, _ = probs(state, jnp.asarray(b_ids), jnp.asarray(b_seg))
        src = np.asarray([i for i, _ in chunk])
        d = np.asarray(tvd(p_loo[:len(chunk)], p0[src]))
        for r, (i, t) in enumerate(chunk):
            loo[i, t] = d[r]

    alpha_np = np.asarray(alpha)
    tau_g, tau_loo, sig_g, sig_loo = (np.full(N, np.nan) for _ in range(4))
    for i in range(N):
        n = lengths[i]
        if n < 2:
            continue
        tau_g[i], pg = scipy_stats.kendalltau(alpha_np[i, :n], grad_importance[i, :n])
        tau_loo[i], pl = scipy_stats.kendalltau(alpha_np[i, :n], loo[i, :n])
        sig_g[i], sig_loo[i] = pg < 0.05, pl < 0.05

    keys = jax.random.split(jax.random.key(1000 + seed), permutations)
    perm_tvd = np.stack([np.asarray(tvd(probs(state, inputs, seg, models.Interventions(overrides=(
        models.WeightOverride("pool", 0, "permute", key=k),)))[0], p0)) for k in keys])  # [P, N]

    def adv_objective(z, state, inputs, seg, alpha, p0):  # maximise JSD(alpha, alpha') with TVD(output) <= eps
        a = jax.nn.softmax(jnp.where(seg > 0, z, -1e9), -1)
        iv = models.Interventions(overrides=(models.WeightOverride("pool", 0, "given", value=a[:, None, None, :]),))
        p, _ = probs(state, inputs, seg, iv)
        d_out, d_att = tvd(p, p0), jsd(alpha, a)
        return jnp.sum(-d_att + 100.0 * jax.nn.relu(d_out - epsilon)), (d_out, d_att)

    opt = optax.chain(optax.scale_by_adam(), optax.scale(-0.1))  # Adam on the attention logits; the model is fixed
    z = jnp.where(real, jnp.log(jnp.maximum(alpha, 1e-30)), 0.0)
    z = z + jax.random.normal(jax.random.key(2000 + seed), z.shape)
    opt_state = opt.init(z)

    @jax.jit
    def adv_step(z, opt_state, state, inputs, seg, alpha, p0):
        (_, (d_out, d_att)), grad = jax.value_and_grad(adv_objective, has_aux=True)(z, state, inputs, seg, alpha,
                                                                                    p0)
        updates, opt_state = opt.update(grad, opt_state)
        return z + updates, opt_state, d_out, d_att

    best = np.zeros(N)
    for _ in range(adv_steps):
        z, opt_state, d_out, d_att = adv_step(z, opt_state, state, inputs, seg, alpha, p0)
        ok = np.asarray(d_out) <= epsilon  # d_out, d_att describe z before this update
        best = np.where(ok, np.maximum(best, np.asarray(d_att)), best)
    return {"alpha_max": alpha_np.max(-1), "length": lengths, "correct": np.asarray(pred) == batch["label"],
            "tau_grad": tau_g, "tau_loo": tau_loo, "sig_grad": sig_g, "sig_loo": sig_loo,
            "perm_median_tvd": np.median(perm_tvd, 0), "adv_jsd": best}


def test_verse_measures(keep, examples: int, **kwargs) -> dict[str, np.ndarray]:
    """``explanation_measures`` (keyword arguments ``kwargs``) of a trained pooling classifier
    (``analysis.keep.KeepModel``) on ``examples`` verses spread evenly over its test split."""
    n_test = len(keep.data.ids["test"])
    chosen = np.unique(np.linspace(0, n_test - 1, min(examples, n_test)).round().astype(int))
    return explanation_measures(keep.setup.model(keep.params),
                                keep.data.make_batch("test", chosen.tolist(), len(chosen)), **kwargs)


def pretrained_measures(p, texts: Sequence[str], *, permutations: int, seed: int, max_len: int = 64
                        ) -> dict[str, np.ndarray]:
    """Jain & Wallace's forward-only tests on a pretrained checkpoint (``pretrained.load(...)``), per text of
    ``texts`` (arrays of length N). The explanation α is the last layer's attention from the query that predicts,
    averaged over heads: the first token ([CLS]) of an encoder with a classification head (BERT), the last token of
    a decoder-only LM (GPT-2, Llama; the output is its next-token distribution). ``alpha_max``, ``length``;
    ``tau_loo``: Kendall tau between α and the output TVD when the token is deleted; ``perm_median_tvd``: the
    median output TVD over ``permutations`` random permutations of the last layer's weights. (Gradient x input
    and the adversarial search need the attention-pooling classifier of ``explanation_measures``.)"""
    from engine import doctor

    model = p.model
    if isinstance(model, models.DecoderOnly):
        group = "decoder_self"
    elif isinstance(model, models.EncoderOnly) and model.num_classes:
        group = "encoder_self"
    else:
        raise ValueError(f"{p.directory}: a {p.family} checkpoint without a classification head or LM output to "
                         "explain; expected a decoder-only LM (GPT-2, Llama) or an encoder with a classifier (BERT)")
    if permutations < 1 or p.tokenizer is None or not texts:
        raise ValueError(f"pretrained_measures: permutations={permutations}, {len(texts)} texts, tokenizer "
                         f"{'missing' if p.tokenizer is None else 'present'}; expected >= 1, >= 1 and a tokenizer")
    last = models.head_shapes(model)[group][0] - 1
    graphdef, state = nnx.split(model)
    ref_graphdef, ref_state = nnx.split(doctor.reference_model(model))

    def rows(ids, seg):
        return jnp.arange(ids.shape[0]), (0 if group == "encoder_self" else jnp.sum(seg, -1) - 1)

    def call(graphdef, state, ids, seg, iv):
        m = nnx.merge(graphdef, state)
        if group == "encoder_self":
            return m.classify(ids, inputs_segmentation=seg, interventions=iv, return_stats=True)
        logits, stats = m(ids, segmentation=seg, interventions=iv, return_stats=True)
        return logits[rows(ids, seg)], stats

    @jax.jit
    def probs(state, ids, seg, iv=None):
        return jax.nn.softmax(call(graphdef, state, ids, seg, iv)[0].astype(jnp.float32), -1)  # [N, C]

    @jax.jit
    def attention(state, ids, seg):
        w = call(ref_graphdef, state, ids, seg, None)[1][group][last].weights  # [N, H, Tq, Tk]
        i, q = rows(ids, seg)
        return jnp.mean(w[i, :, q], axis=1)  # [N, Tk]

    def batch(seqs):
        ids = np.full((len(seqs), max(len(s) for s in seqs)), p.cfg.pad_id, np.int32)
        seg = np.zeros_like(ids)
        for i, s in enumerate(seqs):
            ids[i, :len(s)], seg[i, :len(s)] = s, 1
        return jnp.asarray(ids), jnp.asarray(seg)

    seqs = [p.tokenizer.encode(t)[:max_len] for t in texts]
    ids, seg = batch(seqs)
    p0, alpha = probs(state, ids, seg), np.asarray(attention(ref_state, ids, seg))
    lengths = np.array([len(s) for s in seqs])
    tau = np.full(len(seqs), np.nan)
    for i, s in enumerate(seqs):
        if len(s) > 2:
            dropped = batch([s[:t] + s[t + 1:] for t in range(len(s))])
            loo = np.asarray(tvd(probs(state, *dropped), p0[i][None]))
            tau[i] = scipy_stats.kendalltau(alpha[i, :len(s)], loo)[0]
    keys = jax.random.split(jax.random.key(1000 + seed), permutations)
    perm = np.stack([np.asarray(tvd(probs(state, ids, seg, models.Interventions(overrides=(
        models.WeightOverride(group, last, "permute", key=k),))), p0)) for k in keys])  # [P, N]
    return {"alpha_max": np.array([alpha[i, :n].max() for i, n in enumerate(lengths)]), "length": lengths,
            "tau_loo": tau, "perm_median_tvd": np.median(perm, 0)}
