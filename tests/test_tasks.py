"""Every registered task describes its batches consistently (what the doctor, explorer, eval.py and train.py
read from it), checked on a small hand-made batch built from the description itself."""
import numpy as np
import pytest

import models
from engine.tasks import TASKS, task_of

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
