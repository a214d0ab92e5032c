"""The design advisor: scenario schema, prices, the properties of its ranking, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufabric.advise import core, prices, scenario
from gpufabric.errors import InputError

TRAIN = {"workloads": {"train": {"model": "llama2-7b", "tokens": 2.0e9, "global_batch": 32,
                                 "seq_len": 2048, "deadline_hours": 400}},
         "constraints": {"deployment": "on-prem",
                         "gpus": ["H100-SXM", "A100-SXM4-80GB", "L40S"]},
         "objective": "lowest-cost",
         "space": {"gpus_per_node": [4, 8], "nodes": [1]}}


def _sc(data, name="t.yaml"):
    return scenario.parse(data, name)


# -- schema --------------------------------------------------------------------------------
@pytest.mark.parametrize("data, field", [
    ({"workloads": {"train": {"model": "llama2-7b", "tokens": 1e9, "global_batch": 8,
                              "seq_len": 2048}}, "objective": "cheap"}, "objective"),
    ({"workloads": {"train": {"model": "llama2-7b", "global_batch": 8, "seq_len": 2048}}},
     "workloads.train.tokens"),
    ({"workloads": {"serve": {"model": "llama3-8b", "rate": 2}}}, "workloads.serve.slo_tpot_ms"),
    ({"workloads": {"serve": {"model": "llama3-8b", "rate": -1, "slo_tpot_ms": 50}}},
     "workloads.serve.rate"),
    ({"workloads": {"serve": {"model": "no-such-model", "rate": 1, "slo_tpot_ms": 50}}},
     "workloads.serve.model"),
    ({"workloads": {}, "constraints": {"deployment": "moon"}}, "workloads"),
    ({"workloads": {"serve": {"model": "llama3-8b", "rate": 1, "slo_tpot_ms": 50}},
      "constraints": {"deployment": "moon"}}, "constraints.deployment"),
    ({"workloads": {"serve": {"model": "llama3-8b", "rate": 1, "slo_tpot_ms": 50}},
      "constraints": {"gpus": ["H1000"]}}, "constraints.gpus"),
    ({"workloads": {"serve": {"model": "llama3-8b", "rate": 1, "slo_tpot_ms": 50}},
      "space": {"nodes": [0]}}, "space.nodes[0]"),
    ({"workload": {}}, "workload"),
    ({"workloads": {"serve": {"model": "llama3-8b", "rate": 1, "slo_tpot_ms": 50,
                              "engine": "warp-drive"}}}, "workloads.serve.engine"),
    ({"workloads": {"serve": {"model": "llama3-8b", "rate": 1, "slo_tpot_ms": 50}},
      "constraints": {"gpus": ["L4", "RTX-4090"]}}, "constraints.gpus"),
    ({"workloads": {"serve": {"model": "llama3-8b", "rate": 1, "slo_tpot_ms": 50}},
      "constraints": {"consumer_gpus": "yes"}}, "constraints.consumer_gpus"),
    ({"workloads": {"serve": {"model": "llama3-8b", "rate": 1, "slo_tpot_ms": 50,
                              "engine": "mine.yaml"}}}, "workloads.serve.engine"),
])
def test_a_bad_scenario_is_one_line_naming_the_field(data, field):
    with pytest.raises(InputError) as e:
        _sc(data, "bad.yaml")
    assert e.value.file == "bad.yaml" and e.value.field == field
    assert "\n" not in str(e.value)


def test_a_serving_scenario_names_its_engine_as_serve_takes_it():
    base = {"model": "llama3-8b", "rate": 1, "slo_tpot_ms": 50}
    assert _sc({"workloads": {"serve": base}}).serve.engine == "vllm"
    for name, profile in (("TensorRT-LLM", "tensorrt-llm"), ("sglang", "sglang"),
                          ("tensorrt-llm-tensorrt", "tensorrt-llm-tensorrt")):
        s = _sc({"workloads": {"serve": {**base, "engine": name}}}).serve
        assert s.engine == profile
        one = core.Candidate(gpu="H100-SXM", gpus_per_node=1, nodes=1, deployment="on-prem",
                             spec={"gpu": "H100-SXM", "gpus_per_node": 1})
        job = core._jobs(one, _sc({"workloads": {"serve": {**base, "engine": name}}}))[1][0][0]
        assert job.engine == profile      # the serving runs use that profile
    # chunked or whole prefill: the engine's default unless the scenario states it
    assert _sc({"workloads": {"serve": base}}).serve.chunked_prefill is None
    s = _sc({"workloads": {"serve": {**base, "chunked_prefill": True}}})
    one = core.Candidate(gpu="H100-SXM", gpus_per_node=1, nodes=1, deployment="on-prem",
                         spec={"gpu": "H100-SXM", "gpus_per_node": 1})
    job = core._jobs(one, s)[1][0][0]
    assert job.chunked_prefill is True and core.serve_setup(job)[1].chunked_prefill is True
    with pytest.raises(InputError) as e:
        _sc({"workloads": {"serve": {**base, "chunked_prefill": "yes"}}}, "bad.yaml")
    assert (e.value.file, e.value.field) == ("bad.yaml", "workloads.serve.chunked_prefill")


def test_consumer_gpus_are_left_out_of_datacenter_designs_with_the_reason():
    # GeForce's driver license forbids datacenter deployment: those kinds are not generated
    # unless the scenario says the deployment is outside a datacenter, and the answer says so
    from gpufabric import catalog
    base = {"workloads": {"serve": {"model": "llama3-8b", "rate": 1, "slo_tpot_ms": 50}},
            "space": {"gpus_per_node": [1], "nodes": [1], "cloud": True}}
    geforce = {n for n in catalog.names("gpu") if n.startswith(("RTX-3", "RTX-4", "RTX-5",
                                                                 "GTX-"))}
    dc = _sc(base)
    kinds = {c.gpu for c in core.generate(dc, prices.load())}
    assert "L40S" in kinds and "RTX-PRO-6000" in kinds and not kinds & geforce
    (note,) = dc.constraints.left_out()
    assert note.startswith("left out RTX-3090, RTX-4070-Ti-SUPER, RTX-4090, RTX-5090, "
                           "GTX-1080-Ti: their driver license forbids datacenter deployment "
                           "(NVIDIA GeForce software license, 2.1.3)")
    office = _sc({**base, "constraints": {"consumer_gpus": True}})
    assert geforce <= {c.gpu for c in core.generate(office, prices.load())}
    assert office.constraints.left_out() == []
    nvidia_dc = _sc({**base, "constraints": {"gpus": ["L4"]}})
    assert nvidia_dc.constraints.left_out() == []      # none the other constraints allowed
    with pytest.raises(InputError, match="RTX-4090's driver license forbids datacenter "
                                         "deployment .*add consumer_gpus: true"):
        _sc({**base, "constraints": {"gpus": ["RTX-4090"]}})


def test_every_builtin_scenario_parses():
    names = scenario.builtin_names()
    assert {"small-chat", "training-box", "ib-vs-roce", "moe-supernode", "pd-moe",
            "finetune-70b"} <= set(names)
    for n in names:
        assert scenario.builtin(n).name == n


def test_the_cli_refuses_a_bad_scenario_file_with_exit_2(tmp_path, capsys):
    from gpufabric.cli import main
    f = tmp_path / "s.yaml"
    f.write_text("workloads: {serve: {model: llama3-8b, rate: 2}}\n")
    with pytest.raises(SystemExit) as e:
        main(["advise", str(f)])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1
    assert "workloads.serve.slo_tpot_ms" in err


# -- prices ---------------------------------------------------------------------------------
def test_every_catalog_price_names_its_page_and_dates():
    # a figure no page was read for says so (``lacks``), and the advisor prints that line
    p = prices.load()
    for sec, rows in p.entries.items():
        for row in rows.values():
            assert row["source"] and row["read"], (sec, row)
            assert str(row.get("url", "")).startswith("https://") or row.get("lacks"), (sec, row)


def test_every_catalog_gpu_has_a_price_and_a_power():
    # the advisor ranks every GPU kind on cost and on power; a kind with neither figure would be
    # left out of cost objectives ("not priced") or shown at 0 W
    from gpufabric import catalog
    p = prices.load()
    missing = [g for g in catalog.names("gpu")
               if not p.gpu_usd(g) or not (p.gpu_watts(g) or 0) > 0]
    assert missing == []
    assert p.gpu_usd("B300") == 53000.0 and p.gpu_usd("V100-PCIe-16GB") == 11000.0


def test_a_user_price_file_replaces_and_is_checked(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("gpus:\n  - {gpu: H100-SXM, usd: 1000}\n")
    assert prices.load(str(f)).gpu_usd("H100-SXM") == 1000.0
    f.write_text("gpus:\n  - {gpu: H100-SXM, usd: -5}\n")
    with pytest.raises(InputError) as e:
        prices.load(str(f))
    assert e.value.field == "gpus[0].usd"


def test_a_price_of_zero_is_refused_naming_the_file_and_field(tmp_path, capsys):
    from gpufabric.cli import main
    f = tmp_path / "free.yaml"
    f.write_text("gpus:\n  - {gpu: L40S, usd: 0}\n")
    with pytest.raises(InputError) as e:
        prices.load(str(f))
    assert e.value.file == str(f) and e.value.field == "gpus[0].usd"
    assert "above 0" in e.value.message and "included_in" in e.value.message
    f.write_text("cloud:\n  - {instance: free.box, usd_per_hour: 0, system: 'gpu=L40S'}\n")
    with pytest.raises(SystemExit) as ex:
        main(["advise", "small-chat", "--prices", str(f)])
    err = capsys.readouterr().err.strip()
    assert ex.value.code == 2 and len(err.splitlines()) == 1
    assert "free.yaml: cloud[0].usd_per_hour: must be a number above 0" in err


# -- the ranking's properties ----------------------------------------------------------------
@pytest.fixture(scope="module")
def train_advice():
    return core.advise(_sc(TRAIN), prices.load(), top=10)


def test_a_design_the_rules_refuse_never_appears(train_advice):
    from gpufabric.topology.build import from_spec, parse_inline
    refused = [c for c in train_advice.candidates if c.refused]
    assert refused                                  # the space holds designs the rules refuse
    bad = {c.system for c in refused}
    for c in train_advice.ranked:
        assert c.system not in bad
        from_spec(parse_inline(c.system))           # builds: the rules accept it


def test_raising_a_designs_price_never_raises_its_rank(train_advice, tmp_path):
    base = [c.system for c in train_advice.ranked]
    assert len(base) >= 2
    for c in train_advice.ranked[:3]:
        usd = prices.load().gpu_usd(c.gpu)
        if usd is None or prices.load().server(c.gpu, c.gpus_per_node,
                                               c.spec.get("scale_up", "nvswitch")):
            continue
        f = tmp_path / "p.yaml"
        f.write_text(f"gpus:\n  - {{gpu: {c.gpu}, usd: {usd * 1.5}}}\n")
        after = [x.system for x in core.advise(_sc(TRAIN), prices.load(str(f)), top=10).ranked]
        for s in (x.system for x in train_advice.ranked if x.gpu == c.gpu):
            if s in after:
                assert after.index(s) >= base.index(s)


def test_json_of_the_winner_is_a_spec_that_train_accepts(train_advice):
    from gpufabric.topology.build import load
    best = train_advice.ranked[0]
    assert load(best.system).gpus()[0].model == best.gpu
    assert best.objective == core.run_cost(best, train_advice.scenario) > 0


SERVE = {"workloads": {"serve": {"model": "llama3-8b", "rate": 2, "isl": 500, "osl": 100,
                                 "slo_ttft_ms": 2000, "slo_tpot_ms": 60}},
         "constraints": {"deployment": "on-prem", "gpus": ["L40S", "RTX-4090"],
                         "consumer_gpus": True},
         "objective": "lowest-cost",
         "space": {"gpus_per_node": [1], "nodes": [1], "cloud": False}}


def _answer(adv):
    """What a user reads of an advice: each ranked design with its figures, the Pareto front,
    what would change the answer."""
    return ([(core.describe(c), c.objective, c.metrics, c.cost, c.equivalents)
             for c in adv.ranked],
            [core.describe(c) for c in adv.pareto], adv.changes, adv.evaluated)


@pytest.mark.slow
def test_the_answer_is_the_same_on_one_worker_and_on_several():
    data = json.loads(json.dumps(SERVE))
    data["space"] = {"gpus_per_node": [1], "nodes": [1, 2], "nics": ["roce-400"],
                     "fabrics": ["rail-optimized"], "oversubscription": [1], "cloud": False}
    sc = _sc(data)
    # the pool first, so that its workers run the models rather than find them cached here
    several = core.advise(sc, prices.load(), top=10, jobs=2)
    one = core.advise(sc, prices.load(), top=10, jobs=1)
    assert several.ranked and _answer(several) == _answer(one)


def test_the_cli_refuses_zero_jobs(capsys):
    from gpufabric.cli import main
    with pytest.raises(SystemExit) as e:
        main(["advise", "small-chat", "--jobs", "0"])
    assert e.value.code == 2
    assert "--jobs: must be a whole number from 1 to 1,024, got 0" in capsys.readouterr().err


def test_a_tighter_slo_never_admits_more_designs():
    loose = core.advise(_sc(SERVE), prices.load(), top=10)
    tight_d = json.loads(json.dumps(SERVE))
    tight_d["workloads"]["serve"]["slo_tpot_ms"] = 30
    tight = core.advise(_sc(tight_d), prices.load(), top=10)
    assert loose.ranked                               # the loose SLO admits a design
    assert {c.system for c in tight.ranked} <= {c.system for c in loose.ranked}


# -- built-in scenarios and the infeasible case ----------------------------------------------
def test_the_small_chat_winner_is_not_rack_scale():
    # `advise small-chat`'s answer as tests/data/golden/advise.json records it (test_golden
    # checks that file against a live run, so the scenario is not run twice)
    golden = json.loads((Path(__file__).parent / "data" / "golden" / "advise.json").read_text())
    assert golden["scenario"] == "small-chat"
    best = golden["designs"][0]
    assert not best["rack_scale"]
    assert best["gpus"] <= 8                        # a few requests/s: one small server


def test_a_scenario_nothing_meets_names_the_binding_constraint(capsys, tmp_path):
    from gpufabric.cli import main
    data = json.loads(json.dumps(TRAIN))
    data["constraints"]["power_kW"] = 0.5
    adv = core.advise(_sc(data), prices.load())
    assert not adv.ranked and adv.infeasible["constraint"] == "power"
    assert "under 0.5 kW; the closest" in adv.infeasible["message"]
    f = tmp_path / "s.yaml"
    import yaml
    f.write_text(yaml.safe_dump(data))
    with pytest.raises(SystemExit) as e:
        main(["advise", str(f)])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1 and "kW" in err


def test_the_bounds_never_promise_less_than_the_model_gives(train_advice):
    ran = [c for c in train_advice.candidates if c.evaluated and "train_hours" in c.metrics]
    assert ran
    for c in ran:      # the bound is the model's own ceiling: the model can only be slower
        assert c.metrics["train_hours"] >= c.bound["train_hours"] * (1 - 1e-9)


def test_services_that_outgrow_the_hosts_bind(train_advice):
    data = json.loads(json.dumps(TRAIN))
    data["workloads"]["services"] = [{"name": "etl", "cores": 100000}]
    adv = core.advise(_sc(data), prices.load())
    assert not adv.ranked and adv.infeasible["constraint"] == "services_cores"


def test_json_has_designs_best_first_with_a_system_spec(tmp_path, capsys):
    import yaml

    from gpufabric.cli import main
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(TRAIN))
    main(["advise", str(f), "--json", "--top", "3"])
    out = json.loads(capsys.readouterr().out)
    assert out["designs"] and out["candidates_evaluated"] >= len(out["designs"])
    assert out["elapsed_s"] > 0
    values = [d["objective"]["value"] for d in out["designs"]]
    assert values == sorted(values)
    for d in out["designs"]:
        assert {"system", "cost", "power_kW", "objective", "metrics"} <= set(d)
        assert d["system"].startswith("gpu=")


@pytest.mark.slow
def test_the_html_page_loads_in_chromium_without_console_errors(tmp_path, capsys):
    import yaml

    from gpufabric.cli import main

    from chromium_page import chromium, open_page
    f, page = tmp_path / "s.yaml", tmp_path / "advice.html"
    f.write_text(yaml.safe_dump(TRAIN))
    main(["advise", str(f), "--json", "-o", str(page)])
    best = json.loads(capsys.readouterr().out)["designs"][0]["design"]
    body = page.read_text().split("</head>", 1)[1]
    # one offline file: the drawings are ours, the scatter plotly's, nothing fetched
    assert "<svg" in body and "<script src=" not in body
    tab, errors, (pw, browser) = open_page(page, chromium())
    try:
        assert tab.locator("#top-design").text_content() == best
        # the scatter has ticked log axes and the Pareto front as its own series
        ticks = tab.evaluate("""() => { const d = document.querySelector('.js-plotly-plot');
            return [d.querySelectorAll('.xtick').length, d.querySelectorAll('.ytick').length,
                    d.data.map(t => t.name)]; }""")
        assert ticks[0] >= 2 and ticks[1] >= 2 and "Pareto front" in ticks[2], ticks
        assert errors == []
    finally:
        browser.close()
        pw.stop()


def test_pd_scenarios_rank_disaggregated_units_with_their_decode_pool():
    # the built-in pd-moe scenario, narrowed to on-premises H100 servers (the whole space over
    # every GPU and cloud takes 10x longer and tests nothing more about PD units)
    from dataclasses import replace
    sc = scenario.builtin("pd-moe")
    sc = replace(sc, constraints=replace(sc.constraints, deployment="on-prem",
                                         gpus=("H100-SXM",)))
    adv = core.advise(sc, prices.load(), top=5)
    pds = [c for c in adv.ranked if c.pd]
    assert pds and adv.ranked[0].objective <= pds[0].objective
    c = pds[0]
    s = c.metrics["serve"]
    assert s["pd"] == f"{c.pd[0]}P{c.pd[1]}D" and s["capacity"] >= 8   # the load asked
    assert c.gpus == c.gpus_per_node * c.nodes + (c.decode.gpus if c.decode else 0)


# -- a buyer's question: one model over every GPU kind and the clouds, an interactivity sweep -
BUYER = {"workloads": {"serve": {"model": "mixtral-8x7b", "rate": 4, "isl": 1000, "osl": 500,
                                 "slo_ttft_ms": 2000, "slo_tpot_ms": 40}},
         "constraints": {"deployment": "any",
                         "gpus": ["H100-SXM", "A100-SXM4-80GB", "L40S"]},
         "objective": "lowest-cost",
         "space": {"gpus_per_node": [4, 8], "nodes": [1], "nics": ["roce-400"],
                   "fabrics": ["rail-optimized"], "oversubscription": [1]}}


def test_a_tighter_interactivity_target_never_makes_the_answer_cheaper():
    costs = {}
    for tpot in (80, 40, 20):
        data = json.loads(json.dumps(BUYER))
        data["workloads"]["serve"]["slo_tpot_ms"] = tpot
        adv = core.advise(_sc(data), prices.load(), top=5, jobs=2)
        assert adv.ranked, tpot
        for c in adv.ranked:            # every design shown meets the target at the load asked
            s = c.metrics["serve"]
            assert s["tpot_ms_p90"] <= tpot and s["capacity"] >= 4
        figures = [c.objective for c in adv.ranked]
        assert figures == sorted(figures)
        costs[tpot] = figures[0]
    assert costs[80] <= costs[40] <= costs[20]


def test_the_page_gives_the_objective_with_its_unit_and_the_caveats_the_cli_prints():
    from gpufabric.report.advice import render
    # a design serving 2,000 tokens/s on 4 kW: the advisor ranks by -tokens/s per W
    tps, kw = 2000.0, 4.0
    design = {"design": "1x 8-GPU L40S server (pcie)", "system": "gpu=L40S,gpus_per_node=8",
              "objective": {"name": "tokens-per-watt", "value": -tps / (kw * 1000)},
              "cost": {"capex_usd": 1e5, "hourly_usd": 3.0,
                       "notes": ["power counts the GPU boards (host power not recorded)"]},
              "power_kW": kw, "metrics": {}, "tokens_per_s": tps, "bottleneck": "compute"}
    page = render({"scenario": "moe", "objective": "tokens-per-watt", "designs": [design],
                   "points": [], "pareto": [], "candidates_generated": 12,
                   "evaluated_with_models": 3,
                   "left_out": ["left out RTX-4090: its driver license forbids it"]})
    assert "objective (tokens/s per W)" in page
    assert f"<td data-v='{tps / (kw * 1000)}'>{tps / (kw * 1000):,.4g}</td>" in page
    assert "data-v='-0.5'" not in page and ">-0.5<" not in page
    assert "note: power counts the GPU boards (host power not recorded)" in page
    assert "note: left out RTX-4090: its driver license forbids it" in page
    assert "candidates generated 12, evaluated with models 3" in page
    assert "{&quot;" not in page and '{"candidates' not in page      # no raw JSON dict



def test_the_serving_memory_floor_counts_the_kv_cache_of_the_requests_in_flight():
    """Llama 3 70B at 2 requests/s, 1,000 tokens in and 8,000 out: each answer takes at least
    7,999 decode steps of at least the weights (141 GB) over the design's HBM bandwidth, so by
    Little's law that many sequences are in flight, each holding 1,000 + 3,999.5 tokens of KV
    (327,680 B each in 16 bits): 8 L40S cannot hold it and are refused before any model runs;
    8 H100 can."""
    from gpufabric import catalog
    from gpufabric.workloads.models import load_model
    s = scenario.Serve(model="llama3-70b", rate=2, isl=1000, osl=8000, slo_tpot_ms=40)
    m = load_model("llama3-70b")
    for gpu, ok in (("H100-SXM", True), ("L40S", False)):
        step = m.active_params() * 2 / (8 * catalog.gpu(gpu).mem_bw_GBps * 1e9)
        want = (m.params() * 2 + 2 * 7999 * step * 327680 * 4999.5) / 1e9
        got = core._serve_memory_floor_GB(s, gpu, 8)
        assert got == pytest.approx(want)
        assert (got <= 8 * catalog.gpu(gpu).memory_GB * 2**30 / 1e9) is ok
    assert core._serve_memory_floor_GB(replace_serve(s, concurrency=10, rate=None), "L40S",
                                       8) == pytest.approx((m.params() * 2 + 10 * 327680 *
                                                            4999.5) / 1e9)


def replace_serve(s, **kw):
    from dataclasses import replace
    return replace(s, **kw)


def test_layouts_that_cannot_hold_the_load_are_skipped_with_the_same_answer():
    """A serving layout whose instances together cannot hold the load's KV cache (by the
    memory left after the weights and the least time a request holds it) is not run: the
    answer is the one every layout run gives, every layout that ran stays within its bound,
    and a design left with no layout says why."""
    from unittest import mock
    data = {"workloads": {"serve": {"model": "llama3-70b", "rate": 1, "isl": 500,
                                    "osl": 500, "slo_tpot_ms": 60}},
            "constraints": {"deployment": "on-prem", "gpus": ["H100-NVL"]},
            "objective": "lowest-cost", "space": {"gpus_per_node": [2], "nodes": [1]}}
    sc = _sc(data)
    with mock.patch.object(core, "_instance_rate_bound", lambda *a: float("inf")):
        every = core.advise(sc, prices.load(), top=5)
    ran = {c.system: core._jobs(c, sc, every=True)[1] for c in every.candidates
           if c.evaluated}
    bounded = core.advise(sc, prices.load(), top=5)
    assert every.ranked and _answer(bounded) == _answer(every)
    kept = {c.system: core._jobs(c, sc)[1] for c in bounded.candidates if c.evaluated}
    assert sum(map(len, kept.values())) < sum(map(len, ran.values()))
    for c in every.candidates:
        for job, width in ran.get(c.system, []):
            got = core._serve_eval(job).get("per_instance")     # (cached: no second run)
            assert got is None or got <= core._instance_rate_bound(sc.serve, c.gpu, width)
    # two 94 GB GPUs, one instance each: 70B in 16 bits fits on neither
    two = next(c for c in bounded.candidates if c.gpus == 2 and c.evaluated)
    assert not kept[two.system] or all(w == 2 for _, w in kept[two.system])
    tiny = core.Candidate(gpu="H100-NVL", gpus_per_node=1, nodes=1,
                          spec={"gpu": "H100-NVL", "gpus_per_node": 1}, deployment="on-prem")
    assert core._no_layout(tiny, sc) == ("llama3-70b in bf16 does not fit: 141 GB of weights "
                                         "on 1 H100-NVL")


def test_the_instance_rate_bound_is_the_kv_caches_token_seconds():
    """Two H100 NVL (94 GB, 3,900 GB/s each) serving Llama 3 70B in 16 bits at 1,000 tokens
    in and 2,000 out: a request's 1,999 decode steps read 1,999 x 2,000 tokens of context
    (327,680 bytes each in 16 bits) and hold as many; holding them takes steps of at least
    the weights' read each, as many as the memory left after the weights allows at once."""
    from gpufabric import catalog
    from gpufabric.workloads.models import load_model
    s = scenario.Serve(model="llama3-70b", rate=1, isl=1000, osl=2000, slo_tpot_ms=60)
    m, g = load_model("llama3-70b"), catalog.gpu("H100-NVL")
    room = 2 * g.memory_GB * 2**30 - 2 * m.params()
    tokens = 1999 * 2000
    assert core._instance_rate_bound(s, "H100-NVL", 2) == pytest.approx(
        2 * g.mem_bw_GBps * 1e9 / (327680 * (tokens * 2 * m.active_params() / room + tokens)))
    assert core._instance_rate_bound(s, "H100-NVL", 1) == 0.0       # the weights alone
    assert core._instance_rate_bound(replace_serve(s, dataset="sharegpt"), "H100-NVL", 2) \
        == float("inf")                                              # no sound bound


@pytest.mark.parametrize("system", [
    "gpu=L40S,gpus_per_node=4,scale_up=pcie,nodes=1",
    "gpu=H100-SXM,gpus_per_node=8,nodes=16,nic=ib-ndr,nics_per_node=8,"
    "fabric.topology=rail-optimized,fabric.oversubscription=1",
    "gpu=H100-SXM,gpus_per_node=8,nodes=2048,nic=roce-400,nics_per_node=4,"
    "fabric.topology=fat-tree,fabric.oversubscription=2",
    "gpu=GB200,gpus_per_node=72,nodes=1",
    "gpu=GB200,gpus_per_node=36,nodes=4,nic=ib-xdr,nics_per_node=36,"
    "fabric.topology=rail-optimized,fabric.oversubscription=1",
    "gpu=MI300X,gpus_per_node=8,nodes=3,nic=roce-400,nics_per_node=8,fabric.switch=SN5600",
])
def test_a_design_is_priced_as_its_whole_spec_reads(system):
    """Pricing reads a design's servers once per server design and its fabric once per
    shape: the same as reading the whole spec (the count, a rack-scale part's trays, the
    leaf switch sized to the cluster)."""
    prices._servers.cache_clear()
    assert prices._design(system) == prices._servers(system, None)[0]


def test_a_design_costs_the_same_priced_alone_or_after_others():
    """The bill-of-materials parts kept on a price table (``Prices.memo``: servers, network,
    racks) give every design the cost it gets on a fresh table, in any order, and each
    design's lines are its own."""
    designs = [("L40S", 4, 1, "gpu=L40S,gpus_per_node=4,scale_up=pcie,nodes=1"),
               ("L40S", 4, 2, "gpu=L40S,gpus_per_node=4,scale_up=pcie,nodes=2,nic=ib-ndr,"
                "nics_per_node=4,fabric.topology=fat-tree,fabric.oversubscription=2"),
               ("H100-SXM", 8, 16, "gpu=H100-SXM,gpus_per_node=8,nodes=16,nic=ib-ndr,"
                "nics_per_node=8,fabric.topology=rail-optimized,fabric.oversubscription=1"),
               ("H100-SXM", 8, 2, "gpu=H100-SXM,gpus_per_node=8,nodes=2,nic=ib-ndr,"
                "nics_per_node=8,fabric.topology=rail-optimized,fabric.oversubscription=1"),
               ("GB200", 72, 1, "gpu=GB200,gpus_per_node=72,nodes=1"),
               ("MI300X", 8, 3, "gpu=MI300X,gpus_per_node=8,nodes=3,nic=roce-400,"
                "nics_per_node=8,fabric.switch=SN5600")]

    def cost(d, p):
        return prices.design_cost(*d, p, kwh_usd=0.1, amortize_years=4)

    alone = [cost(d, prices.load()) for d in designs]
    shared = prices.load()
    for order in (designs, designs[::-1], designs):
        got = {d: cost(d, shared) for d in order}
        assert [got[d] for d in designs] == alone
    a, b = cost(designs[3], shared)[0], cost(designs[3], shared)[0]
    a["bom"][0]["count"] = -1
    assert b["bom"][0]["count"] == 2 and cost(designs[3], shared) == alone[3]


def test_serving_jobs_whose_instances_cost_the_same_share_one_search():
    """One-GPU instances of servers that differ only in their PCIe switches have one step
    model digest: the second job finds the first's rate search (``core._SERVED``), and each
    gets the answer its own search gives."""
    run = dict(model="llama3-8b", layout=(("tp", 1),), width=1, isl=500, osl=50, ttft=1000.0,
               tpot=50.0, precision="bf16", closed=False)
    a = core._ServeJob(design="gpu=L40S,gpus_per_node=4,scale_up=pcie", **run)
    b = core._ServeJob(design="gpu=L40S,gpus_per_node=4,scale_up=pcie,host.pcie_switches=1,"
                       "host.switch_layout=single-root", **run)
    evaluate = core._serve_eval.__wrapped__          # (past the per-job cache)
    core._SERVED.clear()
    own_b = evaluate(b)
    core._SERVED.clear()
    own_a = evaluate(a)
    assert "per_instance" in own_a and len(core._SERVED) == 1
    assert evaluate(b) == own_b == own_a and len(core._SERVED) == 1
