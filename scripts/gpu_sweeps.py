"""The ablation points that need an accelerator (or would take CPU sessions), trained in parallel on one GPU.

Studies (``--studies``, trained in this order):

- ``table3_d512``: Vaswani et al. Table 3 at d_model 512, the paper's own d_k values (rows (A) h = 1 .. 32 give
  d_k 512 .. 16; rows (B) d_k 32 and 16 at 8 heads), 3 seeds, with the A/A control, the single-head extension and
  the single-head d_k control, as at d_model 128 and 256: 33 points, the second table of the ablations issue, out of
  reach of the 2-core CPU (``python -m studies train table3_d512``).
- ``table3_d256``: the d_model 256 points still without a committed record (the CPU queue's last study).
- ``heads_vs_depth``: the heads-vs-depth points still without a record.

Each point is the run the CPU queue would make (same config spec, overrides, step budget and data order, so the
same record name and the same report), with execution settings kept in its record under ``execution``:
``model.attention_impl = "xla"`` (the CPU's attention path; the Pallas kernel has not been checked on a GPU) and,
for every process, full-precision float32 matmuls (``JAX_DEFAULT_MATMUL_PRECISION=highest``, not TF32).
``--workers`` points train at once, sharing the GPU and JAX's compilation cache; no point starts when the
median time of the finished ones (``--first_estimate`` before any) would overrun ``--budget``. Every finished
point's record and decoded test sentences are added at once to ``<out>/records.tar.gz`` (paths relative to the
repository), so what finished survives a timeout; ``<out>/points.csv`` has one row per attempted point
(ok, wall seconds, validation NLL, test BLEU, the device and matmul precision its record names, the error if any).

Here, once per checkout (network to PyPI; both folders are git-ignored, 32 MB together):

    python scripts/gpu_sweeps.py --prepare       # .whl/: pinned wheels the accelerator image lacks
                                                 # .gpu_cache/: the corpus, tokenizer and encoding caches and
                                                 # the commit (the device's copy has no git): run it last;
                                                 # over 64 MiB with the tracked files, the tfds train split
                                                 # (unread when the caches hit) is left out
On the device machine, one call with ``carry`` [".whl", ".gpu_cache"]:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \\
      .whl/*.whl && export PYTHONPATH=/tmp/site:. && mkdir -p $OUT && \\
      PYTHONUNBUFFERED=1 timeout 480 python3 scripts/gpu_sweeps.py --out $OUT --budget 420 2>&1 | tee $OUT/log.txt
Here, after it (records that exist are never replaced; the reports of the studies it adds to are rebuilt):

    python scripts/gpu_sweeps.py --collect <files_at>/records.tar.gz

CPU check of the whole path, tiny models (``--quick`` configs, records under ``<out>/dry_run``):
``python scripts/gpu_sweeps.py --dry-run --out /tmp/gpu_sweeps``.
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import queue
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from typing import Optional, Sequence

from studies import points as sweep_lib
from studies import specs
from studies import study as study_lib
from studies.records import Record
from studies.report import REPO, source_commit
from studies.runner import Job

STUDY_NAMES = ("table3_d512", "table3_d256", "heads_vs_depth")  # the registered studies it trains, in this order


def study_jobs(name: str, dry_run: bool, tmp: str) -> list[Job]:
    """The jobs of registered study ``name`` in training order, done or not; with ``dry_run`` its --quick points,
    records and run folders under ``tmp``."""
    study = specs.study(name)
    if dry_run:
        return study_lib.jobs(study, quick=True, out=os.path.join(tmp, name), workdir=os.path.join(tmp, "runs", name))
    return study_lib.jobs(study)
EXECUTION = {"model.attention_impl": "xla"}
ENVIRONMENT = {"JAX_DEFAULT_MATMUL_PRECISION": "highest", "XLA_PYTHON_CLIENT_PREALLOCATE": "false",
               "WANDB_MODE": "disabled", "TF_CPP_MIN_LOG_LEVEL": "2"}
# Wheels the accelerator image lacks (or has at another version), pinned to constraints/py312-jax011.txt.
WHEELS = ("flax==0.12.12", "optax==0.2.8", "orbax-checkpoint==0.12.8", "ml_collections==1.1.0", "grain==0.2.18",
          "array_record==0.8.6", "tensorflow-datasets==4.9.10", "tensorflow-metadata==1.21.0", "dm-tree==0.1.10",
          "immutabledict==4.3.1", "importlib_resources==7.1.0", "simple-parsing==0.1.9", "docstring_parser==0.18.0",
          "termcolor==3.3.0", "toml==0.10.2", "googleapis-common-protos==1.76.0", "protobuf==7.36.2",
          "portpicker==1.6.0", "sentencepiece==0.2.3", "sacrebleu==2.6.0", "etils==1.15.0")
SDIST_ONLY = ("promise==2.3",)  # no wheel on PyPI: built here (pure Python)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64")
CACHE_PARTS = ("tfds", "tokenizers", "encoded")  # not "xla": compiled CPU programs
TRAVEL_LIMIT_MIB = 64  # what one device call takes: tracked files plus carried paths
COMMIT_FILE = "source_commit"  # in .gpu_cache: the commit --prepare saw (the device's copy has no git)


def prepare(repo: str = REPO) -> None:
    """Download ``WHEELS`` into ``<repo>/.whl`` and copy the data caches into ``<repo>/.gpu_cache``."""
    from data.translation import default_cache_dir
    whl = os.path.join(repo, ".whl")
    os.makedirs(whl, exist_ok=True)
    platform_args = [a for p in PLATFORMS for a in ("--platform", p)]
    subprocess.check_call([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                           "--python-version", "3.12", "--implementation", "cp", *platform_args, "-d", whl,
                           *WHEELS])
    subprocess.check_call([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", whl, *SDIST_ONLY])
    source = default_cache_dir()
    missing = [p for p in CACHE_PARTS if not os.path.isdir(os.path.join(source, p))]
    if missing:
        raise SystemExit(f"gpu_sweeps --prepare: {source} has no {missing}; run `python train.py "
                         "--config=configs/translation.py:runlocal` once to build the corpus caches")
    target = os.path.join(repo, ".gpu_cache")
    for part in CACHE_PARTS:
        shutil.rmtree(os.path.join(target, part), ignore_errors=True)
        shutil.copytree(os.path.join(source, part), os.path.join(target, part))
    with open(os.path.join(target, COMMIT_FILE), "w") as f:
        f.write(source_commit() + "\n")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True).stdout
    tree = sum(os.path.getsize(os.path.join(repo, f)) for f in tracked.decode().split("\0")
               if f and os.path.isfile(os.path.join(repo, f)))
    total, dropped = fit_carry(tree, whl, target)
    print(f"prepared {whl} and {target}: {total - tree / 2 ** 20:.1f} MiB to carry, {total:.1f} MiB with the tracked "
          f"files; a device call takes at most {TRAVEL_LIMIT_MIB} MiB" + (f"; left out {dropped} to fit" if dropped
                                                                          else ""))


def fit_carry(tree_bytes: int, whl: str, cache: str) -> tuple[float, list[str]]:
    """The MiB a device call would take (``tree_bytes`` of tracked files, ``whl`` and ``cache``) and the files left
    out of ``cache`` to make it fit: over TRAVEL_LIMIT_MIB, the tfds train split goes (not read when the tokenizer
    and encoding caches hit). Still over: one error line, before any device time is spent."""
    def total() -> float:
        return (tree_bytes + _tree_size(whl) + _tree_size(cache)) / 2 ** 20

    dropped: list[str] = []
    if total() > TRAVEL_LIMIT_MIB:
        for d, _, files in os.walk(os.path.join(cache, "tfds")):
            for f in sorted(files):
                if "-train." in f:
                    os.remove(os.path.join(d, f))
                    dropped.append(f)
    if total() > TRAVEL_LIMIT_MIB:
        raise SystemExit(f"gpu_sweeps --prepare: {total():.1f} MiB with the tracked files; expected at most "
                         f"{TRAVEL_LIMIT_MIB} MiB even without the tfds train split")
    return total(), dropped


def _tree_size(top: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(top) for f in fs)


def versions() -> str:
    """The packages the points depend on, as installed, and the GPUs ``nvidia-smi -L`` lists (for the log)."""
    import importlib.metadata as md

    found = []
    for name in ("jax", "jaxlib", "jax-cuda13-plugin", "flax", "optax", "orbax-checkpoint", "tensorstore", "grain",
                 "tensorflow-datasets", "numpy", "protobuf", "sentencepiece", "sacrebleu"):
        try:
            found.append(f"{name} {md.version(name)}")
        except md.PackageNotFoundError:
            found.append(f"{name} missing")
    try:
        gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        gpus = ""
    return f"python {sys.version.split()[0]}; " + ", ".join(found) + f"; GPUs: {gpus or 'none listed'}"


def pending_jobs(studies: Sequence[str], dry_run: bool, tmp: str) -> list[tuple[str, Job]]:
    """(study, job) of every job without a record, studies in the given order."""
    unknown = [s for s in studies if s not in STUDY_NAMES]
    if unknown:
        raise ValueError(f"--studies: unknown {unknown}; expected some of {list(STUDY_NAMES)}")
    return [(s, j) for s in studies for j in study_jobs(s, dry_run, tmp) if not os.path.exists(j.record)]


class Archive:
    """Finished records, staged under ``stage`` by path relative to ``root`` (the repository) and packed into
    ``<out>/records.tar.gz`` after each point (written whole, then renamed into place)."""

    def __init__(self, out: str, stage: str, root: str = REPO):
        self.out, self.stage, self.root, self.lock = out, stage, root, threading.Lock()

    def staged(self, record: str) -> str:
        """Where the record ``record`` (a path under ``root``) is written during the run."""
        rel = os.path.relpath(os.path.abspath(record), self.root)
        if rel.startswith(".."):
            raise ValueError(f"record {record} is not under {self.root}")
        return os.path.join(self.stage, rel)

    def pack(self) -> None:
        with self.lock:
            tmp = os.path.join(self.out, ".records.tar.gz")
            with tarfile.open(tmp, "w:gz") as tar:
                for d, _, files in sorted(os.walk(self.stage)):
                    for f in sorted(files):
                        if IN_FLIGHT.search(f):  # another worker's record mid-write: the pack after its point takes it
                            continue
                        path = os.path.join(d, f)
                        tar.add(path, arcname=os.path.relpath(path, self.stage))
            os.replace(tmp, os.path.join(self.out, "records.tar.gz"))


IN_FLIGHT = re.compile(r"\.tmp\d+$")  # studies.points._write_text_atomic's temporary file, renamed when written


def run(jobs: Sequence[tuple[str, Job]], out: str, *, workers: int, budget_s: float, first_estimate_s: float,
        train_script: Optional[str] = None, root: str = REPO) -> list[dict]:
    """Train ``jobs`` on ``workers`` threads (each a ``train.py`` process at a time) until done or no point fits
    in the rest of ``budget_s``; records go into ``<out>/records.tar.gz`` by path relative to ``root``. One
    summary row per attempted point."""
    os.makedirs(out, exist_ok=True)
    archive = Archive(out, os.path.join(tempfile.mkdtemp(prefix="gpu_sweeps_"), "records"), root)
    todo: queue.Queue = queue.Queue()
    for item in jobs:
        todo.put(item)
    deadline = time.time() + budget_s
    rows: list[dict] = []
    walls: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                estimate = statistics.median(walls) if walls else first_estimate_s
            if time.time() + estimate > deadline:
                return
            try:
                study, job = todo.get_nowait()
            except queue.Empty:
                return
            staged = archive.staged(job.record)
            start = time.time()
            error = ""
            try:
                ok = sweep_lib.run_point(job.spec, job.workdir, job.point, {}, group=sweep_lib.sweep_name(job.spec),
                                         train_script=train_script, record=staged, execution=EXECUTION)
            except Exception as e:  # one point's failure must not stop the worker: the next point still runs
                ok, error = False, f"{type(e).__name__}: {e}"
            wall = time.time() - start
            row = {"study": study, "point": job.name, "ok": ok, "wall_s": round(wall, 1),
                   "valid_nll": None, "test_bleu": None, "device": None, "matmul_precision": None, "error": error}
            if ok:
                record = Record.load(staged)
                row.update(valid_nll=record.valid_nll, test_bleu=record.test_bleu, device=record.device,
                           matmul_precision=record.raw.get("matmul_precision"))
                archive.pack()
            with lock:
                if ok:
                    walls.append(wall)
                rows.append(row)
                _write_rows(os.path.join(out, "points.csv"), rows)
            print(f"[gpu_sweeps] {study} {job.name}: {'done' if ok else 'FAILED ' + error} in {wall:.0f}s "
                  f"(valid NLL {row['valid_nll']}, {deadline - time.time():.0f}s of the budget left)", flush=True)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return rows


def _write_rows(path: str, rows: Sequence[dict]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    sweep_lib._write_text_atomic(path, buf.getvalue())


def collect(archive: str, repo: str = REPO) -> tuple[list[str], list[str]]:
    """Copy the files of ``archive`` (a ``records.tar.gz``) into ``repo``, never over an existing file;
    (added, skipped) paths relative to ``repo``."""
    added, skipped = [], []
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar.getmembers():
            name = os.path.normpath(member.name)
            if not member.isfile() or name.startswith("..") or os.path.isabs(name):
                raise ValueError(f"--collect {archive}: member {member.name!r} is not a file inside the repository")
            target = os.path.join(repo, name)
            if os.path.exists(target):
                skipped.append(name)
                continue
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with tar.extractfile(member) as src, open(target, "wb") as dst:
                shutil.copyfileobj(src, dst)
            added.append(name)
    return added, skipped


def touched_reports(added: Sequence[str]) -> list[str]:
    """The registered studies (of ``STUDY_NAMES``) whose records folder holds one of the ``added`` paths."""
    found = []
    for name in STUDY_NAMES:
        if any(a.startswith(specs.study(name).out + "/") for a in added):
            found.append(name)
    return found


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="where records.tar.gz and points.csv go (the device's $OUT)")
    parser.add_argument("--studies", default=",".join(STUDY_NAMES),
                        help=f"some of {', '.join(STUDY_NAMES)}, in order")
    parser.add_argument("--workers", type=int, default=8, help="points training at once")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds; no point starts that would overrun")
    parser.add_argument("--first_estimate", type=float, default=150.0,
                        help="seconds a point is taken to need before any has finished")
    parser.add_argument("--dry-run", dest="dry_run", action="store_true",
                        help="the --quick configs (tiny models), records under <out>/dry_run; for a CPU check")
    parser.add_argument("--prepare", action="store_true", help="fetch .whl/ and copy .gpu_cache/, then exit")
    parser.add_argument("--collect", default=None, metavar="TAR", help="copy a records.tar.gz into the repository")
    parser.add_argument("--list", action="store_true", help="print the pending points and exit")
    parser.add_argument("--train_script", default=None, help="training entry point (default <repo>/train.py)")
    args = parser.parse_args(argv)
    for name in ("workers", "budget", "first_estimate"):
        if getattr(args, name) <= 0:
            raise SystemExit(f"gpu_sweeps: --{name}={getattr(args, name):g}; expected a positive number")
    if args.prepare:
        prepare()
        return 0
    if args.collect:
        added, skipped = collect(args.collect)
        print(f"collected {len(added)} files into the repository; {len(skipped)} existed and were kept: "
              f"{skipped}")
        for module in dict.fromkeys(specs.find(name) for name in touched_reports(added)):
            for path in specs.generate(module):
                print(f"wrote {path}")
        return 0
    if not args.out and not args.list:
        raise SystemExit("gpu_sweeps: --out is required to train (the device's $OUT)")
    studies = [s.strip() for s in args.studies.split(",") if s.strip()]
    tmp = os.path.join(os.path.abspath(args.out or tempfile.mkdtemp()), "dry_run")
    jobs = pending_jobs(studies, args.dry_run, tmp)
    counts = {s: sum(1 for t, _ in jobs if t == s) for s in studies}
    print(f"[gpu_sweeps] pending points: {counts}", flush=True)
    if args.list:
        for study, job in jobs:
            print(study, job.name)
        return 0
    print(f"[gpu_sweeps] {versions()}", flush=True)
    cache = os.path.join(REPO, ".gpu_cache")
    env = dict(ENVIRONMENT, **({"ATTNLAB_CACHE_DIR": cache} if os.path.isdir(cache) else {}))
    if os.path.exists(os.path.join(cache, COMMIT_FILE)):
        with open(os.path.join(cache, COMMIT_FILE)) as f:
            env["ATTNLAB_SOURCE_COMMIT"] = f"{f.read().strip()} (at --prepare)"
    os.environ.update(env)
    print(f"[gpu_sweeps] environment {env}; execution overrides {EXECUTION}; {args.workers} workers, "
          f"budget {args.budget:.0f}s", flush=True)
    rows = run(jobs, args.out, workers=args.workers, budget_s=args.budget, first_estimate_s=args.first_estimate,
               train_script=args.train_script, root=tmp if args.dry_run else REPO)
    done = sum(r["ok"] for r in rows)
    print(f"[gpu_sweeps] {done} of {len(jobs)} pending points finished, {len(rows) - done} failed; "
          f"records in {os.path.join(args.out, 'records.tar.gz')}", flush=True)
    return 0 if done == len(rows) else 1


if __name__ == "__main__":
    from engine import cli

    sys.exit(cli.script(main))
