"""Shared test fixtures."""

import pytest

from gpufabric.cli import main


@pytest.fixture
def cli(capsys):
    """Run the ``gpufabric`` command in-process: ``cli(*args) -> (exit status, stdout, stderr)``."""
    def run(*args: str) -> tuple[int, str, str]:
        try:
            main(list(args))
            code = 0
        except SystemExit as e:
            code = e.code or 0
        out = capsys.readouterr()
        return code, out.out, out.err
    return run
