"""scripts/gpu_sweeps.py: pending points trained in parallel into one archive, collected without overwriting."""
import csv
import io
import json
import os
import tarfile

import pytest

from studies import points as sweep
from studies import specs
from studies import study as study_lib
from tests.reports import load_script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
gpu_sweeps = load_script("gpu_sweeps")

FAKE_TRAIN = os.path.join(REPO, "tests", "fake_train.py")


def quick_jobs(tmp_path):
    """The --quick Table 3 jobs (rows (A) h = 1, 8; rows (B)), records and runs under tmp_path."""
    return study_lib.jobs(specs.study("table3"), quick=True, out=str(tmp_path / "table3"),
                          workdir=str(tmp_path / "runs"))


def members(archive) -> dict[str, bytes]:
    with tarfile.open(archive, "r:gz") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def test_run_trains_every_job_on_parallel_workers_and_archives_each_record(tmp_path, monkeypatch):
    monkeypatch.setenv("CALLS_FILE", str(tmp_path / "calls.txt"))
    jobs = quick_jobs(tmp_path)
    out = tmp_path / "out"
    rows = gpu_sweeps.run([("table3", j) for j in jobs], str(out), workers=3, budget_s=300, first_estimate_s=1,
                          train_script=FAKE_TRAIN, root=str(tmp_path))
    assert sorted(r["point"] for r in rows) == sorted(j.name for j in jobs) and all(r["ok"] for r in rows)
    assert len((tmp_path / "calls.txt").read_text().split()) == len(jobs)
    files = members(out / "records.tar.gz")
    for j in jobs:
        name = os.path.relpath(j.record, tmp_path)
        record = json.loads(files[name])
        assert record["execution"] == {"model.attention_impl": "xla"}
        assert record["overrides"] == j.point.overrides  # what the point is: the CPU queue's record
        assert not os.path.exists(j.record)  # records go to the archive, not into the checkout
    with open(out / "points.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(jobs)
    assert {(r["device"], r["matmul_precision"]) for r in table} == {("cpu cpu x1", "default")}  # fake_train's start


def test_no_point_starts_that_would_overrun_the_budget(tmp_path):
    rows = gpu_sweeps.run([("table3", j) for j in quick_jobs(tmp_path)], str(tmp_path / "out"), workers=2,
                          budget_s=10, first_estimate_s=60, train_script=FAKE_TRAIN, root=str(tmp_path))
    assert rows == [] and not (tmp_path / "out" / "records.tar.gz").exists()


def test_a_record_made_with_execution_overrides_is_the_same_point_for_the_cpu_queue(tmp_path, monkeypatch):
    monkeypatch.setenv("CALLS_FILE", str(tmp_path / "calls.txt"))
    job = quick_jobs(tmp_path)[0]
    assert sweep.run_point(job.spec, job.workdir, job.point, {}, group="g", train_script=FAKE_TRAIN,
                           record=job.record, execution=gpu_sweeps.EXECUTION)
    assert sweep.run_point(job.spec, str(tmp_path / "elsewhere"), job.point, {}, group="g",
                           train_script=FAKE_TRAIN, record=job.record)  # skipped: the same point
    assert len((tmp_path / "calls.txt").read_text().split()) == 1


def test_pending_leaves_out_recorded_points_and_names_an_unknown_study(tmp_path):
    pending = gpu_sweeps.pending_jobs(["table3_d512"], True, str(tmp_path))
    assert [j.name for _, j in pending] == ["A/num_heads_1", "A/num_heads_8", "B/qk_dim_4", "B/qk_dim_2"]
    sweep.write_record(pending[0][1].record, {"schema": 1})
    assert len(gpu_sweeps.pending_jobs(["table3_d512"], True, str(tmp_path))) == 3
    with pytest.raises(ValueError, match=r"--studies: unknown \['table3_d1024'\]; expected some of"):
        gpu_sweeps.pending_jobs(["table3_d1024"], True, str(tmp_path))


def test_the_real_studies_are_the_cpu_queues_points_plus_the_d512_table():
    d512 = gpu_sweeps.study_jobs("table3_d512", False, "")
    assert len(d512) == 33 and all("/docs/results/table3_d512/points/" in j.record for j in d512)
    assert sorted({j.point.overrides["model.qk_dim"] for j in d512}) == [16, 32, 64, 128, 256, 512]
    d256 = gpu_sweeps.study_jobs("table3_d256", False, "")
    assert [j.record for j in d256] == [j.record for j in study_lib.jobs(specs.study("table3_d256"))]
    assert all(os.path.exists(j.record) for j in d256)  # every d_model 256 point is recorded


def test_collect_adds_new_files_and_keeps_existing_ones(tmp_path):
    archive = tmp_path / "records.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, text in (("docs/results/x/points/a.json", b"new a"), ("docs/results/x/points/b.json", b"new b")):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
    repo = tmp_path / "repo"
    (repo / "docs/results/x/points").mkdir(parents=True)
    (repo / "docs/results/x/points/b.json").write_bytes(b"old b")
    added, skipped = gpu_sweeps.collect(str(archive), str(repo))
    assert added == ["docs/results/x/points/a.json"] and skipped == ["docs/results/x/points/b.json"]
    assert (repo / "docs/results/x/points/b.json").read_bytes() == b"old b"


def test_collect_refuses_a_member_outside_the_repository(tmp_path):
    archive = tmp_path / "bad.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo("../escape.json")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(ValueError, match=r"member '../escape.json' is not a file inside the repository"):
        gpu_sweeps.collect(str(archive), str(tmp_path / "repo"))
    assert not (tmp_path / "escape.json").exists()


def test_bad_numbers_are_refused_before_any_work(capsys):
    with pytest.raises(SystemExit, match=r"--workers=0; expected a positive number"):
        gpu_sweeps.main(["--workers=0", "--out=/nonexistent"])


def test_the_log_names_the_package_versions_and_the_gpus():
    line = gpu_sweeps.versions()
    assert line.startswith("python 3.") and "jax 0.1" in line and "flax 0.12" in line and "GPUs: " in line


def test_collect_rebuilds_the_reports_of_the_studies_it_added_to():
    added = ["docs/results/table3_d512/points/A/num_heads_1-seed_0.json",
             "docs/results/table3_d512/points/A/num_heads_1-seed_0.test.txt",
             "docs/results/heads_vs_depth/points/num_encoder_layers_3-qk_layernorm_true-seed_2.json"]
    assert gpu_sweeps.touched_reports(added) == ["table3_d512", "heads_vs_depth"]
    assert gpu_sweeps.touched_reports(["docs/results/table3_d5120/points/x.json"]) == []


def test_without_git_records_name_the_commit_prepare_saw(monkeypatch):
    import subprocess

    from studies import report as _report

    def no_git(*args, **kwargs):
        raise OSError("no git on the device machine")

    monkeypatch.setattr(subprocess, "run", no_git)
    monkeypatch.setenv("ATTNLAB_SOURCE_COMMIT", "abc1234 (at --prepare)")
    assert _report.source_commit() == "abc1234 (at --prepare)"
    monkeypatch.delenv("ATTNLAB_SOURCE_COMMIT")
    assert _report.source_commit() == "unknown"


def test_a_failing_point_is_reported_and_the_others_still_train(tmp_path, monkeypatch):
    monkeypatch.setenv("CALLS_FILE", str(tmp_path / "calls.txt"))
    jobs = quick_jobs(tmp_path)
    stale = os.path.join(jobs[0].workdir, jobs[0].point.name)  # a run folder another config finished: refused
    os.makedirs(stale)
    with open(os.path.join(stale, sweep.MARKER), "w") as f:
        json.dump({"status": "done", "config": "configs/other.py", "overrides": {}}, f)
    rows = gpu_sweeps.run([("table3", j) for j in jobs], str(tmp_path / "out"), workers=1, budget_s=300,
                          first_estimate_s=1, train_script=FAKE_TRAIN, root=str(tmp_path))
    assert [r["ok"] for r in rows] == [False] + [True] * (len(jobs) - 1)
    assert rows[0]["error"].startswith("ValueError: sweep point") and "configs/other.py" in rows[0]["error"]


def test_prepare_leaves_out_the_tfds_train_split_only_when_the_call_would_not_fit(tmp_path, monkeypatch):
    whl, cache = tmp_path / ".whl", tmp_path / ".gpu_cache"
    split = cache / "tfds" / "bible_es_en" / "1.0.0"
    split.mkdir(parents=True)
    whl.mkdir()
    (whl / "a.whl").write_bytes(b"w" * 2 ** 20)
    for name, mib in (("bible_es_en-train.array_record-00000-of-00001", 3), ("bible_es_en-test.array_record", 1)):
        (split / name).write_bytes(b"x" * mib * 2 ** 20)
    monkeypatch.setattr(gpu_sweeps, "TRAVEL_LIMIT_MIB", 6)
    assert gpu_sweeps.fit_carry(2 ** 20, str(whl), str(cache)) == (6.0, [])  # fits: nothing left out
    total, dropped = gpu_sweeps.fit_carry(2 * 2 ** 20, str(whl), str(cache))
    assert (total, dropped) == (4.0, ["bible_es_en-train.array_record-00000-of-00001"])
    assert sorted(os.listdir(split)) == ["bible_es_en-test.array_record"]
    with pytest.raises(SystemExit, match=r"7.0 MiB with the tracked files; expected at most 6 MiB even without"):
        gpu_sweeps.fit_carry(5 * 2 ** 20, str(whl), str(cache))


def test_pack_leaves_out_a_record_another_worker_is_still_writing(tmp_path):
    archive = gpu_sweeps.Archive(str(tmp_path / "out"), str(tmp_path / "stage"), root=str(tmp_path))
    os.makedirs(tmp_path / "out")
    done = archive.staged(str(tmp_path / "docs" / "points" / "a.json"))
    os.makedirs(os.path.dirname(done))
    open(done, "w").write("{}")
    open(archive.staged(str(tmp_path / "docs" / "points" / "b.json")) + ".tmp4242", "w").write("{")
    archive.pack()
    assert list(members(tmp_path / "out" / "records.tar.gz")) == ["docs/points/a.json"]
