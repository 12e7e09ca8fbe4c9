"""Checkpoints that survive damage: the latest step falls back past damaged ones (moved aside, never deleted),
an explicit damaged or missing step is an error listing the steps, a checkpoint of another model config is
named before any array is read."""
import logging
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from engine import checkpoint as ckpt_lib
from engine.errors import CheckpointError


def state_at(step: int, width: int = 65536) -> dict:
    return {"params": {"dense": {"w": jnp.arange(width, dtype=jnp.float32) + step}}, "step": jnp.asarray(step)}


def abstract(width: int = 65536) -> dict:
    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), state_at(0, width))


def truncate_array_file(step_dir: str) -> None:
    d = os.path.join(step_dir, "state", "ocdbt.process_0", "d")
    biggest = max((os.path.join(d, f) for f in os.listdir(d)), key=os.path.getsize)
    with open(biggest, "r+b") as f:
        f.truncate(os.path.getsize(biggest) // 2)


def garble(path: str) -> None:
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


DAMAGE = {
    "truncated array file": truncate_array_file,
    "garbled state/_METADATA": lambda d: garble(os.path.join(d, "state", "_METADATA")),
    "garbled data-iterator JSON": lambda d: garble(os.path.join(d, "data", "metadata")),
    "missing manifest": lambda d: os.remove(os.path.join(d, "state", "manifest.ocdbt")),
}


@pytest.fixture
def saved(tmp_path):
    """Steps 3 and 5 saved (with a recorded config) and closed; returns the checkpoint directory."""
    directory = str(tmp_path / "checkpoints")
    ck = ckpt_lib.Checkpointer(directory, async_save=False, config={"model": {"width": 65536}})
    for step in (3, 5):
        ck.save(step, state_at(step), {"next_index": step})
    ck.close()
    return directory


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_latest_falls_back_to_the_newest_step_that_restores(saved, damage, caplog):
    DAMAGE[damage](os.path.join(saved, "5"))
    ck = ckpt_lib.Checkpointer(saved, async_save=False)
    if damage != "truncated array file":  # incomplete files are seen without reading arrays
        assert ck.latest_step() == 3
    with caplog.at_level(logging.WARNING, logger="attnlab"):
        state, data_state, step = ck.restore(abstract())
    assert step == 3 and data_state == {"next_index": 3}
    np.testing.assert_array_equal(state["params"]["dense"]["w"], np.arange(65536) + 3)
    lines = [r.getMessage() for r in caplog.records if "cannot be restored" in r.getMessage()]
    assert len(lines) == 1 and f"step 5 at {os.path.join(saved, '5')}" in lines[0] and "resumed from step 3" in lines[0]
    moved = os.path.join(saved + "_damaged", "5")
    assert os.path.isdir(moved) and not os.path.exists(os.path.join(saved, "5"))  # kept, out of Orbax's listing
    assert ck.all_steps() == [3]
    ck.save(5, state_at(50), {"next_index": 50})  # the step number is free again
    ck.close()
    reopened = ckpt_lib.Checkpointer(saved, async_save=False)
    assert reopened.all_steps() == [3, 5] and reopened.latest_step() == 5
    assert reopened.restore(abstract())[1] == {"next_index": 50}
    reopened.close()


def test_explicit_damaged_or_missing_step_lists_the_steps(saved):
    DAMAGE["garbled state/_METADATA"](os.path.join(saved, "5"))
    ck = ckpt_lib.Checkpointer(saved, async_save=False)
    with pytest.raises(CheckpointError, match=r"checkpoint step 5 at .*/5 is damaged: state/_METADATA is not valid "
                                              r"JSON .*; steps: \[3\]; damaged: 5 \(state/_METADATA"):
        ck.restore(abstract(), step=5)
    with pytest.raises(CheckpointError, match=r"no checkpoint at step 4 in .*; steps: \[3\]; damaged: 5"):
        ck.restore(abstract(), step=4)
    assert os.path.isdir(os.path.join(saved, "5"))  # an explicit request moves nothing
    ck.close()


def test_explicit_step_that_fails_to_read_is_a_checkpoint_error(saved):
    truncate_array_file(os.path.join(saved, "5"))
    ck = ckpt_lib.Checkpointer(saved, async_save=False)
    with pytest.raises(CheckpointError, match=r"step 5 at .* is damaged: reading it failed: .*; steps: \[3, 5\]"):
        ck.restore(abstract(), step=5)
    ck.close()


def test_when_no_step_restores_nothing_is_moved(saved):
    for step in ("3", "5"):
        truncate_array_file(os.path.join(saved, step))
    ck = ckpt_lib.Checkpointer(saved, async_save=False)
    with pytest.raises(CheckpointError, match=r"no checkpoint in .* restores \(nothing was moved\): step 5: reading "
                                              r"it failed: .*; step 3: reading it failed"):
        ck.restore(abstract())
    assert sorted(os.listdir(saved)) == ["3", "5"] and not os.path.exists(saved + "_damaged")
    ck.close()


def test_another_model_config_is_named_before_orbax_reads_arrays(saved, monkeypatch):
    ck = ckpt_lib.Checkpointer(saved, async_save=False, config={"model": {"width": 128}})

    def no_read(*args, **kwargs):
        raise AssertionError("Orbax was asked to restore")

    monkeypatch.setattr(ck, "_read", no_read)
    with pytest.raises(CheckpointError, match=r"^checkpoint step 5 in .* was written by another model config; config "
                                              r"fields that differ: model.width=65536 in the checkpoint, 128 now; 1 "
                                              r"parameter\(s\) differ: params/dense/w: \[65536\] float32 in the "
                                              r"checkpoint, \[128\] float32 now\. Use the config"):
        ck.restore(abstract(128))
    with pytest.raises(CheckpointError, match=r"^checkpoint step 3 in .* another model config"):
        ck.restore(abstract(128), step=3)
    assert sorted(os.listdir(saved)) == ["3", "5"]
    ck.close()


def test_a_damaged_step_is_moved_aside_before_it_is_saved_again(saved):
    DAMAGE["garbled data-iterator JSON"](os.path.join(saved, "5"))
    ck = ckpt_lib.Checkpointer(saved, async_save=False)
    ck.save(5, state_at(7), {"next_index": 7})
    assert ck.restore(abstract(), step=5)[1] == {"next_index": 7}
    ck.close()
    assert os.path.isdir(os.path.join(saved + "_damaged", "5"))
    intact, damaged, aside = ckpt_lib.inventory(saved)
    assert intact == [3, 5] and damaged == {} and aside == [os.path.join(saved + "_damaged", "5")]


def test_set_aside_steps_are_invisible_to_orbax(saved):
    truncate_array_file(os.path.join(saved, "5"))
    ck = ckpt_lib.Checkpointer(saved, async_save=False)
    ck.restore(abstract())
    ck.close()
    manager = ocp.CheckpointManager(saved, item_names=("state", "data"))
    assert list(manager.all_steps()) == [3]
    manager.close()


def _raised_in(filename: str, function: str = "write"):
    """exc_info of an OSError(ENOSPC) raised in ``function`` of code compiled as ``filename``."""
    space = {}
    exec(compile(f"def {function}():\n    raise OSError(28, 'No space left on device')\n", filename, "exec"),
         space)
    try:
        space[function]()
    except OSError:
        return sys.exc_info()


def _orbax_future_record(exc_info) -> logging.LogRecord:
    message = "Future exception was never retrieved\nfuture: <Future finished exception=OSError(28)>"
    return logging.LogRecord("asyncio", logging.ERROR, "/usr/lib/python3.11/asyncio/base_events.py", 1771,
                             message, None, exc_info)


def test_orbax_error_logs_are_silenced_also_when_only_their_traceback_names_orbax():
    """asyncio's "Future exception was never retrieved" (an abandoned write of a failed background save, collected
    at exit) names only the future; its traceback runs through Orbax: dropped, and its cause kept. An error from
    elsewhere still reaches the log."""
    failures = ckpt_lib._SaveFailures()
    failures.armed = True  # a save has started
    record = _orbax_future_record
    assert failures.filter(record(_raised_in("/site-packages/numpy/io.py"))) and failures.cause is None
    assert not failures.filter(record(_raised_in("/site-packages/orbax/checkpoint/_src/path/async_path.py")))
    assert "No space left on device" in failures.cause


def test_the_noise_of_a_failed_read_is_never_reported_as_a_failed_save():
    """The abandoned reads of a failed restore (a damaged checkpoint, set aside) surface whenever their futures are
    collected: before the first save or after it, they are dropped and never become a save's failure."""
    failures = ckpt_lib._SaveFailures()
    orbax = "/site-packages/orbax/checkpoint/_src/serialization/serialization.py"
    write = _orbax_future_record(_raised_in(orbax))
    assert not failures.filter(write) and failures.cause is None  # no save started yet
    failures.armed = True
    for function in ("_read_array_index_and_device_put", "deserialize", "_read_shard"):
        assert not failures.filter(_orbax_future_record(_raised_in(orbax, function)))
        assert failures.cause is None, function
    assert not failures.filter(write) and "No space left on device" in failures.cause
