"""``gpufabric compare``: archetypes side by side, as plain rows and as a terminal table."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from gpufabric.report.summary import system_summary
from gpufabric.topology.model import Topology

#: message sizes of the busbw-vs-size curves in the report (8 B .. 8 GB, x4 steps)
SWEEP_SIZES = [8 * 4 ** k for k in range(16)]


def collective_columns(t: Topology) -> dict[str, Any]:
    """all_reduce busbw at 1 GB, 8-byte all_reduce latency, all_to_all busbw at 1 GB."""
    from gpufabric import collectives
    return collectives.summary(t)


def rows(topos: list[Topology]) -> list[dict[str, Any]]:
    """One summary row per system: topology facts plus collective figures."""
    out = []
    for t in topos:
        row = system_summary(t)
        row["collectives"] = collective_columns(t)
        out.append(row)
    return out


def _fmt(x: Any, nd: int = 1) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}" if x < 1000 else f"{x:,.0f}"
    return str(x)


def table(rs: list[dict[str, Any]]) -> Table:
    tb = Table(title="Ways of connecting GPUs, side by side", box=None)
    for col in ("system", "GPUs", "pair GB/s min/med/max", "P2P pairs", "lanes used/left",
                "path mix", "PCIe sw", "NVSw", "AR busbw 1GB", "AR 8B us", "A2A busbw 1GB"):
        tb.add_column(col, justify="left" if col in ("system", "path mix") else "right",
                      no_wrap=True)
    for r in rs:
        bw = r["pair_bw_GBps"]
        c = r.get("collectives") or {}
        gpus = f"{r['nodes']}x{r['gpus_per_node']}" if r["nodes"] > 1 else str(r["gpus_per_node"])
        tb.add_row(
            r["name"], gpus,
            f"{_fmt(bw['min'])}/{_fmt(bw['median'])}/{_fmt(bw['max'])}",
            f"{r['p2p_pairs']}/{r['pairs']}",
            f"{r['lanes_used']}/{r['lanes_free']}",
            " ".join(f"{k}:{v}" for k, v in r["path_mix"].items()),
            str(r["pcie_switches"]), str(r["nvswitches"]),
            _fmt(c.get("allreduce_busbw_1GB")), _fmt(c.get("allreduce_8B_lat_us")),
            _fmt(c.get("alltoall_busbw_1GB")))
    return tb
