"""--kubeconfig: the extender's picture of the cluster from an API server (a fake CoreV1Api)."""

from __future__ import annotations

import copy
import json
import types
from pathlib import Path

from gpufabric.k8s.extender import Extender
from gpufabric.k8s.kube import KubeSource

FIX = Path(__file__).parent / "fixtures" / "k8s"


def fixture(name: str):
    return json.loads((FIX / name).read_text())


class FakeCoreV1:
    """Answers like kubernetes.client.CoreV1Api with _preload_content=False (raw JSON)."""

    def __init__(self, nodes, pods):
        self.nodes, self.pods = nodes, pods
        self.patches, self.bindings, self.node_patches = [], [], []

    @staticmethod
    def _raw(obj):
        return types.SimpleNamespace(data=json.dumps(obj).encode())

    def list_node(self, _preload_content=True):
        return self._raw({"kind": "NodeList", "items": self.nodes})

    def list_pod_for_all_namespaces(self, field_selector="", _preload_content=True):
        assert field_selector == "spec.nodeName!="
        return self._raw({"kind": "PodList", "items": self.pods})

    def patch_namespaced_pod(self, name, namespace, body):
        self.patches.append((namespace, name, body))

    def read_node(self, name, _preload_content=True):
        return self._raw(next(n for n in self.nodes if n["metadata"]["name"] == name))

    def patch_node(self, name, body):
        """A strategic merge of annotations (None removes one), refused on a stale version."""
        self.node_patches.append((name, body))
        node = next(n for n in self.nodes if n["metadata"]["name"] == name)
        want = body["metadata"].get("resourceVersion")
        if want and want != node["metadata"].get("resourceVersion"):
            raise RuntimeError("409 Conflict: the object has been modified")
        ann = node["metadata"].setdefault("annotations", {})
        for k, v in body["metadata"]["annotations"].items():
            if v is None:
                ann.pop(k, None)
            else:
                ann[k] = v
        node["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)

    def create_namespaced_binding(self, namespace, body, _preload_content=True):
        if body["target"]["name"] == "gpu-h100-03":
            raise RuntimeError('pods "llm-train-0-x7k2p" not found')
        self.bindings.append((namespace, body))


def running(name: str, uid: str, node: str, gpus: int, index: str, phase="Running") -> dict:
    return {"metadata": {"name": name, "namespace": "research", "uid": uid,
                         "annotations": {"gpufabric.dev/gpu-index": index}},
            "spec": {"nodeName": node, "priority": 0, "containers": [{"resources": {
                "limits": {"nvidia.com/gpu": str(gpus)}, "requests": {"cpu": "4"}}}]},
            "status": {"phase": phase}}


def test_sync_adopts_running_pods_and_bind_goes_through_the_api():
    nodes = copy.deepcopy(fixture("filter-args.json")["Nodes"]["items"])
    api = FakeCoreV1(nodes, [running("nb", "u-nb", "gpu-h100-01", 2, "0-1"),
                             running("done", "u-done", "gpu-h100-01", 4, "2-3-4-5",
                                     phase="Succeeded")])
    src = KubeSource("unused", api=api)
    now = [1000.0]
    ext = Extender(policy="topology", binder=src.bind, clock=lambda: now[0])
    assert ext.sync(src.nodes(), src.pods()) == {"nodes": 3, "released": 0, "adopted": 1}
    assert ext._state.gpu_left[0].tolist() == [0, 0] + [1000] * 6
    assert ext.filter(fixture("filter-args.nodecache.json"))["NodeNames"] == [
        "gpu-h100-01", "gpu-a100-02", "gpu-h100-03"]
    assert ext.bind(fixture("bind-args.json")) == {"Error": ""}
    assert api.patches == [("ml-training", "llm-train-0-x7k2p", {"metadata": {"annotations": {
        "gpufabric.dev/gpu-index": "2-3-4-5"}}})]
    ns, body = api.bindings[0]
    assert ns == "ml-training" and body["target"] == {"apiVersion": "v1", "kind": "Node",
                                                      "name": "gpu-h100-01"}
    assert body["metadata"]["uid"] == "2a4c6e8b-0d1f-4a3c-8e5b-7d9f1b3d5f70"
    # the notebook ends: the next sync gives its GPUs back; the pod just bound is not listed
    # yet, and keeps its GPUs until the grace period is over
    api.pods = []
    assert ext.sync(src.nodes(), src.pods()) == {"nodes": 3, "released": 1, "adopted": 0}
    assert ext._state.gpu_left[0].tolist() == [1000] * 2 + [0] * 4 + [1000] * 2
    now[0] += 61
    assert ext.sync(src.nodes(), src.pods()) == {"nodes": 3, "released": 1, "adopted": 0}
    assert ext._state.gpu_left[0].tolist() == [1000] * 8


def test_a_binding_the_api_refuses_is_an_error_and_the_gpus_stay_free():
    api = FakeCoreV1(copy.deepcopy(fixture("filter-args.json")["Nodes"]["items"]), [])
    src = KubeSource("unused", api=api)
    ext = Extender(policy="topology", binder=src.bind)
    ext.sync(src.nodes(), src.pods())
    ext.filter(fixture("filter-args.nodecache.json"))
    r = ext.bind(dict(fixture("bind-args.json"), Node="gpu-h100-03"))
    assert r == {"Error": "gpufabric: binding ml-training/llm-train-0-x7k2p to gpu-h100-03 "
                          "failed: pods \"llm-train-0-x7k2p\" not found"}
    assert ext.bound == {} and int(ext._state.full[2]) == 7     # 7 healthy GPUs, all free


class FakeCustomObjects:
    def __init__(self, groups):
        self.groups = groups
        self.calls = 0

    def get_namespaced_custom_object(self, group, version, namespace, plural, name,
                                     _preload_content=True):
        self.calls += 1
        assert (group, version, plural) == ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
        if (namespace, name) not in self.groups:
            raise RuntimeError("404 podgroups not found")
        return types.SimpleNamespace(data=json.dumps(
            {"spec": {"minMember": self.groups[(namespace, name)]}}).encode())


def test_a_gang_without_a_size_annotation_takes_minmember_from_its_podgroup():
    nodes = copy.deepcopy(fixture("filter-args.json")["Nodes"]["items"])
    custom = FakeCustomObjects({("ml-training", "llm-train"): 3})
    src = KubeSource("unused", api=FakeCoreV1(nodes, []), custom=custom)
    ext = Extender(policy="topology", gang_size=src.gang_size)
    ext.sync(src.nodes(), src.pods())
    r = ext.filter(fixture("filter-args.nodecache.json"))
    # 3 members of 4 GPUs, all on NVSwitch nodes (the PCIe box is last): the fuller node first
    # (gpu-h100-03 has 7 healthy GPUs), then two on gpu-h100-01
    g = ext.gangs["ml-training/llm-train"]
    assert g.slots == [("gpu-h100-03", (0, 1, 2, 3)), ("gpu-h100-01", (0, 1, 2, 3)),
                       ("gpu-h100-01", (4, 5, 6, 7))]
    assert r["NodeNames"] == ["gpu-h100-01", "gpu-h100-03"]
    ext.filter(fixture("filter-args.nodecache.json"))
    assert custom.calls == 1                                      # asked once per group
    assert src.gang_size("ml-training", "other") is None          # no PodGroup: a plain pod


def test_the_real_kubernetes_client_talks_to_an_api_server_on_loopback():
    """KubeSource with the official client against a minimal API server: paths and bodies."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    import pytest
    kubernetes = pytest.importorskip("kubernetes")
    nodes = copy.deepcopy(fixture("filter-args.json")["Nodes"]["items"])
    seen = []

    class API(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _reply(self, obj, status=200):
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self):
            n = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(n)) if n else None

        def do_GET(self):  # noqa: N802
            seen.append(("GET", self.path))
            if self.path.startswith("/api/v1/nodes/"):
                self._reply(next(n for n in nodes
                                 if n["metadata"]["name"] == self.path.rsplit("/", 1)[1]))
            elif self.path.startswith("/api/v1/nodes"):
                self._reply({"kind": "NodeList", "apiVersion": "v1", "items": nodes})
            elif self.path.startswith("/api/v1/pods"):
                self._reply({"kind": "PodList", "apiVersion": "v1", "items": []})
            else:
                self._reply({"kind": "Status", "code": 404}, 404)

        def do_PATCH(self):  # noqa: N802
            seen.append(("PATCH", self.path, self.headers["Content-Type"], self._body()))
            self._reply({"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "x"}})

        def do_POST(self):  # noqa: N802
            seen.append(("POST", self.path, self._body()))
            self._reply({"kind": "Status", "apiVersion": "v1", "status": "Success"}, 201)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), API)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        cfg = kubernetes.client.Configuration()
        cfg.host = f"http://127.0.0.1:{srv.server_address[1]}"
        client = kubernetes.client.ApiClient(cfg)
        src = KubeSource("unused", api=kubernetes.client.CoreV1Api(client),
                         custom=kubernetes.client.CustomObjectsApi(client), lock=True)
        ext = Extender(policy="topology", binder=src.bind, gang_size=src.gang_size)
        ext.sync(src.nodes(), src.pods())
        ext.filter(fixture("filter-args.nodecache.json"))
        assert ext.bind(fixture("bind-args.json")) == {"Error": ""}
    finally:
        srv.shutdown()
        srv.server_close()
    assert ("GET", "/api/v1/nodes") in seen
    assert ("GET", "/api/v1/pods?fieldSelector=spec.nodeName%21%3D") in seen
    assert ("GET", "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ml-training/podgroups/"
            "llm-train") in seen
    # the node's bind lock first (on the version read), then the pod's GPUs, then the Binding
    assert ("GET", "/api/v1/nodes/gpu-h100-01") in seen
    lock = next(s for s in seen if s[0] == "PATCH")
    assert lock[1] == "/api/v1/nodes/gpu-h100-01"
    assert lock[3]["metadata"]["resourceVersion"] == "88412907"
    assert lock[3]["metadata"]["annotations"]["gpufabric.dev/bind-lock"].startswith(
        "ml-training/llm-train-0-x7k2p/2a4c6e8b-0d1f-4a3c-8e5b-7d9f1b3d5f70 ")
    patch = next(s for s in seen if s[0] == "PATCH" and "/pods/" in s[1])
    assert patch[1] == "/api/v1/namespaces/ml-training/pods/llm-train-0-x7k2p"
    assert patch[2] == "application/strategic-merge-patch+json"     # a map is a valid body
    assert patch[3] == {"metadata": {"annotations": {"gpufabric.dev/gpu-index": "0-1-2-3"}}}
    post = next(s for s in seen if s[0] == "POST")
    assert post[1] == "/api/v1/namespaces/ml-training/bindings"
    assert post[2]["target"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-h100-01"}


def test_pods_on_a_node_that_is_not_ready_keep_their_gpus():
    nodes = copy.deepcopy(fixture("filter-args.json")["Nodes"]["items"])
    ready = next(c for c in nodes[0]["status"]["conditions"] if c["type"] == "Ready")
    ready["status"] = "Unknown"
    nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] = "7"       # and one GPU unhealthy
    api = FakeCoreV1(nodes, [running("nb", "u-nb", "gpu-h100-01", 2, "0-1")])
    src = KubeSource("unused", api=api)
    ext = Extender(policy="topology")
    assert ext.sync(src.nodes(), src.pods())["adopted"] == 1
    assert ext._state.gpu_left[0].tolist() == [0, 0] + [1000] * 5 + [0]
    r = ext.filter(fixture("filter-args.nodecache.json"))
    assert r["FailedAndUnresolvableNodes"] == {
        "gpu-h100-01": "gpufabric: node gpu-h100-01 is not ready"}


def test_the_extender_watches_nodes_and_pods_and_lists_again_on_410_gone():
    """KubeWatch with the official client against an API server on loopback that lists and
    streams watch events (one JSON object a line, as the API server does), then expires."""
    import queue
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs, urlparse

    import pytest
    kubernetes = pytest.importorskip("kubernetes")
    from gpufabric.k8s.deviceplugin import wait_for
    from gpufabric.k8s.kube import KubeWatch

    nodes = copy.deepcopy(fixture("filter-args.json")["Nodes"]["items"])
    pods = [running("a", "uid-a", "gpu-h100-01", 4, "0-1-2-3")]
    events = {"nodes": queue.Queue(), "pods": queue.Queue()}
    seen = []

    class API(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):  # noqa: N802
            url = urlparse(self.path)
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            kind = "nodes" if url.path == "/api/v1/nodes" else "pods"
            seen.append((kind, q.get("watch"), q.get("resourceVersion")))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if q.get("watch") != "true":
                items = nodes if kind == "nodes" else pods
                data = json.dumps({"kind": "List", "metadata": {"resourceVersion": "100"},
                                   "items": items}).encode()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.end_headers()            # a stream: events until the watch times out
            while True:
                try:
                    ev = events[kind].get(timeout=0.5)
                except queue.Empty:
                    return
                self.wfile.write(json.dumps(ev).encode() + b"\n")
                self.wfile.flush()

    srv = ThreadingHTTPServer(("127.0.0.1", 0), API)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    ext = Extender(policy="topology")
    lock = threading.Lock()

    def apply(n, p):
        with lock:
            ext.sync(n, p)
    cfg = kubernetes.client.Configuration()
    cfg.host = f"http://127.0.0.1:{srv.server_address[1]}"
    api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(cfg))
    w = KubeWatch(api, apply, watch_s=30, retry_s=0.1, settle_s=0.01, log=lambda m: None)
    w.start()
    try:
        # listed: three nodes, pod a adopted on the GPUs its annotation names
        assert wait_for(lambda: "uid-a" in ext.bound and len(ext.nodes) == 3, 10)
        assert ext.bound["uid-a"].gpus == (0, 1, 2, 3)

        def rv(obj, v):
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = v
            return obj
        b = running("b", "uid-b", "gpu-a100-02", 2, "4-5")
        events["pods"].put({"type": "ADDED", "object": rv(b, "101")})
        assert wait_for(lambda: "uid-b" in ext.bound, 10)
        done = running("a", "uid-a", "gpu-h100-01", 4, "0-1-2-3", phase="Succeeded")
        events["pods"].put({"type": "MODIFIED", "object": rv(done, "102")})
        assert wait_for(lambda: "uid-a" not in ext.bound, 10)      # its GPUs are free again
        events["nodes"].put({"type": "BOOKMARK", "object": {
            "kind": "Node", "metadata": {"resourceVersion": "103"}}})
        events["nodes"].put({"type": "DELETED", "object": rv(nodes[2], "104")})
        assert wait_for(lambda: len(ext.nodes) == 2, 10)
        # the API server no longer has the version the pod watch resumes from: list again
        pods[:] = [running("c", "uid-c", "gpu-h100-01", 8, "0-1-2-3-4-5-6-7")]
        events["pods"].put({"type": "ERROR", "object": {
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
            "reason": "Expired", "message": "too old resource version: 102 (105)"}})
        assert wait_for(lambda: "uid-c" in ext.bound and "uid-b" not in ext.bound, 10)
        assert w.listed == {"nodes": 1, "pods": 2}
    finally:
        w.stop()
        srv.shutdown()
        srv.server_close()
    pod_calls = [s for s in seen if s[0] == "pods"]
    assert pod_calls[:2] == [("pods", None, None), ("pods", "true", "100")]
    assert ("pods", "true", "102") in pod_calls          # resumed from the last event seen
    assert ("nodes", "true", "100") in seen


def test_the_bind_lock_lets_the_device_plugin_hand_out_one_pods_gpus_at_a_time(tmp_path):
    """The extender locks the node at bind; a second GPU pod waits; the node's device plugin
    answers the lock holder's GPUs (not the oldest pending pod's) and unlocks at Allocate."""
    import grpc

    from gpufabric.k8s.api import deviceplugin_pb2 as pb
    from gpufabric.k8s.api import deviceplugin_pb2_grpc as pb_grpc
    from gpufabric.k8s.deviceplugin import DevicePlugin
    from gpufabric.k8s.devices import DeviceSet
    from gpufabric.k8s.kube import AssignedGPUs, parse_lock

    class API(FakeCoreV1):
        def list_pod_for_all_namespaces(self, field_selector="", _preload_content=True,
                                        _request_timeout=None):
            if "status.phase=Pending" in field_selector:       # the device plugin's question
                return self._raw({"items": self.pending})
            return super().list_pod_for_all_namespaces(field_selector, _preload_content)

        def create_namespaced_binding(self, namespace, body, _preload_content=True):
            self.bindings.append((namespace, body))
    nodes = copy.deepcopy(fixture("filter-args.json")["Nodes"]["items"])
    api = API(nodes, [])
    now = [1_767_225_600.0]
    src = KubeSource("unused", api=api, lock=True, clock=lambda: now[0])
    ext = Extender(policy="topology", binder=src.bind)
    ext.sync(src.nodes(), src.pods())
    first = fixture("bind-args.json")                       # 4 GPUs to gpu-h100-01
    ext.filter(fixture("filter-args.nodecache.json"))
    assert ext.bind(first) == {"Error": ""}
    lock = nodes[0]["metadata"]["annotations"]["gpufabric.dev/bind-lock"]
    assert parse_lock(lock) == (first["PodUID"], now[0])
    # a second pod for the same node waits while the first one's GPUs are handed out
    args = fixture("filter-args.nodecache.json")
    args["Pod"]["metadata"].update(name="second", uid="uid-second")
    ext.filter(args)
    second = dict(first, PodName="second", PodUID="uid-second")
    now[0] += 5
    r = ext.bind(second)
    assert r["Error"] == ("gpufabric: binding ml-training/second to gpu-h100-01 failed: node "
                          "gpu-h100-01 is locked for pod 2a4c6e8b-0d1f-4a3c-8e5b-7d9f1b3d5f70 "
                          "since 5 s ago (its GPUs are being handed out); the pod will be "
                          "tried again")
    assert "uid-second" not in ext.bound and int(ext._state.full[0]) == 4
    # the node's device plugin: an older pending pod fits too, the lock holder goes first
    api.pending = [
        {"metadata": {"uid": "uid-old", "creationTimestamp": "2026-03-02T09:00:00Z",
                      "annotations": {"gpufabric.dev/gpu-index": "4-5-6-7"}}},
        {"metadata": {"uid": first["PodUID"], "creationTimestamp": "2026-03-02T09:21:05Z",
                      "annotations": {"gpufabric.dev/gpu-index": "0-1-2-3"}}}]
    devices = DeviceSet.from_system("hgx-h100")
    hint = AssignedGPUs(api, "gpu-h100-01", devices.ids)
    plugin = DevicePlugin(devices, str(tmp_path), log=lambda m: None, hint=hint)
    plugin.serve()
    try:
        with grpc.insecure_channel(f"unix://{plugin.socket}") as ch:
            stub = pb_grpc.DevicePluginStub(ch)
            got = stub.GetPreferredAllocation(pb.PreferredAllocationRequest(container_requests=[
                pb.ContainerPreferredAllocationRequest(available_deviceIDs=devices.ids,
                                                       allocation_size=4)]))
            ids = list(got.container_responses[0].deviceIDs)
            assert ids == devices.ids[:4]
            assert "gpufabric.dev/bind-lock" in nodes[0]["metadata"]["annotations"]
            stub.Allocate(pb.AllocateRequest(container_requests=[
                pb.ContainerAllocateRequest(devices_ids=ids)]))
    finally:
        plugin.stop_server()
    assert "gpufabric.dev/bind-lock" not in nodes[0]["metadata"]["annotations"]
    assert ext.bind(second) == {"Error": ""}              # now it may bind
    # a lock whose pod never reached the kubelet goes stale after 5 minutes
    nodes[2]["metadata"].setdefault("annotations", {})["gpufabric.dev/bind-lock"] = (
        f"ml/ghost/uid-ghost {int(now[0])}")
    third = dict(first, PodName="third", PodUID="uid-third", Node="gpu-h100-03")
    args["Pod"]["metadata"].update(name="third", uid="uid-third")
    ext.filter(args)
    assert "is locked for pod uid-ghost since 0 s ago" in ext.bind(third)["Error"]
    now[0] += 301
    assert ext.bind(third) == {"Error": ""}
    assert parse_lock(nodes[2]["metadata"]["annotations"]["gpufabric.dev/bind-lock"])[0] == \
        "uid-third"
