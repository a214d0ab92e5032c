"""Bad input found in review: each ends in exit 2 and one line naming the file/field and what is
allowed (or in a correct result), never in a traceback."""

from pathlib import Path

import pytest

from gpufabric import catalog
from gpufabric.errors import InputError
from gpufabric.scheduler.cluster import load_nodes

BINARY = bytes(range(256)) * 4          # every byte value, NULs included
LATIN1 = "gpu: H100-SXM\nname: Großrechner\n".encode("latin-1")


def one_error(cli, *args: str) -> str:
    """Run the CLI; assert exit 2 and a single line; return that line without the prefix."""
    code, _, err = cli(*args)
    assert code == 2, (args, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith("gpufabric: error: "), err
    return err.removeprefix("gpufabric: error: ").rstrip("\n")


@pytest.mark.parametrize("command", [["show"], ["topo"], ["collective"], ["compare", "--no-html"],
                                     ["p2p"]])
def test_binary_and_latin1_system_files(cli, tmp_path, command):
    (tmp_path / "box.yaml").write_bytes(BINARY)
    (tmp_path / "old.yaml").write_bytes(LATIN1)
    box, old = str(tmp_path / "box.yaml"), str(tmp_path / "old.yaml")
    assert one_error(cli, command[0], box, *command[1:]) == (
        f"{box}: binary data (a NUL byte at offset 0); expected a YAML spec or system file")
    assert one_error(cli, command[0], old, *command[1:]) == (
        f"{old}: not UTF-8 text (byte 0xdf at offset 23); expected a YAML spec or system file")


def test_binary_measurements_and_nvidia_smi_files(cli, tmp_path):
    f = tmp_path / "points.yaml"
    f.write_bytes(b"- id: x\n  note: caf\xe9\n")
    assert one_error(cli, "validate", str(f)) == (
        f"{f}: not UTF-8 text (byte 0xe9 at offset 19); expected a measurements file (YAML)")
    g = tmp_path / "topo.txt"
    g.write_bytes(BINARY[1:255])
    assert one_error(cli, "import", "nvidia-smi", str(g), "-o", str(tmp_path / "x.yaml")) == (
        f"{g}: not UTF-8 text (byte 0x80 at offset 127); expected the output of "
        "`nvidia-smi topo -m`")


def test_nvidia_smi_output_saved_by_powershell_is_utf16_and_reads(cli, tmp_path):
    text = (Path(__file__).parent / "fixtures" / "nvsmi" / "dgx_a100_nv12.txt").read_text()
    f = tmp_path / "topo.txt"
    f.write_bytes(text.encode("utf-16"))     # PowerShell's `>` writes UTF-16 with a BOM
    code, out, err = cli("import", "nvidia-smi", str(f), "-o", str(tmp_path / "a.yaml"),
                         "--gpu", "A100-SXM4-40GB")
    assert (code, err) == (0, "")
    assert out.startswith(f"wrote {tmp_path / 'a.yaml'}: 8 GPUs")


def test_a_directory_is_a_directory_not_a_missing_file(cli, tmp_path):
    d = str(tmp_path)
    assert one_error(cli, "show", d) == f"{d}: is a directory; expected a file"
    assert one_error(cli, "validate", d) == f"{d}: is a directory; expected a file"
    assert one_error(cli, "show", d + "/nope.yaml") == (
        f"{d}/nope.yaml: no such file, and not a preset name (see `gpufabric systems`)")


SYSTEM = """\
name: bad-links
devices:
  - {id: cpu0, kind: cpu, model: EPYC-7763}
  - {id: gpu0, kind: gpu, model: A100-PCIe}
  - {id: gpu1, kind: gpu, model: A100-PCIe}
links:
  - {a: cpu0, b: gpu0, kind: pcie}
  - {a: cpu0, b: gpu1, kind: pcie, LINK}
"""


@pytest.mark.parametrize("link, message", [
    ("bw_GBps: 0", "links[1].bw_GBps: got 0; allowed: a number above 0 and at most 10,000 GB/s "
     "per direction"),
    ("bw_GBps: -5", "links[1].bw_GBps: got -5; allowed: a number above 0 and at most 10,000 GB/s "
     "per direction"),
    ("bw_GBps: .nan", "links[1].bw_GBps: got .nan; allowed: a finite number"),
    ("lanes: 0", "links[1].lanes: expected an integer >= 1 and <= 32, got 0"),
    ("count: 0", "links[1].count: expected an integer >= 1 and <= 1024, got 0"),
    ("lat_us: -1", "links[1].lat_us: got -1; allowed: a number of microseconds >= 0 and <= "
     "1,000,000"),
])
@pytest.mark.parametrize("command", ["show", "p2p", "collective", "compare"])
def test_zero_or_negative_link_bandwidth_is_refused(cli, tmp_path, link, message, command):
    f = tmp_path / "box.yaml"
    f.write_text(SYSTEM.replace("LINK", link))
    assert one_error(cli, command, str(f), *(["--no-html"] if command == "compare" else [])) \
        == f"{f}: {message}"


def test_a_system_file_without_devices(cli, tmp_path):
    f = tmp_path / "empty.yaml"
    f.write_text("devices: []\nlinks: []\n")
    assert one_error(cli, "show", str(f)) == (
        f"{f}: devices: an empty list; a system file names at least one device")


def test_compare_output_must_go_into_an_existing_directory(cli, tmp_path):
    missing = tmp_path / "no" / "r.html"
    assert one_error(cli, "compare", "dgx-a100", "-o", str(missing)) == (
        f"{missing}: --output: directory '{missing.parent}' does not exist; create it first")
    assert not missing.parent.exists()
    assert one_error(cli, "compare", "dgx-a100", "-o", str(tmp_path)) == (
        f"{tmp_path}: --output: is a directory; give a file name")
    afile = tmp_path / "plain"
    afile.write_text("")
    assert one_error(cli, "compare", "dgx-a100", "-o", str(afile / "r.html")) == (
        f"{afile / 'r.html'}: --output: '{afile}' is not a directory")


def test_import_does_not_create_directories(cli, tmp_path):
    src = Path(__file__).parent / "fixtures" / "nvsmi" / "dgx_a100_nv12.txt"
    out = tmp_path / "new" / "dgx.yaml"
    assert one_error(cli, "import", "nvidia-smi", str(src), "-o", str(out)) == (
        f"{out}: --output: directory '{out.parent}' does not exist; create it first")
    assert not out.parent.exists()


@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "all_to_all"])
def test_one_rank_is_a_local_copy(cli, op):
    import json
    code, out, _ = cli("collective", "dgx-a100", "--op", op, "--ranks", "1", "--min", "1M",
                       "--max", "1M", "--json")
    assert code == 0
    row, = json.loads(out)["rows"]
    # NCCL's base latency (8.4 us) plus reading and writing 1 MiB at the A100's 2039 GB/s
    assert row["time_us"] == pytest.approx(8.4 + 2 * 2**20 / 2039e9 * 1e6)
    assert (row["ranks"], row["busbw"], row["algo"]) == (1, 0.0, "local")


@pytest.mark.parametrize("command", ["show", "p2p", "topo"])
def test_node_out_of_range(cli, command):
    assert one_error(cli, command, "dgx-a100", "--node", "3") == (
        "dgx-a100: --node: the system has 1 node(s); allowed: 0 to 0")
    assert one_error(cli, command, "hgx-h100-4node-ndr", "--node", "4") == (
        "hgx-h100-4node-ndr: --node: the system has 4 node(s); allowed: 0 to 3")
    assert one_error(cli, command, "hgx-h100-4node-ndr", "--node", "-1") == (
        "--node: expected a node index >= 0, got -1")


# Bad node pools: tests/test_scheduler_inputs.py (the scheduler's own messages).


def test_pools_that_are_right_still_load():
    c = load_nodes("2xT4x2+V100M32x8*1+cpu-32*3+dgx-a100*1")
    assert c.summary() == {"gpu:T4x2": 2, "gpu:V100M32x8": 1, "cpu": 3,
                           "gpu:A100-SXM4-80GBx8": 1}


@pytest.mark.parametrize("typed, suggestion", [
    ("H100-SXN", "H100-SXM"),           # a typo
    ("A100-SMX4-80GB", "A100-SXM4-80GB"),   # two letters swapped
    ("rtx 5090", "RTX-5090"),           # case and separators
    ("5090", "RTX-5090"),               # the brand left out
    ("L40", None),                      # L40 and L40S are different cards
    ("MI300", None),                    # MI300A / MI300X
    ("RTX-4080", None),                 # another model number
    ("V100-PCIe", None),                # not the A100-PCIe
    ("RTX-4070", None),                 # not the 4070 Ti SUPER
])
def test_suggestions_never_name_a_different_card(typed, suggestion):
    with pytest.raises(InputError) as err:
        catalog.gpu(typed, field="gpu")
    hint = f"; did you mean '{suggestion}'?" if suggestion else " (known: "
    assert str(err.value).startswith(f"gpu: unknown GPU '{typed}'{hint}")


def test_algo_errors_name_the_option(cli):
    assert one_error(cli, "collective", "dgx-a100", "--algo", "butterfly") == (
        "--algo: unknown algorithm 'butterfly'; allowed: auto, ring, tree, nvls, nvls_tree, "
        "pat, hierarchical, pairwise, p2p, or a list of them as NCCL_ALGO takes it (ring,tree "
        "or ^nvls)")
    assert one_error(cli, "collective", "dgx-a100", "--op", "all_gather", "--algo", "tree") == (
        "dgx-a100: --algo: algorithm 'tree' cannot run all_gather on this system; allowed: "
        "auto, ring")


@pytest.mark.parametrize("algo, canonical", [("collnet", "collnet_direct"),
                                             ("CollNetChain", "collnet_chain")])
def test_nccl_algorithms_not_modelled_are_refused_not_rewritten(cli, algo, canonical):
    assert one_error(cli, "collective", "dgx-a100", "--algo", algo) == (
        f"dgx-a100: --algo: algorithm '{canonical}' (NCCL's) is not modelled here; allowed: "
        "auto, ring, tree, hierarchical")


def test_validate_notes_the_fallback_from_an_algorithm_not_modelled(tmp_path):
    from gpufabric.collectives.validate import validate
    f = tmp_path / "points.yaml"
    f.write_text("- id: pat-ag\n  system: {gpu: H100-SXM}\n  collective: all_gather\n"
                 "  ranks: 8\n  algorithm: pat\n  points: [{size: 1073741824, busbw: 360}]\n")
    point, = validate(str(f))["points"]
    assert point["notes"] == "algorithm pat not modelled here; auto used"
    assert point["algo"] == "ring"


@pytest.mark.parametrize("system, message", [
    ("", "SYSTEM: empty; allowed: a preset name (see `gpufabric systems`), a YAML file or "
         "key=value,..."),
    ("gpu=", "gpu=: gpu: no value after '=' in 'gpu='"),
    ("=H100", "=H100: expected key=value with a key like gpu or host.cpu, got '=H100'"),
    ("host=1,host.cpu=Grace", "host=1,host.cpu=Grace: host.cpu: host is a value, not a section "
                              "of keys"),
])
def test_inline_specs_that_say_nothing(cli, system, message):
    assert one_error(cli, "show", system) == message



def test_a_newline_in_the_input_stays_on_the_error_line(cli):
    line = one_error(cli, "show", "dgx\n-a100")
    assert line.startswith("unknown system (preset name, YAML file or key=value spec) "
                           "'dgx\\n-a100'")


@pytest.mark.parametrize("spec, message", [
    ("gpus_per_node=2147483648", "gpus_per_node: expected an integer >= 1 and <= 576, got "
                                 "2147483648"),
    ("nics_per_node=1000", "nics_per_node: expected an integer >= 0 and <= 64, got 1000"),
])
def test_absurd_sizes_inside_a_server_are_refused_before_building(cli, spec, message):
    system = f"gpu=H100-SXM,{spec}"
    assert one_error(cli, "show", system) == f"{system}: {message}"



def test_a_nul_byte_in_a_file_name(cli):
    assert one_error(cli, "validate", "a\x00b.yaml") == (
        "a\x00b.yaml: not a file name (it holds a NUL byte)")
