"""Every registered task describes its batches consistently (what the doctor, explorer, eval.py and train.py
read from it), checked on a small hand-made batch built from the description itself."""
import os

import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

import models
from engine.tasks import TASKS, Side, Task, task_of

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CFG = models.TransformerConfig(vocab_size=16, d_model=8, num_heads=2, d_ff=8)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_the_task_describes_its_batches(name):
    task = TASKS[name](None)
    assert task.name == name and set(task.group_sides) == set(task.groups)
    assert set(task.causal_groups()) <= set(task.groups)
    assert task.causal_side is None or task.causal_side in {s.name for s in task.sides}
    assert set(task.splits) >= {"validation"} and task.draws_heatmaps <= task.decodes
    tokens = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], np.int32)
    batch = task.complete_batch({s.tokens: tokens for s in task.sides}, CFG, rows=2)
    real = task.real_positions(batch, CFG)
    assert task.logits_side in real
    for q, k in task.group_sides.values():
        assert q in real and k in real
        assert task.side_tokens(batch, k, CFG).shape == tokens.shape
    padded = task.pad_batch(batch, 3, CFG)
    for s in task.sides:
        assert padded[s.tokens].shape == (2, 7) and np.all(padded[s.tokens][:, 4:] == CFG.pad_id)
    with pytest.raises(ValueError, match="missing"):
        task.complete_batch({"nothing": tokens}, CFG, rows=2)


def test_a_models_task_is_found_by_its_class():
    from flax import nnx

    assert task_of(models.DecoderOnly(CFG.replace(num_encoder_layers=0), rngs=nnx.Rngs(0))).name == "lm"
    with pytest.raises(ValueError, match="no task trains a Linear"):
        task_of(nnx.Linear(2, 2, rngs=nnx.Rngs(0)))


# -------------------------------------------------------------------------- a new task, added from outside
class CountingData:
    """A new task's data: rows counting up from a random start (``x, x+1, ...`` over ids 3..V-1, right-padded
    with 0); the target of each position is the next count. Keys of its own (``seq``, ``next``), so nothing
    reads them but the task's description."""

    vocab_size, length, batch = 16, 12, 8

    def __init__(self, seed: int):
        self.seed = seed

    def _batch(self, index: int, stream: int = 0) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([self.seed, stream, index])
        seq, nxt = np.zeros((2, self.batch, self.length), np.int32)
        for r in range(self.batch):
            n = int(rng.integers(4, self.length))
            counts = 3 + (int(rng.integers(0, 13)) + np.arange(n + 1)) % 13
            seq[r, :n], nxt[r, :n] = counts[:-1], counts[1:]
        return {"seq": seq, "next": nxt}

    def train_iter(self):
        data = self

        class Iterator:  # checkpointable: its state is the next batch's index
            index = 0

            def __next__(self):
                self.index += 1
                return data._batch(self.index)

            def get_state(self):
                return {"index": self.index}

            def set_state(self, state):
                self.index = int(state["index"])

        return Iterator()

    def eval_batches(self, split: str):
        return [self._batch(i, stream=1) for i in range(2)]

    def describe(self) -> str:
        return f"counting: {self.batch} rows of up to {self.length} tokens"


class CountingTask(Task):
    """Predict the next count: a decoder-only task with a batch layout of its own."""

    name = "counting"
    groups = ("decoder_self",)
    model_class = models.DecoderOnly
    sides = (Side("target", "seq", "seq_segmentation", "seq_position", aligned_tokens=("next",)),)
    group_sides = {"decoder_self": ("target", "target")}
    causal_side, causal_shift = "target", 0

    def build_data(self, workdir, process_index, process_count):
        return CountingData(int(self.config.seed))

    def create_model(self, cfg, rngs):
        return models.DecoderOnly(cfg, rngs=rngs)

    def forward(self, model, batch, *, deterministic, return_stats=False, interventions=None):
        return model(batch["seq"], segmentation=batch.get("seq_segmentation"), position=batch.get("seq_position"),
                     deterministic=deterministic, return_stats=return_stats, interventions=interventions)

    def targets(self, batch):
        return batch["next"]

    def loss_weights(self, batch):
        return (batch["next"] != 0).astype(jnp.float32)

    def tokens(self, batch):
        return jnp.sum(batch["seq"] != 0)

    def visible_keys(self, batch):
        T = batch["seq"].shape[1]
        return {"decoder_self": jnp.broadcast_to(jnp.arange(1, T + 1, dtype=jnp.float32), batch["seq"].shape)[:, None]}


def test_a_task_added_from_outside_trains_evaluates_and_is_diagnosed_and_explored(tmp_path, monkeypatch):
    """The three pieces of a new task (its data, its Task, its config) and nothing else: engine.run trains and
    evaluates it, eval.py's checkpoint evaluation, the doctor and the explorer read it through its description."""
    from engine import config as config_lib
    from engine import explorer, loop, restore

    monkeypatch.setitem(TASKS, "counting", CountingTask)
    presets = config_lib.sibling_config(os.path.join(REPO, "configs", "_presets.py"), "_presets")
    c = config_lib.base_config()
    c.task = "counting"
    c.data = ml_collections.ConfigDict({"batch_size": CountingData.batch})
    c.model = presets.model_section(d_model=32, num_heads=2, d_ff=64, num_encoder_layers=0, num_decoder_layers=1,
                                    dropout_rate=0.0, position="learned", max_len=CountingData.length)
    c.mesh.data = 1
    c.train.update(learning_rate=3e-3, warmup_steps=2, num_steps=4, log_every=2, stats_every=2,
                   checkpoint_every=0, async_checkpoint=False, peak_flops=1e12)
    c.wandb.mode = "disabled"
    c.doctor.update(max_batches=1, rows_per_batch=4)
    workdir = str(tmp_path / "run")

    final = loop.run(c, workdir)
    assert final["step"] == 4 and np.isfinite(final["validation/loss"]) and 0 <= final["validation/accuracy"] <= 1
    assert any("attn/decoder_self/entropy/L0H1" in r for r in final["history"])
    results = restore.evaluate_checkpoint(c, workdir, split="validation", stats_batches=1)
    assert results["step"] == 4 and np.isfinite(results["validation/loss"])
    d = restore.diagnose_checkpoint(c, workdir, split="validation")
    assert {"causal_weight", "causal_leakage", "padding_weight"} <= {f.check for f in d["findings"]}
    _, _, setup, state, _ = restore.restore_run(c, workdir)
    batch = CountingData(0).eval_batches("validation")[0]
    paths = explorer.write_batch_explorers(setup.model(state["params"]), batch, str(tmp_path / "explorer"), rows=[0],
                                           source_piece=str, target_piece=str, task="counting")
    assert os.path.exists(paths[0])
