"""Request sources for the serving simulator: Poisson, bursty (gamma), offline, closed-loop, traces.

A request stream is plain data, :class:`Requests`: arrays of arrival time (s), input length and
output length (tokens), sorted by arrival. Closed-loop runs (a fixed number of users, each
sending its next request when the previous one ends) carry ``concurrency`` instead of arrival
times; the simulator releases them.

Examples
--------
>>> r = poisson(rate=4.0, n=1000, isl=512, osl=128, seed=0)
>>> len(r), int(r.isl[0]), int(r.osl[0]), round(float(r.arrival[-1]), 1)
(1000, 512, 128, 255.3)
>>> b = bursty(rate=4.0, n=1000, isl=512, osl=128, cv=3.0, seed=0)
>>> round(float(np.std(np.diff(b.arrival)) / np.mean(np.diff(b.arrival))), 1)
3.1
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from array import array
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from gpufabric.errors import InputError, clip
from gpufabric.fileio import check_key, csv_rows, read_text

#: Column names a trace may use, first match wins (Azure LLM inference traces use the last ones).
ARRIVAL_KEYS = ("arrival_s", "arrival", "arrival_time", "time_s", "timestamp", "TIMESTAMP")
ISL_KEYS = ("isl", "input_len", "input_tokens", "prompt_tokens", "prompt_len", "ContextTokens",
            "input_length")
OSL_KEYS = ("osl", "output_len", "output_tokens", "completion_tokens", "GeneratedTokens",
            "output_length")
#: Columns that say which earlier prompts a request's prompt starts with (prefix caching,
#: :mod:`gpufabric.workloads.inference.kvcache`): Mooncake's ``hash_ids`` (one id per block of
#: :data:`MOONCAKE_BLOCK` tokens, a JSON list), or a session a multi-turn conversation's turns
#: share (each turn's prompt starts with the previous turn's prompt and answer).
HASH_KEY = "hash_ids"
SESSION_KEYS = ("session_id", "conversation_id", "session")
#: Tokens per ``hash_ids`` block of Mooncake's traces (FAST25-release/README.md: "block_size
#: ... 512"); their ``timestamp`` is in milliseconds.
MOONCAKE_BLOCK = 512

#: Most requests one run takes (memory stays bounded: a few arrays of this length).
MAX_REQUESTS = 5_000_000
#: Burstiest arrivals (coefficient of variation of the gaps); 1 is Poisson, traces of real
#: services show a few.
MAX_BURST_CV = 100.0
#: Longest prompt or output one request may give (tokens); contexts of today's models are at
#: most a few million tokens.
MAX_TOKENS = 100_000_000
#: Largest arrival time of a trace, seconds (a Unix time of the year 9999 is 2.5e11).
MAX_ARRIVAL_S = 1e12


@dataclass
class Requests:
    """A request stream: ``arrival`` (s, sorted), ``isl`` and ``osl`` (tokens) per request.

    ``concurrency`` > 0 marks a closed loop: arrivals are set by the simulator, as
    ``release`` says. ``user`` (each user sends its next request when its last one ends): the
    first ``concurrency`` at random times, seeded by ``phase_seed``, over ``ramp_s`` seconds
    from 0, or all at 0; each later one when an earlier one finishes. ``paced``: ``arrival``
    holds each request's scheduled send, and at most ``concurrency`` are in flight (a request
    goes at its time or when a slot frees, whichever is later: a client's semaphore).
    ``round``: the users all send at once, and the next ``concurrency`` requests go when the
    whole round has finished (a static batch, round after round).
    """

    arrival: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    concurrency: int = 0
    source: str = ""
    total: int = 0          # requests of the whole stream this one was dealt from (0: itself)
    rows: int = 0           # requests in the trace file it was read from (0: not a trace)
    ramp_s: float = 0.0     # closed loop: the users' first requests spread over this time
    phase_seed: int = 0     # and the seed of their random phases
    release: str = "user"   # closed loop: user | paced | round (see above)
    #: a trace's prefix information (:class:`Prefix`), None where it carries none
    prefix: Prefix | None = None

    def __len__(self) -> int:
        return int(self.isl.shape[0])


@dataclass
class Prefix:
    """What a trace says of its prompts' shared prefixes: ``ids[i]``, the ids of request
    ``i``'s prompt blocks of ``block`` tokens (a block's id stands for its content after the
    same earlier blocks), ``session``: whether they come from multi-turn sessions (a turn's
    blocks then run over its prompt and answer). ``ids`` covers the whole stream a run was
    dealt from; ``mine`` marks this instance's requests (None: all of them)."""

    ids: list[tuple]
    block: int
    session: bool = False
    mine: np.ndarray | None = None


def _lengths(value, n: int, field: str, least: int = 1) -> np.ndarray:
    raw = np.asarray(value)
    if raw.size and (raw.min() < least or raw.max() > MAX_TOKENS):
        bad = raw.min() if raw.min() < least else raw.max()
        raise InputError(f"must be from {least} to {MAX_TOKENS:,} tokens, got {bad}",
                         field=field)
    return np.broadcast_to(raw.astype(np.int64), (n,)).copy()


def _count(n: int) -> int:
    if not isinstance(n, (int, np.integer)) or n < 1 or n > MAX_REQUESTS:
        raise InputError(f"must be an integer from 1 to {MAX_REQUESTS}, got {n!r}",
                         field="--requests")
    return int(n)


def _rate(rate: float) -> float:
    if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
        raise InputError(f"must be a positive number of requests per second, got {rate!r}",
                         field="--rate")
    return float(rate)


def poisson(rate: float, n: int, isl=512, osl=128, seed: int = 0) -> Requests:
    """``n`` requests arriving as a Poisson process at ``rate`` requests/s (exponential gaps)."""
    n, rate = _count(n), _rate(rate)
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, n)
    return Requests(np.cumsum(gaps) - gaps[0], _lengths(isl, n, "--isl", 0),
                    _lengths(osl, n, "--osl"), source=f"poisson {rate:g}/s")


def bursty(rate: float, n: int, isl=512, osl=128, cv: float = 2.0, seed: int = 0) -> Requests:
    """Gamma-distributed gaps with mean ``1/rate`` and coefficient of variation ``cv``
    (``cv`` = 1 is Poisson; larger is burstier)."""
    n, rate = _count(n), _rate(rate)
    if not (math.isfinite(cv) and 0 < cv <= MAX_BURST_CV):
        raise InputError(f"must be a number above 0 and at most {MAX_BURST_CV:g}, got {cv!r}",
                         field="--burst-cv")
    shape = 1.0 / cv**2
    gaps = np.random.default_rng(seed).gamma(shape, 1.0 / (rate * shape), n)
    return Requests(np.cumsum(gaps) - gaps[0], _lengths(isl, n, "--isl", 0),
                    _lengths(osl, n, "--osl"), source=f"bursty {rate:g}/s cv {cv:g}")


def offline(n: int, isl=512, osl=128) -> Requests:
    """All ``n`` requests queued at time 0 (maximum-throughput runs)."""
    n = _count(n)
    return Requests(np.zeros(n), _lengths(isl, n, "--isl", 0), _lengths(osl, n, "--osl"),
                    source="offline")


def closed_loop(concurrency: int, n: int, isl=512, osl=128, ramp_s: float = 0.0) -> Requests:
    """``concurrency`` users, each sending its next request when the last one ends; their first
    requests go out at random times over ``ramp_s`` seconds (0: all at once, a static batch).

    >>> r = closed_loop(4, 8, isl=0, osl=32, ramp_s=2.0)
    >>> r.concurrency, int(r.isl[0]), r.ramp_s
    (4, 0, 2.0)
    """
    n = _count(n)
    if not isinstance(concurrency, (int, np.integer)) or concurrency < 1:
        raise InputError(f"must be a positive integer, got {concurrency!r}",
                         field="--concurrency")
    return Requests(np.zeros(n), _lengths(isl, n, "--isl", 0), _lengths(osl, n, "--osl"),
                    concurrency=int(concurrency), source=f"closed loop x{concurrency}",
                    ramp_s=float(ramp_s))


def _pick(row: dict, keys: tuple[str, ...]) -> str | None:
    for k in keys:
        if k in row:
            return k
    return None


def _time(text: str, path: str, where: str, key: str) -> tuple[float, str]:
    """(seconds, form) of an arrival: a number of seconds from 0 up, or an ISO date-time
    (without a zone it is UTC, so that a daylight-saving change does not move it)."""
    try:
        t = float(text)
    except (TypeError, ValueError):
        pass
    else:
        if math.isfinite(t) and 0 <= t <= MAX_ARRIVAL_S:
            return t, "seconds"
        raise InputError(f"got {clip(repr(text))}; expected a number of seconds from 0 to "
                         f"{MAX_ARRIVAL_S:g} or an ISO date-time", file=path,
                         field=f"{where}.{key}")
    try:   # Azure traces: '2023-11-16 18:15:46.6805900' (7 fractional digits)
        s = str(text).strip()
        if "." in s:
            head, frac = s.rsplit(".", 1)
            s = f"{head}.{frac[:6]}"
        d = datetime.fromisoformat(s)
        return (d if d.tzinfo else d.replace(tzinfo=UTC)).timestamp(), "an ISO date-time"
    except (TypeError, ValueError):
        raise InputError(f"got {clip(repr(text))}; expected seconds or an ISO date-time",
                         file=path, field=f"{where}.{key}") from None


def _tokens(text, path: str, where: str, key: str) -> int:
    try:
        v = float(text)
    except (TypeError, ValueError):
        v = float("nan")
    if not math.isfinite(v) or v < 1 or v != int(v) or v > MAX_TOKENS:
        raise InputError(f"got {clip(repr(text))}; expected a whole number of tokens from 1 to "
                         f"{MAX_TOKENS:,}", file=path, field=f"{where}.{key}")
    return int(v)


def load_trace(path: str, limit: int | None = None) -> Requests:
    """Read a trace: CSV with a header, or JSON lines, one request per row.

    Columns: arrival (one of ``arrival_s``, ``arrival``, ``timestamp``, ..., in seconds from 0
    up or an ISO date-time, one form for the whole column), input length (``isl``,
    ``input_len``, ``ContextTokens``, ...) and output length (``osl``, ``output_len``,
    ``GeneratedTokens``, ...). Every row is read and checked; a bad one raises
    :class:`InputError` naming the file, the row and the field. The rows may come in any order
    (logs of several front ends, merged): the requests are sorted by arrival and shifted to
    start at 0. With ``limit``, the first ``limit`` arrivals are kept; ``rows`` of the result
    says how many the trace holds. A trace of more than :data:`MAX_REQUESTS` rows is refused.

    Examples
    --------
    >>> import os, tempfile
    >>> f = os.path.join(tempfile.mkdtemp(), "t.csv")
    >>> _ = open(f, "w").write("arrival_s,isl,osl\\n0.5,100,10\\n0.0,200,20\\n2.0,300,30\\n")
    >>> r = load_trace(f, limit=2)
    >>> r.arrival.tolist(), r.isl.tolist(), r.rows
    ([0.0, 0.5], [200, 100], 3)
    """
    from gpufabric.downloads import trace_path
    path = trace_path(path)
    p = Path(path)
    text = read_text(path, what="a serving trace (CSV or JSON lines)")
    is_json = p.suffix.lower() in (".jsonl", ".json", ".ndjson")
    if is_json:
        it = ((i + 1, line) for i, line in enumerate(io.StringIO(text, newline=""))
              if line.strip())
        records: Iterator[tuple[int, dict]] = ((i, _json_row(line, path, i)) for i, line in it)
    else:
        rows = (r for r in csv_rows(text, path) if r)
        header = next(rows, None)
        if not header:
            raise InputError("empty trace; expected a header row with arrival, input "
                             "and output length columns", file=path)
        for k in header:
            check_key(k, path, "header")
        width = len(header)              # a short row's missing fields are None, as csv's
        records = ((i + 2, dict(zip(header, r + [None] * (width - len(r)), strict=False)))
                   for i, r in enumerate(rows))
    t, isl, osl, pre, ka = _rows(records, path)
    if not t:
        raise InputError("no requests in trace", file=path)
    arrival = np.frombuffer(t, dtype=np.float64)
    hashed = any(isinstance(x, tuple) for x in pre)
    if hashed and ka == "timestamp":        # Mooncake's format: milliseconds
        arrival = arrival * 1e-3
    order = np.argsort(arrival, kind="stable")[:limit]
    arrival = arrival[order]
    reqs = Requests(arrival - arrival[0], np.frombuffer(isl, dtype=np.int64)[order],
                    np.frombuffer(osl, dtype=np.int64)[order], source=f"trace {p.name}",
                    rows=len(t))
    if any(x is not None for x in pre):
        reqs.prefix = _prefix([pre[i] for i in order.tolist()], reqs, hashed)
    return reqs


def _prefix(pre: list, reqs: Requests, hashed: bool) -> Prefix:
    """The trace's prefix information in arrival order: its ``hash_ids``, or each session's
    turns numbered as one stream of blocks (turn after turn, the earlier ones' prompt and
    answer first); a request with neither shares nothing."""
    if hashed:
        return Prefix([x if isinstance(x, tuple) else () for x in pre], MOONCAKE_BLOCK)
    B = MOONCAKE_BLOCK
    ids: list[tuple] = []
    new = 0                      # requests of no session: blocks nobody else has
    for x, i, o in zip(pre, reqs.isl.tolist(), reqs.osl.tolist(), strict=True):
        if x is None:
            new -= 1
            ids.append(tuple((new, j) for j in range((i + o) // B)))
        else:
            ids.append(tuple((x, j) for j in range((i + o) // B)))
    return Prefix(ids, B, session=True)


def _prefix_of(rec: dict, path: str, where: str) -> tuple | str | None:
    """A row's ``hash_ids`` (a tuple of whole numbers) or session (a string), else None."""
    if HASH_KEY in rec and rec[HASH_KEY] not in (None, ""):
        v = rec[HASH_KEY]
        if isinstance(v, str):          # a CSV cell: the JSON list as text
            try:
                v = json.loads(v)
            except json.JSONDecodeError:
                v = None
        if not isinstance(v, list) or not all(
                isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in v):
            raise InputError(f"got {clip(repr(rec[HASH_KEY]))}; expected a list of whole "
                             "numbers from 0 up (one id per block of 512 prompt tokens)",
                             file=path, field=f"{where}.{HASH_KEY}")
        return tuple(v)
    k = _pick(rec, SESSION_KEYS)
    if k is not None and rec[k] not in (None, ""):
        return str(rec[k])
    return None


def _json_row(line: str, path: str, lineno: int) -> dict:
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg}", file=path, field=f"row {lineno}") from None
    if not isinstance(rec, dict):
        raise InputError("expected an object with arrival, input and output lengths",
                         file=path, field=f"row {lineno}")
    for k in rec:
        check_key(k, path, f"row {lineno}")
    return rec


def _rows(records, path: str) -> tuple[array, array, array, list, str | None]:
    """Arrival (s), isl and osl of each record, checked (at most :data:`MAX_REQUESTS`), its
    prefix information (:func:`_prefix_of`) and the arrival column's name."""
    t, isl, osl = array("d"), array("q"), array("q")
    pre: list = []
    keys: tuple[str | None, str | None, str | None] | None = None
    form = first = ""
    for lineno, rec in records:
        where = f"row {lineno}"
        if keys is None:
            keys = (_pick(rec, ARRIVAL_KEYS), _pick(rec, ISL_KEYS), _pick(rec, OSL_KEYS))
            for k, names in zip(keys, (ARRIVAL_KEYS, ISL_KEYS, OSL_KEYS), strict=True):
                if k is None:
                    raise InputError(f"no column for {names[0]}; allowed names: "
                                     f"{', '.join(names)}", file=path, field=where)
        ka, ki, ko = keys
        for k in (ka, ki, ko):
            if k not in rec or rec[k] in (None, ""):
                raise InputError("missing value", file=path, field=f"{where}.{k}")
        assert ka is not None and ki is not None and ko is not None
        if len(t) >= MAX_REQUESTS:
            raise InputError(f"more than {MAX_REQUESTS:,} requests; at most {MAX_REQUESTS:,} "
                             "in one run (split the trace)", file=path)
        arrival, kind = _time(rec[ka], path, where, ka)
        if form and kind != form:
            raise InputError(f"got {rec[ka]!r} ({kind}), but {first} gave {form}; expected one "
                             "form in the whole column", file=path, field=f"{where}.{ka}")
        form, first = form or kind, first or where
        t.append(arrival)
        isl.append(_tokens(rec[ki], path, where, ki))
        osl.append(_tokens(rec[ko], path, where, ko))
        pre.append(_prefix_of(rec, path, where))
    return t, isl, osl, pre, keys[0] if keys else None
