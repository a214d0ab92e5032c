"""The report's fabric drawing and its link-utilisation heat map."""

import re

import pytest

from gpufabric import collectives as C
from gpufabric.report.fabric import MAX_GROUPS, fabric_svg, heat_color, link_utilisation
from gpufabric.topology.build import load as load_system
from gpufabric.topology.build import from_spec, load

SMALL_PODS = {"gpu": "H100-SXM", "nodes": 8, "nic": "ib-ndr",
              "fabric": {"nodes_per_leaf": 2, "pod_nodes": 4, "oversubscription": [1, 4]}}


def test_rack_scale_domains_are_drawn_tray_by_tray():
    svg = fabric_svg(load_system("gb200-nvl72"))
    assert svg.count("<title>compute tray") == 18 and svg.count("NVLink switch tray ") == 9
    assert "72 GPUs in 18 compute trays, 9 NVLink switch trays x 2 nvswitch4" in svg
    al = fabric_svg(load_system("al128-class"))
    assert al.count("<title>compute tray") == 32 and al.count("NVLink switch tray ") == 16


def test_thousands_of_nodes_are_drawn_grouped():
    t = load("gpu=H100-SXM,nodes=2048,nic=ib-ndr", materialize_nodes=4)
    svg = fabric_svg(t, None)
    assert svg.count(": 32 spines</text>") == MAX_GROUPS - 1     # pods 0-3 and the last
    assert "... 11 more pods" in svg and "core: 256 x QM9700 (64p)" in svg
    assert "gpu" not in re.sub(r"\d+ GPUs", "", svg).lower()     # no box per GPU
    assert len(svg) < 60_000


def test_heat_map_is_what_explain_computes():
    t = from_spec(SMALL_PODS)
    util = link_utilisation(t, "all_to_all", 2**30)
    pred = C.predict(t, "all_to_all", 2**30)
    top = max(util, key=util.get)
    assert util[top] == pytest.approx(pred.bottleneck_busy, abs=1e-4)
    assert top == ("fabric.pod0.spine", "fabric.core") and f"({top[0]} -> {top[1]})" in \
        pred.bottleneck
    svg = fabric_svg(t, ("all_to_all", 2**30))
    hot = heat_color(util[top])
    assert re.search(f'stroke="{hot}"[^>]*><title>pod 0 to core, 4:1', svg)


def test_compare_report_has_the_fabric_and_a_chosen_heat_map(cli, tmp_path):
    out = tmp_path / "r.html"
    code, _, _ = cli("compare", "gb200-nvl72", "--heat", "all_to_all:64M", "-o", str(out))
    page = out.read_text()
    assert code == 0 and "<h3>Fabric</h3>" in page
    assert "link utilisation of all_to_all at 67,108,864 B" in page
    code, _, err = cli("compare", "gb200-nvl72", "--heat", "all_to_all:lots", "--no-html")
    assert code == 2 and "--heat" in err
