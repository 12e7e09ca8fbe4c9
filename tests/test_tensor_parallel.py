"""Model (tensor) and context (sequence) parallelism end to end through ``engine.run`` on 8 simulated devices:
the loss curves equal those of one device, and the parameters / batches are really split."""
import os

import jax
import numpy as np
import pytest

import engine
from engine import config as config_lib
from engine import sharding as sharding_lib
from engine import state as state_lib
from engine import tasks
from studies.inprocess import load
from test_train import STEPS, corpus, tiny_translation_config  # noqa: F401  (corpus: a fixture)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def loss_curve(result: dict) -> list[float]:
    return [h["train/loss"] for h in result["history"] if "train/loss" in h and "event" not in h]


@pytest.fixture(scope="module")
def translation(tmp_path_factory, corpus):  # noqa: F811
    """(config factory, one-device result) for the tiny translation model with 4 heads."""
    cache = str(tmp_path_factory.mktemp("cache"))

    def config(model: int):
        c = tiny_translation_config(corpus, cache, devices=1 if model == 1 else -1)
        c.model.num_heads = 4
        c.mesh.model = model
        c.train.update(stats_every=4, checkpoint_every=0)
        c.eval.update(at_end=False)
        return c

    return config, engine.run(config(1))


@pytest.mark.parametrize("model", [2, pytest.param(4, marks=pytest.mark.slow)])  # 4: in `pytest -m slow`
def test_model_axis_trains_the_translation_model_like_one_device(translation, model):
    config, one = translation
    c = config(model)
    r = engine.run(c)
    assert r["step"] == STEPS
    np.testing.assert_allclose(loss_curve(r), loss_curve(one), rtol=2e-5, atol=2e-6)
    for (_, a), (_, b) in zip(r["attention"], one["attention"]):  # statistics of the training forward pass
        np.testing.assert_allclose(a["cross"]["entropy"], b["cross"]["entropy"], rtol=1e-4, atol=1e-5)

    task = tasks.get_task(c)
    mesh = sharding_lib.make_mesh(c.mesh)
    assert dict(mesh.shape) == {"data": 8 // model, "model": model}
    setup, init = state_lib.build(c, task, mesh, task.build_data(None, 0, 1).vocab_size)
    leaves = {sharding_lib.path_str(p): x for p, x in jax.tree_util.tree_flatten_with_path(init()["params"])[0]}
    queries = [x for p, x in leaves.items() if p.endswith("query/kernel")]  # [d_model, H, D]
    mlp_in = [x for p, x in leaves.items() if p.endswith("mlp/wi/kernel")]  # [d_model, d_ff]
    assert queries and mlp_in
    assert {x.sharding.shard_shape(x.shape) for x in queries} == {(32, 4 // model, 8)}
    assert {x.sharding.shard_shape(x.shape) for x in mlp_in} == {(32, 64 // model)}


def lm_config(context: int, layout: str = "natural"):
    c = load(os.path.join(REPO, "configs", "long_context.py") + f":quick,context={context},layout={layout}")
    c.train.update(num_steps=3, stats_every=2)
    c.eval.position_loss = True
    c.mesh.data = 1  # context 8: all 8 devices on the sequence; context 1: one device
    return c


@pytest.fixture(scope="module")
def one_device_lm():
    return engine.run(lm_config(1))


def test_long_context_config_validates_for_8_devices():
    c = load(os.path.join(REPO, "configs", "long_context.py"))
    assert (c.data.seq_len, c.mesh.context, c.model.attention_impl) == (16384, 8, "ring")
    config_lib.validate(c, 8, ("ring",))
    with pytest.raises(config_lib.ConfigError, match="config.mesh.context=8 needs config.model.attention_impl='ring'"):
        c.model.attention_impl = "chunked"
        config_lib.validate(c, 8, ("ring", "chunked"))


@pytest.mark.parametrize("layout", ["natural", "zigzag"])
def test_context_axis_trains_with_ring_attention_like_one_device(one_device_lm, layout):
    one = one_device_lm
    c = lm_config(8, layout)
    mesh = sharding_lib.make_mesh(c.mesh)
    assert dict(mesh.shape) == {"data": 1, "context": 8, "model": 1}
    batch = sharding_lib.shard_batch({"inputs": np.zeros((2, 256), np.int32)}, mesh)
    assert batch["inputs"].sharding.shard_shape((2, 256)) == (2, 32)  # each device: 32 of the 256 tokens
    ring = engine.run(c)
    assert ring["step"] == 3
    np.testing.assert_allclose(loss_curve(ring), loss_curve(one), rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(ring["attention"][-1][1]["decoder_self"]["entropy"],
                               one["attention"][-1][1]["decoder_self"]["entropy"], rtol=1e-4, atol=1e-5)
    assert ring["validation/loss"] == pytest.approx(one["validation/loss"], rel=1e-5)
    np.testing.assert_allclose(ring["validation/position_loss"], one["validation/position_loss"], rtol=1e-4,
                               atol=1e-5)  # in natural order whatever the layout


def test_context_axis_must_divide_the_sequence():
    c = lm_config(8)
    c.data.seq_len = 260
    c.model.max_len = 260
    with pytest.raises(config_lib.ConfigError, match="config.data.seq_len=260 is not divisible by config.mesh.context=8"):
        config_lib.validate(c, jax.device_count(), ("ring",))


def test_zigzag_batch_gives_each_device_two_chunks_with_their_positions():
    seg = np.array([[1, 1, 1, 2, 2, 2, 2, 0], [1, 1, 1, 1, 1, 1, 1, 1]], np.int32)
    batch = {"inputs": np.arange(16, dtype=np.int32).reshape(2, 8), "segmentation": seg, "rows": np.arange(2)}
    z = sharding_lib.zigzag_batch(batch, 2)  # 4 chunks of 2: device 0 gets chunks 0 and 3, device 1 chunks 1, 2
    order = [0, 1, 6, 7, 2, 3, 4, 5]
    np.testing.assert_array_equal(z["inputs"], batch["inputs"][:, order])
    np.testing.assert_array_equal(z["segmentation"], seg[:, order])
    np.testing.assert_array_equal(z["position"], np.array([[0, 1, 3, 0, 2, 0, 1, 2], [0, 1, 6, 7, 2, 3, 4, 5]]))
    np.testing.assert_array_equal(z["rows"], batch["rows"])  # one value per row: not a sequence
    mesh = sharding_lib.make_mesh(lm_config(8, "zigzag").mesh)
    with pytest.raises(ValueError, match="layout='diagonal'; expected one of"):
        sharding_lib.shard_batch(batch, mesh, "diagonal")


def test_zigzag_layout_is_checked_against_the_mesh_and_the_sequence():
    c = lm_config(8, "zigzag")
    config_lib.validate(c, 8, ("ring",))
    c.data.seq_len = c.model.max_len = 264  # a multiple of 8 but not of 16
    with pytest.raises(config_lib.ConfigError, match="seq_len=264 is not divisible by 2 x config.mesh.context=8"):
        config_lib.validate(c, 8, ("ring",))
    c = lm_config(1)
    c.mesh.context_layout = "zigzag"
    with pytest.raises(config_lib.ConfigError, match="context_layout='zigzag' needs config.mesh.context > 1"):
        config_lib.validate(c, 8, ("ring",))
    c.mesh.context_layout = "diagonal"
    with pytest.raises(config_lib.ConfigError, match="mesh.context_layout"):
        config_lib.validate(c, 8, ("ring",))
