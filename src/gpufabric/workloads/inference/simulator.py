"""The serving simulator: continuous batching over a paged KV cache, one iteration at a time.

Each iteration the scheduler forms a batch the way vLLM (V1) and SGLang do:

1. every running request that has finished its prefill decodes one token (decode first); if the
   KV cache has no block left for them, the most recently admitted requests are preempted
   (``recompute``: their blocks are freed and their prompt plus the tokens generated so far are
   prefilled again later; ``swap``: their blocks are copied to host memory and back);
2. the remaining token budget (``max_batched_tokens``) goes to prefill chunks, first of requests
   already running, then of waiting ones in arrival order, while the batch holds fewer than
   ``max_num_seqs`` requests and the KV cache keeps a small watermark free (or, with
   ``reserve_full``, while the whole of each admitted request's KV cache can be reserved).

The time of an iteration comes from a step-cost function (:class:`StepCost`), given the batch's
prefill tokens, attention work and KV tokens read. Stretches where nothing but decoding happens
(no prefill, no arrival that could be admitted, no request finishing, no KV block running out)
are advanced in one vectorised step, so the Python work grows with the number of requests, not
with the number of tokens.

Examples
--------
>>> from gpufabric.workloads.inference.requests import poisson
>>> cost = LinearCost(base_s=0.005, per_token_s=2e-5, per_ctx_token_s=1e-8)
>>> cfg = SchedulerConfig(num_blocks=4096, block_size=16)
>>> res = simulate(poisson(4.0, 200, isl=512, osl=64, seed=1), cost, cfg)
>>> bool(np.isfinite(res.finish).all()), int(res.tokens_out)
(True, 12800)
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gpufabric.errors import InputError
from gpufabric.workloads.inference.requests import Requests

#: A step-cost function: (prefill tokens, prefill attention pairs, prefill KV tokens touched,
#: decode requests, decode KV tokens read) -> seconds. Arguments may be numpy arrays.
StepCost = Callable[..., "np.ndarray | float"]

PREEMPTION_MODES = ("recompute", "swap")


@dataclass(frozen=True)
class LinearCost:
    """A simple step cost for tests and examples: a fixed part, a per-token part and a part per
    KV token read. The real model is :class:`gpufabric.workloads.inference.itertime.StepModel`.

    >>> float(LinearCost(0.01, 1e-4, 0.0)(100, 0, 0, 0, 0))
    0.02
    """

    base_s: float
    per_token_s: float
    per_ctx_token_s: float = 0.0

    def __call__(self, p_tok, p_attn, p_ctx, d_n, d_ctx):
        return (self.base_s + self.per_token_s * (np.asarray(p_tok) + d_n)
                + self.per_ctx_token_s * (np.asarray(p_ctx) + d_ctx))


@dataclass
class SchedulerConfig:
    """Continuous-batching knobs (vLLM's names): batch limits, KV cache size, preemption.

    ``num_blocks`` x ``block_size`` tokens of KV cache; ``swap_s_per_token``: seconds to move
    one token's KV cache between GPU and host (used by ``preemption='swap'``).
    ``reserve_full``: admit a request only when its whole KV cache (prompt and output) can be
    reserved, so nothing is ever preempted (TensorRT-LLM's GUARANTEED_NO_EVICT, its default
    capacity policy); otherwise blocks are taken as tokens arrive and a full cache preempts
    (vLLM, SGLang).
    """

    num_blocks: int
    block_size: int = 16
    max_num_seqs: int = 256
    max_batched_tokens: int = 8192
    chunked_prefill: bool = True
    preemption: str = "recompute"
    swap_s_per_token: float = 0.0
    watermark: float = 0.01
    reserve_full: bool = False

    def check(self) -> None:
        for name in ("num_blocks", "block_size", "max_num_seqs", "max_batched_tokens"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise InputError(f"must be a positive integer, got {v!r}", field=name)
        if self.preemption not in PREEMPTION_MODES:
            raise InputError(f"unknown preemption mode '{self.preemption}'; allowed: "
                             f"{', '.join(PREEMPTION_MODES)}", field="preemption")


@dataclass
class SimResult:
    """What a run produced: per-request times (s), the iteration log and KV use over time."""

    arrival: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    preemptions: np.ndarray
    generated: np.ndarray            # tokens each request generated (its osl when served once)
    iter_time_s: np.ndarray          # duration of each iteration
    iter_decode: np.ndarray          # decode tokens in it
    iter_prefill: np.ndarray         # prefill tokens in it
    kv_t: np.ndarray                 # KV use samples: time (s)
    kv_used_blocks: np.ndarray       # and blocks in use
    num_blocks: int
    iterations: int = 0
    stats: dict = field(default_factory=dict)

    @property
    def tokens_out(self) -> int:
        return int(self.osl.sum())


def _ceil_div(a, b: int):
    return -(-a // b)


def check_fits(reqs: Requests, cfg: SchedulerConfig) -> None:
    """Refuse a request that cannot run alone: more KV blocks than the cache holds, or a
    prompt over the token budget without chunked prefill (before any work is done on it)."""
    cfg.check()
    B = int(cfg.block_size)
    isl = reqs.isl.astype(np.int64)
    osl = reqs.osl.astype(np.int64)
    need_max = _ceil_div(isl + osl, B)
    worst = int(need_max.argmax())
    if int(need_max[worst]) > cfg.num_blocks:
        raise InputError(f"a request of {int(isl[worst])} + {int(osl[worst])} tokens needs "
                         f"{int(need_max[worst])} KV blocks of {B} tokens; the cache holds "
                         f"{cfg.num_blocks}", field="--isl/--osl")
    if not cfg.chunked_prefill and int(isl.max()) > cfg.max_batched_tokens:
        raise InputError(f"a prompt of {int(isl.max())} tokens exceeds the token budget "
                         f"{cfg.max_batched_tokens} without chunked prefill",
                         field="max_batched_tokens")


def simulate(reqs: Requests, cost: StepCost, cfg: SchedulerConfig,
             max_iterations: int = 50_000_000, prefilled: bool = False,
             progress: Callable[[int, int], None] | None = None) -> SimResult:
    """Run ``reqs`` through one serving instance whose iterations cost ``cost``.

    ``prefilled``: the requests arrive with their prompt's KV cache and first token made
    elsewhere (the decode pool of a disaggregated deployment); they only decode.

    ``progress(n, total)`` is told as requests finish, at most once per 1% of them.

    Raises :class:`InputError` when a single request cannot fit in the KV cache.
    """
    check_fits(reqs, cfg)
    n = len(reqs)
    B = int(cfg.block_size)
    isl = reqs.isl.astype(np.int64)
    osl = reqs.osl.astype(np.int64)
    need_max = _ceil_div(isl + osl, B)
    closed = reqs.concurrency > 0
    if closed:
        arrival = np.full(n, np.inf)
        arrival[: reqs.concurrency] = 0.0
        released = min(reqs.concurrency, n)
    else:
        arrival = reqs.arrival.astype(np.float64).copy()
        released = n
    # per-request state (read when a request is admitted, written back when it leaves)
    g_pt = isl.copy()                     # tokens to prefill (prompt; + output on recompute)
    g_kv = np.zeros(n, np.int64)          # tokens whose KV is stored
    g_gen = np.zeros(n, np.int64)         # tokens generated
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    npre = np.zeros(n, np.int64)
    swapped = np.zeros(n, bool)
    arrives_in = np.zeros(n, bool)        # prefilled: KV handed over, nothing to swap in
    if prefilled:
        if int(osl.min()) < 2:
            raise InputError("a prefilled request must have at least 2 output tokens",
                             field="osl")
        g_kv[:] = isl
        g_gen[:] = 1
        swapped[:] = True
        arrives_in[:] = True
    free = int(cfg.num_blocks)
    wm = int(cfg.watermark * cfg.num_blocks)
    reserved = 0          # blocks promised to running requests (reserve_full)
    swap_s = float(cfg.swap_s_per_token)
    # the running batch, in admission order, as parallel arrays
    r_id = np.zeros(0, np.int64)
    r_kv = np.zeros(0, np.int64)
    r_pt = np.zeros(0, np.int64)
    r_gen = np.zeros(0, np.int64)
    r_osl = np.zeros(0, np.int64)
    r_bl = np.zeros(0, np.int64)

    waiting: deque[int] = deque()
    nxt = 0
    t = 0.0
    done = 0
    it_dt: list[np.ndarray] = []
    it_dec: list[tuple[int, int]] = []     # (value, iterations it holds for)
    it_pre: list[tuple[int, int]] = []
    kv_t: list[float] = [0.0]
    kv_u: list[int] = [0]
    iters = 0
    steps = 0
    macro = 0
    pre_done = 0

    def preempt_last(recompute: bool) -> float:
        nonlocal r_id, r_kv, r_pt, r_gen, r_osl, r_bl, free
        v = int(r_id[-1])
        kv_v, gen_v = int(r_kv[-1]), int(r_gen[-1])
        free += int(r_bl[-1])
        r_id, r_kv, r_pt, r_gen = r_id[:-1], r_kv[:-1], r_pt[:-1], r_gen[:-1]
        r_osl, r_bl = r_osl[:-1], r_bl[:-1]
        npre[v] += 1
        g_gen[v] = gen_v
        waiting.appendleft(v)
        if not recompute and kv_v >= g_pt[v]:
            swapped[v] = True
            g_kv[v] = kv_v
            return kv_v * swap_s
        g_kv[v] = 0
        g_pt[v] = isl[v] + gen_v
        return 0.0

    told, tell_every = 0, max(1, n // 100)
    while done < n:
        iters += 1
        if iters > max_iterations:
            raise RuntimeError("serving simulation did not converge")  # pragma: no cover
        if nxt < released and arrival[nxt] <= t:
            j = int(np.searchsorted(arrival, t, side="right"))
            if j > nxt:
                waiting.extend(range(nxt, j))
                nxt = j
        nrun = r_id.size
        if nrun == 0 and not waiting:
            t = float(arrival[nxt])
            continue
        swap_t = 0.0
        # 1. decode first; preempt the newest requests when their next tokens have no block
        while True:
            dmask = r_kv >= r_pt
            all_dec = bool(dmask.all())
            if all_dec:
                need = (r_kv >= r_bl * B).astype(np.int64)
            else:
                need = ((r_kv >= r_bl * B) & dmask).astype(np.int64)
            tot = int(need.sum())
            if tot <= free:
                break
            swap_t += preempt_last(cfg.preemption == "recompute")
        nrun = r_id.size
        free -= tot
        if tot:
            r_bl = r_bl + need
        d_n = nrun if all_dec else int(dmask.sum())
        d_ctx0 = int((r_kv if all_dec else r_kv[dmask]).sum()) + d_n
        budget = cfg.max_batched_tokens - d_n
        chunks: list[tuple[int, int, int]] = []     # (position in batch or -1, start, length)
        # 2a. prefill chunks of running requests
        if not all_dec:
            for pos in np.flatnonzero(~dmask).tolist():
                if budget <= 0:
                    break
                kv_i, bl_i = int(r_kv[pos]), int(r_bl[pos])
                c = min(int(r_pt[pos]) - kv_i, budget, (bl_i + free) * B - kv_i)
                if c <= 0:
                    continue
                nb = _ceil_div(kv_i + c, B) - bl_i
                free -= nb
                r_bl[pos] = bl_i + nb
                budget -= c
                chunks.append((pos, kv_i, c))
        # 2b. admit waiting requests (first come, first served)
        adm: list[int] = []
        adm_bl: list[int] = []
        room = cfg.max_num_seqs - nrun
        while waiting and budget > 0 and len(adm) < room:
            i = waiting[0]
            floor = wm if (nrun or adm) else 0
            kv_i = int(g_kv[i])
            if swapped[i]:
                nb = _ceil_div(kv_i + 1, B)
                if free - nb < floor:
                    break
                waiting.popleft()
                swapped[i] = False
                free -= nb
                if arrives_in[i]:
                    arrives_in[i] = False
                    first[i] = arrival[i]
                else:
                    swap_t += kv_i * swap_s
                adm.append(i)
                adm_bl.append(nb)
                continue
            rem = int(g_pt[i]) - kv_i
            if cfg.reserve_full and reserved + int(need_max[i]) > cfg.num_blocks:
                break               # the request's whole KV (prompt + output) must fit
            if cfg.chunked_prefill:
                c = min(rem, budget, (free - floor) * B)
            else:
                c = rem if rem <= budget and _ceil_div(rem, B) <= free - floor else 0
            if c <= 0:
                break
            waiting.popleft()
            if cfg.reserve_full:
                reserved += int(need_max[i])
            nb = _ceil_div(kv_i + c, B)
            free -= nb
            budget -= c
            chunks.append((nrun + len(adm), kv_i, c))
            adm.append(i)
            adm_bl.append(nb)
        if adm:
            a = np.array(adm, np.int64)
            r_id = np.concatenate([r_id, a])
            r_kv = np.concatenate([r_kv, g_kv[a]])
            r_pt = np.concatenate([r_pt, g_pt[a]])
            r_gen = np.concatenate([r_gen, g_gen[a]])
            r_osl = np.concatenate([r_osl, osl[a]])
            r_bl = np.concatenate([r_bl, np.array(adm_bl, np.int64)])
        if not chunks and d_n == 0:
            if adm:         # only swap-ins: they decode next iteration
                t += swap_t
                continue
            if r_id.size:   # running prefills starved of blocks: recompute the newest
                preempt_last(True)
                continue
            t = max(t, float(arrival[nxt])) if nxt < n else t
            continue
        # 3. the iteration's time; a pure-decode stretch is advanced in one go
        if not chunks and not adm and swap_t == 0.0 and all_dec:
            k = int((r_osl - r_gen).min())
            if k > 1:   # the KV cache must hold every step's new token
                base_used = int(r_bl.sum())

                def fits(j: int, kv_d=r_kv, base_used=base_used, free=free) -> bool:
                    return int(_ceil_div(kv_d + j, B).sum()) - base_used <= free
                if free < nrun * (k // B + 1) and not fits(k):
                    lo, hi = 1, k
                    while hi - lo > 1:
                        mid = (lo + hi) // 2
                        if fits(mid):
                            lo = mid
                        else:
                            hi = mid
                    k = lo
            if k > 1:
                dts = np.asarray(cost(0, 0, 0, d_n, d_ctx0 + d_n * np.arange(k)),
                                 dtype=np.float64)
                cum = np.cumsum(dts)
                if not waiting and nxt < released:
                    # stop before the first step that starts after the next arrival
                    k = 1 + int(np.searchsorted(cum[:-1], arrival[nxt] - t, side="left"))
                    dts, cum = dts[:k], cum[:k]
                t += float(cum[-1])
                it_dt.append(dts)
                it_dec.append((d_n, k))
                it_pre.append((0, k))
            else:
                dt = float(cost(0, 0, 0, d_n, d_ctx0))
                t += dt
                it_dt.append(np.array([dt]))
                it_dec.append((d_n, 1))
                it_pre.append((0, 1))
            r_kv = r_kv + k
            r_gen = r_gen + k
            newb = _ceil_div(r_kv, B)
            free -= int((newb - r_bl).sum())
            r_bl = newb
            steps += k
            macro += 1
        else:
            cp = np.array([c[0] for c in chunks], np.int64)
            cs = np.array([c[1] for c in chunks], np.int64)
            cc = np.array([c[2] for c in chunks], np.int64)
            p_tok = int(cc.sum())
            p_attn = float((cc * (cs + (cc + 1) / 2.0)).sum())
            p_ctx = int((cs + cc).sum())
            dt = float(cost(p_tok, p_attn, p_ctx, d_n, d_ctx0)) + swap_t
            t += dt
            step = dmask.astype(np.int64) if not all_dec else 1
            if adm:
                step = np.concatenate([np.broadcast_to(step, (nrun,)),
                                       np.zeros(len(adm), np.int64)])
            r_kv = r_kv + step
            r_gen = r_gen + step
            r_kv[cp] += cc
            done_pre = cp[r_kv[cp] >= r_pt[cp]]
            if done_pre.size:
                pre_done += int(done_pre.size)
                r_gen[done_pre] += 1
                ids = r_id[done_pre]
                newf = ids[np.isnan(first[ids])]
                first[newf] = t
            it_dt.append(np.array([dt]))
            it_dec.append((d_n, 1))
            it_pre.append((p_tok, 1))
            steps += 1
        # 4. finished requests leave and free their blocks
        fmask = r_gen >= r_osl
        if fmask.any():
            fin = r_id[fmask]
            finish[fin] = t
            g_gen[fin] = r_gen[fmask]
            free += int(r_bl[fmask].sum())
            if cfg.reserve_full:
                reserved -= int(need_max[fin].sum())
            keep = ~fmask
            r_id, r_kv, r_pt, r_gen = r_id[keep], r_kv[keep], r_pt[keep], r_gen[keep]
            r_osl, r_bl = r_osl[keep], r_bl[keep]
            done += int(fin.size)
            if progress and done - told >= tell_every:
                progress(done - told, n)
                told = done
            if closed and released < n:
                m = min(int(fin.size), n - released)
                arrival[released: released + m] = t
                released += m
        kv_t.append(t)
        kv_u.append(cfg.num_blocks - free)
        if free < 0:  # pragma: no cover - an invariant, checked by the property tests
            raise AssertionError("KV cache over-committed")

    if progress and done > told:
        progress(done - told, n)
    dt_all = np.concatenate(it_dt) if it_dt else np.zeros(0)
    def expand(runs: list[tuple[int, int]]) -> np.ndarray:
        if not runs:
            return np.zeros(0, np.int64)
        a = np.array(runs, np.int64)
        return np.repeat(a[:, 0], a[:, 1])
    preempted = npre
    dec_all = expand(it_dec)
    pre_all = expand(it_pre)
    return SimResult(arrival=arrival, first_token=first, finish=finish, isl=isl, osl=osl,
                     preemptions=preempted, generated=g_gen, iter_time_s=dt_all,
                     iter_decode=dec_all, iter_prefill=pre_all, kv_t=np.array(kv_t),
                     kv_used_blocks=np.array(kv_u, np.int64), num_blocks=int(cfg.num_blocks),
                     iterations=steps, stats={"loop_passes": iters, "decode_stretches": macro,
                                              "prefill_completions": pre_done,
                                              "preemptions": int(npre.sum())})


def percentiles(x: np.ndarray) -> dict:
    """p50 / p90 / p99 and mean of ``x`` (NaNs dropped); all None when empty."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    p = np.percentile(x, [50, 90, 99])
    return {"p50": float(p[0]), "p90": float(p[1]), "p99": float(p[2]), "mean": float(x.mean())}


def _weighted_percentiles(x: np.ndarray, w: np.ndarray) -> dict:
    keep = w > 0
    x, w = x[keep], w[keep]
    if x.size == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    order = np.argsort(x)
    x, w = x[order], w[order]
    cw = np.cumsum(w) / w.sum()
    out = {f"p{q}": float(x[min(int(np.searchsorted(cw, q / 100.0)), x.size - 1)])
           for q in (50, 90, 99)}
    out["mean"] = float((x * w).sum() / w.sum())
    return out


def summarize(res: SimResult, gpus: int = 1, slo_ttft_ms: float | None = None,
              slo_tpot_ms: float | None = None, kv_points: int = 200) -> dict:
    """The run's figures: latencies (ms) with p50/p90/p99, throughput, goodput, KV use.

    TTFT: first token minus arrival. TPOT: (finish - first token) / (output tokens - 1), per
    request with more than one output token. ITL: the gaps between tokens, i.e. iteration
    times weighted by the decode tokens each produced. Goodput: requests per second that meet
    both SLOs (a missing SLO is met by every request).
    """
    ttft = (res.first_token - res.arrival) * 1e3
    multi = res.osl > 1
    tpot = np.full(res.osl.shape, np.nan)
    tpot[multi] = (res.finish[multi] - res.first_token[multi]) / (res.osl[multi] - 1) * 1e3
    e2e = (res.finish - res.arrival) * 1e3
    start = float(res.arrival.min()) if res.arrival.size else 0.0
    dur = float(res.finish.max()) - start if res.finish.size else 0.0
    dur = dur if dur > 0 else float("nan")
    ok = np.ones(res.osl.shape, bool)
    if slo_ttft_ms is not None:
        ok &= ttft <= slo_ttft_ms
    if slo_tpot_ms is not None:
        ok &= ~(tpot > slo_tpot_ms)
    out_tok = float(res.osl.sum())
    in_tok = float(res.isl.sum())
    sel = np.unique(np.linspace(0, res.kv_t.size - 1, min(kv_points, res.kv_t.size)).astype(int))
    return {
        "requests": int(res.osl.size),
        "duration_s": dur,
        "throughput_tokens_per_s": out_tok / dur,
        "throughput_tokens_per_s_per_gpu": out_tok / dur / gpus,
        "total_tokens_per_s": (out_tok + in_tok) / dur,
        "requests_per_s": res.osl.size / dur,
        "goodput_requests_per_s": float(ok.sum()) / dur,
        "slo_attainment": float(ok.mean()) if ok.size else 0.0,
        "ttft_ms": percentiles(ttft),
        "tpot_ms": percentiles(tpot),
        "itl_ms": _weighted_percentiles(res.iter_time_s * 1e3, res.iter_decode),
        "e2e_ms": percentiles(e2e),
        "kv_cache": {"blocks": res.num_blocks,
                     "peak_use": float(res.kv_used_blocks.max()) / res.num_blocks,
                     "mean_use": float(_time_mean(res.kv_t, res.kv_used_blocks))
                     / res.num_blocks,
                     "t_s": res.kv_t[sel].round(4).tolist(),
                     "use": (res.kv_used_blocks[sel] / res.num_blocks).round(4).tolist()},
        "preemptions": int(res.preemptions.sum()),
        "iterations": int(res.iterations),
        "mean_batch": float(res.iter_decode.mean()) if res.iter_decode.size else 0.0,
    }


def _time_mean(t: np.ndarray, v: np.ndarray) -> float:
    if t.size < 2 or t[-1] <= t[0]:
        return float(v.mean()) if v.size else 0.0
    return float((v[:-1] * np.diff(t)).sum() / (t[-1] - t[0])) if math.isfinite(t[-1]) else 0.0
