"""Load and chaos against the scheduler extender over loopback: the harness that the chaos test
(tests/test_k8s_chaos.py, small) and the benchmark (benchmarks/bench_k8s_chaos.py, large) run.

Good clients play kube-scheduler: for each of their pods, filter over every node, prioritize the
nodes that passed, bind to the best; paced to a total request rate; a pod whose call failed (a
restart, a lost race for GPUs) is tried again from filter, as the scheduler retries it. Chaos
clients at the same time send what no scheduler should: pods that ask "-4", "2.5" or "500m"
GPUs, bodies that are not JSON or nest 100,000 deep, text/plain, unknown verbs, bodies larger
than the limit, requests that stall halfway, and connections closed before the answer. In the
middle the server is restarted (``restart()``), and the clients carry on against the new one.

Only loopback addresses are used; every loop is bounded in count and time.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: The benchmark's cluster: 1,000 nodes of the kinds the openb trace and GFD describe.
NODES = "hgx-h100*400+V100M32x8*300+T4x4*200+cpu*100"

BAD_GPUS = ["-4", "2.5", "500m", "1e9", "four", "1Ki", "", "0x10"]


def pod(name: str, gpus: str | None = None, cpu: str = "2", ann: dict | None = None) -> dict:
    limits = {"cpu": cpu, "memory": "8Gi"}
    if gpus is not None:
        limits["nvidia.com/gpu"] = gpus
    return {"metadata": {"name": name, "namespace": "chaos", "uid": f"uid-{name}",
                         "annotations": ann or {}},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]}}


def good_pods(client: int, count: int, rng: random.Random) -> list[dict]:
    out = []
    for k in range(count):
        shape = rng.choice(["8", "4", "2", "1", "1", "share", "cpu"])
        name = f"c{client}-p{k}"
        if shape == "share":
            out.append(pod(name, ann={"alibabacloud.com/gpu-count": "1",
                                      "alibabacloud.com/gpu-milli": "500"}))
        elif shape == "cpu":
            out.append(pod(name))
        else:
            out.append(pod(name, shape, cpu=str(2 * int(shape))))
    return out


@dataclass
class Record:
    """What the clients saw."""

    pair_s: list[float] = field(default_factory=list)     # filter + prioritize, good clients
    bound: dict[str, set[str]] = field(default_factory=dict)   # uid -> nodes a bind said yes to
    unplaced: int = 0            # pods no node could take (the cluster filled up)
    retries: int = 0             # calls that failed (restart, lost race) and were tried again
    chaos: dict[str, int] = field(default_factory=dict)     # chaos kind -> answers by status
    bad_status: list[str] = field(default_factory=list)     # answers a client did not expect
    good_s: float = 0.0          # seconds until the last good client was done
    lock: threading.Lock = field(default_factory=threading.Lock)

    def note(self, kind: str, status: int) -> None:
        with self.lock:
            key = f"{kind} {status}"
            self.chaos[key] = self.chaos.get(key, 0) + 1


class Target:
    """Where the server is: its port, how many times it was restarted, and whether the
    clients should stop."""

    def __init__(self, port: int):
        self.port = port
        self.restarts = 0
        self.done = threading.Event()

    def conn(self, timeout_s: float = 10.0) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)


def _call(conn: http.client.HTTPConnection, verb: str, obj: object) -> tuple[int, object]:
    conn.request("POST", f"/{verb}", json.dumps(obj, separators=(",", ":")),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def good_client(target: Target, names: list[str], pods: list[dict], rate_s: float,
                end_s: float, rec: Record) -> None:
    """Schedule ``pods`` one after another, ``rate_s`` requests a second at most."""
    gap = 1.0 / rate_s
    conn = target.conn()
    next_t = time.perf_counter()
    for p in pods:
        uid = p["metadata"]["uid"]
        for _attempt in range(20):
            if time.perf_counter() > end_s:
                return
            try:
                wait = next_t - time.perf_counter()
                if wait > 0:
                    time.sleep(wait)
                next_t = max(next_t + 3 * gap, time.perf_counter())
                args = {"Pod": p, "Nodes": None, "NodeNames": names}
                t0 = time.perf_counter()
                s1, f = _call(conn, "filter", args)
                passed = f["NodeNames"] if s1 == 200 else None
                if passed == []:
                    with rec.lock:
                        rec.unplaced += 1
                    break
                s2, scores = _call(conn, "prioritize", dict(args, NodeNames=passed))
                dt = time.perf_counter() - t0
                if s1 != 200 or s2 != 200:
                    rec.bad_status.append(f"{uid}: filter {s1}, prioritize {s2}")
                    break
                best = max(scores, key=lambda s: s["Score"])["Host"]
                s3, b = _call(conn, "bind", {"PodName": p["metadata"]["name"],
                                             "PodNamespace": "chaos", "PodUID": uid,
                                             "Node": best})
                with rec.lock:
                    rec.pair_s.append(dt)
                if s3 == 200 and b["Error"] == "":
                    with rec.lock:
                        rec.bound.setdefault(uid, set()).add(best)
                    break
                with rec.lock:                   # lost a race for the GPUs: try again
                    rec.retries += 1
            except (OSError, http.client.HTTPException, ValueError):
                with rec.lock:                   # the server went away (restart): again
                    rec.retries += 1
                conn.close()
                time.sleep(0.05)
                conn = target.conn()
    conn.close()


def _raw(target: Target, data: bytes, read: bool = True, timeout_s: float = 10.0) -> int:
    """Send raw bytes; the answer's status (0: none, the connection closed)."""
    with socket.create_connection(("127.0.0.1", target.port), timeout=timeout_s) as s:
        s.sendall(data)
        if not read:
            return 0
        got = b""
        while b"\r\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                return 0
            got += chunk
        return int(got.split(b" ", 2)[1])


def _post(path: str, body: bytes, ctype: str = "application/json",
          length: int | None = None) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n\r\n").encode() + body


def chaos_client(target: Target, names: list[str], end_s: float, rec: Record, seed: int,
                 stall_s: float, max_calls: int = 10_000) -> None:
    """Hostile requests until ``end_s``: each kind's answers are counted by status."""
    rng = random.Random(seed)
    few = names[:50]
    stalls: list[threading.Thread] = []
    for k in range(max_calls):
        if time.perf_counter() > end_s or target.done.is_set():
            break
        generation = target.restarts
        kind = rng.choice(["bad-pod", "not-json", "deep", "text", "verb", "huge", "stall",
                           "hangup", "bind-junk"])
        try:
            if kind == "bad-pod":
                gpus = rng.choice(BAD_GPUS)
                body = json.dumps({"Pod": pod(f"bad{seed}-{k}", gpus), "Nodes": None,
                                   "NodeNames": few}).encode()
                status = _raw(target, _post("/filter", body))
            elif kind == "not-json":
                status = _raw(target, _post("/prioritize", b'{"Pod": {'))
            elif kind == "deep":
                status = _raw(target, _post("/filter", b"[" * 100_000 + b"]" * 100_000))
            elif kind == "text":
                status = _raw(target, _post("/filter", b"hello", "text/plain"))
            elif kind == "verb":
                status = _raw(target, _post("/score", b"{}"))
            elif kind == "huge":
                status = _raw(target, _post("/filter", b"{", length=2**40))
            elif kind == "stall":           # in the background: this client goes on meanwhile
                if len(stalls) < 3:
                    stalls.append(threading.Thread(target=_stall, args=(
                        target, rec, stall_s, generation), daemon=True))
                    stalls[-1].start()
                stalls[:] = [t for t in stalls if t.is_alive()]
                continue
            elif kind == "hangup":          # half a body, then the connection closes
                status = _raw(target, _post("/filter", b'{"Pod":', length=1000), read=False)
            else:
                body = json.dumps({"PodName": "x", "PodNamespace": "y",
                                   "PodUID": f"never-{k}", "Node": rng.choice(few)}).encode()
                status = _raw(target, _post("/bind", body))
        except OSError:
            status = -1
        if target.restarts != generation:
            status = -1                      # the server restarted meanwhile: cut off
        rec.note(kind, status)
        time.sleep(rng.uniform(0.05, 0.15))   # about 10 hostile requests a second each
    for t in stalls:
        t.join(stall_s + 15)


def _stall(target: Target, rec: Record, stall_s: float, generation: int) -> None:
    """Half a body, then nothing: the server must answer 408 once its deadline passes."""
    try:
        with socket.create_connection(("127.0.0.1", target.port), timeout=30) as s:
            s.sendall(_post("/filter", b'{"Pod":', length=1000))
            s.settimeout(stall_s + 10)
            got = s.recv(4096)
            status = int(got.split(b" ", 2)[1]) if got else 0
    except OSError:
        status = -1
    rec.note("stall", -1 if target.restarts != generation else status)


def run(target: Target, names: list[str], restart: Callable[[], None], *, good: int = 4,
        pods_each: int = 30, rate_s: float = 200.0, chaos: int = 2, seconds: float = 60.0,
        restart_after: int = 40, stall_s: float = 1.0, seed: int = 1) -> Record:
    """Drive ``good`` kube-scheduler-like clients (``rate_s`` requests a second in all) and
    ``chaos`` hostile ones; call ``restart()`` once ``restart_after`` pods have been bound."""
    rec = Record()
    start = time.perf_counter()
    end = start + seconds
    rng = random.Random(seed)
    workers = [threading.Thread(target=good_client, args=(
        target, names, good_pods(c, pods_each, rng), rate_s / good, end, rec))
        for c in range(good)]
    workers += [threading.Thread(target=chaos_client, args=(
        target, names, end, rec, seed * 100 + c, stall_s)) for c in range(chaos)]
    for w in workers:
        w.start()
    restarted = False
    while any(w.is_alive() for w in workers[:good]) and time.perf_counter() < end:
        if not restarted and len(rec.bound) >= restart_after:
            target.restarts += 1
            restart()
            restarted = True
        time.sleep(0.02)
    rec.good_s = time.perf_counter() - start
    if not restarted:
        target.restarts += 1
        restart()
    target.done.set()
    for w in workers:
        w.join(max(0.0, end - time.perf_counter()) + stall_s + 15)
    return rec


def check(rec: Record, bound: dict[str, tuple[str, tuple[int, ...], int]],
          capacity: dict[str, int]) -> list[str]:
    """What went wrong: a pod bound to two nodes or missing from the server's records, a GPU
    given past its capacity. ``bound``: uid -> (node, GPUs, milli each), the server's records;
    ``capacity``: node -> GPUs."""
    wrong = list(rec.bad_status)
    for uid, nodes in rec.bound.items():
        if len(nodes) > 1:
            wrong.append(f"{uid} bound to {sorted(nodes)}")
        elif uid not in bound:
            wrong.append(f"{uid} was bound to {nodes.pop()} but the server lost it")
        elif bound[uid][0] not in nodes:
            wrong.append(f"{uid}: the server has it on {bound[uid][0]}, the bind said {nodes}")
    used: dict[tuple[str, int], int] = {}
    for uid, (node, gpus, milli) in bound.items():
        for g in gpus:
            if g >= capacity.get(node, 0):
                wrong.append(f"{uid} holds GPU {g} of {node}, which has {capacity.get(node)}")
            used[(node, g)] = used.get((node, g), 0) + milli
    wrong += [f"GPU {g} of {n} given {m} milli (more than one GPU)"
              for (n, g), m in used.items() if m > 1000]
    return wrong
