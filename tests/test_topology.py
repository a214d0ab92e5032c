"""The topology model: presets, rules, paths. Tests read like examples of use."""

from pathlib import Path

import pytest

from gpufabric.topology.build import load as load_system
from gpufabric.errors import InputError
from gpufabric.report.summary import system_summary
from gpufabric.topology import nvsmi, presets, rules
from gpufabric.topology.build import from_spec, load
from gpufabric.topology.paths import gpu_pair_bw, path

FIXTURES = Path(__file__).parent / "fixtures" / "nvsmi"

REQUIRED_PRESETS = [
    "pcie-direct-8gpu", "pcie-switch-single-root", "pcie-switch-dual-root", "pcie-switch-cascade",
    "nvlink-bridge-pairs", "dgx1-v100", "dgx-a100", "hgx-h100", "hgx-h200", "hgx-b200",
    "gb200-nvl72", "t4-cloud-server", "sli-2way", "crossfire-2way"]


def test_every_required_preset_exists_and_builds():
    assert set(REQUIRED_PRESETS) <= set(presets.names())
    for name in presets.names():
        t = load_system(name, materialize_nodes=4)     # a cluster's first nodes (domains)
        assert t.gpus(), name


@pytest.mark.parametrize("preset, fixture", [("dgx-a100", "dgx_a100_nv12.txt"),
                                             ("hgx-h100", "hgx_h100_nv18.txt")])
def test_preset_path_matrix_is_the_real_machines(preset, fixture):
    real = nvsmi.parse((FIXTURES / fixture).read_text(), file=fixture)
    modeled = nvsmi.from_topology(load_system(preset))
    assert modeled.labels == real.labels
    assert modeled.paths == real.paths


def test_dgx_a100_affinity_columns_are_the_real_ones():
    real = nvsmi.parse((FIXTURES / "dgx_a100_nv12.txt").read_text())
    modeled = nvsmi.from_topology(load_system("dgx-a100"))
    assert modeled.cpu_affinity == real.cpu_affinity
    assert modeled.numa_affinity == real.numa_affinity == ["3", "3", "1", "1", "7", "7", "5", "5"]


def test_pcie_direct_8gpu_uses_128_of_160_milan_lanes():
    t = load_system("pcie-direct-8gpu")
    budget = rules.lane_budget(t)
    assert [(r["lanes"], r["used"], r["free"]) for r in budget] == [(80, 64, 16), (80, 64, 16)]
    s = system_summary(t)
    assert (s["lanes_used"], s["lanes_total"], s["lanes_free"]) == (128, 160, 32)
    assert s["path_mix"] == {"NODE": 12, "SYS": 16}


def test_pcie_switch_layouts_classify_as_nvidia_smi_does():
    single = load_system("pcie-switch-single-root")
    dual = load_system("pcie-switch-dual-root")
    cascade = load_system("pcie-switch-cascade")
    assert path(single, "n0.gpu0", "n0.gpu1").type == "PIX"
    assert path(single, "n0.gpu0", "n0.gpu4").type == "NODE"
    assert path(dual, "n0.gpu0", "n0.gpu4").type == "SYS"
    assert path(cascade, "n0.gpu0", "n0.gpu4").type == "PXB"
    # switches are what lets 8 GPUs hang off 32 (or 16) root-port lanes
    assert system_summary(single)["lanes_used"] == 32
    assert system_summary(cascade)["lanes_used"] == 16


def test_pcie_p2p_through_a_switch_stays_below_the_cpu():
    t = load_system("pcie-switch-single-root")
    p = path(t, "n0.gpu0", "n0.gpu1")
    assert p.p2p and not p.via_host
    assert [k for _, _, k in p.links] == ["pcie", "pcie"]
    assert p.bw_GBps == 31.5


def test_geforce_without_p2p_bounces_through_host_memory():
    t = from_spec({"gpu": "RTX-5090", "gpus_per_node": 2, "scale_up": "pcie", "pcie_gen": 5,
                   "host": {"pcie_switches": 1, "sockets": 2}})
    p = path(t, "n0.gpu0", "n0.gpu1")
    assert p.type == "PIX"          # nvidia-smi still calls the wiring PIX ...
    assert not p.p2p and p.via_host  # ... but the data goes up to the CPU and back
    assert len(p.links) == 4
    assert any("peer-to-peer over PCIe is off" in w for w in rules.warnings(t))


def test_nvlink_bridge_pairs_are_nv12_inside_a_pair_only():
    t = load_system("nvlink-bridge-pairs")
    assert path(t, "n0.gpu0", "n0.gpu1").type == "NV12"
    assert path(t, "n0.gpu0", "n0.gpu1").bw_GBps == 300.0
    assert path(t, "n0.gpu1", "n0.gpu2").type == "NODE"


def test_dgx1_hybrid_cube_mesh():
    t = load_system("dgx1-v100")
    row0 = [path(t, "n0.gpu0", f"n0.gpu{j}").type for j in range(8)]
    assert row0 == ["X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"]
    for g in t.gpus():
        assert sum(ln.count for _, ln in t.neighbors(g.id) if ln.kind == "nvlink") == 6


def test_nvswitch_gives_every_pair_full_nvlink_rate():
    bw = gpu_pair_bw(load_system("dgx-a100"))
    off = bw[~__import__("numpy").eye(8, dtype=bool)]
    assert off.min() == off.max() == 300.0      # 12 NVLink 3 links x 25 GB/s


def test_gb200_nvl72_is_one_scale_up_domain():
    t = load_system("gb200-nvl72")
    # 18 compute trays of 4 GPUs, each tray a server with its own Grace CPUs and NICs
    assert (len(t.gpus()), t.meta["nodes"], t.meta["domains"]) == (72, 18, 1)
    assert [len(t.gpus(n)) for n in range(18)] == [4] * 18
    assert len(t.nics()) == 72 and len(t.of_kind("cpu")) == 36
    # GPUs of different trays meet in the NVLink switch trays: NV18, 18 x 50 GB/s
    p = path(t, "n0.gpu0", "n17.gpu3")
    assert (p.type, p.bw_GBps, p.links[0][1]) == ("NV18", 900.0, "d0.nvsw")
    assert all(ln.kind == "c2c" for ln in t.links if ln.a.endswith("cpu0") and "gpu" in ln.b)
    sup = t.meta["supernode"]
    assert (sup["switch_trays"], sup["chips"], sup["ports_used"]) == (9, 18, 72 * 18)


def test_cluster_has_nics_leaves_and_fabric_metadata():
    t = from_spec({"gpu": "H100-SXM", "nodes": 4, "nics_per_node": 8, "nic": "ib-ndr",
                   "fabric": {"topology": "rail-optimized", "oversubscription": 2}})
    assert len(t.gpus()) == 32 and len(t.nics()) == 32
    fab = t.meta["fabric"]
    assert (fab["topology"], fab["oversubscription"], fab["leaves"]) == ("rail-optimized", 2.0, 8)
    # each rail's NICs meet on their own leaf
    leaf_of = {ln.a: ln.b for ln in t.links if ln.kind == "net" and ".nic" in ln.a}
    assert leaf_of["n0.nic3"] == leaf_of["n3.nic3"] != leaf_of["n0.nic2"]


def test_materialize_nodes_keeps_the_true_size():
    t = from_spec({"gpu": "H100-SXM", "nodes": 2048, "nic": "ib-ndr"}, materialize_nodes=2)
    assert t.meta["nodes"] == 2048 and len(t.gpus()) == 16
    assert t.meta["fabric"]["leaves_per_rail"] == 64


# ---- rules ------------------------------------------------------------------------------------
def test_lanes_beyond_the_milan_budget_are_rejected():
    with pytest.raises(InputError, match=r"needs 176 PCIe lanes .* provide 160"):
        from_spec({"gpu": "A100-PCIe", "gpus_per_node": 11, "scale_up": "pcie",
                   "host": {"cpu": "EPYC-7763", "sockets": 2}})
    # nine x16 GPUs fit in 144 of 160 lanes, but not with the two x16 NICs a server needs
    with pytest.raises(InputError, match=r"needs 176 PCIe lanes"):
        from_spec({"gpu": "A100-PCIe", "gpus_per_node": 9, "scale_up": "pcie",
                   "nics_per_node": 2, "host": {"cpu": "EPYC-7763", "sockets": 2}})


def test_a_socket_overfilled_is_rejected_even_when_the_host_total_fits():
    with pytest.raises(InputError, match=r"socket 0 .* needs 96 PCIe lanes .* provides 80"):
        from_spec({"gpu": "A100-PCIe", "gpus_per_node": 6, "scale_up": "pcie",
                   "host": {"cpu": "EPYC-7763", "sockets": 2, "pcie_switches": 6,
                            "switch_layout": "single-root"}})


def test_sli_needs_identical_gpus_but_crossfire_does_not():
    with pytest.raises(InputError, match="needs identical GPUs"):
        from_spec({"gpu": ["GTX-1080-Ti", "RTX-3090"], "scale_up": "sli", "bridge": "sli-hb"})
    t = load_system("crossfire-2way")
    assert sorted(g.model for g in t.gpus()) == ["RX-570", "RX-580"]


def test_more_nvlink_links_than_the_gpu_has_is_rejected():
    with pytest.raises(InputError, match=r"uses 18 NVLink links but has 8"):
        from_spec({"gpu": "H800-SXM", "nvlink_links": 18})
    assert from_spec({"gpu": "H800-SXM"}).link("n0.gpu0", "n0.nvsw").count == 8


def test_pcie_switch_with_more_downstream_lanes_than_it_owns_is_rejected():
    with pytest.raises(InputError, match=r"PEX88096\) has 96 lanes but its ports use 144"):
        from_spec({"gpu": "A100-PCIe", "gpus_per_node": 8, "scale_up": "pcie",
                   "host": {"pcie_switches": 1, "switch": "PEX88096"}})


def test_unknown_names_suggest_the_closest():
    with pytest.raises(InputError, match=r"gpu: unknown GPU 'A100-SMX4-80GB'; did you mean "
                       r"'A100-SXM4-80GB'"):
        from_spec({"gpu": "A100-SMX4-80GB"})
    with pytest.raises(InputError, match=r"did you mean 'dgx-a100'"):
        load("DGX_A100")


def test_bad_spec_fields_name_field_and_allowed_values():
    with pytest.raises(InputError, match=r"scale_up: got 'nvlink'; allowed: nvswitch, "):
        from_spec({"gpu": "H100-SXM", "scale_up": "nvlink"})
    with pytest.raises(InputError, match=r"host.sockets: expected an integer >= 1"):
        from_spec({"gpu": "H100-SXM", "host": {"sockets": "two"}})
    with pytest.raises(InputError, match=r"unknown key\(s\) gpus; allowed: gpu, gpus_per_node"):
        from_spec({"gpu": "H100-SXM", "gpus": 8})


def test_system_file_errors_name_the_entry(tmp_path):
    f = tmp_path / "box.yaml"
    f.write_text("devices:\n  - {id: g0, kind: gpu, model: H100-SXM}\n"
                 "links:\n  - {a: g0, b: nowhere, kind: nvlink}\n")
    with pytest.raises(InputError) as e:
        load(str(f))
    assert str(e.value) == f"{f}: links[0].b: no device with id 'nowhere'"


def test_system_file_field_types_are_checked(tmp_path):
    f = tmp_path / "box.yaml"
    f.write_text("devices:\n  - {id: g0, kind: gpu, model: H100-SXM, numa: zero}\nlinks: []\n")
    with pytest.raises(InputError) as e:
        load(str(f))
    assert str(e.value) == (
        f"{f}: devices[0].numa: expected an integer >= -1 and <= 1023, got 'zero'")


def test_p2p_follows_nccl_per_host_cpu_and_routing_agrees():
    from gpufabric.network.routing import Router
    amd = load_system("pcie-direct-8gpu")        # EPYC Milan: NCCL uses P2P across sockets
    intel = load_system("t4-cloud-server")       # Xeon Gold 6226R: not across UPI
    broadwell = load_system("dgx1-v100")         # Broadwell: not through the CPU at all
    assert (path(amd, "n0.gpu0", "n0.gpu4").type, path(amd, "n0.gpu0", "n0.gpu4").p2p) == \
        ("SYS", True)
    assert (path(intel, "n0.gpu0", "n0.gpu1").type, path(intel, "n0.gpu0", "n0.gpu1").p2p) == \
        ("NODE", True)
    assert (path(intel, "n0.gpu0", "n0.gpu2").type, path(intel, "n0.gpu0", "n0.gpu2").p2p) == \
        ("SYS", False)
    assert path(broadwell, "n0.gpu0", "n0.gpu5").p2p is False
    for t in (amd, intel, broadwell, load_system("pcie-switch-dual-root")):
        router = Router(t)
        gpus = [g.id for g in t.gpus()]
        for a in gpus:
            for b in gpus:
                if a != b and not path(t, a, b).type.startswith("NV"):
                    assert (router.route(a, b).transport == "pcie") == path(t, a, b).p2p, (a, b)


def test_inline_specs_parse_alike_the_first_time_and_after():
    # the values' parses are kept (the advisor parses 100,000 specs of a few values), a list
    # is not: each spec gets its own
    from gpufabric.topology.build import parse_inline
    text = "gpu=H100-SXM,nodes=4,fabric.oversubscription=1.5,fabric.tiers=[1,2],x=off"
    first, again = parse_inline(text), parse_inline(text)
    assert first == again == {"gpu": "H100-SXM", "nodes": 4, "x": False,
                              "fabric": {"oversubscription": 1.5, "tiers": [1, 2]}}
    assert first["fabric"]["tiers"] is not again["fabric"]["tiers"]
    assert parse_inline("a=[1,2],b=3") == {"a": [1, 2], "b": 3}
