"""CLI: advise (a scenario in, ranked cluster designs with cost, power and the reason out)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import typer
from rich.console import Console

from gpufabric import sweep
from gpufabric.advise import core
from gpufabric.advise import prices as P
from gpufabric.advise import scenario as S
from gpufabric.advise.interactivity import sweep as run_sweep
from gpufabric.cli import deploy
from gpufabric.cli.common import Progress, above, app, emit_json, whole
from gpufabric.collectives import Model
from gpufabric.errors import InputError
from gpufabric.fileio import check_output, write_output
from gpufabric.topology.build import load

console = Console()
LABEL = {"lowest-cost": "cost", "fastest": "speed", "tokens-per-watt": "efficiency",
         "cost-per-million-tokens": "cost"}


def _row_dict(c, sc) -> dict:
    m = {k: v for k, v in c.metrics.items()}
    return {"system": c.system, "design": core.describe(c), "deployment": c.deployment,
            "instance": c.instance or None, "gpu": c.gpu, "gpus": c.gpus, "nodes": c.nodes,
            "decode_gpu": c.decode.gpu if c.decode is not None else None,
            "rack_scale": c.rack_scale, "cost": {**c.cost, "hourly_usd": core.hourly(c),
                                                  "run_usd": core.run_cost(c, sc)},
            "power_kW": c.power_kW, "objective": {"name": sc.objective, "value": c.objective},
            "metrics": m, "bottleneck": _bottleneck(c),
            "tokens_per_s": core._tokens_per_s(c, sc), "same_figure": c.equivalents}


def _bottleneck(c) -> str:
    if "train_bottleneck" in c.metrics:
        return str(c.metrics["train_bottleneck"])
    if "serve" in c.metrics:
        return str(c.metrics["serve"]["bottleneck"])
    return ""


#: The options of `advise` (and ``--deploy-dir``'s, :data:`gpufabric.cli.deploy.OPTIONS`).
OPT: dict[str, Any] = {
    "scenario": typer.Argument(None, metavar="SCENARIO",
                               help="A scenario YAML file or a built-in name."),
    "list": typer.Option(False, "--list", help="List the built-in scenarios."),
    "top": typer.Option(5, "--top", callback=whole(1, 100), help="Designs to show."),
    "prices": typer.Option(None, "--prices", metavar="FILE", help="A price file that adds to "
                           "or replaces the catalog's prices (same shape)."),
    "kwh_price": typer.Option(0.10, "--kwh-price", callback=above(0), help="Electricity, $ per "
                              "kWh (a setting, not a catalog fact)."),
    "max_evaluations": typer.Option(150, "--max-evaluations", callback=whole(1),
                                    help="Most designs to run the models on."),
    "jobs": typer.Option(None, "--jobs", callback=whole(1, 1024), help="Worker processes that "
                         "run the models (default: this machine's cores); the answer is the "
                         "same for any number."),
    "ray": typer.Option(False, "--ray", help="Evaluate on Ray."),
    "output": typer.Option(None, "-o", "--output", metavar="FILE.html", help="Also write an "
                           "offline HTML page (Pareto scatter, sortable table, drawing)."),
    "interactivity": typer.Option(
        None, "--interactivity", metavar="X[,X...]",
        help="Serving: output tokens/s per user to rank at (a TPOT target of 1000/x ms); "
             "several: throughput per GPU and $/Mtok of each system kind against "
             "interactivity, with the crossovers."),
    "check": typer.Option(
        None, "--check", metavar="FILE|builtin",
        help="Check the advisor against published comparisons (a comparisons file, or "
             "'builtin' for the project's own): agree/disagree per comparison."),
}


@app.command()
def advise(scenario: str | None = OPT["scenario"], list_: bool = OPT["list"],
           top: int = OPT["top"], prices: str | None = OPT["prices"],
           kwh_price: float = OPT["kwh_price"], max_evaluations: int = OPT["max_evaluations"],
           jobs: int | None = OPT["jobs"], ray: bool = OPT["ray"],
           output: str | None = OPT["output"], interactivity: str | None = OPT["interactivity"],
           check: str | None = OPT["check"],
           deploy_dir: str | None = deploy.OPTIONS["deploy_dir"],
           weights: str | None = deploy.OPTIONS["weights"],
           draft_weights: str | None = deploy.OPTIONS["draft_weights"],
           image: str | None = deploy.OPTIONS["image"], name: str | None = deploy.OPTIONS["name"],
           namespace: str | None = deploy.OPTIONS["namespace"],
           json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Rank cluster designs for a scenario: cost, power, bottleneck, what would change it."""
    if list_:
        return _list(json)
    if check is not None:
        _alone(scenario=scenario, output=output, interactivity=interactivity,
               deploy_dir=deploy_dir)
        return _check(check, prices, kwh_price, jobs, ray, json)
    if scenario is None:
        raise InputError("give a scenario file or a built-in name (gpufabric advise --list)",
                         field="SCENARIO")
    sc = S.load(scenario)
    pr = P.load(prices)
    if output:
        check_output(output, field="--output")
    sc, targets = _targets(sc, interactivity)
    dep = {"deploy_dir": deploy_dir, "weights": weights, "draft_weights": draft_weights,
           "image": image, "name": name, "namespace": namespace}
    if deploy_dir is not None:
        _check_deploy(sc, dep, len(targets))
    run: dict[str, Any] = {"top": top, "kwh_usd": kwh_price, "ray": ray,
                           "max_evaluations": max_evaluations,
                           "jobs": jobs if jobs is not None else sweep.cores()}
    if len(targets) > 1:
        return _sweep(sc, pr, targets, json, output, **run)
    with Progress("advise") as progress:
        adv = core.advise(sc, pr, progress=progress.told("models"), **run)
    _answer(adv, sc, pr, top, json, output, dep)


def _answer(adv, sc, pr, top: int, json: bool, output: str | None,
            dep: dict[str, Any]) -> None:
    """The ranking as JSON, the terminal's text and/or the page (or the infeasible line);
    with --deploy-dir, the winner's manifests."""
    counts = {"candidates_generated": adv.generated, "refused_by_rules": adv.refused,
              "not_priced": adv.unpriced, "pruned_by_bounds": adv.pruned,
              "network_dominated": adv.dominated, "evaluated_with_models": adv.evaluated}
    if adv.infeasible:
        _infeasible(adv, sc, counts, json)
    designs = [_row_dict(c, sc) for c in adv.ranked[:top]]
    wrote = _deploy(adv.ranked[0], sc, dep) if dep["deploy_dir"] is not None else None
    if output:
        _write_html(output, sc, adv, designs, counts)
    if json:
        emit_json({"scenario": sc.name, "objective": sc.objective, "designs": designs,
                   "pareto": [_row_dict(c, sc) for c in adv.pareto],
                   "what_would_change": adv.changes, "left_out": sc.constraints.left_out(),
                   "candidates_evaluated": adv.evaluated,
                   **counts, "elapsed_s": adv.elapsed_s, "prices": pr.files,
                   **({"deploy": wrote} if wrote else {})})
        return
    _print_advice(adv, sc, counts, top)
    if wrote:
        console.print(deploy.wrote(wrote), highlight=False, soft_wrap=True)


def _check_deploy(sc, dep: dict[str, Any], targets: int) -> None:
    """--deploy-dir writes the winner of one serving question, running the engine its figures
    were predicted with: refused before the search where the scenario serves nothing, asks
    several, or names an engine the manifests do not run."""
    from gpufabric.k8s.manifests import ENGINES
    if sc.serve is None:
        raise InputError(f"{sc.name} serves no model: --deploy-dir writes a serving "
                         "deployment", field="--deploy-dir")
    if targets > 1:
        raise InputError("writes one design: give one --interactivity target",
                         field="--deploy-dir")
    if sc.serve.engine not in ENGINES:
        raise InputError(f"writes {' or '.join(ENGINES)} deployments; {sc.name} serves with "
                         f"{sc.serve.engine}", field="--deploy-dir")
    deploy.check(dep)


def _deploy(c, sc, dep: dict[str, Any]) -> dict[str, Any]:
    """The winning design's serving instances as manifests in --deploy-dir."""
    if c.decode is not None or c.pd is not None:
        raise InputError(f"the winner ({core.describe(c)}) is disaggregated; the manifests "
                         "write aggregated instances only", field="--deploy-dir")
    m = c.metrics["serve"]
    lay = dict(m["layout"])
    per = (f"{m['per_instance']:,.2f} requests/s" if sc.serve.rate is not None
           else f"{m['per_instance']:,.0f} users")
    d = deploy.design(sc.serve, dep, engine=sc.serve.engine, layout=lay,
                      gpus_per_instance=lay.get("tp", 1) * lay.get("pp", 1),
                      instances=int(m["instances"]), gpu=c.gpu, gpus_per_node=c.gpus_per_node,
                      max_num_seqs=None,
                      comment=f"gpufabric advise {sc.name}: {core.describe(c)}\n"
                              f"predicted: {per} per instance within the SLO, TTFT p90 "
                              f"{m['ttft_ms_p90']:,.0f} ms, TPOT p90 {m['tpot_ms_p90']:,.1f} ms")
    return deploy.write(d, dep["deploy_dir"])


def _alone(**given: str | None) -> None:
    """--check takes no scenario and writes no page: a value given to those is refused."""
    for name, value in given.items():
        if value is not None:
            flag = "SCENARIO" if name == "scenario" else f"--{name.replace('_', '-')}"
            raise InputError(f"cannot be used with {flag} (--check evaluates the comparisons' "
                             "own designs)", field="--check")


def _check(what: str, prices: str | None, kwh_price: float, jobs: int | None, ray: bool,
           json: bool) -> None:
    """`advise --check FILE`: each published comparison against the advisor's own answer."""
    from gpufabric.advise import check as C
    comps = C.load(what)
    pr = P.load(prices)
    with Progress("advise --check") as progress:
        res = C.check(comps, pr, kwh_usd=kwh_price,
                      jobs=jobs if jobs is not None else sweep.cores(), ray=ray,
                      file=C.file_name(what), on_row=progress.told("comparisons"))
    if json:
        emit_json(res)
        return
    _say(f"{'comparison':<46} {'metric':<20} {'published':>9} {'predicted':>9} "
         f"{'winner':>9}  verdict")
    for r in res["rows"]:
        pred = f"{r.predicted_ratio:.3f}" if r.predicted_ratio is not None else "n/a"
        win = f"{r.published_winner}/{r.predicted_winner or '-'}"
        _say(f"{r.id + (' *' if r.fitted else ''):<46} {r.metric:<20} "
             f"{r.published_ratio:>9.3f} {pred:>9} {win:>9}  "
             f"{'AGREE' if r.agree else 'DISAGREE'}")
        _say(f"  {r.question}")
        for label, text in (("not evaluated", r.why), ("in-sample for", ", ".join(r.fitted))):
            if text:
                _say(f"  {label}: {text}")
    _say(f"held out: {res['held_out_agree']} of {res['held_out_total']} agree; all: "
         f"{res['agree']} of {res['total']} agree (* in-sample: a constant was fitted on its "
         f"figures); agree = the same winner (published/predicted: a, b, or a tie within "
         f"{res['tie']:.0%} of 1) and the predicted ratio within {res['agree_factor']:g}x of "
         f"the published one; same winner {res['same_winner']} of {res['total']}; "
         f"{res['elapsed_s']:.1f} s")


def _say(text: str) -> None:
    """One line as written (no markup: names such as GEMM_EFF[hopper] keep their brackets)."""
    console.print(text, highlight=False, soft_wrap=True, markup=False)


def _list(json: bool) -> None:
    """`advise --list`: the built-in scenarios with their descriptions."""
    rows = [(n, S.builtin(n).description) for n in S.builtin_names()]
    if json:
        emit_json([{"name": n, "description": d} for n, d in rows])
        return
    for n, d in rows:
        console.print(f"[bold]{n}[/bold]: {d}", highlight=False)


def _targets(sc, interactivity: str | None) -> tuple:
    """The scenario at the first interactivity target and every target asked (the
    scenario's own, or --interactivity's)."""
    targets = sc.serve.interactivity if sc.serve else ()
    if interactivity is None:
        return sc, targets
    if sc.serve is None:
        raise InputError("applies only to a scenario with a serve workload",
                         field="--interactivity")
    targets = S.interactivity_targets(
        [_number(x) for x in interactivity.split(",")], None, "--interactivity")
    return replace(sc, serve=replace(sc.serve, slo_tpot_ms=1000.0 / targets[0],
                                     interactivity=targets)), targets


def _infeasible(adv, sc, counts: dict, json: bool) -> None:
    """No design meets the scenario: the JSON says which constraint binds and the closest
    design; the error (exit 2) says it in one line."""
    msg = adv.infeasible["message"]
    if json:
        cl = adv.infeasible.get("closest")
        emit_json({"scenario": sc.name, "designs": [], "infeasible": {
            "constraint": adv.infeasible["constraint"], "message": msg,
            "closest": _row_dict(cl, sc) if cl is not None else None},
            "candidates_evaluated": adv.evaluated, **counts,
            "elapsed_s": adv.elapsed_s})
    raise InputError(msg, file=sc.file, field=f"constraints ({adv.infeasible['constraint']})")


def _print_advice(adv, sc, counts: dict, top: int) -> None:
    """The ranked designs as the terminal shows them (:func:`_print_design`), then the
    winner's system and notes, what would change the answer, the Pareto front and the
    counts."""
    console.print(f"[bold]{sc.name}[/bold]" + (f": {sc.description}" if sc.description else ""),
                  highlight=False)
    console.print(f"objective: {sc.objective}", highlight=False)
    for i, c in enumerate(adv.ranked[:top], 1):
        _print_design(i, c, sc)
    best = adv.ranked[0]
    console.print(f"system: {best.system}", highlight=False, soft_wrap=True)
    for n in dict.fromkeys(best.cost.get("notes", []) + sc.constraints.left_out()):
        console.print(f"note: {n}", highlight=False)
    for line in adv.changes:
        console.print(f"what would change the answer: {line}", highlight=False)
    console.print("Pareto front ($/hour against tokens/s): " + "; ".join(
        f"{core.describe(c)} ${core.hourly(c):,.2f}/h" for c in adv.pareto[:6]),
        highlight=False)
    console.print(", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in counts.items())
                  + f"; {adv.elapsed_s:.1f} s", highlight=False)


def _print_design(i: int, c, sc) -> None:
    """One ranked design: its money, workload, bottleneck, pools and equivalent networks."""
    console.print(f"{i}. {core.describe(c)}", highlight=False)
    money = [f"{LABEL[sc.objective]} {core._fmt_obj(c, sc)}"]
    if c.cost.get("capex_usd") is not None:
        money.append(f"capex ${c.cost['capex_usd']:,.0f}")
    if core.hourly(c) is not None:
        money.append(f"${core.hourly(c):,.2f}/h")
    if c.power_kW is not None:
        money.append(f"{c.power_kW:,.1f} kW")
    if c.cost.get("energy_usd_per_day") is not None:
        money.append(f"energy ${c.cost['energy_usd_per_day']:,.0f}/day")
    console.print("   " + " | ".join(money), highlight=False)
    console.print("   " + _workload(c, sc), highlight=False)
    console.print(f"   bottleneck: {_bottleneck(c)}", highlight=False)
    if c.metrics.get("serve", {}).get("pools"):
        console.print(f"   pools: {c.metrics['serve']['pools']}", highlight=False)
    if c.equivalents:
        console.print(f"   same figure with {len(c.equivalents)} other network(s): "
                      + "; ".join(c.equivalents[:4])
                      + ("; ..." if len(c.equivalents) > 4 else ""), highlight=False)


def _number(text: str) -> object:
    """A number from the command line (left as text when it is none, for the range check's
    message)."""
    try:
        return float(text)
    except ValueError:
        return text.strip()


def _sweep(sc, pr, targets: tuple[float, ...], json: bool, output: str | None, **kw) -> None:
    with Progress("advise --interactivity") as progress:
        res = run_sweep(sc, pr, targets, on_target=progress.told("interactivity targets"),
                        **kw)
    if output:
        from gpufabric.report.advice import sweep_page
        write_output(output, sweep_page(res), field="--output")
    if json:
        emit_json(res)
        return
    console.print(f"[bold]{sc.name}[/bold]: throughput per GPU and cost per million output "
                  "tokens at capacity, against interactivity", highlight=False, soft_wrap=True)
    console.print(f"# {'tok/s/user':>10} {'TPOT ms':>8}  {'system kind':<28} {'GPUs':>5} "
                  f"{'tok/s/GPU':>10} {'$/Mtok':>8}  design", highlight=False, soft_wrap=True)
    for r in res["rows"]:
        console.print(f"  {r['interactivity']:>10g} {r['tpot_ms']:>8.1f}  {r['kind']:<28} "
                      f"{r['gpus']:>5} {r['tokens_per_s_per_gpu']:>10,.0f} "
                      f"{r['usd_per_mtok']:>8.3f}  {r['design']}", highlight=False,
                      soft_wrap=True)
    for c in res["cheapest"]:
        if c["kind"] is None:
            console.print(f"at {c['interactivity']:g} tokens/s per user: {c['reason']}",
                          highlight=False)
    for line in res["crossovers"] or ["the same system kind is cheapest at every target"]:
        console.print(f"crossover: {line}", highlight=False, soft_wrap=True)


def _workload(c, sc) -> str:
    parts = []
    m = c.metrics
    if "train_hours" in m:
        parts.append(f"train {m['train_hours']:,.1f} h, MFU {m['mfu']:.0%}, "
                     f"{m['tokens_per_s_per_gpu']:,.0f} tok/s/GPU")
    if "serve" in m:
        s = m["serve"]
        lay = " ".join(f"{k}{v}" for k, v in s["layout"].items())
        parts.append(f"serve {s['capacity']:,.2f}/{core_demand(sc):g} ({lay} x"
                     f"{s['instances']} on {sc.serve.engine}), TTFT p90 "
                     f"{s['ttft_ms_p90']:,.0f} ms, TPOT p90 "
                     f"{s['tpot_ms_p90']:,.1f} ms")
    return "; ".join(parts)


def core_demand(sc) -> float:
    return core._demand(sc)


def _write_html(output: str, sc, adv, designs: list, counts: dict) -> None:
    from gpufabric.report.advice import render
    points = [{"design": core.describe(c), "hourly_usd": core.hourly(c),
               "tokens_per_s": core._tokens_per_s(c, sc)} for c in adv.ranked]
    data = {"scenario": sc.name, "objective": sc.objective, "train": sc.train is not None,
            "designs": designs,
            "pareto": [{"design": core.describe(c)} for c in adv.pareto], "points": points,
            "what_would_change": adv.changes, "left_out": sc.constraints.left_out(),
            "candidates_evaluated": adv.evaluated, **counts}
    topo = load(adv.ranked[0].system, materialize_nodes=Model.SAMPLE_NODES) \
        if adv.ranked else None
    write_output(output, render(data, topo), field="--output")
