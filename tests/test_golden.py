"""The main commands' outputs are what tests/data/golden holds: refactors change no figure.

A change of the model that is meant to move figures rewrites the files with
``.venv/bin/python tests/golden.py`` and says so in its commit.
"""

import json
import os

import pytest

from golden import CASES, GOLDEN, run, same

ROOT = GOLDEN.parents[2]


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_is_unchanged(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("GPUFABRIC_PROGRESS", "off")
    monkeypatch.delenv("GPUFABRIC_PROFILE", raising=False)
    want = json.loads((GOLDEN / f"{name}.json").read_text())
    diffs = same(want, run(CASES[name]))
    assert diffs == [], "\n".join(diffs[:20]) + (
        "\n(rewrite with: .venv/bin/python tests/golden.py)" if diffs else "")


def test_every_case_has_its_file():
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(CASES)
    assert os.path.basename(ROOT) != "tests"
