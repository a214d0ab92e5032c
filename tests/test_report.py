"""The HTML report: self-contained, one drawing per system, curves per operation."""

from gpufabric.report.html import busbw_chart, draw, render_report
from gpufabric.report.summary import system_summary
from gpufabric.topology import presets


def test_report_has_a_table_and_a_drawing_per_system_and_no_external_resources():
    topos = [presets.load(n) for n in ("dgx1-v100", "pcie-switch-cascade")]
    rows = [system_summary(t) for t in topos]
    curves = {"all_reduce": {t.name: [{"size": 8, "busbw": 0.1}, {"size": 2**30, "busbw": 100.0}]
                             for t in topos}}
    page = render_report(topos, rows, curves)
    assert page.startswith("<!DOCTYPE html>")
    assert page.count("<svg") == 3          # two topologies, one chart
    assert "<h2>dgx1-v100</h2>" in page and "<h2>pcie-switch-cascade</h2>" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "<script" not in page


def test_drawing_shows_every_device_of_the_node_and_every_link():
    t = presets.load("hgx-h100")
    svg = draw(t)
    assert svg.count("<rect") == len(t.devices)
    assert svg.count("<path") == len(t.links)


def test_chart_has_one_line_per_system():
    svg = busbw_chart({"a": [{"size": 8, "busbw": 1.0}, {"size": 1024, "busbw": 2.0}],
                       "b": [{"size": 8, "busbw": 0.5}, {"size": 1024, "busbw": 1.0}]},
                      "all_reduce")
    assert svg.count("<path") == 2
