"""Speculative decoding and multi-token prediction in `serve` and the advisor."""

from __future__ import annotations

import json

import pytest

from gpufabric.advise import core, prices, scenario
from gpufabric.errors import InputError
from gpufabric.topology.build import from_spec
from gpufabric.workloads.inference.serve import ServeConfig, serve
from gpufabric.workloads.inference.speculative import DEFAULTS, resolve, tokens_per_step


def test_tokens_per_step_is_one_plus_the_sum_of_the_acceptance_products():
    assert tokens_per_step([0.8], 1) == pytest.approx(1.8)
    assert tokens_per_step([0.8], 3) == pytest.approx(1 + 0.8 + 0.64 + 0.512)
    assert tokens_per_step([0.9, 0.8, 0.7], 3) == pytest.approx(1 + 0.9 + 0.72 + 0.504)
    assert tokens_per_step([0.9, 0.8, 0.7], 2) == pytest.approx(2.62)
    assert tokens_per_step([0.0, 1.0], 2) == 1.0
    assert tokens_per_step([1.0], 4) == 5.0


def test_the_sourced_mtp_default_gives_the_published_acceptance_lengths():
    """TensorRT-LLM's DeepSeek-R1 runs with 1 to 5 MTP tokens: mean accepted lengths 1.92,
    2.58, 2.82, 2.99, 3.01 (the per-position default is derived from them)."""
    d = DEFAULTS["mtp", "deepseek-v3"]
    for k, length in enumerate((1.92, 2.58, 2.82, 2.99, 3.01), start=1):
        assert tokens_per_step(d.acceptance, k) == pytest.approx(length, abs=2e-3)
    assert "TensorRT-LLM" in d.source and "2412.19437" in d.source
    s = resolve("mtp", 3, None, "deepseek-r1")
    assert s.acceptance == d.acceptance[:3] and s.source == d.source


def _llama_run(**spec) -> dict:
    topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 4})
    cfg = ServeConfig(tp=4, precision="fp8", rate=0.5, requests=40, isl=512, osl=256,
                      measure="run", **spec)
    return serve("llama3-70b", topo, cfg)


def test_speculative_decoding_lowers_tpot_at_low_load():
    base = _llama_run()
    eagle = _llama_run(spec="eagle", spec_tokens=3, acceptance="0.8")
    draft = _llama_run(spec="draft", spec_tokens=4, acceptance="0.9,0.8,0.7,0.6",
                       draft_model="llama3-8b")
    for r in (eagle, draft):
        assert r["tpot_ms"]["p50"] < 0.75 * base["tpot_ms"]["p50"]
        # the offered load is served either way (a stable deployment)
        assert r["throughput_tokens_per_s"] == pytest.approx(base["throughput_tokens_per_s"],
                                                             rel=0.05)
    sp = eagle["speculative"]
    assert sp["tokens_per_step"] == pytest.approx(tokens_per_step([0.8], 3))
    assert 0 < sp["draft_share"] < 0.5 and "speculative" not in base
    assert "draft" in eagle["breakdown_ms"] and "draft" not in base["breakdown_ms"]
    # the drafter's weights and KV come out of the cache
    assert draft["memory"]["kv_blocks"] < base["memory"]["kv_blocks"]
    # a rejected draft every time: one token per step, each step dearer than a plain one
    none = _llama_run(spec="eagle", spec_tokens=3, acceptance="0")
    assert none["tpot_ms"]["p50"] > base["tpot_ms"]["p50"]


def test_mtp_speeds_up_deepseek_r1_at_one_request(cli):
    args = ["serve", "deepseek-r1", "gpu=B200,gpus_per_node=8", "--tp", "8", "--ep", "2",
            "--precision", "fp4", "--engine", "tensorrt-llm", "--concurrency", "1",
            "--requests", "6", "--isl", "1024", "--osl", "1024", "--json"]
    code, out, err = cli(*args)
    assert code == 0, err
    code, out_mtp, err = cli(*args, "--spec", "mtp", "--spec-tokens", "3")
    assert code == 0, err
    plain, mtp = json.loads(out), json.loads(out_mtp)
    assert mtp["speculative"]["tokens_per_step"] == pytest.approx(2.82, abs=2e-3)
    assert mtp["tpot_ms"]["p50"] < plain["tpot_ms"]["p50"] / 2
    code, text, err = cli(*args[:-1], "--spec", "mtp", "--spec-tokens", "3")
    assert code == 0 and "# speculative mtp: 3 draft tokens" in text
    assert "2.82 tokens per step" in text and "sourced default" in text


@pytest.mark.parametrize("flags, field", [
    (["--spec", "mtp"], "--spec"),                              # llama3-8b has no MTP module
    (["--spec", "medusa", "--acceptance", "0.8"], "--spec"),
    (["--spec", "eagle", "--spec-tokens", "2"], "--acceptance"),  # no sourced default
    (["--spec", "eagle", "--spec-tokens", "2", "--acceptance", "1.5"], "--acceptance"),
    (["--spec", "eagle", "--spec-tokens", "2", "--acceptance", "0.9,x"], "--acceptance"),
    (["--spec", "eagle", "--spec-tokens", "3", "--acceptance", "0.9,0.8"], "--acceptance"),
    (["--spec", "eagle", "--spec-tokens", "0", "--acceptance", "0.8"], "--spec-tokens"),
    (["--spec", "eagle", "--spec-tokens", "99", "--acceptance", "0.8"], "--spec-tokens"),
    (["--spec", "draft", "--spec-tokens", "2", "--acceptance", "0.8"], "--draft-model"),
    (["--spec", "eagle", "--spec-tokens", "2", "--acceptance", "0.8", "--draft-model",
      "llama3-8b"], "--draft-model"),
    (["--acceptance", "0.8"], "--acceptance"),                  # without --spec
    (["--spec-tokens", "2"], "--spec-tokens"),
])
def test_bad_speculative_flags_are_refused_in_one_line(cli, flags, field):
    code, out, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--rate", "1",
                         "--requests", "20", *flags)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"{field}:" in err and "Traceback" not in err


def test_speculative_is_refused_with_disaggregation(cli):
    code, out, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=8", "--rate", "1",
                         "--pd", "1P1D", "--spec", "eagle", "--acceptance", "0.8")
    assert code == 2 and "--spec" in err


R1_125 = {"workloads": {"serve": {"model": "deepseek-r1", "concurrency": 4, "isl": 1024,
                                  "osl": 1024, "slo_tpot_ms": 8, "precision": "fp4"}},
          "constraints": {"deployment": "on-prem", "gpus": ["B200"]},
          "objective": "cost-per-million-tokens",
          "space": {"gpus_per_node": [8], "nodes": [1], "cloud": False}}


def test_a_scenario_takes_a_speculative_block():
    data = json.loads(json.dumps(R1_125))
    data["workloads"]["serve"]["speculative"] = {"method": "mtp", "tokens": 3}
    s = scenario.parse(data, "s.yaml").serve
    assert s is not None and s.speculative is not None
    assert s.speculative[:2] == ("mtp", 3) and len(s.speculative[2]) == 3
    for block, field in (({"method": "mtp", "tokens": 3, "acceptance": 2}, "acceptance"),
                         ({"method": "eagle", "tokens": 2}, "acceptance"),
                         ({"method": "mtp", "tokens": 3, "extra": 1}, "extra"),
                         ({"method": "warp", "tokens": 3}, "method")):
        data["workloads"]["serve"]["speculative"] = block
        with pytest.raises(InputError) as e:
            scenario.parse(data, "s.yaml")
        assert e.value.file == "s.yaml"
        assert e.value.field.startswith("workloads.serve.speculative"), e.value.field
        assert field in e.value.field or field in e.value.message


def test_125_tokens_per_s_per_user_for_deepseek_r1_on_b200_needs_mtp(tmp_path):
    """8 ms TPOT (125 tokens/s per user): one request alone takes longer without speculative
    decoding; with DeepSeek's MTP (3 draft tokens, the sourced acceptance) a design meets it."""
    f = tmp_path / "prices.yaml"
    f.write_text("gpus:\n  - {gpu: B200, usd: 40000, basis: estimate, source: a test's "
                 "price, url: 'https://example.invalid/', dated: '2026-12', read: "
                 "'2026-12-06'}\n")
    p = prices.load(str(f))
    plain = core.advise(scenario.parse(R1_125, "s.yaml"), p, top=1)
    assert not plain.ranked and "impossible: one request alone" in plain.infeasible["message"]
    data = json.loads(json.dumps(R1_125))
    data["workloads"]["serve"]["speculative"] = {"method": "mtp", "tokens": 3}
    adv = core.advise(scenario.parse(data, "s.yaml"), p, top=1)
    assert adv.ranked
    assert adv.ranked[0].metrics["serve"]["tpot_ms_p90"] <= 8


def test_a_disaggregated_run_refuses_speculative_decoding():
    from gpufabric.workloads.inference.pd import serve_pd
    topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8})
    cfg = ServeConfig(rate=1.0, requests=20, spec="eagle", spec_tokens=2, acceptance="0.8")
    with pytest.raises(InputError) as e:
        serve_pd("llama3-8b", topo, cfg, (1, 1))
    assert e.value.field == "--spec"
