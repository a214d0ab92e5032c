"""CLI: schedule command (see gpufabric.scheduler)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from gpufabric.cli.common import Progress, app, emit_json, note, refuse_alone, whole
from gpufabric.errors import InputError

TRACE_HELP = ("An openb pod list (default, cpu050, gpushare40, multigpu20, gpuspec10; from "
              "--data-dir, $GPUFABRIC_DATA_DIR or `gpufabric data fetch openb`; without them "
              "the synthetic openb-like workload), synthetic-openb, or a CSV path with the "
              "openb columns.")
NODES_HELP = ("gpu_node or all_node (openb node lists, found like TRACE; without them their "
              "synthetic twins), a CSV path with the openb node columns, or a spec like "
              "'V100M32x8*16+tpu-v4-8*4+cpu*32'.")


@app.command()
def schedule(
    ctx: typer.Context,
    trace: str = typer.Argument(..., help=TRACE_HELP),
    nodes: str = typer.Option("gpu_node", "--nodes", help=NODES_HELP),
    policy: str = typer.Option("fgd", "--policy",
                               help="Placement policy, or 'all' to compare them all."),
    mode: str = typer.Option("arrival", "--mode", help="arrival (FGD paper protocol) or replay."),
    seed: int = typer.Option(42, "--seed", help="First seed; runs use seed, seed+1, ..."),
    runs: int | None = typer.Option(None, "--runs", callback=whole(1, 1000),
                                       help="Seeds to average (default: 10 arrival, 1 replay)."),
    failures: str | None = typer.Option(
        None, "--failures", help="replay: 'mtbf=500h[,repair=2h]', 'NODE@TIME[+REPAIR],...' "
        "or a file of such items."),
    queue: str = typer.Option("fifo", "--queue", help="replay: queue order, fifo or priority "
                              "(with preemption)."),
    routing: str = typer.Option("kind", "--routing", help="Route jobs by kind (kind) or not "
                                "(none)."),
    checkpoint: str = typer.Option("30m", "--checkpoint", help="replay: checkpoint interval "
                                   "of jobs that give none (0: restart from scratch)."),
    load: float = typer.Option(1.0, "--load", help="replay: divide arrival times by this."),
    ratio: float = typer.Option(1.3, "--ratio", help="arrival: GPU request to pack, as a "
                                "multiple of capacity."),
    jobs_out: bool = typer.Option(False, "--jobs", help="replay --json: include every job."),
    data_dir: str | None = typer.Option(None, "--data-dir", help="A directory with the openb "
                                        "CSV files (default: $GPUFABRIC_DATA_DIR, then the "
                                        "cache `gpufabric data fetch openb` fills)."),
    json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Schedule a trace on a cluster and measure a placement policy (or --policy all)."""
    from gpufabric.scheduler import REGISTRY
    from gpufabric.scheduler.engine import check_load, check_ratio, check_seed

    if mode not in ("arrival", "replay"):
        raise InputError(f"unknown mode '{mode}' (allowed: arrival, replay)", field="--mode")
    names = REGISTRY.names("placement")
    policies = names if policy == "all" else [policy]
    for p in policies:
        REGISTRY.get("placement", p)  # InputError naming the known ones
    REGISTRY.get("queue", queue)
    REGISTRY.get("routing", routing)
    if runs is None:
        runs = 10 if mode == "arrival" else 1
    check_seed(seed)
    check_load(load)
    check_ratio(ratio)
    refuse_alone(ctx, [(name, mode == "replay", "applies only with --mode replay")
                       for name in ("failures", "queue", "checkpoint", "load", "jobs_out")]
                 + [("ratio", mode == "arrival", "applies only with --mode arrival (the "
                     "packing target)")])
    cluster, jobs, stand_in = _load(nodes, trace, data_dir)
    seeds = list(range(seed, seed + runs))
    if mode == "arrival":
        _arrivals(cluster, jobs, policies, seeds, ratio, routing, json)
    else:
        _replays(cluster, jobs, policies, seeds, json, jobs_out=jobs_out, failures=failures,
                 checkpoint=checkpoint, queue=queue, routing=routing, load=load)
    note(stand_in)


def _arrivals(cluster, jobs, policies: list[str], seeds: list[int], ratio: float, routing: str,
              json: bool) -> None:
    """--mode arrival: each policy over the seeds, as a table or JSON."""
    from gpufabric.scheduler.arrival import ArrivalRun, run_arrivals
    results = []
    with Progress("schedule", len(policies) * len(seeds)) as progress:
        for p in policies:
            def ran(r: ArrivalRun, p: str = p) -> None:
                progress.step(f"{p} seed {r.seed}")
            results.append(run_arrivals(cluster, jobs, p, seeds, ratio, routing, on_run=ran))
    if json:
        out = [dict(_arrival_json(r)) for r in results]
        emit_json(out[0] if len(out) == 1 else {"mode": "arrival", "trace": jobs.source,
                                                 "nodes": cluster.source, "seeds": seeds,
                                                 "policies": out})
    else:
        _arrival_table(results, jobs, cluster, seeds)


def _replays(cluster, jobs, policies: list[str], seeds: list[int], json: bool, *,
             jobs_out: bool, failures: str | None, checkpoint: str, queue: str, routing: str,
             load: float) -> None:
    """--mode replay: each policy and seed replayed, as a table or JSON."""
    from gpufabric.scheduler.failures import parse_duration, parse_failures
    from gpufabric.scheduler.replay import run_replay
    spec = parse_failures(failures, cluster.names) if failures else None
    ck = parse_duration(checkpoint, "--checkpoint")
    span = float(jobs.creation.max() - jobs.creation.min()) / load if len(jobs) else 1.0
    replays = []
    with Progress("schedule", len(policies) * len(seeds)) as progress:
        for p in policies:
            for s in seeds:
                replays.append(run_replay(cluster, jobs, p, queue=queue, seed=s, failures=spec,
                                          routing=routing, default_checkpoint_s=ck, load=load))
                progress.step(f"{p} seed {s}")
    if not json:
        _replay_table(replays, span)
        return
    out = []
    for r in replays:
        d = dataclasses.asdict(r)
        if not jobs_out:
            d.pop("jobs")
        out.append(d)
    emit_json(out[0] if len(out) == 1 else {"mode": "replay", "runs": out})

def _load(nodes: str, trace: str, data_dir: str | None):
    """The cluster and the jobs; an openb name whose file is nowhere falls back to its
    synthetic twin, with a note on stderr (explicit paths and --data-dir never fall back)."""
    from gpufabric.scheduler import load_jobs, load_nodes
    from gpufabric.scheduler.cluster import NODE_LISTS
    from gpufabric.downloads import DataMissing
    from gpufabric.scheduler.jobs import TRACES
    from gpufabric.scheduler.synthetic import NAME

    if data_dir is not None and not Path(data_dir).is_dir():
        raise InputError("not a directory", file=data_dir, field="--data-dir")
    missing: list[str] = []

    def load_or_stand_in(load, name, known, what, stand_in):
        try:
            return load(name, data_dir)
        except DataMissing:
            if name not in known or data_dir is not None:
                raise
            missing.append(f"{what} '{name}'")
            return load(stand_in)

    cluster = load_or_stand_in(load_nodes, nodes, NODE_LISTS, "node list", f"{NAME}:{nodes}")
    jobs = load_or_stand_in(load_jobs, trace, TRACES, "trace", NAME)
    text = ""
    if missing:
        text = (f"openb {' and '.join(missing)} not found (--data-dir, $GPUFABRIC_DATA_DIR, "
                "or `gpufabric data fetch openb`); the results above are on the synthetic "
                f"openb-like {'cluster and workload' if len(missing) == 2 else 'stand-in'} "
                f"({NAME}, see docs/scheduler.md)")
    return cluster, jobs, text


def _arrival_json(r) -> dict:
    d = dataclasses.asdict(r)
    d["allocation_pct_at_100"] = r.at(100)
    d["allocation_pct_at_130"] = r.at(130)
    d["runs"] = [{k: v for k, v in run.items() if k != "allocation_pct"} | {
        "allocation_pct_at_100": run["allocation_pct"][100]} for run in d["runs"]]
    return d


def _wide(min_width: int) -> Console:
    """A console at least ``min_width`` wide: wider than the terminal beats cut cells."""
    c = Console()
    return c if c.width >= min_width else Console(width=min_width)


def _arrival_table(results, jobs, cluster, seeds) -> None:
    console = _wide(110)
    t = Table(title=f"arrival: {jobs.source.split('/')[-1]} on {cluster.source.split('/')[-1]} "
              f"({len(cluster)} nodes, {int(cluster.num_gpu.sum())} GPUs), seeds "
              f"{seeds[0]}..{seeds[-1]}: GPU allocation % when X% of capacity has arrived",
              box=None)
    cols = (50, 80, 90, 100, 110, 120, 130)
    t.add_column("policy")
    for c in cols:
        t.add_column(f"{c}%", justify="right")
    t.add_column("skipped pods", justify="right")
    t.add_column("unplaceable", justify="right")
    t.add_column("s/run", justify="right")
    for r in results:
        skipped = sum(x.skipped for x in r.runs) / len(r.runs)
        never = sum(x.unplaceable for x in r.runs) / len(r.runs)
        sec = sum(x.time_s for x in r.runs) / len(r.runs)
        t.add_row(r.policy, *[f"{r.at(c):.2f}" for c in cols], f"{skipped:.0f}", f"{never:.0f}",
                  f"{sec:.1f}")
    console.print(t)


def _replay_table(results, span) -> None:
    console = _wide(150)
    t = Table(title="replay", box=None)
    for c in ("policy", "seed", "done", "failed", "unsched", "unplace", "JCT mean h",
              "wait mean s",
              "wait p95 s", "GPU util %", "frag %", "node fails", "preempt", "redone GPU-h",
              "avail min"):
        t.add_column(c, justify="left" if c == "policy" else "right")
    for r in results:
        s = r.summary
        t.add_row(r.policy, str(r.seed), str(s["completed"]), str(s["failed"]),
                  str(s["unscheduled"]), str(s["unplaceable"]),
                  f"{s['jct_mean_s'] / 3600:.2f}",
                  f"{s['wait_mean_s']:.0f}", f"{s['wait_p95_s']:.0f}",
                  f"{s['gpu_util_mean_pct_while_arriving']:.1f}",
                  f"{s['frag_mean_pct_of_free']:.1f}", str(s["node_failures"]),
                  str(s["preemptions"]), f"{s['gpu_hours_redone']:.1f}",
                  f"{s['availability_min']:.3f}")
    console.print(t)
    reasons: dict[str, list[str]] = {}
    for r in results[:1]:
        for j in r.jobs:
            if j["state"] != "completed":
                state = "unplaceable" if j.get("unplaceable") else j["state"]
                reasons.setdefault(state, []).append(f"{j['name']}: {j['reason']}")
    for state, items in reasons.items():
        console.print(f"{state}: {len(items)} jobs, e.g. {items[0]}")
