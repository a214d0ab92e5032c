"""Prefill-decode disaggregation: a prefill pool and a decode pool, the KV cache moved between.

An ``xPyD`` deployment has ``x`` prefill instances and ``y`` decode instances, each of the same
parallel layout, possibly on different GPU kinds (``decode_topo``). A request is prefilled on
a prefill instance (a prefill-only continuous-batching run: chunked prefill, no decode
interference), its KV cache then moves to a decode instance over the modeled fabric, and the
decode instance generates the remaining tokens (a decode-only run whose requests arrive with
their cache). TTFT is the prefill's first token plus the KV transfer (the decode side streams
from there, as SGLang and Dynamo do).

The transfer is timed by :func:`gpufabric.collectives.predict` as a send/receive between a
prefill GPU and a decode GPU with all ``tp x pp`` ranks of the instance sending their shard at
once (``concurrent``), over NVLink when both pools sit in one NVLink domain and over the NICs
otherwise (pools on two systems: timed on each system's servers, NICs and PCIe, and the slower
taken); transfers from one prefill instance queue behind each other on its links, and
transfers into one decode instance (from all ``x`` prefill instances) on the decode side's
links: a transfer ends when both ends have carried it (``kv_wait_ms``: the time spent
queueing on either end). With attention data parallelism each instance is ``dp_attention``
request streams, and a request's cache moves from the ``tp / dp_attention`` GPUs holding it.

Examples
--------
>>> from gpufabric.topology.build import from_spec
>>> topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 2, "nic": "ib-ndr"})
>>> r = serve_pd("llama3-8b", topo, ServeConfig(tp=2, rate=8.0, requests=200, isl=2000,
...              osl=100), "2P2D")
>>> r["gpus"], r["pd"]["name"], r["pd"]["kv_link"]
(8, '2P2D', 'NVLink')
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

import numpy as np

from gpufabric import collectives
from gpufabric.errors import InputError
from gpufabric.network import Network, Transfer
from gpufabric.topology.build import from_spec
from gpufabric.topology.model import Topology
from gpufabric.workloads.compute import record
from gpufabric.workloads.inference import requests as R
from gpufabric.workloads.inference.itertime import StepModel
from gpufabric.workloads.inference.serve import (ServeConfig, bottleneck, build_requests,
                                                 check_config, check_slo_possible,
                                                 scheduler_config, simulate_with_front_end,
                                                 source_text, step_model, trace_fields,
                                                 typical_breakdown)
from gpufabric.workloads.inference.simulator import (SimResult, check_fits, simulate,
                                                     summarize)


#: The KV-transfer engine (Mooncake Transfer Engine, NIXL): a fixed cost per request's transfer
#: (registration, handshake, completion) and the fraction of the links' NCCL-usable rate its
#: RDMA writes reach. Fitted on the transfer times of Mooncake's vLLM 1P1D run on H800
#: (128 to 32,768 tokens; two-point fit of the smallest and largest, the rest within 6 %); the
#: rate share also explains the large transfers of its SGLang 1P1D run on H20 (another engine
#: on other machines: within 7 % from 8,192 tokens), whose small ones the setup cost does not.
#: data/fits.yaml names the entries.
KV_SETUP_S = record("KV_SETUP_S", 0.00039, "s per transfer",
                    "KV-transfer engines: fixed cost of one request's transfer",
                    "fitted on Mooncake's vLLM 1P1D KV-transfer run on H800 (data/fits.yaml "
                    "names the entry)")
KV_EFF = record("KV_EFF", 0.81, "fraction of the send/recv rate",
                "KV-transfer engines: share of the links' NCCL-usable rate",
                "fitted on Mooncake's vLLM 1P1D run on H800 and the large transfers of its "
                "SGLang 1P1D run on H20; Mooncake's transfer engine on both (data/fits.yaml "
                "names the entries)")


def parse_pd(text: str) -> tuple[int, int]:
    """``'2P1D'`` -> (2, 1).

    >>> parse_pd("3p2d")
    (3, 2)
    """
    m = re.fullmatch(r"\s*(\d+)\s*[pP]\s*(\d+)\s*[dD]\s*", str(text))
    if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1:
        raise InputError(f"got {text!r}; expected xPyD with x, y >= 1, e.g. 2P1D", field="--pd")
    return int(m.group(1)), int(m.group(2))


def gpu_count(topo: Topology) -> tuple[int, int]:
    """(GPUs in all, GPUs per NVLink domain: a server, or a rack-scale domain of trays)."""
    per, domains = topo.scale_up()
    return per * domains, per


def _twin(spec: dict) -> dict:
    """The system's spec as two nodes (both ends of the transfer with the system's NICs)."""
    def clean(d: dict) -> dict:
        return {k: clean(v) if isinstance(v, dict) else v for k, v in d.items()
                if v is not None}
    s = clean(spec)
    if not s.get("nvlink_links"):      # a card without NVLink: 0 is the builder's, not a choice
        s.pop("nvlink_links", None)
    s["nodes"] = 2
    if not s.get("nics_per_node"):
        s["nics_per_node"] = s["gpus_per_node"]
    s.setdefault("nic", "ib-ndr")
    return s


def _kv_path(topo: Topology, decode_topo: Topology | None, x: int, y: int, per_inst: int
             ) -> tuple[list[Topology], int, str]:
    """The topologies the transfer runs on, ranks per node (2: one node, 1: across) and a
    name. Across the network, each end's servers as at least two nodes: the prefill system's,
    and the decode system's when it is another (a transfer goes at the slower end's pace)."""
    total, per_node = gpu_count(topo)
    if decode_topo is None and (x + y) * per_inst <= per_node:
        return [topo], 2, "NVLink" if any(ln.kind == "nvlink" for ln in topo.links) else "PCIe"
    if decode_topo is None and (x + y) * per_inst > total:
        raise InputError(f"{x}P{y}D of {per_inst} GPUs each needs {(x + y) * per_inst} GPUs; "
                         f"the system has {total}", field="--pd")
    ends = [_across(t) for t in ([topo] if decode_topo is None else [topo, decode_topo])]
    nics = {str(n.model) for t in ends for n in t.nics() if n.model}
    return ends, 1, "RDMA NICs (" + ", ".join(sorted(nics)) + ")"


def _across(t: Topology) -> Topology:
    """``t`` with at least two nodes: one node talks over its NICs to a twin of itself."""
    total, per_node = gpu_count(t)
    if total > per_node:
        return t
    spec = t.meta.get("spec")
    if not isinstance(spec, dict):
        raise InputError("the KV transfer to another system needs the system as a spec "
                         "(gpu, gpus_per_node, nic) so its NICs are known", field="SYSTEM")
    return from_spec(_twin(spec))


def decode_link_bytes(sm: StepModel, local: int) -> tuple[float, float]:
    """Bytes per token of a decode batch that each GPU of the decode instance sends over the
    links a KV transfer arrives by: (tensor-parallel all-reduce, expert all-to-all).

    ``local`` is how many ranks of a group share those links' far side without crossing them:
    1 when the KV cache arrives over NVLink (every peer's bytes cross the GPU's NVLink ports),
    the NVLink domain's size when it arrives over the NICs (only peers off the domain cross).

    >>> from gpufabric.topology.build import from_spec
    >>> from gpufabric.workloads.inference.itertime import ServeLayout
    >>> t = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 2, "nic": "ib-ndr"})
    >>> sm = StepModel("llama3-8b", t, ServeLayout(tp=2))
    >>> decode_link_bytes(sm, 1)      # 32 layers x 2 all-reduces of 8 KiB, ring over 2 ranks
    (524288.0, 0.0)
    >>> decode_link_bytes(sm, 8)      # TP2 inside a node: nothing crosses its NICs
    (0.0, 0.0)
    """
    m, lay = sm.model, sm.layout
    act = m.hidden * 2.0
    n_moe = m.moe_layers
    n_dense = m.layers - n_moe

    def cross(ranks: int) -> float:          # share of a rank's peer traffic crossing the links
        return max(0, ranks - local) / (ranks - 1) if ranks > 1 else 0.0

    def ring(ranks: int) -> float:           # bytes a rank sends per byte of an all-reduce
        return 2.0 * (ranks - 1) / ranks if ranks > 1 else 0.0

    tp_b = m.layers * act * ring(lay.attn_tp) * cross(lay.attn_tp)
    tp_b += n_dense * act * lay.dp_attention * ring(lay.tp) * cross(lay.tp)
    ep_b = 0.0
    if n_moe and lay.ep > 1:
        ep_b = (n_moe * m.top_k * m.hidden * (sm.ab + 2.0) * (lay.ep - 1) / lay.ep
                * cross(lay.ep))
    if n_moe and lay.tp // lay.ep > 1:
        tp_b += n_moe * act * lay.dp_attention * ring(lay.tp) * cross(lay.tp)
    return float(tp_b), float(ep_b)


def link_sharing(link_topo: Topology, per_node: int, senders: int, dec_bytes: float
                 ) -> tuple[float, float]:
    """What a KV transfer and one decode iteration's traffic cost each other on shared links.

    Timed by :meth:`gpufabric.network.Network.simulate`: the KV shards (``senders`` GPUs to as
    many decode GPUs, across nodes when ``per_node`` is 1, inside a node when 2) with and
    without ``dec_bytes`` arriving at each of those decode GPUs from their peers at the same
    time, shared max-min fairly. Returns (seconds the KV transfer loses, seconds the decode
    traffic loses), each >= 0: the network never lets added traffic speed a flow up.

    >>> t = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 2, "nic": "ib-ndr"})
    >>> kv, dec = link_sharing(t, 1, 8, 50e6)
    >>> round(kv * 1e3, 3), round(dec * 1e3, 3)    # 50 MB at a NIC's 48 GB/s usable, each
    (1.042, 1.042)
    """
    if dec_bytes <= 0:
        return 0.0, 0.0
    net = Network(link_topo)
    by_node: dict[int, list[str]] = {}
    for g in link_topo.gpus():
        by_node.setdefault(g.node, []).append(g.id)
    nodes = sorted(by_node)
    if per_node == 1:
        a, b = by_node[nodes[0]], by_node[nodes[1]]
        k = max(1, min(senders, len(a), len(b)))
        src, dst = a[:k], b[:k]
        peers = [a[(i + k) % len(a)] for i in range(k)]    # the decode group's far ranks
    else:
        a = by_node[nodes[0]]
        k = max(1, min(senders, len(a) // 2))
        src, dst = a[:k], a[k:2 * k]
        peers = [dst[(i + 1) % k] if k > 1 else a[(2 * k) % len(a)] for i in range(k)]
    kv_size = max(1e9, 4.0 * dec_bytes)          # a transfer outlasting the iteration's traffic
    kv = [Transfer(s_, d_, kv_size, tag="kv") for s_, d_ in zip(src, dst, strict=True)]
    dec = [Transfer(p_, d_, dec_bytes, tag="decode") for p_, d_ in zip(peers, dst, strict=True)]
    kv_alone = max(net.simulate(kv).time_s)
    dec_alone = max(net.simulate(dec).time_s)
    both = net.simulate(kv + dec).time_s
    return max(0.0, max(both[:k]) - kv_alone), max(0.0, max(both[k:]) - dec_alone)


def _transfers(done_p: np.ndarray, xfer: np.ndarray, pos: np.ndarray, full: R.Requests,
               res_p: SimResult, xfer_all: np.ndarray, idx_d: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Queue the transfers on the prefill instance's links, then on the decode instance's:
    (when each request is ready to decode, when each prefill stream-0 transfer ended)."""
    done = done_p.copy()
    link_free = 0.0
    for k in np.argsort(done, kind="stable"):        # transfers queue on the instance's links
        start = max(done[k], link_free)
        link_free = start + xfer[k]
        done[k] = link_free
    # every request of the stream gets the delays of its prefill-instance counterpart
    ready = full.arrival + (done - res_p.arrival)[pos]
    # the decode instance receives from all x prefill instances on its own links: a transfer
    # that finds them busy (x > y, or bursts) waits there too (a tandem of the two queues)
    sent = ready.copy()
    recv_free = 0.0
    for k in idx_d[np.argsort(sent[idx_d], kind="stable")]:
        ready[k] = max(sent[k], recv_free + xfer_all[k])
        recv_free = ready[k]
    return ready, done


@dataclass
class _PdRun:
    """The state of one disaggregated run shared by its steps: the two pools' step models,
    the requests, each prefill stream's results and the KV transfers."""

    cfg: ServeConfig
    x: int
    y: int
    sm_p: StepModel
    sm_d: StepModel
    per: int                     # GPUs per instance
    link_topo: Topology          # the decode end's servers (the pool's collectives share them)
    per_node: int
    link: str
    full: R.Requests
    xs: int = 1                  # prefill and decode request streams (x, y times attention-DP)
    ys: int = 1
    senders: int = 1             # the GPUs holding one request's KV cache
    idx_p: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    idx_d: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    pos: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    res_p: SimResult | None = None
    xfer: np.ndarray = field(default_factory=lambda: np.zeros(0))
    xfer_all: np.ndarray = field(default_factory=lambda: np.zeros(0))
    ends: list[Topology] = field(default_factory=list)   # each end's servers (a transfer's pace)


def serve_pd(model: str, topo: Topology, cfg: ServeConfig, pd: str | tuple[int, int],
             decode_topo: Topology | None = None, overlap: bool = False) -> dict:
    """Simulate an xPyD disaggregated deployment; the same summary keys as ``serve``, and
    ``pd.pools``: the pools' steady throughput (:func:`pool_figures`; ``overlap``: two-batch
    overlap)."""
    run = _pd_setup(model, topo, cfg, pd, decode_topo)
    _prefill_pool(run)
    order, res_d, ready, done, sharing = _decode_pool(run, decode_topo or topo)
    return _pd_result(run, topo, decode_topo, order, res_d, ready, done, sharing, overlap)


def _pd_setup(model: str, topo: Topology, cfg: ServeConfig, pd: str | tuple[int, int],
              decode_topo: Topology | None) -> _PdRun:
    """The pools' step models and requests, checked: instances fit their systems, requests
    fit both pools' caches, the SLO is possible, the run is open loop."""
    x, y = parse_pd(pd) if isinstance(pd, str) else pd
    check_config(cfg)
    if cfg.spec is not None:
        raise InputError("speculative decoding is modelled for co-located serving, not for "
                         "disaggregated pools", field="--spec")
    sm_p = step_model(model, topo, cfg)
    sm_d = step_model(model, decode_topo, cfg) if decode_topo is not None else sm_p
    per = cfg.layout().gpus
    if decode_topo is not None:
        for name, t, k in (("prefill", topo, x), ("decode", decode_topo, y)):
            if k * per > gpu_count(t)[0]:
                raise InputError(f"{k} {name} instances of {per} GPUs need {k * per}; "
                                 f"{t.name} has {gpu_count(t)[0]}", field="--pd")
    ends, per_node, link = _kv_path(topo, decode_topo, x, y, per)
    full = build_requests(cfg, 1)
    if full.concurrency:
        raise InputError("--pd runs take --rate or a trace (open loop), not --concurrency",
                         field="--concurrency")
    check_fits(R.Requests(full.arrival, full.isl, np.ones_like(full.osl)),
               scheduler_config(sm_p, cfg))                  # prefill: the prompt, 1 token
    check_fits(full, scheduler_config(sm_d, cfg))            # decode: the whole request
    check_slo_possible(sm_p, cfg, int(full.isl.max()))
    # with attention-DP each instance runs dp_attention request streams (its attention ranks,
    # each with its own requests and KV cache): the pools have x and y times that many
    dpa = cfg.dp_attention
    return _PdRun(cfg, x, y, sm_p, sm_d, per, ends[-1], per_node, link, full, ends=ends,
                  xs=x * dpa, ys=y * dpa, senders=per // dpa)


def _prefill_pool(run: _PdRun) -> None:
    """Prefill stream 0 (requests 0, xs, 2xs, ...: each produces the first token, after the
    engine's front end and the PD router) and every request's KV transfer time: each GPU of
    the instance sends its shard, all at once."""
    full, sm_p = run.full, run.sm_p
    n = len(full)
    run.idx_p = np.arange(0, n, run.xs)
    pre_req = R.Requests(full.arrival[run.idx_p], full.isl[run.idx_p],
                         np.ones(run.idx_p.size, np.int64))
    run.res_p = simulate_with_front_end(pre_req, sm_p, scheduler_config(sm_p, run.cfg),
                                        disaggregated=True)
    sizes = np.unique(full.isl * sm_p.kv_bytes_per_token)
    t_of = {int(s): KV_SETUP_S.value + max(collectives.predict(
        t, "send_recv", int(s), 2, per_node=run.per_node,
        concurrent=run.senders).time_us for t in run.ends) * 1e-6 / KV_EFF.value
        for s in sizes}
    run.xfer = np.array([t_of[int(s)] for s in full.isl[run.idx_p] * sm_p.kv_bytes_per_token])
    run.pos = np.minimum(np.arange(n) // run.xs, run.idx_p.size - 1)
    run.idx_d = np.arange(0, n, run.ys)
    run.xfer_all = np.array([t_of[int(v)] for v in full.isl * sm_p.kv_bytes_per_token])


def _decode_pool(run: _PdRun, decode_topo: Topology
                 ) -> tuple[np.ndarray, SimResult, np.ndarray, np.ndarray, dict]:
    """Decode stream 0 on the transferred requests, and what the KV transfers and the decode
    pool's own collectives cost each other on the links they share (the network's max-min
    sharing, per decode iteration): (order, result, ready, done, sharing)."""
    full, res_p, cfg = run.full, run.res_p, run.cfg
    assert res_p is not None
    dec = run.idx_d[full.osl[run.idx_d] >= 2]

    def transfers() -> tuple[np.ndarray, np.ndarray]:
        return _transfers(res_p.first_token, run.xfer, run.pos, full, res_p, run.xfer_all,
                          run.idx_d)

    def decode(ready: np.ndarray, sm: StepModel) -> tuple[np.ndarray, SimResult]:
        order = dec[np.argsort(ready[dec], kind="stable")]
        dec_req = R.Requests(ready[order], full.isl[order], full.osl[order])
        return order, simulate(dec_req, sm, scheduler_config(sm, cfg), prefilled=True)

    ready, done = transfers()
    order, res_d = decode(ready, run.sm_d)
    # the KV transfers share the decode GPUs' links with the decode pool's own collectives
    # (NVLink ports inside a domain; the NICs when the pool's TP / EP groups span domains)
    local = 1 if run.per_node == 2 else gpu_count(decode_topo)[1]
    tp_b, ep_b = decode_link_bytes(run.sm_d, local)
    busy = res_d.iter_decode > 0
    sharing = {"decode_bytes_per_iteration": 0.0, "kv_slowdown": 1.0, "kv_link_busy": 0.0,
               "decode_comm_ms_per_iteration": 0.0}
    if tp_b + ep_b > 0 and busy.any():
        tok = float(res_d.iter_decode[busy].mean())
        it_s = float(res_d.iter_time_s[busy].mean())
        kv_lost, dec_lost = link_sharing(run.link_topo, run.per_node, run.senders,
                                         (tp_b + ep_b) * tok)
        slow = 1.0 + kv_lost / it_s                  # the decode traffic met per second of KV
        run.xfer, run.xfer_all = run.xfer * slow, run.xfer_all * slow
        ready, done = transfers()
        # the share of the decode run its links carry a KV cache in; while they do, the
        # pool's collectives lose what the sharing says
        span = float(res_d.finish.max() - res_d.arrival.min()) if res_d.finish.size else 0.0
        v = min(1.0, float(run.xfer_all[run.idx_d].sum()) / span) if span > 0 else 0.0
        per_tok = v * dec_lost / tok
        run.sm_d = run.sm_d.with_shared_links(per_tok * tp_b / (tp_b + ep_b),
                                              per_tok * ep_b / (tp_b + ep_b))
        order, res_d = decode(ready, run.sm_d)
        sharing = {"decode_bytes_per_iteration": (tp_b + ep_b) * tok, "kv_slowdown": slow,
                   "kv_link_busy": v, "decode_comm_ms_per_iteration": v * dec_lost * 1e3}
    return order, res_d, ready, done, sharing


def _pcts(x: np.ndarray) -> dict[str, float]:
    return {k: float(v) for k, v in zip(("p50", "p90", "p99"), np.percentile(x, [50, 90, 99]),
                                        strict=True)}


def _pd_result(run: _PdRun, topo: Topology, decode_topo: Topology | None, order: np.ndarray,
               res_d: SimResult, ready: np.ndarray, done: np.ndarray, sharing: dict,
               overlap: bool) -> dict:
    """The run's summary: ``serve``'s keys over the combined requests, ``pd`` (instances, KV
    link and transfer times, link sharing, pool figures) and the bottleneck in words."""
    full, cfg, sm_p, sm_d, res_p = run.full, run.cfg, run.sm_p, run.sm_d, run.res_p
    assert res_p is not None
    n, x, y, per = len(full), run.x, run.y, run.per
    # transfer start to finish, queueing on both ends included, for decode instance 0's stream
    start = (full.arrival + (res_p.first_token - res_p.arrival)[run.pos])[run.idx_d]
    wait = ready[run.idx_d] - start - run.xfer_all[run.idx_d]
    combined = SimResult(arrival=full.arrival[order], first_token=ready[order],
                         finish=res_d.finish, isl=full.isl[order], osl=full.osl[order],
                         preemptions=res_d.preemptions, generated=res_d.generated,
                         iter_time_s=res_d.iter_time_s, iter_decode=res_d.iter_decode,
                         iter_prefill=res_d.iter_prefill, kv_t=res_d.kv_t,
                         kv_used_blocks=res_d.kv_used_blocks, num_blocks=res_d.num_blocks,
                         iterations=res_d.iterations, stats=res_d.stats)
    s = summarize(combined, gpus=1, slo_ttft_ms=cfg.slo_ttft_ms, slo_tpot_ms=cfg.slo_tpot_ms)
    gpus = (x + y) * per
    for key in ("throughput_tokens_per_s", "total_tokens_per_s", "requests_per_s",
                "goodput_requests_per_s"):
        s[key] = s[key] * run.ys
    s["throughput_tokens_per_s_per_gpu"] = s["throughput_tokens_per_s"] / gpus
    s["requests"] = n
    out = {"model": sm_p.model.name, "system": topo.name, "gpu": sm_p.gpu.name, "gpus": gpus,
           "replicas": x + y, "layout": asdict(cfg.layout()), "precision": sm_p.precision,
           "kv_dtype": sm_p.kv_dtype, "compute_precision": sm_p.compute_prec,
           "engine": sm_p.engine,
           "workload": {"source": source_text(cfg, full.source), "rate": cfg.rate,
                        "concurrency": None, "isl": float(full.isl.mean()),
                        "osl": float(full.osl.mean()), "simulated_requests": int(n),
                        **trace_fields(cfg, full)},
           "slo": {"ttft_ms": cfg.slo_ttft_ms, "tpot_ms": cfg.slo_tpot_ms},
           "memory": sm_d.memory(),
           "max_concurrency": sm_d.max_concurrency(int(full.isl.mean()),
                                                   int(full.osl.mean())),
           "pd": {"name": f"{x}P{y}D",
                  "prefill": {"instances": x, "gpus_per_instance": per, "gpu": sm_p.gpu.name,
                              "system": topo.name},
                  "decode": {"instances": y, "gpus_per_instance": per, "gpu": sm_d.gpu.name,
                             "system": (decode_topo or topo).name},
                  "kv_link": run.link, "kv_bytes_per_request_mean": float(
                      (full.isl * sm_p.kv_bytes_per_token * run.senders).mean()),
                  "kv_transfer_ms": _pcts(run.xfer * 1e3),
                  "prefill_ms": _pcts((res_p.first_token - res_p.arrival) * 1e3),
                  "kv_wait_ms": _pcts(np.maximum(wait, 0.0).round(9) * 1e3),
                  "link_sharing": sharing,
                  "pools": pool_figures(sm_p, sm_d, float(full.isl.mean()),
                                        float(full.osl.mean()), cfg.slo_tpot_ms,
                                        overlap=overlap,
                                        per_node=(_node_gpus(topo),
                                                  _node_gpus(decode_topo or topo)),
                                        batch=cfg.max_num_seqs)}}
    out.update(s)
    bd = typical_breakdown(sm_d, res_d)
    out["breakdown_ms"] = {k.removesuffix("_s"): v * 1e3 for k, v in asdict(bd).items()}
    share = float(np.median(run.xfer / np.maximum(done - res_p.arrival, 1e-12)))
    said = (f"decode pool: {bottleneck(sm_d, s, bd, res_d)}; the KV transfer over {run.link} "
            f"is {share:.0%} of the median TTFT")
    if sharing["kv_slowdown"] > 1.0:
        said += (f"; the decode pool's own collectives on the same links slow "
                 f"it by {sharing['kv_slowdown'] - 1:.1%}, and the transfers "
                 f"(on them {sharing['kv_link_busy']:.1%} of the time) add "
                 f"{sharing['decode_comm_ms_per_iteration'] * 1e3:.1f} us to an "
                 "average decode iteration")
    out["bottleneck"] = said
    return out


# -- pool figures: a disaggregated deployment's prefill and decode pools at steady state --------

#: SMs that expert-parallel all-to-all kernels of the prefill kind (DeepEP's normal mode, which
#: copies tokens with the GPU's own SMs) take from computation while they run: DeepSeek-V3
#: dedicates 20 of the H800's 132 SMs to communication (DeepSeek-V3 Technical Report,
#: section 3.2.2, "only 20 SMs are sufficient to fully utilize the bandwidths of IB and
#: NVLink"). DeepEP's low-latency mode, used in decode, holds no SMs while its RDMA messages
#: are in flight (deepseek-ai/profile-data README, Decoding), so decode loses none.
COMM_SMS = record("COMM_SMS", 20, "SMs",
                  "two-batch overlap in prefill: SMs the overlapped all-to-all occupies",
                  "DeepSeek-V3 Technical Report (arXiv 2412.19437), section 3.2.2; "
                  "deepseek-ai/profile-data README (decode: no SMs during the wait)")

PHASES = ("prefill", "decode")


def _nodes_reached(nodes: int, top_k: int) -> float:
    """Expected distinct nodes other than its own that a token's ``top_k`` experts sit on,
    with the experts spread evenly over ``nodes`` nodes (balanced placement, as EPLB makes it).

    >>> round(_nodes_reached(4, 8), 3)     # EP32 on 4 nodes: 2.7 of the 3 other nodes
    2.7
    >>> _nodes_reached(1, 8)
    0.0
    """
    if nodes <= 1:
        return 0.0
    return (nodes - 1) * (1.0 - (1.0 - 1.0 / nodes) ** top_k)


def _ep_comm_prefill(sm: StepModel, tokens: float) -> float:
    """Seconds of one prefill iteration's expert all-to-alls when each token crosses to each
    node it needs once and is forwarded to that node's experts over NVLink (DeepEP's normal
    kernels; DeepSeek-V3 Technical Report, section 3.2.2: IB first, then NVLink).

    The all-to-all model spreads a rank's buffer evenly over every rank, so the buffer is
    sized so that the bytes it sends across nodes are the deduplicated ones, and the bytes
    that stay in the node are at least what the NVLink forwarding moves.
    """
    m, lay = sm.model, sm.layout
    if not m.moe_layers or lay.ep <= 1:
        return 0.0
    per_dom = min(lay.ep, sm.topo.scale_up()[0])
    nodes = max(1, lay.ep // per_dom)
    T = float(tokens) * lay.dp_attention / lay.tp          # tokens per expert-parallel rank
    if nodes <= 1:
        return float(sm.parts(tokens, 0, 0, 0, 0)["ep_comm_s"])
    cross = _nodes_reached(nodes, m.top_k) * m.hidden * T  # elements crossing nodes
    scale = nodes / (nodes - 1)                            # buffer whose cross-node share is it
    t = 0.0
    for elem in (sm.ab, 2.0):                              # dispatch (FP8 / BF16), combine BF16
        size = int(max(cross * elem * scale, 1))
        t += collectives.predict(sm.topo, "all_to_all", size, lay.ep,
                                 per_node=per_dom).time_us * 1e-6
    return m.moe_layers * t


def _step(sm: StepModel, phase: str, tokens: float, attn: float, ctx: float,
          overlap: bool) -> dict:
    """One pool iteration's seconds by part. ``tokens``: prefill tokens or decode requests
    per attention rank; ``attn`` / ``ctx``: query-key pairs and context tokens of them.

    With ``overlap`` (two-batch overlap: DeepSeek's dual micro-batches, SGLang's TBO) the
    batch runs as two halves, one's communication under the other's computation: the
    iteration is the longer of the two streams over the layers (each half reads the weights
    again), computation slowed in prefill by the SMs the all-to-all holds
    (:data:`COMM_SMS`).
    """
    n = 2 if overlap else 1

    def parts(f: float) -> dict[str, float]:
        if phase == "prefill":
            p = {k: float(v) for k, v in sm.parts(tokens * f, attn * f, ctx * f, 0, 0).items()}
            p["ep_comm_s"] = _ep_comm_prefill(sm, tokens * f)
            return p
        return {k: float(v) for k, v in sm.parts(0, 0, 0, tokens * f, ctx * f).items()}

    p = parts(1.0 / n)
    compute = n * (p["gemm_compute_s"] + p["weight_read_s"] + p["attention_s"]
                   + p["elementwise_s"])
    comm = n * (p["tp_comm_s"] + p["ep_comm_s"] + p["pp_comm_s"])
    if overlap and phase == "prefill":
        sms = max(sm.gpu.sms, COMM_SMS.value + 1)
        compute *= sms / (sms - COMM_SMS.value)
    total = (max(compute, comm) if overlap else compute + comm) + p["overhead_s"]
    return {"iteration_ms": total * 1e3, "compute_ms": compute * 1e3, "comm_ms": comm * 1e3,
            "overhead_ms": p["overhead_s"] * 1e3,
            "bound": "communication" if comm > compute else "computation",
            "overlap": overlap}


def _per_gpu(sm: StepModel, per_rank: float) -> float:
    lay = sm.layout
    return per_rank * lay.dp_attention / lay.gpus


def prefill_pool(sm: StepModel, isl: int, tokens: int | None = None, *, overlap: bool = False,
                 gpus_per_node: int = 8) -> dict:
    """A prefill pool's steady throughput: every attention rank runs ``tokens`` prompt tokens
    (the engine's token budget by default) of ``isl``-token prompts each iteration.

    >>> from gpufabric.workloads.inference.itertime import ServeLayout
    >>> t = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 1})
    >>> sm = StepModel("llama3-8b", t, ServeLayout(tp=1), engine="sglang", max_tokens=8192)
    >>> r = prefill_pool(sm, 2048)
    >>> r["input_tokens_per_s_per_node"] == 8 * r["input_tokens_per_s_per_gpu"]
    True
    """
    if isl < 1:
        raise InputError(f"got {isl}; expected a prompt of at least 1 token", field="isl")
    T = float(tokens or sm.max_tokens)
    if T > sm.max_tokens:
        raise InputError(f"{int(T)} tokens per rank exceed the iteration budget "
                         f"{sm.max_tokens}", field="tokens")
    # whole prompts, or chunks of one longer than the budget attending to the prompt so far:
    # on average a query meets (isl + 1) / 2 keys either way
    attn = T * (isl + 1) / 2.0
    ctx = max(T, float(isl))
    st = _step(sm, "prefill", T, attn, ctx, overlap)
    g = _per_gpu(sm, T / (st["iteration_ms"] * 1e-3))
    return {"phase": "prefill", "isl": int(isl), "tokens_per_rank": int(T), **st,
            "input_tokens_per_s_per_gpu": g, "input_tokens_per_s_per_node": g * gpus_per_node}


def decode_pool(sm: StepModel, kv_len: int, batch: int | None = None,
                per_user: float | None = None, *, overlap: bool = False,
                gpus_per_node: int = 8) -> dict:
    """A decode pool's steady throughput with ``batch`` requests per attention rank at an
    average KV length ``kv_len``; or, with ``per_user``, the largest batch whose tokens/s per
    request is at least that; with neither, the largest batch the KV cache holds. Batches
    stay within the step model's token budget (``max_tokens``), which its tables cover.

    >>> from gpufabric.workloads.inference.itertime import ServeLayout
    >>> t = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 1})
    >>> sm = StepModel("llama3-8b", t, ServeLayout(tp=1), engine="sglang")
    >>> a = decode_pool(sm, 2000, batch=64)
    >>> b = decode_pool(sm, 2000, per_user=a["output_tokens_per_s_per_user"])
    >>> b["batch_per_rank"] >= 64
    True
    """
    if kv_len < 1:
        raise InputError(f"got {kv_len}; expected at least 1 token", field="avg_kv_len")
    # the largest batch the KV cache holds, and the step model's tables cover
    cap = min(int(sm.kv_blocks * sm.block_size // kv_len), sm.max_tokens)
    if cap < 1:
        raise InputError(f"one request of {kv_len} tokens does not fit the KV cache "
                         f"({sm.kv_blocks * sm.block_size} tokens per rank)", field="avg_kv_len")

    def run(b: int) -> dict:
        return _step(sm, "decode", b, 0.0, float(b) * kv_len, overlap)

    if batch is not None:
        if batch < 1:
            raise InputError(f"got {batch}; expected at least 1 request", field="batch")
        if batch > sm.max_tokens:
            raise InputError(f"{batch} requests per rank exceed the iteration's token budget "
                             f"({sm.max_tokens}); build the step model with more", field="batch")
        if batch > cap:
            raise InputError(f"{batch} requests of {kv_len} tokens per rank exceed the KV cache "
                             f"({cap} such requests)", field="batch")
        b = int(batch)
    elif per_user is not None:
        if not per_user > 0:
            raise InputError(f"got {per_user}; expected a speed > 0",
                             field="output_tokens_per_s_per_user")
        if 1e3 / run(1)["iteration_ms"] < per_user:
            raise InputError(f"{per_user:g} tokens/s per user is faster than one request "
                             f"alone decodes ({1e3 / run(1)['iteration_ms']:.1f})",
                             field="output_tokens_per_s_per_user")
        lo, hi = 1, cap                      # the iteration grows with the batch: bisect
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if 1e3 / run(mid)["iteration_ms"] >= per_user:
                lo = mid
            else:
                hi = mid - 1
        b = lo
    else:
        b = cap
    st = run(b)
    g = _per_gpu(sm, b / (st["iteration_ms"] * 1e-3))
    return {"phase": "decode", "avg_kv_len": int(kv_len), "batch_per_rank": b,
            "kv_capacity_requests": cap, **st,
            "output_tokens_per_s_per_user": 1e3 / st["iteration_ms"],
            "output_tokens_per_s_per_gpu": g, "output_tokens_per_s_per_node": g * gpus_per_node}


def _node_gpus(topo: Topology) -> int:
    n = topo.meta.get("gpus_per_node")
    return int(n) if n else gpu_count(topo)[1]


def pool_figures(sm_p: StepModel, sm_d: StepModel, isl: float, osl: float,
                 slo_tpot_ms: float | None = None, *, overlap: bool = False,
                 per_node: tuple[int, int] = (8, 8), batch: int | None = None) -> dict:
    """Both pools of a disaggregated deployment at steady state: the prefill pool at its
    token budget on ``isl``-token prompts, the decode pool at an average KV length of
    ``isl + osl / 2`` with ``batch`` requests per attention rank (as many as the KV cache
    holds, at most), or else the largest batch that keeps ``slo_tpot_ms`` (or, without one,
    the largest the KV cache holds). A pool the layout cannot run says why under ``error``."""
    out: dict = {}
    try:
        out["prefill"] = prefill_pool(sm_p, max(1, round(isl)), overlap=overlap,
                                      gpus_per_node=per_node[0])
    except InputError as exc:
        out["prefill"] = {"error": str(exc)}
    kv = max(1, round(isl + osl / 2.0))
    try:
        if batch:
            cap = min(int(sm_d.kv_blocks * sm_d.block_size // kv), sm_d.max_tokens)
            batch = max(1, min(batch, cap))
        out["decode"] = decode_pool(sm_d, kv, batch,
                                    None if batch or not slo_tpot_ms else 1e3 / slo_tpot_ms,
                                    overlap=overlap, gpus_per_node=per_node[1])
    except InputError as exc:
        out["decode"] = {"error": str(exc)}
    return out
