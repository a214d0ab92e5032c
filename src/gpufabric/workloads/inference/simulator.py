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
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from gpufabric.errors import InputError
from gpufabric.workloads.inference.policies import POLICIES
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

    def decode_line(self, d_n: int) -> tuple[float, float]:
        """A decode-only step of ``d_n`` requests costs ``a + b * d_ctx``: (a, b)."""
        return self.base_s + self.per_token_s * d_n, self.per_ctx_token_s


@dataclass
class SchedulerConfig:
    """Continuous-batching knobs (vLLM's names): batch limits, KV cache size, preemption.

    ``num_blocks`` x ``block_size`` tokens of KV cache; ``swap_s_per_token``: seconds to move
    one token's KV cache between GPU and host (used by ``preemption='swap'``).
    ``reserve_full``: admit a request only when its whole KV cache (prompt and output) can be
    reserved, so nothing is ever preempted (TensorRT-LLM's GUARANTEED_NO_EVICT, its default
    capacity policy); otherwise blocks are taken as tokens arrive and a full cache preempts
    (vLLM, SGLang).
    ``scheduler_steps``: decode runs in rounds of this many steps (vLLM 0.6's
    ``--num-scheduler-steps``, multi-step scheduling): a request that arrives during a round
    waits for its end, and the round's tokens stream out together.
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
    scheduler_steps: int = 1
    #: the engine's scheduling policy (:mod:`gpufabric.workloads.inference.policies`)
    order: str = "decode-first"

    def check(self) -> None:
        for name in ("num_blocks", "block_size", "max_num_seqs", "max_batched_tokens",
                     "scheduler_steps"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 1:
                raise InputError(f"must be a positive integer, got {v!r}", field=name)
        if self.order not in POLICIES:
            raise InputError(f"unknown scheduling order '{self.order}'; allowed: "
                             f"{', '.join(POLICIES)}", field="scheduler.order")
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
    stream_steps: int = 1            # decode steps whose tokens stream out together
    warmup: int = 0                  # first requests left out of the latencies (closed loop)
    stats: dict = field(default_factory=dict)

    @property
    def tokens_out(self) -> int:
        return int(self.osl.sum())


def _ceil_div(a, b: int):
    return -(-a // b)


#: Below this many elements a Python sum/min of ``tolist()`` beats numpy's reductions.
_SMALL = 64
#: Below this many running requests, Python loops over ``tolist()`` beat numpy's element-wise
#: operations (a few numpy calls cost about as much as a loop over a dozen elements).
_FEW = 16


def _total(a: np.ndarray) -> int:
    """``int(a.sum())`` of an integer array, without numpy's overhead on small ones."""
    return sum(a.tolist()) if a.size < _SMALL else int(a.sum())


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
                         f"{cfg.max_batched_tokens} without chunked prefill (an engine "
                         "refuses it): raise the budget or turn chunked prefill on",
                         field="max_batched_tokens")


#: The most prefill iterations a run may need: a prompt is prefilled in chunks of at most the
#: token budget, so a run takes at least its prompts' tokens over the budget in iterations,
#: each a pass of the scheduler's loop. Twice the largest request count (``--requests``) keeps
#: every run within about the work of the largest one the request limit allows.
MAX_PREFILL_ITERATIONS = 10_000_000


def check_work(reqs: Requests, cfg: SchedulerConfig) -> None:
    """Refuse a run whose prompts need more than :data:`MAX_PREFILL_ITERATIONS` prefill
    iterations at its token budget (a budget of a few tokens over long prompts would otherwise
    run for hours), before any work is done.

    >>> from gpufabric.workloads.inference.requests import closed_loop
    >>> try:
    ...     check_work(closed_loop(8, 100_000, 1024, 16), SchedulerConfig(num_blocks=10**6,
    ...                                                                  max_batched_tokens=1))
    ... except InputError as e:
    ...     print(str(e)[:76])
    max_batched_tokens: the prompts need at least 102,400,000 prefill iterations
    """
    need = -(-_total(reqs.isl.astype(np.int64)) // int(cfg.max_batched_tokens))
    if need > MAX_PREFILL_ITERATIONS:
        raise InputError(f"the prompts need at least {need:,} prefill iterations at a budget "
                         f"of {cfg.max_batched_tokens} tokens; at most "
                         f"{MAX_PREFILL_ITERATIONS:,} are simulated: raise the token budget "
                         "or run fewer requests", field="max_batched_tokens")


@dataclass
class Iteration:
    """One iteration's batch as the scheduler forms it (see :class:`BatchState`)."""

    dmask: np.ndarray | None   # running requests that decode this iteration (None: all)
    all_dec: bool              # every running request decodes
    d_n: int                   # decode tokens
    d_ctx: int                 # KV tokens the decodes read (their new token included)
    budget: int                # token budget left for prefill chunks
    nrun: int = 0              # running requests before admission
    swap_t: float = 0.0        # seconds of KV swapping (out and in) it waits for
    chunks: list[tuple[int, int, int]] = field(default_factory=list)  # (position, start, len)
    adm: list[int] = field(default_factory=list)      # requests admitted into the batch
    adm_bl: list[int] = field(default_factory=list)   # and the KV blocks each took


def decode_line(cost: StepCost, d_n: int) -> tuple[float, float] | None:
    """(a, b) with a decode-only iteration of ``d_n`` requests reading ``d_ctx`` KV tokens
    costing ``a + b * d_ctx`` seconds, when ``cost`` says so (``cost.decode_line``); None for
    a cost that gives no such line (its steps are then evaluated one by one)."""
    line = getattr(cost, "decode_line", None)
    return None if line is None else line(d_n)


class BatchState:
    """One serving instance's scheduler state: the waiting queue, the running batch (parallel
    arrays in admission order), the KV blocks, the clock and the iteration log.

    A loop pass (:meth:`step`) calls the phases in order: :meth:`arrive` (requests whose time
    has come join the queue), :meth:`reserve_decode` (decode first; :meth:`preempt` the newest
    requests while the KV cache has no block for the decodes), :meth:`prefill_running` and
    :meth:`admit` (the token budget left goes to prefill chunks), then either :meth:`decode`
    (a stretch of decode-only iterations advanced together) or :meth:`prefill` (one mixed
    iteration, timed by :meth:`step_time`), and :meth:`retire` (finished requests leave).
    """

    def __init__(self, reqs: Requests, cost: StepCost, cfg: SchedulerConfig,
                 prefilled: bool = False,
                 progress: Callable[[int, int], None] | None = None,
                 front_end_s: float = 0.0,
                 prefix: tuple[np.ndarray, np.ndarray] | None = None):
        check_fits(reqs, cfg)
        if not prefilled:
            check_work(reqs, cfg)
        self.cost, self.cfg, self.progress = cost, cfg, progress
        self.policy = POLICIES[cfg.order]
        # tokens a decoding sequence keeps per step (above 1 with speculative decoding, the
        # cost's ``tokens_per_step``): the state advances a token at a time, each taking
        # that fraction of the step's time, so TPOT and throughput carry the gain
        self.tps = float(getattr(cost, "tokens_per_step", 1.0))
        n = self.n = len(reqs)
        B = self.B = int(cfg.block_size)
        self.isl = reqs.isl.astype(np.int64)
        self.osl = reqs.osl.astype(np.int64)
        self.need_max = _ceil_div(self.isl + self.osl, B)
        self.closed = reqs.concurrency > 0
        self._arrivals(reqs, front_end_s)
        # per-request state (read when a request is admitted, written back when it leaves);
        # a request without a prompt (pure generation) prefills its start token
        self.g_pt = np.maximum(self.isl, 1)   # tokens to prefill (prompt; + output on recompute)
        self.g_kv = np.zeros(n, np.int64)     # tokens whose KV is stored
        self.g_gen = np.zeros(n, np.int64)    # tokens generated
        self.first = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.npre = np.zeros(n, np.int64)
        self.swapped = np.zeros(n, bool)
        self.arrives_in = np.zeros(n, bool)   # prefilled: KV handed over, nothing to swap in
        if prefilled:
            if int(self.osl.min()) < 2:
                raise InputError("a prefilled request must have at least 2 output tokens",
                                 field="osl")
            self.g_kv[:] = self.isl
            self.g_gen[:] = 1
            self.swapped[:] = True
            self.arrives_in[:] = True
        self.load_s = None if prefix is None else self._cached(*prefix)
        self.free = int(cfg.num_blocks)
        self.wm = int(cfg.watermark * cfg.num_blocks)
        self.reserved = 0                     # blocks promised to running requests (reserve_full)
        self.swap_s = float(cfg.swap_s_per_token)
        # the running batch, in admission order: the first ``nrun`` columns of one buffer whose
        # rows the parallel arrays r_id, r_kv, r_pt, r_gen, r_osl, r_bl view (they are updated
        # in place; :meth:`_views` rebinds them when the batch changes size)
        self._run = np.zeros((6, max(1, min(n, int(cfg.max_num_seqs), 64))), np.int64)
        self._nrun = 0
        self._views()
        self.waiting: deque[int] = deque()
        self.nxt = 0
        self.t = 0.0
        self.done = 0
        # iteration log: runs of (first time, time added per step, steps, decodes, prefills)
        self.log: list[tuple[float, float, int, int, int]] = []
        self.kv_t: array[float] = array("d", [0.0])     # (flat buffers: quick to copy out)
        self.kv_u: array[int] = array("q", [0])
        self.passes = 0
        self.steps = 0
        self.macro = 0
        self.pre_done = 0
        self.told, self.tell_every = 0, max(1, n // 100)
        self.decoding = True        # every running request is past its prefill
        self.lines: dict[int, tuple[float, float] | None] = {}    # decode lines by batch size

    def _arrivals(self, reqs: Requests, front_end_s: float) -> None:
        """When each request reaches the scheduler (after the engine's front end): an open
        loop's arrivals; a closed loop's first ``concurrency`` sends (paced at their times, or
        users at random phases over the ramp, each user's first request a warm-up)."""
        n = self.n
        # arrival: when a request reaches the scheduler, after the engine's front end
        self.front_end_s = fe = float(front_end_s)
        self.release = reqs.release
        if self.closed:
            self.arrival = np.full(n, np.inf)
            c = self.users = min(reqs.concurrency, n)
            ramp = float(reqs.ramp_s)
            if self.release == "paced":
                # scheduled sends, at most c in flight: the first c go at their times
                self.sched = reqs.arrival.astype(np.float64)
                self.arrival[:c] = self.sched[:c] + fe
            else:
                # users' phases are random, as a steady state's are: iteration times jitter,
                # so the order in which users' requests meet is not kept from cycle to cycle
                rng = np.random.default_rng(reqs.phase_seed)
                self.arrival[:c] = (np.sort(rng.uniform(0.0, ramp, c)) if ramp > 0
                                    else np.zeros(c)) + fe
            self.released = c
            # each user's first request is its warm-up (a closed loop's steady state follows)
            self.warmup = c if ramp > 0 and n > c and self.release == "user" else 0
        else:
            self.arrival = reqs.arrival.astype(np.float64) + fe
            self.released = n
            self.warmup = 0

    def _cached(self, tokens: np.ndarray, load_s: np.ndarray) -> np.ndarray:
        """Prefix caching (:mod:`.kvcache`): each prompt starts with ``tokens`` in its KV cache;
        the seconds each takes to load (the iteration that admits it waits for them)."""
        self.g_kv[:] = tokens
        return np.array(load_s, np.float64)

    # -- phases --------------------------------------------------------------------------------
    def arrive(self) -> None:
        """Requests that have arrived by now join the waiting queue, in arrival order."""
        nxt, arrival, t = self.nxt, self.arrival, self.t
        if nxt < self.released and arrival[nxt] <= t:
            # open-loop arrivals are sorted: the next one alone needs no search (a closed
            # loop's releases may come before the last users' first requests)
            if not self.closed and (nxt + 1 >= self.n or arrival[nxt + 1] > t):
                self.waiting.append(nxt)
                self.nxt = nxt + 1
            else:
                j = int(arrival.searchsorted(t, side="right"))
                self.waiting.extend(range(nxt, j))
                self.nxt = j

    def _views(self) -> None:
        run = self._run[:, :self._nrun]
        self.r_id, self.r_kv, self.r_pt = run[0], run[1], run[2]
        self.r_gen, self.r_osl, self.r_bl = run[3], run[4], run[5]

    def _drop(self, keep) -> None:
        """Keep the running requests that ``keep`` (a mask) selects, in their order."""
        live = self._run[:, :self._nrun][:, keep]
        self._nrun = m = live.shape[1]
        self._run[:, :m] = live
        self._views()

    def preempt(self, recompute: bool) -> float:
        """Preempt the newest running request back to the head of the queue: its blocks are
        freed and it is prefilled again (``recompute``), or its KV is swapped out (the swap's
        seconds are returned)."""
        v = int(self.r_id[-1])
        kv_v, gen_v = int(self.r_kv[-1]), int(self.r_gen[-1])
        self.free += int(self.r_bl[-1])
        self._nrun -= 1
        self._views()
        self.npre[v] += 1
        self.g_gen[v] = gen_v
        self.waiting.appendleft(v)
        if not recompute and kv_v >= self.g_pt[v]:
            self.swapped[v] = True
            self.g_kv[v] = kv_v
            return kv_v * self.swap_s
        self.g_kv[v] = 0
        self.g_pt[v] = max(int(self.isl[v]), 1) + gen_v
        return 0.0

    def reserve_decode(self) -> Iteration:
        """Decode first: every running request past its prefill gets a block for its next
        token; the newest requests are preempted while the cache has too few."""
        swap_t = 0.0
        B = self.B
        dmask: np.ndarray | None = None
        while self.decoding and self._nrun < _FEW:   # a small batch, element by element
            ctx = self._take_decode_blocks()
            if ctx is not None:
                nrun = self._nrun
                return Iteration(None, True, nrun, ctx + nrun,
                                 self.cfg.max_batched_tokens - nrun, nrun=nrun, swap_t=swap_t)
            swap_t += self.preempt(self.cfg.preemption == "recompute")
        while True:
            if self.decoding:
                all_dec = True
            else:
                dmask = self.r_kv >= self.r_pt
                all_dec = int(np.count_nonzero(dmask)) == dmask.size
            need = self.r_kv >= self.r_bl * B
            if not all_dec and dmask is not None:
                need &= dmask
            tot = int(np.count_nonzero(need))
            if tot <= self.free:
                break
            swap_t += self.preempt(self.cfg.preemption == "recompute")
        self.free -= tot
        if tot:
            self.r_bl += need
        nrun = self._nrun
        if all_dec:
            self.decoding, dmask = True, None
            d_n = nrun
            d_ctx = _total(self.r_kv) + d_n
        else:
            assert dmask is not None
            d_n = int(np.count_nonzero(dmask))
            d_ctx = _total(self.r_kv[dmask]) + d_n
        return Iteration(dmask, all_dec, d_n, d_ctx, self.cfg.max_batched_tokens - d_n,
                         nrun=nrun, swap_t=swap_t)

    def prefill_only(self) -> Iteration:
        """An iteration in which no running request decodes: its whole token budget goes to
        prefill chunks (a prefill-first policy's prefill batch)."""
        nrun = self._nrun
        return Iteration(np.zeros(nrun, bool), False, 0, 0, self.cfg.max_batched_tokens,
                         nrun=nrun)

    def prefilling(self) -> bool:
        """Whether a running request's prompt is not yet all prefilled (chunked prefill)."""
        return not self.decoding and bool(np.any(self.r_kv < self.r_pt))

    def prefill_running(self, it: Iteration) -> None:
        """Prefill chunks of running requests whose prompt is not done, in batch order."""
        if it.dmask is None:
            return
        B = self.B
        for pos in np.flatnonzero(~it.dmask).tolist():
            if it.budget <= 0:
                break
            kv_i, bl_i = int(self.r_kv[pos]), int(self.r_bl[pos])
            c = min(int(self.r_pt[pos]) - kv_i, it.budget, (bl_i + self.free) * B - kv_i)
            if c <= 0:
                continue
            nb = _ceil_div(kv_i + c, B) - bl_i
            self.free -= nb
            self.r_bl[pos] = bl_i + nb
            it.budget -= c
            it.chunks.append((pos, kv_i, c))

    def admit(self, it: Iteration) -> None:
        """Admit waiting requests first come, first served while the budget, ``max_num_seqs``
        and the KV cache (a watermark kept free, or whole requests reserved) allow; a swapped
        request comes back with its KV cache and decodes next iteration."""
        waiting = self.waiting
        if not waiting:
            return
        cfg, B = self.cfg, self.B
        nrun = self.r_id.size
        room = cfg.max_num_seqs - nrun
        while waiting and it.budget > 0 and len(it.adm) < room:
            i = waiting[0]
            floor = self.wm if (nrun or it.adm) else 0
            kv_i = self.g_kv.item(i)
            if self.swapped.item(i):
                nb = _ceil_div(kv_i + 1, B)
                if self.free - nb < floor:
                    break
                waiting.popleft()
                self.swapped[i] = False
                self.free -= nb
                if self.arrives_in[i]:
                    self.arrives_in[i] = False
                    self.first[i] = self.arrival[i]
                else:
                    it.swap_t += kv_i * self.swap_s
                it.adm.append(i)
                it.adm_bl.append(nb)
                continue
            rem = self.g_pt.item(i) - kv_i
            if cfg.reserve_full and self.reserved + int(self.need_max[i]) > cfg.num_blocks:
                break               # the request's whole KV (prompt + output) must fit
            if cfg.chunked_prefill:
                c = min(rem, it.budget, (self.free - floor) * B - kv_i)
            else:
                c = rem if rem <= it.budget and _ceil_div(kv_i + rem, B) <= self.free - floor \
                    else 0
            if c <= 0:
                break
            waiting.popleft()
            if cfg.reserve_full:
                self.reserved += int(self.need_max[i])
            nb = _ceil_div(kv_i + c, B)
            self.free -= nb
            it.budget -= c
            if kv_i and self.load_s is not None:    # a cached prefix: the batch waits for it
                it.swap_t += self.load_s.item(i)
                self.load_s[i] = 0.0
            it.chunks.append((nrun + len(it.adm), kv_i, c))
            it.adm.append(i)
            it.adm_bl.append(nb)
        if it.adm:
            self.decoding = False
            m = len(it.adm)
            if nrun + m > self._run.shape[1]:       # grow the buffer (it holds max_num_seqs)
                run = np.zeros((6, min(2 * (nrun + m), cfg.max_num_seqs)), np.int64)
                run[:, :nrun] = self._run[:, :nrun]
                self._run = run
            if m == 1:
                i = it.adm[0]
                self._run[:, nrun] = (i, self.g_kv.item(i), self.g_pt.item(i),
                                      self.g_gen.item(i), self.osl.item(i), it.adm_bl[0])
            else:
                a = np.array(it.adm, np.int64)
                new = self._run[:, nrun:nrun + m]
                new[0], new[1], new[2] = a, self.g_kv[a], self.g_pt[a]
                new[3], new[4], new[5] = self.g_gen[a], self.osl[a], it.adm_bl
            self._nrun = nrun + m
            self._views()

    def step_time(self, it: Iteration) -> float:
        """Seconds of one iteration with prefill chunks (and any swapping it waits for)."""
        p_tok = p_ctx = 0
        p_attn = 0.0
        for _, s, c in it.chunks:
            p_tok += c
            p_attn += c * (s + (c + 1) / 2.0)
            p_ctx += s + c
        dt = float(self.cost(p_tok, p_attn, p_ctx, it.d_n, it.d_ctx))
        if self.tps != 1.0 and it.d_n:
            # the decodes' token, a 1/tokens_per_step share of their part of the step
            dt -= (1.0 - 1.0 / self.tps) * float(self.cost(0, 0, 0, it.d_n, it.d_ctx))
        return dt + it.swap_t

    def _most_steps(self) -> int:
        """The most tokens ``j`` that every running request can add while the KV cache holds
        them all: the largest ``j`` with sum(ceil((kv + j) / B)) <= the blocks held + free.

        With ``kv + B - 1 = q B + r`` (0 <= r < B) and ``j = m B + s`` (0 <= s < B), request
        i holds ``q + m + [r + s >= B]`` blocks: ``m`` is as many whole blocks per request as
        the room allows, then ``s`` as far as the requests of the largest ``r`` allow."""
        B, n = self.B, self._nrun
        q, r = np.divmod(self.r_kv + (B - 1), B)
        room = self.free + _total(self.r_bl) - _total(q)
        m = room // n                       # whole blocks each (negative: none fits)
        over = room - n * m                 # requests that can still cross a block boundary
        r_desc = np.sort(r)[::-1]
        return B * m + (B - 1 - int(r_desc[over]))

    def _stretch(self, it: Iteration) -> tuple[int, int]:
        """Decode-only iterations that can run as they are: up to the first request that
        finishes, and while the KV cache holds every step's new token: (steps, steps to the
        first request's end)."""
        left = self.r_osl - self.r_gen
        k = kmin = min(left.tolist()) if left.size < _SMALL else int(left.min())
        nrun = left.size
        if k > 1 and self.free < nrun * (k // self.B + 1):
            k = max(1, min(k, self._most_steps()))
        return k, kmin

    def decode(self, it: Iteration) -> None:
        """Decode-only iterations, advanced together from event to event: a stretch runs up to
        a request finishing, the KV cache running out, or (with nobody waiting) the next
        arrival; finished requests retire, and while nothing else changes (nobody waiting,
        no arrival due, a block for every next token) the next stretch follows at once."""
        while True:
            finished = self._advance(it)
            self.retire(finished)
            nxt = self._next_decode() if finished else None
            if nxt is None:
                return
            it = nxt

    def _next_decode(self) -> Iteration | None:
        """The next iteration when it can only be decode-only and needs no preemption: every
        running request past its prefill, nobody waiting, no arrival due, a block for every
        next token (taken here). None otherwise: a full pass forms the batch."""
        nrun = self._nrun
        if self.waiting or not nrun:
            return None
        if self.nxt < self.released and self.arrival[self.nxt] <= self.t:
            return None
        if not self.decoding:
            if (any(x < p for x, p in zip(self.r_kv.tolist(), self.r_pt.tolist(), strict=True))
                    if nrun < _FEW else np.count_nonzero(self.r_kv < self.r_pt)):
                return None
            self.decoding = True
        ctx = self._take_decode_blocks()
        if ctx is None:
            return None             # a full pass preempts
        return Iteration(None, True, nrun, ctx + nrun,
                         self.cfg.max_batched_tokens - nrun, nrun=nrun)

    def _take_decode_blocks(self) -> int | None:
        """Every running request (all past their prefill) takes a block where its next token
        needs one, if the cache has that many free: the KV tokens they hold; None (nothing
        taken) if it has not."""
        r_kv, r_bl, B = self.r_kv, self.r_bl, self.B
        if self._nrun < _FEW:           # a small batch: element by element is quicker
            kv, bl = r_kv.tolist(), r_bl.tolist()
            nbl = [b + (x >= b * B) for x, b in zip(kv, bl, strict=True)]
            tot = sum(nbl) - sum(bl)
            if tot > self.free:
                return None
            if tot:
                self.free -= tot
                r_bl[:] = nbl
            return sum(kv)
        need = r_kv >= r_bl * B
        tot = int(np.count_nonzero(need))
        if tot > self.free:
            return None
        if tot:
            self.free -= tot
            r_bl += need
        return int(r_kv.sum())

    def _round(self, k: int, most: int) -> int:
        """``k`` steps rounded up to whole multi-step rounds (at most ``most``): an arrival
        waits for the round it falls in to end."""
        r = self.cfg.scheduler_steps
        return k if r <= 1 else min(most, -(-k // r) * r)

    def _advance(self, it: Iteration) -> bool:
        """One stretch of decode-only iterations (see :meth:`decode`); True when a request
        finishes at its end."""
        k, kmin = self._stretch(it)
        d_n, d0 = it.d_n, it.d_ctx
        logged = False
        stop = self.arrival.item(self.nxt) - self.t \
            if not self.waiting and self.nxt < self.released else None
        if k > 1:
            if d_n in self.lines:
                line = self.lines[d_n]
            else:
                line = self.lines[d_n] = decode_line(self.cost, d_n)
            if line is not None:
                a, b = line
                first, slope = a + b * d0, b * d_n
                if self.tps != 1.0:
                    first, slope = first / self.tps, slope / self.tps
                if stop is not None:
                    k = self._round(1 + _steps_before(first, slope, k - 1, stop), k)
                total = k * first + slope * (k * (k - 1) / 2.0)
            else:       # a cost without a decode line: its steps one by one
                dts = np.asarray(self.cost(0, 0, 0, d_n, d0 + d_n * np.arange(k)),
                                 dtype=np.float64) / self.tps
                cum = np.cumsum(dts)
                if stop is not None:
                    # stop before the first step that starts after the next arrival
                    k = self._round(1 + int(np.searchsorted(cum[:-1], stop, side="left")), k)
                    dts, cum = dts[:k], cum[:k]
                self.log.extend((float(dt), 0.0, 1, d_n, 0) for dt in dts)
                first, slope, total = 0.0, 0.0, float(cum[-1])
                logged = True
        else:
            first = total = float(self.cost(0, 0, 0, d_n, d0)) / self.tps
            slope = 0.0
        self.t += total
        if not logged:
            self.log.append((first, slope, k, d_n, 0))
        r_kv, r_gen, r_bl, B = self.r_kv, self.r_gen, self.r_bl, self.B
        r_kv += k
        r_gen += k
        if r_kv.size < _FEW:      # blocks now held: ceil(r_kv / B)
            newb = [(x + B - 1) // B for x in r_kv.tolist()]
            bl = r_bl.tolist()
            if newb != bl:
                self.free -= sum(newb) - sum(bl)
                r_bl[:] = newb
        else:
            nb = (r_kv + (B - 1)) // B
            self.free -= int(nb.sum()) - int(r_bl.sum())
            r_bl[:] = nb
        self.steps += k
        self.macro += 1
        return k >= kmin

    def prefill(self, it: Iteration) -> None:
        """One iteration with prefill chunks: decodes advance a token, chunks fill the KV
        cache, and requests whose prompt is done produce their first token."""
        dt = self.step_time(it)
        self.t += dt
        nrun = it.nrun
        self.decoding = False
        # r_kv and r_gen are this state's own arrays (fancy-indexed or concatenated copies)
        if it.dmask is not None:
            step = it.dmask.astype(np.int64)
            self.r_kv[:nrun] += step
            self.r_gen[:nrun] += step
        elif it.d_n:
            self.r_kv[:nrun] += 1
            self.r_gen[:nrun] += 1
        p_tok = 0
        r_kv, r_pt, r_gen, r_id, first = self.r_kv, self.r_pt, self.r_gen, self.r_id, self.first
        for pos, _, c in it.chunks:      # a few per iteration: element by element
            p_tok += c
            kv = int(r_kv[pos]) + c
            r_kv[pos] = kv
            if kv >= r_pt[pos]:          # prompt done: the first token comes out
                self.pre_done += 1
                r_gen[pos] += 1
                i = r_id[pos]
                if math.isnan(first[i]):
                    first[i] = self.t
        self.log.append((dt, 0.0, 1, it.d_n, p_tok))
        self.steps += 1

    def retire(self, check: bool = True) -> None:
        """Finished requests leave and free their blocks; in a closed loop, their users send
        the next requests now. ``check``: False when no request can have finished."""
        fmask = None
        nfin = pos = 0              # requests finished; the one's position
        if check and self._nrun < _FEW:
            fin_at = [p for p, (g, o) in enumerate(zip(self.r_gen.tolist(), self.r_osl.tolist(),
                                                       strict=True)) if g >= o]
            nfin = len(fin_at)
            if nfin > 1:
                fmask = self.r_gen >= self.r_osl
            elif nfin:
                pos = fin_at[0]
        elif check:
            fmask = self.r_gen >= self.r_osl
            nfin = int(np.count_nonzero(fmask))
            if nfin == 1:
                pos = int(fmask.argmax())
        if nfin == 1:               # one request: its column goes, the later ones move up
            run, nrun = self._run, self._nrun
            i = int(run[0, pos])
            self.finish[i] = self.t
            self.g_gen[i] = run[3, pos]
            self.free += int(run[5, pos])
            if self.cfg.reserve_full:
                self.reserved -= int(self.need_max[i])
            run[:, pos:nrun - 1] = run[:, pos + 1:nrun]
            self._nrun = nrun - 1
            self._views()
        elif nfin:
            fin = self.r_id[fmask]
            self.finish[fin] = self.t
            self.g_gen[fin] = self.r_gen[fmask]
            self.free += _total(self.r_bl[fmask])
            if self.cfg.reserve_full:
                self.reserved -= _total(self.need_max[fin])
            self._drop(~fmask)  # type: ignore[operator]
        if nfin:
            self.done += nfin
            if self.progress and self.done - self.told >= self.tell_every:
                self.progress(self.done - self.told, self.n)
                self.told = self.done
            if self.closed and self.released < self.n:
                self._release(nfin)
        self.kv_t.append(self.t)
        self.kv_u.append(self.cfg.num_blocks - self.free)
        if self.free < 0:  # pragma: no cover - an invariant, checked by the property tests
            raise AssertionError("KV cache over-committed")

    def _release(self, nfin: int) -> None:
        """A closed loop's next sends after ``nfin`` requests finished now (see
        :class:`~gpufabric.workloads.inference.requests.Requests` for the ``release`` kinds):
        one per finished request, at once (``user``) or at its scheduled time if that is later
        (``paced``); or a whole round once every request sent has finished (``round``)."""
        lo = self.released
        if self.release == "round":
            if self.done < lo:
                return
            nfin = self.users
        hi = min(lo + nfin, self.n)
        at = np.maximum(self.sched[lo:hi], self.t) if self.release == "paced" else self.t
        self.arrival[lo:hi] = at + self.front_end_s
        self.released = hi

    # -- the loop ------------------------------------------------------------------------------
    def step(self) -> None:
        """One loop pass: form a batch and run one iteration or a decode stretch."""
        self.passes += 1
        self.arrive()
        if self._nrun == 0 and not self.waiting:
            self.t = float(self.arrival[self.nxt])
            return
        it = self.policy.form(self)
        if not it.chunks and it.d_n == 0:
            if it.adm:         # only swap-ins: they decode next iteration
                self.t += it.swap_t
                return
            if self._nrun:   # running prefills starved of blocks: recompute the newest
                self.preempt(True)
                return
            self.t = max(self.t, float(self.arrival[self.nxt])) if self.nxt < self.n else self.t
            return
        if not it.chunks and not it.adm and it.swap_t == 0.0 and it.all_dec:
            self.decode(it)
        else:
            self.prefill(it)
            self.retire()
            nxt = self._next_decode()
            if nxt is not None:
                self.decode(nxt)

    def run(self, max_passes: int = 50_000_000,
            give_up: Callable[[BatchState], float | None] | None = None) -> SimResult:
        """Step until every request has finished; the run's :class:`SimResult`.

        ``give_up(state)``, asked every :data:`GIVE_UP_EVERY` passes, returns None to go on or
        a number to stop the run there with :class:`GaveUp` carrying it."""
        check_at = GIVE_UP_EVERY
        while self.done < self.n:
            if self.passes >= max_passes:
                raise RuntimeError("serving simulation did not converge")  # pragma: no cover
            self.step()
            if give_up is not None and self.passes >= check_at:
                check_at = self.passes + GIVE_UP_EVERY
                most = give_up(self)
                if most is not None:
                    raise GaveUp(most)
        if self.progress and self.done > self.told:
            self.progress(self.done - self.told, self.n)
        return self.result()

    def result(self) -> SimResult:
        if self.log:
            runs = np.fromiter(chain.from_iterable(self.log), np.float64,
                               5 * len(self.log)).reshape(-1, 5)
            counts = runs[:, 2].astype(np.int64)
            if not counts.all():
                runs, counts = runs[counts > 0], counts[counts > 0]
            # the log expanded to one entry per iteration in three arrays, a work buffer
            # reused: each step's place in its run, then its run
            at = np.cumsum(counts) - counts           # each run's first step
            total = int(counts.sum())
            w = _zeros(total, np.int64)
            w += 1
            w[at[1:]] = 1 - counts[:-1]
            np.cumsum(w, out=w)
            w -= 1                                    # the step's place in its run
            dt = _zeros(total, np.float64)
            dt += w                                   # first + slope * place, in place
            w[:] = 0
            w[at[1:]] = 1
            np.cumsum(w, out=w)                       # the step's run
            dec = _zeros(total, np.int64)
            per_step = dec.view(np.float64)           # (dec's buffer, before dec is written)
            dt *= np.take(runs[:, 1], w, out=per_step)
            dt += np.take(runs[:, 0], w, out=per_step)
            np.take(runs[:, 3].astype(np.int64), w, out=dec)
            pre = w
            pre[:] = 0
            pre[at] = np.diff(runs[:, 4].astype(np.int64), prepend=0)
            np.cumsum(pre, out=pre)
        else:
            dt, dec, pre = np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64)
        return SimResult(arrival=self.arrival - self.front_end_s, first_token=self.first,
                         finish=self.finish,
                         isl=self.isl, osl=self.osl, preemptions=self.npre,
                         generated=self.g_gen, iter_time_s=dt, iter_decode=dec,
                         iter_prefill=pre, kv_t=np.array(self.kv_t),
                         kv_used_blocks=np.array(self.kv_u, np.int64),
                         num_blocks=int(self.cfg.num_blocks), iterations=self.steps,
                         stream_steps=int(self.cfg.scheduler_steps), warmup=self.warmup,
                         stats={"loop_passes": self.passes, "decode_stretches": self.macro,
                                "prefill_completions": self.pre_done,
                                "preemptions": int(self.npre.sum())})


def _zeros(n: int, dtype) -> np.ndarray:
    """``n`` zeros in memory that numpy does not advise as huge pages: first touching tens of
    MB of fresh huge pages can cost 0.1 s an array where the kernel compacts memory for them
    (seen on the 2-core VMs the benchmarks run on); small pages cost a few ms."""
    return np.frombuffer(bytearray(n * np.dtype(dtype).itemsize), dtype)


def _steps_before(first: float, slope: float, most: int, x: float) -> int:
    """How many of the partial sums S(m) = m * first + slope * m (m - 1) / 2, m = 1..most,
    are below ``x`` (S increases with m)."""
    # S(m) written out where it is used (this runs once per decode stretch)
    if most <= 0 or first >= x:
        return 0
    if most * first + slope * (most * (most - 1) / 2.0) < x:
        return most
    # S(m) = x: slope/2 m^2 + (first - slope/2) m - x = 0
    if slope > 0:
        p = first - slope / 2.0
        m = int((-p + math.sqrt(p * p + 2.0 * slope * x)) / slope)
    else:
        m = int(x / first) if first > 0 else most
    m = min(max(m, 1), most)
    while m < most and (m + 1) * first + slope * ((m + 1) * m / 2.0) < x:
        m += 1
    while m > 1 and m * first + slope * (m * (m - 1) / 2.0) >= x:
        m -= 1
    return m


#: Loop passes between two questions to a run's ``give_up`` (each is a pass over the requests).
GIVE_UP_EVERY = 64


class GaveUp(Exception):
    """A run stopped early by its ``give_up``: ``most`` is what it returned (for
    :func:`slo_out_of_reach`, the most SLO attainment the run could still have reached)."""

    def __init__(self, most: float) -> None:
        super().__init__(f"stopped early at {most}")
        self.most = most


def slo_out_of_reach(slo_ttft_ms: float | None, slo_tpot_ms: float | None,
                     attainment: float) -> Callable[[BatchState], float | None]:
    """A ``give_up`` for :meth:`BatchState.run` that stops an open-loop run once fewer than
    ``attainment`` of its requests can still meet the SLO (as :func:`summarize` counts it):
    a request is lost once it has waited past the TTFT target for its first token, or has
    spent longer than the TPOT target per output token since its first (a first token or a
    finish comes no earlier than the clock). It returns the share still within reach."""
    def most(s: BatchState) -> float | None:
        if s.closed:
            return None
        send = s.arrival - s.front_end_s
        started = ~np.isnan(s.first)
        lost = np.zeros(s.n, bool)
        if slo_ttft_ms is not None:
            first = np.where(started, s.first, s.t)
            lost |= (first - send) * 1e3 > slo_ttft_ms
        if slo_tpot_ms is not None:
            multi = started & (s.osl > 1)
            end = np.where(np.isnan(s.finish), s.t, s.finish)
            tpot = (end[multi] - s.first[multi]) / (s.osl[multi] - 1) * 1e3
            lost[multi] |= tpot > slo_tpot_ms
        reach = float((~lost).mean())
        return reach if reach < attainment else None
    return most


def simulate(reqs: Requests, cost: StepCost, cfg: SchedulerConfig,
             max_iterations: int = 50_000_000, prefilled: bool = False,
             progress: Callable[[int, int], None] | None = None,
             front_end_s: float = 0.0,
             give_up: Callable[[BatchState], float | None] | None = None,
             prefix: tuple[np.ndarray, np.ndarray] | None = None) -> SimResult:
    """Run ``reqs`` through one serving instance whose iterations cost ``cost``
    (a :class:`BatchState` stepped to the end).

    ``prefilled``: the requests arrive with their prompt's KV cache and first token made
    elsewhere (the decode pool of a disaggregated deployment); they only decode.

    ``progress(n, total)`` is told as requests finish, at most once per 1% of them.

    ``front_end_s``: seconds each request spends in the engine's front end (API server,
    tokenizer) before the scheduler sees it; latencies count from the client's send.

    ``give_up``: see :meth:`BatchState.run` (:func:`slo_out_of_reach`); raises
    :class:`GaveUp` when it stops the run.

    ``prefix``: prefix caching's (tokens each request finds cached, seconds to load them)
    (:func:`gpufabric.workloads.inference.kvcache.plan`): a request starts with those tokens
    in its KV cache, and the iteration that admits it waits for the load.

    Raises :class:`InputError` when a single request cannot fit in the KV cache.
    """
    return BatchState(reqs, cost, cfg, prefilled=prefilled, progress=progress,
                      front_end_s=front_end_s, prefix=prefix).run(max_iterations, give_up)


def percentiles(x: np.ndarray) -> dict:
    """p50 / p90 / p99 and mean of ``x`` (NaNs dropped); all None when empty."""
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    s = np.sort(x)
    return {"p50": _percentile(s, 50), "p90": _percentile(s, 90), "p99": _percentile(s, 99),
            "mean": float(x.mean())}


def _percentile(s: np.ndarray, p: float) -> float:
    """``np.percentile(s, p)`` (its default, linear method) of a sorted array of finite
    numbers, to the bit: numpy's own arithmetic, without the import of ``numpy.ma`` that its
    first call costs (15 ms of a single prediction).

    >>> _percentile(np.array([1.0, 2.0, 4.0, 8.0]), 50), _percentile(np.array([5.0]), 99)
    (3.0, 5.0)
    """
    n = s.size
    q = p / 100
    v = (n - 1) * q                     # numpy's virtual index
    if v >= n - 1:
        return float(s[-1])
    if v < 0:
        return float(s[0])
    i = math.floor(v)
    g = v - i
    a, b = float(s[i]), float(s[i + 1])
    d = b - a
    return b - d * (1 - g) if g >= 0.5 else a + d * g    # numpy's _lerp


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


#: Share of an open loop's requests (by arrival) left out of its steady state as warm-up
#: while the batch fills; the drain after the last arrival is left out too.
WARMUP_SHARE = 0.2


def steady_window(res: SimResult) -> tuple[float, float] | None:
    """The steady state of a run, ``(start_s, end_s)``: from the end of the warm-up to the
    last arrival, after which the run drains. The warm-up is a closed loop's first request per
    user, an open loop's first :data:`WARMUP_SHARE` of requests, and at least the time a
    request takes to generate its tokens (the median over the run: until then the batch is
    still filling). None for a run whose requests all arrive at once (offline: it has no
    steady load) or too short to have one.

    >>> r = SimResult(np.arange(10.0), np.arange(10.0) + 1, np.arange(10.0) + 2, *[np.ones(10)] * 4,
    ...               *[np.zeros(0)] * 5, num_blocks=1)
    >>> steady_window(r)
    (2.0, 9.0)
    """
    arr = np.sort(res.arrival[np.isfinite(res.arrival)])
    if arr.size < 2 or arr[-1] <= arr[0]:
        return None
    first = res.warmup if res.warmup else int(arr.size * WARMUP_SHARE)
    gen = res.finish - res.first_token
    fill = _median(gen[np.isfinite(gen)]) if np.isfinite(gen).any() else 0.0
    t0, t1 = max(float(arr[min(first, arr.size - 1)]), float(arr[0]) + fill), float(arr[-1])
    return (t0, t1) if t1 > t0 else None


def backlog_growth(res: SimResult, t0: float, t1: float) -> tuple[int, int]:
    """(requests that arrived in ``[t0, t1]``, growth of the requests in the system from
    ``t0`` to ``t1``): a queue that builds grows by a share of its arrivals.

    >>> r = SimResult(np.arange(10.0), np.arange(10.0) + 1, np.arange(10.0) + 2,
    ...               *[np.ones(10)] * 4, *[np.zeros(0)] * 5, num_blocks=1)
    >>> backlog_growth(r, 2.0, 9.0)
    (8, 0)
    """
    arrived = int(((res.arrival >= t0) & (res.arrival <= t1)).sum())
    backlog = [int((res.arrival <= t).sum() - (res.finish <= t).sum()) for t in (t0, t1)]
    return arrived, backlog[1] - backlog[0]


def _median(x: np.ndarray) -> float:
    """``np.median`` of a non-empty array without NaNs, to the bit, without the import of
    ``numpy.ma`` that its first call costs (15 ms of a single prediction).

    >>> _median(np.array([3.0, 1.0, 2.0])), _median(np.array([4.0, 1.0, 2.0, 3.0]))
    (2.0, 2.5)
    """
    s = np.sort(x)
    h = s.size // 2
    return float(s[h]) if s.size % 2 else float((s[h - 1] + s[h]) / 2.0)


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """``np.unique`` of an array already sorted (each value once), without its import of
    ``numpy.ma``.

    >>> _sorted_unique(np.array([0, 0, 1, 3, 3])).tolist()
    [0, 1, 3]
    """
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if a.size else a


def _tokens_between(res: SimResult, t0: float, t1: float) -> tuple[float, float]:
    """Output and input tokens served in ``[t0, t1)``: a request's first token (and its
    prompt) at its first-token time, its other output tokens spread evenly to its finish."""
    first, fin, osl = res.first_token, res.finish, res.osl.astype(np.float64)
    at = (first >= t0) & (first < t1)
    span = fin - first
    rest = (osl > 1) & (span > 0)
    overlap = np.clip(np.minimum(fin, t1) - np.maximum(first, t0), 0.0, None)
    spread = ((osl - 1)[rest] * overlap[rest] / span[rest]).sum()
    return float(at.sum()) + float(spread), float(res.isl[at].sum())


def saturated(res: SimResult) -> dict:
    """What a run of requests all queued at once serves in its middle (from the 20th to the
    80th percentile of its finishes), without the first batch's filling and the last one's
    draining (as MLPerf's Offline scenario measures a long run): ``requests_per_s`` (the
    deployment's capacity for these requests), ``throughput_tokens_per_s`` and
    ``total_tokens_per_s``; an empty dict for a run too short to have a middle.

    >>> r = SimResult(np.zeros(11), np.arange(11.0) - 0.5, np.arange(11.0), *[np.ones(11)] * 4,
    ...               *[np.zeros(0)] * 5, num_blocks=1)
    >>> saturated(r)["requests_per_s"]
    1.0
    """
    f = np.sort(res.finish[np.isfinite(res.finish)])
    lo, hi = int(0.2 * (f.size - 1)), int(0.8 * (f.size - 1))
    if hi <= lo or f[hi] <= f[lo]:
        return {}
    t0, t1 = float(f[lo]), float(f[hi])
    out_tok, in_tok = _tokens_between(res, t0, t1)
    return {"requests_per_s": (hi - lo) / (t1 - t0), "throughput_tokens_per_s":
            out_tok / (t1 - t0), "total_tokens_per_s": (out_tok + in_tok) / (t1 - t0)}


def summarize(res: SimResult, gpus: int = 1, slo_ttft_ms: float | None = None,
              slo_tpot_ms: float | None = None, kv_points: int = 200,
              steady: bool = False) -> dict:
    """The run's figures: latencies (ms) with p50/p90/p99, throughput, goodput, KV use.

    TTFT: first token minus arrival (latencies of a closed loop leave out each user's first
    request, its warm-up). TPOT: (finish - first token) / (output tokens - 1), per
    request with more than one output token. ITL: the gaps between streamed tokens, i.e.
    iteration times weighted by the decode tokens each produced (with multi-step scheduling a
    round's tokens arrive together: the gap is the round, ``stream_steps`` iterations).
    Goodput: requests per second that meet both SLOs (a missing SLO is met by every request;
    a closed loop counts its steady state).

    By default the figures are the whole run's, as a benchmark client takes them over its
    requests (throughput over the time from the first arrival to the last finish). With
    ``steady``, a run that has a steady state (:func:`steady_window`) gives its figures over
    that window: the tokens served in it per second, the latencies of the requests that
    arrived in it; ``steady`` then says the window, the requests in it and the growth of the
    requests in the system over it (``backlog_growth``: a queue that builds).
    """
    ttft = (res.first_token - res.arrival) * 1e3
    multi = res.osl > 1
    tpot = np.full(res.osl.shape, np.nan)
    tpot[multi] = (res.finish[multi] - res.first_token[multi]) / (res.osl[multi] - 1) * 1e3
    e2e = (res.finish - res.arrival) * 1e3
    keep: slice | np.ndarray = slice(res.warmup, None)  # a closed loop's after its warm-up
    start = float(res.arrival.min()) if res.arrival.size else 0.0
    dur = float(res.finish.max()) - start if res.finish.size else 0.0
    out_tok = float(res.osl.sum())
    in_tok = float(res.isl.sum())
    done = float(res.osl.size)
    window = steady_window(res) if steady else None
    info: dict = {}
    if window is not None:
        t0, t1 = window
        dur = t1 - t0
        out_tok, in_tok = _tokens_between(res, t0, t1)
        keep = (res.arrival >= t0) & (res.arrival <= t1)
        done = float(((res.finish >= t0) & (res.finish <= t1)).sum())
        arrived, growth = backlog_growth(res, t0, t1)
        info = {"steady": {"start_s": t0, "end_s": t1, "requests": arrived,
                           "backlog_growth": growth}}
    dur = dur if dur > 0 else float("nan")
    ok = np.ones(res.osl.shape, bool)
    if slo_ttft_ms is not None:
        ok &= ttft <= slo_ttft_ms
    if slo_tpot_ms is not None:
        ok &= ~(tpot > slo_tpot_ms)
    attained = float(ok[keep].mean()) if ok[keep].size else 0.0
    sel = _sorted_unique(np.linspace(0, res.kv_t.size - 1,
                                     min(kv_points, res.kv_t.size)).astype(int))
    return {
        "requests": int(res.osl.size),
        "duration_s": dur,
        "throughput_tokens_per_s": out_tok / dur,
        "throughput_tokens_per_s_per_gpu": out_tok / dur / gpus,
        "total_tokens_per_s": (out_tok + in_tok) / dur,
        "requests_per_s": done / dur,
        "goodput_requests_per_s": attained * done / dur,
        "slo_attainment": attained,
        "ttft_ms": percentiles(ttft[keep]),
        "tpot_ms": percentiles(tpot[keep]),
        "itl_ms": _weighted_percentiles(res.iter_time_s * 1e3 * res.stream_steps,
                                        res.iter_decode),
        "e2e_ms": percentiles(e2e[keep]),
        **info,
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
