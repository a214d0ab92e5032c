"""The hardware catalog: every table loads, every number has a source, key facts hold.

These tests double as examples of looking things up:

>>> from gpufabric import catalog
>>> catalog.gpu("h800").peer_links
8
"""

from __future__ import annotations

import dataclasses

import pytest

from gpufabric import catalog
from gpufabric.errors import InputError

TABLES = sorted(catalog.TABLES)


def entries(kind: str) -> list:
    return [catalog.get(kind, name) for name in catalog.names(kind)]


# -- every table ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", TABLES)
def test_every_table_loads_and_is_not_empty(kind):
    assert len(catalog.names(kind)) >= 4


@pytest.mark.parametrize("kind", TABLES)
def test_every_entry_names_a_source(kind):
    for e in entries(kind):
        assert e.source.strip(), f"{kind} {e.name} has no source"
        fields = {f.name for f in dataclasses.fields(e)}
        for field, src in e.sources.items():
            assert field in fields, f"{kind} {e.name}: sources names unknown field {field!r}"
            assert src.strip(), f"{kind} {e.name}: empty source for {field}"


@pytest.mark.parametrize("kind", TABLES)
def test_names_and_aliases_resolve_to_their_entry(kind):
    for e in entries(kind):
        for key in (e.name, *e.aliases):
            assert catalog.get(kind, key) is e
            assert catalog.get(kind, str(key).upper()) is e
            assert catalog.get(kind, str(key).lower()) is e


@pytest.mark.parametrize("kind", TABLES)
def test_numbers_are_positive(kind):
    for e in entries(kind):
        for f in dataclasses.fields(e):
            v = getattr(e, f.name)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                assert v >= 0, f"{kind} {e.name}.{f.name} = {v}"


# -- lookups and errors -----------------------------------------------------------------------

def test_aliases_are_case_insensitive():
    assert catalog.gpu("h100").name == "H100-SXM"
    assert catalog.gpu("NVIDIA H100 80GB HBM3").name == "H100-SXM"
    assert catalog.gpu("nvidia h100 80gb hbm3").name == "H100-SXM"
    assert catalog.gpu("a100").name == "A100-SXM4-80GB"
    assert catalog.gpu("V100").name == "V100-SXM2-32GB"
    assert catalog.gpu("v100m16").name == "V100-SXM2-16GB"
    assert catalog.cpu("milan").name == "EPYC-7763"
    assert catalog.peer_link("Infinity-Fabric").name == "xgmi3"
    assert catalog.net_speed("NDR").name == "ib-ndr"


def test_unknown_name_raises_input_error_with_closest_suggestion():
    with pytest.raises(InputError) as err:
        catalog.gpu("H100-SXN")
    msg = str(err.value)
    assert "unknown GPU 'H100-SXN'" in msg
    assert "did you mean 'H100-SXM'?" in msg


def test_unknown_name_error_carries_file_and_field():
    with pytest.raises(InputError) as err:
        catalog.cpu("EPYK-7763", file="box.yaml", field="host.cpu")
    assert err.value.file == "box.yaml"
    assert err.value.field == "host.cpu"
    assert "did you mean 'EPYC-7763'?" in str(err.value)


def test_unknown_network_speed_suggests_a_known_one():
    with pytest.raises(InputError, match="did you mean 'ib-ndr'"):
        catalog.net_speed("ib-nd")


# -- PCIe -------------------------------------------------------------------------------------

def test_pcie_x16_rates_per_direction():
    assert catalog.pcie_gen(3).x16_GBps == 15.75
    assert catalog.pcie_gen(4).x16_GBps == 31.5
    assert catalog.pcie_gen(5).x16_GBps == 63
    assert catalog.pcie_gen(6).x16_GBps == 128


def test_pcie_nccl_rates_follow_width_times_speed_over_80():
    # NCCL: x16 * (60, 120, 240, 480) / 80
    assert [catalog.pcie_gen(g).nccl_x16_GBps for g in (3, 4, 5, 6)] == [12, 24, 48, 96]


def test_pcie_generation_lookup_forms():
    assert catalog.pcie_gen("gen4") is catalog.pcie_gen(4) is catalog.pcie_gen("4")
    assert catalog.pcie_gen(4).bw_GBps(8) == 15.75
    with pytest.raises(InputError, match="unknown PCIe generation"):
        catalog.pcie_gen(7)


# -- GPU links, NVSwitch, bridges -------------------------------------------------------------

def test_nvlink_generations_per_link_per_direction():
    raw = {n: catalog.peer_link(n).per_link_GBps for n in
           ("nvlink1", "nvlink2", "nvlink3", "nvlink4", "nvlink5")}
    assert raw == {"nvlink1": 20, "nvlink2": 25, "nvlink3": 25, "nvlink4": 25, "nvlink5": 50}


def test_nccl_nvlink_rates_match_topo_h():
    nccl = {n: catalog.peer_link(n).nccl_GBps for n in
            ("nvlink1", "nvlink2", "nvlink3", "nvlink4", "nvlink5", "nvlink3-ga102")}
    assert nccl == {"nvlink1": 18.0, "nvlink2": 20.0, "nvlink3": 20.0, "nvlink4": 20.6,
                    "nvlink5": 40.1, "nvlink3-ga102": 12.0}


def test_nccl_usable_rate_never_exceeds_the_raw_rate():
    for pl in entries("peer_link"):
        assert pl.nccl_GBps <= pl.per_link_GBps, pl.name
    for g in entries("pcie"):
        assert g.nccl_x16_GBps <= g.x16_GBps, g.name


def test_a_gpu_total_nvlink_bandwidth_matches_its_datasheet():
    def total(name):  # per direction
        g = catalog.gpu(name)
        return g.peer_links * catalog.peer_link(g.peer_link).per_link_GBps

    assert total("V100") == 150       # 300 GB/s bidirectional
    assert total("A100-SXM4-80GB") == 300
    assert total("H100-SXM") == 450
    assert total("H800-SXM") == 200   # 400 GB/s bidirectional
    assert total("B200") == 900       # 1.8 TB/s bidirectional
    assert total("MI300X") == 448     # 896 GB/s bidirectional


def test_mi300x_uses_infinity_fabric():
    mi = catalog.gpu("MI300X")
    assert (mi.vendor, mi.peer_link, mi.peer_links, mi.form_factor) == ("amd", "xgmi3", 7, "oam")
    assert catalog.peer_link("xgmi3").nccl_GBps == 48.0


def test_nvswitch_generations():
    gens = {s.name: (s.peer_link, s.ports, s.nvls) for s in entries("nvswitch")}
    assert gens == {
        "nvswitch1": ("nvlink2", 18, False),
        "nvswitch2": ("nvlink3", 36, False),
        "nvswitch3": ("nvlink4", 64, True),
        "nvswitch4": ("nvlink5", 72, True),
    }


def test_nvlink_bridges_carry_the_cards_links():
    ampere = catalog.bridge("nvlink-bridge-ampere")
    assert (ampere.links, ampere.bw_GBps, ampere.max_gpus) == (12, 300, 2)
    assert catalog.bridge("nvlink-bridge-hopper").links == 12
    rtx = catalog.bridge("nvlink-bridge-rtx3090")
    assert (rtx.links, rtx.bw_GBps) == (4, 56.25)
    for br in entries("bridge"):
        if br.kind == "nvlink":
            assert br.identical_gpus


def test_nvlink_bridge_rate_is_links_times_the_link_rate():
    for g in entries("gpu"):
        for b in g.bridges:
            br = catalog.bridge(b)
            if br.kind == "nvlink":
                pl = catalog.peer_link(g.peer_link)
                assert br.links == g.peer_links, (g.name, b)
                assert br.bw_GBps == pytest.approx(br.links * pl.per_link_GBps), (g.name, b)


def test_sli_needs_identical_gpus_and_crossfire_does_not():
    sli = catalog.bridge("sli-hb")
    assert sli.kind == "sli" and sli.identical_gpus and sli.bw_GBps == 0
    for name in ("crossfire-bridge", "crossfire-xdma"):
        cf = catalog.bridge(name)
        assert cf.kind == "crossfire" and not cf.identical_gpus


# -- GPUs -------------------------------------------------------------------------------------

REQUIRED_GPUS = [
    "P100", "V100-SXM2-32GB", "V100-SXM2-16GB", "A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIe",
    "H100-SXM", "H100-PCIe", "H200-SXM", "H800-SXM", "H20", "B200", "T4", "A10", "RTX-3090",
    "RTX-4090", "RTX-5090", "RTX-PRO-6000", "RTX-4070-Ti-SUPER", "MI300X", "GTX-1080-Ti",
    "RX-580", "RX-570",
]


@pytest.mark.parametrize("name", REQUIRED_GPUS)
def test_required_gpu_is_in_the_catalog(name):
    assert catalog.gpu(name).name == name


def test_key_gpu_facts():
    assert catalog.gpu("H800-SXM").peer_links == 8
    assert catalog.gpu("H20").peer_links == 18
    assert catalog.gpu("B200").peer_link == "nvlink5" and catalog.gpu("B200").peer_links == 18
    assert catalog.gpu("H100-SXM").fp16_tflops == 989          # dense, not 1979 sparse
    assert catalog.gpu("A100-SXM4-80GB").fp16_tflops == 312    # dense, not 624 sparse
    assert catalog.gpu("H200-SXM").memory_GB == 141
    assert catalog.gpu("A100-SXM4-80GB").mem_bw_GBps == 2039
    assert catalog.gpu("A100-SXM4-40GB").mem_bw_GBps == 1555


def test_todays_gpus_by_their_datasheets():
    """Blackwell Ultra, MI325X / MI355X and H200 NVL: dense rates per GPU (half the sparse
    figure), memory and board power as their vendors state them."""
    gb300, b300 = catalog.gpu("GB300"), catalog.gpu("NVIDIA B300")
    assert (gb300.fp4_tflops, gb300.fp8_tflops, gb300.memory_GB) == (15000, 5000, 279)
    assert (b300.fp4_tflops, b300.fp16_tflops, b300.memory_GB) == (13500, 2250, 288)
    mi355 = catalog.gpu("AMD Instinct MI355X")
    assert (mi355.fp16_tflops, mi355.fp8_tflops, mi355.memory_GB, mi355.tdp_W) == \
        (2516.6, 5033.2, 288, 1400)
    assert catalog.peer_link(mi355.peer_link).per_link_GBps == 76.8     # 153.6 GB/s both ways
    mi325 = catalog.gpu("MI325X")
    assert (mi325.memory_GB, mi325.mem_bw_GBps, mi325.fp16_tflops) == (256, 6000, 1307.4)
    nvl = catalog.gpu("NVIDIA H200 NVL")
    assert (nvl.fp16_tflops, nvl.tdp_W, catalog.bridge(nvl.bridges[0]).links) == (835.5, 600, 18)


def test_a100_pcie_is_bridge_capable():
    g = catalog.gpu("A100-PCIe")
    assert (g.memory_GB, g.peer_link, g.peer_links) == (80, "nvlink3", 12)
    assert g.form_factor == "pcie" and "nvlink-bridge-ampere" in g.bridges
    assert "nvlink-bridge-hopper" in catalog.gpu("H100-PCIe").bridges


@pytest.mark.parametrize("name", ["RTX-3090", "RTX-4090", "RTX-5090", "RTX-4070-Ti-SUPER",
                                  "GTX-1080-Ti"])
def test_geforce_cards_have_no_pcie_peer_to_peer(name):
    assert catalog.gpu(name).p2p_pcie is False


def test_professional_and_datacenter_cards_do_peer_to_peer():
    for name in ("RTX-PRO-6000", "A100-PCIe", "H100-PCIe", "T4", "A10", "L40S"):
        assert catalog.gpu(name).p2p_pcie is True, name


def test_geforce_nvlink_and_legacy_bridges():
    assert catalog.gpu("RTX-3090").bridges == ("nvlink-bridge-rtx3090",)
    assert catalog.gpu("GTX-1080-Ti").bridges[0] == "sli-hb"
    # two different AMD cards that can share a CrossFire setup
    assert "crossfire-xdma" in catalog.gpu("RX-580").bridges
    assert "crossfire-xdma" in catalog.gpu("RX-570").bridges


def test_gpu_references_point_at_real_entries():
    for g in entries("gpu"):
        if g.peer_link:
            catalog.peer_link(g.peer_link)
            assert g.peer_links > 0, g.name
        else:
            assert g.peer_links == 0, g.name
        for b in g.bridges:
            catalog.bridge(b)
        catalog.pcie_gen(g.pcie_gen)
        assert g.form_factor in {"sxm", "pcie", "oam"}, g.name
        assert (g.slot_width == 0) == (g.form_factor != "pcie"), g.name
        assert g.vendor in {"nvidia", "amd"}, g.name


def test_nvidia_smi_names_resolve():
    for smi, name in [("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
                      ("NVIDIA A100 80GB PCIe", "A100-PCIe"),
                      ("Tesla V100-SXM2-32GB", "V100-SXM2-32GB"),
                      ("NVIDIA H200", "H200-SXM"),
                      ("NVIDIA GeForce RTX 4090", "RTX-4090"),
                      ("Tesla T4", "T4")]:
        assert catalog.gpu(smi).name == name


# -- CPUs and PCIe switches -------------------------------------------------------------------

def test_cpu_lane_budgets():
    milan = catalog.cpu("EPYC-7763")
    assert milan.lanes(1) == 128
    assert milan.lanes(2) == 160
    assert catalog.cpu("Xeon-Gold-6226R").lanes(1) == 48
    assert catalog.cpu("Xeon-Gold-6226R").lanes(2) == 96
    assert catalog.cpu("Xeon-Platinum-8480+").lanes(1) == 80
    assert catalog.cpu("Xeon-Platinum-8380").pcie_gen == 4
    assert catalog.cpu("EPYC-9654").pcie_gen == 5


def test_nccl_cross_socket_rates():
    nccl = {c.name: c.nccl_intersocket_GBps for c in entries("cpu")}
    assert nccl["Xeon-Gold-6226R"] == 10      # SKL_QPI_BW
    assert nccl["Xeon-Platinum-8380"] == 10   # SKL_QPI_BW (Ice Lake is in NCCL's SKL range)
    assert nccl["Xeon-Platinum-8480+"] == 22  # SRP_QPI_BW
    assert nccl["Xeon-E5-2698-v4"] == 6       # BDW_QPI_BW
    assert nccl["EPYC-7763"] == 24            # AMD_ZEN34_BW
    assert nccl["Grace"] == 6                 # ARM_BW


def test_cpu_shape():
    for c in entries("cpu"):
        assert c.intersocket in {"upi", "xgmi", "c2c", "none"}, c.name
        assert c.host_bridges >= 1 and c.cores > 0 and c.threads_per_core in (1, 2), c.name
        assert c.lanes_2s >= c.lanes_per_socket, c.name
        assert c.nccl_intersocket_GBps < c.intersocket_GBps, c.name
    assert catalog.cpu("Grace").intersocket == "c2c"
    assert catalog.cpu("Grace").intersocket_GBps == 450


def test_pcie_switches():
    assert (catalog.pcie_switch("PEX88096").lanes, catalog.pcie_switch("PEX88096").gen) == (96, 4)
    assert (catalog.pcie_switch("PEX89144").lanes, catalog.pcie_switch("PEX89144").gen) == (144, 5)
    assert catalog.pcie_switch("PEX8796").gen == 3
    for sw in entries("pcie_switch"):
        assert sw.lanes >= 16 and sw.ports >= 2 and 0 < sw.lat_us < 1, sw.name


# -- network ----------------------------------------------------------------------------------

def test_network_speeds_in_GBps():
    bw = {s.name: s.bw_GBps for s in entries("net_speed")}
    assert bw["ib-edr"] == 12.5
    assert bw["ib-hdr"] == 25.0
    assert bw["ib-ndr"] == 50.0
    assert bw["ib-xdr"] == 100.0
    assert bw["roce-100"] == 12.5 and bw["roce-200"] == 25.0 and bw["roce-400"] == 50.0


def test_network_efficiency_comes_from_packet_headers():
    ib, roce = catalog.net_speed("ib-ndr"), catalog.net_speed("roce-400")
    assert ib.efficiency == pytest.approx(4096 / (4096 + 26), abs=0.005)
    assert roce.efficiency == pytest.approx(4096 / (4096 + 82), abs=0.005)
    assert roce.efficiency < ib.efficiency
    assert catalog.net_speed("ib-hdr").switch_lat_us == 0.13
    for s in entries("net_speed"):
        if s.protocol == "roce":
            assert 0.5 <= s.switch_lat_us <= 0.8, s.name


def test_each_network_speed_has_a_matching_nic_and_switch():
    for s in entries("net_speed"):
        nic = catalog.nic(s.nic)
        sw = catalog.net_switch(s.switch)
        assert s.protocol in nic.protocols, s.name
        assert nic.max_gbps >= s.gbps, s.name
        # Ethernet switches (protocol roce) also carry AWS SRD and GCP's TCP
        assert sw.protocol == s.protocol or (sw.protocol, s.protocol) in (
            ("roce", "srd"), ("roce", "tcp")), s.name
        assert sw.ports_at(s.gbps) > 0, s.name
        # framing losses only, unless a measurement says less (EFA v1: 0.67 of line rate,
        # fitted on 2 p4dn nodes)
        measured = not s.sources.get("efficiency", "estimate").startswith("estimate")
        assert (0.6 if measured else 0.9) < s.efficiency < 1, s.name
        assert s.lat_us > s.switch_lat_us > 0, s.name


def test_nic_generations():
    speeds = {n: catalog.nic(n).max_gbps for n in
              ("ConnectX-5", "ConnectX-6", "ConnectX-7", "ConnectX-8")}
    assert speeds == {"ConnectX-5": 100, "ConnectX-6": 200, "ConnectX-7": 400, "ConnectX-8": 800}
    assert catalog.nic("cx7").pcie_gen == 5


def test_network_switch_radix_and_breakouts():
    assert (catalog.net_switch("SB7800").radix, catalog.net_switch("SB7800").gbps) == (36, 100)
    assert (catalog.net_switch("QM8700").radix, catalog.net_switch("QM8700").gbps) == (40, 200)
    assert catalog.net_switch("QM9700").ports_at(400) == 64
    assert catalog.net_switch("SN4700").ports_at(400) == 32
    assert catalog.net_switch("SN4700").ports_at(200) == 64
    assert catalog.net_switch("SN5600").ports_at(800) == 64
    assert catalog.net_switch("SN5600").ports_at(400) == 128
    assert catalog.net_switch("SB7800").ports_at(400) == 0
    assert catalog.net_switch("Q3400").gbps == 800


@pytest.mark.parametrize("name, watts", [("L40S", 350), ("L4", 72), ("RTX-4090", 450),
                                         ("H100-PCIe", 350), ("MI300X", 750)])
def test_a_gpu_s_tdp_is_its_datasheet_figure_with_the_source(cli, name, watts):
    import json
    assert catalog.gpu(name).tdp_W == watts
    rows = json.loads(cli("catalog", "gpus", "--json")[1])
    row = next(r for r in (rows if isinstance(rows, list) else rows["gpu"]) if r["name"] == name)
    assert row["facts"]["tdp_W"] == watts
    assert f"{watts} W" in row["sources"]["tdp_W"]
    assert any(w in row["sources"]["tdp_W"] for w in ("datasheet", "data sheet",
                                                       "specifications"))


def test_a_power_cap_applies_to_a_gpu_whose_tdp_is_now_known(cli):
    args = ("train", "llama3-8b", "gpu=L40S,gpus_per_node=8,scale_up=pcie,nodes=1", "--zero",
            "3", "--recompute", "full", "--json")
    code, out, err = cli(*args)
    assert code == 0, err
    code, capped, err = cli(*args, "--power-cap", "250")
    assert code == 0, err
    assert json_step(capped) > json_step(out)           # a slower tensor clock
    code, _, err = cli(*args, "--power-cap", "400")
    assert err == ("gpufabric: error: --power-cap: must be a number above 0 and at most 350 W "
                   "(L40S's TDP), got 400\n")


def json_step(text: str) -> float:
    import json
    return json.loads(text)["step_time_s"]


def test_help_shows_the_extra_to_install_whole(cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    code, out, _ = cli("k8s", "extender", "--help")
    assert code == 0 and "pip install 'gpufabric[k8s]'" in out
