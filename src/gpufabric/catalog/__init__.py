"""Hardware catalog: facts about GPUs, CPUs, PCIe, NVLink, NVSwitch, bridges, NICs and fabrics.

The facts live in YAML files under ``catalog/data/``, one file per table; every entry carries a
``source`` (and optionally ``sources: {field: source}`` for numbers from elsewhere). This module
loads them once into frozen dataclasses. Network speeds are written in Gbit/s in the data and
converted to GB/s (1e9 B/s) here, once.

Examples
--------
>>> from gpufabric import catalog
>>> catalog.gpu("H100-SXM").peer_links
18
>>> catalog.pcie_gen(4).x16_GBps
31.5
>>> catalog.net_speed("ib-ndr").bw_GBps
50.0
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from functools import cache
from typing import Any, TypeVar

from gpufabric.errors import InputError, unknown_name
from gpufabric.fileio import load_data


@dataclass(frozen=True)
class GPU:
    """A GPU model. ``peer_link`` names an entry of :func:`peer_link` (``nvlink3``, ``xgmi3``)."""

    name: str
    vendor: str
    memory_GB: float
    mem_bw_GBps: float
    fp16_tflops: float            # dense FP16/BF16 tensor TFLOPS
    pcie_gen: int
    arch: str = ""                # generation: volta, ampere, hopper, ada, blackwell, cdna3...
    sms: int = 0                  # streaming multiprocessors (AMD: compute units)
    fp32_tflops: float = 0.0      # dense peak per precision; 0 = the part has no such rate
    tf32_tflops: float = 0.0
    bf16_tflops: float | None = None  # None: same as fp16_tflops
    fp8_tflops: float = 0.0
    fp4_tflops: float = 0.0
    pcie_lanes: int = 16
    peer_link: str | None = None  # GPU-GPU link family (NVLink generation / Infinity Fabric)
    peer_links: int = 0           # links per GPU of that family
    p2p_pcie: bool = True         # peer-to-peer over PCIe works (GeForce: False)
    form_factor: str = "pcie"     # sxm | pcie | oam
    slot_width: int = 2           # PCIe slots taken (0 for SXM/OAM modules)
    bridges: tuple[str, ...] = () # bridge names this card accepts (nvlink / sli / crossfire)
    host_cpu: str | None = None   # superchip: the CPU the GPU hangs off over NVLink-C2C
    gpus_per_tray: int = 0        # rack-scale parts: GPUs per compute tray (one server)
    tdp_W: float = 0.0            # board power (max TDP, W); 0 = not recorded
    #: the board power limit the part ships with where it is below the TDP (0: the TDP); its
    #: compute runs at the clock that limit sustains (workloads.compute.gpu_spec)
    power_limit_W: float = 0.0
    #: False where the driver's license forbids datacenter deployment (GeForce)
    datacenter_use: bool = True
    aliases: tuple[str, ...] = ()
    source: str = ""
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class PeerLink:
    """A GPU-GPU link family: one NVLink generation, or AMD Infinity Fabric."""

    name: str
    gen: int
    per_link_GBps: float          # raw rate per link per direction
    nccl_GBps: float              # usable rate per link as NCCL models it
    lat_us: float
    aliases: tuple[str, ...] = ()
    source: str = ""
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class PCIeGen:
    """A PCIe generation; rates are per direction for an x16 link."""

    name: str                     # "gen4"
    gen: int
    GTps: float
    x16_GBps: float               # raw per direction after encoding
    nccl_x16_GBps: float          # what a collective library sees on x16
    lat_us: float                 # one hop (root port or switch port), one way
    aliases: tuple[str, ...] = ()
    source: str = ""
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    def bw_GBps(self, lanes: int) -> float:
        """Raw per-direction rate of a link of ``lanes`` lanes."""
        return self.x16_GBps * lanes / 16


@dataclass(frozen=True)
class NVSwitch:
    """An NVSwitch generation (a whole node's NVSwitch fabric is modeled as one device)."""

    name: str
    peer_link: str                # NVLink generation of its ports
    ports: int                    # NVLink ports per switch chip
    nvls: bool                    # in-switch reduction (NVLink SHARP)
    lat_us: float
    aliases: tuple[str, ...] = ()
    source: str = ""
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Bridge:
    """A GPU bridge: NVLink bridge, SLI or CrossFire."""

    name: str
    kind: str                     # nvlink | sli | crossfire
    max_gpus: int
    bw_GBps: float                # per direction between two bridged GPUs (0: no compute traffic)
    links: int                    # NVLink links it carries (NV# in nvidia-smi), 0 otherwise
    identical_gpus: bool          # all bridged GPUs must be the same model (SLI: yes)
    lat_us: float = 0.0
    aliases: tuple[str, ...] = ()
    source: str = ""
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class CPU:
    """A CPU model with its PCIe lanes and inter-socket link."""

    name: str
    vendor: str
    lanes_per_socket: int         # PCIe lanes of one socket in a 1-socket system
    lanes_2s: int                 # usable PCIe lanes of a whole 2-socket system
    max_sockets: int
    pcie_gen: int
    host_bridges: int             # PCIe root complexes (x16 host bridges) per socket
    intersocket: str              # upi | xgmi | c2c | none
    intersocket_GBps: float       # per direction, socket to socket
    nccl_intersocket_GBps: float  # what NCCL assumes for GPU traffic crossing sockets
    cores: int = 0                # physical cores per socket
    threads_per_core: int = 1
    mem_bw_GBps: float = 0.0      # peak DRAM bandwidth of one socket (channels x rate x 8 B)
    p2p_level: str = "NODE"       # farthest nvidia-smi path class NCCL uses GPU P2P over
    aliases: tuple[str, ...] = ()
    source: str = ""
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    def lanes(self, sockets: int) -> int:
        """Usable PCIe lanes of a system with ``sockets`` sockets."""
        return self.lanes_per_socket if sockets == 1 else self.lanes_2s * sockets // 2


@dataclass(frozen=True)
class PCIeSwitch:
    """A PCIe switch chip."""

    name: str
    lanes: int                    # total lanes (upstream + downstream)
    ports: int                    # max ports
    gen: int
    lat_us: float                 # port-to-port, one way
    aliases: tuple[str, ...] = ()
    source: str = ""
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class NIC:
    """A network adapter."""

    name: str
    max_gbps: float
    ports: int
    pcie_gen: int
    pcie_lanes: int
    protocols: tuple[str, ...]    # ib, roce
    aliases: tuple[str, ...] = ()
    source: str = ""
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class NetSpeed:
    """A scale-out link kind and speed: ``ib-ndr``, ``roce-400``... (``bw_GBps`` derived)."""

    name: str
    protocol: str                 # ib | roce
    gbps: float                   # signalled data rate, Gbit/s
    efficiency: float             # payload fraction after headers and flow control
    lat_us: float                 # NIC-to-NIC through one switch, one way
    switch_lat_us: float          # one more switch hop
    nic: str                      # default NIC model
    switch: str                   # default switch model
    aliases: tuple[str, ...] = ()
    #: NCCL protocols that may cross this network (empty: all of LL, LL128, Simple)
    nccl_protocols: tuple[str, ...] = ()
    source: str = ""
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    @property
    def bw_GBps(self) -> float:
        """Raw rate in GB/s (1e9 B/s)."""
        return self.gbps / 8


@dataclass(frozen=True)
class NetSwitch:
    """A scale-out network switch."""

    name: str
    protocol: str
    radix: int                    # ports at full speed
    gbps: float
    lat_us: float = 0.0           # port to port, one way
    port_modes: dict[float, int] = field(default_factory=dict, hash=False, compare=False)
    ports_per_cage: int = 1       # ports one pluggable optic carries (twin-port OSFP: 2)
    aliases: tuple[str, ...] = ()
    source: str = ""
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    def ports_at(self, gbps: float) -> int:
        """Ports available at ``gbps`` Gbit/s: full speed, a listed breakout mode, or 0.

        Examples
        --------
        >>> from gpufabric import catalog
        >>> catalog.net_switch("QM9700").ports_at(200)
        128
        """
        if gbps == self.gbps:
            return self.radix
        return int(self.port_modes.get(gbps, self.port_modes.get(int(gbps), 0)))


@dataclass(frozen=True)
class Drive:
    """An NVMe data drive (a KV cache tier on local flash)."""

    name: str
    read_GBps: float              # sequential read, GB/s
    pcie_gen: int
    pcie_lanes: int
    aliases: tuple[str, ...] = ()
    source: str = ""
    sources: dict[str, str] = field(default_factory=dict, hash=False, compare=False)


T = TypeVar("T")

#: table name -> (data file, entry type, what to call one entry in messages)
TABLES: dict[str, tuple[str, type, str]] = {
    "gpu": ("gpus.yaml", GPU, "GPU"),
    "peer_link": ("peer_links.yaml", PeerLink, "GPU link"),
    "pcie": ("pcie.yaml", PCIeGen, "PCIe generation"),
    "nvswitch": ("nvswitch.yaml", NVSwitch, "NVSwitch"),
    "bridge": ("bridges.yaml", Bridge, "bridge"),
    "cpu": ("cpus.yaml", CPU, "CPU"),
    "pcie_switch": ("pcie_switches.yaml", PCIeSwitch, "PCIe switch"),
    "nic": ("nics.yaml", NIC, "NIC"),
    "net_speed": ("net_speeds.yaml", NetSpeed, "network speed"),
    "net_switch": ("net_switches.yaml", NetSwitch, "network switch"),
    "drive": ("drives.yaml", Drive, "drive"),
}


def _coerce(cls: type, raw: dict[str, Any], where: str) -> Any:
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(raw) - set(names)
    if unknown:
        raise InputError(f"unknown field(s) {sorted(unknown)}; allowed: {sorted(names)}",
                         file=where)
    if not raw.get("source"):
        raise InputError("every catalog entry needs a 'source'", file=where, field="source")
    vals = dict(raw)
    for k in ("aliases", "bridges", "protocols", "nccl_protocols"):
        if k in vals and vals[k] is not None:
            vals[k] = tuple(vals[k])
    try:
        return cls(**vals)
    except TypeError as exc:
        raise InputError(str(exc), file=where) from None


@cache
def table(kind: str) -> dict[str, Any]:
    """All entries of one table, keyed by lower-cased name and aliases."""
    fname, cls, _ = TABLES[kind]
    raw = load_data("gpufabric.catalog", "data", fname) or []
    out: dict[str, Any] = {}
    for i, entry in enumerate(raw):
        obj = _coerce(cls, entry, f"catalog/data/{fname}[{i}]")
        for key in (obj.name, *obj.aliases):
            k = str(key).lower()
            if k in out:
                raise InputError(f"duplicate catalog name {key!r}", file=f"catalog/data/{fname}")
            out[k] = obj
    return out


def names(kind: str) -> list[str]:
    """Canonical names of one table, in file order."""
    seen: dict[str, None] = {}
    for obj in table(kind).values():
        seen.setdefault(obj.name, None)
    return list(seen)


def get(kind: str, name: str | int, *, file: str | None = None, field: str | None = None) -> Any:
    """Look up ``name`` (or an alias, case-insensitively) in a table.

    Raises
    ------
    InputError
        If the name is unknown; the message suggests the closest known name.
    """
    hit = table(kind).get(str(name).lower())
    if hit is None:
        raise unknown_name(TABLES[kind][2], str(name), names(kind), file=file, field=field)
    return hit


def gpu(name: str, **kw) -> GPU:
    return get("gpu", name, **kw)


def gpu_variant(name: str, variant: str | None) -> str:
    """The catalog part that a free-text ``variant`` of GPU ``name`` describes: where the text
    states a memory size other than the part's own and the catalog holds that size of the part
    (``{name}-{N}GB``, as ``A100-SXM4-40GB``), that part; otherwise ``name``'s canonical name.

    >>> gpu_variant("H100-SXM", "96GB HBM2e, 500 W power limit (Grand Teton)")
    'H100-SXM-96GB'
    >>> gpu_variant("A100-SXM4-80GB", "40 GB HBM2")
    'A100-SXM4-40GB'
    >>> gpu_variant("H100-SXM", "80GB HBM3, 700 W TDP"), gpu_variant("H20", "H20-3e 143 GB")
    ('H100-SXM', 'H20')
    """
    part = gpu(name)
    m = re.search(r"(\d+)\s*GB\b", str(variant or ""))
    if not m or float(m.group(1)) == part.memory_GB:
        return part.name
    base = re.sub(r"-\d+GB$", "", part.name)
    hit = table("gpu").get(f"{base}-{m.group(1)}GB".lower())
    return hit.name if hit is not None else part.name


def most_nvlinks(gen: int | None = None) -> tuple[int, str]:
    """The most NVLink links a GPU of the catalog has (of NVLink generation ``gen``, if given),
    and that GPU: what bounds ``NV#`` in ``nvidia-smi topo -m`` and an NVLink link's ``count``
    when the GPU model is unknown.

    >>> most_nvlinks(), most_nvlinks(3), most_nvlinks(2)
    ((18, 'H100-SXM'), (12, 'A100-SXM4-40GB'), (6, 'V100-SXM2-16GB'))
    """
    best = (0, "")
    for name in names("gpu"):
        g = gpu(name)
        if g.peer_link is None or not g.peer_link.startswith("nvlink"):
            continue
        if gen is not None and peer_link(g.peer_link).gen != gen:
            continue
        if g.peer_links > best[0]:
            best = (g.peer_links, g.name)
    return best


def peer_link(name: str, **kw) -> PeerLink:
    return get("peer_link", name, **kw)


def pcie_gen(gen: int | str, **kw) -> PCIeGen:
    g = str(gen).lower().removeprefix("gen")
    return get("pcie", f"gen{g}", **kw)


def nvswitch(name: str, **kw) -> NVSwitch:
    return get("nvswitch", name, **kw)


def bridge(name: str, **kw) -> Bridge:
    return get("bridge", name, **kw)


def cpu(name: str, **kw) -> CPU:
    return get("cpu", name, **kw)


def pcie_switch(name: str, **kw) -> PCIeSwitch:
    return get("pcie_switch", name, **kw)


def nic(name: str, **kw) -> NIC:
    return get("nic", name, **kw)


def net_speed(name: str, **kw) -> NetSpeed:
    return get("net_speed", name, **kw)


def net_switch(name: str, **kw) -> NetSwitch:
    return get("net_switch", name, **kw)


def drive(name: str, **kw) -> Drive:
    return get("drive", name, **kw)


#: What ``gpufabric catalog SECTION`` lists: the tables a user names things from.
SECTIONS: dict[str, tuple[str, ...]] = {
    "gpus": ("gpu",),
    "cpus": ("cpu",),
    "nics": ("nic", "net_speed"),
    "switches": ("pcie_switch", "nvswitch", "net_switch"),
    "links": ("peer_link", "pcie", "bridge"),
    "storage": ("drive",),
}


def entries(section: str) -> list[dict[str, Any]]:
    """Every entry of one section as plain data: table, name, aliases, facts, sources.

    ``facts`` holds the entry's other fields; ``source`` is where its numbers come from
    (``sources`` names a different source for single fields).

    Examples
    --------
    >>> h100 = next(e for e in entries("gpus") if e["name"] == "H100-SXM")
    >>> h100["facts"]["peer_links"], bool(h100["source"])
    (18, True)
    >>> try:
    ...     entries("tpus")
    ... except InputError as e:
    ...     print(e)
    SECTION: unknown catalog section 'tpus' (known: cpus, gpus, links, nics, storage, switches)
    """
    if section not in SECTIONS:
        raise unknown_name("catalog section", section, SECTIONS, field="SECTION")
    out = []
    for kind in SECTIONS[section]:
        for name in names(kind):
            obj = get(kind, name)
            d = dataclasses.asdict(obj)
            meta = {k: d.pop(k) for k in ("name", "aliases", "source", "sources")}
            out.append({"table": kind, "kind": TABLES[kind][2], "name": meta["name"],
                        "aliases": list(meta["aliases"]), "facts": d,
                        "source": meta["source"], "sources": meta["sources"]})
    return out
