"""The scheduler extender under load and chaos, over loopback only, bounded in count and time.

`gpufabric k8s extender --state FILE` serves a 1,000-node cluster in its own process. Good
clients (kube-scheduler's part: filter over every node, prioritize, bind) send 200 requests/s in
all while hostile clients send bad pods, junk, stalled and abandoned requests
(benchmarks/k8s_chaos.py). Halfway the extender is killed (SIGKILL) and started again on the same
port from its state file; the clients carry on.

Goals: p99 of one filter + prioritize pair under 50 ms at 200 requests/s; afterwards no pod bound
twice, no GPU given past its capacity, every pod a bind said yes to in the state file.

Run: .venv/bin/python benchmarks/bench_k8s_chaos.py [--seconds 30] [--rate 200] [--good 4]
     [--chaos 4]
"""

from __future__ import annotations

import argparse
import http.client
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import k8s_chaos as chaos


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(port: int, state: Path) -> tuple[subprocess.Popen, float]:
    """The extender CLI on ``port``; (process, seconds until it answered /healthz)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", "from gpufabric.cli import main; main()",
                             "k8s", "extender", "--listen", f"127.0.0.1:{port}", "--nodes",
                             chaos.NODES, "--state", str(state)],
                            stderr=subprocess.DEVNULL)
    for _ in range(1200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                return proc, time.perf_counter() - t0
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the extender did not start within 60 s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=200.0, help="good clients' requests/s")
    ap.add_argument("--good", type=int, default=4)
    ap.add_argument("--chaos", type=int, default=4)
    a = ap.parse_args()
    from gpufabric.k8s.nodes import load_node_infos
    from gpufabric.k8s.statefile import StateFile

    infos = load_node_infos(chaos.NODES)
    names = [n.name for n in infos]
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        state = Path(d) / "state.jsonl"
        proc, up_s = start(port, state)
        target = chaos.Target(port)
        pods_each = int(a.seconds * a.rate / 3 / a.good) + 1
        holder = {"proc": proc}
        timing: dict[str, float] = {"first_start_s": up_s}

        def restart() -> None:
            holder["proc"].kill()
            holder["proc"].wait()
            timing["restart_at"] = time.perf_counter()
            holder["proc"], timing["restart_s"] = start(port, state)

        t0 = time.perf_counter()
        rec = chaos.run(target, names, restart, good=a.good, pods_each=pods_each,
                        rate_s=a.rate, chaos=a.chaos, seconds=a.seconds + 60,
                        restart_after=int(pods_each * a.good / 2), stall_s=10.0)
        wall = time.perf_counter() - t0
        holder["proc"].send_signal(signal.SIGTERM)
        holder["proc"].wait(30)
        binds, _ = StateFile(state).load()
    bound = {u: (r["node"], tuple(r["gpus"]), r["pod"]["request"]["gpu_milli"])
             for u, r in binds.items()}
    wrong = chaos.check(rec, bound, {n.name: n.gpus for n in infos})
    lat = np.array(rec.pair_s) * 1000
    requests = 3 * len(lat) + rec.unplaced * 1
    print(json.dumps({
        "nodes": len(names), "good_clients": a.good, "chaos_clients": a.chaos,
        "target_requests_per_s": a.rate,
        "good_requests_per_s": round(requests / rec.good_s, 1),
        "good_clients_s": round(rec.good_s, 1), "wall_s": round(wall, 1),
        "pods_bound": len(rec.bound), "pods_unplaced": rec.unplaced, "retries": rec.retries,
        "pair_ms_p50": round(float(np.percentile(lat, 50)), 2),
        "pair_ms_p99": round(float(np.percentile(lat, 99)), 2),
        "pair_ms_max": round(float(lat.max()), 2),
        "extender_start_s": round(timing["first_start_s"], 2),
        "restart_s (kill to healthz)": round(timing.get("restart_s", 0.0), 2),
        "chaos_answers": dict(sorted(rec.chaos.items())),
        "wrong": wrong[:10], "wrong_count": len(wrong)}, indent=1))
    if wrong or float(np.percentile(lat, 99)) >= 50:
        sys.exit(1)


if __name__ == "__main__":
    main()
