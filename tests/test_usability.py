"""What a new user meets first: --version, the catalog, progress of long runs, help that stays
inside the repository, a compare table that fits a 100-column terminal."""

import json
import re
from io import StringIO

import pytest
from rich.console import Console

import gpufabric
from gpufabric.cli.common import Progress
from gpufabric.report import compare as cmp
from gpufabric.topology.build import load as load_system


def test_version(cli):
    assert cli("--version") == (0, f"gpufabric {gpufabric.__version__}\n", "")


def test_catalog_lists_every_section(cli):
    code, out, _ = cli("catalog", "--json")
    assert code == 0
    names = json.loads(out)
    assert list(names) == ["gpus", "cpus", "nics", "switches", "links", "storage"]
    assert "H100-SXM" in names["gpus"] and "EPYC-7763" in names["cpus"]
    assert {"ConnectX-7", "ib-ndr"} <= set(names["nics"])           # NIC models and speeds
    assert {"PEX89144", "nvswitch3", "QM9700"} <= set(names["switches"])
    assert {"nvlink4", "gen5", "sli"} <= set(names["links"])
    assert "Samsung-PM1733" in names["storage"]                     # NVMe drives


@pytest.mark.parametrize("section", ["gpus", "cpus", "nics", "switches", "links", "storage"])
def test_catalog_entries_carry_their_source(cli, section):
    code, out, _ = cli("catalog", section, "--json")
    assert code == 0
    rows = json.loads(out)
    assert rows and all(r["source"].strip() for r in rows)
    code, text, _ = cli("catalog", section)
    assert code == 0 and rows[0]["name"] in text


def test_catalog_gpu_facts(cli):
    _, out, _ = cli("catalog", "gpus", "--json")
    h100 = next(r for r in json.loads(out) if r["name"] == "H100-SXM")
    assert (h100["facts"]["peer_link"], h100["facts"]["peer_links"], h100["facts"]["pcie_gen"]) \
        == ("nvlink4", 18, 5)
    assert "H100" in h100["aliases"]


def test_catalog_unknown_section(cli):
    code, _, err = cli("catalog", "tpus")
    assert code == 2
    assert err == ("gpufabric: error: SECTION: unknown catalog section 'tpus' (known: cpus, "
                   "gpus, links, nics, storage, switches)\n")


def test_progress_is_a_line_now_and_then_when_not_a_terminal(cli, monkeypatch):
    monkeypatch.setenv("GPUFABRIC_PROGRESS", "0")      # show it from the start
    code, out, err = cli("compare", "dgx-a100", "hgx-h100", "--no-html", "--json")
    assert code == 0 and [r["name"] for r in json.loads(out)["systems"]] == ["dgx-a100",
                                                                             "hgx-h100"]
    lines = err.splitlines()
    # the first step, then a line at most every 5 s (the middle one only on a slow machine),
    # and the last step: each system, then the training-scaling section
    assert 2 <= len(lines) <= 3
    assert re.fullmatch(r"gpufabric: compare: 1/3 dgx-a100 \(\d+\.\d s\)", lines[0])
    # training scaling runs one step per system in place of its one planned step: 2 + 2
    assert re.fullmatch(r"gpufabric: compare: 4/4 training scaling \(\d+\.\d s\)", lines[-1])


def test_progress_waits_two_seconds_and_can_be_turned_off(monkeypatch):
    monkeypatch.delenv("GPUFABRIC_PROGRESS", raising=False)
    err = StringIO()
    with Progress("validate", 3, stream=err) as p:       # the default: only after 2 s
        p.step("a")
    assert (p.after_s, err.getvalue()) == (2.0, "")
    monkeypatch.setenv("GPUFABRIC_PROGRESS", "off")
    with Progress("validate", 3, after_s=0, stream=err) as p:
        p.step("a")
    assert (p.after_s, err.getvalue()) == (None, "")


def _help_texts(cli) -> dict[str, str]:
    texts = {"": cli("--help")[1]}
    for cmd in ("systems", "show", "p2p", "topo", "compare", "collective", "validate",
                "schedule", "catalog"):
        texts[cmd] = cli(cmd, "--help")[1]
    texts["import nvidia-smi"] = cli("import", "nvidia-smi", "--help")[1]
    return texts


def test_help_never_points_outside_the_repository(cli):
    for cmd, text in _help_texts(cli).items():
        assert text, cmd
        assert "shared/" not in text and "../" not in text, (cmd, text)
    assert "docs/calibration.md" in " ".join(_help_texts(cli)["validate"].split())


def test_compare_table_fits_a_100_column_terminal():
    rows = cmp.rows([load_system(n) for n in ("hgx-h100-4node-ndr-2to1", "nvlink-bridge-pairs",
                                              "dgx1-v100")])
    out = Console(file=StringIO(), width=100)
    out.print(cmp.table(rows))
    text = out.file.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "…" not in text                              # nothing cut
    for name in ("hgx-h100-4node-ndr-2to1", "nvlink-bridge-pairs", "dgx1-v100"):
        assert name in text
    assert "31.5/31.5/300" in text and "15.8/25/50" in text and "NV2:8" in text


def test_help_texts_keep_their_brackets_and_wrap_to_the_terminal():
    """typer renders help as rich markup, where ``[aic]`` or ``[@GBps]`` is a tag and vanishes:
    every command's and option's help must read the same once rendered (brackets escaped); and
    it keeps a docstring's line breaks, which broke paragraphs mid-sentence at 80 columns."""
    from rich.text import Text

    from gpufabric.cli.common import app
    from gpufabric.cli.entry import _command, register

    register([])
    texts = []

    def walk(command, path):
        texts.append((path, command.help or ""))
        texts.extend((f"{path} {p.name}", getattr(p, "help", None) or "")
                     for p in command.params)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(_command(app), "gpufabric")
    assert len(texts) > 300                                  # every command and option
    # each paragraph one line, for the terminal to wrap (not broken where the source was)
    assert not [where for where, text in texts if any(
        "\n" in para for para in text.split("\n\n"))]
    lost = [(where, text) for where, text in texts
            if Text.from_markup(text).plain != text.replace("\\[", "[")]
    assert not lost
    assert any("gpufabric[aic]" in Text.from_markup(text).plain for _, text in texts)
