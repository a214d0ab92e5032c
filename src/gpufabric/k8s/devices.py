"""The GPUs a device plugin offers: from NVML when the node has GPUs, else from a system model.

Either way the result is a :class:`DeviceSet`: device IDs, NUMA nodes, health, and the pair
tables (bottleneck GB/s, links crossed) of :func:`gpufabric.scheduler.nodetopo.tables` on the
node's :class:`~gpufabric.topology.model.Topology`. From NVML (read by
:mod:`gpufabric.measure.nvml`) the topology is built the way ``gpufabric import nvidia-smi``
builds it: an ``nvidia-smi topo -m`` matrix (NVLink counts per
pair from each link's remote PCI bus ID, PCIe levels from the common ancestor) handed to
:func:`gpufabric.topology.nvsmi.to_system`. NVML queries degrade to "not available" (None)
instead of failing: no library, no driver, no GPU.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpufabric.errors import InputError
from gpufabric.measure import nvml
from gpufabric.scheduler.nodetopo import tables
from gpufabric.topology.paths import domain_gpus, gpu_nic_levels
from gpufabric.topology.build import from_data, load
from gpufabric.topology.model import Topology
from gpufabric.topology.nvsmi import TopoMatrix, to_system

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
#: XIDs NVIDIA's plugin treats as application errors, not device faults (k8s-device-plugin
#: v0.20.0 internal/rm/health.go): 13 graphics engine exception, 31 memory page fault, 43 GPU
#: stopped processing, 45 preemptive cleanup, 68 video processor exception, 109 context switch
#: timeout.
IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
NVML_LEVELS = nvml.NVML_LEVELS   # NVML topology level -> nvidia-smi path class


@dataclass
class DeviceSet:
    """Devices of one node, in GPU index order, and how they are connected.

    Examples
    --------
    >>> ds = DeviceSet.from_system("dgx-a100")
    >>> len(ds.ids), ds.ids[0], ds.numa[0], ds.numa[7]
    (8, 'gpufabric-dgx-a100-gpu0', 3, 5)
    """

    ids: list[str]
    numa: list[int]
    bw: np.ndarray
    hops: np.ndarray
    source: str
    health: dict[str, str] = field(default_factory=dict)
    version: int = 0
    #: GPU-NIC levels (:func:`gpufabric.topology.paths.gpu_nic_levels`); None without NICs
    nics: np.ndarray | None = None
    changed: threading.Condition = field(default_factory=threading.Condition)

    def __post_init__(self) -> None:
        for i in self.ids:
            self.health.setdefault(i, HEALTHY)
        self.index = {d: k for k, d in enumerate(self.ids)}

    @classmethod
    def from_topology(cls, t: Topology, source: str, ids: list[str] | None = None,
                      domain: bool = False) -> DeviceSet:
        """The GPUs of the first node, or with ``domain`` of its whole NVLink domain (all 72
        GPUs of a GB200 NVL72 rack, whose compute trays are separate servers)."""
        gpus = domain_gpus(t, 0, domain)
        if not gpus:
            raise InputError("the system has no GPUs on its first node", file=source)
        if ids is None:
            stem = re.sub(r"[^A-Za-z0-9-]", "-", t.name or "system")[:40].strip("-")
            ids = [f"gpufabric-{stem}-gpu{k}" for k in range(len(gpus))]
        bw, hops = tables(t, 0, domain)
        nics = gpu_nic_levels(t, 0, domain)
        return cls(ids, [max(0, d.numa) for d in gpus], bw, hops, source,
                   nics=nics if nics.shape[1] else None)

    @classmethod
    def from_system(cls, system: str, domain: bool = False) -> DeviceSet:
        """A preset, spec file or inline spec (``gpufabric systems``)."""
        return cls.from_topology(load(system), system, domain=domain)

    def set_health(self, device_id: str, health: str) -> bool:
        """Change one device's health; wakes ListAndWatch streams. False if unchanged."""
        if device_id not in self.health:
            raise KeyError(device_id)
        if health not in (HEALTHY, UNHEALTHY):
            raise ValueError(f"health must be {HEALTHY} or {UNHEALTHY}")
        with self.changed:
            if self.health[device_id] == health:
                return False
            self.health[device_id] = health
            self.version += 1
            self.changed.notify_all()
        return True


# -- NVML (gpufabric.measure.nvml reads it; ``_nvml`` stays a name tests can replace) ------
_nvml = nvml.init
_text = nvml.text


def nvml_matrix() -> tuple[TopoMatrix, list[str], str] | None:
    """(topology matrix, GPU UUIDs, catalog GPU name or "") from NVML, or None if not available.
    """
    nv = _nvml()
    if nv is None:
        return None
    try:
        got = nvml.read(nv)
    finally:
        nvml.shutdown(nv)
    if got is None:
        return None
    return got.matrix, [g.uuid for g in got.gpus], got.model


def from_nvml() -> DeviceSet | None:
    """The node's GPUs from NVML, or None when NVML or GPUs are not available."""
    got = nvml_matrix()
    if got is None:
        return None
    m, uuids, model = got
    system = to_system(m, "nvml", model)
    return DeviceSet.from_topology(from_data(system, "nvml", "NVML"), "NVML", uuids)


def watch_health(devices: DeviceSet, stop: threading.Event, timeout_ms: int = 1000,
                 quiet_s: float = 300.0, clock: Callable[[], float] = time.monotonic) -> bool:
    """Mark devices Unhealthy on NVML critical XID events, and Healthy again once NVML reports
    them healthy, until ``stop``; False if NVML cannot deliver events (no NVML, or a driver
    without event support): health then stays as it is.

    Application XIDs (:data:`IGNORED_XIDS`) are ignored, as NVIDIA's plugin does. A device
    this marked Unhealthy is Healthy again after ``quiet_s`` seconds without another critical
    XID when NVML answers for it (:func:`nvml_reports_healthy`: found by its UUID, its PCI
    info readable, no page retirement or row remapping pending or failed); otherwise it is
    checked again after each wait. NVIDIA's plugin keeps such a GPU Unhealthy until it
    restarts (NVIDIA/k8s-device-plugin #234, #1014).
    """
    nv = _nvml()
    if nv is None:
        return False
    try:
        es = nv.nvmlEventSetCreate()
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            u = _text(nv.nvmlDeviceGetUUID(h))
            if u in devices.index:
                nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, es)
    except Exception:
        return False
    last_xid: dict[str, float] = {}        # devices this marked Unhealthy: when, last
    try:
        while not stop.is_set():
            try:
                ev = nv.nvmlEventSetWait(es, timeout_ms)
            except Exception:        # NVML_ERROR_TIMEOUT: nothing happened
                ev = None
            if ev is not None and int(getattr(ev, "eventData", 0)) not in IGNORED_XIDS:
                uuid = _text(nv.nvmlDeviceGetUUID(ev.device))
                if uuid in devices.index:
                    devices.set_health(uuid, UNHEALTHY)
                    last_xid[uuid] = clock()
            now = clock()
            for uuid, at in list(last_xid.items()):
                if now - at >= quiet_s and nvml_reports_healthy(nv, uuid):
                    devices.set_health(uuid, HEALTHY)
                    del last_xid[uuid]
    finally:
        try:
            nv.nvmlEventSetFree(es)
            nv.nvmlShutdown()
        except Exception:
            pass
    return True


def nvml_reports_healthy(nv: Any, uuid: str) -> bool:
    """Whether NVML finds the GPU ``uuid`` and reports nothing that needs a reset.

    Found by UUID with its PCI info readable (a GPU that fell off the bus is not), no retired
    page pending (``nvmlDeviceGetRetiredPagesPendingStatus``, before Ampere) and no row
    remapping pending or failed (``nvmlDeviceGetRemappedRows``, Ampere on). A query the GPU
    does not support says nothing either way.
    """
    try:
        h = nv.nvmlDeviceGetHandleByUUID(uuid)
        nv.nvmlDeviceGetPciInfo(h)
    except Exception:
        return False
    try:
        if int(nv.nvmlDeviceGetRetiredPagesPendingStatus(h)):
            return False
    except Exception:
        pass
    try:
        _, _, pending, failed = nv.nvmlDeviceGetRemappedRows(h)
        if pending or failed:
            return False
    except Exception:
        pass
    return True
