"""The examples of the guides run and print what the guides say they print.

Every fenced ``console`` block of docs/*.md whose command lines all start with
``$ gpufabric`` and that shows output is run in-process (the ``cli`` fixture), from the
repository root, and its output compared with the lines after each command. A line ``...``
stands for any lines (and ``...`` inside a line for any text), as doctest's ELLIPSIS. Blocks
that only list commands (no output), and commands that write files (``-o``, ``--output``)
or a folder (``--deploy-dir``), read the machine they run on (``discover``, ``bench``,
``measure``), the network (``data``) or an optional install (``kernels`` and
``--kernel-times aic``: AIConfigurator's database) are not run: their output is not the same
everywhere. Neither is an ``advise --interactivity`` sweep of several targets (the whole
ranking once per target, about a minute on 2 cores): tests/test_advise_interactivity.py runs
the sweep on a narrowed space.
"""

from __future__ import annotations

import doctest
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```console[^\n]*\n(.*?)^```", re.M | re.S)
#: subcommands whose output depends on this machine, the network or an optional install
NOT_RUN = {"discover", "bench", "measure", "data", "kernels"}
#: terminal width the examples are printed at (rich tables wrap to it)
COLUMNS = "100"


def examples(text: str) -> list[list[tuple[str, str]]]:
    """The checked blocks of a page: each a list of (command, expected output).

    >>> examples("```console\\n$ gpufabric p2p x\\nGPU0\\n```\\n")
    [[('gpufabric p2p x', 'GPU0')]]
    >>> examples("```console\\n$ gpufabric params\\n$ gpufabric p2p x\\n```\\n")
    []
    """
    blocks = []
    for m in FENCE.finditer(text):
        lines = m.group(1).rstrip("\n").split("\n")
        cmds: list[tuple[str, list[str]]] = []
        ok = bool(lines) and lines[0].startswith("$ ")
        for line in lines:
            if line.startswith("$ "):
                if not line.startswith("$ gpufabric "):
                    ok = False
                cmds.append((line[2:], []))
            elif cmds and cmds[-1][0].endswith("\\"):
                cmds[-1] = (cmds[-1][0][:-1] + " " + line.strip(), [])
            elif cmds:
                cmds[-1][1].append(line)
        if not ok or not any(out for _, out in cmds):
            continue
        if any(_not_run(shlex.split(c, comments=True)) for c, _ in cmds):
            continue
        blocks.append([(c, "\n".join(out)) for c, out in cmds])
    return blocks


def _not_run(argv: list[str]) -> bool:
    return (len(argv) < 2 or argv[1] in NOT_RUN
            or any(a in ("-o", "--output", "--deploy-dir")
                   or a.startswith(("--output=", "--deploy-dir=")) for a in argv)
            or "--kernel-times=aic" in argv
            or any(a == "--kernel-times" and b == "aic"
                   for a, b in zip(argv, argv[1:], strict=False))
            or _sweep(argv))


def _sweep(argv: list[str]) -> bool:
    """An ``advise --interactivity X,Y,...`` command (several targets).

    >>> _sweep(["gpufabric", "advise", "small-chat", "--interactivity", "20,120"])
    True
    >>> _sweep(["gpufabric", "advise", "small-chat", "--interactivity", "20"])
    False
    """
    args = argv[2:] if len(argv) > 1 and argv[1] == "advise" else []
    for i, a in enumerate(args):
        value = a.split("=", 1)[1] if a.startswith("--interactivity=") else (
            args[i + 1] if a == "--interactivity" and i + 1 < len(args) else "")
        if "," in value:
            return True
    return False


def _cases() -> list:
    cases = []
    for page in sorted((ROOT / "docs").glob("*.md")):
        for i, block in enumerate(examples(page.read_text())):
            cases.append(pytest.param(block, id=f"{page.name}-{i}"))
    return cases


def _clean(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip("\n").split("\n")) + "\n"


CASES = _cases()


def test_the_guides_have_checked_examples():
    assert len(CASES) >= 4


@pytest.mark.parametrize("block", CASES)
def test_example(block, cli, monkeypatch):
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", COLUMNS)
    # the commands' consoles were made when their module was first imported, maybe by another
    # test of this process at another width: give each the guide's width
    import sys

    from rich.console import Console
    for name, mod in list(sys.modules.items()):
        con = getattr(mod, "console", None) if name.startswith("gpufabric.cli") else None
        if isinstance(con, Console):
            monkeypatch.setattr(con, "_width", int(COLUMNS))
    checker = doctest.OutputChecker()
    for command, want in block:
        code, out, err = cli(*shlex.split(command, comments=True)[1:])
        assert code == 0, f"{command}: exit {code}: {err}"
        got = out + err
        assert checker.check_output(_clean(want), _clean(got), doctest.ELLIPSIS), (
            f"$ {command}\n--- the guide says:\n{want}\n--- it prints:\n{got}")
