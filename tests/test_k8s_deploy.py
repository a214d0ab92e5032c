"""deploy/ manifests agree with each other and with what the commands accept; NVML degrades."""

from __future__ import annotations

import types
from pathlib import Path

import yaml

from gpufabric.k8s import devices

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def test_scheduler_config_calls_the_extender_where_the_deployment_serves(cli):
    cfg = docs("kube-scheduler-config.yaml")[0]
    ext = cfg["extenders"][0]
    assert ext["urlPrefix"] == "http://gpufabric-extender.kube-system.svc:8888/gpufabric/v1"
    assert (ext["filterVerb"], ext["prioritizeVerb"], ext["bindVerb"], ext["preemptVerb"]) == (
        "filter", "prioritize", "bind", "preempt")
    assert ext["weight"] > 0 and ext["nodeCacheCapable"] is True
    assert ext["managedResources"] == [{"name": "nvidia.com/gpu", "ignoredByScheduler": False}]
    by_kind = {d["kind"]: d for d in docs("extender.yaml")}
    svc, dep = by_kind["Service"], by_kind["Deployment"]
    assert (svc["metadata"]["name"], svc["metadata"]["namespace"]) == (
        "gpufabric-extender", "kube-system")
    assert svc["spec"]["ports"][0]["port"] == 8888
    c = dep["spec"]["template"]["spec"]["containers"][0]
    args = c["args"]
    assert args[args.index("--listen") + 1] == "0.0.0.0:8888"
    assert args[args.index("--prefix") + 1] == "/gpufabric/v1"
    assert "--bind-lock" in args        # deploy/ runs gpufabric's device plugin on GPU nodes
    assert c["command"] == ["gpufabric", "k8s", "extender"]
    rules = by_kind["ClusterRole"]["rules"]
    assert any("pods/binding" in r["resources"] and "create" in r["verbs"] for r in rules)
    # list and watch Nodes and Pods; patch a Node for the bind lock
    assert any("nodes" in r["resources"] and {"list", "watch", "patch"} <= set(r["verbs"])
               for r in rules)
    plugin_rules = next(d for d in docs("device-plugin.yaml") if d["kind"] == "ClusterRole")
    assert any("nodes" in r["resources"] and {"get", "patch"} <= set(r["verbs"])
               for r in plugin_rules["rules"])                 # release the bind lock
    # the options the manifests pass exist
    code, out, _ = cli("k8s", "extender", "--help")
    assert code == 0 and all(o in out for o in ("--listen", "--prefix", "--kubeconfig",
                                                "--policy", "--sync"))


def test_daemonset_serves_in_the_kubelet_directory(cli):
    ds = next(d for d in docs("device-plugin.yaml") if d["kind"] == "DaemonSet")
    spec = ds["spec"]["template"]["spec"]
    c = spec["containers"][0]
    assert c["command"] == ["gpufabric", "k8s", "device-plugin"]
    assert c["args"][c["args"].index("--socket-dir") + 1] == "/var/lib/kubelet/device-plugins/"
    assert spec["volumes"][0]["hostPath"]["path"] == "/var/lib/kubelet/device-plugins"
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} \
        in c["env"]
    code, out, _ = cli("k8s", "device-plugin", "--help")
    assert code == 0 and all(o in out for o in ("--socket-dir", "--system", "--kubeconfig",
                                                "--node-name"))


def test_bad_command_line_input_is_one_line_and_exit_2(cli, tmp_path):
    code, _, err = cli("k8s", "extender", "--listen", "8888")
    assert code == 2 and err.strip() == ("gpufabric: error: --listen: '8888' is not HOST:PORT "
                                         "(e.g. 0.0.0.0:8888)")
    code, _, err = cli("k8s", "device-plugin", "--socket-dir", str(tmp_path / "none"))
    assert code == 2 and err.strip().endswith("none: --socket-dir: no such directory")
    bad = tmp_path / "nodes.json"
    bad.write_text('{"items": [{"metadata": {"name": "g1", "labels": {'
                   '"nvidia.com/gpu.product": "NVIDIA-X9000"}}, "status": {"capacity": '
                   '{"nvidia.com/gpu": "8"}}}]}')
    code, _, err = cli("k8s", "extender", "--nodes", str(bad), "--listen", "127.0.0.1:0")
    assert code == 2 and "nodes.json: Node g1.metadata.labels.nvidia.com/gpu.product: " \
        "unknown GPU product 'NVIDIA-X9000'" in err


class FakeNVML(types.SimpleNamespace):
    """Four A100 PCIe cards, NVLink bridges on 0-1 and 2-3, two sockets (what NVML reports)."""

    BUS = ["00000000:17:00.0", "00000000:31:00.0", "00000000:b1:00.0", "00000000:ca:00.0"]
    PEER = {0: 1, 1: 0, 2: 3, 3: 2}
    NVML_NVLINK_MAX_LINKS = 12

    def __init__(self):
        super().__init__(
            nvmlDeviceGetCount=lambda: 4,
            nvmlDeviceGetHandleByIndex=lambda i: i,
            nvmlDeviceGetUUID=lambda h: f"GPU-fake-{h}",
            nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=self.BUS[h].encode()),
            nvmlDeviceGetName=lambda h: "NVIDIA A100 80GB PCIe",
            nvmlDeviceGetNvLinkState=lambda h, ln: 1,
            nvmlDeviceGetNvLinkRemotePciInfo=lambda h, ln: types.SimpleNamespace(
                busId=self.BUS[self.PEER[h]]),
            nvmlDeviceGetTopologyCommonAncestor=lambda a, b: 40 if a // 2 == b // 2 else 50,
            nvmlDeviceGetNumaNodeId=lambda h: h // 2,
            nvmlShutdown=lambda: None)


def test_devices_from_nvml_keep_the_nvlink_pairs(monkeypatch):
    monkeypatch.setattr(devices, "_nvml", lambda: FakeNVML())
    m, uuids, model = devices.nvml_matrix()
    assert model == "A100-PCIe" and uuids[0] == "GPU-fake-0"
    assert m.paths[0] == ["X", "NV12", "SYS", "SYS"]
    assert m.paths[1][2] == "SYS" and m.numa_affinity == ["0", "0", "1", "1"]
    ds = devices.from_nvml()
    assert ds.ids == uuids and ds.numa == [0, 0, 1, 1]
    assert (ds.bw[0, 1], ds.bw[1, 2]) == (300.0, 31.5)   # the bridge, then PCIe Gen4 x16


def test_no_nvml_means_not_available(monkeypatch):
    monkeypatch.setattr(devices, "_nvml", lambda: None)
    assert devices.from_nvml() is None
    assert devices.watch_health(None, None) is False


def test_critical_xid_marks_the_device_unhealthy_application_xids_do_not(monkeypatch):
    import threading

    nv = FakeNVML()
    stop = threading.Event()
    events = [types.SimpleNamespace(eventData=13, device=1),     # application error: ignored
              types.SimpleNamespace(eventData=79, device=2)]     # fell off the bus

    def wait(es, timeout_ms):
        if events:
            return events.pop(0)
        stop.set()
        raise RuntimeError("NVML_ERROR_TIMEOUT")
    nv.nvmlEventSetCreate = lambda: "es"
    nv.nvmlEventTypeXidCriticalError = 8
    nv.nvmlDeviceRegisterEvents = lambda h, kind, es: None
    nv.nvmlEventSetWait = wait
    nv.nvmlEventSetFree = lambda es: None
    monkeypatch.setattr(devices, "_nvml", lambda: nv)
    ds = devices.from_nvml()
    assert devices.watch_health(ds, stop) is True
    assert [ds.health[u] for u in ds.ids] == ["Healthy", "Healthy", "Unhealthy", "Healthy"]
    assert ds.version == 1


def test_the_extender_command_serves_until_sigterm(tmp_path):
    import http.client
    import json
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-c", "from gpufabric.cli import main; main()",
                             "k8s", "extender", "--listen", f"127.0.0.1:{port}",
                             "--nodes", "hgx-h100*2", "--prefix", "/gpufabric/v1"],
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        body = None
        for _ in range(200):
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                pod = {"metadata": {"name": "p", "uid": "u"}, "spec": {"containers": [
                    {"resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}
                conn.request("POST", "/gpufabric/v1/filter", json.dumps(
                    {"Pod": pod, "Nodes": None, "NodeNames": ["hgx-h100-0000"]}))
                body = json.loads(conn.getresponse().read())
                break
            except ConnectionRefusedError:
                time.sleep(0.05)
        assert body == {"Nodes": None, "NodeNames": ["hgx-h100-0000"], "FailedNodes": {},
                        "FailedAndUnresolvableNodes": {}, "Error": ""}
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert f"serving on http://127.0.0.1:{port}/gpufabric/v1/<verb> (2 nodes" in err


def test_a_gpu_is_healthy_again_when_nvml_says_so_after_a_quiet_spell(monkeypatch):
    import threading

    nv = FakeNVML()
    stop = threading.Event()
    now = [0.0]
    lost = {"GPU-fake-2"}                 # fell off the bus: NVML cannot find it until reset
    pending = {"GPU-fake-1": 1}           # a page retirement pending until the GPU is reset
    # (time of the wait, event or None) in order; each wait moves the clock to its time
    script = [(0, types.SimpleNamespace(eventData=79, device=2)),
              (1, types.SimpleNamespace(eventData=94, device=1)),    # contained ECC error
              (350, types.SimpleNamespace(eventData=48, device=3)),  # NVML answers fine
              (400, None),                 # 1, 2 quiet long enough, but not healthy yet
              (401, "reset"),              # an operator resets 1, 2: healthy at once; 3 is
              (649, None),                 # not quiet long enough yet
              (650, None)]
    seen = []

    def wait(es, timeout_ms):
        if not script:
            stop.set()
            raise RuntimeError("NVML_ERROR_TIMEOUT")
        now[0], ev = script.pop(0)
        seen.append([ds.health[u] for u in ds.ids])
        if ev == "reset":
            lost.clear()
            pending.clear()
            ev = None
        if ev is None:
            raise RuntimeError("NVML_ERROR_TIMEOUT")
        return ev

    def by_uuid(u):
        if u in lost:
            raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
        return int(u.rsplit("-", 1)[1])
    nv.nvmlEventSetCreate = lambda: "es"
    nv.nvmlEventTypeXidCriticalError = 8
    nv.nvmlDeviceRegisterEvents = lambda h, kind, es: None
    nv.nvmlEventSetWait = wait
    nv.nvmlEventSetFree = lambda es: None
    nv.nvmlDeviceGetHandleByUUID = by_uuid
    nv.nvmlDeviceGetRetiredPagesPendingStatus = lambda h: pending.get(f"GPU-fake-{h}", 0)
    monkeypatch.setattr(devices, "_nvml", lambda: nv)
    ds = devices.from_nvml()
    assert devices.watch_health(ds, stop, quiet_s=300, clock=lambda: now[0]) is True
    h, u = "Healthy", "Unhealthy"
    # the health each wait starts from
    assert seen == [[h, h, h, h], [h, h, u, h], [h, u, u, h], [h, u, u, u], [h, u, u, u],
                    [h, h, h, u], [h, h, h, u]]
    assert [ds.health[x] for x in ds.ids] == [h, h, h, h] and ds.version == 6
    # a GPU that answers NVML but whose rows failed to remap stays unhealthy
    nv.nvmlDeviceGetRemappedRows = lambda h: (0, 1, 0, 1)
    assert devices.nvml_reports_healthy(nv, "GPU-fake-3") is False
    nv.nvmlDeviceGetRemappedRows = lambda h: (0, 1, 0, 0)
    assert devices.nvml_reports_healthy(nv, "GPU-fake-3") is True
