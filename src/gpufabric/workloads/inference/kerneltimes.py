"""Where the serving model takes its GEMM times: its own roofline, or a measured source.

The serving step model (:class:`~gpufabric.workloads.inference.itertime.StepModel`) asks the
source in use, if any, for each dense GEMM's time and each MoE layer's routed experts, and
keeps its roofline where the source has none. The default is no source. A source is any
object with the :class:`Source` methods; the measured one is
:class:`gpufabric.kerneldb.timing.Source` (NVIDIA AIConfigurator's kernel database, ``serve
--kernel-times aic``), set for a block by :func:`use`.

Examples
--------
>>> current() is None
True
>>> report({"measured": 3.0, "model": 1.0}, "H100-SXM", "vllm") is None
True
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any, NamedTuple, Protocol


class MoeShape(NamedTuple):
    """A MoE layer's routed experts as a kernel table keys them: the hidden size, the width
    of one expert, top-k of the experts, the expert-TP x expert-parallel layout of the ranks,
    and whether the up projection is gated."""

    hidden: int
    inter: int
    top_k: int
    experts: int
    moe_tp: int
    moe_ep: int
    gated: bool


class Source(Protocol):
    """A source of measured GEMM times."""

    #: the name ``--kernel-times`` gives it
    name: str

    def gemm_s(self, gpu: str, engine: str, prec: str, T: int, n: float,
               k: float) -> float | None:
        """Seconds of one GEMM ``(T x k) @ (k x n)`` at tensor precision ``prec`` on
        ``gpu`` as ``engine`` runs it (None: not covered)."""
        ...

    def moe_s(self, gpu: str, engine: str, prec: str, tokens: float,
              shape: MoeShape) -> float | None:
        """Seconds of one MoE layer's routed experts on one rank of the shape's layout
        (their grouped up and down GEMMs, routing and permutation around them) for
        ``tokens`` tokens entering the layer, balanced over the experts (None: not
        covered)."""
        ...

    def table(self, gpu: str, engine: str) -> str:
        """The measured table it reads for ``gpu`` and ``engine`` ('' if none)."""
        ...

    def missing(self, gpu: str, engine: str) -> str:
        """Why it has no table for ``gpu`` and ``engine`` (one phrase)."""
        ...


_CURRENT: contextvars.ContextVar[Source | None] = contextvars.ContextVar(
    "gpufabric_kernel_times", default=None)


def current() -> Source | None:
    """The measured timing source in use (None: gpufabric's roofline alone, the default)."""
    return _CURRENT.get()


@contextlib.contextmanager
def use(source: Source | None) -> Iterator[Source | None]:
    """Take GEMM times from ``source`` (None: the roofline) for the ``with`` block."""
    token = _CURRENT.set(source)
    try:
        yield source
    finally:
        _CURRENT.reset(token)


def report(gemm_sources: dict[str, float], gpu: str, engine: str) -> dict[str, Any] | None:
    """Where a run's GEMM times came from (None without a measured source in use): the share
    of the GEMM seconds of the step model's tables that were measured, and the table read."""
    src = current()
    if src is None:
        return None
    meas, model = gemm_sources.get("measured", 0.0), gemm_sources.get("model", 0.0)
    table = src.table(gpu, engine)
    return {"source": src.name, "measured_share": meas / (meas + model) if meas + model else 0.0,
            "table": table, "note": "" if table else src.missing(gpu, engine)}


def describe(rep: dict[str, Any]) -> str:
    """One line of :func:`report`'s answer.

    >>> describe({"measured_share": 0.8, "table": "h100_sxm vllm 0.24.0", "note": ""})[:52]
    "80% of the GEMM time measured (AIConfigurator's h100"
    """
    if not rep["table"]:
        return f"gpufabric's roofline for every GEMM: {rep['note']}"
    return (f"{rep['measured_share']:.0%} of the GEMM time measured (AIConfigurator's "
            f"{rep['table']} kernels), the rest gpufabric's roofline")
