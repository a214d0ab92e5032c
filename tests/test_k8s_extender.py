"""The scheduler extender over real HTTP on loopback, with kube-scheduler's own messages.

The example messages (tests/fixtures/k8s, from ../shared/k8s/extender) describe one cluster:
gang worker ml-training/llm-train-0-x7k2p asks 4 GPUs; gpu-h100-01 is an HGX H100 (NVSwitch),
gpu-a100-02 8x A100 PCIe with NVLink bridges on pairs 0-1, 2-3, 4-5, 6-7, gpu-h100-03 an HGX
H100 with one GPU unhealthy (allocatable 7 of 8).
"""

from __future__ import annotations

import copy
import http.client
import json
import os
from pathlib import Path

import numpy as np
import pytest

from gpufabric.k8s.extender import FILTER_KEYS, Extender
from gpufabric.k8s.http import ExtenderServer
from gpufabric.k8s.nodes import infos_from_cluster, load_node_infos, node_object
from gpufabric.k8s.objects import (OPENB_COUNT, OPENB_MILLI, OPENB_MODEL, PodInfo, parse_node)
from gpufabric.scheduler.cluster import load_nodes
from gpufabric.scheduler.engine import BaseMasks, place_gang
from gpufabric.scheduler.jobs import load_jobs
from gpufabric.scheduler.policies import make_placement
from gpufabric.scheduler.state import Request, State

FIX = Path(__file__).parent / "fixtures" / "k8s"
ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("GPUFABRIC_SHARED", ROOT.parent / "shared"))
OPENB = SHARED / "traces" / "openb"
NOTEBOOK_UID = "9c1e3a5b-7d9f-4b1d-a3c5-e7f9a1c3e5b7"   # research/notebook-ana-0 on gpu-a100-02


def fixture(name: str):
    return json.loads((FIX / name).read_text())


class Client:
    """kube-scheduler's side: POST <prefix>/<verb> with JSON, one keep-alive connection."""

    def __init__(self, port: int, prefix: str = "/gpufabric/v1"):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self.prefix = prefix

    def raw(self, verb: str, body: bytes) -> tuple[int, object]:
        self.conn.request("POST", f"{self.prefix}/{verb}", body,
                          {"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        return resp.status, json.loads(resp.read())

    def post(self, verb: str, obj) -> tuple[int, object]:
        return self.raw(verb, json.dumps(obj, separators=(",", ":")).encode())


@pytest.fixture
def serve():
    """Start an extender server on a free loopback port: serve(extender) -> Client."""
    servers = []

    def start(ext: Extender) -> Client:
        srv = ExtenderServer(("127.0.0.1", 0), ext, "/gpufabric/v1")
        srv.start()
        servers.append(srv)
        return Client(srv.server_address[1])
    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def example_nodes():
    """The three nodes of the examples; gpu-a100-02 says how its NVLink bridges pair GPUs."""
    items = copy.deepcopy(fixture("filter-args.json")["Nodes"]["items"])
    items[1]["metadata"]["annotations"]["gpufabric.dev/system"] = "nvlink-bridge-pairs"
    return [parse_node(n) for n in items]


def busy(uid: str, node: str, gpus: tuple[int, ...], priority: int = 0) -> PodInfo:
    return PodInfo(uid, "research", uid, Request(4000, 1024, len(gpus), 1000), (), "training",
                   priority, "", 1, node, gpus)


def story_extender() -> Extender:
    """The examples' cluster: 4 GPUs of gpu-h100-01 in use; GPUs 1, 3, 7 of gpu-a100-02."""
    ext = Extender(example_nodes(), policy="topology")
    ext.sync(example_nodes(), [busy("h100-job", "gpu-h100-01", (4, 5, 6, 7)),
                               busy(NOTEBOOK_UID, "gpu-a100-02", (1,)),
                               busy("a100-b", "gpu-a100-02", (3,)),
                               busy("a100-c", "gpu-a100-02", (7,))])
    return ext


# -- the example messages -------------------------------------------------------------------

def test_filter_with_full_nodes_answers_every_field_and_returns_node_objects(serve):
    c = serve(Extender())
    status, r = c.post("filter", fixture("filter-args.json"))
    assert status == 200 and tuple(r) == FILTER_KEYS
    assert r["NodeNames"] is None and r["Error"] == ""
    assert [n["metadata"]["name"] for n in r["Nodes"]["items"]] == [
        "gpu-h100-01", "gpu-a100-02", "gpu-h100-03"]
    assert r["Nodes"]["items"][0] == fixture("filter-args.json")["Nodes"]["items"][0]
    assert r["FailedNodes"] == {} and r["FailedAndUnresolvableNodes"] == {}


def test_filter_prioritize_bind_on_the_examples_cluster(serve):
    ext = story_extender()
    c = serve(ext)
    status, r = c.post("filter", fixture("filter-args.nodecache.json"))
    assert status == 200 and tuple(r) == FILTER_KEYS
    assert r["Nodes"] is None
    assert r["NodeNames"] == ["gpu-h100-01", "gpu-a100-02", "gpu-h100-03"]
    args = fixture("prioritize-args.nodecache.json")
    args["NodeNames"] = r["NodeNames"]
    status, scores = c.post("prioritize", args)
    # the NVSwitch node with exactly 4 free GPUs; then the other NVSwitch node; the PCIe box
    # (4 of its free GPUs cross PCIe: 31.5 GB/s) last
    assert status == 200 and scores == [{"Host": "gpu-h100-01", "Score": 10},
                                        {"Host": "gpu-a100-02", "Score": 1},
                                        {"Host": "gpu-h100-03", "Score": 5}]
    assert c.post("bind", fixture("bind-args.json")) == (200, {"Error": ""})
    assert ext.bound["2a4c6e8b-0d1f-4a3c-8e5b-7d9f1b3d5f70"].gpus == (0, 1, 2, 3)
    # kube-scheduler retries a bind that timed out: the same answer, nothing bound twice
    assert c.post("bind", fixture("bind-args.json")) == (200, {"Error": ""})
    assert int(ext._state.full[0]) == 0
    other = dict(fixture("bind-args.json"), Node="gpu-h100-03")
    status, r = c.post("bind", other)
    assert status == 200 and r["Error"].endswith("is already bound to gpu-h100-01, not "
                                                 "gpu-h100-03")


def test_a_pod_that_does_not_fit_is_failed_not_unresolvable_and_preemption_can_help(serve):
    ext = story_extender()
    ext.sync(example_nodes(), [busy("h100-job", "gpu-h100-01", (4, 5, 6, 7)),
                               busy("h100-job2", "gpu-h100-01", (0, 1)),
                               busy("h100-03-job", "gpu-h100-03", (0, 1, 2, 3, 4)),
                               busy(NOTEBOOK_UID, "gpu-a100-02", (1,)),
                               busy("a100-b", "gpu-a100-02", (3,)),
                               busy("a100-c", "gpu-a100-02", (7,), priority=10**6),
                               busy("a100-d", "gpu-a100-02", (0, 2))])
    c = serve(ext)
    _, r = c.post("filter", fixture("filter-args.nodecache.json"))
    assert r["NodeNames"] == [] and r["FailedAndUnresolvableNodes"] == {}
    assert r["FailedNodes"] == {
        "gpu-h100-01": "gpufabric: 2 of 8 GPUs of node gpu-h100-01 free; the pod asks 4",
        "gpu-a100-02": "gpufabric: 3 of 8 GPUs of node gpu-a100-02 free; the pod asks 4",
        "gpu-h100-03": "gpufabric: 2 of 8 GPUs of node gpu-h100-03 free; the pod asks 4"}
    # evicting the notebook on GPU1 frees a fourth GPU on gpu-a100-02: accepted, UID form
    for name in ("preempt-args.json", "preempt-args.nodecache.json"):
        status, r = c.post("preempt", fixture(name))
        assert status == 200 and r == {"NodeNameToMetaVictims": {"gpu-a100-02": {
            "Pods": [{"UID": NOTEBOOK_UID}], "NumPDBViolations": 0}}}
    # the state is as before: only GPUs 4, 5, 6 free, the victim still on GPU1
    left = ext._state.gpu_left[ext._index["gpu-a100-02"]].tolist()
    assert left == [0, 0, 0, 0, 1000, 1000, 1000, 0]


# -- gangs, routing, bad input --------------------------------------------------------------

def gang_pod(name: str, group: str, size: int, gpus: int) -> dict:
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}",
                         "labels": {"scheduling.x-k8s.io/pod-group": group},
                         "annotations": {"gpufabric.dev/gang-size": str(size)}},
            "spec": {"priority": 5, "containers": [{"resources": {"limits": {
                "nvidia.com/gpu": str(gpus), "cpu": "8", "memory": "64Gi"}}}]}}


def test_gang_is_placed_all_or_nothing(serve):
    ext = Extender(load_node_infos("hgx-h100*2"), policy="topology")
    c = serve(ext)
    names = ["hgx-h100-0000", "hgx-h100-0001"]
    # a gang of 3 x 8 GPUs cannot fit on 2 nodes: every node fails, nothing is held
    _, r = c.post("filter", {"Pod": gang_pod("big-0", "big", 3, 8), "Nodes": None,
                             "NodeNames": names})
    assert r["NodeNames"] == [] and set(r["FailedNodes"]) == set(names)
    assert int(ext._state.full.sum()) == 16 and not ext.gangs
    # a gang of 2 x 8: the first member reserves both nodes, each member takes one
    for k in range(2):
        pod = gang_pod(f"train-{k}", "train", 2, 8)
        _, r = c.post("filter", {"Pod": pod, "Nodes": None, "NodeNames": names})
        assert len(r["NodeNames"]) == 2 - k
        _, scores = c.post("prioritize", {"Pod": pod, "Nodes": None, "NodeNames": names})
        node = max(scores, key=lambda s: s["Score"])["Host"]
        assert c.post("bind", {"PodName": f"train-{k}", "PodNamespace": "ml",
                               "PodUID": f"uid-train-{k}", "Node": node}) == (200, {"Error": ""})
    assert sorted(b.node for b in ext.bound.values()) == names and not ext.gangs


def test_kind_routing_sends_services_to_cpu_nodes(serve):
    c = serve(Extender(load_node_infos("hgx-h100*1+cpu*1")))
    svc = {"metadata": {"name": "web", "uid": "w"}, "spec": {"containers": [
        {"resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}}
    _, r = c.post("filter", {"Pod": svc, "Nodes": None,
                             "NodeNames": ["hgx-h100-0000", "cpu-0001"]})
    assert r["NodeNames"] == ["cpu-0001"]
    assert r["FailedAndUnresolvableNodes"] == {
        "hgx-h100-0000": "gpufabric: service pods do not run on the GPU node hgx-h100-0000 "
                         "(routing kind)"}


def test_bad_input_gets_the_protocols_own_errors_and_the_server_keeps_serving(serve):
    ext = Extender(example_nodes())
    c = serve(ext)
    status, r = c.raw("filter", b'{"Pod": {')
    assert status == 400 and tuple(r) == FILTER_KEYS and r["NodeNames"] is None
    assert r["Error"].startswith("gpufabric: filter: body is not JSON")
    status, r = c.post("score", {})
    assert status == 404 and r == {"Error": "unknown verb 'score' (allowed: filter, "
                                            "prioritize, bind, preempt)"}
    status, r = c.post("filter", {"Nodes": None, "NodeNames": ["gpu-h100-01"]})
    assert status == 400 and r["Error"] == "gpufabric: filter: ExtenderArgs.Pod is missing"
    status, r = c.post("prioritize", {"Pod": fixture("filter-args.json")["Pod"],
                                      "NodeNames": "gpu-h100-01"})
    assert status == 400 and "NodeNames (a list of node names)" in r["Error"]
    bad_pod = fixture("filter-args.json")["Pod"]
    bad_pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "four"
    status, r = c.post("filter", {"Pod": bad_pod, "Nodes": None, "NodeNames": ["gpu-h100-01"]})
    assert status == 200 and r["NodeNames"] == [] and r["Error"] == ""     # this pod only
    assert r["FailedAndUnresolvableNodes"] == {"gpu-h100-01": (
        "gpufabric: Pod ml-training/llm-train-0-x7k2p.resources.requests.nvidia.com/gpu: 'four' "
        "is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)")}
    # a node whose GPU no catalog entry names, and a node the extender never heard of
    args = fixture("filter-args.json")
    args["Nodes"]["items"][2]["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-X9000"
    status, r = c.post("filter", args)
    assert status == 200 and [n["metadata"]["name"] for n in r["Nodes"]["items"]] == [
        "gpu-h100-01", "gpu-a100-02"]
    assert "unknown GPU product 'NVIDIA-X9000'" in r["FailedAndUnresolvableNodes"]["gpu-h100-03"]
    args = fixture("filter-args.nodecache.json")
    args["NodeNames"].append("gpu-gone-09")
    _, r = c.post("filter", args)
    assert r["FailedAndUnresolvableNodes"] == {
        "gpu-gone-09": "gpufabric: node gpu-gone-09 is not in the extender node cache"}
    # bind of a pod never filtered, of a missing field: errors, nothing bound
    _, r = c.post("bind", {"PodName": "x", "PodNamespace": "y", "PodUID": "z",
                           "Node": "gpu-h100-01"})
    assert r["Error"].endswith("the pod was never filtered by this extender")
    status, r = c.post("bind", {"PodName": "x"})
    assert status == 400 and "PodNamespace must be a non-empty string" in r["Error"]
    assert ext.bound == {}
    # still serving
    assert c.post("filter", fixture("filter-args.nodecache.json"))[0] == 200


# -- one engine, two front doors: an openb trace through the extender ------------------------

def pod_object(js, i: int) -> dict:
    """An openb pod as the Pod kube-scheduler would send (openb annotations, cpu/memory)."""
    ann = {}
    if js.num_gpu[i]:
        ann[OPENB_COUNT] = str(int(js.num_gpu[i]))
        ann[OPENB_MILLI] = str(int(js.gpu_milli[i]))
    models = js.specs[js.spec[i]]
    if models:
        ann[OPENB_MODEL] = "|".join(models)
    return {"metadata": {"name": js.names[i], "namespace": "openb", "uid": f"uid-{i}",
                         "annotations": ann},
            "spec": {"containers": [{"name": "main", "resources": {"requests": {
                "cpu": f"{int(js.cpu[i])}m", "memory": f"{int(js.mem[i])}Mi"}}}]},
            "status": {"phase": "Pending"}}


@pytest.mark.skipif(not OPENB.is_dir(), reason="../shared/traces/openb not present")
@pytest.mark.parametrize("trace,policy,count", [("gpushare40", "fgd", 300),
                                                ("multigpu20", "topology-fgd", 250),
                                                ("default", "best-fit", 250),
                                                ("multigpu20", "topology", 250)])
def test_openb_replay_through_the_extender_matches_the_engine(serve, tmp_path, trace, policy,
                                                              count):
    full = load_nodes(str(OPENB / "openb_node_list_gpu_node.csv"))
    rows = [(full.names[i], int(full.cpu[i]), int(full.mem[i]), int(full.num_gpu[i]),
             full.model(i), "gpu") for i in range(0, len(full), 40)]     # 31 nodes
    csv = tmp_path / "nodes.csv"
    csv.write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                   + "".join(f"{r[0]},{r[1]},{r[2]},{r[3]},{r[4]}\n" for r in rows))
    cluster = load_nodes(str(csv))
    nodelist = tmp_path / "nodes.json"
    nodelist.write_text(json.dumps({"metadata": {}, "items": [
        node_object(n) for n in infos_from_cluster(cluster)]}))
    jobs = load_jobs(OPENB / f"openb_pod_list_{trace}.csv")
    js = jobs.take(np.arange(count))

    # the engine: place_gang with the policy, job by job
    state = State(cluster)
    place = make_placement(policy, cluster, jobs, np.random.default_rng(42))
    masks = BaseMasks(cluster, js, "kind")
    engine = []
    for i in range(len(js)):
        r = Request(int(js.cpu[i]), int(js.mem[i]), int(js.num_gpu[i]), int(js.gpu_milli[i]))
        got = place_gang(state, place, r, masks.tiers(i), 1)
        engine.append(None if got is None else (cluster.names[got[0][0]], tuple(got[0][1])))

    # the extender: the same pods as Kubernetes objects, over HTTP, as kube-scheduler asks
    ext = Extender(load_node_infos(str(nodelist)), policy, workload=jobs, seed=42)
    c = serve(ext)
    names = list(cluster.names)
    via_k8s = []
    for i in range(len(js)):
        pod = pod_object(js, i)
        _, r = c.post("filter", {"Pod": pod, "Nodes": None, "NodeNames": names})
        if not r["NodeNames"]:
            via_k8s.append(None)
            continue
        _, scores = c.post("prioritize", {"Pod": pod, "Nodes": None,
                                          "NodeNames": r["NodeNames"]})
        best = max(s["Score"] for s in scores)
        node = next(s["Host"] for s in scores if s["Score"] == best)
        assert c.post("bind", {"PodName": js.names[i], "PodNamespace": "openb",
                               "PodUID": f"uid-{i}", "Node": node}) == (200, {"Error": ""})
        via_k8s.append((node, ext.bound[f"uid-{i}"].gpus))
    assert via_k8s == engine
    assert sum(p is None for p in engine) > 0         # the slice fills the cluster
    assert (ext._state.gpu_left == state.gpu_left).all()


def test_a_pod_can_require_nvlink_between_its_gpus(serve):
    ext = story_extender()
    c = serve(ext)
    args = fixture("filter-args.nodecache.json")
    args["Pod"]["metadata"]["annotations"]["gpufabric.dev/min-bw-GBps"] = "100"
    for part in ("requests", "limits"):     # an extended resource's request is its limit
        args["Pod"]["spec"]["containers"][0]["resources"][part]["nvidia.com/gpu"] = "2"
    ext.sync(example_nodes(), [busy("h100-job", "gpu-h100-01", (2, 3, 4, 5, 6, 7))])
    ext.sync(example_nodes(), list(b.pod for b in ext.bound.values()) + [
        busy("a100-x", "gpu-a100-02", (1, 3, 5, 7))])
    _, r = c.post("filter", args)
    # gpu-a100-02 has GPUs 0, 2, 4, 6 free: no NVLink pair left, only PCIe between them
    assert r["NodeNames"] == ["gpu-h100-01", "gpu-h100-03"]
    assert r["FailedNodes"] == {"gpu-a100-02": (
        "gpufabric: the best 2 of the free GPUs of node gpu-a100-02 (0,2,4,6): 31.5 GB/s "
        "(GPUs 0,2); the pod asks at least 100 GB/s")}
    args["Pod"]["metadata"]["annotations"]["gpufabric.dev/min-bw-GBps"] = "500"
    _, r = c.post("filter", args)          # more than any NVLink of these nodes: never
    assert r["NodeNames"] == [] and r["FailedAndUnresolvableNodes"]["gpu-h100-01"] == (
        "gpufabric: the best 2 GPUs of node gpu-h100-01 have 450 GB/s between them; the pod "
        "asks at least 500")
    args["Pod"]["metadata"]["annotations"]["gpufabric.dev/min-bw-GBps"] = "fast"
    status, r = c.post("filter", args)
    assert status == 200 and r["NodeNames"] == []
    assert "'fast' is not a bandwidth in GB/s" in r["FailedAndUnresolvableNodes"]["gpu-h100-01"]


# -- NIC locality ---------------------------------------------------------------------------

#: 8 A100 PCIe behind two switches, one per socket, as the pcie-switch-dual-root preset, with
#: one HDR NIC (under the first switch); 8 H100 on NVSwitch with 4 NDR NICs, one per GPU pair.
DUAL_ROOT_NIC = ("gpu=A100-PCIe,gpus_per_node=8,scale_up=pcie,host.cpu=EPYC-7763,"
                 "host.sockets=2,host.pcie_switches=2,host.switch_layout=dual-root,"
                 "host.switch=PEX88096,nics_per_node=1,nic=ib-hdr")
HGX_4NIC = "gpu=H100-SXM,gpus_per_node=8,nics_per_node=4,nic=ib-ndr"


def test_a_multi_gpu_pod_goes_where_its_gpus_sit_with_nics(serve):
    nodes = load_node_infos(f"pcie-switch-dual-root*1+{DUAL_ROOT_NIC}*1+"
                            f"gpu=H100-SXM,gpus_per_node=8*1+{HGX_4NIC}*1")
    names = [n.name for n in nodes]
    assert names == ["pcie-switch-dual-root-0000", "node-0001", "node-0002", "node-0003"]
    ext = Extender(nodes, policy="topology-fgd")
    c = serve(ext)
    args = fixture("filter-args.nodecache.json")
    args["NodeNames"] = names
    _, r = c.post("filter", args)
    assert r["NodeNames"] == names
    _, scores = c.post("prioritize", args)
    # NVSwitch first (450 GB/s), the one whose 4 GPUs each have an NDR NIC under their PCIe
    # switch (GPUDirect RDMA) above the one without NICs; likewise for the PCIe boxes
    assert scores == [{"Host": names[0], "Score": 1}, {"Host": names[1], "Score": 4},
                      {"Host": names[2], "Score": 6}, {"Host": names[3], "Score": 10}]
    bind = dict(fixture("bind-args.json"), Node="node-0003")
    assert c.post("bind", bind) == (200, {"Error": ""})
    assert ext.bound[bind["PodUID"]].gpus == (0, 2, 4, 6)       # one NIC per GPU pair each


def test_a_gang_requiring_nvlink_gets_a_fast_set_for_every_member(serve):
    # two 8x A100 PCIe boxes with NVLink bridges on pairs 0-1, 2-3, 4-5, 6-7: the first has
    # GPUs 1, 3, 5, 7 in use (no pair left), the second 0 and 2 (pairs 4-5 and 6-7 left)
    names = ["nvlink-bridge-pairs-0000", "nvlink-bridge-pairs-0001"]

    def boxes() -> Extender:
        nodes = load_node_infos("nvlink-bridge-pairs*2")
        ext = Extender(nodes, policy="topology-fgd")
        ext.sync(nodes, [busy("a", names[0], (1, 3, 5, 7)), busy("b", names[1], (0, 2))])
        return ext
    ext = boxes()
    c = serve(ext)

    def gang(group: str, size: int, k: int, min_bw: str | None) -> dict:
        pod = gang_pod(f"{group}-{k}", group, size, 2)
        if min_bw:
            pod["metadata"]["annotations"]["gpufabric.dev/min-bw-GBps"] = min_bw
        return {"Pod": pod, "Nodes": None, "NodeNames": names}

    # 3 members of 2 GPUs: 8 GPUs are free, but only 2 NVLink pairs
    _, r = c.post("filter", gang("fast3", 3, 0, "100"))
    assert r["NodeNames"] == [] and r["FailedNodes"] == {n: (
        "gpufabric: gang ml/fast3 of 3 members does not fit all together on these nodes with "
        "at least 100 GB/s between each member's GPUs") for n in names}
    assert not ext.gangs and int(ext._state.full.sum()) == 10       # nothing held
    # without the requirement they fit, one member across PCIe
    _, r = c.post("filter", gang("any3", 3, 0, None))
    assert r["NodeNames"] == [names[1]]
    assert ext.gangs["ml/any3"].slots == [(names[1], (4, 5)), (names[1], (6, 7)),
                                          (names[1], (1, 3))]     # 1-3 over PCIe
    # 2 members: the two pairs, both on the second box
    ext = boxes()
    c = serve(ext)
    _, r = c.post("filter", gang("fast2", 2, 0, "100"))
    assert r["NodeNames"] == [names[1]]
    assert ext.gangs["ml/fast2"].slots == [(names[1], (4, 5)), (names[1], (6, 7))]
    for k in range(2):
        _, r = c.post("filter", gang("fast2", 2, k, "100"))
        assert c.post("bind", {"PodName": f"fast2-{k}", "PodNamespace": "ml",
                               "PodUID": f"uid-fast2-{k}", "Node": names[1]}) == (
            200, {"Error": ""})
    assert sorted(b.gpus for b in ext.bound.values() if b.pod.group) == [(4, 5), (6, 7)]


def test_a_nodelist_file_in_another_encoding_is_one_input_error(tmp_path):
    from gpufabric.errors import InputError
    bad = tmp_path / "nodes.yaml"
    bad.write_bytes(b"items: [\xff]\n")
    with pytest.raises(InputError) as e:
        load_node_infos(str(bad))
    assert str(e.value) == (f"{bad}: not UTF-8 text (byte 0xff at offset 8); "
                            "expected a YAML NodeList")
