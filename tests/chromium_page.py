"""Headless Chromium for the HTML pages' tests (the report, the advisor's page).

Needs Chromium (Debian's ``chromium`` package; CI installs it) and Playwright (the ``test``
extra). Without a browser a test is skipped, except where ``GPUFABRIC_REQUIRE_BROWSER=1`` (CI
sets it), where a missing browser fails it.
"""

from __future__ import annotations

import os
import shutil

import pytest


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
