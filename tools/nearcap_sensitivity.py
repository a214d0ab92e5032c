"""How sensitive the predicted latencies of online points near capacity are to the step cost.

For every online entry of a measurements file with a measured mean TPOT (MLPerf's Server
scenario: the rate its submitter chose, close to the deployment's capacity), this runs the
validator's own prediction with every iteration's cost scaled by a factor ``k`` (``k`` > 1: a
slower engine, a capacity ``1/k`` times the model's) and prints

- ``dlnTPOT/dlnk``: the relative change of the mean TPOT per relative change of the step cost
  at ``k = 1`` (with a step of ``a + b n`` seconds for ``n`` sequences, a steady batch of
  ``rate a / (1 - rate b)`` and ``rho = rate b``, it is ``1 / (1 - rho)``: near capacity a
  small error of the capacity is a large one of the latencies);
- ``k*``: the factor at which the predicted mean TPOT equals the measured one;
- ``k_off``: the factor at which the entry's Offline sibling (same id, ``-offline``) would
  match its measured throughput (its predicted over measured throughput: an Offline run's
  throughput scales as ``1/k``), and ``k*/k_off``: what the Server run asks for beyond the
  Offline run of the same system.

Usage::

    PYTHONPATH=src python tools/nearcap_sensitivity.py tests/data/calibration/mlperf_inference.yaml

It reads the model; it changes nothing.
"""

from __future__ import annotations

import math
import sys

from gpufabric.workloads.inference import serve as S
from gpufabric.workloads.inference import validate as V

_STEP_MODEL = S.step_model


class Scaled:
    """A step cost ``k`` times another's (the simulator's interface: call and decode_line)."""

    def __init__(self, sm, k: float):
        self._sm, self._k = sm, k

    def __getattr__(self, name):
        return getattr(self._sm, name)

    def __call__(self, *args):
        return self._sm(*args) * self._k

    def decode_line(self, d_n: int) -> tuple[float, float]:
        a, b = self._sm.decode_line(d_n)
        return a * self._k, b * self._k


def predict(entry: dict, k: float) -> dict:
    """The validator's prediction of ``entry`` with the step cost scaled by ``k``."""
    S.step_model = lambda *a, **kw: Scaled(_STEP_MODEL(*a, **kw), k)
    try:
        return V._run_point(entry, {})[0]
    finally:
        S.step_model = _STEP_MODEL


def k_star(entry: dict, measured: float, lo: float = 0.5, hi: float = 2.0) -> float:
    """The step-cost factor at which the predicted mean TPOT is the measured one (bisection
    on the log; ``lo`` or ``hi`` when it lies outside)."""
    for _ in range(14):
        mid = math.sqrt(lo * hi)
        if predict(entry, mid)["tpot_ms"]["mean"] < measured:
            lo = mid
        else:
            hi = mid
    return math.sqrt(lo * hi)


def main(path: str) -> None:
    entries = V.load_entries(path)
    offline = {str(e["id"]): e for e in entries if str(e["id"]).endswith("-offline")}
    print(f"{'id':72} {'TPOT':>6} {'pred':>6} {'dlnTPOT/dlnk':>12} {'k*':>6} {'k_off':>6} "
          f"{'k*/k_off':>8}")
    for e in entries:
        meas = (e.get("result") or {}).get("tpot_ms")
        if not meas or (e.get("workload") or {}).get("mode") != "online":
            continue
        t1 = predict(e, 1.0)["tpot_ms"]["mean"]
        sens = math.log(predict(e, 1.02)["tpot_ms"]["mean"] / t1) / math.log(1.02)
        ks = k_star(e, float(meas))
        sib = offline.get(str(e["id"]).removesuffix("-server") + "-offline")
        k_off = ratio = float("nan")
        if sib is not None:
            k_off = predict(sib, 1.0)["throughput_tokens_per_s"] / \
                float(sib["result"]["output_tokens_per_s"])
            ratio = ks / k_off
        print(f"{str(e['id'])[:72]:72} {meas:6.1f} {t1:6.1f} {sens:12.1f} {ks:6.3f} "
              f"{k_off:6.3f} {ratio:8.3f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/calibration/mlperf_inference.yaml")
