"""Parallel groups: a collective of some ranks per node, with other groups of the same shape
running at once on the nodes' other GPUs (what training and inference models ask)."""

import pytest

from gpufabric import collectives as C
from gpufabric.collectives.patterns import layout
from gpufabric.errors import InputError
from gpufabric.topology.build import from_spec
from gpufabric.topology.build import load

GB = 2**30


@pytest.fixture(scope="module")
def four_nic():
    """4 x HGX H100 with 4 NDR NICs per node (one per GPU pair)."""
    return load("hgx-h100-4node-4nic")


@pytest.fixture(scope="module")
def eight_nic():
    """4 x HGX H100 with 8 NDR NICs per node (one per GPU)."""
    return load("hgx-h100-4node-ndr")


def test_layout_places_a_group_on_its_local_gpus(four_nic):
    lay = layout(four_nic, 4, per_node=1, group=3)
    assert (lay.nodes, lay.per_node, lay.gpus) == (
        4, 1, [["n0.gpu3"], ["n1.gpu3"], ["n2.gpu3"], ["n3.gpu3"]])
    lay = layout(four_nic, 8, per_node=4, group=1)
    assert lay.gpus == [["n0.gpu4", "n0.gpu5", "n0.gpu6", "n0.gpu7"],
                        ["n1.gpu4", "n1.gpu5", "n1.gpu6", "n1.gpu7"]]
    # the default still fills nodes
    assert layout(four_nic, 16).per_node == 8


def test_data_parallel_groups_share_the_nics_they_have(four_nic, eight_nic):
    # tp=8 x dp=4: 8 data-parallel groups, one per local GPU, ranks on 4 nodes
    alone = C.predict(four_nic, "all_reduce", GB, 4, per_node=1)
    shared = C.predict(four_nic, "all_reduce", GB, 4, per_node=1, concurrent=8)
    assert (alone.algo, round(alone.busbw, 2)) == ("ring", 47.72)
    # two GPUs per NIC: each group gets half of one NIC
    assert round(shared.busbw, 2) == 23.91
    assert shared.busbw / alone.busbw == pytest.approx(0.5, abs=0.01)
    assert shared.note.endswith("8 such groups at once")
    # with a NIC per GPU the 8 groups do not meet on the network
    own = C.predict(eight_nic, "all_reduce", GB, 4, per_node=1, concurrent=8)
    assert round(own.busbw, 2) == 47.72
    # two groups on the 4-NIC nodes land on different NICs
    two = C.predict(four_nic, "all_reduce", GB, 4, per_node=1, concurrent=2)
    assert round(two.busbw, 2) == 47.72


def test_groups_of_several_ranks_per_node_use_their_own_rails(four_nic, eight_nic):
    # 2 groups of 4 GPUs per node over 4 nodes: 2 NICs each on the 4-NIC nodes, 4 on the 8-NIC
    assert round(C.predict(four_nic, "all_reduce", GB, 16, per_node=4, concurrent=2).busbw,
                 2) == 94.43
    assert round(C.predict(eight_nic, "all_reduce", GB, 16, per_node=4, concurrent=2).busbw,
                 2) == 185.84


def test_tensor_parallel_group_inside_a_node_is_the_node_collective(eight_nic):
    tp = C.predict(eight_nic, "all_reduce", 64 * 2**20, 8, per_node=8)
    assert tp.to_dict() == C.predict(eight_nic, "all_reduce", 64 * 2**20, 8).to_dict()
    four = C.predict(eight_nic, "all_reduce", GB, 4, per_node=4, concurrent=2)
    assert (four.ranks, four.algo) == (4, "nvls")


def test_sampled_cluster_matches_the_full_one_for_groups():
    s = {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 8, "nic": "ib-ndr"}
    full = C.Model(from_spec(s), sample_nodes=0)
    sampled = C.Model(from_spec(s), sample_nodes=2)
    for op in ("all_reduce", "all_gather", "all_to_all"):
        a = full.predict(op, GB, 8, per_node=1, concurrent=8)
        b = sampled.predict(op, GB, 8, per_node=1, concurrent=8)
        assert b.busbw == pytest.approx(a.busbw, rel=1e-9)


def test_sweep_takes_the_group_keywords(four_nic):
    rows = C.sweep(four_nic, "all_gather", [2**20, GB], 4, per_node=1, concurrent=8)
    # one GPU per node: NCCL's PAT at 1 MiB (log-depth latency), the ring at 1 GiB
    assert [r["algo"] for r in rows] == ["pat", "ring"]
    assert rows[1]["busbw"] == pytest.approx(
        C.predict(four_nic, "all_gather", GB, 4, per_node=1, concurrent=8).busbw)


@pytest.mark.parametrize("kw,match", [
    ({"ranks": 4, "per_node": 1, "concurrent": 9}, "9 groups of 1 GPUs per node need 9"),
    ({"ranks": 12, "per_node": 2}, "12 ranks at 2 per node need 6 nodes; the system has 4"),
    ({"ranks": 6, "per_node": 4}, "must divide ranks"),
    ({"ranks": 4, "per_node": 1, "concurrent": 0}, "at least 1"),
    ({"ranks": 4, "per_node": 1.5}, "whole number"),
])
def test_impossible_groups_are_refused_in_one_line(four_nic, kw, match):
    with pytest.raises(InputError, match=match):
        C.predict(four_nic, "all_reduce", GB, **kw)


def test_cli_runs_a_group(cli):
    code, out, _ = cli("collective", "hgx-h100-4node-4nic", "--ranks", "4", "--per-node", "1",
                       "--concurrent", "8", "--min", "1G", "--max", "1G")
    assert code == 0
    row = next(line.split() for line in out.splitlines() if not line.startswith("#"))
    assert row == ["1073741824", "268435456", "float", "sum", "-1", "67369.30", "15.94", "23.91",
                   "ring/Simple"]
    code, _, err = cli("collective", "hgx-h100-4node-4nic", "--ranks", "4", "--per-node", "3")
    assert code == 2 and "--per-node: must divide ranks (4)" in err
