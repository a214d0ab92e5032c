"""The fewest GPUs that serve a load within its SLO on one system kind (``gpufabric recommend``).

A target is a model, a server design (a GPU kind's server, or a spec), a load (a rate or a
closed loop's users; fixed lengths or a named dataset; a shared prompt prefix; speculative
decoding) and the SLO (TTFT and/or TPOT at the 90th percentile, as the advisor judges it).
The answer reuses the advisor's serving evaluation whole: each layout of
:func:`gpufabric.workloads.inference.supernode.default_layouts` is one
:class:`gpufabric.advise.core._ServeJob` (the highest rate, or the most users, one instance
serves with 90% of its requests within the SLO), run through :class:`gpufabric.advise.core.Runner`;
a layout of ``w`` GPUs then needs ``ceil(load / per-instance)`` instances, as the advisor
counts a design's instances. Layouts are run narrowest first, and a layout wider than the
fewest GPUs found so far is not run (it cannot use fewer).

The design with the fewest GPUs (ties: the most spare capacity) is then simulated at the load
itself, one instance at its share (:func:`gpufabric.workloads.inference.serve.serve`), for
its predicted figures and the margin to each SLO; so is the next-smaller design (the most GPUs
below it: one instance fewer of a layout that meets the SLO, or one instance of a narrower
layout that meets it at no rate), for the SLO it misses.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Any

from gpufabric import catalog
from gpufabric.advise import core
from gpufabric.advise.scenario import Scenario, Serve, Space, Constraints
from gpufabric.errors import InputError

#: Widest instance tried by default (GPUs): a 64-GPU instance holds DeepSeek-V3 in bf16 on
#: 80 GB parts with room for its cache; ``max_instance_gpus`` widens it.
MAX_INSTANCE_GPUS = 64
#: The network of a multi-server instance when the spec names none: one 400G NDR InfiniBand
#: NIC per GPU (the advisor's widest per-GPU network).
DEFAULT_NIC = "ib-ndr"
#: Share of the requests that must meet the SLO (the advisor's verdict).
ATTAINMENT = 0.9


@dataclass(frozen=True)
class Target:
    """What must be served, where, and within which SLO."""

    serve: Serve                # model, load, lengths, SLO, precision, engine, speculative...
    node: dict[str, Any]        # one server's spec (topology.build's shorthand)
    max_instance_gpus: int = MAX_INSTANCE_GPUS
    #: also disaggregated xPyD units (1P1D, 1P2D, 2P1D) of each layout inside one server
    pd: bool = False


def server_spec(system: str, gpus_per_node: int | None = None) -> dict[str, Any]:
    """One server's spec from a GPU kind (its first server design of ``gpus_per_node`` GPUs,
    default 8, that the design rules build with NICs, else without; a rack-scale part: its
    whole NVLink domain) or an inline ``key=value,...`` spec, checked by the design rules.

    >>> server_spec("H100-SXM")
    {'gpu': 'H100-SXM', 'gpus_per_node': 8}
    """
    from gpufabric.topology.build import parse_inline
    if "=" in system:
        node = parse_inline(system)
        if gpus_per_node is not None:
            node["gpus_per_node"] = gpus_per_node
        node.setdefault("gpus_per_node", 8)
        for k in ("nodes",):
            node.pop(k, None)
        why = core._refusal(core.spec_string(node))
        if why:
            raise InputError(why, field="SYSTEM")
        return node
    gpu = catalog.gpu(system, field="SYSTEM")
    designs = core._server_designs(gpu, (gpus_per_node or 8,))
    if gpu.gpus_per_tray:               # a rack-scale part: its largest NVLink domain
        designs = designs[::-1]
    built = [n for n in designs if not core._refusal(core.spec_string(n))]
    for node in built:                  # the first that also takes NICs (instances may span)
        if nics(node):
            return node
    if built:
        return built[0]
    raise InputError(f"no buildable {gpus_per_node or 8}-GPU server of {gpu.name} (the design "
                     "rules refuse every one); give --gpus-per-node or a spec", field="SYSTEM")


def nics(node: dict[str, Any]) -> dict[str, Any] | None:
    """The NICs of ``node`` for instances across servers: the spec's own, else one
    :data:`DEFAULT_NIC` per GPU or per two GPUs, the first the design rules build (None: none
    fits, so every instance stays inside one server)."""
    gpn = int(node["gpus_per_node"])
    tries = [{"nic": node["nic"], "nics_per_node": node.get("nics_per_node", gpn)}] \
        if "nic" in node else [{"nic": DEFAULT_NIC, "nics_per_node": k}
                               for k in dict.fromkeys((gpn, max(1, gpn // 2)))]
    for net in tries:
        if not core._refusal(core.spec_string({**node, "nodes": 2, **net})):
            return net
    return None


def _candidate(t: Target) -> core.Candidate:
    """The advisor's candidate that holds the widest instance tried: enough servers of
    ``t.node`` with their NICs (a multi-server instance crosses them), or one server where
    the design rules fit no NICs in it."""
    gpn = int(t.node["gpus_per_node"])
    net = nics(t.node)
    nodes = max(1, math.ceil(t.max_instance_gpus / gpn)) if net else 1
    spec = {**t.node, "nodes": nodes, **net} if nodes > 1 and net else dict(t.node)
    return core.Candidate(gpu=catalog.gpu(str(t.node["gpu"])).name, gpus_per_node=gpn,
                          nodes=nodes, spec=spec, deployment="on-prem",
                          design=core.spec_string(t.node))


def _scenario(t: Target) -> Scenario:
    return Scenario(name="recommend", description="", train=None, serve=t.serve, services=(),
                    constraints=Constraints(), objective="lowest-cost", space=Space())


def demand(s: Serve) -> float:
    """The load: requests/s, or the closed loop's users."""
    return float(s.rate if s.rate is not None else s.concurrency or 0)


#: The xPyD units tried with ``pd`` (the advisor's).
PD_UNITS = ((1, 1), (1, 2), (2, 1))


def _pd_jobs(t: Target, jobs: list[tuple[Any, int]]) -> list[tuple[Any, int]]:
    """The advisor's xPyD jobs (:class:`gpufabric.advise.core._PDJob`) of each co-located
    layout that fits one server: both pools inside one server where they fit, else a server
    each (one 400G RoCE NIC per GPU carries the KV cache), with the GPUs one unit uses."""
    s, gpn = t.serve, int(t.node["gpus_per_node"])
    one = core.spec_string({**t.node, "nic": "roce-400", "nics_per_node": gpn})
    out: list[tuple[Any, int]] = []
    for j, w in jobs:
        for x, y in PD_UNITS:
            if max(x, y) * w > gpn:
                continue
            out.append((core._PDJob(s.model, one, one, j.layout, x, y, s.isl, s.osl,
                                    s.slo_ttft_ms, s.slo_tpot_ms, s.precision,
                                    (x + y) * w <= gpn, s.engine, s.chunked_prefill),
                        (x + y) * w))
    return out


def layouts(t: Target, runner: core.Runner) -> list[dict[str, Any]]:
    """Each layout's width, per-instance capacity (or why it has none) and the instances the
    load needs, narrowest first; a layout wider than the fewest GPUs found is left out. With
    ``t.pd``, xPyD units too (an instance is then a unit, its width the unit's GPUs)."""
    sc = _scenario(t)
    jobs: list[tuple[Any, int]] = [(j, w) for j, w in core._jobs(_candidate(t), sc,
                                                                 every=True)[1]
                                   if w <= t.max_instance_gpus]
    if t.pd:
        jobs += _pd_jobs(t, jobs)
    need = demand(t.serve)
    rows: list[dict[str, Any]] = []
    fewest = math.inf
    for width in sorted({w for _, w in jobs}):
        if width > fewest:
            break
        mine = [(j, w) for j, w in jobs if w == width]
        runner.run([j for j, _ in mine])
        for j, w in mine:
            r = runner[j]
            row: dict[str, Any] = {"layout": dict(j.layout), "gpus_per_instance": w, "job": j}
            if isinstance(j, core._PDJob):
                row["pd"] = f"{j.x}P{j.y}D"
            per = r.get("per_instance", r.get("per_unit"))
            if "error" in r or not per:
                row["error"] = r.get("error", "the SLO is not met at any load")
                row["field"] = r.get("field")
            else:
                n = max(1, math.ceil(need / per - 1e-9))
                row.update(per_instance=per, instances=n, gpus=n * w, capacity=n * per,
                           bottleneck=r["bottleneck"])
                fewest = min(fewest, n * w)
            rows.append(row)
    return rows


def _best(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    ok = [r for r in rows if "gpus" in r]
    return min(ok, key=lambda r: (r["gpus"], -r["capacity"], r["gpus_per_instance"])) \
        if ok else None


def _smaller(rows: list[dict[str, Any]], best: dict[str, Any]) -> dict[str, Any] | None:
    """The design of the most GPUs below ``best``'s: one instance fewer of a layout that
    meets the SLO, or one instance of a layout that meets it at no load (of equal GPUs, the
    first kind, then the most capacity: the closer to the target)."""
    out: list[tuple[int, int, dict[str, Any]]] = []
    for r in rows:
        w = r["gpus_per_instance"]
        if "per_instance" in r:
            k = (best["gpus"] - 1) // w
            if k >= 1:
                out.append((k * w, 1, {**r, "instances": k, "gpus": k * w,
                                       "capacity": k * r["per_instance"]}))
        elif w < best["gpus"]:
            out.append((w, 0, {**r, "instances": 1, "gpus": w}))
    return max(out, key=lambda x: (x[0], x[1], x[2].get("capacity") or 0.0))[2] \
        if out else None


def at_load(t: Target, row: dict[str, Any]) -> dict[str, Any]:
    """One instance of ``row``'s layout simulated at its share of the load (the advisor's
    trial size: at least 200 requests or 20 s of arrivals), and its figures against the SLO."""
    from gpufabric.workloads.inference.pd import serve_pd
    from gpufabric.workloads.inference.serve import serve
    s, job, n = t.serve, row["job"], row["instances"]
    try:
        if isinstance(job, core._PDJob):
            topo, dt, cfg = core.pd_setup(job)
        else:
            topo, cfg = core.serve_setup(job)
        if s.rate is not None:
            per = s.rate / n
            cfg = replace(cfg, rate=per, requests=max(core.SERVE_REQUESTS,
                                                      int(per * core.SERVE_DURATION_S)))
        else:
            cfg = replace(cfg, concurrency=math.ceil(demand(s) / n), rate=None)
        r = serve_pd(s.model, topo, cfg, (job.x, job.y), dt) \
            if isinstance(job, core._PDJob) else serve(s.model, topo, cfg)
    except InputError as exc:
        return {"error": exc.message}
    out = {"ttft_ms_p50": r["ttft_ms"]["p50"], "ttft_ms_p90": r["ttft_ms"]["p90"],
           "tpot_ms_p50": r["tpot_ms"]["p50"], "tpot_ms_p90": r["tpot_ms"]["p90"],
           "slo_attainment": r["slo_attainment"], "overloaded": bool(r.get("overloaded")),
           "output_tokens_per_s": r["throughput_tokens_per_s"] * n,
           "max_num_seqs": r.get("scheduler", {}).get("max_num_seqs"),
           "bottleneck": r["bottleneck"]}
    if r["tpot_ms"]["p50"]:
        out["tokens_per_s_per_user"] = 1000.0 / r["tpot_ms"]["p50"]
    if r.get("kv_tiers"):
        out["prefix_hit_rate"] = r["kv_tiers"]["hit_rate"]
    if r.get("capacity_requests_per_s"):          # what the instances serve at all
        out["saturation_requests_per_s"] = r["capacity_requests_per_s"] * n
    return out


def margins(s: Serve, p: dict[str, Any]) -> list[dict[str, Any]]:
    """Each SLO's target against the predicted 90th percentile: the margin in ms and as a
    share of the target (negative: missed)."""
    out = []
    for name, target, key in (("TTFT", s.slo_ttft_ms, "ttft_ms_p90"),
                              ("TPOT", s.slo_tpot_ms, "tpot_ms_p90")):
        if target is None or p.get(key) is None:
            continue
        m = target - p[key]
        out.append({"slo": name, "target_ms": target, "p90_ms": p[key], "margin_ms": m,
                    "margin": m / target})
    return out


def misses(s: Serve, row: dict[str, Any], p: dict[str, Any]) -> str:
    """The SLO a design misses, in words."""
    if "error" in p:
        return f"every SLO: it cannot run ({brief(p['error'])})"
    missed = [f"{m['slo']} (p90 {m['p90_ms']:,.1f} ms against {m['target_ms']:g} ms)"
              for m in margins(s, p) if m["margin_ms"] < 0]
    why = " and ".join(missed)
    if p["slo_attainment"] < ATTAINMENT and not why:
        why = (f"the SLO together: {p['slo_attainment']:.0%} of requests within both, "
               f"{ATTAINMENT:.0%} needed")
    why = why or f"{p['slo_attainment']:.0%} of requests within the SLO at this load"
    unit = "requests/s" if s.rate is not None else "users"
    if p.get("overloaded") and p.get("saturation_requests_per_s"):
        why += (f"; the load is above the {p['saturation_requests_per_s']:,.2f} requests/s "
                "it serves at all")
    elif row.get("capacity"):
        why += f"; it meets the SLO up to {row['capacity']:,.2f} {unit}"
    return why


def _design(t: Target, row: dict[str, Any]) -> dict[str, Any]:
    gpn = int(t.node["gpus_per_node"])
    w = row["gpus_per_instance"]
    per_server = max(1, gpn // w) if w <= gpn else 0
    servers = math.ceil(w / gpn) * row["instances"] if w > gpn else \
        math.ceil(row["instances"] / per_server)
    span = max(1, math.ceil(w / gpn))
    if "pd" in row and not row["job"].shared:     # a unit's pools: a server each
        servers, span = 2 * row["instances"], 2
    spec = dict(t.node)
    if servers > 1:
        spec["nodes"] = servers
    if w > gpn:                  # an instance across servers: their NICs carry its traffic
        spec.update(nics(t.node) or {})
    out = {k: row[k] for k in ("layout", "gpus_per_instance", "instances", "gpus")}
    out["pd"] = row.get("pd")
    out.update(servers_per_instance=span, servers=servers,
               capacity=row.get("capacity"), per_instance=row.get("per_instance"),
               system=row["job"].prefill if "pd" in row else core.spec_string(spec))
    out["serve_command"] = serve_command(t, out, row["job"])
    return out


def serve_command(t: Target, d: dict[str, Any], job: Any = None) -> str:
    """The ``gpufabric serve`` line that runs the design at the load (its figures converge
    over more requests than the recommender's trials, so they differ by a few per cent)."""
    s = t.serve
    lay = {"tp": 1, "ep": 1, "dp_attention": 1, **d["layout"]}
    words = ["gpufabric", "serve", s.model, d["system"], "--tp", str(lay["tp"])]
    words += [w for k, flag in (("ep", "--ep"), ("dp_attention", "--dp-attention"))
              if lay[k] > 1 for w in (flag, str(lay[k]))]
    if job is not None and isinstance(job, core._PDJob):    # one unit at its share
        words[3] = job.prefill
        words += ["--pd", str(d["pd"])] + ([] if job.shared else
                                           ["--decode-system", job.decode])
        words += ["--rate", f"{(s.rate or 0) / d['instances']:g}"]
    else:
        words += ["--replicas", str(d["instances"])]
        words += ["--rate", f"{s.rate:g}"] if s.rate is not None else \
            ["--concurrency", str(s.concurrency)]
    words += ["--dataset", s.dataset] if s.dataset else \
        ["--isl", str(s.isl), "--osl", str(s.osl)]
    words += ["--precision", s.precision, "--engine", s.engine]
    if s.chunked_prefill is not None:
        words += ["--chunked-prefill" if s.chunked_prefill else "--no-chunked-prefill"]
    words += [w for flag, v in (("--slo-ttft", s.slo_ttft_ms), ("--slo-tpot", s.slo_tpot_ms))
              if v is not None for w in (flag, f"{v:g}")]
    if s.speculative is not None:
        m, k, acc, draft = s.speculative
        words += ["--spec", m, "--spec-tokens", str(k),
                  "--acceptance", ",".join(f"{a:g}" for a in acc)]
        words += ["--draft-model", draft] if draft else []
    if s.prefix_tokens:
        words += ["--prefix-tokens", str(s.prefix_tokens)]
    return " ".join(words)


def recommend(t: Target, *, jobs: int = 1, ray: bool = False) -> dict[str, Any]:
    """The fewest GPUs of ``t.node``'s servers that serve ``t``'s load within its SLO, its
    predicted figures and margins, and the next-smaller design with the SLO it misses."""
    from gpufabric import sweep
    t0 = time.perf_counter()
    with sweep.workers(jobs if not ray else 1):
        rows = layouts(t, core.Runner(ray=ray, jobs=jobs))
    best = _best(rows)
    s = t.serve
    out: dict[str, Any] = {"model": s.model, "gpu": catalog.gpu(str(t.node["gpu"])).name,
                           "server": core.spec_string(t.node), "engine": t.serve.engine,
                           "load": load_dict(s), "slo": {"ttft_ms": s.slo_ttft_ms,
                                                         "tpot_ms": s.slo_tpot_ms,
                                                         "attainment": ATTAINMENT}}
    out["layouts"] = [{k: v for k, v in r.items() if k != "job"} for r in rows]
    if best is None:
        errs = "; ".join(f"{_lay(r['layout'])}: {brief(r['error'])}" for r in rows)
        one = "" if nics(t.node) else ", instances inside one server (the design rules " \
            "fit no NICs in it)"
        # an SLO no layout can meet even unloaded is that option's error, else the widest
        # instance's
        fields = {r.get("field") for r in rows if r.get("field") in SLO_OPTIONS}
        raise InputError(f"no layout of up to {t.max_instance_gpus} GPUs serves "
                         f"{s.model} within the SLO on {out['server']}{one} ({errs})",
                         field=fields.pop() if len(fields) == 1 else "--max-instance-gpus")
    pred = at_load(t, best)
    out["design"] = {**_design(t, best), "predicted": pred, "margins": margins(s, pred)}
    small = _smaller(rows, best)
    if small is not None:
        p = at_load(t, small)
        out["next_smaller"] = {**_design(t, small), "predicted": p,
                               "misses": misses(s, small, p)}
    else:
        out["next_smaller"] = None
    out["elapsed_s"] = time.perf_counter() - t0
    return out


def load_dict(s: Serve) -> dict[str, Any]:
    """The load as the answer states it."""
    out: dict[str, Any] = {"rate": s.rate, "concurrency": s.concurrency, "isl": s.isl,
                           "osl": s.osl, "dataset": s.dataset, "precision": s.precision,
                           "prefix_tokens": s.prefix_tokens}
    if s.speculative is not None:
        m, k, acc, draft = s.speculative
        out["speculative"] = {"method": m, "tokens": k, "acceptance": list(acc),
                              "draft_model": draft}
    return out


#: The options of an SLO, as the serving model names them in its refusals.
SLO_OPTIONS = ("--slo-ttft", "--slo-tpot")


def brief(message: str) -> str:
    """An error in one short clause (the JSON keeps it whole).

    >>> brief("30 ms is impossible: one request alone takes 33.05 ms per output token here")
    '30 ms is impossible: one request alone takes 33.05 ms per output token here'
    >>> brief("llama3-70b in bf16 does not fit on 1 H100-SXM (vllm, 0.9 x 80.0 GiB): per GPU "
    ...       "the weights take 131.4 GiB, activations and workspace 2.4 GiB, and the rest")
    'llama3-70b in bf16 does not fit on 1 H100-SXM'
    """
    return message if len(message) <= 100 else message.split(" (")[0].split(": ")[0]


def _lay(lay: dict[str, int]) -> str:
    return " ".join(f"{k}{v}" for k, v in lay.items())


__all__ = ["Target", "brief", "recommend", "server_spec", "layouts", "margins", "misses", "demand"]
