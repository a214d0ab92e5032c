"""NVML (nvidia-ml-py, ``import pynvml``): the GPUs of this machine and how they are connected.

:func:`read` turns NVML's answers into an ``nvidia-smi topo -m`` matrix (NVLink counts per
pair from each link's remote PCI bus ID, PCIe levels from the common ancestor) plus per-GPU
facts (PCI bus ID, NUMA node, PCIe generation and width, MIG mode). Every query degrades to
"not available" instead of failing: no library, no driver, no GPU, a query the GPU lacks.
The k8s device plugin (:mod:`gpufabric.k8s.devices`) and ``gpufabric discover`` share it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufabric import catalog
from gpufabric.errors import InputError
from gpufabric.topology.nvsmi import TopoMatrix

#: NVML topology levels (nvmlGpuTopologyLevel_t) -> nvidia-smi path class.
NVML_LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


@dataclass
class NvmlGpu:
    """One GPU as NVML reports it; None where NVML does not say."""

    index: int
    uuid: str
    name: str
    bus_id: str
    numa: int
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None
    mig: bool | None = None
    nvlinks: dict[str, int] = field(default_factory=dict)


@dataclass
class NvmlReport:
    """What NVML says about the machine: the matrix, the GPUs, the catalog model ("" unknown)."""

    matrix: TopoMatrix
    gpus: list[NvmlGpu]
    model: str
    name: str
    driver: str = ""


def init() -> Any:
    """The initialised ``pynvml`` module, or None (not installed, no driver, no GPU)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def why_not() -> str:
    """Why :func:`init` gave None, in one line."""
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py is not installed (pip install 'gpufabric[k8s]')"
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return f"nvmlInit failed: {str(exc) or type(exc).__name__}"
    shutdown(pynvml)
    return "no GPU"


def shutdown(nv: Any) -> None:
    try:
        nv.nvmlShutdown()
    except Exception:
        pass


def text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _ask(fn: Any, *args: Any) -> Any:
    """``fn(*args)``, or None when NVML does not answer."""
    try:
        return fn(*args)
    except Exception:
        return None


def sysfs_numa(bus: str, root: str | Path = "/") -> int:
    """The NUMA node Linux gives the PCI device ``bus`` (0 when it says none or -1)."""
    path = Path(root) / "sys/bus/pci/devices" / bus.lower()[-12:] / "numa_node"
    try:
        return max(0, int(path.read_text().strip()))
    except (OSError, ValueError):
        return 0


def _numa(nv: Any, h: Any, bus: str, root: str | Path) -> int:
    got = _ask(getattr(nv, "nvmlDeviceGetNumaNodeId", None), h)
    return int(got) if got is not None else sysfs_numa(bus, root)


def _int_or_none(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) else None


def read(nv: Any, root: str | Path = "/") -> NvmlReport | None:
    """What an initialised NVML says, or None when it has no GPU or fails to answer."""
    try:
        n = nv.nvmlDeviceGetCount()
        if n == 0:
            return None
        hs = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        uuids = [text(nv.nvmlDeviceGetUUID(h)) for h in hs]
        buses = [text(nv.nvmlDeviceGetPciInfo(h).busId).lower() for h in hs]
        name = text(nv.nvmlDeviceGetName(hs[0]))
        links: list[dict[str, int]] = []
        for h in hs:
            cnt: dict[str, int] = {}
            for ln in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    if nv.nvmlDeviceGetNvLinkState(h, ln):
                        rb = text(nv.nvmlDeviceGetNvLinkRemotePciInfo(h, ln).busId).lower()
                        cnt[rb] = cnt.get(rb, 0) + 1
                except Exception:
                    break
            links.append(cnt)
        paths = [["X"] * n for _ in range(n)]
        for i in range(n):
            for j in range(n):
                if i == j:
                    continue
                direct = links[i].get(buses[j], 0)
                to_switch_i = sum(c for b, c in links[i].items() if b not in buses)
                to_switch_j = sum(c for b, c in links[j].items() if b not in buses)
                if direct:
                    paths[i][j] = f"NV{direct}"
                elif to_switch_i and to_switch_j:
                    paths[i][j] = f"NV{min(to_switch_i, to_switch_j)}"
                else:
                    try:
                        lvl = int(nv.nvmlDeviceGetTopologyCommonAncestor(hs[i], hs[j]))
                    except Exception:
                        lvl = 50
                    paths[i][j] = NVML_LEVELS.get(lvl, "SYS")
        numa = [_numa(nv, h, b, root) for h, b in zip(hs, buses, strict=True)]
        gpus = []
        for i, h in enumerate(hs):
            mig = _ask(getattr(nv, "nvmlDeviceGetMigMode", None), h)
            gpus.append(NvmlGpu(
                i, uuids[i], text(nv.nvmlDeviceGetName(h)), buses[i], numa[i],
                _int_or_none(_ask(getattr(nv, "nvmlDeviceGetCurrPcieLinkGeneration", None), h)),
                _int_or_none(_ask(getattr(nv, "nvmlDeviceGetCurrPcieLinkWidth", None), h)),
                _int_or_none(_ask(getattr(nv, "nvmlDeviceGetMaxPcieLinkGeneration", None), h)),
                _int_or_none(_ask(getattr(nv, "nvmlDeviceGetMaxPcieLinkWidth", None), h)),
                bool(mig[0]) if isinstance(mig, (list, tuple)) and mig else None,
                links[i]))
        try:
            model = catalog.gpu(name).name
        except InputError:
            model = ""
        driver = _ask(getattr(nv, "nvmlSystemGetDriverVersion", None))
        m = TopoMatrix([f"GPU{i}" for i in range(n)], paths, numa_affinity=[str(v) for v in numa])
        return NvmlReport(m, gpus, model, name, text(driver) if driver is not None else "")
    except Exception:
        return None
