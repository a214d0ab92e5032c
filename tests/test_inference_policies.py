"""Scheduling policies: each engine's profile names how its iterations are formed from the one
shared batch state (decode-first in-flight batching, or prefill-first as SGLang and vLLM V0)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpufabric.errors import InputError
from gpufabric.topology.build import from_spec
from gpufabric.workloads.inference import requests as R
from gpufabric.workloads.inference.engines import engine_key, parse, profile
from gpufabric.workloads.inference.serve import ServeConfig, scheduler_config, step_model
from gpufabric.workloads.inference.simulator import simulate

ONE_H100 = {"gpu": "H100-SXM", "gpus_per_node": 1}


def _run(order: str):
    cfg = ServeConfig(isl=1024, osl=128)
    sm = step_model("llama3-8b", from_spec(ONE_H100), cfg)
    sched = replace(scheduler_config(sm, cfg), order=order)
    return simulate(R.poisson(30.0, 400, isl=1024, osl=128, seed=3), sm, sched)


def test_prefill_first_never_mixes_decodes_into_a_prefill_iteration():
    pf, df = _run("prefill-first"), _run("decode-first")
    mixed = (pf.iter_decode > 0) & (pf.iter_prefill > 0)
    assert not mixed.any()
    assert ((df.iter_decode > 0) & (df.iter_prefill > 0)).any()
    # the decodes wait for the prefills: a longer time per output token, a shorter TTFT
    tpot = [np.median((r.finish - r.first_token) / (r.osl - 1)) for r in (pf, df)]
    ttft = [np.median(r.first_token - r.arrival) for r in (pf, df)]
    assert tpot[0] > tpot[1] and ttft[0] < ttft[1]


def test_engines_name_their_order_and_versions_pick_the_profile():
    assert profile("sglang").order == "prefill-first"
    assert profile("vllm").order == "decode-first"
    assert engine_key("vLLM 0.6.0 (--num-scheduler-steps 10)") == "vllm-v0"
    assert engine_key("vLLM 0.4.3") == "vllm-v0"        # 0.4 schedules prompts first too
    assert engine_key("vLLM V1") == engine_key("vLLM 0.10.1") == "vllm"
    assert profile(engine_key("vllm 0.6.3")).order == "prefill-first"


def test_an_unknown_order_is_refused_naming_the_field():
    from gpufabric.fileio import load_data
    d = dict(load_data("gpufabric.workloads", "data", "engines", "vllm.yaml"))
    d["scheduler"] = {**d["scheduler"], "order": "lifo"}
    with pytest.raises(InputError, match=r"x\.yaml: scheduler\.order: unknown order 'lifo'; "
                                         r"allowed: decode-first, prefill-first"):
        parse(d, "x.yaml")


def test_the_vllm_0_6_entries_run_vllm_v0():
    # their release (V0's scheduler) is in the engine name the entry gives, not read from text
    from gpufabric.workloads.inference.validate import entry_engine, load_entries
    v06 = [e for e in load_entries("tests/data/calibration/inference.yaml")
           if str(e["engine"].get("version", "")).startswith("0.6.0")]
    assert len(v06) == 2
    assert {engine_key(entry_engine(e)) for e in v06} == {"vllm-v0"}
