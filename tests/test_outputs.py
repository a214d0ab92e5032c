"""Where outputs go: every ``-o`` (and the extender's ``--state``) goes through one writer,
:func:`gpufabric.fileio.write_output` (docs/hardening.md, "Outputs").

A regular file is replaced whole (a failed write leaves the old one as it was); a character
device or a FIFO is written through and stays what it was; a symlink is followed; a directory,
a socket or a place that cannot be written is one line and exit 2, with nothing half-written.
"""

import os
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from gpufabric.errors import InputError
from gpufabric.fileio import write_output
from gpufabric.k8s.statefile import StateFile

pytestmark = pytest.mark.usefixtures("deadline")   # conftest.py: a hang fails the test

NVSMI = Path(__file__).parent / "fixtures" / "nvsmi" / "dgx_a100_nv12.txt"
KVM = Path(__file__).parent / "fixtures" / "sysfs" / "kvm-epyc-2cpu"
#: A small collectives measurements file for ``calibrate`` (three sizes of one ring).
MEASURED = """\
- id: tiny
  system: {gpu: H100-SXM, gpus_per_node: 8, nodes: 1, scale_up: nvswitch}
  collective: all_reduce
  algorithm: ring
  protocol: Simple
  ranks: 8
  per_node: 8
  points:
  - {size: 8, time_us: 20}
  - {size: 8388608, time_us: 60}
  - {size: 268435456, time_us: 1500}
"""


def _import(cli, out) -> tuple[int, str, str]:
    """The quickest command with ``-o``: read a saved ``nvidia-smi topo -m`` into a system file."""
    return cli("import", "nvidia-smi", str(NVSMI), "-o", str(out), "--gpu", "A100-SXM4-40GB")


def _refused(cli, *args) -> str:
    """The command exits 2 with one error line (after any ``note:`` lines of its work)."""
    code, _, err = cli(*args)
    *notes, last = err.splitlines()
    assert code == 2 and "Traceback" not in err, err[:300]
    assert all(n.startswith("gpufabric: note: ") for n in notes), err[:300]
    return last.removeprefix("gpufabric: error: ")


def test_a_regular_file_is_replaced_whole_and_keeps_its_permissions(cli, tmp_path):
    out = tmp_path / "box.yaml"
    out.write_text("old\n")
    out.chmod(0o640)
    assert _import(cli, out)[0] == 0
    assert yaml.safe_load(out.read_text())["name"] == "dgx_a100_nv12"
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["box.yaml"]    # no temporary left


def test_a_write_that_fails_halfway_leaves_the_old_file_whole(tmp_path):
    """A file-size limit (RLIMIT_FSIZE) makes the write fail after its first 4 KiB, in a real
    process (as a full disk would): the old file is as it was and no temporary file stays."""
    out = tmp_path / "box.yaml"
    out.write_text("old: true\n")
    script = ("import resource, signal\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))\n"
              "from gpufabric.cli import main\n"
              f"main(['import', 'nvidia-smi', {str(NVSMI)!r}, '--gpu', 'A100-SXM4-40GB', "
              f"'-o', {str(out)!r}])\n")   # a 6.5 kB system file: the limit cuts it
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "GPUFABRIC_PROGRESS": "off"})
    assert r.returncode == 2, r.stderr[-500:]
    assert r.stderr == f"gpufabric: error: {out}: --output: cannot write: File too large\n"
    assert out.read_text() == "old: true\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["box.yaml"]


def test_dev_null_is_written_through_and_stays_a_device(cli):
    before = os.stat("/dev/null")
    code, stdout, err = _import(cli, "/dev/null")
    assert code == 0, err
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev
    assert after.st_ino == before.st_ino


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_full_device_is_one_line_and_exit_2(cli):
    assert _refused(cli, "import", "nvidia-smi", str(NVSMI), "-o", "/dev/full") == (
        "/dev/full: --output: cannot write: No space left on device")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node needs root")
def test_a_character_device_in_a_directory_is_never_replaced(cli, tmp_path):
    dev = tmp_path / "null"
    os.mknod(dev, stat.S_IFCHR | 0o666, os.makedev(1, 3))     # the null device's numbers
    assert _import(cli, dev)[0] == 0
    st = os.stat(dev)
    assert stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]


def test_a_fifo_is_written_through_to_its_reader_and_stays_a_fifo(cli, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def reader() -> None:
        with open(fifo, "rb") as fh:          # waits for the writer, as `cat pipe` does
            got.append(fh.read())

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    code, _, err = _import(cli, fifo)
    t.join(timeout=30)
    assert code == 0 and not t.is_alive(), err
    assert yaml.safe_load(got[0])["name"] == "dgx_a100_nv12"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_symlink_into_another_directory_writes_its_target_and_stays_a_link(cli, tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    link = here / "box.yaml"
    link.symlink_to(there / "real.yaml")            # dangling: the target is created
    assert _import(cli, link)[0] == 0
    assert link.is_symlink() and yaml.safe_load((there / "real.yaml").read_text())
    (there / "real.yaml").write_text("old\n")        # existing: the target is replaced
    assert _import(cli, link)[0] == 0
    assert link.is_symlink() and (there / "real.yaml").read_text() != "old\n"
    assert sorted(p.name for p in here.iterdir()) == ["box.yaml"]
    assert sorted(p.name for p in there.iterdir()) == ["real.yaml"]


def test_a_symlink_to_a_device_writes_through(cli, tmp_path):
    link = tmp_path / "out.yaml"
    link.symlink_to("/dev/null")
    assert _import(cli, link)[0] == 0
    assert link.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_dev_stdout_appends_to_the_file_the_shell_opened(tmp_path):
    """``-o /dev/stdout >> log``: the file the shell opened is appended to, not replaced (its
    earlier lines stay, and it stays the same file)."""
    log = tmp_path / "log.txt"
    log.write_text("earlier line\n")
    inode = log.stat().st_ino
    with open(log, "a") as out:
        r = subprocess.run([sys.executable, "-c", "from gpufabric.cli import main; main()",
                            "import", "nvidia-smi", str(NVSMI), "-o", "/dev/stdout", "--gpu",
                            "A100-SXM4-40GB"], stdout=out, stderr=subprocess.PIPE, text=True,
                           timeout=120)
    assert r.returncode == 0, r.stderr
    text = log.read_text()
    assert text.startswith("earlier line\nname: dgx_a100_nv12\n")
    assert log.stat().st_ino == inode


def test_a_directory_a_socket_and_an_unwritable_place_are_refused(cli, tmp_path):
    assert _refused(cli, "import", "nvidia-smi", str(NVSMI), "-o", str(tmp_path)) == (
        f"{tmp_path}: --output: is a directory; give a file name")
    sock_path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.bind(str(sock_path))
        assert _refused(cli, "import", "nvidia-smi", str(NVSMI), "-o", str(sock_path)) == (
            f"{sock_path}: --output: a socket; allowed: a regular file (replaced whole), a "
            "character device such as /dev/null or a pipe (written through)")
        assert stat.S_ISSOCK(os.stat(sock_path).st_mode)
    msg = _refused(cli, "import", "nvidia-smi", str(NVSMI), "-o", "/proc/gpufabric-box.yaml")
    assert msg.startswith("/proc/gpufabric-box.yaml: --output: cannot write in '/proc': ")
    assert not os.path.exists("/proc/gpufabric-box.yaml")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in a directory without permission")
def test_a_directory_without_write_permission_is_refused(cli, tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        msg = _refused(cli, "import", "nvidia-smi", str(NVSMI), "-o", str(ro / "x.yaml"))
    finally:
        ro.chmod(0o700)
    assert msg == f"{ro}/x.yaml: --output: cannot write in '{ro}': Permission denied"


@pytest.mark.parametrize("command", ["discover", "calibrate", "compare"])
def test_every_command_writes_through_the_one_writer(cli, tmp_path, command):
    """The same rules for each command's ``-o``: /dev/null takes the output, /dev/full is one
    line, a directory is refused before the work."""
    measured = tmp_path / "m.yaml"
    measured.write_text(MEASURED)
    args = {"discover": ("discover", "--root", str(KVM)),
            "calibrate": ("calibrate", str(measured)),
            "compare": ("compare", "dgx-a100")}[command]
    code, _, err = cli(*args, "-o", "/dev/null")
    assert code == 0, err
    if os.path.exists("/dev/full"):
        assert _refused(cli, *args, "-o", "/dev/full") == (
            "/dev/full: --output: cannot write: No space left on device")
    assert _refused(cli, *args, "-o", "/") == "/: --output: is a directory; give a file name"


def test_advise_html_is_checked_before_the_work(cli, tmp_path):
    assert _refused(cli, "advise", "finetune-70b", "-o", str(tmp_path)) == (
        f"{tmp_path}: --output: is a directory; give a file name")
    assert _refused(cli, "advise", "finetune-70b", "-o", "/proc/advice.html").startswith(
        "/proc/advice.html: --output: cannot write in '/proc': ")


def test_the_extender_state_file_follows_the_writer_rules(tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    link = here / "state.jsonl"
    link.symlink_to(there / "state.jsonl")
    f = StateFile(link)
    assert f.load() == ({}, {})
    f.write({"forget": "u1"})
    f.close()
    assert link.is_symlink() and len((there / "state.jsonl").read_text().splitlines()) == 2
    assert StateFile(link).load() == ({}, {})
    assert link.is_symlink()
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(InputError) as e:
        StateFile(fifo).load()
    assert str(e.value) == (f"{fifo}: --state: not a regular file; the state file is read back "
                            "at start, so it must be one (or not exist yet)")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_the_writer_takes_text_or_bytes(tmp_path):
    write_output(tmp_path / "a.txt", "é\n")
    write_output(tmp_path / "b.bin", b"\x00\x01")
    assert (tmp_path / "a.txt").read_bytes() == "é\n".encode()
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
