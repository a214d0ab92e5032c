"""The gpufabric command for topology: systems, show, p2p, topo, import, and bad input."""

import json
from pathlib import Path

import pytest

from gpufabric.topology.build import load as load_system
from gpufabric.topology import nvsmi

FIXTURES = Path(__file__).parent / "fixtures" / "nvsmi"


def test_systems_lists_presets_as_json(cli):
    code, out, _ = cli("systems", "--json")
    rows = json.loads(out)
    assert code == 0
    assert {"name": "dgx-a100", "compare": True} .items() <= next(
        r for r in rows if r["name"] == "dgx-a100").items()


def test_show_reports_lanes_paths_and_warnings(cli):
    code, out, _ = cli("show", "pcie-direct-8gpu", "--json")
    data = json.loads(out)
    assert code == 0
    assert [(r["used"], r["free"]) for r in data["lanes"]] == [(64, 16), (64, 16)]
    assert data["paths"]["labels"] == [f"GPU{i}" for i in range(8)]
    assert data["paths"]["type"][0][:5] == ["X", "NODE", "NODE", "NODE", "SYS"]
    assert data["paths"]["bw_GBps"][0][1] == 31.5


def test_show_prints_a_readable_table(cli):
    code, out, _ = cli("show", "hgx-h100")
    assert code == 0
    assert "PCIe lanes at the CPU root ports" in out and "NV18 450" in out


def test_p2p_matrix_marks_pairs_without_peer_to_peer(cli):
    code, out, _ = cli("p2p", "gpu=RTX-4090,gpus_per_node=4,scale_up=pcie", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["gpus"] == ["GPU0", "GPU1", "GPU2", "GPU3"]
    assert data["p2p"][0] == [True, False, False, False]
    assert data["bw_GBps"][0][1] == 31.5


def test_topo_prints_the_real_hgx_h100_matrix(cli):
    code, out, _ = cli("topo", "hgx-h100")
    assert code == 0
    real = nvsmi.parse((FIXTURES / "hgx_h100_nv18.txt").read_text())
    assert nvsmi.parse(out).paths == real.paths


def test_import_then_topo_gives_the_same_matrix_back(cli, tmp_path):
    out_file = tmp_path / "dgx.yaml"
    src = FIXTURES / "dgx_a100_nv12.txt"
    code, out, err = cli("import", "nvidia-smi", str(src), "-o", str(out_file),
                         "--gpu", "A100-SXM4-80GB")
    assert code == 0, err
    assert out.strip() == f"wrote {out_file}: 8 GPUs, 10 NICs"
    code, out, _ = cli("topo", str(out_file))
    assert code == 0
    again, real = nvsmi.parse(out), nvsmi.parse(src.read_text())
    assert (again.labels, again.paths, again.cpu_affinity) == (real.labels, real.paths,
                                                               real.cpu_affinity)


@pytest.mark.parametrize("content, expected", [
    ("gpu: [H100-SXM\n", "not valid YAML"),
    ("gpu: H100-SXM\nscale_up: warp\n", "scale_up: got 'warp'; allowed: nvswitch"),
    ("gpu: A100-PCIe\ngpus_per_node: 11\nscale_up: pcie\n", "needs 176 PCIe lanes"),
    ("gpu: [GTX-1080-Ti, RTX-3090]\nscale_up: sli\nbridge: sli-hb\n", "needs identical GPUs"),
])
def test_bad_files_give_one_line_and_exit_2(cli, tmp_path, content, expected):
    f = tmp_path / "box.yaml"
    f.write_text(content)
    code, out, err = cli("show", str(f))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and str(f) in err and expected in err


def test_unknown_system_suggests_a_preset(cli):
    code, _, err = cli("show", "HGX_H100")
    assert code == 2
    assert "did you mean 'hgx-h100'?" in err


def test_import_of_a_malformed_file_writes_nothing(cli, tmp_path):
    bad = tmp_path / "topo.txt"
    bad.write_text("\tGPU0\tGPU1\nGPU0\t X \tNV99x\nGPU1\tNV4\t X \n")
    out_file = tmp_path / "out.yaml"
    code, _, err = cli("import", "nvidia-smi", str(bad), "-o", str(out_file))
    assert code == 2 and str(bad) in err and err.count("\n") == 1
    assert not out_file.exists()


def test_compare_puts_systems_side_by_side_and_writes_the_report(cli, tmp_path):
    from gpufabric import collectives
    report = tmp_path / "report.html"
    code, out, _ = cli("compare", "pcie-direct-8gpu", "hgx-h100", "-o", str(report), "--json",
                       "--no-training")
    data = json.loads(out)
    assert code == 0 and data["report"] == str(report)
    pcie, hgx = data["systems"]
    assert (pcie["name"], pcie["lanes_used"], pcie["lanes_free"]) == ("pcie-direct-8gpu", 128, 32)
    assert hgx["path_mix"] == {"NV18": 28} and hgx["nvswitches"] == 1
    assert hgx["collectives"] == collectives.summary(load_system("hgx-h100"))
    # what NVSwitch buys over PCIe, in the model's numbers
    assert (hgx["collectives"]["allreduce_busbw_1GB"]
            > 15 * pcie["collectives"]["allreduce_busbw_1GB"])
    body = report.read_text().split("</head>", 1)[1]
    assert body.count("<svg") == 2 and "<h2>hgx-h100</h2>" in body      # the two drawings
    assert body.count('class="plotly-graph-div"') == 2     # all_reduce and all_to_all charts


def test_compare_default_runs_every_archetype(cli):
    from gpufabric.topology import presets
    code, out, _ = cli("compare", "--no-html", "--json", "--no-training")
    names = [r["name"] for r in json.loads(out)["systems"]]
    assert code == 0 and names == presets.compared()
    assert {"pcie-direct-8gpu", "hgx-h100-4node-roce400", "gb200-nvl72"} <= set(names)
