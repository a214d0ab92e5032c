"""Whatever kube-scheduler sends, in whatever order: no pod bound twice, no GPU given twice."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufabric.k8s.extender import Extender
from gpufabric.k8s.nodes import load_node_infos
from gpufabric.scheduler.state import MILLI

NODES = "V100M32x8*2+T4x4*2+cpu*1"
NAMES = [n.name for n in load_node_infos(NODES)]


def pod(k: int, gpus: int, milli: int, group: str, gang: int) -> dict:
    ann = {"alibabacloud.com/gpu-count": str(gpus), "alibabacloud.com/gpu-milli": str(milli)}
    labels = {}
    if group:
        labels["scheduling.x-k8s.io/pod-group"] = group
        ann["gpufabric.dev/gang-size"] = str(gang)
    return {"metadata": {"name": f"p{k}", "namespace": "t", "uid": f"u{k}", "labels": labels,
                         "annotations": ann},
            "spec": {"containers": [{"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]}}


ops = st.lists(st.tuples(
    st.sampled_from(["place"] * 5 + ["rebind", "steal", "forget", "junk", "flap"]),
    st.integers(0, 11),                                  # pod
    st.sampled_from([(0, 0), (1, 300), (1, 1000), (2, 1000), (4, 1000), (8, 1000)]),
    st.sampled_from(["", "", "g1", "g2"]),               # gang group
    st.integers(0, len(NAMES) - 1)), min_size=10, max_size=40)


@settings(max_examples=40, deadline=None)
@given(ops, st.sampled_from(["topology-fgd", "best-fit", "fgd"]))
def test_state_is_always_the_sum_of_the_bound_pods(seq, policy):
    ext = Extender(load_node_infos(NODES), policy)
    gang_size = {"g1": 2, "g2": 3}
    for op, k, (gpus, milli), group, other in seq:
        p = pod(k, gpus, milli, group, gang_size.get(group, 1))
        uid = f"u{k}"
        bind = {"PodName": f"p{k}", "PodNamespace": "t", "PodUID": uid}
        if op == "place":
            r = ext.filter({"Pod": p, "Nodes": None, "NodeNames": NAMES})
            assert set(r["NodeNames"]) | set(r["FailedNodes"]) | set(
                r["FailedAndUnresolvableNodes"]) == set(NAMES)
            if r["NodeNames"]:
                scores = ext.prioritize({"Pod": p, "Nodes": None, "NodeNames": r["NodeNames"]})
                assert all(0 <= s["Score"] <= 10 for s in scores)
                node = max(scores, key=lambda s: s["Score"])["Host"]
                before = ext.bound.get(uid)
                got = ext.bind(dict(bind, Node=node))
                assert got["Error"] == "" or before is not None or group
        elif op == "rebind" and uid in ext.bound:
            assert ext.bind(dict(bind, Node=ext.bound[uid].node)) == {"Error": ""}
        elif op == "steal" and uid in ext.bound and NAMES[other] != ext.bound[uid].node:
            assert "already bound" in ext.bind(dict(bind, Node=NAMES[other]))["Error"]
        elif op == "forget":
            ext.forget(uid)
        elif op == "flap":       # a node goes not ready, or comes back: the state is rebuilt
            info = ext.nodes[NAMES[other]]
            ext.update_nodes([replace(info, ready=not info.ready)])
        elif op == "junk":      # refused on every node; nothing else changes
            for bad in ({"metadata": {}}, pod(k, -4, MILLI, group, 1)):
                r = ext.filter({"Pod": bad, "Nodes": None, "NodeNames": NAMES})
                assert r["NodeNames"] == [] and set(r["FailedAndUnresolvableNodes"]) == set(NAMES)
        # invariant: free = capacity - bound pods - open gang places (never below zero)
        cluster, state = ext._model()
        expect = np.zeros_like(state.gpu_left)
        for i in range(len(cluster)):
            expect[i, :cluster.num_gpu[i]] = MILLI
        for b in ext.bound.values():
            for g in b.gpus:
                expect[ext._index[b.node], g] -= b.pod.request.gpu_milli
        for g in ext.gangs.values():
            used = set(g.taken.values())
            for s, (node, gpus) in enumerate(g.slots):
                if s not in used and node:
                    for x in gpus:
                        expect[ext._index[node], x] -= g.request.gpu_milli
        assert (expect >= 0).all() and (state.gpu_left == expect).all()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=False)
    | st.text(max_size=8) | st.sampled_from(["gpu-a", "4", "500m", "nvidia.com/gpu", "16Gi"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["Pod", "Nodes", "NodeNames", "metadata", "spec", "name", "uid",
                         "containers", "resources", "limits", "requests", "nvidia.com/gpu",
                         "items", "PodName", "PodNamespace", "PodUID", "Node", "annotations",
                         "labels", "NodeNameToVictims", "NodeNameToMetaVictims", "Pods", "UID",
                         "status", "capacity", "allocatable", "priority", "x"]),
        inner, max_size=5),
    max_leaves=25)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["filter", "prioritize", "bind", "preempt"]), json_values)
def test_any_json_gets_an_answer_never_a_server_error(verb, body):
    import http.client
    import json

    from gpufabric.k8s.http import ExtenderServer
    srv = _SERVER.get("srv")
    if srv is None:
        srv = _SERVER["srv"] = ExtenderServer(("127.0.0.1", 0),
                                              Extender(load_node_infos(NODES)))
        srv.start()
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=10)
    conn.request("POST", f"/{verb}", json.dumps(body))
    resp = conn.getresponse()
    reply = json.loads(resp.read())
    assert resp.status in (200, 400), reply
    assert srv.errors == 0
    if resp.status == 400:
        assert reply["Error"].startswith("gpufabric: ")


_SERVER: dict = {}
