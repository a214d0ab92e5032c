"""The training section of compare and its HTML report."""

import json

from gpufabric.report.training import ARCHETYPES, scaling, section_html, table_rows


def test_pcie_with_slow_roce_scales_worse_than_nvswitch_with_8_ndr():
    arch = {k: ARCHETYPES[k] for k in ("PCIe box, 2x RoCE 100", "NVSwitch, 8x IB NDR")}
    d = scaling(archetypes=arch, models=("llama2-7b",), gpus=(8, 64))
    eff = {r["archetype"]: r["scaling_efficiency"] for r in d["rows"] if r["gpus"] == 64}
    assert eff["PCIe box, 2x RoCE 100"] < 0.8 < eff["NVSwitch, 8x IB NDR"]
    pcie = next(r for r in d["rows"] if r["gpus"] == 64 and r["archetype"].startswith("PCIe"))
    assert pcie["bottleneck"].startswith("data-parallel gradient reduction is")
    assert "2x roce-100 per node" in pcie["bottleneck"]
    assert [r[:2] for r in table_rows(d)] == [("PCIe box, 2x RoCE 100", "llama2-7b"),
                                              ("NVSwitch, 8x IB NDR", "llama2-7b")]
    page = section_html(d)
    assert page.count("<svg") == 2 and "llama2-7b" in page


def test_compare_json_and_report_carry_the_training_section(cli, tmp_path):
    rep = tmp_path / "r.html"
    code, out, _ = cli("compare", "hgx-h100", "-o", str(rep), "--json")
    assert code == 0
    tr = json.loads(out)["training"]
    assert tr["gpus"] == [8, 16, 32, 64, 128, 256] and len(tr["archetypes"]) == 7
    assert "Training: data-parallel scaling" in rep.read_text()
    code, out, _ = cli("compare", "hgx-h100", "--no-html", "--no-training", "--json")
    assert json.loads(out)["training"] is None
