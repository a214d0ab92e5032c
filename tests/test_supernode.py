"""Scale-up domains larger than a server: GB200 NVL72 trays, NVLink partitions, cloud hosts."""

import pytest

from gpufabric import collectives as C
from gpufabric.errors import InputError
from gpufabric.network import Network, Transfer
from gpufabric.topology import rules
from gpufabric.topology.build import load as load_system
from gpufabric.topology.build import from_spec
from gpufabric.topology.paths import path


def test_the_natural_gb200_shorthand_is_one_nvl72_rack_of_trays():
    # 72 GB200 on "one node" used to land on a default x86 host and fail the PCIe lane rule
    t = from_spec({"gpu": "GB200", "gpus_per_node": 72})
    assert (t.meta["nodes"], t.meta["gpus_per_node"], t.meta["nvlink_domain"]) == (18, 4, 72)
    assert t.meta["host"]["cpu"] == "Grace" and t.meta["host"]["attach"] == "c2c"
    assert {r["model"] for r in rules.lane_budget(t)} == {"Grace"}
    assert max(r["used"] for r in rules.lane_budget(t)) == 32     # two x16 NICs per Grace
    assert path(t, "n3.gpu1", "n9.gpu2").type == "NV18"


def test_nvlink_domain_partitions_servers_and_the_nics_join_them():
    t = from_spec({"gpu": "GB200", "gpus_per_node": 4, "nodes": 6, "nvlink_domain": 8})
    assert t.meta["domains"] == 3 and t.meta["nodes_per_domain"] == 2
    assert [t.domain_of(f"n{k}.gpu0") for k in range(6)] == [0, 0, 1, 1, 2, 2]
    net = Network(t)
    inside = net.route(Transfer("n0.gpu0", "n1.gpu3", 1))     # other tray, same domain
    across = net.route(Transfer("n1.gpu0", "n2.gpu0", 1))     # next domain
    assert inside.transport == "nvlink" and inside.walks[0] == ("n0.gpu0", "d0.nvsw", "n1.gpu3")
    assert across.transport == "net"
    lay = C.layout(t)
    assert (lay.nodes, lay.per_node) == (3, 8)


def test_a_systems_name_says_when_its_nvlink_domain_spans_trays():
    """Trays of a larger NVLink domain are named with it: without it a rack of 18 GB200 trays
    read like 18 four-GPU NVSwitch servers joined by InfiniBand."""
    rack = {"gpu": "GB200", "gpus_per_node": 4, "nodes": 18, "nic": "ib-ndr"}
    assert from_spec({**rack, "nvlink_domain": 72}).name == "18x4xGB200-nvswitch-nvl72-4xib-ndr"
    assert from_spec({**rack, "nvlink_domain": 4}).name == "18x4xGB200-nvswitch-8xib-ndr"
    assert from_spec({**rack, "nodes": 6, "nvlink_domain": 8}).name == \
        "6x4xGB200-nvswitch-nvl8-4xib-ndr"
    # two trays of a rack: the rack's domain, built on its switches
    assert from_spec({**rack, "nodes": 2, "nvlink_domain": 72}).name.startswith(
        "2x4xGB200-nvswitch-nvl72")
    assert from_spec({"gpu": "H100-SXM", "gpus_per_node": 8}).name == "8xH100-SXM-nvswitch"


def test_collectives_see_a_multi_tray_domain_as_one_nvls_domain():
    t = load_system("gb200-nvl72")
    p = C.predict(t, "all_reduce", 2**30)
    assert (p.algo, p.ranks) == ("nvls", 72)
    # two NVL72 racks: NVLS inside each, trees across the NICs
    two = from_spec({"gpu": "GB200", "gpus_per_node": 72, "nodes": 2, "nic": "ib-xdr"})
    assert C.predict(two, "all_reduce", 2**30).algo == "nvls_tree"


def test_grace_gpus_use_gpudirect_rdma_through_c2c():
    t = load_system("gb200-nvl72")
    p = path(t, "n0.gpu0", "n0.nic0")
    assert (p.type, p.p2p) == ("NODE", True)       # NCCL's PATH_P2C, NCCL_NET_GDR_C2C=1
    assert not path(t, "n0.gpu0", "n0.nic2").p2p    # the other Grace's NIC: SYS


def test_supernode_section_checks_the_switch_ports():
    sup = load_system("gb200-nvl36x2").meta["supernode"]
    assert (sup["racks"], sup["switch_trays"], sup["chips"]) == (2, 18, 36)
    with pytest.raises(InputError, match="supernode.switch_trays: 72 GPUs x 18 NVLink links = "
                                         "1296 switch ports, but 8 switch trays"):
        from_spec({"gpu": "GB200", "gpus_per_node": 4, "nodes": 18, "nvlink_domain": 72,
                   "supernode": {"switch_trays": 8}}, file="rack.yaml")
    assert load_system("al128-class").meta["supernode"]["switch_trays"] == 16


@pytest.mark.parametrize("spec, field", [
    ({"gpu": "GB200", "gpus_per_node": 4, "nodes": 6, "nvlink_domain": 6}, "nvlink_domain"),
    ({"gpu": "GB200", "gpus_per_node": 4, "nodes": 6, "nvlink_domain": 16}, "nvlink_domain"),
    ({"gpu": "H100-SXM", "scale_up": "pcie", "nodes": 2, "nvlink_domain": 16}, "scale_up"),
    # part of a larger domain: whole trays of it, on NVLink switches
    ({"gpu": "GB200", "gpus_per_node": 4, "nodes": 2, "nvlink_domain": 70}, "nvlink_domain"),
    ({"gpu": "H100-SXM", "scale_up": "pcie", "nvlink_domain": 16}, "scale_up"),
    ({"gpu": "GB200", "gpus_per_node": 70}, "gpus_per_node"),
    ({"gpu": "H100-SXM", "nodes": 1000000}, "nodes"),
])
def test_impossible_domains_and_sizes_are_refused_in_one_line(spec, field):
    with pytest.raises(InputError) as exc:
        from_spec(spec, file="s.yaml")
    assert exc.value.field == field and "\n" not in str(exc.value)


def test_large_clusters_materialize_whole_domains():
    t = load_system("gb200-nvl72x8-xdr", materialize_nodes=2)
    assert (t.meta["nodes"], t.meta["materialized_nodes"], len(t.gpus())) == (144, 18, 72)


def test_cloud_hosts_with_many_nics_fit_behind_pcie_switches():
    t = load_system("aws-p5")
    assert len(t.nics(0)) == 32 and t.devices["n0.nic0"].model == "EFA-v2"
    # four EFA cards share each GPU's PCIe switch, each reached by GPUDirect RDMA
    assert [path(t, "n0.gpu0", f"n0.nic{i}").type for i in range(4)] == ["PIX"] * 4
    # the same host with the default switch count is built as well (one switch per GPU)
    t2 = from_spec({"gpu": "H100-SXM", "nodes": 2, "nics_per_node": 32, "nic": "efa-v2"})
    assert t2.meta["host"]["pcie_switches"] == 8
    assert load_system("gcp-a3-mega").devices["n0.nic0"].attrs["speed"] == "tcpxo"
    p5en = load_system("aws-p5en")
    assert [path(p5en, "n0.gpu1", f"n0.nic{i}").type for i in (2, 3)] == ["PIX", "PIX"]
    a3 = load_system("gcp-a3-high")                    # one TCPX NIC per GPU pair
    assert [path(a3, f"n0.gpu{g}", "n0.nic0").type for g in (0, 1)] == ["PIX", "PIX"]


def test_show_names_the_domain_and_builds_only_the_asked_tray(cli):
    code, out, _ = cli("show", "gb200-nvl72", "--node", "17")
    assert code == 0
    assert "NVLink domain: 72 GPUs = 18 trays of 4, 9 switch trays x 2 nvswitch4" in out
    assert "Devices of node 17" in out and "n17.gpu3" in out


def test_nvl36x2_pays_the_extra_switch_chip_between_its_racks():
    x2, rack = load_system("gb200-nvl36x2"), load_system("gb200-nvl72")
    chip = 0.5      # catalog nvswitch4 lat_us (an estimate)
    # a ring over 72 GPUs in index order crosses between the two racks twice: 2 of its 72 hops
    # each of 2 x 71 steps cross one more switch chip
    ring = [C.predict(t, "all_reduce", 8, algo="ring", proto="LL").time_us for t in (x2, rack)]
    assert ring[0] - ring[1] == pytest.approx(2 * 71 * 2 / 72 * chip)
    # the chain (tree) crosses once, up and down; NVLS reduces and multicasts across once each
    tree = [C.predict(t, "all_reduce", 8, algo="tree", proto="LL").time_us for t in (x2, rack)]
    assert tree[0] - tree[1] == pytest.approx(2 * chip)
    nvls = [C.predict(t, "all_reduce", 8, algo="nvls").time_us for t in (x2, rack)]
    assert nvls[0] - nvls[1] == pytest.approx(2 * chip)
    # half of each chip's ports go to the other rack: the bandwidth is the NVL72's
    big = [C.predict(t, "all_reduce", 8 * 2**30).busbw for t in (x2, rack)]
    assert big[0] == pytest.approx(big[1], rel=1e-4)
    # 36 GPUs in one rack never cross
    one = [C.predict(t, "all_reduce", 8, 36, algo="ring", proto="LL").time_us for t in (x2, rack)]
    assert one[0] == pytest.approx(one[1])


def test_a_job_on_two_trays_of_an_nvl72_rack_is_built_on_the_rack_switches(cli):
    # `nvlink_domain` larger than the system: its trays are part of one domain (two compute
    # trays of a 72-GPU NVLink domain), on the whole domain's NVLink switches
    t = from_spec({"gpu": "GB200", "gpus_per_node": 4, "nodes": 2, "nvlink_domain": 72})
    assert (t.meta["nvlink_domain"], t.meta["domains"], t.meta["nodes_per_domain"]) == (8, 1, 2)
    sup = t.meta["supernode"]
    assert (sup["domain_gpus"], sup["domain_trays"], sup["trays"]) == (72, 18, 2)
    assert (sup["switch_trays"], sup["chips"], sup["ports_used"]) == (9, 18, 8 * 18)
    # exact links: every GPU to the one switch fabric with its 18 NVLink links, nothing else
    nv = [ln for ln in t.links if ln.kind == "nvlink"]
    assert len(nv) == 8 and {ln.count for ln in nv} == {18}
    assert {ln.b if ln.a.startswith("n") else ln.a for ln in nv} == {"d0.nvsw"}
    assert len(t.gpus()) == 8 and len(t.nics()) == 8          # 4 ConnectX-7 per tray
    assert path(t, "n0.gpu0", "n1.gpu3").type == "NV18"
    # collectives over NVLink (NVLS across the two trays), not over the scale-out NICs
    assert C.layout(t).nodes == 1
    small, big = (C.predict(t, "all_reduce", s) for s in (8, 8 * 2**30))
    assert big.algo == "nvls" and "nic" not in big.bottleneck
    assert small.algo in ("ring", "tree", "nvls")
    code, out, _ = cli("show", "gpu=GB200,nodes=2,gpus_per_node=4,nvlink_domain=72")
    assert code == 0 and "8 GPUs = 2 trays of 4 (part of a 72-GPU domain of 18 trays)" in out
    # a domain that neither divides the GPUs nor holds them all is still refused
    with pytest.raises(InputError, match="or exceeds them, got 16"):
        from_spec({"gpu": "GB200", "gpus_per_node": 4, "nodes": 6, "nvlink_domain": 16})
