"""Hostile inputs end fast and small: time and peak memory of each refusal.

Each case runs in a fresh interpreter (``python -c``) so its peak resident memory is its own;
the baseline row is the interpreter with gpufabric imported and doing nothing. Goal: every case
ends in exit 2 within 2 s of CPU time (interpreter start included; wall time on a loaded machine
is longer) and within 100 MiB of the baseline's peak memory.

Run by hand (not a test): ``.venv/bin/python benchmarks/bench_bad_inputs.py``
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBE = """
import resource, sys
from gpufabric.cli import main
try:
    main({args!r})
    code = 0
except SystemExit as e:
    code = e.code or 0
ru = resource.getrusage(resource.RUSAGE_SELF)
print(code, ru.ru_maxrss, ru.ru_utime + ru.ru_stime, file=sys.stderr)
"""


def run(args: list[str]) -> tuple[int, float, float, float, str]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", PROBE.format(args=args)], capture_output=True,
                       text=True, timeout=120)
    dt = time.perf_counter() - t0
    lines = p.stderr.strip().splitlines()
    code, rss_kib, cpu = lines[-1].split()
    msg = lines[0] if len(lines) > 1 else ""
    return int(code), dt, float(cpu), int(rss_kib) / 1024, msg


def main() -> None:
    d = Path(tempfile.mkdtemp())
    (d / "huge.yaml").write_bytes(b"# " + b"x" * (65 * 2**20))
    (d / "binary.yaml").write_bytes(bytes(range(256)) * 4096)
    bomb = "a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
        f"{k}: &{k} [{', '.join(['*' + p] * 10)}]\n" for p, k in zip("abcdefgh", "bcdefghi",
                                                                      strict=True))
    (d / "bomb.yaml").write_text(bomb)                       # 10**9 values once expanded
    (d / "deep.yaml").write_text("[" * 100000 + "]" * 100000)
    (d / "cal.yaml").write_text(bomb)
    (d / "flat.yaml").write_text("a: [" + "1, " * 1_200_000 + "1]\n")   # 3.6 MB, 1.2M values
    (d / "back.csv").write_text("arrival_s,isl,osl\n0,10,1\n-1,10,1\n")
    serve, train = ["serve", "llama3-8b", "hgx-h100"], ["train", "llama3-8b", "hgx-h100"]
    nvsmi = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "nvsmi"
    (d / "nv9999.txt").write_text((nvsmi / "dgx_a100_nv12.txt").read_text()
                                  .replace("NV12", "NV9999"))

    def matrix(n: int, cell: str) -> str:
        head = "\t" + "\t".join(f"GPU{i}" for i in range(n)) + "\tCPU Affinity\n"
        return head + "".join(f"GPU{i}\t" + "\t".join(" X " if i == j else cell
                                                       for j in range(n)) + "\t0-63\n"
                              for i in range(n))
    (d / "gpus577.txt").write_text(matrix(577, "NV18"))        # one GPU past the limit
    (d / "sys576.txt").write_text(matrix(576, "SYS"))          # 576 sockets
    (d / "inf.yaml").write_text("gpu: H100-SXM\nnodes: 4\nnics_per_node: 8\n"
                                "fabric: {oversubscription: .inf}\n")
    (d / "bigint.yaml").write_text("devices: [{id: c, kind: cpu}, {id: g, kind: gpu}]\n"
                                   "links: [{a: c, b: g, kind: pcie, lanes: " + "9" * 4000 + "}]\n")
    (d / "longkey.yaml").write_text("gpu: H100-SXM\n? " + "k" * 100_000 + "\n: 1\n")
    (d / "model.yaml").write_text("- {name: m, arch: dense, layers: .inf, hidden: 4096, heads: 32,"
                                  " ffn: 11008, vocab: 32000, seq_len: 4096, source: x}\n")
    (d / "points.yaml").write_text("- {id: x, system: {gpu: H100-SXM}, collective: all_reduce, "
                                   "points: [{size: " + "1" * 4000 + ", busbw: .nan}]}\n")
    (d / "t.csv").write_text("arrival_s,isl,osl," + "k" * 100_000 + "\n0,1,1,1\n")
    cases = [
        ("baseline (--version)", ["--version"]),
        ("65 MiB YAML file", ["show", str(d / "huge.yaml")]),
        ("1 MiB binary", ["show", str(d / "binary.yaml")]),
        ("YAML alias bomb (1e9 values)", ["show", str(d / "bomb.yaml")]),
        ("YAML nested 100000 deep", ["show", str(d / "deep.yaml")]),
        ("YAML of 1.2M values (3.6 MB)", ["show", str(d / "flat.yaml")]),
        ("alias bomb as measurements", ["validate", str(d / "cal.yaml")]),
        ("--step-factor 1.000001", ["collective", "dgx-a100", "--step-factor", "1.000001"]),
        ("size 10**400", ["collective", "dgx-a100", "--max", "9" * 400]),
        ("--node 10**9", ["show", "dgx-a100", "--node", str(10**9)]),
        # flags: options that exclude each other, counts of 0 or below, values typer cannot
        # read; each refused before any work
        ("flags: --rate + --concurrency", serve + ["--rate", "5", "--concurrency", "4"]),
        ("flags: --trace with --isl", serve + ["--trace", str(d / "back.csv"), "--isl", "9"]),
        ("flags: --max-num-seqs 0", serve + ["--max-num-seqs", "0"]),
        ("flags: 1-token budget, long prompts", serve + ["--engine", "sglang",
                                                        "--max-batched-tokens", "1",
                                                        "--isl", "100000", "--rate", "1"]),
        ("flags: --requests abc", serve + ["--requests", "abc"]),
        ("flags: train --search --tp 2", train + ["--search", "--tp", "2"]),
        ("flags: train --zero 4", train + ["--zero", "4"]),
        ("flags: collective --per-node 0", ["collective", "dgx-a100", "--per-node", "0"]),
        ("flags: schedule --runs 0", ["schedule", "synthetic-openb", "--runs", "0"]),
        ("flags: schedule --load arrival", ["schedule", "synthetic-openb", "--load", "2"]),
        ("trace arrival -1", serve + ["--trace", str(d / "back.csv")]),
        ("train layout over memory", train),
        ("nvidia-smi NV9999", ["import", "nvidia-smi", str(d / "nv9999.txt"), "-o",
                               str(d / "o.yaml")]),
        ("nvidia-smi 577 GPUs", ["import", "nvidia-smi", str(d / "gpus577.txt"), "-o",
                                 str(d / "o.yaml")]),
        ("nvidia-smi 576 GPUs all SYS", ["import", "nvidia-smi", str(d / "sys576.txt"), "-o",
                                         str(d / "o.yaml")]),
        ("spec with .inf", ["show", str(d / "inf.yaml")]),
        ("system file, 4000-digit int", ["show", str(d / "bigint.yaml")]),
        ("YAML key of 100,000 chars", ["show", str(d / "longkey.yaml")]),
        ("model file layers .inf", ["train", str(d / "model.yaml"), "dgx-a100"]),
        ("measurements 4000 digits", ["validate", str(d / "points.yaml")]),
        ("trace header 100,000 chars", ["serve", "llama2-7b", "dgx-a100", "--trace",
                                        str(d / "t.csv")]),
        ("inline spec of 5000 chars", ["show", "gpu=H100-SXM,nodes=.nan," + "x=1," * 1250]),
        ("name of 5000 chars", ["show", "t" * 5000]),
    ]
    print(f"{'case':<30} {'exit':>4} {'wall s':>6} {'cpu s':>6} {'peak MiB':>8}  message")
    for name, args in cases:
        code, dt, cpu, mib, msg = run(args)
        msg = msg.removeprefix("gpufabric: error: ").replace(str(d) + "/", "")
        print(f"{name:<30} {code:>4} {dt:>6.2f} {cpu:>6.2f} {mib:>8.0f}  {msg[:60]}")


if __name__ == "__main__":
    main()
