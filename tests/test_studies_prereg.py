"""Pre-registration from git history: every registered criterion was held by its file at its commit (an ancestor
of this checkout), and a claim counts as pre-registered only when that commit precedes every record it reads."""
import subprocess

import pytest

from studies import specs
from studies.claims import Claim, Conditions, Registration, commit_time, evaluate, registration
from studies.records import Record
from studies.report import REPO


def _git(*args) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)


pytestmark = pytest.mark.skipif(_git("rev-parse", "HEAD").returncode != 0, reason="needs the git history")


def _registered():
    for module in specs.modules():
        for study in getattr(module, "STUDIES", ()):
            for claim in tuple(study.claims) + tuple(study.criteria):
                if claim.registered is not None:
                    yield study.name, claim


@pytest.mark.parametrize("study,claim", list(_registered()), ids=lambda x: getattr(x, "id", x))
def test_every_registration_names_a_criterion_its_commit_held(study, claim):
    reg = claim.registered
    assert _git("merge-base", "--is-ancestor", reg.commit, "HEAD").returncode == 0, f"{reg.commit} not an ancestor"
    text = _git("show", f"{reg.commit}:{reg.path}")
    assert text.returncode == 0 and reg.marker in text.stdout, f"{reg.path} at {reg.commit} lacks {reg.marker!r}"


def test_the_studies_keep_the_registration_their_criteria_had():
    from studies import study as study_lib

    table3 = study_lib.evaluate(specs.find("table3").STUDIES)
    by_id = {v.claim.id: v.registration for vs in table3.values() for v in vs}
    assert by_id["d256 h32"].startswith("pre-registered (a2e6db3")  # criteria fixed before d_model 256 ran
    assert by_id["d128 h32"].startswith("pre-registered (a2e6db3")  # rows A h = 32 started after the commit
    assert by_id["d128 h1"].startswith("post-hoc (criterion committed a2e6db3")  # its first h = 1 record started
    assert "1 of the 6 records it reads started before" in by_id["d128 h1"]  # 15 minutes before the commit
    hd = {v.claim.id: v.registration for v in study_lib.evaluate(specs.find("heads_depth").STUDIES)["heads_vs_depth"]}
    assert hd["6+6 long budget"].startswith("pre-registered (638ba4c")
    assert hd["24+24 admin trains"].startswith("post-hoc")  # Admin's criterion came after the plain post-LN records


def test_a_claim_is_pre_registered_only_when_its_commit_precedes_every_record():
    head = _git("rev-parse", "HEAD").stdout.strip()
    when = commit_time(head).strftime("%Y-%m-%d %H:%M:%S")
    reg = Registration(head, "studies/claims.py", "def registration")

    def rec(start):
        return Record("r.json", {"first_logged_utc": start, "validation": {"nll": 1.0}})

    claim = Claim("c", "t", ("a",), ("b",), "f", Conditions(lr="x"), registered=reg)
    assert registration(claim, [rec("2999-01-01 00:00:00")]).startswith(f"pre-registered ({head[:7]}")
    late = registration(claim, [rec("2999-01-01 00:00:00"), rec("2000-01-01 00:00:00")])
    assert late.startswith(f"post-hoc (criterion committed {head[:7]}") and "1 of the 2 records" in late
    assert when > "2000-01-01"
    moved = Claim("c", "t", ("a",), ("b",), "f", Conditions(lr="x"),
                  registered=Registration(head, "studies/claims.py", "a marker no file holds"))
    assert registration(moved, [rec("2999-01-01 00:00:00")]).startswith("post-hoc")
    assert registration(dataclass_without_registration(claim), [rec("2999-01-01 00:00:00")]).startswith("post-hoc")
    groups = {"a": [rec("2999-01-01 00:00:00")] * 3, "b": [rec("2999-01-01 00:00:00")] * 3}
    assert evaluate([claim], groups)[0].registration.startswith("pre-registered")


def dataclass_without_registration(claim):
    import dataclasses

    return dataclasses.replace(claim, registered=None)


def test_a_claim_without_records_reads_pre_registered_when_its_commit_is_an_ancestor_holding_its_marker():
    head = _git("rev-parse", "HEAD").stdout.strip()
    claim = Claim("c", "t", ("a",), ("b",), "f", Conditions(lr="x"),
                  registered=Registration(head, "studies/claims.py", "def registration"))
    assert registration(claim, []) == f"pre-registered (registered at {head[:7]}, no record yet)"
    assert evaluate([claim], {"a": [], "b": []})[0].registration == registration(claim, [])
    missing = dataclass_with_marker(claim, "a marker no file holds")
    assert registration(missing, []).startswith("post-hoc (no record yet")
    # a commit that is not an ancestor of HEAD (a dangling commit made here) is no registration of this checkout
    tree = _git("rev-parse", "HEAD^{tree}").stdout.strip()
    dangling = _git("commit-tree", tree, "-m", "not an ancestor").stdout.strip()
    if dangling:
        other = Claim("c", "t", ("a",), ("b",), "f", Conditions(lr="x"),
                      registered=Registration(dangling, "studies/claims.py", "def registration"))
        assert registration(other, []).startswith("post-hoc (no record yet")


def dataclass_with_marker(claim, marker):
    import dataclasses

    return dataclasses.replace(claim, registered=dataclasses.replace(claim.registered, marker=marker))
