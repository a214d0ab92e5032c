"""Serving advice as buyers pose it: throughput per GPU and cost per million output tokens
against interactivity (output tokens/s one user sees), with the crossovers named.

Published cost-per-token comparisons draw each system's best throughput per GPU, and its
cost per token, against interactivity: a TPOT target of 1000 / x ms. :func:`sweep` ranks the
scenario's designs at each target (:func:`gpufabric.advise.core.advise`, the SLO's TPOT set
to the target) and keeps, per GPU kind and deployment, the design that serves the load
cheapest per token at its capacity: its hourly cost over the output tokens it serves within
the SLO when run full. Where the cheapest kind changes from one target to the next, the
crossover is named ("B200 on-prem is cheapest per token up to 50 tokens/s per user, GB200
on-prem from 100").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gpufabric.advise import core
from gpufabric.advise.prices import Prices
from gpufabric.advise.scenario import Scenario
from gpufabric.errors import InputError


def kind(c: core.Candidate) -> str:
    """The system kind a design belongs to on the interactivity chart: its GPU and where it
    runs (an on-premises build, or a cloud instance)."""
    return f"{c.gpu} {c.instance}" if c.deployment == "cloud" and c.instance else \
        f"{c.gpu} {c.deployment}"


def at_capacity(c: core.Candidate) -> dict[str, float] | None:
    """Output tokens/s per GPU a design serves within the SLO when run full, and its $ per
    million output tokens then (None when it has no serving capacity or no price)."""
    serve = c.metrics.get("serve")
    per_h = core.hourly(c)
    if not serve or per_h is None:
        return None
    tps = float(serve["tokens_per_s_capacity"])
    if tps <= 0:
        return None
    return {"tokens_per_s_per_gpu": tps / c.gpus, "usd_per_mtok": per_h / (tps * 3600 / 1e6),
            "usd_per_hour": per_h}


def sweep(sc: Scenario, prices: Prices, targets: tuple[float, ...],
          on_target: Callable[[int, int], None] | None = None, **advise_kw: Any) -> dict:
    """The scenario at each interactivity target: per system kind, its best design's
    tokens/s per GPU and $/Mtok at capacity (``rows``), the cheapest kind per target
    (``cheapest``) and the crossovers in words (``crossovers``). ``on_target(1, total)`` is
    told as each target is done."""
    if sc.serve is None:
        raise InputError("an interactivity sweep needs a serve workload", file=sc.file or None,
                         field="workloads.serve")
    rows: list[dict[str, Any]] = []
    cheapest: list[dict[str, Any]] = []
    # the designs and their prices do not depend on the target: made once, ranked at each
    jobs = core.local_jobs(advise_kw.get("jobs", 1), bool(advise_kw.get("ray")))
    designs = core.priced_designs(sc, prices, advise_kw.get("kwh_usd", 0.10), jobs)
    for x in targets:
        st = replace(sc, serve=replace(sc.serve, slo_tpot_ms=1000.0 / x))
        adv = core.advise(st, prices, designs=designs, **advise_kw)
        best: dict[str, dict[str, Any]] = {}
        for c in adv.ranked:
            fig = at_capacity(c)
            if fig is None:
                continue
            k = kind(c)
            if k not in best or fig["usd_per_mtok"] < best[k]["usd_per_mtok"]:
                best[k] = {"interactivity": x, "tpot_ms": 1000.0 / x, "kind": k,
                           "design": core.describe(c), "gpus": c.gpus, **fig}
        found = sorted(best.values(), key=lambda r: r["usd_per_mtok"])
        rows += found
        unpriced = sorted({kind(c) for c in adv.ranked if core.hourly(c) is None})
        why = "" if found else (adv.infeasible or {}).get("message") or (
            f"designs serve it, but none has a price ({', '.join(unpriced)}: give one with "
            "--prices)" if unpriced else "no design serves it")
        cheapest.append({"interactivity": x, "kind": found[0]["kind"] if found else None,
                         "reason": why})
        if on_target:
            on_target(1, len(targets))
    return {"scenario": sc.name, "targets": list(targets), "rows": rows,
            "cheapest": cheapest, "crossovers": crossovers(cheapest)}


def crossovers(cheapest: list[dict[str, Any]]) -> list[str]:
    """Where the cheapest system kind changes between consecutive targets, in words.

    >>> crossovers([{"interactivity": 20, "kind": "B200 on-prem"},
    ...             {"interactivity": 50, "kind": "B200 on-prem"},
    ...             {"interactivity": 100, "kind": "GB200 on-prem"}])
    ['B200 on-prem is cheapest per token up to 50 tokens/s per user, GB200 on-prem from 100']
    """
    out = []
    for a, b in zip(cheapest, cheapest[1:], strict=False):
        if a["kind"] and b["kind"] and a["kind"] != b["kind"]:
            out.append(f"{a['kind']} is cheapest per token up to {a['interactivity']:g} "
                       f"tokens/s per user, {b['kind']} from {b['interactivity']:g}")
        elif a["kind"] and not b["kind"]:
            out.append(f"no design serves the load at {b['interactivity']:g} tokens/s per user "
                       f"({a['kind']} is the last to, at {a['interactivity']:g})")
    return out
