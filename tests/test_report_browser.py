"""The HTML report in a real browser: headless Chromium opens it offline, no console errors, and
every chart is drawn with axes that carry ticks and titles.

Needs Chromium (Debian's ``chromium`` package; CI installs it) and Playwright (the ``test``
extra). Without a browser the test is skipped, except where ``GPUFABRIC_REQUIRE_BROWSER=1`` (CI
sets it), where a missing browser fails it.
"""

from __future__ import annotations

import pytest

from gpufabric.report import inference, training
from gpufabric.report.html import render_report
from gpufabric.report.summary import system_summary
from gpufabric.topology.build import load as load_system

from chromium_page import chromium, open_page

pytestmark = pytest.mark.usefixtures("deadline")


@pytest.mark.slow
def test_report_opens_in_chromium_without_errors_and_every_chart_has_ticked_axes(tmp_path):
    browser_path = chromium()
    topos = [load_system(n) for n in ("hgx-h100", "pcie-direct-8gpu", "gb200-nvl72")]
    rows = [system_summary(t) for t in topos]
    curves = {"all_reduce": {t.name: [{"size": 8, "busbw": 0.01}, {"size": 2**20, "busbw": 5.0},
                                      {"size": 2**30, "busbw": 100.0 + i}]
                             for i, t in enumerate(topos)}}
    tr = training.scaling({t.name: t for t in topos[:2]}, models=("bert-large",), max_gpus=8)
    inf = inference.section(rates=(2.0, 4.0), requests=60, versus=False)
    out = tmp_path / "report.html"
    out.write_text(render_report(topos, rows, curves, training=tr, inference=inf))
    page, errors, (pw, browser) = open_page(out, browser_path)
    try:
        charts = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')].map(
            d => ({xticks: d.querySelectorAll('.xtick').length,
                   yticks: d.querySelectorAll('.ytick').length,
                   xtitle: (d.querySelector('.g-xtitle') || {}).textContent || '',
                   ytitle: (d.querySelector('.g-ytitle') || {}).textContent || '',
                   legend: d.querySelectorAll('.legend .traces').length,
                   traces: d.data.length}))""")
        # 1 busbw chart, 2 training charts (efficiency, breakdown), 4 serving charts
        assert len(charts) == 7
        for c in charts:
            assert c["xticks"] >= 2 and c["yticks"] >= 2, c
            assert c["xtitle"] or c["ytitle"], c
        busbw = charts[0]
        assert busbw["traces"] == 3 and busbw["legend"] == 3   # one line per system named
        # the topology drawings stay ours: one SVG per system, and the GB200 tray's NVLink ports
        assert page.locator("svg[aria-label$='topology']").count() == 3
        assert "ports" in page.locator("svg[aria-label='gb200-nvl72 topology']").text_content()
        assert errors == []
    finally:
        browser.close()
        pw.stop()
