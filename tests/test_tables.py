"""Every table the CLI prints fits a 120-column terminal; ``--wide`` shows every column whole.

A table too wide for the terminal leaves out its lowest-priority columns (a note names them),
folds its long text, and prints a matrix of many devices in blocks of columns, each with the
row labels (``gpufabric.cli.common.table_lines``, the one place tables are fitted).
"""

import pytest

from gpufabric.cli.common import Col, table_lines

#: Every command that lists or tabulates (``topo`` is left out: it prints `nvidia-smi topo -m`'s
#: own tab-separated format, which other tools and `gpufabric import` read).
LISTINGS = [
    ["systems"], ["models"], ["datasets"], ["catalog"], ["catalog", "gpus"],
    ["catalog", "cpus"], ["catalog", "nics"], ["catalog", "switches"], ["catalog", "links"],
    ["catalog", "storage"],
    ["params"], ["params", "--layer", "all"], ["params", "--check"],
    ["show", "dgx-a100"], ["show", "gb200-nvl72"], ["p2p", "dgx-a100"],
    ["collective", "hgx-h100-4node-ndr", "--op", "all_reduce"],
    ["validate", "tests/data/calibration/collectives.yaml"],
]


@pytest.fixture
def at_120(cli, monkeypatch):
    import sys

    from rich.console import Console
    monkeypatch.setenv("COLUMNS", "120")
    monkeypatch.chdir(__import__("pathlib").Path(__file__).resolve().parents[1])
    # a command's console was made when its module was first imported, maybe by another test
    # of this process at another width: give each 120 columns
    for name, mod in list(sys.modules.items()):
        con = getattr(mod, "console", None) if name.startswith("gpufabric.cli") else None
        if isinstance(con, Console):
            monkeypatch.setattr(con, "_width", 120)
    return cli


def widest(text: str) -> int:
    return max(len(line.expandtabs()) for line in text.splitlines())


@pytest.mark.parametrize("args", LISTINGS, ids=" ".join)
def test_every_listing_fits_120_columns(at_120, args):
    code, out, err = at_120(*args)
    assert code in (0, 1), err          # params --check exits 1 when a constant needs a mark
    assert out.strip()
    assert widest(out) <= 120, max(out.splitlines(), key=len)


def test_the_path_matrix_is_printed_in_blocks_with_its_row_labels(at_120):
    code, out, _ = at_120("show", "dgx-a100")
    matrix = out[out.index("Paths (type"):].splitlines()[1:]
    rows = [ln.split()[0] for ln in matrix if ln.startswith("  GPU7")]
    assert rows == ["GPU7", "GPU7"]                 # two blocks, each with every row label
    code, out, _ = at_120("show", "dgx-a100", "--wide")
    assert widest(out) > 120                        # one piece: every column side by side
    assert sum(ln.startswith("  GPU7") for ln in out.splitlines()) == 1


def test_datasets_leave_out_the_source_at_120_and_show_it_with_wide(at_120):
    _, out, _ = at_120("datasets")
    assert "https://" not in out
    assert "left out to fit 120 columns: source; --wide shows them" in out
    assert "input tokens mean/med/p90" in out
    _, out, _ = at_120("datasets", "--wide")
    assert "https://github.com/JonnyKong/vidur" in out and "left out" not in out


def test_params_fold_long_lines_under_their_column(at_120):
    _, out, _ = at_120("params", "--layer", "all")
    _, whole, _ = at_120("params", "--layer", "all", "--wide")
    assert widest(whole) > 120 and widest(out) <= 120
    assert " ".join(out.split()) == " ".join(whole.split())      # the same words, folded


def test_a_table_drops_by_priority_then_folds_then_splits():
    cols = [Col("name", key=True), Col("value", right=True), Col("note", wrap=True),
            Col("source", drop=1)]
    rows = [("a", 1, "word " * 20, "x" * 60), ("b", 22, "short", "y")]
    lines = table_lines(cols, rows, width=60)
    assert max(map(len, lines)) <= 60
    assert lines[-1] == "# (left out to fit 60 columns: source; --wide shows them)"
    assert sum(ln.startswith("  a") for ln in lines) == 1 and len(lines) > 4   # folded note
    assert "x" * 60 in "\n".join(table_lines(cols, rows, width=60, wide=True))
    many = [Col("", key=True)] + [Col(f"c{i}", right=True) for i in range(30)]
    blocks = table_lines(many, [["r0", *range(30)]], width=50)
    assert max(map(len, blocks)) <= 50
    assert sum(ln.startswith("  r0") for ln in blocks) > 1


def test_catalog_names_its_sections_in_plain_english(at_120):
    _, out, _ = at_120("catalog", "switches")
    assert "PCIe switches" in out and "switchs" not in out


def test_catalog_gpus_give_every_gpu_a_tdp_in_watts_with_its_source(at_120):
    import json
    _, out, _ = at_120("catalog", "gpus", "--json")
    gpus = json.loads(out)
    for g in gpus:
        assert g["facts"]["tdp_W"] > 0, g["name"]
        assert "tdp_W" in g["sources"], g["name"]
    tdp = {g["name"]: g["facts"]["tdp_W"] for g in gpus}
    assert (tdp["T4"], tdp["H100-NVL"], tdp["RTX-5090"]) == (70, 400, 575)
    _, out, _ = at_120("catalog", "gpus")
    assert "tdp_W=0" not in out and "tdp_W=not recorded" not in out
