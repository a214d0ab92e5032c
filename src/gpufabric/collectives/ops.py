"""The collective operations and nccl-tests' bus-bandwidth factor of each (a module below the
algorithms and the package, which both use them)."""

from __future__ import annotations

from gpufabric.errors import InputError

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
       "send_recv")


def busbw_factor(op: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor for ``op`` on ``n`` ranks.

    >>> busbw_factor("all_gather", 4), busbw_factor("broadcast", 4)
    (0.75, 1.0)
    """
    if op == "all_reduce":
        return 2 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "reduce", "send_recv"):
        return 1.0
    raise InputError(f"unknown operation '{op}'; allowed: {', '.join(OPS)}", field="op")
