"""The serving simulator core: request sources, paged KV cache, continuous batching, metrics."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufabric.errors import InputError
from gpufabric.workloads.inference.requests import (bursty, closed_loop, load_trace, offline,
                                                    poisson)
from gpufabric.workloads.inference.simulator import (LinearCost, SchedulerConfig, simulate,
                                                     summarize)

COST = LinearCost(base_s=0.004, per_token_s=2e-5, per_ctx_token_s=2e-8)


def test_poisson_and_bursty_sources():
    p = poisson(2.0, 5000, isl=100, osl=20, seed=3)
    assert len(p) == 5000 and p.arrival[0] == 0.0
    assert np.all(np.diff(p.arrival) >= 0)
    assert abs(len(p) / p.arrival[-1] - 2.0) < 0.1
    b = bursty(2.0, 5000, isl=100, osl=20, cv=4.0, seed=3)
    gaps = np.diff(b.arrival)
    assert abs(gaps.std() / gaps.mean() - 4.0) < 0.6


def test_one_request_alone():
    # one request of 512 + 4 tokens: one prefill iteration, then 3 decode steps
    res = simulate(offline(1, isl=512, osl=4), COST, SchedulerConfig(num_blocks=100))
    prefill = 0.004 + 512 * 2e-5 + 512 * 2e-8
    assert res.first_token[0] == pytest.approx(prefill)
    decode = [0.004 + 2e-5 + (513 + k) * 2e-8 for k in range(3)]
    assert res.finish[0] == pytest.approx(prefill + sum(decode))
    assert res.iterations == 4
    s = summarize(res)
    assert s["ttft_ms"]["p50"] == pytest.approx(prefill * 1e3)
    assert s["tpot_ms"]["p50"] == pytest.approx(sum(decode) / 3 * 1e3)


def test_chunked_prefill_splits_a_long_prompt():
    cfg = SchedulerConfig(num_blocks=1000, max_batched_tokens=2048)
    res = simulate(offline(1, isl=5000, osl=2), COST, cfg)
    assert res.iter_prefill.tolist() == [2048, 2048, 904, 0]


def test_batch_limit_and_fcfs():
    cfg = SchedulerConfig(num_blocks=10_000, max_num_seqs=4)
    res = simulate(offline(8, isl=64, osl=10), COST, cfg)
    # the first four share the first iteration, the next four wait for them to finish
    assert np.all(res.first_token[:4] == res.first_token[0])
    assert np.all(res.first_token[4:] > res.finish[:4].max())


def test_kv_pressure_preempts_and_recomputes():
    # 8 requests of 100 + 200 tokens need 8 x 19 blocks at the end; the cache has 100
    cfg = SchedulerConfig(num_blocks=100, block_size=16)
    res = simulate(offline(8, isl=100, osl=200), COST, cfg)
    assert res.preemptions.sum() > 0
    assert res.kv_used_blocks.max() <= 100
    assert np.isfinite(res.finish).all()
    swap = simulate(offline(8, isl=100, osl=200), COST,
                    SchedulerConfig(num_blocks=100, preemption="swap", swap_s_per_token=1e-6))
    assert swap.preemptions.sum() > 0 and np.isfinite(swap.finish).all()


def test_closed_loop_keeps_concurrency():
    res = simulate(closed_loop(4, 40, isl=128, osl=16), COST, SchedulerConfig(num_blocks=1000))
    # a request arrives exactly when an earlier one finishes
    assert np.all(np.isin(res.arrival[4:], res.finish))
    assert res.iter_decode.max() <= 4


def test_request_too_long_for_the_cache():
    with pytest.raises(InputError, match="needs 63 KV blocks of 16 tokens; the cache holds 50"):
        simulate(offline(1, isl=900, osl=100), COST, SchedulerConfig(num_blocks=50))


def test_trace_csv_and_jsonl(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,input_len,output_len\n0.5,100,10\n0.0,200,20\n")
    r = load_trace(str(f))
    assert r.arrival.tolist() == [0.0, 0.5] and r.isl.tolist() == [200, 100]
    j = tmp_path / "t.jsonl"
    j.write_text('{"timestamp": 10, "isl": 5, "osl": 6}\n{"timestamp": 12, "isl": 7, "osl": 8}\n')
    assert load_trace(str(j)).arrival.tolist() == [0.0, 2.0]
    az = tmp_path / "azure.csv"
    az.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                  "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:50.1805900,396,109\n")
    assert load_trace(str(az)).arrival.tolist() == pytest.approx([0.0, 3.5])


@pytest.mark.parametrize("text,msg", [
    ("arrival_s,input_len,output_len\n0.5,100,10\n1.0,abc,3\n",
     "t.csv: row 3.input_len: got 'abc'; expected a whole number of tokens from 1 to 100,000,000"),
    ("arrival_s,input_len,output_len\n0.5,100,0\n",
     "t.csv: row 2.output_len: got '0'; expected a whole number of tokens from 1 to 100,000,000"),
    ("when,input_len,output_len\n0.5,100,3\n",
     "t.csv: row 2: no column for arrival_s; allowed names: arrival_s"),
    ("arrival_s,input_len,output_len\nyesterday,100,3\n",
     "t.csv: row 2.arrival_s: got 'yesterday'; expected seconds or an ISO date-time"),
    ("arrival_s,input_len,output_len\n0.5,100\n", "t.csv: row 2.output_len: missing value"),
])
def test_bad_trace_is_one_line(tmp_path, text, msg):
    f = tmp_path / "t.csv"
    f.write_text(text)
    with pytest.raises(InputError) as exc:
        load_trace(str(f))
    assert str(exc.value).endswith(msg) or msg in str(exc.value)
    assert "\n" not in str(exc.value)


# -- properties ------------------------------------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 60), rate=st.floats(0.5, 200), isl=st.integers(1, 600),
       osl=st.integers(1, 80), blocks=st.integers(45, 400), seqs=st.integers(1, 32),
       budget=st.integers(16, 2048), swap=st.booleans(), reserve=st.booleans(),
       seed=st.integers(0, 9))
def test_no_request_lost_and_kv_never_overcommitted(n, rate, isl, osl, blocks, seqs, budget,
                                                     swap, reserve, seed):
    reqs = poisson(rate, n, isl=isl, osl=osl, seed=seed)
    cfg = SchedulerConfig(num_blocks=blocks, max_num_seqs=seqs, max_batched_tokens=budget,
                          preemption="swap" if swap else "recompute", swap_s_per_token=1e-6,
                          reserve_full=reserve)
    res = simulate(reqs, COST, cfg)
    if reserve:     # whole requests reserved up front: nothing is ever preempted
        assert res.preemptions.sum() == 0
    # every request finished once, after its first token, which came after its arrival
    assert np.isfinite(res.finish).all() and np.isfinite(res.first_token).all()
    assert np.all(res.first_token >= res.arrival) and np.all(res.finish >= res.first_token)
    assert 0 <= res.kv_used_blocks.min() and res.kv_used_blocks.max() <= blocks
    assert res.kv_used_blocks[-1] == 0          # every block came back
    # each request generated exactly its output tokens: by decode steps, or by the prefill
    # (first token, and again after a recomputation)
    assert np.array_equal(res.generated, res.osl)
    assert res.iter_decode.sum() + res.stats["prefill_completions"] == res.osl.sum()
    assert res.iter_decode.max() <= seqs


def test_latency_never_improves_when_the_rate_rises():
    # up to just past the knee (~20 requests/s here, where the KV cache fills); far beyond it,
    # TPOT is set by the preemption pattern of a thrashing cache, not by the rate
    base = poisson(1.0, 400, isl=1000, osl=100, seed=7)
    cfg = SchedulerConfig(num_blocks=2000, max_num_seqs=64)
    prev = None
    for rate in (2, 5, 10, 15, 20, 25):
        reqs = type(base)(base.arrival / rate, base.isl, base.osl)
        s = summarize(simulate(reqs, COST, cfg))
        cur = [s[m][q] for m in ("ttft_ms", "tpot_ms") for q in ("p50", "p90", "p99")]
        if prev is not None:
            assert all(c >= p - 1e-9 for c, p in zip(cur, prev, strict=True)), (rate, cur, prev)
        prev = cur


def test_summary_goodput_and_kv_series():
    res = simulate(poisson(5.0, 300, isl=256, osl=32, seed=2), COST,
                   SchedulerConfig(num_blocks=3000))
    s = summarize(res, gpus=2, slo_ttft_ms=20.0, slo_tpot_ms=6.0)
    assert s["throughput_tokens_per_s_per_gpu"] == pytest.approx(
        s["throughput_tokens_per_s"] / 2)
    assert 0 < s["goodput_requests_per_s"] <= s["requests_per_s"]
    assert s["slo_attainment"] == pytest.approx(s["goodput_requests_per_s"] / s["requests_per_s"])
    assert len(s["kv_cache"]["t_s"]) == len(s["kv_cache"]["use"]) <= 200
    assert 0 < s["kv_cache"]["peak_use"] <= 1


def test_multi_step_rounds_delay_arrivals_and_stream_in_chunks():
    """vLLM 0.6's multi-step scheduling (--num-scheduler-steps): an arrival waits for the
    decode round it falls in to end, and a round's tokens stream out together, so the
    streamed gap is the round (the vllm-0.6.0 ShareGPT entries: ITL ~ 10 x TPOT)."""
    cost = LinearCost(base_s=0.010, per_token_s=1e-5)
    reqs = poisson(2.0, 300, isl=256, osl=200, seed=4)
    one = summarize(simulate(reqs, cost, SchedulerConfig(num_blocks=20000)))
    ten = summarize(simulate(reqs, cost, SchedulerConfig(num_blocks=20000,
                                                         scheduler_steps=10)))
    assert one["requests"] == ten["requests"] == 300
    # a 10-step round of ~10 ms steps: an arrival waits half a round on average (~50 ms)
    assert ten["ttft_ms"]["mean"] - one["ttft_ms"]["mean"] > 25.0
    # the tokens per request and the time per token are the engine's either way
    assert abs(ten["tpot_ms"]["p50"] - one["tpot_ms"]["p50"]) < 0.2 * one["tpot_ms"]["p50"]
    # streamed gaps: a round, ten steps
    assert 9.0 < ten["itl_ms"]["p50"] / one["itl_ms"]["p50"] < 11.0


def test_closed_loop_steady_state_obeys_littles_law():
    """A closed loop without think time holds ``c`` requests in the system, so in its steady
    state the mean latency is ``c / throughput`` (Little's law). The users' first requests start
    at random phases over the loaded cycle and are left out as warm-up; the bound allows the
    drain at the end of a finite run (the last round has fewer users in flight)."""
    from gpufabric.topology.build import from_spec
    from gpufabric.workloads.inference.serve import ServeConfig, serve
    topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 1})
    for c in (4, 32):
        r = serve("llama3-8b", topo, ServeConfig(concurrency=c, requests=20 * c, isl=2000,
                                                 osl=100, replicas=1))
        little_ms = c / r["requests_per_s"] * 1e3
        assert abs(r["e2e_ms"]["mean"] / little_ms - 1) < 0.1, (c, r["e2e_ms"], little_ms)
    # users who meet queue for the prefill: 32 users wait longer than 4
    assert r["ttft_ms"]["mean"] > 1.5 * serve(
        "llama3-8b", topo, ServeConfig(concurrency=4, requests=80, isl=2000, osl=100,
                                       replicas=1))["ttft_ms"]["mean"]
