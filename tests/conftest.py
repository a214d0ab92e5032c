"""Shared test fixtures."""

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
