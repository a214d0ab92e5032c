"""The models' constants as one immutable value (:class:`gpufabric.params.Params`): a profile
makes a new value that the models read inside its ``use`` block only, so two profiles in one
process (one after the other, or in two threads at once) each get their own answers."""

from __future__ import annotations

import operator
import threading
from pathlib import Path

import pytest

from gpufabric import params, sweep
from gpufabric.collectives import params as P
from gpufabric.collectives.validate import validate
from gpufabric.errors import InputError
from gpufabric.measure import profile
from gpufabric.network import capacity

FILE = str(Path(__file__).parent / "data" / "calibration" / "collectives.yaml")
#: profile A moves a latency and the NVLink links' rate (a new network); B the NVLS kernels'
#: share and the host-memory hop (same network as shipped)
A = "params:\n  HOP_LAT_US.nvlink.Simple: 6.8\n  USABLE_RATE_SCALE.nvlink: 0.8\n"
B = "params:\n  NVLS_KERNEL_SHARE: {value: 0.6, fitted_on: [x]}\n  SHM_HOP_LAT_US.LL: 3.0\n"


def _answers() -> list[tuple]:
    """What `gpufabric validate` predicts for every point of the file, as the models are now."""
    return [(p["id"], p["point"], p["predicted"]) for p in validate(FILE)["points"]]


def _shipped_values() -> dict:
    return {n: repr(p.value) for n, p in profile.registry().items()}


@pytest.fixture
def profiles(tmp_path):
    (tmp_path / "a.yaml").write_text(A)
    (tmp_path / "b.yaml").write_text(B)
    return str(tmp_path / "a.yaml"), str(tmp_path / "b.yaml")


def test_two_profiles_in_one_process_each_get_their_own_answers(profiles):
    a, b = profiles
    shipped, values = _answers(), _shipped_values()
    with profile.apply(a):
        first_a = _answers()
    with profile.apply(b):
        only_b = _answers()
    with profile.apply(a):
        again_a = _answers()
    assert again_a == first_a                     # A's caches never leak B's values
    assert len({tuple(first_a), tuple(only_b), tuple(shipped)}) == 3
    assert _answers() == shipped and _shipped_values() == values


def test_a_topology_kept_across_profiles_answers_each_with_its_own():
    """The collective model cached on a topology (its network, its plans) is kept per value."""
    from gpufabric.collectives import predict
    from gpufabric.topology.build import load
    topo = load("hgx-h100")

    def times() -> tuple[float, ...]:
        return tuple(predict(topo, op, size).time_us for op in ("all_reduce", "all_gather")
                     for size in (1024, 2**30))
    shipped = times()
    seen = []
    for values in ({"HOP_LAT_US.nvlink.Simple": 6.8, "USABLE_RATE_SCALE.nvlink": 0.8},
                   {"HOP_LAT_US.nvlink.LL": 1.2}, {"USABLE_RATE_SCALE.nvlink": 0.9}):
        with profile.overrides(values):
            seen.append(times())
        assert times() == shipped
    assert len(set(seen)) == 3 and shipped not in seen
    with profile.overrides({"HOP_LAT_US.nvlink.Simple": 6.8, "USABLE_RATE_SCALE.nvlink": 0.8}):
        assert times() == seen[0]
    # the NVLS tree's inter-node rate (its NICs' usable rate) across 4 servers, asked first
    # under a profile
    pods = load("hgx-h100-4node-ndr")

    def nvls_tree(topo) -> float:
        return predict(topo, "all_reduce", 2**30, algo="nvls_tree").time_us
    with profile.overrides({"USABLE_RATE_SCALE.net": 0.5}):
        slower = nvls_tree(pods)
    assert slower > nvls_tree(pods) == nvls_tree(load("hgx-h100-4node-ndr"))


def test_two_profiles_in_two_threads_at_once(profiles):
    a, b = profiles
    with profile.apply(a):
        want_a = _answers()
    with profile.apply(b):
        want_b = _answers()
    got: dict[str, list] = {}
    meet = threading.Barrier(3)

    def run(path: str) -> None:
        with profile.apply(path):
            meet.wait(timeout=30)                  # both profiles in use at once
            got[path] = _answers()
            got[path + " value"] = P.NVLS_KERNEL_SHARE
            meet.wait(timeout=30)

    threads = [threading.Thread(target=run, args=(p,)) for p in (a, b)]
    for t in threads:
        t.start()
    meet.wait(timeout=30)
    seen_here = P.NVLS_KERNEL_SHARE, P.HOP_LAT_US["nvlink"]["Simple"]   # this thread: shipped
    meet.wait(timeout=30)
    for t in threads:
        t.join(timeout=60)
    assert got[a] == want_a and got[b] == want_b
    assert (got[a + " value"], got[b + " value"]) == (0.76, 0.6)
    assert seen_here == (0.76, 3.4)


def test_a_params_value_is_immutable_and_keyed_by_what_it_sets():
    p = params.current().replace({"HOP_LAT_US.nvlink.Simple": 4.1, "KERNEL_US": 5.0})
    same = params.SHIPPED.replace({"KERNEL_US": 5.0}).replace(
        {"HOP_LAT_US": {"nvlink": {"Simple": 4.1}}})
    assert p == same and hash(p) == hash(same) and p.key != params.SHIPPED.key
    assert params.SHIPPED.replace({"KERNEL_US": 4.0}).key == "shipped"   # the shipped value
    with pytest.raises(TypeError):
        p["HOP_LAT_US"]["nvlink"]["Simple"] = 1.0
    with pytest.raises(TypeError):
        P.HOP_LAT_US["nvlink"]["Simple"] = 1.0           # the shipped value too
    assert p["HOP_LAT_US"]["nvlink"]["Simple"] == 4.1 and P.HOP_LAT_US["nvlink"]["Simple"] == 3.4
    # the network's key moves with the link rates only
    net = capacity.PARAMS
    assert p.key_of(net) == params.SHIPPED.key_of(net)
    assert p.replace({"USABLE_RATE_SCALE.nvlink": 0.9}).key_of(net) != p.key_of(net)


def test_setting_the_shm_hop_sets_both_hop_tables():
    for name in ("SHM_HOP_LAT_US.LL", "HOP_LAT_US.shm.LL", "TREE_HOP_LAT_US.shm.LL"):
        with profile.overrides({name: 3.0}):
            assert P.SHM_HOP_LAT_US["LL"] == P.HOP_LAT_US["shm"]["LL"] == \
                P.TREE_HOP_LAT_US["shm"]["LL"] == 3.0, name
    assert P.HOP_LAT_US["shm"]["LL"] == P.TREE_HOP_LAT_US["shm"]["LL"] == 1.5


def test_nested_uses_and_a_refused_value_leave_the_outer_one():
    outer = params.SHIPPED.replace({"KERNEL_US": 5.0})
    kernel = params.REGISTRY["KERNEL_US"]
    with params.use(outer):
        with profile.overrides({"FRAGMENTATION": 0.1}):
            assert (kernel.value, params.REGISTRY["FRAGMENTATION"].value) == (5.0, 0.1)
        with pytest.raises(InputError, match="params.KERNEL_US: got -1.0; allowed"):
            params.current().replace({"KERNEL_US": -1.0}, file="p.yaml")
        assert params.current() is outer and kernel.value == 5.0
    assert kernel.value == 4.0


def test_worker_processes_run_under_the_callers_params():
    """sweep.run's worker processes start with the shipped values; a job runs under the
    caller's (two records read in two workers)."""
    recs = [params.REGISTRY["KERNEL_US"], params.REGISTRY["HBM_EFF"]]
    with profile.overrides({"KERNEL_US": 6.0, "HBM_EFF": 0.7}):
        assert sweep.run(operator.attrgetter("value"), recs, jobs=2) == [6.0, 0.7]
    assert sweep.run(operator.attrgetter("value"), recs, jobs=2) == [4.0, 0.8]


def test_a_cache_of_a_result_that_reads_parameters_keys_on_the_value():
    calls = []

    @params.cache
    def launches_us(n: int) -> float:
        calls.append(n)
        return n * params.REGISTRY["KERNEL_US"].value

    assert launches_us(2) == 8.0
    with profile.overrides({"KERNEL_US": 5.0}):
        assert launches_us(2) == 10.0
    assert launches_us(2) == 8.0 and calls == [2, 2]       # each value computed once


def test_a_capacity_run_is_shared_by_step_models_of_the_same_costs_and_kept_per_value(
        monkeypatch):
    """A serving deployment's saturated capacity run is kept by what its step costs are made
    of (serve.step_digest), not by its topology: one GPU of a 1-GPU and of an 8-GPU H100
    server cost the same and run it once; another GPU, or the same under another parameter
    value, runs its own."""
    from gpufabric.topology.build import from_spec
    from gpufabric.workloads.inference import serve as S
    runs = []
    real = S.simulate_with_front_end

    def counted(*a, **kw):
        runs.append(1)
        return real(*a, **kw)
    monkeypatch.setattr(S, "simulate_with_front_end", counted)
    cfg = S.ServeConfig(tp=1, replicas=1, isl=321, osl=45, requests=50)

    def cap(gpu: str, per_node: int) -> float:
        topo = from_spec({"gpu": gpu, "gpus_per_node": per_node})
        sm = S.step_model("llama3-8b", topo, cfg)
        return S.capacity(sm, cfg, 1, S.scheduler_config(sm, cfg))["requests_per_s"]

    one = cap("H100-SXM", 1)
    assert cap("H100-SXM", 8) == one and len(runs) == 1
    assert cap("H200-SXM", 1) != one and len(runs) == 2
    with profile.overrides({"HBM_EFF": 0.5}):
        assert cap("H100-SXM", 8) < one and len(runs) == 3
