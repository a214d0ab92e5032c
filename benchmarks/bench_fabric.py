"""Scale of the topology commands and of a collective on very large clusters.

Goals (issue 9, point 5): `show`, `p2p`, `topo` and `compare` on a 16,384-GPU cluster in under
2 s and 500 MB; a 131,072-GPU cluster described and its all-reduce predicted without running
out of memory; absurd sizes refused with one line. Each command runs as a user runs it (a new
`gpufabric` process: interpreter start and imports included); wall time and the process's peak
resident memory are printed. Run it pinned to two cores:

    taskset -c 0,1 .venv/bin/python benchmarks/bench_fabric.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

BIN = str(Path(sys.executable).with_name("gpufabric"))
C16K = "gpu=H100-SXM,nodes=2048,nic=ib-ndr"                  # 16,384 GPUs, 3-tier NDR
C131K = "gpu=B200,nodes=16384,nic=ib-xdr"                    # 131,072 GPUs, 3-tier XDR
NVL72_RACKS = "gpu=GB200,gpus_per_node=72,nodes=1820,nic=ib-xdr"   # 131,040 GPUs in NVL72 racks

RUNS = [
    ("show 16,384 GPUs", ["show", C16K]),
    ("p2p 16,384 GPUs", ["p2p", C16K]),
    ("topo 16,384 GPUs", ["topo", C16K]),
    ("compare 16,384 GPUs", ["compare", C16K, "--no-html"]),
    ("show 16,384 GPUs --node 2047", ["show", C16K, "--node", "2047"]),
    ("show 131,072 GPUs", ["show", C131K]),
    ("all_reduce 1 GiB, 131,072 GPUs", ["collective", C131K, "-b", "1G", "-e", "1G"]),
    ("all_reduce 1 GiB, 1,820 NVL72 racks", ["collective", NVL72_RACKS, "-b", "1G", "-e", "1G"]),
    ("all_to_all 1 GiB, 131,072 GPUs", ["collective", C131K, "--op", "all_to_all", "-b", "1G",
                                        "-e", "1G"]),
    ("nodes: 1000000 (refused)", ["show", "gpu=H100-SXM,nodes=1000000"]),
]


def run(args: list[str]) -> tuple[float, float, int, str]:
    """Wall seconds, peak RSS (MB) of this child alone, exit status, last line of output."""
    t0 = time.perf_counter()
    with subprocess.Popen([BIN, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as p:
        text = p.stdout.read() if p.stdout else ""
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    out = text.strip().splitlines()
    return wall, usage.ru_maxrss / 1024, p.returncode, out[-1] if out else ""


def main() -> None:
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs visible")
    print(f"{'command':38s} {'wall s':>7s} {'peak MB':>8s}  rc  last line")
    for label, args in RUNS:
        wall, mb, rc, last = run(args)
        print(f"{label:38s} {wall:7.2f} {mb:8.0f}  {rc:2d}  {last[:90]}")


if __name__ == "__main__":
    main()
