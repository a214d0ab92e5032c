"""Honest parameters and algorithm plugins: every constant is a sourced record, validation
reports the error over entries nothing was fitted on, and a new algorithm is one class."""

import json
from pathlib import Path

import pytest

from gpufabric import collectives as C
from gpufabric.collectives import params as P
from gpufabric.collectives.algorithms import REGISTRY, Algorithm, Plan, register
from gpufabric.collectives.algorithms.base import UNIT
from gpufabric.collectives.validate import validate
from gpufabric.errors import InputError
from gpufabric.network import SHM_EFFICIENCY
from gpufabric.network import capacity
from gpufabric.topology.build import from_spec

DATA = Path(__file__).parent / "data" / "calibration"


def test_every_record_says_where_it_comes_from():
    assert len(P.REGISTRY) >= 20
    for p in P.REGISTRY.values():
        assert p.unit and p.applies_to, p.name
        assert p.source or p.fitted_on, p.name
        assert p.kind in ("nccl", "fitted", "estimate", "source"), p.name
        if p.kind == "nccl":
            assert p.nccl_version == "2.28.3" and "NCCL" in p.source
    assert P.REGISTRY["NVLS_EFFICIENCY"].value == {"nvlink4": 0.85, "nvlink5": 0.74}
    # two machines: an 8-GPU dual-socket ring and a 4-GPU single-socket ring
    assert P.REGISTRY["SHM_HOP_LAT_US"].fitted_on == ("rtx4090-8gpu-small-latency",
                                                      "rtx5090-4gpu-genoa-no-p2p")
    assert P.REGISTRY["SHM_CROSS_SOCKET_US"].fitted_on == P.REGISTRY["SHM_HOP_LAT_US"].fitted_on
    with pytest.raises(ValueError, match="recorded twice"):
        P.record("NVLS_LAT_US", 1.0, "us", "x", "y")


def test_the_network_records_its_constants_where_it_defines_them():
    """One definition per constant: the network's are recorded in gpufabric.network, with the
    collective model's, and not copied by value into collectives/params.py."""
    from gpufabric.params import REGISTRY
    assert REGISTRY["SHM_EFFICIENCY"] is SHM_EFFICIENCY and SHM_EFFICIENCY.value == 0.73
    for name in ("DRAM_EFFICIENCY", "INTERSOCKET_EFFICIENCY", "OTHER_EFFICIENCY",
                 "NVLINK_FALLBACK", "PCIE_FALLBACK", "USABLE_RATE_SCALE", "NET_FALLBACK"):
        assert REGISTRY[name] is getattr(capacity, name)        # the record itself
        assert REGISTRY[name].layer == "collectives" and not hasattr(P, name)


def test_fitted_ids_are_calibration_entries():
    import yaml
    ids = {e["id"] for f in ("collectives.yaml", "holdout.yaml", "holdout2.yaml",
                             "holdout4.yaml")
           for e in yaml.safe_load((DATA / f).read_text())}
    assert P.fitted_ids() <= ids
    assert P.fitted_ids() == {"rtx4090-8gpu-small-latency", "rtx5090-pcie5-4gpu",
                              "rtx5090-pcie5-dual-xeon", "hgx-h100-allreduce-290",
                              "azure-nd-h200-v5", "p4dn-2node-efa",
                              "rtx5090-4gpu-genoa-no-p2p"}


def test_validate_reports_the_error_over_unfitted_entries():
    r = validate(str(DATA / "collectives.yaml"))
    s = r["summary"]
    fitted = sorted({p["id"] for p in r["points"] if p["status"] == "fitted"})
    assert fitted == ["azure-nd-h200-v5", "hgx-h100-allreduce-290",
                      "rtx4090-8gpu-small-latency", "rtx5090-pcie5-4gpu",
                      "rtx5090-pcie5-dual-xeon"]
    # the headline is over the held-out points only; fitted points are reported apart
    assert s["points"] == s["all"]["points"] - 9 and s["fitted"]["points"] == 9
    assert s["by_size"]["large"]["points"] == s["all"]["by_size"]["large"]["points"] - 6
    assert s["by_size"]["small"]["points"] == 0
    assert {p["status"] for p in r["points"]} == {"fitted", "held-out"}
    assert {"median_abs_pct", "p90_abs_pct", "max_abs_pct", "points", "fitted", "looked_at",
            "by_metric", "by_size"} <= set(s)


def test_cli_params_lists_every_record(cli):
    code, out, _ = cli("params", "--wide")
    assert code == 0 and out.startswith("# gpufabric params: ")
    assert "SHM_HOP_LAT_US" in out and "fitted on rtx4090-8gpu-small-latency" in out
    # a constant fitted on one entry is that entry's answer, and said so with the reason
    assert "fitted on rtx5090-pcie5-4gpu (a single entry: that entry's answer; " in out
    code, out, _ = cli("params", "--json")
    data = json.loads(out)
    assert data["nccl_version"] == "2.28.3"
    assert {p["name"] for p in data["params"]} == set(P.REGISTRY)
    assert all(p["single_entry"] == (len(p["fitted_on"]) == 1) for p in data["params"])


def test_params_check_lists_the_constants_on_one_entry(cli):
    """`params --check`: every fitted constant resting on one entry, and each such entry
    counts as fitted (never held out) in validate."""
    from gpufabric import validation
    code, out, _ = cli("params", "--layer", "all", "--check", "--json")
    assert code == 0
    rows = json.loads(out)["params"]
    assert rows and all(r["kind"] == "fitted" and len(r["fitted_on"]) == 1 for r in rows)
    # each is marked as its entry's answer, with the reason no second entry is in our files
    assert all(r["status"] == "answer" and r["answer"] for r in rows)
    single = {r["fitted_on"][0] for r in rows}
    assert {"rtx5090-pcie5-4gpu", "p4dn-2node-efa"} <= single
    for eid in single:
        probe = eid[:-1] + "x" if eid.endswith("*") else eid
        assert validation.status(probe) == "fitted", eid
    code, out, _ = cli("params", "--layer", "all", "--check")
    assert code == 0 and out.startswith(f"# gpufabric params --check: {len(rows)} fitted ")


def test_algorithms_are_registered_by_name_and_duplicates_refused():
    assert set(REGISTRY) == {"ring", "tree", "nvls", "nvls_tree", "pat", "hierarchical",
                             "pairwise", "p2p"}
    assert C.ALGOS == ("auto", "ring", "tree", "nvls", "nvls_tree", "pat", "hierarchical",
                       "pairwise", "p2p")

    class AnotherRing(Algorithm):
        name = "ring"
        ops = ("all_gather",)
    with pytest.raises(ValueError, match="algorithm 'ring' is already registered"):
        register(AnotherRing)


def test_a_new_algorithm_is_one_class():
    """A direct all_gather (every rank sends its shard to every other at once), registered,
    chosen by name, then removed again."""

    class Direct(Algorithm):
        name = "direct_test"
        ops = ("all_gather",)
        auto = False

        def plan(self, m, op, lays):
            pat = m.planner.pairwise(lays[0], UNIT)
            sim = self.simulate(m, [pat])
            return Plan(self.name, ("Simple",), sim.drain_s / UNIT, {"Simple": 10.0},
                        note="direct")

    register(Direct)
    try:
        t = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8})
        p = C.Model(t).predict("all_gather", 2**30, algo="direct_test")
        a2a = C.Model(t).predict("all_to_all", 2**30)
        assert (p.algo, p.proto, p.note) == ("direct_test", "Simple", "direct")
        # the same traffic as all_to_all's pairwise exchange, at its own latency
        assert p.time_us - 10.0 == pytest.approx(a2a.time_us - a2a_lat(a2a), rel=1e-9)
        with pytest.raises(InputError, match="cannot run all_reduce"):
            C.Model(t).predict("all_reduce", 8, algo="direct_test")
    finally:
        del REGISTRY["direct_test"]
    with pytest.raises(InputError, match="unknown algorithm 'direct_test'"):
        C.check_algo("direct_test")


def a2a_lat(p):
    """Latency of an 8-rank all_to_all in one NVSwitch node (Simple)."""
    return P.BASE_LAT_US["p2p"]["Simple"] + P.HOP_LAT_US["nvlink"]["Simple"] + \
        P.P2P_PER_PEER_US * 7
