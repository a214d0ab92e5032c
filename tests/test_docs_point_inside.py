"""Docs and help point to files in the repository, never to the reference folder beside it.

The one exception is where a text says where the tests and CI read the openb trace from
(``../shared/traces/openb``): the trace is not shipped. docs/benchmarks.md is a log of past runs
and their commands, so it is not checked.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_doc_or_help_text_points_outside_the_repository():
    files = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md",
             *sorted(p for p in (ROOT / "src").rglob("*") if p.suffix in (".py", ".yaml",
                                                                         ".proto", ".md"))]
    files = [f for f in files if f.name != "benchmarks.md"]
    outside = [f"{f.relative_to(ROOT)}:{i}: {line.strip()}"
               for f in files for i, line in enumerate(f.read_text().splitlines(), 1)
               if "../shared" in line and "traces/openb" not in line]
    assert outside == []
