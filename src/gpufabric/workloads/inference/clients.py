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

from gpufabric.errors import InputError
from gpufabric.fileio import load_data

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
        out[name] = Client(name, d["title"], tuple(d.get("aliases", ())), d["arrivals"],
                           d["measure"], float(dur) if dur is not None else None,
                           d.get("reports", ""), " ".join(d["source"].split()), chunked)
    return out


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
             "chunked_prefill": c.chunked_prefill, "source": c.source}
            for c in builtin().values()]
