"""Benchmark clients as data: how a published serving figure's load was applied, and how its
figures were taken (``workloads/data/clients.yaml``).

A client's ``arrivals`` say how requests reach the engine (``open``: at their scheduled times,
at most ``--concurrency`` in flight when one is given; ``closed``: users who each send the
next request when the last one ends; ``synchronized``: users who all send at once, round
after round; ``offline``: all queued at once), its ``measure`` whether its figures are over
the whole run or its steady state, and ``min_duration_s`` the shortest run it accepts.
``serve --client NAME`` and a measurements entry's ``workload.client`` apply one through
:func:`configure`; the request stream itself is built by
:func:`gpufabric.workloads.inference.serve.build_requests`.

Examples
--------
>>> c = get("MLPerf-Server")
>>> c.name, c.arrivals, c.measure, c.min_duration_s
('mlperf-server', 'open', 'run', 600.0)
>>> get("benchmark_serving.py").name
'vllm-bench-serve'
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpufabric.errors import InputError
from gpufabric.fileio import load_data

if TYPE_CHECKING:
    from gpufabric.workloads.models import ModelSpec

ARRIVALS = ("open", "closed", "synchronized", "offline")
MEASURES = ("run", "steady")
#: Most requests one simulated instance runs for a run of a duration (a client's minimum or a
#: measurements entry's stated one). Near capacity the batch fills slowly (its relaxation
#: time grows as ``1 / (1 - load)^2``: several minutes at 90 % of capacity), so a run is
#: simulated over its whole duration where this allows: 2,400 s of MLPerf's Llama 2 70B
#: Server run on one H200 are some 31,000 requests.
MAX_DURATION_REQUESTS = 50_000


@dataclass(frozen=True)
class Client:
    name: str
    title: str
    aliases: tuple[str, ...]
    arrivals: str
    measure: str
    min_duration_s: float | None
    reports: str
    source: str
    #: how the client sets up the engine's prefill: chunked (True), whole (False) or as the
    #: engine's own default (None)
    chunked_prefill: bool | None = None
    #: the client sizes the engine's batch limit and token budget itself (``trtllm-bench``:
    #: :func:`trtllm_bench_settings`); None: the engine's defaults
    engine_settings: str | None = None


def _spelling(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


@functools.cache
def builtin() -> dict[str, Client]:
    """The built-in clients by name."""
    raw = load_data("gpufabric.workloads", "data", "clients.yaml")["clients"]
    out = {}
    for name, d in raw.items():
        if d["arrivals"] not in ARRIVALS or d["measure"] not in MEASURES:
            raise ValueError(f"clients.yaml: {name}: arrivals or measure out of range")
        dur = d.get("min_duration_s")
        chunked = d.get("chunked_prefill")
        if chunked not in (None, True, False):
            raise ValueError(f"clients.yaml: {name}: chunked_prefill must be true or false")
        setup = d.get("engine_settings")
        if setup not in (None, *ENGINE_SETTINGS):
            raise ValueError(f"clients.yaml: {name}: engine_settings must be one of "
                             f"{', '.join(ENGINE_SETTINGS)}")
        out[name] = Client(name, d["title"], tuple(d.get("aliases", ())), d["arrivals"],
                           d["measure"], float(dur) if dur is not None else None,
                           d.get("reports", ""), " ".join(d["source"].split()), chunked,
                           setup)
    return out


#: trtllm-bench's weight and KV-cache bytes per value by quantisation (tensorrt_llm/bench/
#: build/tuning.py BYTES_PER_ELEM: FP8 and FP8 block scales 1, NVFP4 0.5, anything else 2)
_TRTLLM_BENCH_BYTES = {"fp8": 1.0, "fp8-per-channel": 1.0, "fp4": 0.5}


def trtllm_bench_settings(model: ModelSpec, weights: str, kv: str, gpu_GiB: float, tp: int,
                          pp: int, isl: int, osl: int) -> tuple[int, int] | None:
    """The batch limit and token budget ``trtllm-bench`` gives the engine when the run sets
    none (tensorrt_llm/bench/build/tuning.py, commit 04cba882: calc_engine_setting and
    finetune_setting): the requests of ``isl + osl`` tokens whose KV cache fits 0.95 of the
    memory the weights leave on the ``tp x pp`` GPUs (at most 4,096, over the stages), and as
    many tokens as they bring a step, ``1 + isl / osl`` each (at most 32,768), both rounded up
    as trtllm-bench rounds them. None where the weights leave no memory or the model has no
    KV heads to count.

    >>> from gpufabric.workloads.models import load_model
    >>> trtllm_bench_settings(load_model("llama3-70b"), "fp8", "fp8", 80, 1, 1, 1000, 1000)
    (64, 2048)
    >>> trtllm_bench_settings(load_model("llama3-8b"), "fp8", "fp8", 80, 1, 1, 128, 2048)
    (640, 2048)
    """
    per_token = (2 * model.layers * max(tp, model.kv_heads) * model.head_dim
                 * _TRTLLM_BENCH_BYTES.get(kv, 2.0))
    free = gpu_GiB * tp * pp - model.params() * _TRTLLM_BENCH_BYTES.get(weights, 2.0) / 1024**3
    if per_token <= 0 or free <= 0 or isl + osl <= 0 or osl <= 0:
        return None
    requests = free * 0.95 * 1024**3 / (per_token * (isl + osl))
    bs = min(requests, 4096) / pp
    tokens = min(bs * (1 + isl / osl), 32768)
    return (_round_up(bs, ((256, 32), (1024, 128), (math.inf, 256)), 64),
            _round_up(tokens, ((4096, 256), (8192, 512), (math.inf, 1024)), 2048))


def _round_up(x: float, tiers: tuple[tuple[float, int], ...], floor: int) -> int:
    """``x`` rounded up to the step of the first tier whose limit it is below, at least
    ``floor`` (trtllm-bench's finetune_setting)."""
    step = next(step for limit, step in tiers if x < limit)
    return max(floor, step * math.ceil(x / step))


#: the engine set-ups a client may name (``engine_settings`` in clients.yaml)
ENGINE_SETTINGS = ("trtllm-bench",)


def get(name: str, field: str = "--client") -> Client:
    """The client a name or alias spells (one-line error listing the allowed names)."""
    key = _spelling(str(name))
    for c in builtin().values():
        if key == c.name or key in (_spelling(a) for a in c.aliases):
            return c
    raise InputError(f"unknown client '{name}'; allowed: {', '.join(builtin())}",
                     field=field)


def duration_requests(rate: float | None, duration_s: float | None,
                      instances: int = 1) -> int | None:
    """Requests a run at ``rate`` (all instances together) needs to fill ``duration_s``, at
    most :data:`MAX_DURATION_REQUESTS` for each of the ``instances`` that share them (None
    when no duration is stated, or the run is not at a finite rate).

    >>> duration_requests(80.0, get("mlperf-server").min_duration_s)
    48000
    >>> duration_requests(800.0, 600.0), duration_requests(800.0, 600.0, instances=8)
    (50000, 400000)
    >>> duration_requests(None, 600.0) is None
    True
    """
    if duration_s is None or rate is None or not math.isfinite(rate):
        return None
    return min(MAX_DURATION_REQUESTS * max(1, instances),
               max(1, math.ceil(rate * duration_s)))


def check_load(client: Client, rate: float | None, concurrency: int | None) -> None:
    """Refuse a load the client cannot apply (one line naming the option)."""
    if client.arrivals in ("closed", "synchronized") and not concurrency:
        raise InputError(f"the {client.name} client runs a fixed number of users: give "
                         "--concurrency", field="--client")
    if client.arrivals in ("closed", "synchronized", "offline") and rate is not None:
        raise InputError(f"the {client.name} client sends no requests at a rate "
                         f"({client.arrivals} arrivals): leave --rate out", field="--rate")
    if client.arrivals == "offline" and concurrency:
        raise InputError(f"the {client.name} client queues every request at once: leave "
                         "--concurrency out", field="--concurrency")


def table() -> list[dict]:
    """One row per client (name, arrivals, measure, minimum duration, source) for the docs
    and ``gpufabric clients``."""
    return [{"name": c.name, "title": c.title, "arrivals": c.arrivals, "measure": c.measure,
             "min_duration_s": c.min_duration_s, "reports": c.reports,
             "chunked_prefill": c.chunked_prefill, "engine_settings": c.engine_settings,
             "source": c.source}
            for c in builtin().values()]
