"""Collectives among CPU processes of one host: MPI over shared memory, Gloo over TCP loopback.

The ranks of such a run are processes, not GPUs, and they exchange through the host's memory
(transport ``shm``: MPICH's shared-memory channel) or through the kernel's loopback TCP stack
(transport ``tcp``: Gloo, torch.distributed's CPU backend). A host is described by a spec
with ``gpu: none`` (docs/systems.md)::

    gpu: none
    cpu: EPYC-7763        # catalog CPU (its DRAM bandwidth); '' or absent: unknown
    sockets: 1
    cores: 64             # cores the ranks run on (ranks beyond them share cores)
    ranks_per_node: 8     # default rank count (gpufabric collective)
    transport: shm        # shm (MPI) or tcp (Gloo)

or by a system file without GPUs as ``gpufabric discover`` writes it (its CPU sockets).

Each message of a collective step costs the transport's latency ``HOST_LAT_US[t]`` plus its
bytes at ``B = HOST_COPY_SHARE[t] x R``, where ``R``, the copy rate of one rank, is one core's
copy rate (``HOST_CORE_COPY_GBps``) or, when the CPU model is known, the sockets' usable DRAM
bandwidth (catalog ``mem_bw_GBps`` x ``DRAM_EFFICIENCY``) shared by the ranks, whichever is
lower, and scaled down by ``cores / ranks`` when the ranks outnumber the cores (each message
then also waits ``HOST_OVERSUB_WAIT_MS``, a scheduler time slice, for a peer that is not
running, on a share ``1 - cores / ranks`` of the messages). A reduction's
local pass over its bytes runs at ``B`` too. The algorithms are MPICH's (R. Thakur, R.
Rabenseifner, W. Gropp, IJHPCA 19(1), 2005, with MPICH's default thresholds
``MPICH_THRESHOLDS``) for ``shm``, and Gloo's rings (gloo/allreduce_ring_chunked.h,
allgather_ring.h) for ``tcp``:

==============  ==================================================================
all_reduce      recursive doubling up to 2 KiB (or fewer elements than ranks),
                else Rabenseifner (reduce-scatter by recursive halving, allgather by
                recursive doubling); non-power-of-two ranks fold the extra ones first
all_gather      recursive doubling below 512 KiB at power-of-two ranks; Bruck below
                80 KiB otherwise; else ring
reduce_scatter  recursive halving below 512 KiB at power-of-two ranks, else pairwise
broadcast       binomial tree below 12 KiB or under 8 ranks; else scatter and
                allgather (recursive doubling below 512 KiB at power-of-two, else ring)
all_to_all      Bruck for blocks up to 256 B at 8 ranks and more; scattered
                isend/irecv up to 32 KiB blocks; else pairwise exchange
==============  ==================================================================

Examples
--------
>>> m = HostModel(host_system({"gpu": "none", "cpu": "EPYC-7763", "cores": 64}))
>>> p = m.predict("all_reduce", 8, 2)
>>> p.algo, p.proto, round(p.time_us, 2)
('recursive_doubling', 'shm', 0.5)
>>> m.predict("all_reduce", 64 * 2**20, 4).algo
'rabenseifner'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from gpufabric import catalog
from gpufabric.collectives import DTYPE_BYTES, OPS, Prediction, busbw_factor, check_op
from gpufabric.collectives import params as P
from gpufabric.errors import InputError
from gpufabric.network.capacity import DRAM_EFFICIENCY
from gpufabric.topology import schema

#: The collectives this model predicts (reduce is not among nccl-tests' five here).
HOST_OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


@dataclass
class HostSystem:
    """A host whose ranks are CPU processes."""

    name: str
    cpu: str = ""
    sockets: int = 1
    cores: int | None = None
    ranks_per_node: int | None = None
    transport: str = "shm"
    mem_bw_GBps: float = 0.0
    #: no GPU links (calibrate's link-rate parameters find nothing here)
    links: tuple = field(default=(), repr=False)

    def spec(self) -> dict[str, Any]:
        """The ``gpu: none`` spec of this host (what ``gpufabric bench`` records)."""
        out: dict[str, Any] = {"gpu": "none"}
        if self.cpu:
            out["cpu"] = self.cpu
        out["sockets"] = self.sockets
        if self.cores:
            out["cores"] = self.cores
        if self.ranks_per_node:
            out["ranks_per_node"] = self.ranks_per_node
        out["transport"] = self.transport
        return out


def is_host(spec: Any) -> bool:
    """Whether a spec mapping describes a host of CPU ranks (``gpu: none``)."""
    return schema.is_host_spec(spec)


def host_system(spec: dict[str, Any], name: str = "", file: str | None = None) -> HostSystem:
    """A :class:`HostSystem` from a ``gpu: none`` spec (bad input: one :class:`InputError`)."""
    s = schema.check_host(spec, file)
    cpu, bw = "", 0.0
    if s.cpu not in (None, ""):
        c = catalog.get("cpu", str(s.cpu), file=file, field="cpu")
        cpu, bw = c.name, float(c.mem_bw_GBps or 0.0)
    return HostSystem(name or str(s.name or "host"), cpu, s.sockets or 1, s.cores,
                      s.ranks_per_node, s.transport or "shm", bw)


def from_topology(topo: Any, transport: str = "shm") -> HostSystem | None:
    """The host of a topology without GPUs (a system file ``gpufabric discover`` wrote): its
    CPU sockets, their model and cores (``attrs.cores``); None when it has GPUs."""
    if topo.gpus():
        return None
    cpus = [d for d in topo.devices.values() if d.kind == "cpu"]
    model = next((d.model for d in cpus if d.model), "")
    bw = 0.0
    if model:
        try:
            bw = float(catalog.cpu(model).mem_bw_GBps or 0.0)
        except InputError:
            model = ""
    cores = sum(int(d.attrs.get("cores") or 0) for d in cpus) or None
    return HostSystem(topo.name, model, max(1, len(cpus)), cores, None, transport, bw)


def load_host(system: str) -> HostSystem | None:
    """The host ``system`` names (an inline ``gpu=none,...`` spec, a YAML spec with ``gpu:
    none``, a system file without GPUs), or None for a GPU system."""
    from pathlib import Path

    from gpufabric.fileio import MAX_YAML_BYTES, names_a_path, parse_yaml, read_text
    from gpufabric.topology.build import SYSTEM_FILE, load, parse_inline
    text = system.strip()
    path = Path(text)
    if (names_a_path(text) and path.suffix.lower() in (".yaml", ".yml", ".json")
            and path.is_file()):
        # read as the topology loader reads it (same limits, same messages)
        data = parse_yaml(read_text(path, what=SYSTEM_FILE, max_bytes=MAX_YAML_BYTES), system)
        if is_host(data):
            return host_system(data, name=path.stem, file=system)
        devs = data.get("devices") if isinstance(data, dict) else None
        if isinstance(devs, list) and devs and not any(
                isinstance(d, dict) and d.get("kind") == "gpu" for d in devs):
            return from_topology(load(system))
        return None
    if "=" in text:
        spec = parse_inline(text)
        return host_system(spec, file=system) if is_host(spec) else None
    return None


def _lg(p: int) -> int:
    return max(0, math.ceil(math.log2(p))) if p > 1 else 0


def _pof2(p: int) -> int:
    return 1 << (p.bit_length() - 1)


class HostModel:
    """The collective model of a :class:`HostSystem` (the interface of
    :class:`gpufabric.collectives.Model` that validate and calibrate use: ``predict``)."""

    def __init__(self, host: HostSystem):
        self.host = host
        self._plans: dict = {}      # calibrate clears it between trials; nothing is cached

    def rate_GBps(self, ranks: int) -> float:
        """One rank's copy rate ``R`` (GB/s) with ``ranks`` ranks on the host."""
        h = self.host
        r = float(P.HOST_CORE_COPY_GBps)
        if h.mem_bw_GBps:
            r = min(r, h.mem_bw_GBps * h.sockets * DRAM_EFFICIENCY.value / max(1, ranks))
        if h.cores and ranks > h.cores:
            r *= h.cores / ranks
        return r

    def predict(self, op: str, size: int, ranks: int | None = None, algo: str | None = None,
                proto: Any = None, per_node: int | None = None,
                concurrent: int = 1) -> Prediction:
        """One point in nccl-tests terms (``size`` as nccl-tests counts it for ``op``)."""
        check_op(op)
        if concurrent != 1:
            raise InputError(f"got {concurrent}; CPU ranks of one host run one group",
                             field="concurrent")
        if op not in HOST_OPS:
            raise InputError(f"{op} is not modelled for CPU ranks; allowed: "
                             f"{', '.join(HOST_OPS)}", field="op")
        if algo not in (None, "auto"):
            raise InputError(f"got {algo!r}; CPU ranks run their library's own choice (auto)",
                             field="algorithm")
        h = self.host
        p = ranks or h.ranks_per_node or h.cores or 2
        if p < 1:
            raise InputError(f"got {p}; expected a positive integer", field="ranks")
        t = h.transport
        a = float(P.HOST_LAT_US[t])
        if h.cores and p > h.cores:
            # a message waits for a descheduled peer on a share 1 - cores/ranks of the steps
            a += float(P.HOST_OVERSUB_WAIT_MS) * 1e3 * (1 - h.cores / p)
        b = float(P.HOST_COPY_SHARE[t]) * self.rate_GBps(p) * 1e3     # bytes per us
        n = float(size)
        name, time_us = (_ring if t == "tcp" else _mpich)(op, n, p, a, b)
        time_us = max(time_us, 1e-3)
        count = int(size // DTYPE_BYTES)
        if op in ("all_gather", "reduce_scatter", "all_to_all"):
            count //= max(1, p)
        algbw = n / (time_us * 1e-6) / 1e9
        return Prediction(op, int(size), count, "float", "sum", 0, p, time_us, algbw,
                          algbw * busbw_factor(op, p), name, t)


def _mpich(op: str, n: float, p: int, a: float, b: float) -> tuple[str, float]:
    """(algorithm, time in us) of MPICH's default choice; ``a`` us per message, ``b`` bytes
    per us."""
    th = P.MPICH_THRESHOLDS
    if p == 1:
        return "local", n / b
    pof2 = _pof2(p)
    k = int(math.log2(pof2))
    rest = p - pof2
    frac = (p - 1) / p
    if op == "all_reduce":
        # non-power-of-two: the extra ranks send their data to a partner (which reduces it)
        # and get the result back at the end
        fold = (2 * a + 3 * n / b) if rest else 0.0
        if n <= th["allreduce_short"] or n / DTYPE_BYTES < pof2:
            return "recursive_doubling", fold + k * (a + 2 * n / b)
        f2 = (pof2 - 1) / pof2
        return "rabenseifner", fold + 2 * k * a + f2 * n * 2 / b + f2 * n / b
    if op == "all_gather":
        if n < th["allgather_long"] and rest == 0:
            return "recursive_doubling", k * a + frac * n / b
        if n < th["allgather_short"]:
            return "bruck", _lg(p) * a + frac * n / b + n / b
        return "ring", (p - 1) * a + frac * n / b
    if op == "reduce_scatter":
        if n < th["redscat_long"] and rest == 0:
            return "recursive_halving", k * a + frac * n * 2 / b
        return "pairwise", (p - 1) * a + frac * n * 2 / b
    if op == "broadcast":
        if n < th["bcast_short"] or p < th["bcast_min_procs"]:
            return "binomial", _lg(p) * (a + n / b)
        if n < th["bcast_long"] and rest == 0:
            return "scatter_recursive_doubling", 2 * k * a + 2 * frac * n / b
        return "scatter_ring", (_lg(p) + p - 1) * a + 2 * frac * n / b
    # all_to_all: n is each rank's send buffer, n / p to each peer
    blk = n / p
    if blk <= th["alltoall_short"] and p >= th["alltoall_min_procs"]:
        return "bruck", _lg(p) * (a + n / 2 / b) + n / b
    if blk <= th["alltoall_medium"]:
        return "scattered", (p - 1) * a + frac * n / b
    return "pairwise", (p - 1) * (a + blk / b)


def _ring(op: str, n: float, p: int, a: float, b: float) -> tuple[str, float]:
    """(algorithm, time in us) of Gloo's rings over TCP loopback."""
    if p == 1:
        return "local", n / b
    frac = (p - 1) / p
    if op == "all_reduce":
        return "ring", 2 * (p - 1) * a + frac * n * 3 / b
    if op == "reduce_scatter":
        return "ring", (p - 1) * a + frac * n * 2 / b
    if op == "all_gather":
        return "ring", (p - 1) * a + frac * n / b
    if op == "broadcast":
        return "one_to_all", (p - 1) * (a + n / b)
    return "pairwise", (p - 1) * (a + n / p / b)


def ops() -> tuple[str, ...]:
    """The collectives this model predicts (a subset of :data:`gpufabric.collectives.OPS`)."""
    return tuple(o for o in OPS if o in HOST_OPS)
