"""A parallel layout (TP, CP, EP, DP, PP, ZeRO/FSDP, batches) and where its groups fall on nodes.

Ranks are numbered as Megatron-LM numbers them: with the default order ``tp-cp-ep-dp-pp`` the
tensor-parallel rank varies fastest (innermost, inside a node), then context, expert, data and
pipeline. Expert layers have their own decomposition (Megatron-Core's MoE parallel folding):
``etp`` expert-tensor-parallel ranks innermost, then ``ep`` expert-parallel ranks, then the
expert-data-parallel ranks, over the same ``tp * cp * dp`` GPUs of a pipeline stage, so
``ep * etp`` must divide ``tp * cp * dp``. By default ``etp`` is ``tp`` (Megatron-Core's
default), which carves expert parallelism out of the data(-and-context) dimension: ``ep`` must
then divide ``dp * cp``.

Each communication group becomes ``(ranks, per_node, concurrent)``: how many ranks, how many of
them on each node, and how many groups of that shape run at once on the same nodes (which then
share the nodes' NICs) -- what :func:`gpufabric.collectives.predict` takes.

Examples
--------
>>> p = Parallel(tp=8, pp=4, dp=16)
>>> p.world
512
>>> p.group("tp", 8), p.group("dp", 8), p.group("pp", 8)
(Group(kind='tp', ranks=8, per_node=8, concurrent=1), Group(kind='dp', ranks=16, \
per_node=1, concurrent=8), Group(kind='pp', ranks=4, per_node=1, concurrent=8))
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from gpufabric.errors import InputError

RECOMPUTE = ("none", "selective", "full")
DIMS = ("tp", "cp", "ep", "dp", "pp")
DEFAULT_ORDER = "tp-cp-ep-dp-pp"


@dataclass(frozen=True)
class Group:
    """One communication group's shape on the nodes."""

    kind: str
    ranks: int
    per_node: int
    concurrent: int


@dataclass(frozen=True)
class Parallel:
    """A training layout.

    ``zero``: 0 (plain data parallel), 1 (optimizer states sharded), 2 (+ gradients),
    3 (+ parameters; FSDP ``full``). ``fsdp="hybrid"`` shards inside a node and replicates
    across nodes (HSDP). ``sp``: sequence parallelism with TP (reduce-scatter / all-gather
    instead of all-reduce; activations split by ``tp`` outside the TP regions too).
    ``micro_batch`` and ``global_batch`` are in sequences; ``vpp`` is the number of virtual
    pipeline stages (model chunks) per rank, 1 for plain 1F1B. ``etp``: tensor parallelism
    inside each expert (0: as ``tp``, Megatron-Core's default); with ``etp`` other than ``tp``
    the expert layout folds over the stage's ``tp * cp * dp`` ranks, which needs the pipeline
    outermost in ``order``. ``offload``: the optimizer states (FP32 master weights and Adam
    moments) live in host memory and the optimizer step streams them over the GPU's host link
    (Megatron-Core ``--optimizer-cpu-offload``, DeepSpeed ZeRO-Offload).
    """

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    vpp: int = 1
    zero: int = 0
    fsdp: str = ""          # "" | full | hybrid
    sp: bool = True
    micro_batch: int = 1
    global_batch: int = 0   # 0: dp * micro_batch (no accumulation)
    recompute: str = "none"
    order: str = DEFAULT_ORDER
    etp: int = 0            # 0: as tp
    offload: bool = False   # optimizer states in host memory

    def __post_init__(self) -> None:
        for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "micro_batch"):
            v = getattr(self, k)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InputError(f"must be a whole number >= 1, got {v!r}", field=k)
        if self.zero not in (0, 1, 2, 3):
            raise InputError(f"got {self.zero!r}; allowed: 0, 1, 2, 3", field="zero")
        if self.fsdp not in ("", "full", "hybrid"):
            raise InputError(f"got {self.fsdp!r}; allowed: full, hybrid", field="fsdp")
        if self.recompute not in RECOMPUTE:
            raise InputError(f"got {self.recompute!r}; allowed: {', '.join(RECOMPUTE)}",
                             field="recompute")
        dims = self.order.split("-")
        if sorted(dims) != sorted(DIMS):
            raise InputError(f"got {self.order!r}; a permutation of {DEFAULT_ORDER}",
                             field="order")
        if not isinstance(self.etp, int) or isinstance(self.etp, bool) or self.etp < 0:
            raise InputError(f"must be a whole number >= 1 (0: as tp), got {self.etp!r}",
                             field="etp")
        if self.folded:
            stage = self.tp * self.cp * self.dp
            if stage % (self.ep * self.expert_tp):
                raise InputError(f"ep x etp = {self.ep} x {self.expert_tp} must divide tp x cp x "
                                 f"dp = {stage}", field="ep")
            if dims[-1] != "pp":
                raise InputError(f"got {self.order!r}; an expert tensor parallelism other than "
                                 "tp needs the pipeline outermost (last)", field="order")
        elif (self.dp * self.cp) % self.ep:
            raise InputError(f"ep {self.ep} must divide dp*cp = {self.dp * self.cp} (or set "
                             "etp, Megatron-Core's MoE parallel folding, so that ep x etp "
                             f"divides tp x cp x dp = {self.tp * self.cp * self.dp})",
                             field="ep")
        gb = self.global_batch or self.dp * self.micro_batch
        if gb % (self.dp * self.micro_batch):
            raise InputError(f"global batch {gb} is not a multiple of dp x micro-batch = "
                             f"{self.dp} x {self.micro_batch}", field="global_batch")
        if not isinstance(self.offload, bool):
            raise InputError(f"got {self.offload!r}; allowed: true, false", field="offload")
        if self.vpp > 1 and self.pp == 1:
            raise InputError("virtual pipeline stages need pp > 1", field="vpp")

    @property
    def world(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def expert_tp(self) -> int:
        """Tensor parallelism inside each expert."""
        return self.etp or self.tp

    @property
    def folded(self) -> bool:
        """Whether the expert layout folds over the stage's ranks (``etp`` other than ``tp``)."""
        return self.expert_tp != self.tp

    @property
    def edp(self) -> int:
        """Ranks sharing each expert's parameters (the expert-data-parallel group)."""
        return self.tp * self.cp * self.dp // (self.ep * self.expert_tp)

    @property
    def batch(self) -> int:
        return self.global_batch or self.dp * self.micro_batch

    @property
    def micro_batches(self) -> int:
        """Micro-batches per data-parallel rank per step (gradient accumulation)."""
        return self.batch // (self.dp * self.micro_batch)

    @property
    def zero_stage(self) -> int:
        return 3 if self.fsdp else self.zero

    def with_(self, **kw: Any) -> Parallel:
        return replace(self, **kw)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["world"], d["global_batch"] = self.world, self.batch
        d["grad_accum"] = self.micro_batches
        return d

    # -- groups on nodes ---------------------------------------------------------------------
    def stride(self, kind: str) -> int:
        """Distance in rank numbers between neighbours of a ``kind`` group."""
        sizes = {"tp": self.tp, "cp": self.cp, "ep": 1, "dp": self.dp, "pp": self.pp}
        dims = [d for d in self.order.split("-")]
        if kind == "ep" and self.folded:   # folded: etp innermost, then ep
            return self.expert_tp
        if kind == "ep":   # carved from cp x dp, starting where the first of them sits
            kind = "cp" if dims.index("cp") < dims.index("dp") else "dp"
        s = 1
        for d in dims:
            if d == kind:
                return s
            if d != "ep":
                s *= sizes[d]
        return s  # pragma: no cover

    def size(self, kind: str) -> int:
        return {"tp": self.tp, "cp": self.cp, "ep": self.ep, "dp": self.dp, "pp": self.pp,
                "dp_cp": self.dp * self.cp, "edp": self.edp}[kind]

    def group(self, kind: str, gpus_per_node: int) -> Group:
        """Shape of a ``kind`` group (tp, cp, ep, dp, pp; ``dp_cp``: the gradient group when
        cp > 1; ``edp``: the data-parallel group of expert parameters) on nodes of
        ``gpus_per_node`` GPUs."""
        n = self.size(kind)
        if kind == "dp_cp":
            s = min(self.stride("dp"), self.stride("cp"))
        elif kind == "edp":
            s = self.stride("ep") * self.ep
        else:
            s = self.stride(kind)
        return group_shape(kind, n, s, gpus_per_node)


def group_shape(kind: str, n: int, stride: int, g: int) -> Group:
    """``n`` ranks ``stride`` apart on nodes of ``g`` GPUs.

    >>> group_shape("dp", 4, 2, 8)     # 4 ranks 2 apart: one node, 2 such groups on it
    Group(kind='dp', ranks=4, per_node=4, concurrent=2)
    >>> group_shape("dp", 8, 4, 8)     # 2 per node over 4 nodes; 4 groups share those nodes
    Group(kind='dp', ranks=8, per_node=2, concurrent=4)
    """
    if n <= 1:
        return Group(kind, 1, 1, 1)
    if stride * n <= g:                   # inside one node
        return Group(kind, n, n, max(1, g // n))
    if stride >= g:                       # one rank per node
        return Group(kind, n, 1, g)
    per = max(1, g // stride)
    while n % per:
        per -= 1
    return Group(kind, n, per, stride)


__all__ = ["Parallel", "Group", "group_shape", "RECOMPUTE", "DEFAULT_ORDER"]
