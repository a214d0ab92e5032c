"""Builders: a :class:`~gpufabric.topology.model.Topology` from a spec, a system file or a preset.

Three ways in, one model out (docs/systems.md describes the formats):

* :func:`from_spec` takes the shorthand of the calibration file (``gpu``, ``gpus_per_node``,
  ``scale_up``, ``host``, ``nics_per_node``, ``nic``, ``fabric``...).
* :func:`from_system_file` takes a file naming every device and link.
* :func:`load` takes what a user types: a preset name, a YAML file, or ``key=value,...``.

Every builder ends with :func:`gpufabric.topology.rules.check`, so an impossible design never
becomes a model.

Examples
--------
>>> t = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "scale_up": "nvswitch"})
>>> len(t.gpus()), t.link("n0.gpu0", "n0.nvsw").count
(8, 18)
"""

from __future__ import annotations

import math
from itertools import pairwise
from pathlib import Path
from typing import Any


from gpufabric import catalog
from gpufabric.errors import InputError
from gpufabric.fileio import MAX_YAML_BYTES, names_a_path, parse_yaml, path_kind, read_text
from gpufabric.topology import fabric, presets, schema
from gpufabric.topology.model import (
    CPU,
    DEVICE_KINDS,
    GPU,
    LINK_KINDS,
    NET_SWITCH,
    NIC,
    NVSWITCH,
    PCIE_SWITCH,
    Device,
    Link,
    Topology,
)

# what a spec may say lives in the schema (topology/schema.py); these names stay for callers
SCALE_UP, MESHES, SWITCH_LAYOUTS, FABRICS = (schema.SCALE_UP, schema.MESHES, schema.SWITCH_LAYOUTS,
                                             schema.FABRICS)
SPEC_KEYS, HOST_KEYS, FABRIC_KEYS, SUPERNODE_KEYS = (schema.SPEC_KEYS, schema.HOST_KEYS,
                                                     schema.FABRIC_KEYS, schema.SUPERNODE_KEYS)
DEFAULT_CPU = "EPYC-7763"            # PCIe Gen4 hosts
DEFAULT_CPU_GEN5 = "Xeon-Platinum-8480+"  # PCIe Gen5 hosts (the usual HGX H100 head node)
#: NVLink-C2C between a Grace CPU and each of its two GPUs (GB200 superchip), GB/s per direction.
C2C_GBPS, C2C_SOURCE = 450.0, "NVIDIA GB200 NVL72 product page: NVLink-C2C 900 GB/s bidirectional"

#: DGX-1 hybrid cube-mesh: NVLink links per GPU pair (8 V100s, 6 links each).
HYBRID_CUBE_MESH = {(0, 1): 1, (0, 2): 1, (0, 3): 2, (0, 4): 2, (1, 2): 2, (1, 3): 1, (1, 5): 2,
                    (2, 3): 2, (2, 6): 1, (3, 7): 1, (4, 5): 1, (4, 6): 1, (4, 7): 2, (5, 6): 2,
                    (5, 7): 1, (6, 7): 2}


# --------------------------------------------------------------------------------------------
# spec normalisation
# --------------------------------------------------------------------------------------------
def _want(value: Any, kind: type | tuple, field: str, allowed: str, file: str | None) -> Any:
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise InputError(f"expected {allowed}, got {value!r}", file=file, field=field)
    if not isinstance(value, kind):
        raise InputError(f"expected {allowed}, got {value!r}", file=file, field=field)
    return value


def _choice(value: Any, choices: tuple[str, ...], field: str, file: str | None) -> str:
    if value not in choices:
        raise InputError(f"got {value!r}; allowed: {', '.join(choices)}", file=file, field=field)
    return value


#: The most GPUs any fabric of the catalog connects: a three-tier fat-tree of the largest-radix
#: switch (Quantum-X800 Q3400, 144 ports: 144^3 / 4 = 746,496 end ports) is the bound; a spec
#: beyond it describes no machine that can be built, and is refused before anything is built.
MAX_GPUS = 144 ** 3 // 4


def _check_size(nodes: int, gpus_per_node: int, file: str | None) -> None:
    if nodes * gpus_per_node > MAX_GPUS:
        raise InputError(f"{nodes} nodes x {gpus_per_node} GPUs = {nodes * gpus_per_node:,} GPUs; "
                         f"no fabric in the catalog connects more than {MAX_GPUS:,} (a three-tier "
                         "fat-tree of 144-port switches)", file=file, field="nodes")


def _supernode(s: dict[str, Any], sup: dict[str, Any], g0: catalog.GPU,
               file: str | None, full: int) -> dict[str, Any]:
    """The NVLink switch side of a domain that spans trays: chips, ports, trays, links.

    The switches are sized for the whole domain (``domain_gpus``, ``domain_trays``); where
    the system is part of one domain, ``trays`` and ``ports_used`` are its own trays'."""
    dom = s["nvlink_domain"]
    links = sup.get("links_per_gpu") or s["nvlink_links"]
    if sup.get("links_per_gpu"):
        s["nvlink_links"] = links
    gens = [sw for sw in map(catalog.nvswitch, catalog.names("nvswitch"))
            if sw.peer_link == g0.peer_link]
    if sup.get("switch") is not None:
        chip = catalog.nvswitch(str(sup["switch"]), file=file, field="supernode.switch")
    elif gens:
        chip = gens[0]
    else:
        raise InputError(f"no NVSwitch generation speaks {g0.peer_link} ({g0.name})", file=file,
                         field="supernode.switch")
    ports = sup.get("ports_per_chip") or chip.ports
    per_tray = sup.get("chips_per_tray") or 2
    need_chips = math.ceil(full * links / ports)
    trays = sup.get("switch_trays") or math.ceil(need_chips / per_tray)
    racks = sup.get("racks") or 1
    chips = trays * per_tray
    # in a domain over several racks half of each chip's ports cross to the other racks
    gpu_ports = chips * ports // (2 if racks > 1 else 1)
    if full * links > gpu_ports:
        least = math.ceil(need_chips * (2 if racks > 1 else 1) / per_tray)
        raise InputError(f"{full} GPUs x {links} NVLink links = {full * links} switch ports, "
                         f"but "
                         f"{trays} switch trays x {per_tray} {chip.name} chips x {ports} ports "
                         f"{'(half to the other racks) ' if racks > 1 else ''}give {gpu_ports}; "
                         f"allowed: at least {least} switch trays", file=file,
                         field="supernode.switch_trays")
    return {"gpus_per_tray": s["gpus_per_node"], "trays": dom // s["gpus_per_node"],
            "switch": chip.name, "switch_trays": trays, "chips_per_tray": per_tray,
            "chips": chips, "ports_per_chip": ports, "links_per_gpu": links,
            "ports_used": dom * links, "racks": racks,
            "domain_gpus": full, "domain_trays": full // s["gpus_per_node"]}


def _rack_shorthand(spec: Any, file: str | None) -> Any:
    """The natural shorthand for a rack-scale part (``gpu: GB200, gpus_per_node: 72``) as the
    machine is built: one NVLink domain of that many GPUs made of compute trays. NICs and CPU
    sockets given for the whole domain are the trays' together."""
    if not isinstance(spec, dict) or "nvlink_domain" in spec or spec.get("supernode"):
        return spec
    per, gpu = spec.get("gpus_per_node"), spec.get("gpu")
    if not isinstance(per, int) or isinstance(per, bool) or not isinstance(gpu, str):
        return spec
    try:
        g0 = catalog.gpu(gpu)
    except InputError:
        return spec                  # the schema and the catalog say what is wrong
    if not g0.gpus_per_tray or per <= g0.gpus_per_tray:
        return spec
    if per % g0.gpus_per_tray:
        raise InputError(f"a {g0.name} NVLink domain is made of {g0.gpus_per_tray}-GPU "
                         f"compute trays; allowed: a multiple of {g0.gpus_per_tray}, got "
                         f"{per}", file=file, field="gpus_per_node")
    trays = per // g0.gpus_per_tray
    out = {**spec, "nvlink_domain": per, "gpus_per_node": g0.gpus_per_tray}
    nodes = spec.get("nodes", 1)
    if isinstance(nodes, int) and not isinstance(nodes, bool):
        out["nodes"] = nodes * trays
    nics = spec.get("nics_per_node")
    if isinstance(nics, int) and not isinstance(nics, bool) and nics % trays == 0:
        out["nics_per_node"] = nics // trays
    host = spec.get("host")
    if isinstance(host, dict) and isinstance(host.get("sockets"), int) \
            and host["sockets"] % trays == 0:
        out["host"] = {**host, "sockets": host["sockets"] // trays}
    return out


def normalize_spec(spec: dict[str, Any], file: str | None = None) -> dict[str, Any]:
    """Check a shorthand spec and fill in every default; returns a new dict.

    Raises
    ------
    InputError
        On an unknown key, a value of the wrong type or outside what is allowed, or an
        unknown catalog name.
    """
    spec = _rack_shorthand(spec, file)
    schema.check(spec, file)       # keys, types, ranges and choices: one line for the first
    # a key given as null means "the default", as if it were absent
    spec = {k: v for k, v in spec.items() if v is not None}
    raw_gpus = spec["gpu"] if isinstance(spec["gpu"], list) else [spec["gpu"]]
    if not raw_gpus:
        raise InputError("expected a GPU model or a list of them", file=file, field="gpu")
    gpus = [catalog.gpu(str(g), file=file, field="gpu") for g in raw_gpus]
    g0 = gpus[0]
    s: dict[str, Any] = {"gpu": [g.name for g in gpus] if len(gpus) > 1 else g0.name}
    sup = {k: v for k, v in (spec.get("supernode") or {}).items() if v is not None}
    full = _size(spec, s, sup, gpus, file)
    _scale_up(spec, s, g0, full, file)
    _host(spec, s, gpus, file)
    _network(spec, s, file)
    if s["nodes"] * s["gpus_per_node"] > s["nvlink_domain"] and s["nics_per_node"] == 0:
        raise InputError("a cluster of several nodes (NVLink domains) needs NICs; set "
                         "nics_per_node >= 1", file=file, field="nics_per_node")
    s["supernode"] = (_supernode(s, sup, g0, file, full) if full > s["gpus_per_node"] else None)
    for k in ("name", "description"):
        if k in spec:
            s[k] = str(spec[k])
    return s


def _size(spec: dict[str, Any], s: dict[str, Any], sup: dict[str, Any], gpus: list,
          file: str | None) -> int:
    """GPUs per node, nodes and the NVLink domain into ``s``; returns the whole domain's GPUs
    (larger than the system when it is some trays of one domain)."""
    s["gpus_per_node"] = spec.get("gpus_per_node", len(gpus) if len(gpus) > 1 else 8)
    s["nodes"] = spec.get("nodes", 1)
    _check_size(s["nodes"], s["gpus_per_node"], file)
    if "gpus_per_tray" in sup:
        tray = sup["gpus_per_tray"]
        if "gpus_per_node" in spec and spec["gpus_per_node"] != tray:
            raise InputError(f"gpus_per_node ({spec['gpus_per_node']}) and "
                             f"supernode.gpus_per_tray ({tray}) name the same thing; give one",
                             file=file, field="supernode.gpus_per_tray")
        s["gpus_per_node"] = tray
    dom = spec.get("nvlink_domain", s["gpus_per_node"])
    total = s["nodes"] * s["gpus_per_node"]
    # a domain larger than the whole system: the system is some trays of one domain (two
    # compute trays of an NVL72 rack), on that domain's NVLink switches
    full = dom
    if dom > total and not dom % s["gpus_per_node"]:
        dom = total
    if dom % s["gpus_per_node"] or total % dom:
        raise InputError(f"an NVLink domain is whole servers and the cluster whole domains, or "
                         f"part of one domain; allowed: a multiple of gpus_per_node "
                         f"({s['gpus_per_node']}) that divides the {total} GPUs or exceeds "
                         f"them, got {full}", file=file, field="nvlink_domain")
    s["nvlink_domain"] = dom
    return int(full)


def _scale_up(spec: dict[str, Any], s: dict[str, Any], g0: catalog.GPU, full: int,
              file: str | None) -> None:
    """How GPUs inside a node talk (NVSwitch, a mesh, a bridge, PCIe) into ``s``."""
    default_up = ("nvswitch" if g0.peer_link and g0.peer_links >= 8 and g0.form_factor == "sxm"
                  and g0.peer_link.startswith("nvlink") else
                  "xgmi" if g0.peer_link and g0.peer_link.startswith("xgmi") else "pcie")
    s["scale_up"] = spec.get("scale_up", default_up)
    if full > s["gpus_per_node"] and s["scale_up"] != "nvswitch":
        raise InputError(f"an NVLink domain larger than a server needs NVLink switches; "
                         f"allowed with nvlink_domain {full}: scale_up: nvswitch", file=file,
                         field="scale_up")
    s["mesh"] = spec.get("mesh", "full")
    s["nvlink_links"] = spec.get("nvlink_links", g0.peer_links)
    if "bridge" in spec:
        s["bridge"] = catalog.bridge(str(spec["bridge"]), file=file, field="bridge").name
    elif s["scale_up"] in ("nvlink-bridge", "sli", "crossfire"):
        kind = {"nvlink-bridge": "nvlink"}.get(s["scale_up"], s["scale_up"])
        fits = [b for b in g0.bridges if catalog.bridge(b).kind == kind]
        if not fits:
            raise InputError(f"{g0.name} takes no {kind} bridge (its bridges: "
                             f"{', '.join(g0.bridges) or 'none'})", file=file, field="scale_up")
        s["bridge"] = fits[0]


def _host(spec: dict[str, Any], s: dict[str, Any], gpus: list, file: str | None) -> None:
    """The CPU side into ``s``: CPU, sockets, PCIe generation, switches, P2P."""
    g0 = gpus[0]
    host = {k: v for k, v in (spec.get("host") or {}).items() if v is not None}
    want_gen = spec.get("pcie_gen", g0.pcie_gen)
    catalog.pcie_gen(want_gen, file=file, field="pcie_gen")
    default_cpu = g0.host_cpu or (DEFAULT_CPU_GEN5 if want_gen >= 5 else DEFAULT_CPU)
    cpu = catalog.cpu(str(host.get("cpu", default_cpu)), file=file, field="host.cpu")
    attach = host.get("attach", "c2c" if cpu.intersocket == "c2c" else "pcie")
    per_cpu = 2 if attach == "c2c" else 0
    sockets_default = (math.ceil(s["gpus_per_node"] / per_cpu) if per_cpu
                       else min(2, cpu.max_sockets))
    sockets = host.get("sockets", sockets_default)
    if sockets > cpu.max_sockets and attach == "pcie":
        raise InputError(f"{cpu.name} supports at most {cpu.max_sockets} socket(s), got {sockets}",
                         file=file, field="host.sockets")
    if "pcie_gen" in spec and want_gen > cpu.pcie_gen and "cpu" in host:
        raise InputError(f"{cpu.name} has PCIe Gen{cpu.pcie_gen} root ports; allowed pcie_gen: "
                         f"{cpu.pcie_gen} or lower", file=file, field="pcie_gen")
    pcie_gen = min(want_gen, cpu.pcie_gen) if "pcie_gen" not in spec else want_gen
    s["pcie_gen"] = pcie_gen
    baseboard = g0.form_factor in ("sxm", "oam") and s["gpus_per_node"] >= 4 and attach == "pcie"
    # a baseboard has a PCIe switch per GPU pair; one per GPU where each GPU has several NICs
    # beside it (AWS p5: 8 H100 and 32 EFA cards)
    nics_wanted = spec.get("nics_per_node", 0)
    sw_default = (s["gpus_per_node"] // (1 if nics_wanted > s["gpus_per_node"] else 2)
                  if baseboard else 0)
    n_sw = host.get("pcie_switches", sw_default)
    sw_model = "PEX89144" if pcie_gen >= 5 else "PEX88096" if pcie_gen == 4 else "PEX8796"
    sw = catalog.pcie_switch(str(host.get("switch", sw_model)), file=file, field="host.switch")
    s["host"] = {
        "cpu": cpu.name, "sockets": sockets, "pcie_switches": n_sw,
        "switch_layout": host.get("switch_layout", "dual-root"),
        "switch": sw.name,
        "attach": attach,
        "numa_per_socket": host.get("numa_per_socket", 1),
    }
    s["p2p"] = spec.get("p2p", all(g.p2p_pcie for g in gpus))


def _network(spec: dict[str, Any], s: dict[str, Any], file: str | None) -> None:
    """NICs per node, their kind and the fabric (switches by name, the default leaf switch
    sized to the cluster) into ``s``."""
    # rack-scale trays carry one NIC per GPU (GB200 NVL72: 4 ConnectX-7 per compute tray)
    nic_default = (0 if s["nodes"] == 1 else 8 if s["nvlink_domain"] == s["gpus_per_node"]
                   else s["gpus_per_node"])
    s["nics_per_node"] = spec.get("nics_per_node", nic_default)
    s["nic"] = catalog.net_speed(str(spec.get("nic", "ib-ndr")), file=file, field="nic").name
    fab = {k: v for k, v in (spec.get("fabric") or {}).items() if v is not None}
    over = fab.get("oversubscription", 1.0)
    if isinstance(over, list) and not 1 <= len(over) <= 2:
        raise InputError(f"expected a number >= 1 or a list [leaf, spine], got {over!r}",
                         file=file, field="fabric.oversubscription")
    s["fabric"] = {
        "topology": fab.get("topology", "rail-optimized"),
        "oversubscription": [float(o) for o in over] if isinstance(over, list) else float(over),
    }
    for key in ("nodes_per_leaf", "rails_per_leaf", "pod_nodes", "tiers"):
        s["fabric"][key] = fab.get(key)
    for key in ("spine_switch", "core_switch"):
        if key in fab:
            s["fabric"][key] = catalog.net_switch(str(fab[key]), file=file,
                                                  field=f"fabric.{key}").name
    if "switch" in fab:
        s["fabric"]["switch"] = catalog.net_switch(str(fab["switch"]), file=file,
                                                   field="fabric.switch").name
    else:      # the default, or a larger one of its kind where the cluster needs it
        s["fabric"]["switch"] = fabric.default_switch(s, file)


# --------------------------------------------------------------------------------------------
# spec -> topology
# --------------------------------------------------------------------------------------------
def _affinity(cpu: catalog.CPU, numa: int, sockets: int, numa_per_socket: int = 1) -> str:
    """Linux CPU list of one NUMA node (physical cores, then their SMT siblings)."""
    if not cpu.cores:
        return ""
    per = cpu.cores // numa_per_socket
    lo = (numa // numa_per_socket) * cpu.cores + (numa % numa_per_socket) * per
    ranges = [f"{lo}-{lo + per - 1}"]
    for t in range(1, cpu.threads_per_core):
        lo2 = t * sockets * cpu.cores + lo
        ranges.append(f"{lo2}-{lo2 + per - 1}")
    return ",".join(ranges)


class _NodeBuilder:
    """Adds one server's devices and links to a topology."""

    def __init__(self, t: Topology, s: dict[str, Any], n: int, file: str | None):
        self.t, self.s, self.n, self.file = t, s, n, file
        self.p = f"n{n}."
        self.cpu = catalog.cpu(s["host"]["cpu"])
        self.pcie = catalog.pcie_gen(s["pcie_gen"])
        self.next_hb = [0] * s["host"]["sockets"]

    # -- helpers ------------------------------------------------------------------------
    def dev(self, local_id: str, kind: str, model: str, index: int, numa: int, **attrs) -> str:
        self.t.add_device(Device(self.p + local_id, kind, model, self.n, index, numa, attrs))
        return self.p + local_id

    def numa_of(self, socket: int, hb: int) -> int:
        nps = self.s["host"]["numa_per_socket"]
        return socket * nps + (hb * nps // max(1, self.cpu.host_bridges))

    def root_port(self, socket: int, child: str, lanes: int, gen: int) -> None:
        """Attach ``child`` to the next free host bridge of ``socket``."""
        hb = self.next_hb[socket] % max(1, self.cpu.host_bridges)
        self.next_hb[socket] += 1
        self.t.devices[child].numa = self.numa_of(socket, hb)
        self.pcie_link(f"{self.p}cpu{socket}", child, lanes, gen, host_bridge=hb)

    def pcie_link(self, up: str, down: str, lanes: int, gen: int, **attrs) -> None:
        g = catalog.pcie_gen(gen)
        self.t.add_link(Link(up, down, "pcie", g.bw_GBps(lanes), g.lat_us, lanes=lanes, gen=gen,
                             attrs=attrs))

    # -- the node -----------------------------------------------------------------------
    def build(self) -> None:
        s, h = self.s, self.s["host"]
        sockets = h["sockets"]
        nps = h["numa_per_socket"]
        for k in range(sockets):
            self.dev(f"cpu{k}", CPU, self.cpu.name, k, self.numa_of(k, 0), socket=k,
                     cpu_affinity=",".join(_affinity(self.cpu, k * nps + j, sockets, nps)
                                           for j in range(nps)))
        for k in range(1, sockets):   # a chain of inter-socket links (2 sockets: one link)
            if h["attach"] == "pcie" and k > 1:
                break
            self.t.add_link(Link(f"{self.p}cpu{k - 1}", f"{self.p}cpu{k}", "cpu",
                                 self.cpu.intersocket_GBps, 0.1,
                                 attrs={"type": self.cpu.intersocket}))
        models = s["gpu"] if isinstance(s["gpu"], list) else [s["gpu"]]
        gpus: list[str] = []
        for i in range(s["gpus_per_node"]):
            model = catalog.gpu(models[i % len(models)])
            gpus.append(self.dev(f"gpu{i}", GPU, model.name, i, -1))
        speed = catalog.net_speed(s["nic"])
        nic_model = catalog.nic(speed.nic)
        nics = [self.dev(f"nic{i}", NIC, nic_model.name, i, -1, name=f"mlx5_{i}",
                         speed=speed.name) for i in range(s["nics_per_node"])]
        self.attach_pcie(gpus, nics, nic_model)
        self.scale_up(gpus)
        for gid in gpus:   # what `nvidia-smi topo -m` prints in the affinity columns
            d = self.t.devices[gid]
            d.attrs["cpu_affinity"] = _affinity(self.cpu, d.numa, sockets, nps)
            d.attrs["numa_affinity"] = str(d.numa)

    def attach_pcie(self, gpus: list[str], nics: list[str], nic_model: catalog.NIC) -> None:
        h = self.s["host"]
        sockets, n_sw, gen = h["sockets"], h["pcie_switches"], self.s["pcie_gen"]
        gpu_lanes = [catalog.gpu(self.t.devices[g].model).pcie_lanes for g in gpus]
        nic_gen = min(nic_model.pcie_gen, max(gen, self.cpu.pcie_gen))
        if h["attach"] == "c2c":   # Grace superchips: two GPUs per CPU over NVLink-C2C
            for i, g in enumerate(gpus):
                cpu_id = f"{self.p}cpu{min(i // 2, sockets - 1)}"
                self.t.devices[g].numa = self.t.devices[cpu_id].numa
                self.t.add_link(Link(cpu_id, g, "c2c", C2C_GBPS, 0.1, attrs={"source": C2C_SOURCE}))
            for i, c in enumerate(nics):
                self.root_port(i * sockets // len(nics), c, nic_model.pcie_lanes, nic_gen)
            return
        if n_sw == 0:
            for i, g in enumerate(gpus):
                self.root_port(i * sockets // len(gpus), g, gpu_lanes[i], gen)
            for i, c in enumerate(nics):
                self.root_port(i * sockets // len(nics), c, nic_model.pcie_lanes, nic_gen)
            return
        sw = catalog.pcie_switch(h["switch"])
        sw_gen = min(sw.gen, max(gen, 3))
        layout = h["switch_layout"]
        leaves = []
        uppers = []
        if layout == "cascade":
            roots = sockets if n_sw >= 2 * sockets else 1
            for k in range(roots):
                u = self.dev(f"sw{n_sw + k}", PCIE_SWITCH, sw.name, n_sw + k, -1, tier="upper")
                self.root_port(k, u, 16, sw_gen)
                uppers.append(u)
        for j in range(n_sw):
            leaf = self.dev(f"sw{j}", PCIE_SWITCH, sw.name, j, -1)
            if layout == "cascade":
                up = uppers[j * len(uppers) // n_sw]
                self.t.devices[leaf].numa = self.t.devices[up].numa
                self.pcie_link(up, leaf, 16, sw_gen)
            else:
                socket = 0 if layout == "single-root" else j * sockets // n_sw
                self.root_port(socket, leaf, 16, sw_gen)
            leaves.append(leaf)
        for devs, lanes_of, dgen in ((gpus, lambda i: gpu_lanes[i], gen),
                                     (nics, lambda i: nic_model.pcie_lanes, nic_gen)):
            for i, d in enumerate(devs):
                leaf = leaves[i * n_sw // len(devs)]
                self.t.devices[d].numa = self.t.devices[leaf].numa
                self.pcie_link(leaf, d, lanes_of(i), min(dgen, sw.gen))

    def scale_up(self, gpus: list[str]) -> None:
        s = self.s
        mode, n = s["scale_up"], len(gpus)
        g0 = catalog.gpu(self.t.devices[gpus[0]].model)
        links = s["nvlink_links"]
        if mode in ("pcie", "none"):
            return
        if mode in ("sli", "crossfire", "nvlink-bridge"):
            br = catalog.bridge(s["bridge"])
            group = br.max_gpus if mode != "nvlink-bridge" else 2
            kind = {"nvlink": "nvlink"}.get(br.kind, br.kind)
            for start in range(0, n - 1, group):
                members = gpus[start:start + group]
                for a, b in pairwise(members):
                    count = br.links if br.kind == "nvlink" else 1
                    self.t.add_link(Link(a, b, kind, br.bw_GBps, br.lat_us, count=count,
                                         attrs={"bridge": br.name}))
            return
        if not g0.peer_link:
            raise InputError(f"{g0.name} has no NVLink or Infinity Fabric; use scale_up: pcie",
                             file=self.file, field="scale_up")
        pl = catalog.peer_link(g0.peer_link)
        kind = "xgmi" if pl.name.startswith("xgmi") else "nvlink"
        if mode == "nvswitch":
            gens = [sw for sw in map(catalog.nvswitch, catalog.names("nvswitch"))
                    if sw.peer_link == pl.name]
            if not gens or kind != "nvlink":
                raise InputError(f"no NVSwitch generation speaks {pl.name} ({g0.name})",
                                 file=self.file, field="scale_up")
            sup = s.get("supernode")
            if sup:   # one NVLink switch fabric for the whole domain, shared by its trays
                dom = self.n // sup["trays"]
                hub = f"d{dom}.nvsw"
                if hub not in self.t.devices:
                    self.t.add_device(Device(hub, NVSWITCH, sup["switch"], -1, dom, -1, {
                        "domain": dom, "switch_trays": sup["switch_trays"],
                        "chips": sup["chips"], "ports_per_chip": sup["ports_per_chip"],
                        "racks": sup["racks"]}))
            else:
                hub = self.dev("nvsw", NVSWITCH, gens[0].name, 0, -1)
            for g in gpus:
                self.t.add_link(Link(g, hub, kind, links * pl.per_link_GBps, pl.lat_us,
                                     count=links, gen=pl.gen))
            return
        # direct GPU-GPU meshes (nvlink-mesh, xgmi)
        if s["mesh"] == "hybrid-cube":
            if n != 8:
                raise InputError(f"the hybrid cube-mesh joins exactly 8 GPUs, got {n}",
                                 file=self.file, field="gpus_per_node")
            pairs = HYBRID_CUBE_MESH
        else:
            per_pair = links // max(1, n - 1)
            if per_pair < 1:
                raise InputError(f"a full mesh of {n} GPUs needs at least {n - 1} links per GPU; "
                                 f"{g0.name} has {links}", file=self.file, field="gpus_per_node")
            pairs = {(i, j): per_pair for i in range(n) for j in range(i + 1, n)}
        for (i, j), count in pairs.items():
            self.t.add_link(Link(gpus[i], gpus[j], kind, count * pl.per_link_GBps, pl.lat_us,
                                 count=count, gen=pl.gen))


def from_spec(spec: dict[str, Any], name: str = "", file: str | None = None,
              materialize_nodes: int | None = None, first_node: int = 0) -> Topology:
    """Build a topology from the shorthand spec.

    Parameters
    ----------
    spec : dict
        The shorthand (docs/systems.md); validated by :func:`normalize_spec`.
    name : str
        System name; defaults to ``spec['name']`` or a name made from the spec.
    file : str, optional
        Where the spec came from, for error messages.
    materialize_nodes : int, optional
        Build only the first ``k`` nodes (and their leaf switches) of a large cluster;
        ``meta['nodes']`` keeps the true count. Models that exploit symmetry use this.
    first_node : int
        With ``materialize_nodes``, start at this node (rounded down to its NVLink domain):
        ``show --node 2047`` builds node 2047, not the 2,047 before it.

    Examples
    --------
    >>> t = from_spec({"gpu": "H100-SXM", "nodes": 4, "nic": "ib-ndr"})
    >>> t.meta["nodes"], len(t.gpus()), t.meta["fabric"]["topology"]
    (4, 32, 'rail-optimized')
    """
    s = normalize_spec(spec, file)
    name = name or s.get("name") or _spec_name(s)
    t = Topology(name, meta={"spec": s, "source": file or "spec"})
    plan = (fabric.plan(s, file) if s["nics_per_node"] and s["nodes"] > 1 else None)
    per_dom = s["nvlink_domain"] // s["gpus_per_node"]   # servers (trays) per NVLink domain
    start = min(first_node, s["nodes"] - 1) // per_dom * per_dom
    built = s["nodes"] - start if materialize_nodes is None else min(
        s["nodes"] - start, math.ceil(materialize_nodes / per_dom) * per_dom)   # whole domains
    for n in range(start, start + built):
        _NodeBuilder(t, s, n, file).build()
    t.meta.update({k: s[k] for k in ("nodes", "gpus_per_node", "nics_per_node", "nic",
                                     "scale_up", "p2p", "pcie_gen", "host", "nvlink_domain")})
    t.meta["nodes_per_domain"] = per_dom
    t.meta["domains"] = s["nodes"] // per_dom
    if s["supernode"]:
        t.meta["supernode"] = s["supernode"]
    t.meta["materialized_nodes"] = built
    if start:
        t.meta["first_node"] = start
    if plan is not None:
        fabric.add(t, plan, range(start, start + built))
        t.meta["fabric"] = fabric.legacy_meta(plan)
    from gpufabric.topology import rules
    rules.check(t, file=file)
    return t


def _spec_name(s: dict[str, Any]) -> str:
    """``NODESxGPUSxGPU-SCALEUP[-nvlDOMAIN]-NICSxNIC``: the NVLink domain is named when it
    spans several trays (two trays of an NVL72 rack, NVL8 partitions), which the rest of the
    name reads the same as servers of their own."""
    g = s["gpu"] if isinstance(s["gpu"], str) else "+".join(s["gpu"])
    base = f"{s['gpus_per_node']}x{g}-{s['scale_up']}"
    if s.get("supernode"):
        base += f"-nvl{s['supernode']['domain_gpus']}"
    return f"{s['nodes']}x{base}-{s['nics_per_node']}x{s['nic']}" if s["nodes"] > 1 else base


# --------------------------------------------------------------------------------------------
# system file -> topology
# --------------------------------------------------------------------------------------------
_MODEL_TABLE = {GPU: "gpu", CPU: "cpu", PCIE_SWITCH: "pcie_switch", NVSWITCH: "nvswitch",
                NIC: "nic", NET_SWITCH: "net_switch"}
DEVICE_FIELDS = ("id", "kind", "model", "node", "index", "numa", "attrs")
LINK_FIELDS = ("a", "b", "kind", "bw_GBps", "lat_us", "count", "lanes", "gen", "attrs")


def _entry(entry: Any, allowed: tuple[str, ...], required: tuple[str, ...], where: str,
           file: str | None) -> None:
    """One device or link of a system file: a mapping with known fields and the required ones."""
    if not isinstance(entry, dict):
        raise InputError(f"expected a mapping with {', '.join(required)}", file=file, field=where)
    bad = sorted(set(entry) - set(allowed))
    if bad:
        raise InputError(f"unknown field {bad[0]!r}; allowed: {', '.join(allowed)}", file=file,
                         field=f"{where}.{bad[0]}")
    for req in required:
        if req not in entry:
            raise InputError(f"required field '{req}' is missing", file=file,
                             field=f"{where}.{req}")


#: Physical ranges of the numbers of a system file (docs/systems.md): node and index at most
#: the GPUs of the largest fabric, NUMA nodes as Linux numbers them (-1: unknown, at most 1024),
#: PCIe lanes up to x32, a bundle of at most 1024 parallel links, and per direction at most
#: 10,000 GB/s (ten times a Blackwell GPU's 900 GB/s of NVLink) and 1 s of latency.
SYSTEM_RANGES = {"node": (0, MAX_GPUS), "index": (0, MAX_GPUS), "numa": (-1, 1023),
                 "lanes": (0, 32), "count": (1, 1024), "gen": (0, 99)}
MAX_LINK_GBPS, MAX_LINK_LAT_US = 10_000.0, 1_000_000.0


def _int(entry: dict[str, Any], key: str, default: int, where: str, file: str | None,
         minimum: int | None = None) -> int:
    value = entry.get(key, default)
    lo, hi = SYSTEM_RANGES[key]
    lo = lo if minimum is None else minimum
    allowed = f"an integer >= {lo} and <= {hi}"
    _want(value, int, f"{where}.{key}", allowed, file)
    if not lo <= value <= hi:
        raise InputError(f"expected {allowed}, got {value}", file=file, field=f"{where}.{key}")
    return value


def from_system_file(data: dict[str, Any], name: str = "", file: str | None = None) -> Topology:
    """Build a topology from a system file that names every device and link.

    Bandwidth and latency of a link come from the catalog unless the file gives them: PCIe
    from ``gen`` and ``lanes``, NVLink from ``count`` and the GPU's NVLink generation, the
    inter-socket link from the CPU model, ``net`` from the NIC's ``speed``.
    """
    if not isinstance(data, dict) or not isinstance(data.get("devices"), list):
        raise InputError("a system file needs a 'devices' list (and a 'links' list)", file=file,
                         field="devices")
    if not data["devices"]:
        raise InputError("an empty list; a system file names at least one device", file=file,
                         field="devices")
    links = data.get("links", [])
    if not isinstance(links, list):
        raise InputError("expected a list of links", file=file, field="links")
    t = Topology(name or str(data.get("name", "system")),
                 meta={"source": file or "system file", "system_file": True})
    counters: dict[tuple[int, str], int] = {}
    for i, d in enumerate(data["devices"]):
        where = f"devices[{i}]"
        _entry(d, DEVICE_FIELDS, ("id", "kind"), where, file)
        kind = _choice(d["kind"], DEVICE_KINDS, f"{where}.kind", file)
        model = str(d.get("model") or "")
        if model:
            model = catalog.get(_MODEL_TABLE[kind], model, file=file, field=f"{where}.model").name
        node = _int(d, "node", 0, where, file)
        idx = _int(d, "index", counters.get((node, kind), 0), where, file)
        counters[(node, kind)] = idx + 1
        attrs = _want(d.get("attrs") or {}, dict, f"{where}.attrs", "a mapping", file)
        dev = Device(str(d["id"]), kind, model, node, idx, _int(d, "numa", -1, where, file),
                     dict(attrs))
        if dev.id in t.devices:
            raise InputError(f"duplicate device id {dev.id!r}", file=file, field=f"{where}.id")
        t.add_device(dev)
    for i, ln in enumerate(links):
        where = f"links[{i}]"
        _entry(ln, LINK_FIELDS, ("a", "b", "kind"), where, file)
        for end in ("a", "b"):
            if not isinstance(ln[end], (str, int)) or str(ln[end]) not in t.devices:
                raise InputError(f"no device with id {ln[end]!r}", file=file,
                                 field=f"{where}.{end}")
        kind = _choice(ln["kind"], LINK_KINDS, f"{where}.kind", file)
        link = _complete_link(t, ln, kind, file, where)
        if t.link(link.a, link.b):
            raise InputError(f"a second link between {link.a} and {link.b}; bundle parallel links "
                             "with count", file=file, field=where)
        t.add_link(link)
    from gpufabric.topology import rules
    rules.check(t, file=file)
    return t


def _complete_link(t: Topology, ln: dict[str, Any], kind: str, file: str | None,
                   where: str) -> Link:
    a, b = t.devices[str(ln["a"])], t.devices[str(ln["b"])]
    count = _int(ln, "count", 1, where, file, minimum=1)
    lanes = _int(ln, "lanes", 16 if kind == "pcie" else 0, where, file,
                 minimum=1 if kind == "pcie" else 0)
    gen = _int(ln, "gen", 0, where, file, minimum=0)
    bw, lat = ln.get("bw_GBps"), ln.get("lat_us")
    attrs = dict(_want(ln.get("attrs") or {}, dict, f"{where}.attrs", "a mapping", file))
    if kind == "pcie":
        gen = gen or min([_pcie_gen_of(d) for d in (a, b) if _pcie_gen_of(d)] or [4])
        pg = catalog.pcie_gen(gen, file=file, field=f"{where}.gen")
        bw = pg.bw_GBps(lanes) if bw is None else bw
        lat = pg.lat_us if lat is None else lat
    elif kind in ("nvlink", "xgmi", "c2c"):
        gpu = next((d for d in (a, b) if d.kind == GPU and d.model), None)
        pl_name = catalog.gpu(gpu.model).peer_link if gpu else None
        if pl_name is None and bw is None:
            # an imported GPU of unknown model: assume the NVLink generation named by gen
            pl_name = f"nvlink{gen}" if gen else None
        if bw is None:
            if not pl_name:
                raise InputError("bandwidth unknown: give bw_GBps, a GPU model with NVLink, "
                                 "or gen (NVLink generation)", file=file, field=f"{where}.bw_GBps")
            pl = catalog.peer_link(pl_name)
            bw, gen = count * pl.per_link_GBps, gen or pl.gen
            lat = pl.lat_us if lat is None else lat
    elif kind == "cpu":
        cpu = next((d for d in (a, b) if d.kind == CPU and d.model), None)
        if bw is None:
            c = catalog.cpu(cpu.model if cpu else DEFAULT_CPU)
            bw = c.intersocket_GBps
            attrs.setdefault("type", c.intersocket)
    elif kind == "net":
        if bw is None:
            speed = attrs.get("speed") or a.attrs.get("speed") or b.attrs.get("speed")
            if not speed:
                raise InputError("bandwidth unknown: give bw_GBps or attrs.speed (e.g. ib-ndr)",
                                 file=file, field=f"{where}.bw_GBps")
            sp = catalog.net_speed(speed, file=file, field=f"{where}.attrs.speed")
            bw, lat = count * sp.bw_GBps, sp.lat_us / 2 if lat is None else lat
    elif bw is None:  # sli / crossfire: a graphics bridge, no compute traffic
        bw = 0.0
    _want(bw, (int, float), f"{where}.bw_GBps", "a number of GB/s per direction", file)
    graphics = kind in ("sli", "crossfire")   # a display bridge carries no compute traffic
    if not math.isfinite(bw) or bw < 0 or (bw == 0 and not graphics) or bw > MAX_LINK_GBPS:
        given = "bw_GBps" in ln
        raise InputError(f"got {bw!r}{'' if given else ' (from lanes and gen)'}; allowed: "
                         f"{'0 or more' if graphics else 'a number above 0'} and at most "
                         f"{MAX_LINK_GBPS:,.0f} GB/s per direction",
                         file=file, field=f"{where}.{'bw_GBps' if given else 'lanes'}")
    if lat is not None:
        _want(lat, (int, float), f"{where}.lat_us", "a number of microseconds >= 0", file)
        if not math.isfinite(lat) or not 0 <= lat <= MAX_LINK_LAT_US:
            raise InputError(f"got {lat!r}; allowed: a number of microseconds >= 0 and <= "
                             f"{MAX_LINK_LAT_US:,.0f}", file=file, field=f"{where}.lat_us")
    return Link(a.id, b.id, kind, float(bw), float(lat or 0.0), count, lanes, gen, attrs)


def _pcie_gen_of(d: Device) -> int:
    if not d.model:
        return 0
    table = _MODEL_TABLE.get(d.kind)
    obj = catalog.get(table, d.model) if table else None
    return getattr(obj, "pcie_gen", 0) or getattr(obj, "gen", 0) or 0


# --------------------------------------------------------------------------------------------
# what a user types
# --------------------------------------------------------------------------------------------
def from_data(data: Any, name: str, file: str | None = None,
              materialize_nodes: int | None = None, first_node: int = 0) -> Topology:
    """A topology from parsed YAML: a system file, a spec, or ``{system: spec}``."""
    if not isinstance(data, dict):
        raise InputError("expected a mapping (a spec with 'gpu', or 'devices' and 'links')",
                         file=file)
    if "devices" in data:
        return from_system_file(data, name, file)
    if "system" in data and isinstance(data["system"], dict):
        data = data["system"]
    return from_spec(data, name, file, materialize_nodes, first_node)


#: The parse of each inline value seen, where it is a scalar (immutable): the advisor parses
#: the specs of its hundred thousand designs, a handful of values over and over.
_SCALARS: dict[str, Any] = {}


def _inline_parts(text: str) -> list[str]:
    """``text`` split at its commas, except those inside [...] or {...} (they belong to the
    value)."""
    if "[" not in text and "{" not in text:
        return text.split(",")
    parts, depth, cur_part = [], 0, ""
    for ch in text:
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth <= 0:
            parts.append(cur_part)
            cur_part = ""
        else:
            cur_part += ch
    parts.append(cur_part)
    return parts


def parse_inline(text: str) -> dict[str, Any]:
    """``gpu=H100-SXM,nodes=4,host.sockets=2`` -> a spec dict (values parsed as YAML scalars;
    a list as ``fabric.oversubscription=[1,2]``).

    Examples
    --------
    >>> parse_inline("gpu=H100-SXM,nodes=4,fabric.oversubscription=[1,2]")
    {'gpu': 'H100-SXM', 'nodes': 4, 'fabric': {'oversubscription': [1, 2]}}
    """
    spec: dict[str, Any] = {}
    parts = _inline_parts(text)
    for part in filter(None, (p.strip() for p in parts)):
        key, sep, value = part.partition("=")
        if not sep:
            raise InputError(f"expected key=value, got {part!r}", file=text)
        key = key.strip()
        if not value.strip():
            raise InputError(f"no value after '=' in {part!r}", file=text, field=key or None)
        val = _SCALARS.get(value, _SCALARS)
        if val is _SCALARS:
            try:
                val = parse_yaml(value, text)
            except InputError as exc:   # a value is one line: its line number says nothing
                if (exc.field or "").startswith("line "):
                    exc = InputError(exc.message, file=exc.file)
                raise exc.located(field_prefix=key.strip() or None) from None
            if (val is None or isinstance(val, (str, int, float))) and len(_SCALARS) < 4096:
                _SCALARS[value] = val
        cur = spec
        *parents, leaf = key.split(".")
        if not all((*parents, leaf)):
            raise InputError(f"expected key=value with a key like gpu or host.cpu, got {part!r}",
                             file=text)
        for p in parents:
            cur = cur.setdefault(p, {})
            if not isinstance(cur, dict):
                raise InputError(f"{p} is a value, not a section of keys", file=text, field=key)
        cur[leaf] = val
    return spec


#: What a SYSTEM file is, in messages.
SYSTEM_FILE = "a YAML spec or system file"


def from_yaml_text(text: str, file: str, materialize_nodes: int | None = None,
                   first_node: int = 0) -> Topology:
    """A topology from the text of a YAML spec or system file named ``file``, with every check
    :func:`load` makes of a file (its size, the YAML, the values, the design): what a command
    writes as a system file is checked by this before it is written, so that it loads back.
    """
    size = len(text.encode("utf-8"))
    if size > MAX_YAML_BYTES:
        raise InputError(f"{size} bytes; at most {MAX_YAML_BYTES} bytes allowed for "
                         f"{SYSTEM_FILE}", file=file)
    return from_data(parse_yaml(text, file), Path(file).stem, file, materialize_nodes,
                     first_node)


def load(system: str, materialize_nodes: int | None = None, first_node: int = 0) -> Topology:
    """Load what a user names: a preset, a YAML file (spec or system file), or ``k=v,...``.

    Examples
    --------
    >>> load("gpu=A100-SXM4-80GB,gpus_per_node=8").meta["scale_up"]
    'nvswitch'
    """
    if not system.strip():
        raise InputError("empty; allowed: a preset name (see `gpufabric systems`), a YAML file "
                         "or key=value,...", field="SYSTEM")
    if "/" not in system and presets.exists(system):
        t = from_data(presets.data(system), system, f"preset {system}", materialize_nodes,
                      first_node)
        t.meta["description"] = presets.describe(system)
        t.meta["preset"] = system
        return t
    path = Path(system)
    kind = path_kind(system)    # None too for what cannot be a file name (a long inline spec)
    if names_a_path(system) and (path.suffix.lower() in (".yaml", ".yml", ".json") or kind):
        if kind is None:
            raise InputError("no such file, and not a preset name (see `gpufabric systems`)",
                             file=system)
        text = read_text(path, what=SYSTEM_FILE, max_bytes=MAX_YAML_BYTES)
        return from_yaml_text(text, system, materialize_nodes, first_node)
    if "=" in system:
        return from_spec(parse_inline(system), file=system, materialize_nodes=materialize_nodes,
                         first_node=first_node)
    from gpufabric.errors import unknown_name
    raise unknown_name("system (preset name, YAML file or key=value spec)", system,
                       presets.names())
