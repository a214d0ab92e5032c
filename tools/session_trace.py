"""Write a synthetic multi-turn chat trace (CSV: arrival_s, isl, osl, session_id) to stdout.

    python tools/session_trace.py [SESSIONS] [TURNS] [SEED] > chat.csv

Each session starts at a random time in the first ten minutes with a first prompt of 2,000
tokens plus a question; each later turn comes after a think time (exponential, mean 60 s) and
its prompt is the whole conversation so far (every earlier prompt and answer) plus a new
question. Questions are 50-800 tokens, answers 100-600 (uniform). The numbers are ours, an
illustration of the shape of chat traffic, not a measurement: `gpufabric serve --trace
chat.csv --kv-tier ...` shows what the cache tiers do on such a load (docs/inference.md).
"""

from __future__ import annotations

import sys

import numpy as np


def main(argv: list[str]) -> None:
    sessions = int(argv[1]) if len(argv) > 1 else 300
    turns = int(argv[2]) if len(argv) > 2 else 4
    rng = np.random.default_rng(int(argv[3]) if len(argv) > 3 else 0)
    rows = []
    for s in range(sessions):
        t = float(rng.uniform(0, 600))
        ctx = 2000
        for _ in range(turns):
            isl = ctx + int(rng.integers(50, 801))
            osl = int(rng.integers(100, 601))
            rows.append((t, isl, osl, f"s{s}"))
            ctx = isl + osl
            t += float(rng.exponential(60.0))
    rows.sort()
    out = ["arrival_s,isl,osl,session_id"]
    out += [f"{t:.3f},{i},{o},{s}" for t, i, o, s in rows]
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main(sys.argv)
