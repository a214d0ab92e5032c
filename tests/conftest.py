"""Shared test fixtures."""

import os
from pathlib import Path

import pytest

from gpufabric.cli import main


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run the ``gpufabric`` command in-process: ``cli(*args) -> (exit status, stdout, stderr)``.

    Progress lines are off (a loaded machine would print them after 2 s); set
    ``GPUFABRIC_PROGRESS`` in a test to see them.
    """
    monkeypatch.setenv("GPUFABRIC_PROGRESS", "off")

    def run(*args: str) -> tuple[int, str, str]:
        try:
            main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code or 0
        out = capsys.readouterr()
        return code, out.out, out.err
    return run


# -- the openb trace ----------------------------------------------------------------------------
# gpufabric ships no openb file; tests that need the real trace read ../shared/traces/openb
# (beside the repository, as CI has it) through the data directory variable.
OPENB = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "openb"
if OPENB.is_dir():
    os.environ.setdefault("GPUFABRIC_DATA_DIR", str(OPENB))


def pytest_configure(config):
    config.addinivalue_line("markers", "openb: needs the real openb trace (../shared/traces/"
                            "openb, or GPUFABRIC_DATA_DIR)")


def pytest_collection_modifyitems(config, items):
    from gpufabric.scheduler.datasets import find
    if find("openb_pod_list_default.csv") is not None:
        return
    skip = pytest.mark.skip(reason=f"needs the real openb trace: {OPENB} is absent and "
                            "GPUFABRIC_DATA_DIR names no copy (get one with `gpufabric data "
                            "fetch openb`)")
    for item in items:
        if "openb" in item.keywords:
            item.add_marker(skip)
