"""Benchmark clients: the load as each applies it (a rate capped by a semaphore, static
batches round after round, MLPerf's minimum duration) and the way each takes its figures."""

from __future__ import annotations

import numpy as np
import pytest

from gpufabric.errors import InputError
from gpufabric.topology.build import from_spec
from gpufabric.workloads.inference import clients
from gpufabric.workloads.inference import requests as R
from gpufabric.workloads.inference.serve import (ServeConfig, scheduler_config, serve,
                                                 step_model)
from gpufabric.workloads.inference.simulator import simulate

ONE_H100 = {"gpu": "H100-SXM", "gpus_per_node": 1}


def _sim(reqs: R.Requests):
    cfg = ServeConfig(isl=512, osl=128)
    sm = step_model("llama3-8b", from_spec(ONE_H100), cfg)
    return simulate(reqs, sm, scheduler_config(sm, cfg))


def _in_flight_at_most(res, cap: int) -> int:
    """The most requests in flight at once (sent, not finished)."""
    events = sorted([(float(t), 1) for t in res.arrival] + [(float(t), -1) for t in res.finish],
                    key=lambda e: (e[0], e[1]))
    now = most = 0
    for _, d in events:
        now += d
        most = max(most, now)
    return most


def test_every_client_has_a_source_and_names_resolve_by_alias():
    rows = clients.table()
    assert {r["name"] for r in rows} >= {"vllm-bench-serve", "sglang-bench-serving",
                                         "mlperf-server", "mlperf-offline", "static-batch",
                                         "genai-perf", "trtllm-bench"}
    assert all(len(r["source"]) > 40 for r in rows)
    assert clients.get("vllm bench serve").name == "vllm-bench-serve"
    assert clients.get("LoadGen_Server").name == "mlperf-server"
    with pytest.raises(InputError, match="unknown client 'locust'; allowed: vllm-bench-serve"):
        clients.get("locust")


def test_a_rate_with_a_concurrency_cap_waits_for_a_slot_and_never_catches_up():
    """vLLM's --max-concurrency: Poisson sends at 40/s, at most 4 in flight; a request goes
    at its time or when a slot frees, whichever is later."""
    reqs = R.poisson(40.0, 200, isl=512, osl=128, seed=1)
    scheduled = reqs.arrival.copy()
    reqs.concurrency, reqs.release = 4, "paced"
    res = _sim(reqs)
    assert _in_flight_at_most(res, 4) == 4
    assert np.all(res.arrival >= scheduled - 1e-12)
    assert np.all(np.diff(res.arrival) >= 0)
    # most requests waited: 4 slots of ~1.3 s requests serve ~3/s, far below 40/s
    assert np.mean(res.arrival > scheduled + 1e-9) > 0.9


def test_a_static_batch_sends_each_round_when_the_last_one_has_finished():
    """Every user sends at once each round: the next round's requests all go at the moment
    the slowest request of the previous round finished."""
    osl = np.array([32, 64, 128, 96] * 3)
    reqs = R.closed_loop(4, 12, isl=256, osl=osl)
    reqs.release = "round"
    res = _sim(reqs)
    for k in range(3):
        sent = res.arrival[4 * k: 4 * k + 4]
        assert np.ptp(sent) == 0.0
        if k:
            assert sent[0] == pytest.approx(res.finish[4 * (k - 1): 4 * k].max())


def test_mlperf_server_runs_its_minimum_duration_and_takes_every_request():
    # LoadGen (loadgen/results.cc) takes its means and percentiles over every sample of the
    # run, from an empty system: no warm-up is left out
    r = serve("llama3-8b", from_spec(ONE_H100),
              ServeConfig(rate=2.0, requests=None, isl=512, osl=128, client="mlperf-server"))
    assert r["requests"] == 1200                      # 600 s at 2 requests/s
    assert r["measure"] == "run" and r["workload"]["client"] == "mlperf-server"
    assert "steady" not in r and "overloaded" not in r     # a stable run: no queue builds
    static = serve("llama3-8b", from_spec(ONE_H100),
                   ServeConfig(concurrency=8, requests=16, isl=512, osl=128,
                               client="static-batch"))
    assert static["measure"] == "run"
    assert "static batches of 8" in static["workload"]["source"]


def test_the_cli_takes_a_client_and_refuses_a_load_it_cannot_apply(cli):
    code, out, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--isl", "256",
                         "--osl", "32", "--rate", "20", "--concurrency", "4", "--requests", "80",
                         "--client", "vllm-bench-serve")
    assert code == 0, err
    assert "Poisson at 20 requests/s, at most 4 in flight (client vllm-bench-serve)" in out
    assert "figures over the whole run, as a benchmark client takes them (client " \
        "vllm-bench-serve)" in out
    code, out, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--rate", "5",
                         "--client", "static-batch")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "gpufabric: error: --client: the static-batch client runs a fixed number of users: "
        "give --concurrency"]


def test_a_measurements_entry_names_its_client(tmp_path):
    from gpufabric.workloads.inference.validate import validate
    entry = tmp_path / "m.yaml"
    entry.write_text(
        "- id: static-gptj\n"
        "  source: test\n"
        "  system: {gpu: H100-SXM, gpus: 1}\n"
        "  engine: {name: TensorRT-LLM, version: '0.5.0', backend: tensorrt}\n"
        "  model: {name: GPT-J 6B, arch: dense, params: 6000000000, precision: fp8}\n"
        "  parallelism: {tp: 1}\n"
        "  workload: {mode: static-batch, client: locust}\n"
        "  points:\n"
        "    - {batch_size: 8, isl: 128, osl: 128, ttft_ms: 20}\n")
    r = validate(str(entry))                # a point the model refuses is listed with why
    assert r["points"] == []
    assert r["skipped"][0]["reason"].startswith(
        "refused: workload.client: unknown client 'locust'; allowed: vllm-bench-serve")
    entry.write_text(entry.read_text().replace("locust", "static-batch"))
    r = validate(str(entry))
    assert [p["metric"] for p in r["points"]] == ["ttft_ms"] and not r["skipped"]


def test_clients_lists_each_client_within_120_columns(cli):
    code, out, _ = cli("clients")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:5] == ["#", "client", "arrivals", "figures", "min"]
    assert any(line.split()[:4] == ["mlperf-server", "open", "run", "600"] for line in lines)
    assert max(map(len, lines)) <= 120


def test_a_run_taken_whole_says_when_its_rate_is_overloaded():
    """A client that takes its figures over the whole run keeps them (the latencies of a
    queue that grows for its 600 s), and still says the rate is above the capacity."""
    cfg = ServeConfig(rate=2.0, requests=None, isl=512, osl=128, client="mlperf-server")
    stable = serve("llama3-8b", from_spec(ONE_H100), cfg)
    over = serve("llama3-8b", from_spec(ONE_H100), ServeConfig(
        rate=400.0, requests=4000, isl=512, osl=128, client="mlperf-server"))
    assert over["overloaded"] is True
    assert over["capacity_requests_per_s"] < 400.0
    assert over["requests_per_s"] < over["capacity_requests_per_s"] * 1.1
    assert over["ttft_ms"]["p99"] > 10 * stable["ttft_ms"]["p99"]


def test_a_stated_duration_runs_its_arrivals_on_each_instance():
    """The most requests a duration asks for count per simulated instance: eight replicas
    of one engine each run as many as one engine alone would."""
    cap = clients.MAX_DURATION_REQUESTS
    assert clients.duration_requests(10.0, 600.0) == 6000
    assert clients.duration_requests(1000.0, 600.0) == cap
    assert clients.duration_requests(1000.0, 600.0, instances=8) == 8 * cap
    assert clients.duration_requests(1000.0, 60.0, instances=8) == 60000
    eight = serve("llama3-8b", from_spec({"gpu": "H100-SXM", "gpus_per_node": 8}),
                  ServeConfig(rate=16.0, requests=None, isl=512, osl=128,
                              client="mlperf-server"))
    assert eight["requests"] == 9600 and eight["workload"]["simulated_requests"] == 1200


def test_the_cli_says_an_overloaded_whole_run_keeps_its_own_figures(cli):
    code, out, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--isl", "512",
                         "--osl", "128", "--rate", "400", "--requests", "4000", "--client",
                         "mlperf-server")
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("# overloaded: 400 requests/s"))
    assert line.endswith("the figures are this run's (4,000 requests), its latencies growing "
                         "with its length")


def test_trtllm_bench_sizes_the_engine_as_its_tuning_does():
    """trtllm-bench sets the batch limit and the token budget itself when the run does not
    (tensorrt_llm/bench/build/tuning.py): Llama 3 70B in FP8 on one H100 leaves room for two
    or three 2,000-token requests, rounded up to its floor of 64 and 2,048 tokens; on eight,
    in TP8, 1,786 rounded up to 1,792 requests and 3,584 tokens (1 + 1000/1000 each). Stated
    limits win, and other clients leave the engine's defaults."""
    from gpufabric.workloads.inference.serve import with_client
    h100 = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8})
    base = ServeConfig(engine="tensorrt-llm", precision="fp8", isl=1000, osl=1000,
                       client="trtllm-bench")
    one = with_client(base, 1, "llama3-70b", from_spec({"gpu": "H100-SXM",
                                                        "gpus_per_node": 1}))
    tp8 = with_client(ServeConfig(**{**base.__dict__, "tp": 8}), 1, "llama3-70b", h100)
    assert (one.max_num_seqs, one.max_batched_tokens, one.chunked_prefill) == (64, 2048, True)
    assert (tp8.max_num_seqs, tp8.max_batched_tokens) == (1792, 3584)
    stated = with_client(ServeConfig(**{**base.__dict__, "max_num_seqs": 32}), 1,
                         "llama3-70b", h100)
    assert (stated.max_num_seqs, stated.max_batched_tokens) == (32, 2048)
    other = with_client(ServeConfig(**{**base.__dict__, "client": "genai-perf",
                                       "concurrency": 4}), 1, "llama3-70b", h100)
    assert (other.max_num_seqs, other.max_batched_tokens) == (None, None)
