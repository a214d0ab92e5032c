"""The HTML report in a real browser: headless Chromium opens it offline, no console errors, and
every chart is drawn with axes that carry ticks and titles.

Needs Chromium (Debian's ``chromium`` package; CI installs it) and Playwright (the ``test``
extra). Without a browser the test is skipped, except where ``GPUFABRIC_REQUIRE_BROWSER=1`` (CI
sets it), where a missing browser fails it.
"""

from __future__ import annotations

import os
import shutil

import pytest

from gpufabric.report import inference, training
from gpufabric.report.html import render_report
from gpufabric.report.summary import system_summary
from gpufabric.topology import presets

pytestmark = pytest.mark.usefixtures("deadline")


def chromium() -> str:
    """Path of a Chromium to drive, or skip (fail where the browser is required)."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("GPUFABRIC_REQUIRE_BROWSER") == "1":
        pytest.fail("GPUFABRIC_REQUIRE_BROWSER=1 but no chromium on PATH")
    pytest.skip("no chromium on PATH (apt-get install chromium)")


def open_page(path, browser_path):
    """(page, console errors, browser) for ``path`` opened offline in headless Chromium."""
    sync_api = pytest.importorskip("playwright.sync_api")
    pw = sync_api.sync_playwright().start()
    browser = pw.chromium.launch(executable_path=browser_path, headless=True,
                                 args=["--no-sandbox", "--disable-gpu"])
    ctx = browser.new_context(offline=True, viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length > 0 && "
                           "[...document.querySelectorAll('.js-plotly-plot')].every("
                           "d => d.querySelector('.main-svg'))", timeout=30_000)
    return page, errors, (pw, browser)


def test_report_opens_in_chromium_without_errors_and_every_chart_has_ticked_axes(tmp_path):
    browser_path = chromium()
    topos = [presets.load(n) for n in ("hgx-h100", "pcie-direct-8gpu", "gb200-nvl72")]
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
