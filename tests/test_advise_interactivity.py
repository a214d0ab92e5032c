"""Serving advice as buyers pose it: interactivity targets (output tokens/s per user) instead
of a TPOT, and a sweep of them with the cheapest system kind per target and its crossovers."""

from __future__ import annotations

import json

import pytest

from gpufabric.advise import prices as P
from gpufabric.advise import scenario as S
from gpufabric.advise.interactivity import sweep
from gpufabric.errors import InputError

SMALL = {"workloads": {"serve": {"model": "llama3-8b", "rate": 1, "isl": 512, "osl": 128,
                                 "slo_ttft_ms": 2000, "interactivity": [20, 80]}},
         "constraints": {"deployment": "on-prem", "gpus": ["L40S", "RTX-4090"],
                         "consumer_gpus": True},
         "space": {"gpus_per_node": [1, 2], "nodes": [1], "cloud": False},
         "objective": "lowest-cost"}


def test_interactivity_is_a_tpot_target():
    sc = S.parse(SMALL, "x.yaml")
    assert sc.serve.interactivity == (20.0, 80.0)
    assert sc.serve.slo_tpot_ms == 50.0                 # 1000 / the first target
    both = json.loads(json.dumps(SMALL))
    both["workloads"]["serve"]["slo_tpot_ms"] = 40
    with pytest.raises(InputError, match="workloads.serve.interactivity: give slo_tpot_ms or "
                                         "interactivity"):
        S.parse(both, "x.yaml")
    bad = json.loads(json.dumps(SMALL))
    bad["workloads"]["serve"]["interactivity"] = [20, 0]
    with pytest.raises(InputError, match=r"interactivity\[1\]: must be a number above 0"):
        S.parse(bad, "x.yaml")


def test_a_sweep_gives_each_kind_at_each_target_and_names_the_crossovers():
    sc = S.parse(SMALL, "x.yaml")
    res = sweep(sc, P.load(None), sc.serve.interactivity, jobs=1)
    assert res["targets"] == [20.0, 80.0]
    kinds = {(r["interactivity"], r["kind"]) for r in res["rows"]}
    assert {k for _, k in kinds} <= {"L40S on-prem", "RTX-4090 on-prem"}
    for r in res["rows"]:
        assert r["tpot_ms"] == pytest.approx(1000 / r["interactivity"])
        # $/Mtok at capacity: the hourly cost over the output tokens served running full
        tps = r["tokens_per_s_per_gpu"] * r["gpus"]
        assert r["usd_per_mtok"] == pytest.approx(r["usd_per_hour"] / (tps * 3600 / 1e6))
    # a faster user costs throughput: each kind serves fewer tokens per GPU at 80 than at 20
    by = {(r["interactivity"], r["kind"]): r["tokens_per_s_per_gpu"] for r in res["rows"]}
    for (x, k), v in by.items():
        if x == 80.0 and (20.0, k) in by:
            assert v <= by[(20.0, k)]
    assert [c["interactivity"] for c in res["cheapest"]] == [20.0, 80.0]
    # the page: both charts, one line per kind on each, every row of the table
    from gpufabric.report.advice import sweep_page
    page = sweep_page(res)
    assert page.count('class="plotly-graph-div"') == 2
    assert "Cost per million output tokens at capacity" in page
    assert "Throughput per GPU at capacity" in page
    assert page.count("<tr><td>") == len(res["rows"])


def test_the_cli_refuses_a_bad_target(cli):
    code, out, err = cli("advise", "small-chat", "--interactivity", "20,fast")
    assert code == 2 and out == ""
    assert err.strip() == ("gpufabric: error: --interactivity[1]: must be a number above 0 and "
                           "at most 100000 tokens/s, got 'fast'")


def test_docstring_examples():
    import doctest

    import gpufabric.advise.interactivity as I
    assert doctest.testmod(I).failed == 0
    assert doctest.testmod(S).failed == 0


def test_the_targets_share_one_priced_space_and_rank_as_each_alone():
    """A sweep generates and prices the designs once: each target's ranking on the shared
    designs is the ranking the target gets alone, and ranking leaves the shared ones as made."""
    from dataclasses import replace

    from gpufabric.advise import core
    sc = S.parse(SMALL, "x.yaml")
    p = P.load(None)
    designs = core.priced_designs(sc, p)
    before = [(c.system, c.cost, c.bound, c.metrics) for c in designs]
    for x in sc.serve.interactivity:
        st = replace(sc, serve=replace(sc.serve, slo_tpot_ms=1000.0 / x))
        shared, alone = core.advise(st, p, designs=designs), core.advise(st, p)
        assert shared.infeasible == alone.infeasible
        assert [(core.describe(c), c.objective, c.metrics, c.cost) for c in shared.ranked] == \
            [(core.describe(c), c.objective, c.metrics, c.cost) for c in alone.ranked]
        assert (shared.generated, shared.pruned, shared.evaluated) == \
            (alone.generated, alone.pruned, alone.evaluated)
    assert [(c.system, c.cost, c.bound, c.metrics) for c in designs] == before
    assert shared.infeasible and not alone.ranked      # 80 tokens/s per user: none meets it

