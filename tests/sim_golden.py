"""Simulator cases whose outputs are recorded in tests/data/simulator/golden.npz.

Run ``python tests/sim_golden.py`` to record them again (only when a change to the simulator's
outputs is intended); tests/test_inference_sim_state.py compares against the record.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gpufabric.topology.build import from_spec
from gpufabric.workloads.inference import requests as R
from gpufabric.workloads.inference.itertime import ServeLayout, StepModel
from gpufabric.workloads.inference.simulator import LinearCost, SchedulerConfig, SimResult, simulate

GOLDEN = Path(__file__).parent / "data" / "simulator" / "golden.npz"
FIELDS = ("arrival", "first_token", "finish", "preemptions", "generated", "iter_time_s",
          "iter_decode", "iter_prefill", "kv_t", "kv_used_blocks")


def _lengths(n: int, seed: int, isl: int, osl: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.integers(max(1, isl // 4), isl * 2, n), rng.integers(2, osl * 2, n))


def _trace(n: int) -> R.Requests:
    rng = np.random.default_rng(7)
    arr = np.sort(rng.uniform(0.0, n / 6.0, n))
    isl, osl = _lengths(n, 8, 700, 150)
    return R.Requests(arr, isl, osl, source="trace")


def cases() -> dict[str, tuple]:
    """name -> (requests, cost, scheduler config, prefilled)."""
    lin = LinearCost(base_s=0.004, per_token_s=2e-5, per_ctx_token_s=2e-8)
    sm = StepModel("llama3-8b", from_spec({"gpu": "H100-SXM", "gpus_per_node": 1}),
                   ServeLayout())
    isl, osl = _lengths(300, 1, 600, 120)
    big = SchedulerConfig(num_blocks=20000, block_size=16)
    tight = SchedulerConfig(num_blocks=700, block_size=16, max_num_seqs=64)
    tight_swap = SchedulerConfig(num_blocks=700, block_size=16, max_num_seqs=64,
                                 preemption="swap", swap_s_per_token=1e-6)
    nochunk = SchedulerConfig(num_blocks=3000, block_size=16, chunked_prefill=False,
                              max_batched_tokens=4096)
    reserve = SchedulerConfig(num_blocks=1500, block_size=16, reserve_full=True)
    small_budget = SchedulerConfig(num_blocks=5000, block_size=16, max_batched_tokens=512)
    return {
        "poisson_linear": (R.poisson(8.0, 300, isl, osl, seed=1), lin, big, False),
        "poisson_stepmodel": (R.poisson(20.0, 300, isl, osl, seed=2), sm,
                              SchedulerConfig(num_blocks=sm.kv_blocks), False),
        "light_stepmodel": (R.poisson(0.5, 60, 512, 256, seed=3), sm,
                            SchedulerConfig(num_blocks=sm.kv_blocks), False),
        "bursty": (R.bursty(10.0, 300, isl, osl, cv=4.0, seed=4), lin, big, False),
        "offline": (R.offline(300, isl, osl), lin, big, False),
        "recompute": (R.offline(200, isl[:200], osl[:200]), lin, tight, False),
        "swap": (R.offline(200, isl[:200], osl[:200]), lin, tight_swap, False),
        "recompute_poisson": (R.poisson(30.0, 200, isl[:200], osl[:200], seed=5), lin, tight,
                              False),
        "chunked_small_budget": (R.poisson(12.0, 200, isl[:200] * 3, osl[:200], seed=6), lin,
                                 small_budget, False),
        "no_chunking": (R.poisson(12.0, 200, isl[:200], osl[:200], seed=6), lin, nochunk, False),
        "reserve_full": (R.offline(200, isl[:200], osl[:200]), lin, reserve, False),
        "trace": (_trace(300), lin, big, False),
        "closed_loop": (R.closed_loop(16, 200, 512, 128), lin, big, False),
        "prefilled": (R.poisson(15.0, 200, isl[:200], osl[:200], seed=9), lin, tight, True),
    }


def arrays(res: SimResult) -> dict[str, np.ndarray]:
    return {f: np.asarray(getattr(res, f)) for f in FIELDS}


def record() -> None:
    out: dict[str, np.ndarray] = {}
    for name, (reqs, cost, cfg, pre) in cases().items():
        for f, a in arrays(simulate(reqs, cost, cfg, prefilled=pre)).items():
            out[f"{name}/{f}"] = a
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(GOLDEN, **out)


if __name__ == "__main__":
    record()
