"""Plausibility of a training prediction: its MFU against the best published for its GPU
generation and model class (``workloads/data/published_mfu.yaml``, each row with its run and
source). A prediction above that ceiling is not refused (a new framework may beat it) but
carries a warning that says which assumptions of the model carry it.

Examples
--------
>>> ceiling("hopper", "dense")["mfu"], ceiling("blackwell", "dense") is None
(0.49, True)
"""

from __future__ import annotations

import functools
from typing import Any

from gpufabric.fileio import load_data


@functools.cache
def _rows() -> tuple[dict[str, Any], ...]:
    return tuple(load_data("gpufabric.workloads", "data", "published_mfu.yaml"))


def ceiling(arch: str, model_class: str) -> dict[str, Any] | None:
    """The best published MFU row of a generation and model class (None: no row)."""
    rows = [r for r in _rows() if r["arch"] == arch and r["model_class"] == model_class]
    return max(rows, key=lambda r: r["mfu"]) if rows else None


def mfu_warning(mfu: float, arch: str, model_class: str, breakdown: dict[str, float],
                step_time_s: float) -> str:
    """A warning when ``mfu`` is above the best published for ``arch`` and ``model_class``,
    with what the prediction rests on ("" otherwise).

    >>> mfu_warning(0.69, "hopper", "dense", {"compute": 5.39, "optimizer": 0.01}, 5.4)[:62]
    'predicted MFU 69% is above the best published for dense models'
    >>> mfu_warning(0.45, "hopper", "dense", {"compute": 5.0}, 5.0)
    ''
    """
    top = ceiling(arch, model_class)
    if top is None or mfu <= top["mfu"]:
        return ""
    exposed = sum(v for k, v in breakdown.items() if k not in ("compute", "optimizer"))
    why = ("every collective is hidden under computation (perfect overlap) and the GEMMs run "
           "at the generation's fitted efficiency" if exposed < 0.02 * step_time_s else
           f"{exposed / step_time_s:.0%} of the step is exposed communication or bubbles, the "
           "rest runs at the generation's fitted GEMM efficiency")
    return (f"predicted MFU {mfu:.0%} is above the best published for {model_class} models on "
            f"{arch} GPUs ({top['mfu']:.0%}, {top['run']}): {why}; real "
            "runs lose more to kernels outside the GEMMs, stragglers and imperfect overlap")
