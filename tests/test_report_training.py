"""The training section of compare and its HTML report."""

import json

from gpufabric.report.training import (above_100, breakdown_figure, efficiency_figure,
                                       footnote, scaling, section_html, sizes, table_rows)
from gpufabric.topology.build import load


def test_pcie_with_slow_roce_scales_worse_than_nvswitch_with_8_ndr():
    systems = {"pcie": load("gpu=H100-PCIe,gpus_per_node=8,scale_up=pcie,nic=roce-100,"
                            "nics_per_node=2"),
               "nvswitch": load("gpu=H100-SXM,gpus_per_node=8,nic=ib-ndr,nics_per_node=8")}
    d = scaling(systems, models=("llama2-7b",), max_gpus=64)
    eff = {r["system"]: r["scaling_efficiency"] for r in d["rows"] if r["gpus"] == 64}
    assert eff["pcie"] < 0.8 < eff["nvswitch"]
    pcie = next(r for r in d["rows"] if r["gpus"] == 64 and r["system"] == "pcie")
    assert pcie["bottleneck"].startswith("data-parallel gradient reduction is")
    assert "2x roce-100 per node" in pcie["bottleneck"]
    assert [r[:3] for r in table_rows(d)] == [("pcie", "llama2-7b", "64"),
                                              ("nvswitch", "llama2-7b", "64")]
    page = section_html(d)
    assert page.count('class="plotly-graph-div"') == 2 and "llama2-7b" in page


def test_sizes_grow_a_networked_design_and_stop_at_a_box_without_nics():
    assert sizes(load("hgx-h100"), 64) == [1, 2, 4, 8, 16, 32, 64]
    assert sizes(load("gpu=A100-PCIe,gpus_per_node=8,scale_up=pcie,nics_per_node=0"),
                 64) == [1, 2, 4, 8]


def test_an_efficiency_above_100_percent_carries_its_reason():
    d = scaling({"hgx-h100": load("hgx-h100")}, models=("llama2-7b",), max_gpus=64)
    over = above_100(d)
    assert over, "ZeRO-1 shards the optimizer step, so per-GPU throughput grows with dp"
    assert all("optimizer step" in r["why"] for r in over)
    assert any(c.endswith("*") for *_, c, _ in table_rows(d))
    assert footnote(d).startswith("* above 100%")


def test_compare_json_and_report_carry_the_training_section(cli, tmp_path):
    rep = tmp_path / "r.html"
    code, out, _ = cli("compare", "hgx-h100", "-o", str(rep), "--json")
    assert code == 0
    tr = json.loads(out)["training"]
    assert tr["systems"] == ["hgx-h100"]               # the system named, not fixed archetypes
    assert sorted({r["gpus"] for r in tr["rows"]}) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert "Training: data-parallel scaling" in rep.read_text()
    code, out, _ = cli("compare", "hgx-h100", "--no-html", "--no-training", "--json")
    assert json.loads(out)["training"] is None


def test_compare_tables_fit_the_terminal_width():
    import os
    import subprocess
    import sys
    env = {**os.environ, "COLUMNS": "80", "GPUFABRIC_PROGRESS": "off"}
    out = subprocess.run([sys.executable, "-c", "from gpufabric.cli import main; main()",
                          "compare", "hgx-h100", "pcie-switch-dual-root", "--no-html"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert any("pcie-switch-dual" in line for line in lines)     # names wrap, not vanish


def _row(system, model, gpus, fits, base, eff, parts):
    return {"system": system, "model": model, "gpus": gpus, "fits": fits, "base_gpus": base,
            "scaling_efficiency": eff, "breakdown_s": parts, "step_time_s": sum(parts.values()),
            "tokens_per_s_per_gpu": 1.0, "bottleneck": "", "memory_GiB_per_gpu": 90.0}


def test_charts_draw_only_what_fits_keep_colours_and_name_their_base():
    """A system that cannot fit a model is not drawn as bars (the table says "does not fit"),
    a system keeps its colour when another has no line on a chart, and each line names the
    size it divides by."""
    cfg = {"micro_batch": 1, "seq_len": 2048, "precision": "bf16", "zero": 1}
    d = {"systems": ["a", "b", "c"], "models": {"m1": cfg, "m2": cfg},
         "rows": [_row("a", "m1", 8, True, 8, 1.0, {"compute": 1.0}),
                  _row("a", "m1", 16, False, 8, None, {"compute": 1.0, "optimizer": 0.1}),
                  _row("b", "m1", 1, False, None, None, {"compute": 2.0}),
                  _row("c", "m1", 2, True, 2, 1.0, {"compute": 1.0, "dp_comm": 0.5}),
                  _row("a", "m2", 8, True, 8, 1.0, {"optimizer": 1.0}),
                  _row("b", "m2", 1, True, 1, 1.0, {"compute": 1.0}),
                  _row("c", "m2", 2, True, 2, 1.0, {"compute": 1.0})]}
    bars = breakdown_figure(d, "m1")
    assert list(bars.data[0].y) == ["a (8 GPUs)", "c (2 GPUs)"]
    colour = {t.name: t.marker.color for m in ("m1", "m2") for t in breakdown_figure(d, m).data}
    assert len(set(colour.values())) == len(colour) == 3      # one colour per part, everywhere
    lines = {m: {t.name: t.line.color for t in efficiency_figure(d, m).data} for m in ("m1", "m2")}
    assert "b (/ 1 GPUs)" not in lines["m1"] and "b (/ 1 GPUs)" in lines["m2"]
    assert lines["m1"]["c (/ 2 GPUs)"] == lines["m2"]["c (/ 2 GPUs)"]
    assert "Not drawn: b" in section_html(d)
