"""Hostile files and arguments: each ends in exit 2 and one line naming the file, the field and
what is allowed (docs/hardening.md), within a bounded time, and nothing is half-written.

Four classes: `nvidia-smi topo -m` output that no machine prints, non-finite or absurd numbers
and huge keys or texts in the files users write, and arguments longer than a file name can be.
"""

from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("bounded_memory", "deadline")   # conftest.py

FIXTURES = Path(__file__).parent / "fixtures" / "nvsmi"


@pytest.fixture
def refused(cli):
    """``refused(*args) -> message``: the command exits 2 with one line (a hang fails the
    test at conftest's deadline)."""
    def run(*args: str) -> str:
        code, _, err = cli(*args)
        assert code == 2, (args[:3], err[:300])
        assert err.count("\n") == 1 and "Traceback" not in err, err[:300]
        assert err.startswith("gpufabric: error: "), err[:300]
        return err.removeprefix("gpufabric: error: ").rstrip("\n")
    return run


# -- nvidia-smi topo -m --------------------------------------------------------------------------
def _matrix(n: int, cell: str, nics: int = 0) -> str:
    """A tab-separated matrix of n GPUs, every GPU pair ``cell``, NICs PIX to everything."""
    labels = [f"GPU{i}" for i in range(n)] + [f"NIC{k}" for k in range(nics)]
    rows = ["\t" + "\t".join(labels) + "\tCPU Affinity\tNUMA Affinity"]
    for i, a in enumerate(labels):
        cells = [" X " if i == j else cell if a.startswith("GPU") and b.startswith("GPU")
                 else "PIX" for j, b in enumerate(labels)]
        rows.append(a + "\t" + "\t".join(cells) + ("\t0-63\t0" if a.startswith("GPU") else ""))
    return "\n".join(rows) + "\n"


def test_an_nv_count_no_gpu_has_is_refused_at_its_cell(refused, tmp_path):
    f = tmp_path / "topo.txt"
    f.write_text((FIXTURES / "dgx_a100_nv12.txt").read_text().replace("NV12", "NV9999"))
    out = tmp_path / "box.yaml"
    assert refused("import", "nvidia-smi", str(f), "-o", str(out)) == (
        f"{f}: row GPU0, column GPU1: 'NV9999' is more NVLinks than a GPU has; allowed: NV1 to "
        "NV18 (NV# counts bonded NVLinks; no GPU in the catalog has more than 18, H100-SXM)")
    assert refused("import", "nvidia-smi", str(f), "-o", str(out), "--gpu", "A100-SXM4-40GB") == (
        f"{f}: row GPU0, column GPU1: 'NV9999' is more NVLinks than a GPU has; allowed: NV1 to "
        "NV12 (NV# counts bonded NVLinks; A100-SXM4-40GB has 12)")
    assert refused("import", "nvidia-smi", str(f), "-o", str(out), "--gpu", "RTX-4090") == (
        f"{f}: row GPU0, column GPU1: 'NV9999' is more NVLinks than a GPU has; allowed: no NV# "
        "cell (RTX-4090 has no NVLink)")
    f.write_text(_matrix(2, "NV" + "9" * 5000))      # past int()'s 4300 digits
    assert refused("import", "nvidia-smi", str(f), "-o", str(out)).startswith(
        f"{f}: row GPU0, column GPU1: 'NV99999999")
    assert not out.exists()                           # nothing written


def test_more_gpus_nics_or_sockets_than_a_server_has_are_refused(refused, tmp_path):
    f, out = tmp_path / "topo.txt", str(tmp_path / "box.yaml")
    f.write_text(_matrix(577, "NV18"))
    assert refused("import", "nvidia-smi", str(f), "-o", out) == (
        f"{f}: header: 577 GPU columns; allowed: at most 576 (the largest NVLink domain, "
        "gpus_per_node's bound in a spec)")
    f.write_text(_matrix(2, "PIX", nics=65))
    assert refused("import", "nvidia-smi", str(f), "-o", out) == (
        f"{f}: header: 65 NIC columns; allowed: at most 64 (nics_per_node's bound in a spec)")
    f.write_text(_matrix(73, "SYS"))                  # every GPU on a socket of its own
    assert refused("import", "nvidia-smi", str(f), "-o", out) == (
        f"{f}: the SYS paths put the devices on 73 CPU sockets; allowed: at most 72 "
        "(host.sockets' bound in a spec)")
    assert not Path(out).exists()


def test_without_gpu_the_guessed_nvlink_generation_is_said_on_stderr(cli, tmp_path):
    out = tmp_path / "a.yaml"
    f = FIXTURES / "dgx_a100_nv12.txt"
    code, stdout, err = cli("import", "nvidia-smi", str(f), "-o", str(out))
    assert (code, stdout) == (0, f"wrote {out}: 8 GPUs, 10 NICs\n")
    assert err == (f"gpufabric: warning: {f}: --gpu not given: GPU model unknown, NVLink links "
                   "taken as NVLink 3 (25 GB/s per link per direction); give --gpu MODEL (see "
                   "`gpufabric catalog gpus`)\n")
    code, _, err = cli("import", "nvidia-smi", str(f), "-o", str(out), "--gpu", "A100-SXM4-40GB")
    assert (code, err) == (0, "")
    # a matrix without NVLink guesses nothing, and says nothing
    code, _, err = cli("import", "nvidia-smi", str(FIXTURES / "t4_4gpu_sys_node.txt"), "-o",
                       str(out))
    assert (code, err) == (0, "")


def test_four_gpus_of_an_nvswitch_board_import_through_a_switch(cli, tmp_path):
    """NV18 between each pair of 4 GPUs is 54 links per GPU as direct bundles: a switch."""
    f, out = tmp_path / "topo.txt", tmp_path / "box.yaml"
    f.write_text(_matrix(4, "NV18"))
    assert cli("import", "nvidia-smi", str(f), "-o", str(out), "--gpu", "H100-SXM")[0] == 0
    assert "kind: nvswitch" in out.read_text()
    code, topo, _ = cli("topo", str(out))
    assert code == 0 and topo.splitlines()[1].split()[1:5] == ["X", "NV18", "NV18", "NV18"]


def test_a_hand_written_nvlink_of_an_unknown_gpu_has_the_same_bound(refused, tmp_path):
    f = tmp_path / "box.yaml"
    f.write_text("devices:\n  - {id: g0, kind: gpu}\n  - {id: g1, kind: gpu}\n"
                 "links:\n  - {a: g0, b: g1, kind: nvlink, gen: 3, count: 13}\n")
    assert refused("show", str(f)) == (
        f"{f}: nvlink_links: g0 (model unknown) uses 13 NVLink 3 links, but no GPU in the "
        "catalog has more than 12 (A100-SXM4-40GB); allowed: at most 12")


#: the GPU of each fixture (tests/fixtures/nvsmi/SOURCES.md) where the catalog has it
FIXTURE_GPUS = {"dgx_a100_nv12": "A100-SXM4-40GB", "hgx_h100_nv18": "H100-SXM",
                "rtx5090_2gpu_phb": "RTX-5090", "rtx3090_2gpu_sys": "RTX-3090",
                "rtx4090_8gpu_sys": "RTX-4090", "t4_4gpu_sys_node": "T4",
                "l40s_8gpu_node_sys": "L40S", "k80_6gpu_soc": "", "rtx6000ada_4gpu_4nic": ""}


@pytest.mark.parametrize("fixture", sorted(p.stem for p in FIXTURES.glob("*.txt")))
def test_every_real_fixture_imports_and_reads_back_with_show(cli, tmp_path, fixture):
    assert fixture in FIXTURE_GPUS
    src = FIXTURES / f"{fixture}.txt"
    for gpu in {"", FIXTURE_GPUS[fixture]}:
        out = tmp_path / f"{fixture}{gpu}.yaml"
        code, _, err = cli("import", "nvidia-smi", str(src), "-o", str(out),
                           *(["--gpu", gpu] if gpu else []))
        assert code == 0, err
        code, shown, err = cli("show", str(out))
        assert (code, err) == (0, ""), err
        assert f"{1} node(s)" in shown
        code, topo, _ = cli("topo", str(out))
        assert code == 0 and topo.split()[0] == "GPU0"


# -- non-finite, absurd and huge values in the files users write ---------------------------------
SYSTEM = """\
devices:
  - {id: cpu0, kind: cpu, model: EPYC-7763}
  - {id: gpu0, kind: gpu, model: A100-PCIe, DEVICE}
links:
  - {a: cpu0, b: gpu0, kind: pcie, LINK}
"""


@pytest.mark.parametrize("device, link, message", [
    ("numa: 0", "bw_GBps: .inf", "links[0].bw_GBps: got .inf; allowed: a finite number"),
    ("numa: 0", "lat_us: -.inf", "links[0].lat_us: got -.inf; allowed: a finite number"),
    ("numa: 0", "bw_GBps: 1.0e+308",
     "links[0].bw_GBps: got 1e+308; allowed: numbers of magnitude at most 1e+30"),
    ("numa: 0", "lanes: " + "9" * 400,
     "links[0].lanes: got an integer of 400 digits; allowed: numbers of magnitude at most 1e+30"),
    ("numa: 0", "bw_GBps: 52000",
     "links[0].bw_GBps: got 52000; allowed: a number above 0 and at most 10,000 GB/s per "
     "direction"),
    ("numa: 0", "lat_us: 1.0e+9",
     "links[0].lat_us: got 1000000000.0; allowed: a number of microseconds >= 0 and <= "
     "1,000,000"),
    ("numa: 0", "lanes: 64", "links[0].lanes: expected an integer >= 1 and <= 32, got 64"),
    ("numa: 0", "count: 9999", "links[0].count: expected an integer >= 1 and <= 1024, got 9999"),
    ("node: -1", "lanes: 16", "devices[1].node: expected an integer >= 0 and <= 746496, got -1"),
    ("index: -3", "lanes: 16",
     "devices[1].index: expected an integer >= 0 and <= 746496, got -3"),
    ("numa: 5000", "lanes: 16", "devices[1].numa: expected an integer >= -1 and <= 1023, got 5000"),
    ("attrs: {note: .nan}", "lanes: 16",
     "devices[1].attrs.note: got .nan; allowed: a finite number"),
])
def test_system_file_numbers(refused, tmp_path, device, link, message):
    f = tmp_path / "box.yaml"
    f.write_text(SYSTEM.replace("DEVICE", device).replace("LINK", link))
    assert refused("show", str(f)) == f"{f}: {message}"


@pytest.mark.parametrize("text, message", [
    ("gpu: H100-SXM\nnodes: 4\nnics_per_node: 8\nfabric: {oversubscription: .inf}\n",
     "fabric.oversubscription: got .inf; allowed: a finite number"),
    ("gpu: H100-SXM\nnodes: 4\nnics_per_node: 8\nfabric: {oversubscription: 1000}\n",
     "fabric.oversubscription: expected a number >= 1 and <= 511 (downlinks:uplinks) or a list "
     "[leaf, spine], got 1000"),
    ("gpu: H100-SXM\ngpus_per_node: .nan\n", "gpus_per_node: got .nan; allowed: a finite number"),
    ("gpu: H100-SXM\nname: " + "x" * 100_000 + "\n",
     "name: a text of 100,000 characters; allowed: at most 10,000 characters"),
    ("gpu: H100-SXM\n? " + "k" * 100_000 + "\n: 1\n",
     "a key of 100,000 characters ('kkkkkkkkkkkkkkkkkkkk'...); allowed: keys of at most 256 "
     "characters"),
])
def test_spec_file_numbers_and_sizes(refused, tmp_path, text, message):
    f = tmp_path / "spec.yaml"
    f.write_text(text)
    assert refused("show", str(f)) == f"{f}: {message}"


def test_inline_spec_values_are_checked_like_a_file(refused):
    assert refused("show", "gpu=H100-SXM,nodes=.nan") == (
        "gpu=H100-SXM,nodes=.nan: nodes: got .nan; allowed: a finite number")
    spec = "gpu=H100-SXM,nodes=" + "9" * 5000       # past the 4300 digits int() reads
    assert refused("show", spec) == (
        f"{spec[:190]}... (5,019 characters): nodes: an integer of 5,000 characters; allowed: "
        "numbers of magnitude at most 1e+30")


def test_integers_int_will_not_read_are_refused(refused, tmp_path):
    f = tmp_path / "spec.yaml"
    f.write_text("gpu: H100-SXM\nnodes: " + "9" * 5000 + "\n")
    assert refused("show", str(f)) == (
        f"{f}: line 2: an integer of 5,000 characters; allowed: numbers of magnitude at most 1e+30")
    f.write_text("gpu: H100-SXM\nnodes: " + "9:" * 3000 + "1\n")      # YAML 1.1 base 60
    assert refused("show", str(f)) == (
        f"{f}: nodes: got an integer of more than 4,300 digits; allowed: numbers of magnitude at "
        "most 1e+30")


MODEL = """\
- name: mine
  arch: dense
  layers: LAYERS
  hidden: 4096
  heads: 32
  kv_heads: 32
  ffn: 11008
  vocab: 32000
  seq_len: 4096
  published: {params: PARAMS}
  source: "a test"
"""


@pytest.mark.parametrize("layers, params, message", [
    (".inf", "6.74e9", ": [0].layers: got .inf; allowed: a finite number"),
    ("-.inf", "6.74e9", ": [0].layers: got -.inf; allowed: a finite number"),
    ("32", ".nan", ": [0].published.params: got .nan; allowed: a finite number"),
    ("32", "-6.74e9", ": published.params: got '-6.74e9'; expected a number > 0"),
    ("32", "1" + "0" * 400,
     ": [0].published.params: got an integer of 401 digits; allowed: numbers of magnitude at "
     "most 1e+30"),
])
def test_model_file_numbers(refused, tmp_path, layers, params, message):
    f = tmp_path / "mine.yaml"
    f.write_text(MODEL.replace("LAYERS", layers).replace("PARAMS", params))
    assert refused("train", str(f), "dgx-a100") == f"{f}{message}"


COLLECTIVES = """\
- id: ID
  system: {gpu: A100-SXM4-80GB, gpus_per_node: 8}
  collective: all_reduce
  points:
    - {size: SIZE, busbw: BUSBW}
"""


@pytest.mark.parametrize("entry, size, busbw, message", [
    ("x", "1048576", ".nan", "[0].points[0].busbw: got .nan; allowed: a finite number"),
    ("x", "1" + "0" * 400, "36.2",
     "[0].points[0].size: got an integer of 401 digits; allowed: numbers of magnitude at most "
     "1e+30"),
    ("x" * 100_000, "1048576", "36.2",
     "[0].id: a text of 100,000 characters; allowed: at most 10,000 characters"),
])
def test_collectives_measurements_numbers(refused, tmp_path, entry, size, busbw, message):
    f = tmp_path / "points.yaml"
    f.write_text(COLLECTIVES.replace("ID", entry).replace("SIZE", size).replace("BUSBW", busbw))
    assert refused("validate", str(f)) == f"{f}: {message}"


TRAINING = """\
- id: mine
  system: {gpu: H100-SXM, gpus: 16, gpus_per_node: 8, nodes: 2, scale_up: nvswitch}
  model: {name: Llama 2 7B, arch: dense}
  parallelism: {dp: DP, tp: 1, pp: 1, global_batch: 256, micro_batch: 1}
  result: {tokens_per_s_per_gpu: TOKENS}
"""


def test_training_measurements_numbers(cli, refused, tmp_path):
    f = tmp_path / "train.yaml"
    f.write_text(TRAINING.replace("DP", "16").replace("TOKENS", ".inf"))
    assert refused("validate", str(f)) == (
        f"{f}: [0].result.tokens_per_s_per_gpu: got .inf; allowed: a finite number")
    # a point with a count below 0 or a figure <= 0 is refused and listed, the others still run
    f.write_text(TRAINING.replace("DP", "-8").replace("TOKENS", "3000"))
    code, out, _ = cli("validate", str(f))
    assert code == 0
    assert ("# skipped mine#0: parallelism.dp: got -8; expected a whole number >= 1 "
            "(0: not stated)") in out
    f.write_text(TRAINING.replace("DP", "16").replace("TOKENS", "-3000"))
    assert "# skipped mine#0: result.tokens_per_s_per_gpu: got -3000; expected a number > 0" \
        in cli("validate", str(f))[1]


def test_inference_measurements_numbers(refused, tmp_path):
    f = tmp_path / "serve.yaml"
    f.write_text("- id: mine\n  system: {gpu: H100-SXM, gpus: 1}\n"
                 "  model: {name: Llama 3.1 8B}\n  parallelism: {tp: 1}\n"
                 "  workload: {mode: offline}\n"
                 "  points:\n    - {isl: .nan, osl: 128, output_tokens_per_s: 1000}\n")
    assert refused("validate", str(f)) == (
        f"{f}: [0].points[0].isl: got .nan; allowed: a finite number")


@pytest.mark.parametrize("text, message", [
    ("arrival_s,isl,osl\n1e308,100,10\n",
     "row 2.arrival_s: got '1e308'; expected a number of seconds from 0 to 1e+12 or an ISO "
     "date-time"),
    ("arrival_s,isl,osl," + "k" * 100_000 + "\n0,100,10,1\n",
     "header: a key of 100,000 characters ('kkkkkkkkkkkkkkkkkkkk'...); allowed: keys of at most "
     "256 characters"),
    ("arrival_s,isl,osl\n0,100," + "1" * 100_000 + "\n",
     "row 2.osl: got '" + "1" * 49 + "... (100,002 characters); expected a whole number of "
     "tokens from 1 to 100,000,000"),
])
def test_serving_trace_values(refused, tmp_path, text, message):
    f = tmp_path / "t.csv"
    f.write_text(text)
    assert refused("serve", "llama2-7b", "dgx-a100", "--trace", str(f), "--requests", "2") == (
        f"{f}: {message}")


def test_scheduler_trace_header(refused, tmp_path):
    f = tmp_path / "pods.csv"
    f.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
                 "creation_time,deletion_time,scheduled_time," + "k" * 100_000 + "\n")
    assert refused("schedule", str(f)) == (
        f"{f}: header: a key of 100,000 characters ('kkkkkkkkkkkkkkkkkkkk'...); allowed: keys "
        "of at most 256 characters")


# -- CSV fields of any length -------------------------------------------------------------------
POD_HEADER = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
              "deletion_time,scheduled_time")


def test_a_csv_field_longer_than_pythons_default_limit_is_read(tmp_path):
    """Python's csv module stops at 131,072 characters a field; gpufabric reads any field the
    file-size bound allows (a long free-text column is data, not an error)."""
    from gpufabric.scheduler.jobs import load_jobs
    from gpufabric.workloads.inference.requests import load_trace
    pods = tmp_path / "pods.csv"
    pods.write_text(f"{POD_HEADER},note\n"
                    "p1,1000,1000,1,1000,,LS,Running,0,100,0," + "z" * 200_000 + "\n"
                    "p2,1000,1000,1,1000,,LS,Running,5,100,5,short\n")
    assert load_jobs(str(pods)).names == ["p1", "p2"]
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,isl,osl,prompt\n0,10,10,\"" + "y" * 200_000 + "\"\n1,20,5,x\n")
    assert load_trace(str(trace)).isl.tolist() == [10, 20]


@pytest.mark.parametrize("command", ["schedule", "serve"])
def test_a_csv_quote_never_closed_is_refused_at_its_line(refused, tmp_path, command):
    f = tmp_path / "t.csv"
    if command == "schedule":
        f.write_text(f"{POD_HEADER}\np1,1000,1000,1,1000,,LS,Running,0,100,0\n"
                     'p2,1000,1000,1,1000,"' + "x" * 200_000 + "\n")
        args: tuple[str, ...] = ("schedule", str(f))
    else:
        f.write_text('arrival_s,isl,osl\n0,10,10\n1,"' + "x" * 200_000 + "\n2,30,30\n")
        args = ("serve", "llama2-7b", "dgx-a100", "--trace", str(f), "--requests", "2")
    assert refused(*args) == (f"{f}: line 3: not valid CSV: a quoted field runs to the end of "
                              'the file (its closing " is missing)')


# -- arguments longer than a file name can be ----------------------------------------------------
LONG_SPEC = "gpu=H100-SXM,gpus_per_node=8," + ",".join(["nodes=1"] * 700)   # 4,929 characters


def test_a_long_inline_spec_is_read_as_a_spec(cli):
    assert len(LONG_SPEC) > 4096
    code, out, err = cli("show", LONG_SPEC)
    assert (code, err) == (0, "") and "1 node(s), 8 GPU(s) per node" in out


def test_a_long_name_is_not_opened_as_a_file(refused):
    name = "t" * 5000
    assert refused("show", name).startswith(
        "unknown system (preset name, YAML file or key=value spec) 'tttttttttt")
    assert "ttt... (5,000 characters)' (known: al128-class, aws-p5" in refused("show", name)
    assert refused("train", name, "dgx-a100").startswith("model: unknown model 'tttttttttt")
    assert refused("train", "llama2-7b", name + ".yaml").startswith("unknown system")
    assert refused("schedule", name).startswith("TRACE: unknown trace 'tttttttttt")
    assert refused("schedule", "synthetic-openb", "--nodes", name).startswith(
        "tttttttttt")
    assert len(refused("show", name)) < 2000
