"""Admin (``norm="admin"``): post-LN with residual scales set from one forward pass (Liu et al. 2020)."""
import jax
import numpy as np
from flax import nnx

import engine
import models
from engine import hooks as hooks_lib
from models import transformer as transformer_lib
from test_loop import mqar_config

V = 40
INPUTS = jax.random.randint(jax.random.PRNGKey(0), (2, 7), 3, V)
TARGETS = jax.random.randint(jax.random.PRNGKey(1), (2, 6), 3, V)


def config(**kw) -> models.TransformerConfig:
    fields = dict(vocab_size=V, d_model=32, num_heads=4, d_ff=64, num_encoder_layers=2, num_decoder_layers=2,
                  dropout_rate=0.0, max_len=32, norm="admin")
    return models.TransformerConfig(**{**fields, **kw})


def build(cfg: models.TransformerConfig) -> models.EncoderDecoder:
    return models.EncoderDecoder(cfg, rngs=nnx.Rngs(params=0, dropout=1))


def scales(params) -> dict[str, np.ndarray]:
    """Every ``omega`` leaf of a model or a pure parameter dict, by path."""
    state = params if isinstance(params, dict) else nnx.to_pure_dict(nnx.state(params, nnx.Param))
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in jax.tree_util.tree_flatten_with_path(state)[0]
            if jax.tree_util.keystr(p).endswith("['omega']")}


def test_unprofiled_admin_is_post_ln_and_counts_its_scales():
    admin, post = build(config()), build(config(norm="post"))
    np.testing.assert_array_equal(np.asarray(admin(INPUTS, TARGETS)), np.asarray(post(INPUTS, TARGETS)))
    sublayers = 2 * 2 + 2 * 3  # encoder: attention, mlp; decoder: self, cross, mlp
    assert models.count_params(admin) == models.count_params(post) + sublayers * 32
    assert models.count_params(admin) == models.param_count_formula(config())
    assert len(scales(admin)) == sublayers and all(np.all(s == 1.0) for s in scales(admin).values())


def test_profiling_follows_the_variance_recurrence_per_stack(monkeypatch):
    """omega_1 = 1 in each stack, omega_{i+1} = sqrt(Var(omega_i x_i) + Var(f_i(x_i))) in call order."""
    seen = []
    residual = transformer_lib._Sublayer.residual

    def recording(self, x, y, deterministic):
        out = residual(self, x, y, deterministic)
        seen.append((np.asarray(self.omega[...]), np.asarray(x), np.asarray(y)))
        return out

    monkeypatch.setattr(transformer_lib._Sublayer, "residual", recording)
    model = build(config())
    models.admin_initialize(model, lambda m: m(INPUTS, TARGETS))
    assert len(seen) == 10
    for stack in (seen[:4], seen[4:]):  # the encoder's 4 sublayers, then the decoder's 6
        assert np.all(stack[0][0] == 1.0)
        for (omega, x, y), (next_omega, _, _) in zip(stack, stack[1:]):
            expected = np.sqrt(np.var(omega * x) + np.var(y))
            np.testing.assert_allclose(next_omega, np.full_like(next_omega, expected), rtol=1e-5)
            assert next_omega[0] > omega[0]
    after = scales(model)
    assert sorted(float(s[0]) for s in after.values()) == sorted(float(o[0]) for o, _, _ in seen)
    monkeypatch.undo()
    assert not np.allclose(np.asarray(model(INPUTS, TARGETS)), np.asarray(build(config())(INPUTS, TARGETS)))


def test_profiling_under_jit_matches_eager():
    eager = build(config())
    models.admin_initialize(eager, lambda m: m(INPUTS, TARGETS))
    graphdef, params = nnx.split(build(config()), nnx.Param)

    @jax.jit
    def profile(params):
        model = nnx.merge(graphdef, params)
        models.admin_initialize(model, lambda m: m(INPUTS, TARGETS))
        return nnx.state(model, nnx.Param)

    jitted, expected = scales(nnx.to_pure_dict(profile(params))), scales(eager)
    assert jitted.keys() == expected.keys()
    for k in expected:
        np.testing.assert_allclose(jitted[k], expected[k], rtol=1e-5)


def test_engine_sets_the_scales_before_the_first_step():
    c = mqar_config(steps=2, norm="admin")
    seen = {}

    class Snapshot(hooks_lib.Hook):
        def before_step(self, run, batch):
            seen.setdefault("first", scales(jax.device_get(run.state["params"])))

    r = engine.run(c, hooks=[Snapshot()])
    assert np.isfinite(r["train/loss"])
    first = seen["first"]
    assert first and all(np.all(s == s[0]) for s in first.values())
    values = [float(s[0]) for s in first.values()]
    assert values.count(1.0) == 1 and min(values) == 1.0 and max(values) > 1.0  # one stack: one start
