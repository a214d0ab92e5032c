"""The HTML report: self-contained, one drawing per system, curves per operation."""

from gpufabric.report.html import busbw_figure, draw, render_report
from gpufabric.report.summary import system_summary
from gpufabric.topology.build import load as load_system


def test_report_has_a_table_and_a_drawing_per_system_and_no_external_resources():
    topos = [load_system(n) for n in ("dgx1-v100", "pcie-switch-cascade")]
    rows = [system_summary(t) for t in topos]
    curves = {"all_reduce": {t.name: [{"size": 8, "busbw": 0.1}, {"size": 2**30, "busbw": 100.0}]
                             for t in topos}}
    page = render_report(topos, rows, curves)
    assert page.startswith("<!DOCTYPE html>")
    body = page[page.index("</head>"):]
    assert body.count("<svg") == 2          # two topology drawings (charts are plotly's)
    assert body.count('class="plotly-graph-div"') == 1      # one chart
    assert "<h2>dgx1-v100</h2>" in page and "<h2>pcie-switch-cascade</h2>" in page
    # one offline file: plotly.js embedded once, nothing loaded from elsewhere
    assert page.count("<script type='text/javascript'>") == 1
    assert "<script src=" not in body and "cdn.plot.ly" not in body


def test_drawing_shows_every_device_of_the_node_and_every_link():
    t = load_system("hgx-h100")
    svg = draw(t)
    assert svg.count("<rect") == len(t.devices)
    assert svg.count("<path") == len(t.links)


def test_chart_has_one_line_per_system_on_log_axes_that_keep_every_positive_point():
    fig = busbw_figure({"a": [{"size": 8, "busbw": 1e-3}, {"size": 1024, "busbw": 2.0}],
                        "b": [{"size": 8, "busbw": 0.5}, {"size": 1024, "busbw": 0.0}]},
                       "all_reduce")
    assert [t.name for t in fig.data] == ["a", "b"]
    assert list(fig.data[0].y) == [1e-3, 2.0] and list(fig.data[1].y) == [0.5]
    assert fig.layout.xaxis.type == fig.layout.yaxis.type == "log"
    assert fig.layout.xaxis.range is None and fig.layout.yaxis.range is None   # nothing clipped
    assert fig.data[0].line.color != fig.data[1].line.color


def test_drawing_legend_names_only_the_link_kinds_drawn():
    svg = draw(load_system("pcie-direct-8gpu"))
    legend = svg[svg.rindex("<text"):]
    assert "pcie" in legend and "nvlink" not in legend and "xgmi" not in legend


def test_gb200_tray_drawing_shows_its_nvlink_ports_to_the_domain():
    svg = draw(load_system("gb200-nvl72"))
    assert svg.count("18 ports") == 4          # 4 GPUs a tray, 18 NVLink links each
    assert "NVLink domain switches (72 GPUs)" in svg
