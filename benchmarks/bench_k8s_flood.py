"""The scheduler extender under a flood of idle half-sent connections, over loopback only.

`gpufabric k8s extender` runs in its own process. One client address (127.0.0.1) opens 1,000
connections, sends half a request (a request line and one header) on each and then nothing;
meanwhile and afterwards a well-behaved client at another address (127.0.0.2, as kube-scheduler
on another host) sends filter calls with a 5 s timeout (kube-scheduler's default httpTimeout).

Goal: every call of the well-behaved client answered 200 in under 1 s, during the flood and
after it; the flooding address holds at most its share of the connections (64), the rest of
its connections answered 503 at once.

Run: .venv/bin/python benchmarks/bench_k8s_flood.py [--connections 1000] [--calls 50]
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import subprocess
import sys
import time

import numpy as np

NODES = "V100M32x8*2+T4x4*2+cpu*1"
HALF = b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", "from gpufabric.cli import main; main()",
                             "k8s", "extender", "--listen", f"127.0.0.1:{port}", "--nodes",
                             NODES], stderr=subprocess.DEVNULL)
    for _ in range(1200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/healthz")
            if c.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("the extender did not start within 60 s")


def filter_call(port: int, body: str, source: str) -> tuple[int | str, float]:
    """One filter call from ``source``: (HTTP status or the error, seconds)."""
    t0 = time.perf_counter()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.sock = socket.create_connection(("127.0.0.1", port), timeout=5,
                                             source_address=(source, 0))
        conn.request("POST", "/filter", body, {"Content-Type": "application/json"})
        status: int | str = conn.getresponse().status
        conn.close()
    except OSError as exc:
        status = type(exc).__name__
    return status, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--connections", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=50)
    a = ap.parse_args()
    from gpufabric.k8s.nodes import load_node_infos
    names = [n.name for n in load_node_infos(NODES)]
    pod = {"metadata": {"name": "p", "namespace": "t", "uid": "u-p"},
           "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    body = json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names})
    port = free_port()
    proc = start(port)
    flood: list[socket.socket] = []
    during: list[tuple[int | str, float]] = []
    refused = failed = 0
    try:
        t0 = time.perf_counter()
        every = max(1, a.connections // a.calls)
        for i in range(a.connections):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=2)
                s.sendall(HALF)
                flood.append(s)
            except OSError:
                failed += 1
            if i % every == every - 1:
                during.append(filter_call(port, body, "127.0.0.2"))
        flood_s = time.perf_counter() - t0
        time.sleep(0.5)
        for s in flood:                       # the connections answered 503 at once
            s.setblocking(False)
            try:
                refused += s.recv(64).startswith(b"HTTP/1.1 503")
            except (BlockingIOError, ConnectionResetError):
                pass
        after = [filter_call(port, body, "127.0.0.2") for _ in range(a.calls)]
    finally:
        for s in flood:
            s.close()
        proc.kill()
        proc.wait()

    def summary(calls: list[tuple[int | str, float]]) -> dict:
        ms = np.array([t for _, t in calls]) * 1e3
        statuses: dict[str, int] = {}
        for st, _ in calls:
            statuses[str(st)] = statuses.get(str(st), 0) + 1
        return {"calls": len(calls), "statuses": statuses,
                "ms_p50": round(float(np.percentile(ms, 50)), 2),
                "ms_p99": round(float(np.percentile(ms, 99)), 2),
                "ms_max": round(float(ms.max()), 2)}

    print(json.dumps({"flood_connections": a.connections,
                      "flood_opened_s": round(flood_s, 2),
                      "flood_connect_failed": failed,
                      "flood_answered_503": refused,
                      "flood_held": len(flood) - refused,
                      "other_client_during_flood": summary(during),
                      "other_client_after_flood": summary(after)}, indent=1))


if __name__ == "__main__":
    main()
