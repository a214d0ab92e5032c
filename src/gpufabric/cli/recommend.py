"""CLI: recommend (the fewest GPUs, and their layout, that serve a load within its SLO)."""

from __future__ import annotations

import math
from typing import Any

import typer

from gpufabric.cli import deploy
from gpufabric.cli.common import above, app, emit_json, given, whole
from gpufabric.errors import InputError

#: The scenario's serve keys and the options of `recommend` that give them (an error about a
#: key names the option).
FLAGS = {"model": "MODEL", "rate": "--rate", "concurrency": "--concurrency", "isl": "--isl",
         "osl": "--osl", "slo_ttft_ms": "--slo-ttft", "slo_tpot_ms": "--slo-tpot",
         "interactivity": "--interactivity", "precision": "--precision",
         "dataset": "--dataset", "prefix_tokens": "--prefix-tokens", "pd": "--pd",
         "speculative.method": "--spec", "speculative.tokens": "--spec-tokens",
         "speculative.acceptance": "--acceptance", "speculative.draft_model": "--draft-model"}

OPT: dict[str, Any] = {
    "model": typer.Argument(..., help="A model name (see `gpufabric models`)."),
    "system": typer.Argument(..., help="A GPU kind (its server: `gpufabric catalog gpus`) "
                             "or one server's spec, key=value,... (gpu=L40S,gpus_per_node=4)."),
    "gpus_per_node": typer.Option(None, "--gpus-per-node", callback=whole(1, 576),
                                  help="GPUs per server (default 8; a rack-scale part: its "
                                       "NVLink domain)."),
    "rate": typer.Option(None, "--rate", callback=above(0), help="Requests/s to serve."),
    "concurrency": typer.Option(None, "--concurrency", callback=whole(1),
                                help="Or: users of a closed loop to serve."),
    "isl": typer.Option(1024, "--isl", callback=whole(1), help="Input tokens per request."),
    "osl": typer.Option(256, "--osl", callback=whole(1), help="Output tokens per request."),
    "dataset": typer.Option(None, "--dataset", help="Draw the lengths from a named dataset "
                            "(`gpufabric datasets`; synthetic ones centre on --isl/--osl)."),
    "slo_ttft": typer.Option(None, "--slo-ttft", callback=above(0),
                             help="TTFT target, ms (p90)."),
    "slo_tpot": typer.Option(None, "--slo-tpot", callback=above(0),
                             help="TPOT target, ms (p90)."),
    "interactivity": typer.Option(None, "--interactivity", callback=above(0),
                                  help="Or: output tokens/s per user (a TPOT of 1000/x ms)."),
    "precision": typer.Option("bf16", "--precision", help="Weights: bf16, fp16, fp8, fp4."),
    "spec": typer.Option(None, "--spec", help="Speculative decoding: mtp, eagle or draft "
                         "(as `serve --spec`)."),
    "spec_tokens": typer.Option(None, "--spec-tokens", help="Draft tokens per step."),
    "acceptance": typer.Option(None, "--acceptance", help="Acceptance rate(s) of the "
                               "draft tokens (default: the sourced one)."),
    "draft_model": typer.Option(None, "--draft-model", help="With --spec draft: the draft "
                                "model (a built-in name)."),
    "prefix_tokens": typer.Option(0, "--prefix-tokens", callback=whole(0),
                                  help="Prefix reuse: prompt tokens every request shares, "
                                       "found cached (as `serve --prefix-tokens`)."),
    "engine": typer.Option("vllm", "--engine", help="vllm or sglang: the engine profile "
                           "predicted and the stack --deploy-dir writes."),
    "pd": typer.Option(False, "--pd", help="Also try prefill/decode disaggregation: xPyD "
                       "units (1P1D, 1P2D, 2P1D) of each layout that fits one server."),
    "max_instance_gpus": typer.Option(64, "--max-instance-gpus", callback=whole(1, 576),
                                      help="Widest instance to try (GPUs)."),
    "jobs": typer.Option(1, "--jobs", callback=whole(1, 1024),
                         help="Worker processes for the layouts of one width."),
    **deploy.OPTIONS,
    "json": typer.Option(False, "--json", help="Print JSON."),
}


@app.command()
def recommend(ctx: typer.Context, model: str = OPT["model"], system: str = OPT["system"],
              gpus_per_node: int | None = OPT["gpus_per_node"],
              rate: float | None = OPT["rate"], concurrency: int | None = OPT["concurrency"],
              isl: int = OPT["isl"], osl: int = OPT["osl"], dataset: str | None = OPT["dataset"],
              slo_ttft: float | None = OPT["slo_ttft"], slo_tpot: float | None = OPT["slo_tpot"],
              interactivity: float | None = OPT["interactivity"],
              precision: str = OPT["precision"], spec: str | None = OPT["spec"],
              spec_tokens: int | None = OPT["spec_tokens"],
              acceptance: str | None = OPT["acceptance"],
              draft_model: str | None = OPT["draft_model"],
              prefix_tokens: int = OPT["prefix_tokens"], engine: str = OPT["engine"],
              pd: bool = OPT["pd"],
              max_instance_gpus: int = OPT["max_instance_gpus"], jobs: int = OPT["jobs"],
              deploy_dir: str | None = OPT["deploy_dir"], weights: str | None = OPT["weights"],
              draft_weights: str | None = OPT["draft_weights"], image: str | None = OPT["image"],
              name: str | None = OPT["name"], namespace: str | None = OPT["namespace"],
              json: bool = OPT["json"]) -> None:
    """The fewest GPUs (and their layout) that serve a load within its SLO on one system."""
    from gpufabric.advise import recommend as R
    o = {k: v for k, v in locals().items() if k not in ("ctx", "R")}
    target = _target(ctx, o)
    if deploy_dir is not None:
        deploy.check(o)
    res = R.recommend(target, jobs=jobs)
    if deploy_dir is not None:
        res["deploy"] = _deploy(res, target, o)
    if json:
        emit_json(res)
        return
    for line in lines(res):
        typer.echo(line)


def _target(ctx: typer.Context, o: dict[str, Any]) -> Any:
    """The recommender's target from the options: the serve workload checked as a scenario's
    (:func:`gpufabric.advise.scenario._serve`), an error naming the option."""
    from gpufabric.advise import recommend as R
    from gpufabric.advise import scenario as S
    from gpufabric.k8s.manifests import ENGINES
    if (o["rate"] is None) == (o["concurrency"] is None):
        raise InputError("give exactly one of --rate (requests/s) or --concurrency (users)",
                         field="--rate")
    if o["slo_ttft"] is None and o["slo_tpot"] is None and o["interactivity"] is None:
        raise InputError("give an SLO: --slo-ttft and/or --slo-tpot (or --interactivity)",
                         field="--slo-tpot")
    if o["slo_tpot"] is not None and o["interactivity"] is not None:
        raise InputError("give --slo-tpot or --interactivity (a TPOT of 1000/x ms), not both",
                         field="--interactivity")
    if o["engine"] not in ENGINES:
        raise InputError(f"got {o['engine']!r}; allowed: {', '.join(ENGINES)}",
                         field="--engine")
    if o["pd"]:
        _check_pd(o)
    d: dict[str, Any] = {"model": o["model"], "precision": o["precision"],
                         "prefix_tokens": o["prefix_tokens"] or None, "pd": o["pd"],
                         "engine": o["engine"]}
    for key, opt in (("rate", "rate"), ("concurrency", "concurrency"), ("dataset", "dataset"),
                     ("slo_ttft_ms", "slo_ttft"), ("slo_tpot_ms", "slo_tpot"),
                     ("interactivity", "interactivity")):
        if o[opt] is not None:
            d[key] = o[opt]
    d.update({k: o[k] for k in ("isl", "osl") if given(ctx, k) or o["dataset"] is None})
    if o["spec"] is not None:
        d["speculative"] = {"method": o["spec"], "tokens": o["spec_tokens"],
                            "acceptance": o["acceptance"], "draft_model": o["draft_model"]}
    try:
        serve = S._serve(d, "")
    except InputError as exc:
        key = (exc.field or "").removeprefix("workloads.serve.")
        raise InputError(exc.message, field=FLAGS.get(key, key)) from None
    assert serve is not None
    return R.Target(serve=serve, node=R.server_spec(o["system"], o["gpus_per_node"]),
                    max_instance_gpus=o["max_instance_gpus"], pd=o["pd"])


def _check_pd(o: dict[str, Any]) -> None:
    """What --pd's units are modelled with: the advisor's xPyD runs (fixed lengths, the
    target's engine), and no manifests (a disaggregated stack: Dynamo, llm-d)."""
    for opt, bad, why in (
            ("--dataset", o["dataset"] is not None, "fixed lengths (--isl/--osl)"),
            ("--deploy-dir", o["deploy_dir"] is not None, "no manifests: --deploy-dir writes "
             "co-located designs only")):
        if bad:
            raise InputError(f"--pd units are modelled with {why}", field=opt)


def _deploy(res: dict[str, Any], target: Any, o: dict[str, Any]) -> dict[str, Any]:
    """The design's manifests written into --deploy-dir."""
    des = res["design"]
    d = deploy.design(target.serve, o, engine=o["engine"], layout=des["layout"],
                      gpus_per_instance=des["gpus_per_instance"], instances=des["instances"],
                      gpu=target.node["gpu"], gpus_per_node=int(target.node["gpus_per_node"]),
                      max_num_seqs=des["predicted"].get("max_num_seqs"),
                      comment=f"gpufabric recommend: {describe(des)}\n"
                              f"predicted: {_predicted(des['predicted'], res['load'])}")
    return deploy.write(d, o["deploy_dir"])


def _lay(lay: dict[str, int]) -> str:
    return " ".join(f"{k}{v}" for k, v in lay.items())


def describe(d: dict[str, Any]) -> str:
    """``8 GPUs: 2 instances x tp4 (1 server)``."""
    inst = "instance" if d["instances"] == 1 else "instances"
    if d.get("pd"):
        inst = ("unit" if d["instances"] == 1 else "units") + f" of {d['pd']}"
    srv = "server" if d["servers"] == 1 else "servers"
    span = f", {d['servers_per_instance']} per {'unit' if d.get('pd') else 'instance'}" \
        if d["servers_per_instance"] > 1 else ""
    gpus = "GPU" if d["gpus"] == 1 else "GPUs"
    return (f"{d['gpus']} {gpus}: {d['instances']} {inst} x {_lay(d['layout'])} "
            f"({d['servers']} {srv}{span})")


def _predicted(p: dict[str, Any], load: dict[str, Any]) -> str:
    if "error" in p:
        return p["error"]
    at = f"{load['rate']:g} requests/s" if load["rate"] is not None else \
        f"{load['concurrency']:,} users"
    user = f", {p['tokens_per_s_per_user']:,.1f} tokens/s per user" \
        if p.get("tokens_per_s_per_user") else ""
    hit = f", prefix hit {p['prefix_hit_rate']:.0%}" if "prefix_hit_rate" in p else ""
    return (f"at {at}: TTFT p50 {p['ttft_ms_p50']:,.0f} / p90 {p['ttft_ms_p90']:,.0f} ms, "
            f"TPOT p50 {p['tpot_ms_p50']:,.1f} / p90 {p['tpot_ms_p90']:,.1f} ms{user}, "
            f"{p['output_tokens_per_s']:,.0f} output tokens/s, {p['slo_attainment']:.0%} of "
            f"requests within the SLO{hit}")


def lines(res: dict[str, Any]) -> list[str]:
    """The answer as the terminal shows it."""
    ld, slo, d = res["load"], res["slo"], res["design"]
    what = f"{ld['rate']:g} requests/s" if ld["rate"] is not None else \
        f"{ld['concurrency']:,} users"
    lens = f"dataset {ld['dataset']}" if ld["dataset"] else \
        f"{ld['isl']:,} tokens in, {ld['osl']:,} out"
    extra = "".join([f", {ld['prefix_tokens']:,}-token shared prefix" if ld["prefix_tokens"]
                     else "", f", speculative {ld['speculative']['method']} "
                     f"x{ld['speculative']['tokens']}" if ld.get("speculative") else ""])
    targets = " and ".join(x for x in (
        f"TTFT p90 <= {slo['ttft_ms']:g} ms" if slo["ttft_ms"] else "",
        f"TPOT p90 <= {slo['tpot_ms']:g} ms" if slo["tpot_ms"] else "") if x)
    out = [f"recommend: {res['model']} on {res['server']} ({res['engine']}), {what}, {lens}"
           f"{extra}, {ld['precision']}; SLO {targets} for {slo['attainment']:.0%} of requests",
           f"fewest GPUs: {describe(d)}",
           f"  capacity {_amount(d['capacity'], ld)} within the SLO ({d['instances']} x "
           f"{_amount(d['per_instance'], ld)}), {_spare(d, ld)}",
           f"  predicted {_predicted(d['predicted'], ld)}"]
    if d["margins"]:
        out.append("  margin: " + ", ".join(
            f"{m['slo']} {m['margin_ms']:,.1f} ms ({m['margin']:.0%} of {m['target_ms']:g})"
            for m in d["margins"]))
    if "bottleneck" in d["predicted"]:
        out.append(f"  bottleneck: {d['predicted']['bottleneck']}")
    out.append(f"  system: {d['system']}")
    out.append(f"  reproduce: {d['serve_command']}")
    n = res["next_smaller"]
    out.append("next smaller: none (no layout runs on fewer GPUs)" if n is None else
               f"next smaller: {describe(n)}: misses {n['misses']}")
    out.append("layouts (one instance within the SLO): " + "; ".join(
        _row(r) for r in res["layouts"]))
    if res.get("deploy"):
        out.append(deploy.wrote(res["deploy"]))
    out.append(f"{res['elapsed_s']:.1f} s")
    return out


def _row(r: dict[str, Any]) -> str:
    """One layout tried: its capacity and the instances the load needs, or why it has none."""
    name = (f"{r['pd']} " if r.get("pd") else "") + _lay(r["layout"])
    if "per_instance" not in r:
        from gpufabric.advise.recommend import brief
        return f"{name}: {brief(r['error'])}"
    per = f"{r['per_instance']:,.2f}" if r["per_instance"] % 1 else f"{r['per_instance']:,.0f}"
    return f"{name}: {per} -> {r['instances']} x {r['gpus_per_instance']} = {r['gpus']} GPUs"


def _amount(x: float, ld: dict[str, Any]) -> str:
    return f"{x:,.2f} requests/s" if ld["rate"] is not None else f"{x:,.0f} users"


def _spare(d: dict[str, Any], ld: dict[str, Any]) -> str:
    need = ld["rate"] if ld["rate"] is not None else ld["concurrency"]
    spare = d["capacity"] / need - 1 if need else math.inf
    return f"{spare:.0%} above the load"
