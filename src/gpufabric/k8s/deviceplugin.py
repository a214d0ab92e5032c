"""A kubelet device plugin (API v1beta1) that hands out the best-connected GPUs.

:class:`DevicePlugin` serves the ``v1beta1.DevicePlugin`` gRPC service on a unix socket in the
kubelet's device-plugins directory and registers with the kubelet's ``v1beta1.Registration``
service on ``kubelet.sock``, in that order (the kubelet dials back during ``Register``):

- ``GetDevicePluginOptions``: ``get_preferred_allocation_available`` is set, no pre-start hook;
- ``ListAndWatch``: the full device list at once and again after every health change; the stream
  stays open until the plugin stops;
- ``GetPreferredAllocation``: for each container, ``allocation_size`` IDs from
  ``available_deviceIDs`` including every ``must_include_deviceIDs`` entry: the GPUs the
  extender chose for a pending pod when a hint (``--kubeconfig``) finds them, else chosen by
  :func:`gpufabric.scheduler.gpuset.preferred_set` on the node's topology (bounded time);
- ``Allocate``: ``NVIDIA_VISIBLE_DEVICES`` with the IDs, one response per container request;
  an unknown or unhealthy device fails the call;
- ``PreStartContainer``: nothing to do.

Requests the plugin cannot honour get gRPC ``INVALID_ARGUMENT`` (unknown IDs, must-include
devices that are not available, a size of 0 or more than is available, an empty request) or
``FAILED_PRECONDITION`` (allocating an unhealthy device); never a crash.

:meth:`DevicePlugin.run` keeps it registered: it re-serves and re-registers when its socket
disappears or ``kubelet.sock`` is re-created (a kubelet restart deletes every socket in the
directory), retrying until the kubelet answers.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from gpufabric.k8s.api import deviceplugin_pb2 as pb
from gpufabric.k8s.api import deviceplugin_pb2_grpc as pb_grpc
from gpufabric.k8s.devices import HEALTHY, DeviceSet
from gpufabric.scheduler.gpuset import preferred_set

VERSION = "v1beta1"
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins/"
KUBELET_SOCKET = "kubelet.sock"
RESOURCE = "nvidia.com/gpu"
ENDPOINT = "gpufabric-gpu.sock"


class DevicePluginService(pb_grpc.DevicePluginServicer):
    """The five RPCs over a :class:`DeviceSet`.

    ``hint(available, must, size)`` may name the devices the scheduler chose (see
    :class:`gpufabric.k8s.kube.AssignedGPUs`); None lets the topology model choose.
    """

    def __init__(self, devices: DeviceSet, stop: threading.Event,
                 hint: Callable[[list[str], list[str], int], list[str] | None] | None = None):
        self.devices = devices
        self.stop = stop
        self.hint = hint

    @staticmethod
    def options() -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(pre_start_required=False,
                                      get_preferred_allocation_available=True)

    def GetDevicePluginOptions(self, request: pb.Empty, context: Any  # noqa: N802
                               ) -> pb.DevicePluginOptions:
        return self.options()

    def _list(self) -> pb.ListAndWatchResponse:
        d = self.devices
        return pb.ListAndWatchResponse(devices=[
            pb.Device(ID=i, health=d.health[i],
                      topology=pb.TopologyInfo(nodes=[pb.NUMANode(ID=d.numa[k])]))
            for k, i in enumerate(d.ids)])

    def ListAndWatch(self, request: pb.Empty, context: Any  # noqa: N802
                     ) -> Iterator[pb.ListAndWatchResponse]:
        d = self.devices
        with d.changed:
            seen = d.version
            first = self._list()
        yield first
        while not self.stop.is_set() and context.is_active():
            with d.changed:
                if d.version == seen:
                    d.changed.wait(timeout=0.5)
                if d.version == seen:
                    continue
                seen = d.version
                msg = self._list()
            yield msg

    def _indices(self, ids: Any, what: str, context: Any) -> list[int]:
        out: list[int] = []
        for i in ids:
            k = self.devices.index.get(i)
            if k is None:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"gpufabric: {what}: unknown device ID {i!r}")
                raise AssertionError("abort returns only in fakes")
            out.append(k)
        return out

    def GetPreferredAllocation(self, request: pb.PreferredAllocationRequest,  # noqa: N802
                               context: Any) -> pb.PreferredAllocationResponse:
        out = []
        if not request.container_requests:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          "gpufabric: GetPreferredAllocation: no container_requests")
        for c in request.container_requests:
            free = self._indices(c.available_deviceIDs, "available_deviceIDs", context)
            must = self._indices(c.must_include_deviceIDs, "must_include_deviceIDs", context)
            missing = [self.devices.ids[m] for m in must if m not in free]
            if missing:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              "gpufabric: must_include_deviceIDs not in available_deviceIDs: "
                              + ", ".join(missing))
            size = c.allocation_size
            if not 1 <= size <= len(set(free)) or len(set(must)) > size:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"gpufabric: allocation_size {size} with {len(set(free))} "
                              f"available and {len(set(must))} must-include devices")
            named = self.hint(list(c.available_deviceIDs), list(c.must_include_deviceIDs),
                              size) if self.hint else None
            if named is None:
                chosen = preferred_set(free, size, self.devices.bw, self.devices.hops, must,
                                       nics=self.devices.nics)
                named = [self.devices.ids[k] for k in chosen]
            out.append(pb.ContainerPreferredAllocationResponse(deviceIDs=named))
        return pb.PreferredAllocationResponse(container_responses=out)

    def Allocate(self, request: pb.AllocateRequest, context: Any  # noqa: N802
                 ) -> pb.AllocateResponse:
        if not request.container_requests:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          "gpufabric: Allocate: no container_requests")
        out = []
        for c in request.container_requests:
            if not c.devices_ids:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              "gpufabric: Allocate: a container request with no devices_ids")
            self._indices(c.devices_ids, "devices_ids", context)
            sick = [i for i in c.devices_ids if self.devices.health[i] != HEALTHY]
            if sick:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                              "gpufabric: Allocate: unhealthy devices " + ", ".join(sick))
            out.append(pb.ContainerAllocateResponse(
                envs={"NVIDIA_VISIBLE_DEVICES": ",".join(c.devices_ids)}))
        allocated = getattr(self.hint, "allocated", None)
        if allocated is not None:       # the side channel's node lock: the next pod may bind
            allocated()
        return pb.AllocateResponse(container_responses=out)

    def PreStartContainer(self, request: pb.PreStartContainerRequest,  # noqa: N802
                          context: Any) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()


class DevicePlugin:
    """Serve, register, and stay registered across kubelet restarts.

    Parameters
    ----------
    devices : DeviceSet
    socket_dir : str
        The kubelet's device-plugins directory (holds ``kubelet.sock``).
    resource : str
        The extended resource name to register (``vendor-domain/type``).
    endpoint : str
        The plugin's socket file name in ``socket_dir``.
    """

    def __init__(self, devices: DeviceSet, socket_dir: str = DEVICE_PLUGIN_DIR,
                 resource: str = RESOURCE, endpoint: str = ENDPOINT, log: Any = None,
                 hint: Callable[[list[str], list[str], int], list[str] | None] | None = None):
        if "/" not in resource or resource.startswith(("kubernetes.io/", "/")):
            raise ValueError(f"resource {resource!r} is not an extended resource name "
                             "(vendor-domain/type)")
        self.devices = devices
        self.hint = hint
        self.dir = Path(socket_dir)
        self.resource = resource
        self.endpoint = endpoint
        self.stop_event = threading.Event()
        self.server: grpc.Server | None = None
        self.registrations = 0
        self.log = log or (lambda msg: print(f"gpufabric device-plugin: {msg}", file=sys.stderr))

    @property
    def socket(self) -> Path:
        return self.dir / self.endpoint

    def serve(self) -> None:
        """Start the gRPC server on the plugin socket (a stale file is removed first)."""
        self.stop_server()
        self.socket.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        pb_grpc.add_DevicePluginServicer_to_server(
            DevicePluginService(self.devices, self.stop_event, self.hint), server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self.server = server

    def stop_server(self) -> None:
        if self.server is not None:
            # wait: gRPC removes the socket file when the old listener closes, which must not
            # happen after the new server has bound the same path
            self.server.stop(grace=0.2).wait(5)
            self.server = None

    def register(self, timeout_s: float = 10.0) -> None:
        """Call ``Register`` on the kubelet; raises grpc.RpcError if it does not answer."""
        with grpc.insecure_channel(f"unix://{self.dir / KUBELET_SOCKET}") as ch:
            pb_grpc.RegistrationStub(ch).Register(
                pb.RegisterRequest(version=VERSION, endpoint=self.endpoint,
                                   resource_name=self.resource,
                                   options=DevicePluginService.options()),
                timeout=timeout_s)
        self.registrations += 1

    def _kubelet_id(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.dir / KUBELET_SOCKET)
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns)

    def run(self, poll_s: float = 0.5) -> None:
        """Serve and register until :meth:`stop`; start over after a kubelet restart."""
        while not self.stop_event.is_set():
            self.serve()
            kubelet = None
            delay = poll_s
            told = False
            while not self.stop_event.is_set():
                kubelet = self._kubelet_id()
                if kubelet is None and not told:
                    self.log(f"serving {self.socket}; waiting for {self.dir / KUBELET_SOCKET}")
                    told = True
                if not self.socket.exists():       # deleted under us: serve again first
                    self.serve()
                if kubelet is not None:
                    try:
                        self.register()
                        self.log(f"registered {self.resource} ({len(self.devices.ids)} devices "
                                 f"from {self.devices.source}) at {self.socket}")
                        break
                    except grpc.RpcError as exc:
                        self.log(f"kubelet did not accept the registration: {exc.code()}")
                self.stop_event.wait(delay)
                delay = min(5.0, delay * 2)
            while not self.stop_event.is_set():
                self.stop_event.wait(poll_s)
                if not self.socket.exists() or self._kubelet_id() != kubelet:
                    self.log("kubelet restarted (socket gone or kubelet.sock re-created); "
                             "registering again")
                    break
        self.stop_server()
        self.socket.unlink(missing_ok=True)

    def start(self) -> threading.Thread:
        """:meth:`run` in a background thread."""
        t = threading.Thread(target=self.run, name="gpufabric-device-plugin", daemon=True)
        t.start()
        return t

    def stop(self) -> None:
        self.stop_event.set()
        with self.devices.changed:
            self.devices.changed.notify_all()


def wait_for(cond: Any, timeout_s: float = 10.0, step_s: float = 0.02) -> bool:
    """Poll ``cond()`` until true or ``timeout_s`` passes (for tests and the CLI)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(step_s)
    return bool(cond())
