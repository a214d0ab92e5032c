"""The serving simulator's batch-state phases, each on its own, and its outputs against the
record taken before the simulator became a class (tests/sim_golden.py)."""

from __future__ import annotations

import numpy as np
import pytest

from gpufabric.workloads.inference import requests as R
from gpufabric.workloads.inference.simulator import (BatchState, LinearCost, SchedulerConfig,
                                                     _steps_before, simulate)
from sim_golden import FIELDS, GOLDEN, arrays, cases

COST = LinearCost(base_s=0.01, per_token_s=1e-4, per_ctx_token_s=1e-7)


@pytest.fixture(scope="module")
def golden():
    return np.load(GOLDEN)


@pytest.mark.parametrize("name", list(cases()))
def test_outputs_match_the_record(name, golden):
    reqs, cost, cfg, pre = cases()[name]
    got = arrays(simulate(reqs, cost, cfg, prefilled=pre))
    for f in FIELDS:
        want = golden[f"{name}/{f}"]
        assert got[f].shape == want.shape, (name, f)
        if want.dtype.kind == "f":
            # closed-form sums of a decode stretch differ from step-by-step ones by rounding
            np.testing.assert_allclose(got[f], want, rtol=1e-9, atol=1e-9, err_msg=f"{name}/{f}")
        else:
            np.testing.assert_array_equal(got[f], want, err_msg=f"{name}/{f}")
