"""The device plugin against a test kubelet: real gRPC servers and clients on unix sockets.

The kubelet here does what the real one does (pkg/kubelet/cm/devicemanager): it serves
Registration on kubelet.sock; inside Register it dials the plugin's socket back and asks
GetDevicePluginOptions; then it keeps a ListAndWatch stream open. The messages are the examples
of ../shared/k8s/deviceplugin/v1beta1 (tests/fixtures/k8s): an 8x A100 PCIe node with NVLink
bridges on pairs 0-1, 2-3, 4-5, 6-7.
"""

from __future__ import annotations

import threading
import time
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from google.protobuf import text_format

from gpufabric.k8s.api import deviceplugin_pb2 as pb
from gpufabric.k8s.api import deviceplugin_pb2_grpc as pb_grpc
from gpufabric.k8s.deviceplugin import DevicePlugin, wait_for
from gpufabric.k8s.devices import DeviceSet
from gpufabric.topology.build import from_data, load
from gpufabric.topology.nvsmi import parse, to_system

FIX = Path(__file__).parent / "fixtures" / "k8s"


def example(name: str, msg):
    return text_format.Parse((FIX / f"{name}.textproto").read_text(), msg)


IDS = [d.ID for d in example("list-and-watch-response", pb.ListAndWatchResponse()).devices]


class Kubelet(pb_grpc.RegistrationServicer):
    """A kubelet's device manager, as far as a plugin can see it."""

    def __init__(self, sock_dir: Path):
        self.dir = sock_dir
        self.requests: list[pb.RegisterRequest] = []
        self.options: list[pb.DevicePluginOptions] = []
        self.updates: list[pb.ListAndWatchResponse] = []
        self.channel: grpc.Channel | None = None
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{sock_dir / 'kubelet.sock'}")
        self.server.start()

    def Register(self, request, context):  # noqa: N802
        if request.version != "v1beta1":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "unsupported version")
        self.channel = grpc.insecure_channel(f"unix://{self.dir / request.endpoint}")
        # blocking dial back; a plugin socket that vanished fails the registration quickly and
        # the plugin serves and registers again (as with a real kubelet)
        grpc.channel_ready_future(self.channel).result(timeout=3)
        stub = pb_grpc.DevicePluginStub(self.channel)
        self.options.append(stub.GetDevicePluginOptions(pb.Empty(), timeout=10))
        self.requests.append(request)
        stream = stub.ListAndWatch(pb.Empty())

        def watch():
            try:
                for m in stream:
                    self.updates.append(m)
            except grpc.RpcError:     # the plugin or this kubelet went away
                pass
        threading.Thread(target=watch, daemon=True).start()
        return pb.Empty()

    def plugin(self) -> pb_grpc.DevicePluginStub:
        assert self.channel is not None
        return pb_grpc.DevicePluginStub(self.channel)

    def restart(self) -> Kubelet:
        """Stop, delete every socket in the directory (as the kubelet does), start anew."""
        self.server.stop(0).wait()
        if self.channel:
            self.channel.close()
        for p in list(self.dir.glob("*.sock")):
            p.unlink(missing_ok=True)
        return Kubelet(self.dir)


@pytest.fixture
def node(tmp_path):
    """A kubelet and the plugin serving the example node's GPUs, registered."""
    devices = DeviceSet.from_topology(load("nvlink-bridge-pairs"), "nvlink-bridge-pairs", IDS)
    kubelet = Kubelet(tmp_path)
    plugin = DevicePlugin(devices, str(tmp_path), log=lambda msg: None)
    thread = threading.Thread(target=plugin.run, args=(0.05,), daemon=True)
    thread.start()
    assert wait_for(lambda: kubelet.updates)
    state = {"kubelet": kubelet}
    yield plugin, state
    plugin.stop()
    thread.join(5)
    state["kubelet"].server.stop(0)


def test_registers_after_serving_and_streams_the_full_device_list(node):
    plugin, st = node
    kubelet = st["kubelet"]
    assert kubelet.requests == [example("register-request", pb.RegisterRequest())]
    assert kubelet.options == [example("device-plugin-options", pb.DevicePluginOptions())]
    assert kubelet.updates[0] == example("list-and-watch-response", pb.ListAndWatchResponse())
    # a health change sends the whole list again, GPU3 now unhealthy
    plugin.devices.set_health(IDS[3], "Unhealthy")
    assert wait_for(lambda: len(kubelet.updates) == 2)
    assert [d.health for d in kubelet.updates[1].devices] == ["Healthy"] * 3 + [
        "Unhealthy"] + ["Healthy"] * 4


def test_preferred_allocation_is_the_best_connected_set(node):
    stub = node[1]["kubelet"].plugin()
    got = stub.GetPreferredAllocation(
        example("preferred-allocation-request", pb.PreferredAllocationRequest()))
    assert got == example("preferred-allocation-response", pb.PreferredAllocationResponse())
    got = stub.GetPreferredAllocation(
        example("preferred-allocation-request.must-include", pb.PreferredAllocationRequest()))
    assert list(got.container_responses[0].deviceIDs) == [IDS[6], IDS[7]]   # NVLink pair 6-7
    got = stub.Allocate(example("allocate-request", pb.AllocateRequest()))
    assert got == example("allocate-response", pb.AllocateResponse())
    assert stub.PreStartContainer(pb.PreStartContainerRequest(devices_ids=IDS[:1])) == \
        pb.PreStartContainerResponse()


def test_requests_it_cannot_honour_are_invalid_argument(node):
    plugin, st = node
    stub = st["kubelet"].plugin()

    def code(call, msg):
        with pytest.raises(grpc.RpcError) as err:
            call(msg)
        return err.value.code(), err.value.details()

    req = pb.PreferredAllocationRequest(container_requests=[
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=IDS[:2],
                                               must_include_deviceIDs=[IDS[5]],
                                               allocation_size=2)])
    assert code(stub.GetPreferredAllocation, req) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        f"gpufabric: must_include_deviceIDs not in available_deviceIDs: {IDS[5]}")
    req.container_requests[0].must_include_deviceIDs[:] = []
    req.container_requests[0].allocation_size = 3
    assert code(stub.GetPreferredAllocation, req)[0] == grpc.StatusCode.INVALID_ARGUMENT
    req.container_requests[0].available_deviceIDs.append("GPU-nonexistent")
    assert code(stub.GetPreferredAllocation, req) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "gpufabric: available_deviceIDs: unknown device ID 'GPU-nonexistent'")
    assert code(stub.Allocate, pb.AllocateRequest())[0] == grpc.StatusCode.INVALID_ARGUMENT
    plugin.devices.set_health(IDS[4], "Unhealthy")
    assert code(stub.Allocate, example("allocate-request", pb.AllocateRequest())) == (
        grpc.StatusCode.FAILED_PRECONDITION, f"gpufabric: Allocate: unhealthy devices {IDS[4]}")
    # still serving
    assert stub.GetDevicePluginOptions(pb.Empty()).get_preferred_allocation_available


def test_registers_again_when_the_kubelet_restarts(node):
    plugin, st = node
    st["kubelet"] = fresh = st["kubelet"].restart()     # deletes the plugin's socket too
    # served, registered and streaming again (the restart may delete the plugin's new socket
    # too, if the plugin was quicker than the directory clean-up: then one more round)
    # Register returns to the plugin after the kubelet has dialled back: wait for both
    assert wait_for(lambda: fresh.updates and plugin.registrations >= 2, timeout_s=30)
    assert fresh.requests[0].endpoint == "gpufabric-gpu.sock" and plugin.registrations >= 2
    assert [d.ID for d in fresh.updates[0].devices] == IDS
    got = fresh.plugin().GetPreferredAllocation(
        example("preferred-allocation-request", pb.PreferredAllocationRequest()))
    assert list(got.container_responses[0].deviceIDs) == [IDS[4], IDS[5]]


def test_preferred_allocation_on_a_72_gpu_domain_honours_must_include():
    ds = DeviceSet.from_system("gb200-nvl72", domain=True)     # 18 trays of 4, one domain
    free = list(range(72))
    from gpufabric.scheduler.gpuset import preferred_set, set_key
    got = preferred_set(free, 8, ds.bw, ds.hops, must=[70])
    assert len(got) == 8 and 70 in got
    assert set_key(got, ds.bw, ds.hops)[0] == 900.0       # one NVLink domain: every pair 900


class PendingPods:
    """A CoreV1Api-like fake: the pods bound to this node, not yet running."""

    def __init__(self, pods):
        self.pods = pods
        self.selectors = []

    def list_pod_for_all_namespaces(self, field_selector="", _preload_content=True,
                                    _request_timeout=None):
        import json
        import types
        self.selectors.append(field_selector)
        return types.SimpleNamespace(data=json.dumps({"items": self.pods}).encode())


def pending(uid: str, created: str, index: str) -> dict:
    return {"metadata": {"uid": uid, "creationTimestamp": created,
                         "annotations": {"gpufabric.dev/gpu-index": index}},
            "spec": {"nodeName": "gpu-a100-02"}, "status": {"phase": "Pending"}}


def test_the_gpus_the_extender_chose_are_honoured_oldest_pod_first(tmp_path):
    from gpufabric.k8s.kube import AssignedGPUs
    api = PendingPods([pending("b", "2026-03-02T09:21:07Z", "4-5"),
                       pending("a", "2026-03-02T09:21:05Z", "0-2"),
                       pending("c", "2026-03-02T09:21:01Z", "1-3")])     # 1, 3 not available
    devices = DeviceSet.from_topology(load("nvlink-bridge-pairs"), "nvlink-bridge-pairs", IDS)
    plugin = DevicePlugin(devices, str(tmp_path), log=lambda m: None,
                          hint=AssignedGPUs(api, "gpu-a100-02", IDS))
    plugin.serve()
    try:
        with grpc.insecure_channel(f"unix://{plugin.socket}") as ch:
            stub = pb_grpc.DevicePluginStub(ch)
            req = example("preferred-allocation-request", pb.PreferredAllocationRequest())
            answers = [list(stub.GetPreferredAllocation(req).container_responses[0].deviceIDs)
                       for _ in range(3)]
    finally:
        plugin.stop_server()
    # pod a (0-2, over PCIe, as the extender chose), then pod b; then no pod: the plugin's own
    assert answers == [[IDS[0], IDS[2]], [IDS[4], IDS[5]], [IDS[4], IDS[5]]]
    assert api.selectors[0] == "spec.nodeName=gpu-a100-02,status.phase=Pending"


def serving(tmp_path, devices: DeviceSet):
    """A kubelet and a plugin for ``devices``, registered: (stop, the kubelet's stub)."""
    kubelet = Kubelet(tmp_path)
    plugin = DevicePlugin(devices, str(tmp_path), log=lambda msg: None)
    thread = threading.Thread(target=plugin.run, args=(0.05,), daemon=True)
    thread.start()
    assert wait_for(lambda: kubelet.updates)

    def stop():
        plugin.stop()
        thread.join(5)
        kubelet.server.stop(0)
    return stop, kubelet.plugin()


def preferred(stub, ids: list[str], size: int, must: tuple[int, ...] = (),
              free: tuple[int, ...] | None = None) -> list[int]:
    """GetPreferredAllocation over gRPC with GPU indices: the answer's indices."""
    avail = ids if free is None else [ids[i] for i in free]
    req = pb.PreferredAllocationRequest(container_requests=[
        pb.ContainerPreferredAllocationRequest(
            available_deviceIDs=avail, must_include_deviceIDs=[ids[m] for m in must],
            allocation_size=size)])
    got = stub.GetPreferredAllocation(req).container_responses[0].deviceIDs
    return sorted(ids.index(d) for d in got)


def test_preferred_allocation_takes_the_gpus_with_nics_under_their_switch(tmp_path):
    # HGX H100 with 4 NDR NICs, one under the PCIe switch of GPUs 0, 2, 4, 6: every GPU pair
    # has 450 GB/s over NVSwitch, so the NICs decide (GPUDirect RDMA for each GPU)
    devices = DeviceSet.from_system("hgx-h100-4node-4nic")
    assert devices.nics is not None and devices.nics.shape == (8, 4)
    stop, stub = serving(tmp_path, devices)
    try:
        ids = devices.ids
        assert preferred(stub, ids, 2) == [0, 2]
        assert preferred(stub, ids, 4) == [0, 2, 4, 6]
        assert preferred(stub, ids, 2, must=(1,)) == [0, 1]          # NIC0 for both
        # 1, 3, 5, 6, 7 free: of those only GPU 6 has a NIC under its switch (NIC3)
        assert preferred(stub, ids, 2, free=(1, 3, 5, 6, 7)) == [1, 6]
    finally:
        stop()


def test_preferred_allocation_on_a_real_nvidia_smi_node_with_nics(tmp_path):
    # RTX 6000 Ada workstation: 2 GPUs and 2 NICs per socket, the NICs on their own PCIe
    # switch (NODE to the GPUs: no GPUDirect RDMA anywhere, but NUMA-local)
    m = parse((Path(__file__).parent / "fixtures" / "nvsmi" / "rtx6000ada_4gpu_4nic.txt")
              .read_text())
    devices = DeviceSet.from_topology(from_data(to_system(m, "rtx6000ada"), "rtx6000ada"),
                                      "nvidia-smi")
    assert devices.nics.tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]]
    stop, stub = serving(tmp_path, devices)
    try:
        assert preferred(stub, devices.ids, 2) == [0, 1]
        assert preferred(stub, devices.ids, 2, must=(3,)) == [2, 3]
        assert preferred(stub, devices.ids, 3) == [0, 1, 2]
    finally:
        stop()


def test_two_pods_bound_at_once_never_get_the_same_gpus(tmp_path):
    # the extender bound two pods to the node at once (GPUs 0-1 and 2-3); the kubelet asks for
    # both in parallel and the API server is slow to answer: each pod's GPUs go out once
    from gpufabric.k8s.kube import AssignedGPUs

    class Slow(PendingPods):
        inside, most = 0, 0

        def list_pod_for_all_namespaces(self, **kw):
            self.inside += 1
            self.most = max(self.most, self.inside)
            time.sleep(0.2)                     # long enough for the other call to come in
            self.inside -= 1
            return super().list_pod_for_all_namespaces(**kw)
    api = Slow([pending("a", "2026-03-02T09:21:05Z", "0-1"),
                pending("b", "2026-03-02T09:21:06Z", "2-3")])
    devices = DeviceSet.from_topology(load("nvlink-bridge-pairs"), "nvlink-bridge-pairs", IDS)
    plugin = DevicePlugin(devices, str(tmp_path), log=lambda m: None,
                          hint=AssignedGPUs(api, "gpu-a100-02", IDS))
    plugin.serve()
    req = pb.PreferredAllocationRequest(container_requests=[
        pb.ContainerPreferredAllocationRequest(available_deviceIDs=IDS, allocation_size=2)])
    try:
        with grpc.insecure_channel(f"unix://{plugin.socket}") as ch:
            stub = pb_grpc.DevicePluginStub(ch)
            with futures.ThreadPoolExecutor(2) as pool:
                got = list(pool.map(lambda _: sorted(
                    stub.GetPreferredAllocation(req, timeout=10).container_responses[0]
                    .deviceIDs), range(2)))
    finally:
        plugin.stop_server()
    assert sorted(got) == [sorted(IDS[0:2]), sorted(IDS[2:4])]
    # one at a time: no call reads the pending pods while another is choosing among them
    assert len(api.selectors) == 2 and api.most == 1
