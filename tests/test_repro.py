"""Each reproduction's --quick mode runs and writes its Markdown report with figures."""
import pytest


@pytest.mark.slow
def test_mqar_quick(tmp_path):
    """The MQAR grid study's --quick points in-process through the engine, then its report from their records."""
    from studies import specs
    from studies import study as study_lib

    from studies import cli

    out = tmp_path / "mqar"
    assert cli.main(["train", "mqar", "--quick", f"--out={out}", f"--workdir={tmp_path}"]) == 0
    (out / "grid.csv").write_text("num_heads,qk_dim,seed,v_dim,parameters,last train loss,steps to learn,eval loss,"
                                  "eval accuracy,seconds\n")  # no committed rows: the records alone
    study = specs.study("mqar")
    recs = [r for ms in study.records(str(out)).values() for _, r in ms]
    assert sorted(r.name for r in recs) == ["num_heads_1", "num_heads_2"]
    assert all(0.0 <= r.valid_accuracy <= 1.0 for r in recs)
    text = open(study_lib.write_report(study, [], out=str(out), quick=True)).read()
    assert "Points recorded: 2 of 2." in text and "](accuracy_grid.png)" in text


def test_report_numbers_keep_their_significant_zeros_and_group_thousands():
    from studies import report as _report

    assert [_report.fmt(x) for x in (1262.0, 999.6, 37.5, 0.5604, None, 12_000)] == [
        "1,262", "1,000", "37.5", "0.560", "—", "12,000"]
    assert [_report.fmt(x, 4) for x in (2.8199, 2.688, 0.003, 40.0, 0.0, 1e-5, -0.39996)] == [
        "2.820", "2.688", "0.003", "40", "0", "1e-05", "-0.4000"]
    assert _report.mean_std([2.3e5, 2.7e5, 2.5e5]) == "250,000 ± 20,000 (n=3)"
    assert _report.mean_std([122.6, 5.0, 240.2]) == "122.6 ± 118 (n=3)"


def test_report_rebuild_keeps_file_when_only_the_measured_line_changes(tmp_path):
    from studies import report as _report

    def build(measured: str, body: str) -> str:
        rep = _report.Report(str(tmp_path), "T")
        rep.text(f"Measured {measured}.")
        rep.text(body)
        path = rep.write()
        return open(path).read()

    first = build("yesterday", "NLL 2.9")
    assert build("today", "NLL 2.9") == first
    assert build("today", "NLL 2.8") == "# T\n\nMeasured today.\n\nNLL 2.8\n"
