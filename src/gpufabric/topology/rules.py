"""Rules that make a design impossible, and facts worth a warning.

:func:`check` raises :class:`~gpufabric.errors.InputError` on the first impossible thing:

* PCIe lanes beyond what the CPUs provide (per socket and for the whole host);
* a PCIe switch with more lanes (upstream + downstream) or ports than the chip owns;
* NVLink (or Infinity Fabric) links beyond what a GPU has;
* an SLI bridge between different GPU models (CrossFire allows mixed models), or more GPUs
  on one bridge than it takes, or a bridge the card does not accept.

:func:`lane_budget` and :func:`warnings` feed ``gpufabric show``.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from gpufabric import catalog
from gpufabric.errors import InputError
from gpufabric.topology.model import CPU, GPU, PCIE_SWITCH, Topology


def lane_budget(t: Topology) -> list[dict[str, Any]]:
    """PCIe lanes used and free per CPU socket (root ports only; switches fan out behind them).

    Returns one row per CPU: ``{"cpu", "node", "socket", "model", "lanes", "used", "free"}``.
    The lanes of a socket are the system's usable lanes split evenly over its sockets
    (a 2-socket EPYC Milan host: 160 / 2 = 80 per socket).
    """
    rows = []
    sockets_per_node: dict[int, int] = defaultdict(int)
    for c in t.of_kind(CPU):
        sockets_per_node[c.node] += 1
    for c in t.of_kind(CPU):
        if not c.model:
            continue
        cpu = catalog.cpu(c.model)
        n_sock = sockets_per_node[c.node]
        lanes = cpu.lanes(n_sock) // n_sock
        used = sum(ln.lanes for _, ln in t.neighbors(c.id) if ln.kind == "pcie")
        rows.append({"cpu": c.id, "node": c.node, "socket": c.index, "model": cpu.name,
                     "lanes": lanes, "used": used, "free": lanes - used})
    return rows


def check(t: Topology, file: str | None = None) -> None:
    """Raise :class:`InputError` if the design is impossible; return None if it is possible."""
    _check_lanes(t, file)
    _check_switches(t, file)
    _check_gpu_links(t, file)
    _check_bridges(t, file)


def _check_lanes(t: Topology, file: str | None) -> None:
    rows = lane_budget(t)
    per_node: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        per_node[r["node"]].append(r)
    for node, socks in per_node.items():
        used = sum(r["used"] for r in socks)
        total = sum(r["lanes"] for r in socks)
        model = socks[0]["model"]
        if used > total:
            raise InputError(
                f"node {node} needs {used} PCIe lanes at the CPU root ports but "
                f"{len(socks)}x {model} provide {total}; use fewer or narrower devices, or PCIe "
                "switches", file=file, field="host")
        for r in socks:
            if r["used"] > r["lanes"]:
                raise InputError(
                    f"socket {r['socket']} of node {node} needs {r['used']} PCIe lanes but a "
                    f"{model} socket provides {r['lanes']} in this host; spread devices over the "
                    "sockets or add PCIe switches", file=file, field="host")


def _check_switches(t: Topology, file: str | None) -> None:
    for sw in t.of_kind(PCIE_SWITCH):
        if not sw.model:
            continue
        chip = catalog.pcie_switch(sw.model)
        pcie = [ln for _, ln in t.neighbors(sw.id) if ln.kind == "pcie"]
        lanes = sum(ln.lanes for ln in pcie)
        down = sum(ln.lanes for ln in pcie if ln.a == sw.id)
        if lanes > chip.lanes:
            raise InputError(
                f"PCIe switch {sw.id} ({chip.name}) has {chip.lanes} lanes but its ports use "
                f"{lanes} ({down} downstream + {lanes - down} upstream); allowed: at most "
                f"{chip.lanes - (lanes - down)} downstream lanes", file=file,
                field="host.pcie_switches")
        if len(pcie) > chip.ports:
            raise InputError(f"PCIe switch {sw.id} ({chip.name}) has {chip.ports} ports, "
                             f"{len(pcie)} are used", file=file, field="host.pcie_switches")


def _check_gpu_links(t: Topology, file: str | None) -> None:
    for g in t.of_kind(GPU):
        if not g.model:
            _check_unknown_gpu_links(t, g.id, file)
            continue
        gpu = catalog.gpu(g.model)
        used = sum(ln.count for _, ln in t.neighbors(g.id) if ln.kind in ("nvlink", "xgmi")
                   and "bridge" not in ln.attrs)
        if used > gpu.peer_links:
            what = "Infinity Fabric" if (gpu.peer_link or "").startswith("xgmi") else "NVLink"
            raise InputError(f"{g.id} ({gpu.name}) uses {used} {what} links but has "
                             f"{gpu.peer_links}; allowed: at most {gpu.peer_links}",
                             file=file, field="nvlink_links")


def _check_unknown_gpu_links(t: Topology, gpu_id: str, file: str | None) -> None:
    """A GPU of unknown model has at most the NVLink links of the catalog's GPU with the most of
    that generation (18 of NVLink 4 or 5, 12 of NVLink 3): ``count: 9999`` is a typo."""
    nv = [ln for _, ln in t.neighbors(gpu_id) if ln.kind == "nvlink" and "bridge" not in ln.attrs]
    if not nv:
        return
    gen = max(ln.gen for ln in nv) or None
    most, name = catalog.most_nvlinks(gen)
    used = sum(ln.count for ln in nv)
    if used > most:
        of = f"NVLink {gen}" if gen else "NVLink"
        raise InputError(f"{gpu_id} (model unknown) uses {used} {of} links, but no GPU in the "
                         f"catalog has more than {most} ({name}); allowed: at most {most}",
                         file=file, field="nvlink_links")


def _check_bridges(t: Topology, file: str | None) -> None:
    groups: dict[str, set[str]] = defaultdict(set)   # bridge instance -> gpus
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    bridged = [ln for ln in t.links if "bridge" in ln.attrs]
    for ln in bridged:
        parent.setdefault(ln.a, ln.a)
        parent.setdefault(ln.b, ln.b)
        parent[find(ln.a)] = find(ln.b)
    kinds: dict[str, str] = {}
    for ln in bridged:
        root = find(ln.a)
        groups[root].update((ln.a, ln.b))
        kinds[root] = ln.attrs["bridge"]
    for root, members in groups.items():
        br = catalog.bridge(kinds[root])
        models = sorted({t.devices[m].model for m in members})
        if br.identical_gpus and len(models) > 1:
            raise InputError(f"{br.kind.upper()} bridge {br.name} needs identical GPUs, got "
                             f"{', '.join(models)}; allowed: one model (CrossFire allows mixed "
                             "models)", file=file, field="gpu")
        if len(members) > br.max_gpus:
            raise InputError(f"bridge {br.name} joins at most {br.max_gpus} GPUs, got "
                             f"{len(members)}", file=file, field="gpus_per_node")
        for m in sorted(members):
            gpu = catalog.gpu(t.devices[m].model) if t.devices[m].model else None
            if gpu and br.name not in gpu.bridges:
                raise InputError(f"{gpu.name} does not take the {br.name} bridge (it takes: "
                                 f"{', '.join(gpu.bridges) or 'none'})", file=file,
                                 field="bridge")


def warnings(t: Topology) -> list[str]:
    """Things that are possible but worth knowing (no P2P, narrow links, lanes nearly gone)."""
    out = []
    for r in lane_budget(t):
        if r["free"] < 16 and r["lanes"]:
            out.append(f"{r['cpu']}: only {r['free']} PCIe lanes left at the root ports")
    p2p = t.meta.get("p2p", True)
    gpus = t.gpus()
    no_p2p = sorted({g.model for g in gpus if g.model and not catalog.gpu(g.model).p2p_pcie})
    if no_p2p or p2p is False:
        out.append("GPU peer-to-peer over PCIe is off"
                   + (f" ({', '.join(no_p2p)}: GeForce cards with the stock driver)"
                      if no_p2p else "") + ": GPU-GPU traffic bounces through host memory")
    for ln in t.links:
        if ln.kind == "pcie" and ln.b in t.devices and t.devices[ln.b].kind == GPU:
            gpu = t.devices[ln.b]
            want = catalog.gpu(gpu.model).pcie_lanes if gpu.model else ln.lanes
            if ln.lanes < want:
                out.append(f"{gpu.id} runs at x{ln.lanes} (card is x{want})")
    if any(ln.kind in ("sli", "crossfire") for ln in t.links):
        out.append("SLI / CrossFire bridges carry graphics frames only; compute traffic uses PCIe")
    return out
