"""What a command loads: nothing it does not use (start-up time is benchmarks/bench_startup.py).

Each check runs a fresh interpreter and reads ``sys.modules`` at its end, so it holds whatever
the test process itself has imported.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from gpufabric import fileio
from gpufabric.cli import COMMANDS

#: Libraries no prediction on a built-in model and preset needs.
HEAVY = ("networkx", "plotly", "scipy", "pydantic", "rich", "kubernetes", "grpc", "ray")

PROBE = """
import json, sys
from gpufabric.cli import main
try:
    main({args!r})
except SystemExit:
    pass
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {mods!r})),
      file=sys.stderr)
"""


def loaded(args: list[str], mods: tuple[str, ...]) -> list[str]:
    """The top-level packages of ``mods`` that ``gpufabric ARGS`` imports."""
    p = subprocess.run([sys.executable, "-c", PROBE.format(args=args, mods=set(mods))],
                       capture_output=True, text=True, timeout=120)
    return sorted({m.split(".")[0] for m in json.loads(p.stderr.strip().splitlines()[-1])})


def test_import_gpufabric_loads_no_library():
    code = f"import sys, gpufabric; print(sorted(m for m in {HEAVY + ('numpy', 'yaml')!r} " \
           "if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60).stdout
    assert out.strip() == "[]"


def test_version_loads_neither_typer_nor_numpy():
    assert loaded(["--version"], HEAVY + ("numpy", "typer", "yaml")) == []


@pytest.mark.parametrize("args", [
    ["train", "llama2-7b", "dgx-a100", "--tp", "8"],
    ["serve", "llama2-7b", "gpu=A100-SXM4-80GB,gpus_per_node=1", "--requests", "8",
     "--isl", "64", "--osl", "8"],
])
def test_a_prediction_on_a_preset_loads_only_numpy_and_typer(args):
    assert loaded(args, HEAVY) == []


def test_a_spec_with_a_bad_value_is_still_told_by_the_schema(cli):
    # the values that do not plainly fit go to the pydantic model, which words the line
    code, _, err = cli("show", "gpu=H100-SXM,nodes=0")
    assert code == 2 and err.strip().endswith("nodes: expected an integer >= 1, got 0")


def test_each_command_is_registered_by_the_module_commands_names():
    code = ("import sys; from gpufabric.cli import register; register([sys.argv[1]]); "
            "import typer.main; from gpufabric.cli.common import app; "
            "print(sys.argv[1] in typer.main.get_command(app).commands)")
    for name in dict((m, n) for n, m in COMMANDS.items()).values():   # one per module
        out = subprocess.run([sys.executable, "-c", code, name], capture_output=True,
                             text=True, timeout=60).stdout
        assert out.strip() == "True", name


def test_help_lists_every_command_in_order(cli):
    _, out, _ = cli("--help")
    listed = [line.split()[1] for line in out.splitlines()
              if line.startswith("│ ") and len(line.split()) > 2 and line.split()[1] in COMMANDS]
    assert listed == list(COMMANDS)


def test_the_data_files_parse_is_kept_and_read_back(tmp_path, monkeypatch):
    monkeypatch.setenv(fileio.CACHE_ENV, str(tmp_path))
    first = fileio.load_data("gpufabric.catalog", "data", "nics.yaml")
    [kept] = tmp_path.glob("gpufabric.catalog.data.nics.yaml.*.marshal")
    assert fileio.load_data("gpufabric.catalog", "data", "nics.yaml") == first
    kept.write_bytes(b"\x00not marshal")          # a damaged copy is parsed again
    assert fileio.load_data("gpufabric.catalog", "data", "nics.yaml") == first
    monkeypatch.setenv(fileio.CACHE_ENV, "off")
    assert fileio.load_data("gpufabric.catalog", "data", "nics.yaml") == first


@pytest.mark.parametrize("off", ["off", "0", "false", "No", "NONE", " off "])
def test_a_cache_switched_off_by_any_common_word_writes_no_folder(off, tmp_path, monkeypatch):
    """GPUFABRIC_CACHE=0 (a switch's usual 'off') parses every run and never makes a folder
    named after the word in the working directory."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(fileio.CACHE_ENV, off)
    assert fileio.cache_dir() is None
    assert fileio.load_data("gpufabric.catalog", "data", "nics.yaml")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv(fileio.CACHE_ENV, str(tmp_path / "kept"))
    assert fileio.cache_dir() == tmp_path / "kept"


def test_main_builds_its_command_once_per_set_of_registered_commands():
    """typer builds the click command (every option of every command) on each call; `main`
    keeps it until another command is registered."""
    import typer

    from gpufabric.cli.entry import _command
    app = typer.Typer()

    @app.command()
    def one() -> None:
        """One."""

    @app.command()
    def two() -> None:
        """Two."""

    first = _command(app)
    assert _command(app) is first
    assert sorted(first.commands) == ["one", "two"]

    @app.command()
    def three() -> None:
        """Three."""

    again = _command(app)
    assert again is not first and sorted(again.commands) == ["one", "three", "two"]
