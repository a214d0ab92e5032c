"""CLI: serve command (see gpufabric.workloads.inference)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import typer

from gpufabric.cli.common import (Col, Progress, app, emit_json, kernel_times_option,
                                  model_and_system, model_file_option, nccl_option, note,
                                  print_table,
                                  print_validation_summary, profile_option, refuse_alone,
                                  refuse_together, whole, wide_option)
from gpufabric.errors import InputError

#: Options of `serve` that exclude each other: (option, options, why).
CONFLICTS = (
    ("trace", "rate|burst_cv|concurrency|isl|osl|client", "the trace gives each request's "
     "arrival and lengths"),
    ("versus", "search|pd|decode_system|trace|rate|concurrency|tp|ep|dp_attention|replicas",
     "--versus finds each system's best layout and highest rate within the SLO"),
    ("search", "tp|replicas|pd", "--search tries the layouts itself"),
    ("dataset", "trace", "the trace gives each request's lengths"),
    ("spec", "pd|decode_system|search|versus", "speculative decoding is modelled for one "
     "co-located deployment's run"),
    ("kv_tier", "pd|decode_system|search|versus", "prefix caching is modelled for one "
     "co-located deployment's run"),
    ("prefix_tokens", "pd|decode_system|search|versus|trace", "a shared prefix is modelled "
     "for one co-located deployment's run of synthetic requests (a trace names its own)"),
)

SYSTEM_HELP = ("A preset name (see `gpufabric systems`), a YAML spec or system file, "
               "or key=value,...")


#: The SLO of ``--versus`` when none is given: TTFT 2 s, TPOT 50 ms (20 tokens/s per user).
VERSUS_SLO_MS = (2000.0, 50.0)


def _fmt(d: dict | None) -> str:
    if not d or d.get("p50") is None:
        return "n/a"
    return f"p50 {d['p50']:,.1f}  p90 {d['p90']:,.1f}  p99 {d['p99']:,.1f}"


def pool_lines(pools: dict) -> list[str]:
    """One line per pool of a disaggregated run: its steady throughput."""
    out = []
    p, d = pools.get("prefill"), pools.get("decode")
    if p:
        out.append(f"# prefill pool: {p['error']}" if "error" in p else
                   f"# prefill pool: {p['input_tokens_per_s_per_node']:,.0f} input tokens/s per "
                   f"node ({p['input_tokens_per_s_per_gpu']:,.0f} per GPU) at isl {p['isl']}, "
                   f"{p['tokens_per_rank']:,} tokens per rank, {p['bound']}-bound")
    if d:
        out.append(f"# decode pool: {d['error']}" if "error" in d else
                   f"# decode pool: {d['output_tokens_per_s_per_node']:,.0f} output tokens/s per "
                   f"node ({d['output_tokens_per_s_per_gpu']:,.0f} per GPU) at batch "
                   f"{d['batch_per_rank']} per rank, KV {d['avg_kv_len']:,} tokens, "
                   f"{d['output_tokens_per_s_per_user']:.1f} tokens/s per user, "
                   f"{d['bound']}-bound")
    return out


def print_summary(r: dict) -> None:
    """The human-readable summary of one run (a co-located or a disaggregated one)."""
    lay = r["layout"]
    par = " ".join(f"{k}={v}" for k, v in lay.items() if v != 1 or k == "tp")
    typer.echo(f"# gpufabric serve: {r['model']} on {r['system']} ({r['gpus']} x {r['gpu']}), "
               f"{r['precision']} weights, {r['kv_dtype']} KV cache, {r['engine']}")
    if r.get("pd"):
        pd = r["pd"]
        typer.echo(f"# disaggregated {pd['name']}: prefill {pd['prefill']['instances']} x "
                   f"{pd['prefill']['gpus_per_instance']} {pd['prefill']['gpu']}, decode "
                   f"{pd['decode']['instances']} x {pd['decode']['gpus_per_instance']} "
                   f"{pd['decode']['gpu']}; KV transfer {pd['kv_transfer_ms']['p50']:.2f} ms "
                   f"p50 over {pd['kv_link']}, queueing p99 {pd['kv_wait_ms']['p99']:.2f} ms")
        for line in pool_lines(pd.get("pools") or {}):
            typer.echo(line)
    else:
        typer.echo(f"# layout {par}, {r['replicas']} replica(s); KV cache "
                   f"{r['memory']['kv_tokens']:,} tokens per instance "
                   f"({r['memory']['kv_cache_GB']:.1f} GB per GPU), "
                   f"{r['max_concurrency']:,} requests of this length at once")
        sch = r.get("scheduler") or {}
        if sch:
            typer.echo(f"# engine limits: {sch['max_num_seqs']:,} sequences, "
                       f"{sch['max_batched_tokens']:,} tokens a step, "
                       f"{'chunked' if sch['chunked_prefill'] else 'whole'} prefill")
    sp = r.get("speculative")
    if sp:
        acc = "/".join(f"{a:g}" for a in sp["acceptance"])
        src = "stated" if sp["source"].startswith("stated") else "sourced default"
        draft = f" ({sp['draft_model']})" if sp.get("draft_model") else ""
        typer.echo(f"# speculative {sp['method']}{draft}: {sp['tokens']} draft tokens, "
                   f"acceptance {acc} ({src}), {sp['tokens_per_step']:.2f} tokens per step; "
                   f"drafter {sp['draft_share']:.0%} of a decode step")
    w = r["workload"]
    typer.echo(f"# workload: {w['source']}, {r['requests']:,} requests, isl {w['isl']:.0f}, "
               f"osl {w['osl']:.0f}")
    for line in measure_lines(r):
        typer.echo(line)
    typer.echo(f"TTFT (ms)        {_fmt(r['ttft_ms'])}")
    typer.echo(f"TPOT (ms)        {_fmt(r['tpot_ms'])}")
    typer.echo(f"ITL (ms)         {_fmt(r['itl_ms'])}")
    typer.echo(f"e2e (ms)         {_fmt(r['e2e_ms'])}")
    typer.echo(f"throughput       {r['throughput_tokens_per_s']:,.0f} output tokens/s, "
               f"{r['throughput_tokens_per_s_per_gpu']:,.1f} per GPU; "
               f"{r['requests_per_s']:,.2f} requests/s")
    slo = r["slo"]
    if slo.get("ttft_ms") or slo.get("tpot_ms"):
        typer.echo(f"goodput          {r['goodput_requests_per_s']:,.2f} requests/s within "
                   f"TTFT <= {slo.get('ttft_ms')} ms, TPOT <= {slo.get('tpot_ms')} ms "
                   f"({r['slo_attainment']:.0%} of requests)")
    for line in tier_lines(r.get("kv_tiers")):
        typer.echo(line)
    kv = r["kv_cache"]
    typer.echo(f"KV cache         peak {kv['peak_use']:.0%}, mean {kv['mean_use']:.0%}; "
               f"{r['preemptions']} preemptions; mean decode batch {r['mean_batch']:.1f}")
    typer.echo(f"bottleneck       {r['bottleneck']}")
    if r.get("kernel_times"):
        from gpufabric.workloads.inference.kerneltimes import describe
        typer.echo(f"kernel times     {describe(r['kernel_times'])}")


def _bytes(b: float) -> str:
    """``1.5 TiB``, ``340 GiB``, ``448 MiB`` (binary units, as --kv-tier takes them).

    >>> _bytes(64 * 2**30), _bytes(1.5 * 2**40)
    ('64 GiB', '1.5 TiB')
    """
    for unit, v in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if b >= v:
            return f"{b / v:,.3g} {unit}"
    return f"{b:,.0f} B"


def tier_lines(kt: dict | None) -> list[str]:
    """Prefix caching's lines: each tier's size, rate and hit rate, the working set, and the
    run without it and with each tier added."""
    if not kt:
        return []
    out = [f"prefix cache     {kt['hit_rate']:.1%} of prompt tokens hit ("
           + ", ".join(f"{t['name']} {t['hit_rate']:.1%}" for t in kt["tiers"])
           + f"), {kt['declined_rate']:.1%} recomputed"]
    for t in kt["tiers"][1:]:
        out.append(f"#   {t['name']:<7} {_bytes(t['capacity_bytes'])} per GPU at "
                   f"{t['bw_GBps']:,.1f} GB/s ({t['source'].split(':')[0]})")
    ws = kt["working_set"]
    if ws["bytes_for_max"]:
        out.append(f"working set      {ws['max_hit_rate']:.1%} hit with room for all: "
                   f"{_bytes(ws['bytes_for_max'])} per GPU; 90% of it: "
                   f"{_bytes(ws['bytes_for_90pct'])} ({kt['block_tokens']}-token blocks)")
    for c in kt.get("compare", []):
        ttft = c["ttft_ms"]
        out.append(f"#   {c['tiers']:<20} hit {c['hit_rate']:>6.1%}, TTFT p50 "
                   f"{ttft['p50'] or 0:,.1f} p99 {ttft['p99'] or 0:,.1f} ms, "
                   f"{c['throughput_tokens_per_s']:,.0f} output tokens/s")
    return out


def measure_lines(r: dict) -> list[str]:
    """How the figures of a run were taken: its steady state (the window, the convergence of
    its request count) or the whole run, and a rate above the deployment's capacity."""
    out = []
    st = r.get("steady")
    if st:
        out.append(f"# steady state: the {st['requests']:,} requests arriving from "
                   f"{st['start_s']:,.1f} s to {st['end_s']:,.1f} s (warm-up and drain left "
                   "out)")
    elif r.get("measure") == "run" and (r["workload"].get("rate") or
                                        r["workload"].get("concurrency")):
        by = r["workload"].get("client")
        out.append("# figures over the whole run, as a benchmark client takes them "
                   f"({f'client {by}' if by else '--measure run'})")
    conv = r.get("convergence")
    if conv and not r.get("overloaded"):
        counts = ", ".join(f"{n:,}" for n in conv["requests"])
        if conv["converged"]:
            out.append(f"# converged: within {conv['tolerance']:.0%} (p99 "
                       f"{conv['tolerance_p99']:.0%}) between the last two of {counts} "
                       "requests")
        else:
            cap, rate = r.get("capacity_requests_per_s"), r["workload"].get("rate")
            why = ("near capacity a queue's tail needs long runs"
                   if not cap or not rate or rate >= 0.8 * cap else
                   f"at {rate / cap:.0%} of capacity the spread is the sample's: "
                   "more --requests narrow it")
            out.append(f"# not converged at {conv['requests'][-1]:,} requests (tried {counts}): "
                       "the figures still move by more than "
                       f"{conv['tolerance']:.0%} (p99 {conv['tolerance_p99']:.0%}); {why}")
    if r.get("overloaded"):
        # a client's figures over its whole run are the run's own; a steady state's
        # throughput is the capacity's
        run = f"this run's ({r['requests']:,} requests)"
        whose = f"the figures are {run}, its latencies" if r.get("measure") == "run" else \
            f"throughput is the capacity's, and the latencies are {run},"
        out.append(f"# overloaded: {r['workload']['rate']:g} requests/s is above the capacity "
                   f"of {r['capacity_requests_per_s']:,.2f} requests/s; {whose} growing with "
                   "its length")
    elif r.get("capacity_requests_per_s"):
        load = r["workload"]["rate"] / r["capacity_requests_per_s"]
        out.append(f"# load: {load:.0%} of the capacity of {r['capacity_requests_per_s']:,.2f} "
                   "requests/s")
    near = r.get("near_capacity")
    if near:
        sides = [f"at {near['load_step']:.0%} {'less' if side == 'lower' else 'more'} load "
                 f"({near[side]['rate']:,.2f} requests/s): "
                 + ("overloaded" if near[side]["overloaded"] else
                    f"TTFT p50 {near[side]['ttft_ms']['p50']:,.1f} ms, TPOT p50 "
                    f"{near[side]['tpot_ms']['p50']:,.1f} ms")
                 for side in ("lower", "higher")]
        out.append(f"# near capacity, the same run {sides[0]}; {sides[1]}")
    return out


#: The options of `serve` (its signature reads them from here, one per parameter).
OPT: dict[str, Any] = {
    "model": typer.Argument(None, help="A model name (see `gpufabric models`) or "
        "model file; with --model-file, leave it out."),
    "system": typer.Argument(None, help=SYSTEM_HELP),
    "model_file": model_file_option(),
    "tp": typer.Option(1, "--tp", callback=whole(1),
        help="Tensor parallelism of one instance."),
    "ep": typer.Option(1, "--ep", callback=whole(1),
        help="Expert parallelism inside the TP group (MoE)."),
    "pp": typer.Option(1, "--pp", callback=whole(1), help="Pipeline stages."),
    "dp_attention": typer.Option(1, "--dp-attention", callback=whole(1),
        help="Attention data-parallel ranks inside the TP group."),
    "replicas": typer.Option(None, "--replicas", callback=whole(1),
        help="Instances (default: all the system holds)."),
    "rate": typer.Option(None, "--rate", help="Requests/s (Poisson); default "
        "offline: every request queued at once."),
    "burst_cv": typer.Option(None, "--burst-cv", help="Bursty arrivals: gamma "
        "gaps with this coefficient of variation."),
    "concurrency": typer.Option(None, "--concurrency", callback=whole(1),
        help="Closed loop with this many users; with "
        "--rate, at most this many requests in flight "
        "(vLLM's --max-concurrency)."),
    "client": typer.Option(None, "--client", help="Apply the load and take the "
        "figures as this benchmark client does: "
        "vllm-bench-serve, sglang-bench-serving, "
        "mlperf-server, mlperf-interactive, mlperf-offline, "
        "trtllm-bench, genai-perf, static-batch (see "
        "docs/inference.md)."),
    "requests": typer.Option(None, "--requests", help="Requests to simulate "
        "(default online: 1000, doubled while the steady-state "
        "figures move by over 5%, up to 16,000; offline: 24 full batches of each instance); "
        "with --trace, the trace's first N arrivals (default: all of them)."),
    "measure": typer.Option(None, "--measure", help="How an online run's "
        "figures are taken: steady (its steady state: warm-up "
        "and drain left out; the default) or run (over the "
        "whole run); with --client, the client's way."),
    "isl": typer.Option(1024, "--isl", help="Input tokens per request."),
    "osl": typer.Option(256, "--osl", help="Output tokens per request."),
    "trace": typer.Option(None, "--trace", help="CSV or JSONL trace: arrival time, "
        "input and output lengths per request; or "
        "mooncake-conversation / mooncake-synthetic (`gpufabric "
        "data fetch mooncake`)."),
    "dataset": typer.Option(None, "--dataset", help="Draw each request's input "
        "and output lengths from a named dataset (see "
        "`gpufabric datasets`); synthetic ones centre on "
        "--isl / --osl."),
    "dataset_spread": typer.Option(None, "--dataset-spread", help="Synthetic "
        "datasets: trtllm-normal's stdev as a fraction "
        "of the length, vllm-random's range ratio."),
    "slo_ttft": typer.Option(None, "--slo-ttft", help="TTFT target (ms)."),
    "slo_tpot": typer.Option(None, "--slo-tpot", help="TPOT target (ms)."),
    "precision": typer.Option("bf16", "--precision",
        help="Weights: fp16, bf16, fp8, fp8-per-channel, w8a8-int8, "
        "int8-weight-only, int4, int4-awq, int4-gptq-g128, fp4 "
        "(NVFP4), mxfp4, or an engine's spelling (awq, W4A16_AWQ, "
        "nvfp4...)."),
    "kv_dtype": typer.Option(None, "--kv-dtype", help="KV cache: fp16, bf16, fp8 "
        "(fp8_e4m3, fp8_e5m2), fp4 (NVFP4), int8, int4 (default "
        "fp8 with fp8/fp4 weights, else bf16)."),
    "engine": typer.Option("vllm", "--engine", help="vllm, sglang, tensorrt-llm "
        "(PyTorch backend), tensorrt-llm-tensorrt (TensorRT engines), "
        "lmdeploy, llama.cpp, fastertransformer (or an alias), or an "
        "engine profile file (.yaml)."),
    "max_num_seqs": typer.Option(None, "--max-num-seqs", callback=whole(1),
        help="Batch limit."),
    "max_batched_tokens": typer.Option(None, "--max-batched-tokens",
        callback=whole(1),
        help="Token budget of an iteration."),
    "chunked_prefill": typer.Option(None, "--chunked-prefill/--no-chunked-prefill",
        help="Prefill prompts in chunks of the token budget, or each whole in one "
        "iteration (default: as --client sets up the engine, else the engine "
        "profile's: chunked for vLLM V1, SGLang, LMDeploy and llama.cpp, whole for "
        "TensorRT-LLM, vLLM V0 and FasterTransformer)."),
    "preemption": typer.Option("recompute", "--preemption", help="recompute or swap."),
    "scheduler_steps": typer.Option(1, "--scheduler-steps", callback=whole(1),
        help="Multi-step scheduling: decode in rounds of N "
        "steps (vLLM 0.6 --num-scheduler-steps)."),
    "gpu_memory_utilization": typer.Option(
        None, "--gpu-memory-utilization", help="Fraction of GPU memory the engine uses "
        "(default: the engine profile's, vLLM 0.9 of the total)."),
    "seed": typer.Option(0, "--seed", callback=whole(0, 2**63 - 1),
        help="Random seed of the arrivals."),
    "eplb": typer.Option(False, "--eplb", help="MoE: expert-parallel load balancing "
        "(32 redundant experts even out the EP ranks' mean loads)."),
    "pd": typer.Option(None, "--pd", help="Disaggregated: xPyD prefill and decode "
        "instances of the layout (e.g. 2P1D)."),
    "decode_system": typer.Option(None, "--decode-system", help="Run the decode "
        "pool on this system (another GPU kind)."),
    "two_batch_overlap": typer.Option(False, "--two-batch-overlap", help="With --pd: "
        "the pool figures with two micro-batches, one's "
        "all-to-all under the other's computation."),
    "search": typer.Option(False, "--search", help="Rank co-located and xPyD layouts "
        "of the system's GPUs by goodput per GPU under the SLO."),
    "ray": typer.Option(False, "--ray", help="Run the --search candidates on Ray."),
    "versus": typer.Option(None, "--versus", help="Compare SYSTEM with this one "
        "(a supernode against 8-GPU servers, say) at equal "
        "GPU count: "
        "tokens/s per GPU within the SLO, each at its best "
        "layout (default SLO: TTFT 2 s, TPOT 50 ms)."),
    "spec": typer.Option(None, "--spec", help="Speculative decoding: mtp (the "
        "model's MTP module), eagle (a one-layer draft head) or "
        "draft (a draft model, --draft-model)."),
    "spec_tokens": typer.Option(None, "--spec-tokens", help="Draft tokens per "
        "step (K; default 1 for mtp)."),
    "acceptance": typer.Option(None, "--acceptance", help="Acceptance rate of "
        "the draft tokens: one (0.8) or one per position "
        "(0.9,0.8,0.7); default: the sourced one for the "
        "method and model, where there is one."),
    "draft_model": typer.Option(None, "--draft-model", help="With --spec draft: "
        "the draft model (a built-in name)."),
    "kv_tier": typer.Option(None, "--kv-tier", help="Prefix caching over KV "
        "cache tiers beyond HBM, NAME:SIZE\\[@GBps] per GPU, "
        "comma-separated: host:512GiB,nvme:4TiB,"
        "remote:16TiB@25 (hbm alone: HBM only). Needs a "
        "--trace naming its prefixes (hash_ids or "
        "session_id)."),
    "prefix_tokens": typer.Option(0, "--prefix-tokens", callback=whole(0),
        help="Prefix reuse: the first N prompt tokens are one prefix every request "
        "shares (a system prompt), found cached once computed (prefix caching in HBM, "
        "or over --kv-tier's tiers)."),
    "json": typer.Option(False, "--json", help="Print JSON."),
    "profile": profile_option(),
    "nccl": nccl_option(),
    "kernel_times": kernel_times_option(),
}


@app.command()
def serve(ctx: typer.Context, model: str | None = OPT["model"],
          system: str | None = OPT["system"],
          model_file: str | None = OPT["model_file"], tp: int = OPT["tp"],
          ep: int = OPT["ep"], pp: int = OPT["pp"],
          dp_attention: int = OPT["dp_attention"],
          replicas: int | None = OPT["replicas"],
          rate: float | None = OPT["rate"],
          burst_cv: float | None = OPT["burst_cv"],
          concurrency: int | None = OPT["concurrency"],
          client: str | None = OPT["client"],
          requests: int | None = OPT["requests"],
          measure: str | None = OPT["measure"], isl: int = OPT["isl"],
          osl: int = OPT["osl"], trace: str | None = OPT["trace"],
          dataset: str | None = OPT["dataset"],
          dataset_spread: float | None = OPT["dataset_spread"],
          slo_ttft: float | None = OPT["slo_ttft"],
          slo_tpot: float | None = OPT["slo_tpot"],
          precision: str = OPT["precision"],
          kv_dtype: str | None = OPT["kv_dtype"], engine: str = OPT["engine"],
          max_num_seqs: int | None = OPT["max_num_seqs"],
          max_batched_tokens: int | None = OPT["max_batched_tokens"],
          chunked_prefill: bool | None = OPT["chunked_prefill"],
          preemption: str = OPT["preemption"],
          scheduler_steps: int = OPT["scheduler_steps"],
          gpu_memory_utilization: float | None = OPT["gpu_memory_utilization"],
          seed: int = OPT["seed"], eplb: bool = OPT["eplb"],
          pd: str | None = OPT["pd"],
          decode_system: str | None = OPT["decode_system"],
          two_batch_overlap: bool = OPT["two_batch_overlap"],
          search: bool = OPT["search"], ray: bool = OPT["ray"],
          versus: str | None = OPT["versus"], spec: str | None = OPT["spec"],
          spec_tokens: int | None = OPT["spec_tokens"],
          acceptance: str | None = OPT["acceptance"],
          draft_model: str | None = OPT["draft_model"],
          kv_tier: str | None = OPT["kv_tier"], prefix_tokens: int = OPT["prefix_tokens"],
          json: bool = OPT["json"], profile: str | None = OPT["profile"],
          nccl: str | None = OPT["nccl"],
          kernel_times: str = OPT["kernel_times"]) -> None:
    """Simulate serving MODEL on SYSTEM: latencies, throughput, goodput, KV cache, bottleneck."""
    o = {k: v for k, v in locals().items() if k != "ctx"}
    model, system = model_and_system(model, system, model_file, ctx)
    _check_serve(ctx, o)
    cfg = _serve_config(o)
    if versus:
        return _versus(model, system, versus, cfg, json)
    if search:
        return _search(model, system, cfg, decode_system, ray, json)
    _serve_one(model, system, cfg, o)


def _check_serve(ctx: typer.Context, o: dict[str, Any]) -> None:
    """`serve`'s options checked together: conflicts, options that need another, a dataset
    against --isl/--osl, users against requests, the engine and the formats (``o["dataset"]``
    set to the dataset's own name)."""
    from gpufabric.cli.common import given
    from gpufabric.workloads.inference.engines import check as check_engine
    from gpufabric.workloads.inference.precisions import lookup as check_format
    from gpufabric.workloads.inference.serve import DEFAULT_REQUESTS
    refuse_together(ctx, CONFLICTS)
    refuse_alone(ctx, (
        ("burst_cv", o["rate"] is not None, "applies only with --rate (the gaps between its "
         "arrivals)"),
        ("ray", o["search"], "applies only with --search (where its candidates run)"),
        ("dataset_spread", o["dataset"] is not None, "applies only with --dataset (a "
         "synthetic dataset's spread)"),
        ("two_batch_overlap", bool(o["pd"] or o["decode_system"]),
         "applies only with --pd or --decode-system (the pool figures)")))
    if o["dataset"] is not None:
        from gpufabric.workloads.inference.datasets import get as get_dataset
        ds = get_dataset(o["dataset"])
        for opt in ("isl", "osl"):
            if not ds.synthetic and given(ctx, opt):
                raise InputError(f"cannot be used with --dataset {ds.name} (the dataset gives "
                                 "the lengths; only the synthetic ones, trtllm-fixed, "
                                 "trtllm-normal and vllm-random, centre on --isl / --osl)",
                                 field=f"--{opt}")
        if o["dataset_spread"] is not None and ds.synthetic in (None, "fixed"):
            raise InputError(f"applies only to trtllm-normal and vllm-random, not {ds.name}",
                             field="--dataset-spread")
        o["dataset"] = ds.name
    requests, concurrency = o["requests"], o["concurrency"]
    if concurrency is not None and (requests is None or requests >= 1):
        from gpufabric.errors import check_range  # users who would never send a request
        by_default = "" if requests is not None else f", {DEFAULT_REQUESTS:,} unless given"
        check_range(concurrency, 1, DEFAULT_REQUESTS if requests is None else requests,
                    integer=True, field="--concurrency",
                    why=f" (at most --requests{by_default}: each user of the closed loop "
                        "sends one request at least)")
    check_engine(o["engine"])
    check_format(o["precision"], "weights")
    if o["kv_dtype"] is not None:
        check_format(o["kv_dtype"], "kv")
    if o["client"] is not None:
        from gpufabric.workloads.inference import clients
        clients.check_load(clients.get(o["client"]), o["rate"], concurrency)
    if o["measure"] is not None and o["measure"] not in ("steady", "run"):
        raise InputError(f"got {o['measure']!r}; allowed: steady, run", field="--measure")


#: ServeConfig's fields that `serve` takes as options of the same name.
_SAME = ("tp", "ep", "pp", "dp_attention", "replicas", "precision", "kv_dtype", "engine",
         "rate", "burst_cv", "concurrency", "isl", "osl", "trace", "dataset", "dataset_spread",
         "max_num_seqs", "max_batched_tokens", "chunked_prefill", "preemption", "seed",
         "eplb",
         "gpu_memory_utilization", "scheduler_steps", "measure", "client", "spec",
         "spec_tokens", "acceptance", "draft_model", "prefix_tokens")


def _serve_config(o: dict[str, Any]) -> Any:
    """The library's one options value (:class:`ServeConfig`) of `serve`'s options."""
    from gpufabric.workloads.inference.serve import DEFAULT_REQUESTS, ServeConfig
    given = o["requests"] is not None or o["trace"]
    return ServeConfig(**{k: o[k] for k in _SAME},
                       requests=o["requests"] if given else DEFAULT_REQUESTS,
                       slo_ttft_ms=o["slo_ttft"], slo_tpot_ms=o["slo_tpot"],
                       kv_tiers=tuple(o["kv_tier"].split(",")) if o["kv_tier"] is not None
                       else ())


def _versus(model: str, system: str, versus: str, cfg: Any, json: bool) -> None:
    """`serve --versus`: each system at its best layout and highest rate within the SLO."""
    from gpufabric.topology.build import load
    from gpufabric.workloads.inference.pd import gpu_count
    from gpufabric.workloads.inference.supernode import supernode_vs_servers
    a, b = load(system), load(versus)
    if cfg.slo_ttft_ms is None and cfg.slo_tpot_ms is None:  # a comparison needs an SLO
        cfg = replace(cfg, slo_ttft_ms=VERSUS_SLO_MS[0], slo_tpot_ms=VERSUS_SLO_MS[1])
    gpus = min(gpu_count(a)[0], gpu_count(b)[0])
    gpus = gpus // 8 * 8 or gpus
    with Progress("serve --versus") as progress:
        res = supernode_vs_servers(model, a, b, cfg, gpus,
                                   progress=progress.told("layouts of both systems"))
    if json:
        emit_json(res)
        return
    typer.echo(f"# {model} on {gpus} GPUs, isl {cfg.isl}, osl {cfg.osl}, SLO TTFT "
               f"{cfg.slo_ttft_ms} ms, TPOT {cfg.slo_tpot_ms} ms; best layout of each")
    for key in ("supernode", "servers"):
        r = res[key]
        typer.echo(f"{r['system']:<40} {r['layout']:<16} {r['tokens_per_s_per_gpu']:>8.0f} "
                   f"tokens/s per GPU at {r['rate']:.1f} requests/s")
    typer.echo(f"ratio {res['ratio']:.2f}: {res['reason']}")


def _search(model: str, system: str, cfg: Any, decode_system: str | None, ray: bool,
            json: bool) -> None:
    """`serve --search`: co-located and xPyD layouts ranked by goodput per GPU."""
    from gpufabric.workloads.inference.search import search as run_search
    with Progress("serve --search") as progress:
        res = run_search(model, system, cfg, decode_system=decode_system, ray=ray,
                         progress=progress.told("layouts"))
    if json:
        emit_json(res)
    else:
        print_search(res)
    note(res["note"])


def _serve_one(model: str, system: str, cfg: Any, o: dict[str, Any]) -> None:
    """One deployment simulated: co-located (no request count given: the steady state's
    figures pick it, doubling until they converge) or disaggregated (--pd, --decode-system)."""
    from gpufabric.topology.build import load
    topo = load(system)
    if o["pd"] or o["decode_system"]:
        from gpufabric.workloads.inference.pd import serve_pd
        r = serve_pd(model, topo, cfg, o["pd"] or "1P1D",
                     load(o["decode_system"]) if o["decode_system"] else None,
                     overlap=o["two_batch_overlap"])
    else:
        from gpufabric.workloads.inference.serve import near_capacity, serve as run
        once = cfg if o["requests"] is not None or o["trace"] else replace(cfg, requests=None)
        with Progress("serve") as progress:
            r = run(model, topo, once, progress=progress.told("requests of one instance"))
        near = near_capacity(model, topo, once, r)
        if near:
            r["near_capacity"] = near
    if o["json"]:
        emit_json(r)
    else:
        print_summary(r)
    note(r["workload"].get("note", ""))

@app.command()
def datasets(json: bool = typer.Option(False, "--json", help="Print JSON."),
             wide: bool = wide_option()) -> None:
    """List the named serving datasets: input and output length statistics and sources."""
    from gpufabric.workloads.inference.datasets import datasets as all_datasets
    ds = all_datasets()
    if json:
        emit_json([d.summary() for d in ds])
        return

    def n(x: float | None) -> str:
        return "-" if x is None else f"{x:,.0f}"

    def side(ls) -> str:
        if ls.run:
            return "(--isl/--osl)"
        return f"{n(ls.mean):>6} {n(ls.median):>6} {n(ls.p90):>6}"

    def gaps(d) -> str:
        gone = [k for k, ls in (("input", d.isl), ("output", d.osl)) if ls.unknown]
        return f"not samplable: {' and '.join(gone)} lengths not published" if gone else ""
    cols = [Col("dataset"), Col("input tokens mean/med/p90", right=True),
            Col("output tokens mean/med/p90", right=True), Col("note", wrap=True, min_width=20),
            Col("source", wrap=True, drop=1, min_width=30)]
    print_table(cols, [(d.name, side(d.isl), side(d.osl), gaps(d), d.isl.source.split(" ")[0])
                       for d in ds], wide=wide)


@app.command()
def clients(json: bool = typer.Option(False, "--json", help="Print JSON (with sources).")
            ) -> None:
    """List the benchmark clients `serve --client` reproduces (load and figures)."""
    from gpufabric.workloads.inference.clients import table
    rows = table()
    if json:
        emit_json(rows)
        return
    typer.echo(f"# {'client':<22} {'arrivals':<13} {'figures':<8} {'min run':>8}  what it is")
    for r in rows:
        dur = f"{r['min_duration_s']:g} s" if r["min_duration_s"] else "-"
        setup = ", ".join(x for x in (
            {True: "chunked", False: "whole prefill"}.get(r["chunked_prefill"], ""),
            "own limits" if r["engine_settings"] else "") if x)
        setup = f" ({setup})" if setup else ""
        typer.echo(f"  {r['name']:<22} {r['arrivals']:<13} {r['measure']:<8} {dur:>8}  "
                   f"{r['title']}{setup}")


def print_search(res: dict) -> None:
    typer.echo(f"# gpufabric serve --search: {res['model']} on {res['system']}, "
               f"{res['candidates']} layouts ({len(res['refused'])} do not fit), ranked by "
               "goodput per GPU")
    typer.echo(f"# {'layout':<14} {'GPUs':>5} {'goodput/GPU':>12} {'SLO met':>8} "
               f"{'TTFT p90':>9} {'TPOT p90':>9} {'tok/s/GPU':>10}")
    for r in res["ranked"][:15]:
        typer.echo(f"  {r['name']:<14} {r['gpus']:>5} {r['goodput_per_gpu']:>12.3f} "
                   f"{r['slo_attainment']:>8.0%} {r['ttft_ms_p90']:>9.0f} "
                   f"{r['tpot_ms_p90']:>9.1f} {r['throughput_tokens_per_s_per_gpu']:>10.0f}")
    b, co, dis = res["best"], res["best_colocated"], res["best_disaggregated"]
    typer.echo(f"best: {b['name']} on {b['gpus']} GPUs, {b['goodput_per_gpu']:.3f} requests/s "
               f"per GPU within the SLO; {b['bottleneck']}")
    if co and dis:
        ratio = dis["goodput_per_gpu"] / co["goodput_per_gpu"] if co["goodput_per_gpu"] else 0
        typer.echo(f"disaggregated ({dis['name']}) vs co-located ({co['name']}): "
                   f"{ratio:.2f}x goodput per GPU")


def run_inference(file: str) -> dict:
    """`gpufabric validate FILE` of an inference measurements file: the validator's result."""
    from gpufabric.workloads.inference import validate as V
    with Progress("validate") as progress:
        res = V.validate(file, progress=progress.told("points"))
    return {"file": file} | res


def print_inference(res: dict, wide: bool = False) -> None:
    """One inference file's summary, table (status per point) and skipped points."""
    file = res["file"]
    typer.echo(f"# gpufabric validate {file} (inference serving)")
    print_validation_summary(res["summary"], file)
    cols = [Col("id", wrap=True, min_width=24), Col("pt", right=True),
            Col("metric", wrap=True, min_width=16), Col("measured", right=True),
            Col("predicted", right=True), Col("error", right=True), Col("status")]
    print_table(cols, [(r["id"], r["point"], r["metric"], f"{r['measured']:.1f}",
                        f"{r['predicted']:.1f}", f"{r['error_pct']:+.1f}%", r["status"])
                       for r in res["points"]], wide=wide)
    reasons: dict[str, int] = {}
    for sk in res["skipped"]:
        reasons[f"{sk['id']}: {sk['reason']}"] = reasons.get(f"{sk['id']}: {sk['reason']}", 0) + 1
    for k, n in reasons.items():
        typer.echo(f"# skipped {k}" + (f" ({n} points)" if n > 1 else ""))
