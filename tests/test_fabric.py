"""Multi-tier scale-out fabrics: tiers from switch radix and port speed, routing across them."""

import functools
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufabric import collectives as C
from gpufabric.errors import InputError
from gpufabric.network import Network, Transfer
from gpufabric.topology import fabric
from gpufabric.topology.build import from_spec, normalize_spec

GB = 2**30


def plan_of(**spec):
    return fabric.plan(normalize_spec({"gpu": "H100-SXM", **spec}))


def test_a_2048_node_ndr_cluster_needs_three_tiers_of_64_port_switches():
    p = plan_of(nodes=2048, nic="ib-ndr")
    assert [(t.name, t.switches, t.down, t.up) for t in p.tiers] == [
        ("leaf", 512, 32, 32), ("spine", 512, 32, 32), ("core", 256, 64, 0)]
    assert (p.nodes_per_leaf, p.leaves_per_rail, p.pods, p.nodes_per_pod) == (32, 64, 16, 128)
    assert p.bisection_GBps == 16384 / 2 * 50.0          # non-blocking: half the NIC ports
    assert p.cables == {"400G optical NIC-leaf": 16384, "400G optical leaf-spine": 16384,
                        "400G optical spine-core": 16384}
    # QM9700 takes twin-port OSFP optics: 32 cages for 64 ports
    assert p.optics["QM9700 switch transceiver (2 port/cage)"] == (16384 + 2 * 16384 * 2) // 2
    assert (p.hops(0, 31), p.hops(0, 32), p.hops(0, 128)) == (1, 3, 5)


def test_small_clusters_take_one_or_two_tiers():
    one = plan_of(nodes=4, nic="ib-ndr", fabric={"topology": "fat-tree"})
    assert [t.name for t in one.tiers] == ["leaf"] and one.cables == {
        "400G copper (DAC) NIC-leaf": 32}
    two = plan_of(nodes=32, nic="ib-ndr")
    assert [(t.name, t.switches) for t in two.tiers] == [("leaf", 8), ("spine", 4)]
    assert two.hops(0, 31) == 1 and two.tiers[0].ports_used == 32 * 8 + 8 * 32


def test_oversubscription_per_tier_and_rails_per_leaf():
    p = plan_of(nodes=512, nic="ib-ndr", fabric={"oversubscription": [3, 2], "tiers": 3,
                                                  "rails_per_leaf": 2})
    leaf, spine, _ = p.tiers
    assert (leaf.down, leaf.up, leaf.oversubscription) == (48, 16, 3.0)
    assert (p.nodes_per_leaf, p.leaves_per_rail) == (24, 22)     # 24 nodes x 2 rails per leaf
    assert spine.oversubscription == 2.0
    assert p.bisection_GBps == pytest.approx(512 * 8 / 2 * 50 / 3 / 2)


def test_51_2t_ethernet_and_xdr_switches():
    eth = plan_of(nodes=64, nic="roce-400", fabric={"switch": "SN5600"})
    assert eth.tiers[0].radix == 128                         # 64 x 800G as 128 x 400G
    xdr = plan_of(nodes=1024, nic="ib-xdr")
    assert xdr.tiers[0].radix == 144 and xdr.levels == 2


@pytest.mark.parametrize("fab, field", [
    ({"oversubscription": [1, 2, 3]}, "fabric.oversubscription"),
    ({"oversubscription": 0.5}, "fabric.oversubscription"),
    ({"tiers": 4}, "fabric.tiers"),
    ({"switch": "SN2700"}, "fabric.switch"),                 # no 400G port
    ({"nodes_per_leaf": 40}, "fabric.nodes_per_leaf"),
])
def test_bad_fabric_fields_are_named(fab, field):
    with pytest.raises(InputError) as exc:
        from_spec({"gpu": "H100-SXM", "nodes": 64, "nic": "ib-ndr", "fabric": fab}, file="c.yaml",
                  materialize_nodes=1)
    assert exc.value.field == field and exc.value.file == "c.yaml"


def test_more_nodes_than_a_three_tier_fabric_connects_is_refused():
    with pytest.raises(InputError, match="need 128 pods of 128 but a three-tier fabric of QM9700 "
                                         "core switches reaches at most 64"):
        from_spec({"gpu": "H100-SXM", "nodes": 16384, "nic": "ib-ndr"}, materialize_nodes=1)
    # the same GPUs on 144-port XDR switches fit
    t = from_spec({"gpu": "B200", "nodes": 16384, "nic": "ib-xdr"}, materialize_nodes=1)
    assert t.meta["fabric"]["levels"] == 3 and len(t.gpus()) == 8


SMALL_PODS = {"gpu": "H100-SXM", "nodes": 8, "nic": "ib-ndr",
              "fabric": {"nodes_per_leaf": 2, "pod_nodes": 4, "oversubscription": [1, 4]}}


def test_routes_cross_the_real_tiers():
    t = from_spec(SMALL_PODS)
    net = Network(t)
    walk = lambda a, b: net.route(Transfer(a, b, 1)).walks[0]   # noqa: E731
    assert walk("n0.gpu0", "n1.gpu0")[2:5] == ("n0.nic0", "fabric.leaf0", "n1.nic0")
    assert "fabric.pod0.spine" in walk("n0.gpu0", "n2.gpu0")
    assert walk("n0.gpu0", "n5.gpu0")[3:8] == (
        "fabric.leaf0", "fabric.pod0.spine", "fabric.core", "fabric.pod1.spine", "fabric.leaf2")
    # the pod spine to core link carries the pod leaf uplinks at the spine tier 4:1
    up = t.link("fabric.pod0.spine", "fabric.core")
    assert (up.count, up.bw_GBps) == (8, 8 * 50.0)       # 16 leaves x 2 uplinks / 4


def test_a_cross_pod_all_to_all_is_slower_than_an_in_pod_one():
    t = from_spec(SMALL_PODS)
    in_pod = C.predict(t, "all_to_all", GB, ranks=32)        # 4 nodes, one pod
    cross = C.predict(t, "all_to_all", GB, ranks=64)         # 8 nodes, two pods
    assert cross.busbw < 0.5 * in_pod.busbw
    assert "fabric.pod0.spine -> fabric.core" in cross.bottleneck
    flat = from_spec({**SMALL_PODS, "fabric": {**SMALL_PODS["fabric"], "oversubscription": 1}})
    assert C.predict(flat, "all_to_all", GB, ranks=64).busbw > cross.busbw


def test_show_prints_the_tiers_and_json_has_them(cli):
    code, out, _ = cli("show", "gpu=H100-SXM,nodes=2048,nic=ib-ndr")
    assert code == 0
    assert "Fabric: 3 tier(s), rail-optimized, 16,384 NIC ports of ib-ndr" in out
    assert "16 pods of 128 nodes" in out and "across pods 5" in out
    code, out, _ = cli("show", "gpu=H100-SXM,nodes=2048,nic=ib-ndr", "--json")
    fab = json.loads(out)["meta"]["fabric"]
    assert [t["switches"] for t in fab["tiers"]] == [512, 512, 256]
    assert fab["bisection_GBps"] == 409600.0 and fab["hops"]["across_pods"] == 5
    code, _, err = cli("show", "gpu=H100-SXM,nodes=4", "--node", "4")
    assert code == 2 and "--node: the system has 4 node(s); allowed: 0 to 3" in err


FAST = settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))


@FAST
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 4]),
       st.sampled_from(["all_to_all", "all_reduce", "all_gather"]),
       st.sampled_from([2**20, 2**26, 2**30]))
def test_adding_a_tier_or_spine_oversubscription_never_speeds_a_collective(o1, o2, op, size):
    lo, hi = sorted((o1, o2))
    slack = 1 - 1e-9
    two, three = _pods(None), _pods(1)
    assert C.predict(three, op, size).time_us >= C.predict(two, op, size).time_us * slack
    assert C.predict(_pods(hi), op, size).time_us >= C.predict(_pods(lo), op, size).time_us * slack


@FAST
@given(st.sampled_from([1, 4, 16]), st.sampled_from([1, 4, 16]), st.sampled_from([1, 8]),
       st.sampled_from(["ring", "tree"]), st.sampled_from([8, 2**24, 2**30]))
def test_rings_and_trees_never_speed_up_with_a_tier_or_oversubscription(o1, o2, leaf, algo,
                                                                         size):
    lo, hi = sorted((o1, o2))
    slack = 1 - 1e-9
    two = C.predict(_pods(None), "all_reduce", size, algo=algo).time_us
    three = C.predict(_pods(1), "all_reduce", size, algo=algo).time_us
    assert three >= two * slack
    assert (C.predict(_pods(hi, leaf), "all_reduce", size, algo=algo).time_us
            >= C.predict(_pods(lo, leaf), "all_reduce", size, algo=algo).time_us * slack)
    assert (C.predict(_pods(lo, leaf), "all_reduce", size, algo=algo).time_us
            >= C.predict(_pods(lo, 1), "all_reduce", size, algo=algo).time_us * slack)


def test_a_ring_or_tree_across_pods_crosses_the_core():
    # 8 nodes, 2 a leaf, pods of 4: one ring (tree) per rail leaves each pod once each way;
    # at 16:1 on the spines a pod's 8 rails share 2 core ports, and the core binds
    cross = {a: C.predict(_pods(16), "all_reduce", GB, algo=a) for a in ("ring", "tree")}
    flat = {a: C.predict(_pods(1), "all_reduce", GB, algo=a) for a in ("ring", "tree")}
    for a in ("ring", "tree"):
        assert cross[a].busbw < 0.3 * flat[a].busbw
        assert "fabric.pod0.spine -> fabric.core" in cross[a].bottleneck
        assert "fabric" not in flat[a].bottleneck
    # inside one pod (4 nodes) the same fabric never reaches the core
    assert C.predict(_pods(16), "all_reduce", GB, 32, algo="ring").busbw == pytest.approx(
        C.predict(_pods(1), "all_reduce", GB, 32, algo="ring").busbw)


def test_tree_latency_counts_the_tiers_each_level_climbs():
    # a tree over 8 nodes: its levels join nodes 1, 2 and 4 apart; with 2 nodes a leaf they
    # climb 1/2, 1 and 1 spine tiers, and with pods of 4 also 1/4, 1/2 and 1 core tiers: 1.75
    # tiers more, two switch hops of 0.13 us each (QM9700), up the tree and down again
    two = C.predict(_pods(None), "all_reduce", 8, algo="tree", proto="LL").time_us
    three = C.predict(_pods(1), "all_reduce", 8, algo="tree", proto="LL").time_us
    assert three - two == pytest.approx(2 * 1.75 * 2 * 0.13)
    m = C.model(_pods(1))
    assert m.planner.tree_tiers(m.layout(64), 3) == [0.75, 1.5, 2.0]


@functools.cache
def _pods(spine_over, leaf_over=1):
    """8 nodes, 2 per leaf: two tiers (None), or pods of 4 under a core at spine_over:1."""
    fab = {"nodes_per_leaf": 2} if spine_over is None else {
        "nodes_per_leaf": 2, "pod_nodes": 4, "oversubscription": [leaf_over, spine_over]}
    return from_spec({"gpu": "H100-SXM", "nodes": 8, "nic": "ib-ndr", "fabric": fab})


@FAST
@given(st.sampled_from([(4, 8), (4, 16), (8, 16)]), st.sampled_from([2**16, 2**24, 2**30]))
def test_a_bigger_nvlink_domain_never_slows_an_all_to_all_inside_it(domains, size):
    small, big = domains
    spec = {"gpu": "GB200", "gpus_per_node": 4, "nodes": 4, "nic": "ib-ndr"}
    a = from_spec({**spec, "nvlink_domain": small})
    b = from_spec({**spec, "nvlink_domain": big})
    ta = C.predict(a, "all_to_all", size, ranks=big).time_us
    assert C.predict(b, "all_to_all", size, ranks=big).time_us <= ta * (1 + 1e-9)


def test_compare_json_has_the_fabric_of_each_system(cli):
    code, out, _ = cli("compare", "hgx-b200-2048node", "gb200-nvl72", "--no-html", "--json")
    rows = {r["name"]: r for r in json.loads(out)["systems"]}
    assert rows["hgx-b200-2048node"]["fabric"]["switches"] == 512 + 512 + 256
    assert rows["gb200-nvl72"]["nvlink_domain"] == 72


def test_rails_sharing_a_leaf_meet_there():
    t = from_spec({"gpu": "H100-SXM", "nodes": 4, "nic": "ib-ndr",
                   "fabric": {"rails_per_leaf": 2}})
    leaf = {ln.a: ln.b for ln in t.links if ln.kind == "net" and ".nic" in ln.a}
    assert leaf["n0.nic0"] == leaf["n0.nic1"] == leaf["n3.nic1"] != leaf["n0.nic2"]
    assert t.meta["fabric"]["leaves"] == 4 and t.devices[leaf["n0.nic0"]].attrs["rails"] == [0, 1]


def test_compare_without_a_heat_map(cli, tmp_path):
    out = tmp_path / "r.html"
    code, _, _ = cli("compare", "hgx-h100-4node-ndr", "--heat", "none", "-o", str(out))
    assert code == 0 and "link utilisation" not in out.read_text()
    assert "<h3>Fabric</h3>" in out.read_text()


@pytest.mark.parametrize("algo", ["ring", "tree", "nvls_tree", "hierarchical"])
def test_sampled_nodes_carry_what_every_node_carries_across_pods(algo):
    # 8 nodes in pods of 4, spines 16:1: 4 sampled nodes sit in one pod, so the rings' and
    # trees' hops out of the pod are added to its core uplinks; laying out all 8 nodes, the
    # real hops cross the core, and the two agree
    t = from_spec({"gpu": "H100-SXM", "nodes": 8, "nic": "ib-ndr",
                   "fabric": {"nodes_per_leaf": 2, "pod_nodes": 4, "oversubscription": [1, 16]}})
    sampled = C.Model(t).predict("all_reduce", GB, algo=algo)
    full = C.Model(t, sample_nodes=0).predict("all_reduce", GB, algo=algo)
    assert C.Model(t).layout(64).m == 4
    assert sampled.time_us == pytest.approx(full.time_us, rel=1e-9)
    assert "fabric.core" in sampled.bottleneck



def test_the_default_switch_is_remembered_by_what_the_plan_reads():
    # the advisor asks for it per design: the answer is kept by NIC, node count, NICs per
    # node and fabric keys, so another order of keys or another file name finds it, and a
    # spec that differs in any of them gets its own answer (the one a fresh search gives)
    s = {"nodes": 2048, "nics_per_node": 8, "nic": "roce-400",
         "fabric": {"topology": "rail-optimized", "oversubscription": 1.0}}
    specs = [s, {**s, "nodes": 64}, {**s, "nics_per_node": 1}, {**s, "nic": "ib-ndr"},
             {**s, "fabric": {**s["fabric"], "oversubscription": [2.0, 2.0]}}]
    fresh = []
    for x in specs:
        fabric._DEFAULT_SWITCH.clear()
        fresh.append(fabric.default_switch(x))
    assert [fabric.default_switch(x) for x in specs] == fresh
    assert fresh[:2] == ["SN5600", "SN4700"]
    flipped = {**s, "fabric": dict(reversed(list(s["fabric"].items())))}
    assert fabric.default_switch(flipped, file="other.yaml") == "SN5600"
