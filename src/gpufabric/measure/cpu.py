"""The CPUs of this machine from Linux sysfs and /proc/cpuinfo: sockets, cores, NUMA nodes.

The files read are the ones ``lscpu`` reads: ``/sys/devices/system/cpu/online``, each online
CPU's ``topology/physical_package_id`` and ``topology/core_id``, ``/sys/devices/system/node/
node*/cpulist``, and the ``model name`` of ``/proc/cpuinfo``. The model name is matched to the
catalog (``gpufabric catalog cpus``) when the catalog has it.

Examples
--------
>>> parse_cpulist("0-3,8,10-11")
[0, 1, 2, 3, 8, 10, 11]
>>> catalog_cpu("AMD EPYC 7763 64-Core Processor"), catalog_cpu("AMD EPYC")
('EPYC-7763', '')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from gpufabric import catalog

#: Most CPUs a cpulist may name (Linux's NR_CPUS is at most 8192): a longer list is not read.
MAX_CPUS = 8192


def read_attr(path: Path, limit: int = 4096) -> str | None:
    """The stripped text of a small sysfs/procfs file, or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace").strip()
    except OSError:
        return None


def parse_cpulist(text: str) -> list[int]:
    """The CPU numbers of a Linux cpulist (``0-3,8``); [] when it is not one."""
    out: list[int] = []
    for part in filter(None, text.strip().split(",")):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return []
        a, b = int(lo), int(hi or lo)
        if b < a or b >= MAX_CPUS:
            return []
        out.extend(range(a, b + 1))
    return out


def _tokens(name: str) -> set[str]:
    return {w for w in re.split(r"[^a-z0-9+]+", name.lower()) if w}


def catalog_cpu(model_name: str) -> str:
    """The catalog CPU a ``model name`` line names, or "" when the catalog has none.

    A catalog CPU fits when its name or an alias is the model name, or when every word of its
    name that holds a digit (``7763``, ``8480+``, ``6226r``) is a word of the model name and so
    is its vendor's brand word (``EPYC``, ``Xeon``, ``Grace``).
    """
    words = _tokens(model_name.replace("(R)", " ").replace("(TM)", " "))
    if not words:
        return ""
    table = catalog.table("cpu")
    hit = table.get(model_name.strip().lower())
    if hit is not None:
        return hit.name
    for c in {id(c): c for c in table.values()}.values():
        for name in (c.name, *c.aliases):
            toks = _tokens(name)
            numbered = {w for w in toks if any(ch.isdigit() for ch in w)}
            plain = toks - numbered - {"amd", "intel", "nvidia"}
            if numbered and numbered <= words and plain <= words:
                return c.name
    return ""


@dataclass
class CpuInfo:
    """Sockets, cores, threads and NUMA nodes; ``model`` is the catalog name or ""."""

    model_name: str
    model: str
    sockets: int
    cores: int
    threads: int
    #: NUMA node -> its CPUs
    numa_nodes: dict[int, list[int]] = field(default_factory=dict)
    #: socket (physical package id) -> its NUMA nodes, in order
    socket_numa: dict[int, list[int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def read(root: str | Path = "/") -> CpuInfo | None:
    """The CPUs under ``root`` (``/`` is this machine), or None when nothing is readable."""
    base = Path(root)
    cpu_dir = base / "sys/devices/system/cpu"
    online = read_attr(cpu_dir / "online")
    cpus = parse_cpulist(online) if online else []
    notes: list[str] = []
    model_name = ""
    info = read_attr(base / "proc/cpuinfo", 1 << 20)
    if info:
        got = re.search(r"^model name\s*:\s*(.*)$", info, re.M)
        model_name = got.group(1).strip() if got else ""
        if not cpus:
            cpus = [int(v) for v in re.findall(r"^processor\s*:\s*(\d+)", info, re.M)]
    if not cpus:
        return None
    package: dict[int, int] = {}
    cores: set[tuple[int, int]] = set()
    for c in cpus:
        topo = cpu_dir / f"cpu{c}" / "topology"
        pkg = read_attr(topo / "physical_package_id")
        core = read_attr(topo / "core_id")
        package[c] = int(pkg) if pkg and pkg.lstrip("-").isdigit() else 0
        cores.add((package[c], int(core) if core and core.isdigit() else c))
    numa: dict[int, list[int]] = {}
    node_dir = base / "sys/devices/system/node"
    try:
        nodes = sorted(int(p.name[4:]) for p in node_dir.glob("node*") if p.name[4:].isdigit())
    except OSError:
        nodes = []
    for k in nodes:
        listed = read_attr(node_dir / f"node{k}" / "cpulist")
        numa[k] = [c for c in parse_cpulist(listed or "") if c in package]
    if not numa:
        numa = {0: list(cpus)}
        notes.append("no NUMA nodes in sysfs: all CPUs taken as NUMA node 0")
    socket_numa: dict[int, list[int]] = {}
    for k, members in sorted(numa.items()):
        if members:
            socket_numa.setdefault(package[members[0]], []).append(k)
    for s in sorted(set(package.values())):
        socket_numa.setdefault(s, [])
    model = catalog_cpu(model_name) if model_name else ""
    if not model:
        notes.append(f"CPU model {model_name or '(no model name in /proc/cpuinfo)'!r} is not in "
                     "the catalog (gpufabric catalog cpus): written without a model")
    return CpuInfo(model_name, model, len(socket_numa), len(cores), len(cpus), numa,
                   socket_numa, notes)
