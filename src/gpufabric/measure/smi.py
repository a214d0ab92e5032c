"""The ``nvidia-smi`` command: its ``topo -m`` matrix and the GPU name, or a saved output.

The matrix is read by :func:`gpufabric.topology.nvsmi.parse`, the parser of
``gpufabric import nvidia-smi``. A missing command, a driver that does not answer or a run
that takes longer than :data:`TIMEOUT_S` is "not available" with the reason, never an error.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from gpufabric import catalog
from gpufabric.errors import InputError
from gpufabric.fileio import read_text
from gpufabric.topology import nvsmi

#: Seconds one nvidia-smi run may take (it answers in well under a second on a healthy node).
TIMEOUT_S = 20.0


def run(args: list[str], exe: str = "nvidia-smi") -> tuple[str | None, str]:
    """(stdout, "") of ``nvidia-smi ARGS``, or (None, why not) in one line."""
    path = shutil.which(exe)
    if path is None:
        return None, f"{exe} is not on PATH"
    try:
        done = subprocess.run([path, *args], capture_output=True, text=True, errors="replace",
                              timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return None, f"`{exe} {' '.join(args)}` gave no answer in {TIMEOUT_S:g} s"
    except OSError as exc:
        return None, f"`{exe}` could not run: {exc.strerror or exc}"
    if done.returncode != 0:
        first = next((ln.strip() for ln in (done.stdout + "\n" + done.stderr).splitlines()
                      if ln.strip()), "")
        return None, (f"`{exe} {' '.join(args)}` failed (exit status {done.returncode})"
                      + (f": {first[:200]}" if first else ""))
    return done.stdout, ""


def gpu_model(exe: str = "nvidia-smi") -> tuple[str, str]:
    """(catalog GPU name or "", the name nvidia-smi prints) of GPU 0."""
    out, _ = run(["--query-gpu=name", "--format=csv,noheader"], exe)
    name = (out or "").strip().splitlines()[0].strip() if (out or "").strip() else ""
    if not name:
        return "", ""
    try:
        return catalog.gpu(name).name, name
    except InputError:
        return "", name


def topo_matrix(file: str | Path | None = None, gpu: str = "",
                exe: str = "nvidia-smi") -> tuple[nvsmi.TopoMatrix | None, str, str]:
    """(matrix, source, why not) from a saved ``nvidia-smi topo -m`` output or the command.

    A saved file that is not such an output is bad input (:class:`InputError`); the command's
    output that cannot be parsed is "not available" with the parser's line.
    """
    if file is not None:
        text = read_text(file, what="the output of `nvidia-smi topo -m`")
        return nvsmi.parse(text, file=str(file), gpu_model=gpu), str(file), ""
    out, why = run(["topo", "-m"], exe)
    if out is None:
        return None, "", why
    try:
        return nvsmi.parse(out, file="nvidia-smi topo -m", gpu_model=gpu), "nvidia-smi topo -m", ""
    except InputError as exc:
        return None, "", f"its output could not be read: {exc}"
