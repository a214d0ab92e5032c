"""A KV cache beyond HBM, with prefix reuse: tiers, block hashing, LRU eviction, load or recompute.

A request's prompt is cut into blocks of a trace's block size (Mooncake's ``hash_ids``: 512
tokens); a block is known by its id chained with every earlier one (vLLM's automatic prefix
caching hashes a block with its prefix; SGLang's radix tree reaches the same blocks), so a hit
is always a prefix. The cache is a hierarchy of tiers, each an LRU of blocks holding every block
the requests computed (write-through, as LMCache stores every request's KV and Mooncake's store
keeps it): HBM (the engine's KV cache), host DRAM over the GPU's host link, local NVMe, and a
remote pool over RDMA shared by every instance of the deployment. A lookup takes each block from
the fastest tier that still holds it; the hit is the prefix of blocks some tier holds, at most
the prompt's length less one token (the engine computes the last token, as vLLM does).

Loading a block from a tier costs its bytes over the tier's rate (HBM: nothing); the request
loads the prefix length that makes loading plus recomputing the rest of its prompt cheapest,
so a slow tier's hit on a short prefix is recomputed instead. The serving simulator starts such
a request with its loaded tokens in the KV cache, and the iteration that admits it waits for the
load (:func:`gpufabric.workloads.inference.simulator.simulate`'s ``prefix``).

Every tier sees the requests in arrival order (the replay of a trace: Mooncake's FAST'25 paper
sizes its cache the same way), so the hits do not depend on the batch's timing; the HBM tier
holds as many blocks as the whole KV cache (vLLM keeps freed blocks as cache until it needs
them: under load fewer stay).

Examples
--------
>>> parse_tier("host:512GiB").capacity_bytes == 512 * 2**30
True
>>> parse_tier("nvme:4TB@7").bw_GBps
7.0
>>> t = [Tier("hbm", 2 * 1024, math.inf), Tier("host", 5 * 1024, 10.0)]
>>> ids = [(1, 2, 3), (1, 2, 4), (5,), (1, 2, 3)]
>>> p = plan(ids, np.array([2000, 2000, 600, 2000]), t, block=512, block_bytes=1024)
>>> p.hit_tokens.tolist()
[0, 1024, 0, 1536]
>>> p.tier_tokens
{'hbm': 512, 'host': 2048}
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gpufabric.cache import BoundedDict
from gpufabric.errors import InputError, clip

#: The tiers in the order a lookup tries them; ``hbm`` is the engine's own KV cache.
TIER_NAMES = ("hbm", "host", "nvme", "remote")

_UNITS = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "pb": 1e15,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50}
#: Largest tier one GPU may be given (a petabyte: far past any host or pool of today).
MAX_TIER_BYTES = 1e15

#: The drive (catalog/data/drives.yaml) an ``nvme`` tier reads from unless one is named, one
#: per GPU, as NVIDIA DGX H100 has eight U.2 NVMe data drives for its eight GPUs.
NVME_DRIVE = "Samsung-PM1733"


@dataclass(frozen=True)
class Tier:
    """One level of the cache: ``capacity_bytes`` per GPU (its share of the KV of every block),
    ``bw_GBps`` per GPU when loading from it (None: the system's, :func:`resolve`)."""

    name: str
    capacity_bytes: float
    bw_GBps: float | None = None
    source: str = ""


def parse_size(text: str, field: str = "--kv-tier") -> float:
    """Bytes of ``512GiB``, ``4TB``, ``1.5 TiB`` (decimal or binary units; a plain number is
    bytes).

    >>> parse_size("1.5KiB"), parse_size("2 TB")
    (1536.0, 2000000000000.0)
    """
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _UNITS:
        raise InputError(f"size {clip(repr(text))}: expected a number with a unit of KiB, "
                         "MiB, GiB, TiB (or KB, MB, GB, TB), e.g. 512GiB", field=field)
    v = float(m.group(1)) * _UNITS[unit]
    if not (0 < v <= MAX_TIER_BYTES):
        raise InputError(f"size {clip(repr(text))}: must be above 0 and at most 1 PB per "
                         "GPU", field=field)
    return v


def parse_tier(text: str) -> Tier:
    """``NAME[:SIZE][@GBps]``: a tier of ``host``, ``nvme`` or ``remote`` with its size per GPU
    and, optionally, its rate per GPU in GB/s (``nvme``: or a drive of the catalog,
    ``nvme:4TiB@PM1743``); ``hbm`` alone turns on prefix caching in HBM (its size is the KV
    cache's).

    >>> parse_tier("remote:16TiB@25").name, parse_tier("hbm").capacity_bytes
    ('remote', 0.0)
    >>> parse_tier("nvme:4TiB@PM1743").bw_GBps
    13.0
    """
    field = "--kv-tier"
    m = re.fullmatch(r"\s*([A-Za-z]+)\s*(?::([^@]*))?(?:@\s*([^@]*?)\s*(?:GB/?p?s)?)?\s*",
                     str(text))
    name = m.group(1).lower() if m else ""
    if name not in TIER_NAMES:
        raise InputError(f"got {clip(repr(text))}; expected NAME:SIZE[@GBps] with NAME one of "
                         "host, nvme, remote (or hbm alone), e.g. host:512GiB",
                         field=field)
    assert m is not None
    if name == "hbm":
        if m.group(2) or m.group(3):
            raise InputError(f"got {clip(repr(text))}; hbm takes no size or rate (it is the "
                             "engine's KV cache)", field=field)
        return Tier("hbm", 0.0, None, "the engine's KV cache")
    if not m.group(2):
        raise InputError(f"got {clip(repr(text))}; {name} needs a size per GPU, e.g. "
                         f"{name}:512GiB", field=field)
    size = parse_size(m.group(2), field)
    rate = m.group(3)
    if rate is None:
        return Tier(name, size, None, "--kv-tier")
    try:
        bw = float(rate)
    except ValueError:
        if name == "nvme" and re.search("[A-Za-z]", rate):
            from gpufabric import catalog
            d = catalog.drive(rate, field=field)
            return Tier(name, size, d.read_GBps, f"one {d.name} per GPU (catalog)")
        bw = float("nan")
    if not (math.isfinite(bw) and 0 < bw <= 1e5):
        raise InputError(f"rate {clip(repr(rate))}: expected GB/s per GPU above 0 and at most "
                         "100000, e.g. @25" + (" (or a drive, see `gpufabric catalog "
                                              "storage`)" if name == "nvme" else ""),
                         field=field)
    return Tier(name, size, bw, "--kv-tier")


def parse_tiers(texts: list[str] | tuple[str, ...]) -> list[Tier]:
    """Tiers of several ``--kv-tier`` options, in lookup order (:data:`TIER_NAMES`); each name
    at most once. HBM is always the first.

    >>> [t.name for t in parse_tiers(["nvme:1TiB", "host:256GiB"])]
    ['hbm', 'host', 'nvme']
    """
    tiers = [parse_tier(t) for t in texts]
    names = [t.name for t in tiers]
    for n in names:
        if names.count(n) > 1:
            raise InputError(f"{n} given {names.count(n)} times; give each tier once",
                             field="--kv-tier")
    if "hbm" not in names:
        tiers.append(Tier("hbm", 0.0, None, "the engine's KV cache"))
    return sorted(tiers, key=lambda t: TIER_NAMES.index(t.name))


def system_rate(name: str, topo) -> tuple[float, str]:
    """A tier's loading rate per GPU on ``topo`` (GB/s) and where it comes from: ``host`` the
    GPU's link to its CPU (PCIe or NVLink-C2C, its usable rate), ``nvme`` one :data:`NVME_DRIVE`,
    ``remote`` the GPU's share of its node's NICs (the fabric's payload rate)."""
    from gpufabric.network.capacity import usable_GBps
    if name == "nvme":
        from gpufabric import catalog
        d = catalog.drive(NVME_DRIVE)
        return d.read_GBps, f"one {d.name} per GPU (catalog)"
    gpu = topo.gpus()[0]
    if name == "host":
        from gpufabric.topology.paths import upstream
        links = [ln for _, ln in upstream(topo, gpu.id) if ln is not None]
        if not links:
            raise InputError(f"{topo.name} gives its GPUs no link to a CPU; give the rate: "
                             "--kv-tier host:SIZE@GBps", field="--kv-tier")
        ln = min(links, key=lambda x: usable_GBps(x, topo))
        return usable_GBps(ln, topo), f"the GPU's host link ({ln.kind}, its usable rate)"
    from gpufabric import catalog
    rate = 0.0
    for nic in topo.nics(node=gpu.node):
        speed = nic.attrs.get("speed") or topo.meta.get("nic")
        try:
            s = catalog.net_speed(str(speed))
        except InputError:
            continue
        rate += s.bw_GBps * s.efficiency
    if rate <= 0:
        raise InputError(f"{topo.name} has no NIC of a known speed for a remote pool; give "
                         "the rate: --kv-tier remote:SIZE@GBps", field="--kv-tier")
    return rate / len(topo.gpus(node=gpu.node)), "the node's RDMA NICs, shared by its GPUs"


def resolve(tiers: list[Tier], topo, hbm_bytes: float) -> list[Tier]:
    """``tiers`` with HBM's size (``hbm_bytes`` per GPU) and every rate not given filled in
    from the system (:func:`system_rate`)."""
    out = []
    for t in tiers:
        if t.name == "hbm":
            out.append(Tier("hbm", hbm_bytes, math.inf, t.source))
        elif t.bw_GBps is None:
            bw, src = system_rate(t.name, topo)
            out.append(Tier(t.name, t.capacity_bytes, bw, src))
        else:
            out.append(t)
    return out


def chain(ids: tuple) -> list:
    """Each block's key: its id with every earlier block's (a block hash over its prefix).

    >>> chain((7, 8)) == [hash((None, 7)), hash((hash((None, 7)), 8))]
    True
    """
    out, h = [], None
    for x in ids:
        h = hash((h, x))
        out.append(h)
    return out


#: The last few streams' distances, keyed by their content (a run and the runs that compare
#: its tiers replay the same trace).
_DISTANCES: BoundedDict[tuple, list[np.ndarray]] = BoundedDict(4)


def distances(ids: list[tuple], lookups: np.ndarray, mine: np.ndarray | None = None
              ) -> list[np.ndarray]:
    """LRU stack distances: for each of this stream's requests (``mine``; None: all) and each
    of its first ``lookups[i]`` blocks, how many distinct blocks were used since this block's
    last use (itself included; inf for a first use). An LRU cache of ``C`` blocks holds the
    block iff its distance is at most ``C``. Every request of ``ids`` uses all its blocks
    after its lookup (a Fenwick tree over time: O(blocks log blocks)).

    >>> [d.tolist() for d in distances([(1, 2), (3,), (1, 2)], np.array([2, 1, 2]))]
    [[inf, inf], [inf], [3.0, 2.0]]
    """
    key = (tuple(ids), np.asarray(lookups, np.int64).tobytes(),
           None if mine is None else np.asarray(mine, bool).tobytes())
    if key not in _DISTANCES:
        _DISTANCES[key] = _distances(ids, lookups, mine)
    return _DISTANCES[key]


def _distances(ids: list[tuple], lookups: np.ndarray, mine: np.ndarray | None
               ) -> list[np.ndarray]:
    if ids and all(x == ids[0] for x in ids):
        return _repeated(len(ids[0]), len(ids), lookups, mine)
    total = sum(len(x) for x in ids) + 1
    tree = np.zeros(total + 1, np.int64).tolist()
    last: dict = {}
    now = 0
    out: list[np.ndarray] = []

    def add(i: int, v: int) -> None:
        while i <= total:
            tree[i] += v
            i += i & -i

    def upto(i: int) -> int:
        s = 0
        while i > 0:
            s += tree[i]
            i -= i & -i
        return s

    for r, blocks in enumerate(ids):
        keys = chain(blocks)
        if mine is None or mine[r]:
            live = upto(now)
            d = [live - upto(last[k] - 1) if k in last else math.inf
                 for k in keys[:int(lookups[len(out)])]]
            out.append(np.array(d, np.float64))
        for k in keys:
            if k in last:
                add(last[k], -1)
            now += 1
            last[k] = now
            add(now, 1)
    return out


def _repeated(n: int, count: int, lookups: np.ndarray, mine: np.ndarray | None
              ) -> list[np.ndarray]:
    """:func:`_distances` of a stream whose ``count`` requests all use the same ``n`` blocks
    (one prefix every request shares), in closed form: the first finds none; each later one
    finds its block ``j`` with the ``n - j`` blocks from it to the end used since.

    >>> [d.tolist() for d in _repeated(3, 2, np.array([2, 5]), None)]
    [[inf, inf], [3.0, 2.0, 1.0]]
    """
    out: list[np.ndarray] = []
    for r in range(count):
        if mine is None or mine[r]:
            k = min(int(lookups[len(out)]), n)
            out.append(np.full(k, math.inf) if r == 0 else
                       np.arange(n, n - k, -1, dtype=np.float64))
    return out


@dataclass
class Plan:
    """What the cache does for each request: ``hit_tokens`` loaded (or found in HBM),
    ``load_s`` the seconds its load takes; per tier the tokens each serves (``tier_tokens``)
    and the hits declined because recomputing was cheaper (``declined_tokens``)."""

    hit_tokens: np.ndarray
    load_s: np.ndarray
    tier_tokens: dict[str, int]
    declined_tokens: int
    prompt_tokens: int
    reach: list[np.ndarray] = field(default_factory=list)   # local distances' running max


def plan(ids: list[tuple], isl: np.ndarray, tiers: list[Tier], block: int,
         block_bytes: float, recompute_s: Callable | None = None,
         mine: np.ndarray | None = None) -> Plan:
    """Replay this stream's requests (``ids`` of the whole stream, ``mine`` its own; their
    prompt lengths ``isl``) through ``tiers`` (resolved: sizes per GPU, rates), blocks of
    ``block`` tokens and ``block_bytes`` per GPU. ``recompute_s(isl, start)`` gives the seconds
    to prefill a prompt from token ``start`` (numpy arrays of starts); with it each request
    loads the prefix that makes load plus recompute cheapest, else all its hit."""
    isl = np.asarray(isl, np.int64)
    look = np.maximum(isl - 1, 0) // block
    own = [x for x, m in zip(ids, mine if mine is not None else [True] * len(ids),
                             strict=True) if m]
    local = distances(own, look)
    remote = next((t for t in tiers if t.name == "remote"), None)
    shared = distances(ids, look, mine) if remote is not None else None
    caps = {t.name: t.capacity_bytes / block_bytes for t in tiers}
    cost = {t.name: block_bytes / (t.bw_GBps * 1e9) if t.bw_GBps and math.isfinite(t.bw_GBps)
            else 0.0 for t in tiers}
    hit = np.zeros(len(own), np.int64)
    load = np.zeros(len(own))
    per = {t.name: 0 for t in tiers}
    declined = 0
    for i, d in enumerate(local):
        where = np.full(d.size, -1)
        for k, t in reversed(list(enumerate(tiers))):    # the fastest tier holding it wins
            dist = shared[i] if t.name == "remote" and shared is not None else d
            where[dist <= caps[t.name]] = k
        h = int(np.argmin(where >= 0)) if (where < 0).any() else d.size
        if h == 0:
            continue
        c = np.concatenate([[0.0], np.cumsum([cost[tiers[k].name] for k in where[:h]])])
        k = h
        if recompute_s is not None:
            starts = np.arange(h + 1) * block
            k = int(np.argmin(c + np.asarray(recompute_s(int(isl[i]), starts))))
        hit[i], load[i] = k * block, c[k]
        declined += (h - k) * block
        for w in where[:k].tolist():
            per[tiers[w].name] += block
    return Plan(hit, load, per, declined, int(isl.sum()),
                [np.maximum.accumulate(d) if d.size else d for d in local])


def working_set(p: Plan, block: int, block_bytes: float) -> dict:
    """The hit rate one LRU tier of this instance would reach with unbounded room, and the
    room per GPU it needs to reach it (the working set: beyond it the hit rate stops
    improving) and to reach 90% of it; ``curve``: hit rate at room doubling from 1 GB."""
    reach = np.concatenate(p.reach) if p.reach else np.zeros(0)
    reach = np.sort(reach[np.isfinite(reach)])
    total = max(p.prompt_tokens, 1)
    best = reach.size * block / total
    out: dict = {"max_hit_rate": best, "bytes_for_max": 0.0, "bytes_for_90pct": 0.0,
                 "curve": []}
    if not reach.size:
        return out
    out["bytes_for_max"] = float(reach[-1]) * block_bytes
    out["bytes_for_90pct"] = float(reach[math.ceil(0.9 * reach.size) - 1]) * block_bytes
    room = 1e9
    while True:
        n = int(np.searchsorted(reach, room / block_bytes, side="right"))
        out["curve"].append({"bytes": room, "hit_rate": n * block / total})
        if n == reach.size or room > MAX_TIER_BYTES:
            break
        room *= 2
    return out


def summary(p: Plan, tiers: list[Tier], block: int, block_bytes: float) -> dict:
    """The plan's figures for a run's output: each tier's size, rate and share of the prompt
    tokens it served, the hit rate, the declined hits and the working set."""
    total = max(p.prompt_tokens, 1)
    rows = [{"name": t.name, "capacity_bytes": t.capacity_bytes,
             "bw_GBps": None if not math.isfinite(t.bw_GBps or 0) else t.bw_GBps,
             "source": t.source, "hit_tokens": p.tier_tokens[t.name],
             "hit_rate": p.tier_tokens[t.name] / total} for t in tiers]
    return {"block_tokens": block, "block_bytes_per_gpu": block_bytes,
            "prompt_tokens": p.prompt_tokens, "hit_rate": float(p.hit_tokens.sum()) / total,
            "declined_rate": p.declined_tokens / total, "tiers": rows,
            "mean_load_ms": float(p.load_s.mean()) * 1e3 if p.load_s.size else 0.0,
            "working_set": working_set(p, block, block_bytes)}
