"""An online run's figures come from its steady state: the same throughput at any request
count, a rate above capacity said to be one, and a request count that converges; an offline
run of no stated count runs enough full batches to be the deployment's sustained figure."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from gpufabric.topology.build import from_spec
from gpufabric.workloads.inference.serve import ServeConfig, serve

#: Llama 3 8B on one H100 at 1000 in / 200 out: about 25 requests/s at saturation
ONE_H100 = {"gpu": "H100-SXM", "gpus_per_node": 1}


def _run(rate: float, requests: int | None, measure: str = "steady") -> dict:
    return serve("llama3-8b", from_spec(ONE_H100),
                 ServeConfig(rate=rate, requests=requests, isl=1000, osl=200, measure=measure))


def test_a_stable_run_reports_the_same_throughput_at_any_request_count():
    """At 5 requests/s (a fifth of capacity) the deployment serves what is offered, 5 x 200
    output tokens/s, whether 500 or 8,000 requests are simulated; over the whole run (ramp
    and drain in) a short run reports less."""
    runs = [_run(5.0, n) for n in (500, 2000, 8000)]
    for r in runs:
        assert r["throughput_tokens_per_s"] == pytest.approx(1000.0, rel=0.03)
        assert r["steady"]["requests"] < r["requests"]       # warm-up and drain left out
        assert not r.get("overloaded")
    whole = _run(5.0, 500, measure="run")
    assert whole["measure"] == "run" and "steady" not in whole
    assert whole["throughput_tokens_per_s"] < 0.97 * runs[0]["throughput_tokens_per_s"]


def test_a_rate_above_capacity_says_so():
    """At 60 requests/s the queue grows without bound: the run says it is overloaded, with
    the capacity it serves, the same at any request count; its median TTFT grows with the
    run's length (the latencies are that run's)."""
    short, long = _run(60.0, 1000), _run(60.0, 8000)
    for r in (short, long):
        assert r["overloaded"] is True
        assert 10 < r["capacity_requests_per_s"] < 60
        assert r["requests_per_s"] == pytest.approx(r["capacity_requests_per_s"])
    assert long["throughput_tokens_per_s"] == pytest.approx(short["throughput_tokens_per_s"],
                                                            rel=0.03)
    assert long["ttft_ms"]["p50"] > 2 * short["ttft_ms"]["p50"]
    # below capacity the same deployment is not overloaded
    assert _run(0.5 * short["capacity_requests_per_s"], None)["overloaded"] is False


def test_an_offline_run_of_no_stated_count_is_the_deployments_sustained_throughput():
    """Offline (every request queued at once) with a batch of 64: no stated count runs 24
    full batches (1,536 requests), whose throughput a run four times as long matches within
    3%; 100 requests (under two batches) are mostly ramp-up and drain."""
    from gpufabric.workloads.inference.serve import OFFLINE_BATCHES

    def offline(requests: int | None) -> dict:
        return serve("llama3-8b", from_spec(ONE_H100),
                     ServeConfig(requests=requests, isl=1000, osl=200, max_num_seqs=64))
    auto, long, short = offline(None), offline(4 * OFFLINE_BATCHES * 64), offline(100)
    assert auto["workload"]["simulated_requests"] == OFFLINE_BATCHES * 64 == 1536
    assert auto["throughput_tokens_per_s"] == pytest.approx(long["throughput_tokens_per_s"],
                                                            rel=0.03)
    assert short["throughput_tokens_per_s"] < 0.9 * auto["throughput_tokens_per_s"]


def test_no_stated_count_doubles_until_the_figures_converge():
    r = _run(5.0, None)
    conv = r["convergence"]
    assert conv["converged"] and conv["requests"][:2] == [1000, 2000]
    assert all(b == 2 * a for a, b in zip(conv["requests"], conv["requests"][1:],
                                              strict=False))
    assert r["requests"] == conv["requests"][-1]


def test_closed_loop_steady_state_starts_after_each_users_first_request():
    r = serve("llama3-8b", from_spec(ONE_H100),
              ServeConfig(concurrency=16, requests=400, isl=1000, osl=200))
    st = r["steady"]
    assert st["requests"] <= 400 - 16 and st["start_s"] > 0
    assert "capacity_requests_per_s" not in r          # a closed loop cannot overload


ONE = "gpu=H100-SXM,gpus_per_node=1"


def test_cli_says_how_the_figures_were_taken(cli):
    code, out, _ = cli("serve", "llama3-8b", ONE, "--rate", "60", "--isl", "1000", "--osl", "200")
    assert code == 0
    assert "# overloaded: 60 requests/s is above the capacity of " in out
    code, out, _ = cli("serve", "llama3-8b", ONE, "--rate", "5", "--isl", "1000", "--osl", "200",
                       "--requests", "500", "--measure", "run", "--json")
    assert code == 0 and json.loads(out)["measure"] == "run"
    code, _, err = cli("serve", "llama3-8b", ONE, "--rate", "5", "--measure", "all")
    assert code == 2 and "--measure: got 'all'; allowed: steady, run" in err


def test_a_searchs_quick_capacity_is_eight_batches_of_what_the_kv_cache_holds():
    """Llama 3 8B on one L40S at 1,000 in / 4,000 out: the KV cache holds about 41 whole
    sequences, far fewer than max_num_seqs (256), so a search's verdict measures the
    capacity on eight such batches (328 requests) instead of eight of 256 (2,048): within
    10% of the full run (a search's bisection steps are an eighth of its bracket)."""
    from gpufabric.workloads.inference import serve as S
    cfg = ServeConfig(isl=1000, osl=4000, requests=100)
    sm = S.step_model("llama3-8b", from_spec({"gpu": "L40S", "gpus_per_node": 1}), cfg)
    sched = S.scheduler_config(sm, cfg)
    held = sched.num_blocks * sched.block_size // 5000
    assert S._quick_requests(cfg, sched) == 8 * held < 8 * sched.max_num_seqs
    quick = S.capacity(sm, cfg, 1, sched, quick=True)["requests_per_s"]
    full = S.capacity(sm, cfg, 1, sched)["requests_per_s"]
    assert quick == pytest.approx(full, rel=0.10)


def test_near_capacity_a_run_shows_the_same_arrivals_a_little_slower_and_faster(cli):
    """At nine tenths of its capacity a run is shown again at 2% less and 2% more load (its
    request count and seed: the same arrivals, spaced by the rate): the median TTFT and TPOT
    grow with the load. Half the capacity, or above it, shows nothing of the kind."""
    from gpufabric.workloads.inference.serve import LOAD_STEP, near_capacity
    cap = _run(60.0, 1000)["capacity_requests_per_s"]
    topo, cfg = from_spec(ONE_H100), ServeConfig(rate=0.9 * cap, requests=2000, isl=1000,
                                                 osl=200)
    r = serve("llama3-8b", topo, cfg)
    near = near_capacity("llama3-8b", topo, cfg, r)
    assert near is not None and near["load"] == pytest.approx(0.9, rel=0.02)
    lo, hi = near["lower"], near["higher"]
    assert lo["rate"] == pytest.approx(0.9 * cap * (1 - LOAD_STEP))
    assert hi["rate"] == pytest.approx(0.9 * cap * (1 + LOAD_STEP))
    for k in ("ttft_ms", "tpot_ms"):
        assert lo[k]["p50"] <= r[k]["p50"] <= hi[k]["p50"], k
    half = replace(cfg, rate=0.5 * cap)
    assert near_capacity("llama3-8b", topo, half, serve("llama3-8b", topo, half)) is None
    over = replace(cfg, rate=60.0)
    assert near_capacity("llama3-8b", topo, over, serve("llama3-8b", topo, over)) is None
    code, out, _ = cli("serve", "llama3-8b", ONE, "--rate", f"{0.9 * cap:.2f}", "--isl", "1000",
                       "--osl", "200", "--requests", "2000")
    assert code == 0 and "# near capacity, the same run at 2% less load (" in out
    code, out, _ = cli("serve", "llama3-8b", ONE, "--rate", f"{0.9 * cap:.2f}", "--isl", "1000",
                       "--osl", "200", "--requests", "2000", "--json")
    assert code == 0 and json.loads(out)["near_capacity"]["higher"]["rate"] > 0.9 * cap
