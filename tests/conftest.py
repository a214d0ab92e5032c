"""Shared test fixtures."""

import os
import signal
import threading
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


# -- bounds for hostile-input tests -------------------------------------------------------------
# Modules that feed the tool hostile input use these (``pytestmark = pytest.mark.usefixtures(
# "bounded_memory", "deadline")``): a runaway allocation or a hang fails that test alone.

@pytest.fixture(scope="module")
def bounded_memory():
    """The address space may grow by 4 GiB at most, so a runaway allocation is a MemoryError
    (a failed test), not the out-of-memory killer."""
    statm = Path("/proc/self/statm")
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        size = int(statm.read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (ImportError, OSError, ValueError):
        yield                                   # not Linux: no guard
        return
    limit = size + 4 * 2**30
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


#: Longest one hostile-input test may run (the slowest takes a few seconds).
DEADLINE_S = 60


@pytest.fixture
def deadline():
    """Fail a test that runs past :data:`DEADLINE_S` (a hang) instead of stalling the suite."""
    main = threading.current_thread() is threading.main_thread()
    if not hasattr(signal, "setitimer") or not main:
        yield
        return

    def expire(signum, frame):
        raise TimeoutError(f"test ran past {DEADLINE_S} s")
    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, DEADLINE_S)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# -- the openb trace ----------------------------------------------------------------------------
# gpufabric ships no openb file; tests that need the real trace read ../shared/traces/openb
# (beside the repository, as CI has it) through the data directory variable.
OPENB = Path(__file__).resolve().parents[1].parent / "shared" / "traces" / "openb"
if OPENB.is_dir():
    os.environ.setdefault("GPUFABRIC_DATA_DIR", str(OPENB))


def pytest_configure(config):
    config.addinivalue_line("markers", "openb: needs the real openb trace (../shared/traces/"
                            "openb, or GPUFABRIC_DATA_DIR)")
    config.addinivalue_line("markers", "slow: a long test (an external runtime such as a "
                            "local Ray instance or headless Chromium, a brute-force search, a "
                            "thousand-node chaos run); left out of the default run, `pytest -m "
                            "slow` runs them (CI runs both)")
    if not hasattr(config, "workerinput"):      # once, in the controller, before the workers
        _byte_compile()


def _byte_compile() -> None:
    """Byte-compile gpufabric's sources once: the tests start hundreds of gpufabric processes
    and workers, and where the environment says not to write bytecode
    (PYTHONDONTWRITEBYTECODE, as on CI's machines) each of them would compile every module it
    imports from source again (a fifth of the suite's time)."""
    import compileall
    compileall.compile_dir(str(Path(__file__).resolve().parents[1] / "src" / "gpufabric"),
                           quiet=2, workers=1)


def pytest_collection_modifyitems(config, items):
    from gpufabric.downloads import find
    if find("openb_pod_list_default.csv") is not None:
        return
    skip = pytest.mark.skip(reason=f"needs the real openb trace: {OPENB} is absent and "
                            "GPUFABRIC_DATA_DIR names no copy (get one with `gpufabric data "
                            "fetch openb`)")
    for item in items:
        if "openb" in item.keywords:
            item.add_marker(skip)
