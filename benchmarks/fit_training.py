"""Fit the training model's few physical parameters on the entries their records name in
``fitted_on`` (gpufabric params --layer workloads), by coordinate descent on the median
absolute error.

    .venv/bin/python benchmarks/fit_training.py [path/to/training.yaml] [param,param,...]

Prints each parameter's fitted value, then the error on the fitted entries and, separately, on
all the others. Copy the values into workloads/compute.py and workloads/training.py. The
optional second argument fits only the named parameters (gemm_ampere, gemm_hopper, overhead,
fp8, khalf) and keeps the others at their current values; issue 7's second pass refit
``overhead`` alone (the GEMM ceilings and khalf are shared with the inference model).
"""

from __future__ import annotations

import sys
from dataclasses import replace

from gpufabric.params import fitted_ids
from gpufabric.workloads import compute as K
from gpufabric.workloads import training as T
from gpufabric.workloads import validate as V

PATH = sys.argv[1] if len(sys.argv) > 1 else "tests/data/calibration/training.yaml"
ONLY = sys.argv[2].split(",") if len(sys.argv) > 2 else None
cache: dict = {}
#: the entries the step and compute records name in their fitted_on (ids and prefix-* patterns)
FITTED = tuple(sorted(i.rstrip("*") for i in fitted_ids("workloads")))


def setp(name: str, val: float) -> None:
    if name.startswith("gemm_"):
        g = name[5:]
        K.GEMM_EFF[g] = replace(K.GEMM_EFF[g], value=val)
    elif name == "fp8":
        K.FP8_EFF = replace(K.FP8_EFF, value=val)
    elif name == "khalf":
        K.K_HALF_PER_BALANCE = replace(K.K_HALF_PER_BALANCE, value=val)
    elif name == "overhead":
        T.LAYER_OVERHEAD_US = replace(T.LAYER_OVERHEAD_US, value=val)


def loss(params: dict[str, float]) -> float:
    for k, v in params.items():
        setp(k, v)
    r = V.validate(PATH, only=FITTED, topo_cache=cache)
    return r.summary["all"]["median_abs_pct"] + 0.2 * (
        sum(abs(p["error_pct"]) for p in r.points) / len(r.points))


params = {"gemm_ampere": K.GEMM_EFF["ampere"].value, "gemm_hopper": K.GEMM_EFF["hopper"].value,
          "overhead": T.LAYER_OVERHEAD_US.value, "fp8": K.FP8_EFF.value,
          "khalf": K.K_HALF_PER_BALANCE.value}
grid = {"gemm_ampere": [x / 100 for x in range(50, 91, 2)],
        "gemm_hopper": [x / 100 for x in range(50, 91, 2)],
        "overhead": [0, 10, 20, 40, 60, 80, 120, 160, 200, 300],
        "fp8": [x / 100 for x in range(50, 101, 5)],
        "khalf": [0.3, 0.5, 0.63, 0.8, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0]}
if ONLY:
    grid = {k: v for k, v in grid.items() if k in ONLY}
best = loss(params)
for _ in range(3):
    for k, vals in grid.items():
        for v in vals:
            trial = dict(params, **{k: v})
            val = loss(trial)
            if val < best - 1e-9:
                best, params = val, trial
    print("pass", params, round(best, 2))
for k, v in params.items():
    setp(k, v)
full = V.validate(PATH, topo_cache=cache)
print("fitted:", params)
print("summary:", full.summary)
