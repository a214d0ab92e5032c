"""Screenshots of the HTML report's sections, for docs/report.md.

    python tools/report_screenshots.py [REPORT.html] [-o docs/img]

Writes ``report-<n>-<slug>.png``, one per ``<section>`` of the report (default: a report of
``gpufabric compare hgx-h100 hgx-h100-4node-roce400 pcie-switch-dual-root gb200-nvl72
--inference`` written to a temporary file), taken in headless Chromium (Debian's ``chromium``;
Playwright from the ``test`` extra).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SYSTEMS = ("hgx-h100", "hgx-h100-4node-roce400", "pcie-switch-dual-root", "gb200-nvl72")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", nargs="?", help="an HTML report (default: make one)")
    ap.add_argument("-o", "--out", default="docs/img", help="folder for the PNG files")
    args = ap.parse_args()
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        print("tools/report_screenshots.py: no chromium on PATH (apt-get install chromium)",
              file=sys.stderr)
        return 2
    report = args.report
    if report is None:
        report = str(Path(tempfile.mkdtemp()) / "report.html")
        subprocess.run([sys.executable, "-c", "from gpufabric.cli import main; main()",
                        "compare", *SYSTEMS, "--inference", "-o", report], check=True,
                       stdout=subprocess.DEVNULL)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=browser, headless=True,
                               args=["--no-sandbox", "--disable-gpu"])
        page = b.new_context(offline=True, viewport={"width": 1280, "height": 900}).new_page()
        page.goto(Path(report).resolve().as_uri(), wait_until="load")
        page.wait_for_timeout(1500)
        for i, sec in enumerate(page.locator("section").all()):
            title = sec.locator("h2").first.text_content() or f"section {i}"
            slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40]
            path = out / f"report-{i:02d}-{slug}.png"
            sec.screenshot(path=str(path))
            print(path)
        b.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
