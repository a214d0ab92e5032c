"""Load and chaos over loopback: 1,000 nodes, kube-scheduler-like clients binding pods while
hostile clients send bad pods, junk, stalls and hang-ups, and the extender restarts halfway.

Afterwards no pod is bound twice, no GPU is given past its capacity, the restarted extender holds
exactly what the first one had bound, and every pod a bind said yes to is in its records. The
harness is benchmarks/k8s_chaos.py (the benchmark runs it longer and measures latency).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from gpufabric.k8s.extender import Extender
from gpufabric.k8s.http import ExtenderServer
from gpufabric.k8s.nodes import load_node_infos
from gpufabric.k8s.statefile import StateFile
from gpufabric.scheduler.state import MILLI

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import k8s_chaos as chaos  # noqa: E402

pytestmark = pytest.mark.usefixtures("bounded_memory", "deadline")   # conftest.py


@pytest.mark.slow
def test_chaos_on_a_thousand_nodes_with_a_restart(tmp_path, capfd):
    infos = load_node_infos(chaos.NODES)
    names = [n.name for n in infos]
    path = tmp_path / "state.jsonl"
    live: dict[str, ExtenderServer] = {}

    def start(port: int = 0) -> ExtenderServer:
        srv = ExtenderServer(("127.0.0.1", port), Extender(infos, state_file=StateFile(path)),
                             request_timeout_s=1.0)
        srv.start()
        live["srv"] = srv
        return srv

    first = start()
    target = chaos.Target(first.server_address[1])
    seen: dict = {}

    def restart() -> None:
        old = live["srv"]
        old.shutdown()
        old.lock.acquire()                    # as if killed: no verb of the old one finishes
        old.close_connections()
        old.server_close()
        old.extender.state_file.close()
        seen["before"] = {u: (b.node, b.gpus) for u, b in old.extender.bound.items()}
        new = start(target.port)
        seen["after"] = {u: (b.node, b.gpus) for u, b in new.extender.bound.items()}

    try:
        rec = chaos.run(target, names, restart, good=4, pods_each=25, rate_s=200, chaos=3,
                        seconds=60, restart_after=40, stall_s=1.0)
    finally:
        srv = live["srv"]
        srv.shutdown()
        srv.close_connections()
        srv.server_close()
    assert seen["after"] == seen["before"] and len(seen["before"]) >= 40
    ext = srv.extender
    bound = {u: (b.node, b.gpus, b.pod.request.gpu_milli) for u, b in ext.bound.items()}
    capacity = {n.name: n.gpus for n in infos}
    assert chaos.check(rec, bound, capacity) == []
    assert len(rec.bound) + rec.unplaced == 100                # every pod got an answer
    assert set(rec.bound) == set(bound)
    # the server's free GPUs are exactly capacity less what its records hold
    cluster, state = ext._model()
    expect = np.zeros_like(state.gpu_left)
    for i in range(len(cluster)):
        expect[i, :cluster.num_gpu[i]] = MILLI
    for node, gpus, milli in bound.values():
        for g in gpus:
            expect[ext._index[node], g] -= milli
    assert (state.gpu_left == expect).all()
    # the hostile clients were all answered as the protocol says (or cut off, for hang-ups)
    kinds = {k.split()[0]: set() for k in rec.chaos}
    for k in rec.chaos:
        kind, status = k.split()
        kinds[kind].add(int(status))
    allowed = {"bad-pod": {200}, "not-json": {400}, "deep": {400}, "text": {415}, "verb": {404},
               "huge": {413}, "stall": {408}, "hangup": {0}, "bind-junk": {200}}
    for kind, statuses in kinds.items():
        assert statuses - {-1} <= allowed[kind], (kind, statuses)   # -1: during the restart
    assert srv.errors == 0 and "Traceback" not in capfd.readouterr().err
