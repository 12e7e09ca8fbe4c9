"""Every committed report of a registered study, and docs/results/README.md, regenerate from the committed records
and the specs without a difference (no training): README and CSV files byte for byte, figures by their size in
pixels; a report folder holds nothing but what its generation writes, its committed inputs and what other tools
keep there."""
import os

import pytest
from PIL import Image

from studies import index, specs
from studies.report import REPO
from studies.study import GENERATED

RESULTS = os.path.join(REPO, "docs", "results")
MODULES = [m.__name__.rsplit(".", 1)[1] for m in specs.modules()]


def _allowed(module, folder: str) -> set[str]:
    """The committed files a report folder may hold besides the generated ones: its inputs and kept files."""
    allowed = set()
    for study in getattr(module, "STUDIES", ()):
        if os.path.basename(study.out) == folder:
            allowed |= {os.path.basename(name) for _, name, *_ in study.inputs
                        if os.path.dirname(os.path.normpath(os.path.join(folder, name))) == folder}
            allowed |= set(study.keep)
    return allowed


@pytest.mark.parametrize("name", MODULES)
def test_committed_reports_regenerate_without_a_difference(name, tmp_path):
    module = specs.find(name)
    readmes = specs.generate(module, into=str(tmp_path))
    assert readmes, f"spec module {name} generated no report"
    for readme in readmes:
        folder = os.path.relpath(os.path.dirname(readme), str(tmp_path))
        new, old = os.path.dirname(readme), os.path.join(RESULTS, folder)
        with open(os.path.join(new, GENERATED)) as f:
            files = f.read().split()
        for file in files:
            committed = os.path.join(old, file)
            assert os.path.exists(committed), f"{folder}/{file} is generated but not committed"
            if file.endswith(".png"):
                assert Image.open(committed).size == Image.open(os.path.join(new, file)).size, f"{folder}/{file}"
                continue
            with open(committed, "rb") as a, open(os.path.join(new, file), "rb") as b:
                assert a.read() == b.read(), (f"docs/results/{folder}/{file} differs from its regeneration; run "
                                              f"`python -m studies report {name}` and commit")
        stale = {f for f in os.listdir(old) if os.path.isfile(os.path.join(old, f))} - set(files) - _allowed(
            module, folder)
        assert not stale, f"docs/results/{folder} holds files no generation writes: {sorted(stale)}"


def test_the_results_index_regenerates_without_a_difference(tmp_path):
    path = index.write(path=str(tmp_path / "README.md"))
    with open(path) as new, open(os.path.join(RESULTS, "README.md")) as old:
        assert new.read() == old.read(), "docs/results/README.md differs; run `python -m studies index` and commit"
