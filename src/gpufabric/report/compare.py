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


def _fmt(x: Any, nd: int = 1, compact: bool = False) -> str:
    if x is None:
        return "-"
    if compact and isinstance(x, (int, float)) and x == int(x):
        return f"{int(x)}"
    if isinstance(x, float):
        return f"{x:.{nd}f}" if x < 1000 else f"{x:,.0f}"
    return str(x)


def _bw_range(bw: dict[str, Any]) -> str:
    """``min/median/max`` of the pair bandwidths, or one number when every pair is alike."""
    vals = [bw["min"], bw["median"], bw["max"]]
    if vals[0] == vals[2]:
        return _fmt(vals[0], compact=True)
    return "/".join(_fmt(v, compact=True) for v in vals)


def table(rs: list[dict[str, Any]]) -> Table:
    """The comparison as a terminal table that fits 100 columns (values never cut; in a
    narrower terminal the system names and the path mix wrap).

    Examples
    --------
    >>> from io import StringIO
    >>> from rich.console import Console
    >>> from gpufabric.topology import presets
    >>> from gpufabric.topology.build import load as load_system
    >>> out = Console(file=StringIO(), width=100)
    >>> out.print(table(rows([load_system("dgx-a100")])))
    >>> max(len(line) for line in out.file.getvalue().splitlines()) <= 100
    True
    """
    tb = Table(title="Ways of connecting GPUs, side by side", box=None, pad_edge=False,
               collapse_padding=True, padding=(0, 1),
               caption="AR 1G, A2A 1G: all_reduce, all_to_all busbw at 1 GB (GB/s); "
                       "AR 8B: 8-byte all_reduce time (us)")
    heads = [("system", "left"), ("GPUs", "right"), ("pair GB/s\nmin/med/max", "right"),
             ("P2P\npairs", "right"), ("lanes\nuse/free", "right"), ("path\nmix", "left"),
             ("PCIe\nsw", "right"), ("NV\nSw", "right"), ("AR 1G\nGB/s", "right"),
             ("AR 8B\nus", "right"), ("A2A 1G\nGB/s", "right")]
    for col, justify in heads:   # names and the path mix wrap in a narrow terminal
        tb.add_column(col, justify=justify,  # type: ignore[arg-type]
                      no_wrap=col not in ("system", "path\nmix"), overflow="fold")
    for r in rs:
        c = r.get("collectives") or {}
        gpus = f"{r['nodes']}x{r['gpus_per_node']}" if r["nodes"] > 1 else str(r["gpus_per_node"])
        tb.add_row(
            r["name"], gpus, _bw_range(r["pair_bw_GBps"]),
            f"{r['p2p_pairs']}/{r['pairs']}",
            f"{r['lanes_used']}/{r['lanes_free']}",
            "\n".join(f"{k}:{v}" for k, v in r["path_mix"].items()),
            str(r["pcie_switches"]), str(r["nvswitches"]),
            _fmt(c.get("allreduce_busbw_1GB")), _fmt(c.get("allreduce_8B_lat_us")),
            _fmt(c.get("alltoall_busbw_1GB")))
    return tb
