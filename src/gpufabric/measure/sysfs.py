"""The PCI tree, the network interfaces and the InfiniBand ports of this machine (Linux sysfs).

Read under a root path (``/`` for this machine, or a recorded tree):

* ``sys/bus/pci/devices/*``: each function's ``class``, ``vendor``, ``device``, ``numa_node``,
  ``current_link_speed``/``current_link_width``, ``max_link_speed``/``max_link_width``, and its
  place in the tree (the directory the link points to: root bus, then bridges);
* ``sys/class/net/*``: interfaces backed by a device (virtual ones such as ``lo`` are left
  out), their ``speed`` (Mb/s; -1 unknown), the PCI function under them and its NUMA node;
* ``sys/class/infiniband/*``: RDMA devices, their PCI function and ``ports/*/rate``.

Examples
--------
>>> pcie_gen("16.0 GT/s PCIe"), pcie_gen("8 GT/s"), pcie_gen("Unknown")
(4, 3, None)
>>> rate_Gbps("400 Gb/sec (4X NDR)")
400.0
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from gpufabric.measure.cpu import read_attr

#: PCI function address, ``0000:17:00.0``.
BDF = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
#: Transfer rate per lane (GT/s) -> PCIe generation.
GT_PER_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
#: PCI class codes (the top 16 bits of ``class``) worth a name.
CLASS_NAMES = {0x0200: "ethernet", 0x0207: "infiniband", 0x0280: "network", 0x0300: "vga",
               0x0302: "3d", 0x0108: "nvme", 0x0106: "sata", 0x0604: "bridge",
               0x0600: "host-bridge", 0x1200: "accelerator", 0x0880: "system", 0x0100: "scsi",
               0x0180: "storage"}
#: Most PCI functions read (a large server has a few hundred).
MAX_PCI = 4096


def pcie_gen(speed: str | None) -> int | None:
    """PCIe generation of a ``*_link_speed`` text, or None when it names none."""
    got = re.match(r"\s*([\d.]+)\s*GT/s", speed or "")
    return GT_PER_GEN.get(float(got.group(1))) if got else None


def rate_Gbps(rate: str | None) -> float | None:
    """Gb/s of an InfiniBand port ``rate`` (``400 Gb/sec (4X NDR)``), or None."""
    got = re.match(r"\s*([\d.]+)\s*Gb/sec", rate or "")
    return float(got.group(1)) if got else None


def _int(text: str | None, base: int = 10) -> int | None:
    try:
        return int(text, base) if text is not None else None
    except ValueError:
        return None


@dataclass
class PciDevice:
    """One PCI function; link fields None where sysfs does not say (virtual devices)."""

    address: str
    class_code: int
    vendor: str
    device: str
    numa: int
    #: bridges above it, nearest the root first (root port first)
    parents: list[str] = field(default_factory=list)
    link_gen: int | None = None
    link_width: int | None = None
    max_gen: int | None = None
    max_width: int | None = None
    #: the root complex it hangs off (``pci0000:00``)
    host_bridge: str = ""

    @property
    def kind(self) -> str:
        return CLASS_NAMES.get(self.class_code >> 8, f"class-{self.class_code >> 8:04x}")

    @property
    def is_bridge(self) -> bool:
        return self.class_code >> 8 == 0x0604


def _pci_chain(real: Path) -> list[str]:
    """The PCI addresses on the way from the root bus down to ``real``, itself last."""
    return [p for p in real.parts if BDF.match(p)]


def pci_devices(root: str | Path = "/") -> dict[str, PciDevice]:
    """Every PCI function under ``root``, by address; {} without a PCI bus in sysfs."""
    base = Path(root) / "sys/bus/pci/devices"
    try:
        entries = sorted(os.listdir(base))[:MAX_PCI]
    except OSError:
        return {}
    out: dict[str, PciDevice] = {}
    for name in entries:
        if not BDF.match(name):
            continue
        d = base / name
        real = Path(os.path.realpath(d))
        chain = _pci_chain(real)
        host = next((p for p in real.parts if p.startswith("pci")), "")
        numa = _int(read_attr(d / "numa_node"))
        w = _int(read_attr(d / "current_link_width"))
        mw = _int(read_attr(d / "max_link_width"))
        out[name] = PciDevice(
            name, _int(read_attr(d / "class"), 16) or 0, read_attr(d / "vendor") or "",
            read_attr(d / "device") or "", -1 if numa is None else numa,
            chain[:-1] if chain and chain[-1] == name else [],
            pcie_gen(read_attr(d / "current_link_speed")), w or None,
            pcie_gen(read_attr(d / "max_link_speed")), mw or None, host)
    return out


def level(a: PciDevice, b: PciDevice) -> str:
    """The ``nvidia-smi topo -m`` path type between two PCI functions, as nvidia-smi derives
    it from the PCI tree: PIX (one bridge between them), PXB (several bridges, no host
    bridge), PHB (through one host bridge), NODE (same NUMA node), SYS (across sockets)."""
    common = 0
    for x, y in zip(a.parents, b.parents, strict=False):
        if x != y:
            break
        common += 1
    if common and a.host_bridge == b.host_bridge:
        below = max(len(a.parents), len(b.parents)) - common
        return "PIX" if below <= 1 and common > 1 else "PXB" if common > 1 else "PHB"
    if a.host_bridge and a.host_bridge == b.host_bridge:
        return "PHB"
    return "NODE" if a.numa == b.numa else "SYS"


def link_of(dev: PciDevice, pci: dict[str, PciDevice]) -> tuple[int | None, int | None]:
    """(generation, lanes) the link above ``dev`` can train to: the lower of the device's and
    its port's maximum; the current values when no maximum is known."""
    port = pci.get(dev.parents[-1]) if dev.parents else None
    gens = [g for g in (dev.max_gen, port.max_gen if port else None) if g]
    widths = [w for w in (dev.max_width, port.max_width if port else None) if w]
    return (min(gens) if gens else dev.link_gen, min(widths) if widths else dev.link_width)


def switches_above(dev: PciDevice, pci: dict[str, PciDevice]) -> list[str]:
    """The PCIe switches between the root port and ``dev``, each named by its upstream port.

    Below a root port, bridges come in pairs: a switch's upstream port, then one of its
    downstream ports; the upstream ports are the switches.
    """
    bridges = [b for b in dev.parents if b in pci and pci[b].is_bridge]
    return bridges[1::2]


@dataclass
class Nic:
    """A network interface backed by a device; ``rdma`` names its InfiniBand device if any."""

    name: str
    pci: str
    numa: int
    speed_Mbps: int | None
    rdma: str = ""
    rate_Gbps: float | None = None
    link_layer: str = ""


def _ib_devices(root: Path) -> dict[str, tuple[str, float | None, str]]:
    """PCI address -> (RDMA device, fastest port rate Gb/s, link layer), from
    /sys/class/infiniband."""
    base = root / "sys/class/infiniband"
    out: dict[str, tuple[str, float | None, str]] = {}
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return out
    for ib in names:
        chain = _pci_chain(Path(os.path.realpath(base / ib / "device")))
        rates, layers = [], set()
        try:
            ports = sorted(os.listdir(base / ib / "ports"))
        except OSError:
            ports = []
        for p in ports:
            r = rate_Gbps(read_attr(base / ib / "ports" / p / "rate"))
            if r is not None:
                rates.append(r)
            layer = read_attr(base / ib / "ports" / p / "link_layer")
            if layer:
                layers.add(layer)
        if chain:
            out[chain[-1]] = (ib, max(rates, default=None), "/".join(sorted(layers)))
    return out


def nics(root: str | Path = "/", pci: dict[str, PciDevice] | None = None) -> list[Nic]:
    """Network interfaces backed by a PCI function (virtual ones left out), by name; RDMA
    devices with no interface of their own (InfiniBand HCAs) too."""
    base = Path(root)
    pci = pci_devices(root) if pci is None else pci
    ib = _ib_devices(base)
    out: list[Nic] = []
    seen: set[str] = set()
    try:
        names = sorted(os.listdir(base / "sys/class/net"))
    except OSError:
        names = []
    for name in names:
        d = base / "sys/class/net" / name
        chain = _pci_chain(Path(os.path.realpath(d)))
        if not chain:             # lo, bridges, tunnels: no device under them
            continue
        addr = chain[-1]
        dev = pci.get(addr)
        speed = _int(read_attr(d / "speed"))
        rdma = ib.get(addr)
        out.append(Nic(name, addr, dev.numa if dev else -1,
                       speed if speed is not None and speed > 0 else None,
                       rdma[0] if rdma else "", rdma[1] if rdma else None,
                       rdma[2] if rdma else ""))
        seen.add(addr)
    for addr, (dev_name, rate, layer) in sorted(ib.items()):
        if addr not in seen:
            dev = pci.get(addr)
            out.append(Nic(dev_name, addr, dev.numa if dev else -1, None, dev_name, rate, layer))
    return out
