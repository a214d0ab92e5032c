"""Plain-data summaries of a system, for ``show``, ``p2p`` and ``compare`` (JSON-able dicts)."""

from __future__ import annotations

from collections import Counter
from statistics import median
from typing import Any

from gpufabric.topology import paths, rules
from gpufabric.topology.model import NVSWITCH, PCIE_SWITCH, Topology


def path_table(t: Topology, node: int = 0) -> dict[str, Any]:
    """The node's path matrix as parallel lists: labels, type, bw_GBps, lat_us, p2p, links."""
    labels, m = paths.matrix(t, node)
    bw = [[None if p.type == "X" else round(p.bw_GBps, 3) for p in row] for row in m]
    return {
        "labels": labels,
        "type": [[p.type for p in row] for row in m],
        "bw_GBps": bw,
        "lat_us": [[round(p.lat_us, 3) for p in row] for row in m],
        "p2p": [[p.p2p for p in row] for row in m],
        "links": [[[f"{a}-{b}:{k}" for a, b, k in p.links] for p in row] for row in m],
    }


def gpu_pairs(t: Topology, node: int = 0) -> list[paths.Path]:
    gpus = sorted(t.gpus(node), key=lambda d: d.index)
    return [paths.path(t, a.id, b.id) for i, a in enumerate(gpus) for b in gpus[i + 1:]]


def system_summary(t: Topology) -> dict[str, Any]:
    """One row of ``gpufabric compare``: what this way of connecting GPUs gives.

    Examples
    --------
    >>> from gpufabric.topology.build import from_spec
    >>> s = system_summary(from_spec({"gpu": "H100-SXM", "gpus_per_node": 8}))
    >>> s["pair_bw_GBps"], s["path_mix"]
    ({'min': 450.0, 'median': 450.0, 'max': 450.0}, {'NV18': 28})
    """
    pairs = gpu_pairs(t)
    bws = [p.bw_GBps for p in pairs] or [0.0]
    lanes = [r for r in rules.lane_budget(t) if r["node"] == 0]
    mix = Counter(p.type for p in pairs)
    return {
        "name": t.name,
        "description": t.meta.get("description", ""),
        "gpu": t.meta.get("spec", {}).get("gpu", sorted({g.model for g in t.gpus()})),
        "nodes": t.meta.get("nodes", t.node_count),
        "gpus_per_node": len(t.gpus(0)),
        "pair_bw_GBps": {"min": min(bws), "median": median(bws), "max": max(bws)},
        "p2p_pairs": sum(p.p2p for p in pairs),
        "pairs": len(pairs),
        "lanes_used": sum(r["used"] for r in lanes),
        "lanes_total": sum(r["lanes"] for r in lanes),
        "lanes_free": sum(r["free"] for r in lanes),
        "path_mix": dict(sorted(mix.items())),
        "pcie_switches": len(t.of_kind(PCIE_SWITCH, 0)),
        # the NVSwitch fabrics node 0's GPUs sit on (a rack-scale domain's is shared by trays)
        "nvswitches": len({v for g in t.gpus(0) for v, _ in t.neighbors(g.id)
                           if t.devices[v].kind == NVSWITCH}),
        "warnings": rules.warnings(t),
        "nvlink_domain": t.meta.get("nvlink_domain", len(t.gpus(0))),
        "fabric": ({k: t.meta["fabric"][k] for k in ("topology", "levels", "switches",
                                                     "bisection_GBps", "hops")}
                   if t.meta.get("fabric", {}).get("tiers") else None),
    }
