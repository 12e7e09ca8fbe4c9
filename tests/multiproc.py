"""Run a Python script as several JAX processes of CPU devices that meet through a local coordinator (gloo
collectives), each process's stdout and stderr read through one pipe, every process group killed on a timeout.

    from tests import multiproc
    for code, out in multiproc.run_processes(str(tmp_path / "host.py"), "arg", processes=2, devices=2):
        ...
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from typing import Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    """A TCP port on localhost that no one listens on now."""
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_processes(script: str, *args: str, processes: int = 2, devices: int = 2, timeout: float = 180,
                  env_extra: Optional[dict[str, str]] = None) -> list[tuple[int, str]]:
    """(exit code, output) of each of ``processes`` copies of ``python script *args``, ``devices`` CPU devices
    each; a process still running after ``timeout`` seconds is killed with its group (its code is then -9)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_"))}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}", PYTHONPATH=REPO,
               JAX_COORDINATOR_ADDRESS=f"localhost:{free_port()}", JAX_NUM_PROCESSES=str(processes),
               OMP_NUM_THREADS="1", **(env_extra or {}))
    procs = [subprocess.Popen([sys.executable, script, *args], env=dict(env, JAX_PROCESS_ID=str(i)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
             for i in range(processes)]
    outs, deadline = [], time.monotonic() + timeout
    try:
        for p in procs:
            try:
                outs.append(p.communicate(timeout=max(deadline - time.monotonic(), 1))[0])
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                outs.append(p.communicate()[0])
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return [(p.returncode, out) for p, out in zip(procs, outs)]
