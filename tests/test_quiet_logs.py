"""Multi-host logs without third-party chatter: two CPU processes (gloo) print no Gloo connection lines once
logging is set up, keep results and warnings, and prefix every log line with the process index."""
import logging
import os
import re
import subprocess
import sys

import pytest

from engine import logs
from tests import multiproc

# Two processes of two CPU devices. A collective over all four devices before logging is set up shows that Gloo
# does print its connection lines here; after setup_logging, collectives over new device sets (new Gloo contexts)
# print none, while Python's stdout, the log lines and a warning still come through.
HOST = """
import jax
import jax.numpy as jnp
import numpy as np

from engine import logs, runtime

runtime.maybe_initialize_distributed("yes")
P = jax.sharding.PartitionSpec
flat = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
ones = jax.make_array_from_process_local_data(jax.sharding.NamedSharding(flat, P("data")), np.ones((2, 4), np.float32))
print("before", float(jax.jit(jnp.sum)(ones)), flush=True)
print("MARK", flush=True)
log = logs.setup_logging()
grid = jax.sharding.Mesh(np.array(jax.devices()).reshape(2, 2), ("a", "b"))
cells = jax.sharding.NamedSharding(grid, P("a", "b"))
rows = jax.make_array_from_process_local_data(cells, np.ones((1, 4), np.float32))
column_sums = jax.jit(lambda x: x.sum(axis=0), out_shardings=jax.sharding.NamedSharding(grid, P("b")))(rows)
log.info("column sums %s", np.asarray(column_sums.addressable_shards[0].data).tolist())
log.info("two\\nlines")
log.warning("a warning stays")
print("after", float(jax.jit(jnp.sum)(jax.device_put(ones, jax.sharding.NamedSharding(grid, P())))), flush=True)
"""


@pytest.mark.slow  # a two-process launch
def test_no_gloo_connection_lines_after_logging_is_set_up(tmp_path):
    (tmp_path / "host.py").write_text(HOST)
    results = multiproc.run_processes(str(tmp_path / "host.py"), processes=2, devices=2)
    assert [code for code, _ in results] == [0, 0], results
    for i, (_, out) in enumerate(results):
        before, after = out.split("MARK\n")
        assert "[Gloo] Rank" in before, out  # the control: Gloo prints them in this setting
        assert "Gloo" not in after, out
        lines = after.splitlines()
        assert lines.count("after 16.0") == 1, out
        logged = [re.sub(rf"^\[p{i}\] (\d\d:\d\d:\d\d )?", "", line) for line in lines if line.startswith(f"[p{i}] ")]
        assert logged == ["INFO column sums [2.0, 2.0]", "INFO two", "lines", "WARNING a warning stays"], out


def test_every_line_of_a_message_carries_the_host_prefix():
    record = logging.LogRecord("attnlab", logging.INFO, __file__, 1, "data: x\ntokenizer: y", None, None)
    lines = logs.HostFormatter("[p1] ").format(record).splitlines()
    assert [line[:5] for line in lines] == ["[p1] ", "[p1] "] and lines[1] == "[p1] tokenizer: y"
    assert logs.HostFormatter().format(record).endswith("INFO data: x\ntokenizer: y")


def test_muting_cpp_stdout_needs_the_loaded_libstdcxx():
    """In a fresh interpreter that has not loaded libstdc++ nothing is muted (no copy of it is loaded); after
    importing JAX, std::cout of the process is muted."""
    code = ("from engine import logs; first = logs.mute_cpp_stdout(); import jax; "
            "print(first, logs.mute_cpp_stdout())")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=multiproc.REPO),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.split() == ["False", "True"], out.stderr[-2000:]
