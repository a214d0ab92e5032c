"""The serving simulator's batch-state phases, each on its own, and its outputs against the
record taken before the simulator became a class (tests/sim_golden.py)."""

from __future__ import annotations

import numpy as np
import pytest

from gpufabric.workloads.inference import requests as R
from gpufabric.workloads.inference.simulator import (BatchState, LinearCost, SchedulerConfig,
                                                     _median, _sorted_unique, _steps_before,
                                                     percentiles, simulate)
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


def _state(reqs, **kw):
    return BatchState(reqs, COST, SchedulerConfig(**{"num_blocks": 1000, **kw}))


def test_arrive_queues_what_has_arrived():
    st = _state(R.Requests(np.array([0.0, 0.5, 2.0]), np.full(3, 64), np.full(3, 8)))
    st.t = 1.0
    st.arrive()
    assert list(st.waiting) == [0, 1] and st.nxt == 2


def test_admit_takes_the_budget_first_come_first_served():
    st = _state(R.offline(3, isl=300, osl=4), max_batched_tokens=500)
    st.arrive()
    it = st.reserve_decode()
    st.admit(it)
    # 300 tokens of the first prompt, a 200-token chunk of the second; the third waits
    assert it.chunks == [(0, 0, 300), (1, 0, 200)] and list(st.waiting) == [2]
    assert st.free == 1000 - 300 // 16 - 1 - 200 // 16 - 1


def test_prefill_then_decode_stretch_then_retire():
    st = _state(R.offline(2, isl=32, osl=10))
    st.arrive()
    it = st.reserve_decode()
    st.admit(it)
    assert st.step_time(it) == pytest.approx(0.01 + 64 * 1e-4 + 64 * 1e-7)
    st.prefill(it)
    assert st.r_gen.tolist() == [1, 1] and not np.isnan(st.first).any()
    st.retire()
    it = st.reserve_decode()
    assert it.all_dec and it.d_n == 2 and it.d_ctx == 2 * 33
    t0 = st.t
    st.decode(it)                        # nine steps: both requests finish, and retire
    # nine steps of a + b * ctx, the context growing by 2 tokens a step
    a, b = COST.decode_line(2)
    assert st.t - t0 == pytest.approx(sum(a + b * (66 + 2 * j) for j in range(9)))
    assert st.done == 2 and st.free == 1000 and st.r_id.size == 0


def test_decode_runs_through_completions_until_an_arrival():
    # three requests finishing at different times, the next arrival far later: one pass
    st = _state(R.Requests(np.array([0.0, 0.0, 0.0, 50.0]), np.full(4, 16),
                           np.array([5, 9, 30, 4])))
    st.step()       # prefill of all three, then decode: 4, 8 and 29 steps, retiring each
    assert st.done == 3 and st.passes == 1 and st.r_id.size == 0


def test_decode_stops_at_the_next_arrival():
    st = _state(R.Requests(np.array([0.0, 0.3]), np.array([16, 16]), np.array([200, 5])))
    st.step()                            # prefill of the first request, decode until the
    #                                      second arrives
    dt = COST.decode_line(1)[0] + 1e-7 * 17
    assert st.t >= 0.3 - dt and st.t < 0.3 + dt
    assert st.r_gen.tolist()[0] < 200


def test_preempt_recompute_and_swap():
    st = _state(R.offline(2, isl=40, osl=50))
    st.arrive()
    it = st.reserve_decode()
    st.admit(it)
    st.prefill(it)
    assert st.preempt(recompute=True) == 0.0
    assert list(st.waiting) == [1] and st.g_pt[1] == 40 + 1 and st.npre[1] == 1
    st2 = BatchState(R.offline(2, isl=40, osl=50), COST,
                     SchedulerConfig(num_blocks=1000, preemption="swap", swap_s_per_token=1e-6))
    st2.arrive()
    it = st2.reserve_decode()
    st2.admit(it)
    st2.prefill(it)
    assert st2.preempt(recompute=False) == pytest.approx(40 * 1e-6)
    assert st2.swapped[1] and st2.g_kv[1] == 40


def test_steps_before_matches_a_running_sum():
    first, slope = 0.01, 3e-5
    cum = np.cumsum(first + slope * np.arange(500))
    for x in (0.0, 0.005, 0.01, 0.37, 1.0, 4.0, 100.0):
        assert _steps_before(first, slope, 499, x) == int((cum[:-1] < x).sum())


def test_most_steps_is_the_largest_stretch_the_kv_cache_holds():
    # the closed form against its definition: the largest j whose blocks (every running
    # request's ceil((kv + j) / B)) fit in the blocks held plus the free ones
    rng = np.random.default_rng(0)
    st = _state(R.poisson(1.0, 4, 10, 10, seed=0))
    for _ in range(300):
        n, B = int(rng.integers(1, 20)), int(rng.choice([1, 16, 32]))
        kv = rng.integers(0, 2000, n)
        st._run = np.zeros((6, n), np.int64)
        st._run[1], st._run[5] = kv, (kv + B - 1) // B + rng.integers(0, 2, n)
        st._nrun, st.B, st.free = n, B, int(rng.integers(0, 100))
        st._views()
        room = int(st.r_bl.sum()) + st.free
        j = st._most_steps()
        blocks = [int(((kv + x + B - 1) // B).sum()) for x in (j, j + 1)]
        assert blocks[0] <= room < blocks[1]


def test_percentiles_and_median_are_numpys_to_the_bit():
    # written out so that a prediction does not import numpy.ma; the same arithmetic
    rng = np.random.default_rng(1)
    for n in [1, 2, 3, 10, 101, 1000]:
        for x in (rng.exponential(size=n) * 37.0, rng.integers(0, 9, n).astype(float)):
            p = percentiles(np.append(x, [np.nan, np.inf]))
            assert [p["p50"], p["p90"], p["p99"]] == np.percentile(x, [50, 90, 99]).tolist()
            assert _median(x) == float(np.median(x))
            s = np.sort(x.astype(np.int64))
            assert _sorted_unique(s).tolist() == np.unique(s).tolist()


def test_pure_generation_and_front_end():
    # no prompt: the start token is prefilled; the front end adds to TTFT, not to the steps
    r = R.closed_loop(2, 6, isl=0, osl=8)
    res = simulate(r, COST, SchedulerConfig(num_blocks=100), front_end_s=0.05)
    assert res.isl.tolist() == [0] * 6 and np.isfinite(res.finish).all()
    ttft = res.first_token - res.arrival
    assert ttft.min() >= 0.05


def test_serve_closed_loop_counts_the_front_end_and_ramps_the_users():
    from gpufabric.topology.build import from_spec
    from gpufabric.workloads.inference.itertime import ENGINE_REQUEST_S
    from gpufabric.workloads.inference.serve import ServeConfig, serve
    topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 1})
    r = serve("llama3-8b", topo, ServeConfig(concurrency=8, requests=48, isl=256, osl=32,
                                             engine="vllm"))
    fe_ms = ENGINE_REQUEST_S["vllm"].value * 1e3
    # every request passes the front end, the first ones too
    assert r["ttft_ms"]["p50"] > fe_ms
    # users spread over one request's time: no burst of 8 prefills sharing the first iteration
    assert r["ttft_ms"]["p99"] < 2 * r["ttft_ms"]["p50"]


def test_validate_runs_a_pure_generation_static_batch(tmp_path):
    from gpufabric.workloads.inference.validate import validate
    f = tmp_path / "tg.yaml"
    f.write_text("- id: tg\n  source: test\n  system: {gpu: H100-SXM, gpus: 1}\n"
                 "  engine: {name: llama.cpp}\n  model: {name: Llama 3 8B, precision: bf16}\n"
                 "  workload: {mode: static-batch, isl: 0, osl: 128}\n"
                 "  points:\n    - {batch_size: 4, output_tokens_per_s: 400}\n")
    out = validate(str(f))
    assert not out["skipped"] and len(out["points"]) == 1
    assert out["points"][0]["predicted"] > 0
