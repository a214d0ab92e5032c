"""gpufabric discover: each source from a recorded tree or a fake, and the command as it is.

The sysfs tree of tests/fixtures/sysfs/kvm-epyc-2cpu is this project's development machine
(tests/fixtures/sysfs/SOURCES.md); the nvidia-smi outputs are real ones
(tests/fixtures/nvsmi/SOURCES.md); NVML answers come from a fake pynvml, as in
tests/test_k8s_deploy.py.
"""

import os
import types
from pathlib import Path

import pytest
import yaml

from gpufabric.measure import cpu, discover, nvml, smi, sysfs
from gpufabric.topology import nvsmi
from gpufabric.topology.build import from_data, load

FIX = Path(__file__).parent / "fixtures"
KVM = FIX / "sysfs" / "kvm-epyc-2cpu"


# -- this machine, recorded --------------------------------------------------------------------
def test_the_recorded_kvm_guest_has_two_cpus_one_socket_one_numa_node():
    c = cpu.read(KVM)
    assert (c.model_name, c.model, c.sockets, c.cores, c.threads) == ("AMD EPYC", "", 1, 2, 2)
    assert c.numa_nodes == {0: [0, 1]} and c.socket_numa == {0: [0]}
    assert c.notes == ["CPU model 'AMD EPYC' is not in the catalog (gpufabric catalog cpus): "
                       "written without a model"]


def test_the_recorded_kvm_guest_pci_bus_and_its_one_nic():
    pci = sysfs.pci_devices(KVM)
    assert list(pci) == ["0000:00:00.0", "0000:00:01.0", "0000:00:02.0", "0000:00:03.0",
                         "0000:00:04.0", "0000:00:05.0"]
    assert (pci["0000:00:00.0"].kind, pci["0000:00:00.0"].vendor) == ("host-bridge", "0x8086")
    eth = pci["0000:00:03.0"]
    assert (eth.kind, eth.vendor, eth.device, eth.numa, eth.parents, eth.host_bridge) == \
        ("ethernet", "0x1af4", "0x1041", -1, [], "pci0000:00")
    assert (eth.link_gen, eth.link_width, eth.max_gen, eth.max_width) == (None,) * 4
    # lo, ifb0 and ifb1 are virtual: no device under them
    assert sysfs.nics(KVM, pci) == [sysfs.Nic("eth0", "0000:00:03.0", -1, None)]


def test_pci_path_classes_follow_the_tree_as_nvidia_smi_names_them():
    def dev(addr, parents, host="pci0000:00", numa=0):
        return sysfs.PciDevice(addr, 0x030200, "0x10de", "0x2330", numa, parents,
                               host_bridge=host)
    root_port, up, down = "0000:00:01.0", "0000:01:00.0", "0000:02:00.0"
    gpu = dev("0000:03:00.0", [root_port, up, down])
    assert sysfs.level(gpu, dev("0000:03:00.1", [root_port, up, down])) == "PIX"
    assert sysfs.level(gpu, dev("0000:04:00.0", [root_port, up, "0000:02:01.0"])) == "PIX"
    # below a second switch (upstream port 05:00.0, downstream port 06:00.0)
    assert sysfs.level(gpu, dev("0000:07:00.0", [root_port, up, "0000:02:01.0", "0000:05:00.0",
                                                 "0000:06:00.0"])) == "PXB"
    assert sysfs.level(gpu, dev("0000:11:00.0", ["0000:00:03.0"])) == "PHB"
    assert sysfs.level(gpu, dev("0000:41:00.0", ["0000:40:01.0"], "pci0000:40")) == "NODE"
    assert sysfs.level(gpu, dev("0000:81:00.0", ["0000:80:01.0"], "pci0000:80", 1)) == "SYS"


def test_the_recorded_kvm_guest_becomes_a_cpu_and_a_nic():
    d = discover.discover(KVM)
    assert d.system == {
        "name": "discovered",
        "devices": [{"id": "cpu0", "kind": "cpu", "model": "", "index": 0, "numa": 0,
                     "attrs": {"model_name": "AMD EPYC", "numa_nodes": [0], "cores": 2}},
                    {"id": "nic0", "kind": "nic", "model": "", "index": 0, "numa": 0,
                     "attrs": {"name": "eth0", "pci": "0000:00:03.0"}}],
        "links": [{"a": "cpu0", "b": "nic0", "kind": "pcie",
                   "attrs": {"pcie_link": "not in sysfs (a virtual device): gen and lanes are "
                                          "the loader's defaults"}}]}
    assert d.notes == [
        "cpu: CPU model 'AMD EPYC' is not in the catalog (gpufabric catalog cpus): written "
        "without a model",
        "gpu: no GPU found: the system file describes the CPUs and NICs only"]
    assert d.sources["nvml"] == "not asked: a recorded tree, not this machine"
    t = from_data(d.system, "kvm")
    assert [x.id for x in t] == ["cpu0", "nic0"] and t.gpus() == []


@pytest.mark.parametrize("model_name, model", [
    ("AMD EPYC 7763 64-Core Processor", "EPYC-7763"),
    ("Intel(R) Xeon(R) Platinum 8480+", "Xeon-Platinum-8480+"),
    ("Intel(R) Xeon(R) Gold 6226R CPU @ 2.90GHz", "Xeon-Gold-6226R"),
    ("Intel(R) Xeon(R) CPU E5-2698 v4 @ 2.20GHz", "Xeon-E5-2698-v4"),
    ("AMD EPYC 7543 32-Core Processor", ""),     # not in the catalog
    ("AMD EPYC", ""),                            # a guest that hides the model number
])
def test_cpu_model_names_are_matched_to_the_catalog(model_name, model):
    assert cpu.catalog_cpu(model_name) == model


def test_an_empty_tree_still_gives_a_system_with_one_note_per_missing_source(tmp_path):
    d = discover.discover(tmp_path)
    assert d.notes == [
        f"cpu: nothing readable under {tmp_path}/sys/devices/system/cpu: one CPU socket of "
        "unknown model assumed",
        f"sysfs: no PCI devices under {tmp_path}/sys/bus/pci: PCIe links written with default "
        "gen and lanes",
        "gpu: no GPU found: the system file describes the CPUs and NICs only"]
    assert d.system["devices"] == [{"id": "cpu0", "kind": "cpu", "model": "", "index": 0,
                                    "numa": 0}]


# -- GPU machines: nvidia-smi ----------------------------------------------------------------
@pytest.mark.parametrize("fixture, gpu, gpus, nics", [
    ("dgx_a100_nv12.txt", "A100-SXM4-40GB", 8, 10),
    ("hgx_h100_nv18.txt", "H100-SXM", 8, 8),
    ("rtx6000ada_4gpu_4nic.txt", "", 4, 4),
])
def test_saved_nvidia_smi_outputs_become_system_files_that_keep_the_matrix(fixture, gpu, gpus,
                                                                           nics):
    path = FIX / "nvsmi" / fixture
    d = discover.discover(KVM, nvidia_smi=path, gpu=gpu)
    t = from_data(d.system, "x")
    assert (len(t.gpus()), len(t.nics())) == (gpus, nics)
    want = nvsmi.parse(path.read_text(), file=str(path))
    assert nvsmi.from_topology(t).paths == want.paths
    assert d.sources["nvidia-smi"] == f"used: {path}"


def test_an_nvidia_smi_output_without_a_gpu_model_says_nvlink_speeds_are_guessed():
    d = discover.discover(KVM, nvidia_smi=FIX / "nvsmi" / "dgx_a100_nv12.txt")
    assert d.notes[-1] == ("gpu: GPU model unknown: NVLink speeds are guessed; give --gpu MODEL "
                           "(see `gpufabric catalog gpus`)")


def test_a_cpu_model_whose_lanes_the_design_exceeds_is_left_out_with_a_note(monkeypatch):
    import dataclasses
    kvm = cpu.read(KVM)
    monkeypatch.setattr(cpu, "read", lambda root: dataclasses.replace(kvm,
                                                                      model="Xeon-Gold-6226R"))
    d = discover.discover(KVM, nvidia_smi=FIX / "nvsmi" / "l40s_8gpu_node_sys.txt", gpu="L40S")
    assert d.notes[-1] == (
        "CPU model Xeon-Gold-6226R left out: with it the design does not build (socket 0 of "
        "node 0 needs 64 PCIe lanes but a Xeon-Gold-6226R socket provides 48 in this host; "
        "spread devices over the sockets or add PCIe switches)")
    assert {x["model"] for x in d.system["devices"] if x["kind"] == "cpu"} == {""}


def _script(tmp_path, body):
    exe = tmp_path / "nvidia-smi"
    exe.write_text("#!/bin/sh\n" + body)
    exe.chmod(0o755)
    return str(tmp_path)


def test_the_nvidia_smi_command_is_run_and_its_failure_is_one_note(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", _script(tmp_path, 'echo "NVIDIA-SMI has failed because it '
                       'couldn\'t communicate with the NVIDIA driver."; exit 9\n'))
    assert smi.topo_matrix() == (None, "", "`nvidia-smi topo -m` failed (exit status 9): "
                                 "NVIDIA-SMI has failed because it couldn't communicate with "
                                 "the NVIDIA driver.")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert smi.topo_matrix() == (None, "", "nvidia-smi is not on PATH")


def test_the_nvidia_smi_command_answers_the_matrix_and_the_gpu_name(tmp_path, monkeypatch):
    saved = FIX / "nvsmi" / "hgx_h100_nv18.txt"
    monkeypatch.setenv("PATH", _script(
        tmp_path, f'if [ "$1" = topo ]; then /bin/cat "{saved}"; '
                  'else echo "NVIDIA H100 80GB HBM3"; fi\n'))
    monkeypatch.setattr(nvml, "init", lambda: None)
    d = discover.discover(KVM, live=True)
    assert d.sources["nvidia-smi"] == "used: nvidia-smi topo -m"
    assert {x["model"] for x in d.system["devices"] if x["kind"] == "gpu"} == {"H100-SXM"}
    assert d.notes[1].startswith("nvml: ")


# -- GPU machines: NVML --------------------------------------------------------------------------
class FakeNVML(types.SimpleNamespace):
    """Two A100 PCIe cards on an NVLink bridge, one per socket, PCIe Gen4 x16, MIG off."""

    BUS = ["00000000:03:00.0", "00000000:81:00.0"]

    def __init__(self):
        super().__init__(
            NVML_NVLINK_MAX_LINKS=12,
            nvmlDeviceGetCount=lambda: 2,
            nvmlDeviceGetHandleByIndex=lambda i: i,
            nvmlDeviceGetUUID=lambda h: f"GPU-fake-{h}",
            nvmlDeviceGetPciInfo=lambda h: types.SimpleNamespace(busId=self.BUS[h].encode()),
            nvmlDeviceGetName=lambda h: b"NVIDIA A100 80GB PCIe",
            nvmlDeviceGetNvLinkState=lambda h, ln: 1,
            nvmlDeviceGetNvLinkRemotePciInfo=lambda h, ln: types.SimpleNamespace(
                busId=self.BUS[1 - h]),
            nvmlDeviceGetTopologyCommonAncestor=lambda a, b: 50,
            nvmlDeviceGetNumaNodeId=lambda h: h,
            nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 4,
            nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
            nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 1,
            nvmlDeviceGetCurrPcieLinkWidth=lambda h: 16,
            nvmlDeviceGetMigMode=lambda h: [0, 0],
            nvmlSystemGetDriverVersion=lambda: "550.54.15",
            nvmlShutdown=lambda: None)


def _tree(root: Path) -> None:
    """A made-up sysfs tree (not a recording) beside FakeNVML: GPU0 and an InfiniBand NIC under
    one PCIe switch of socket 0, GPU1 on socket 1's root complex."""
    def dev(path, cls, numa, speed="16.0 GT/s PCIe", width="16"):
        d = root / "sys/devices" / path
        d.mkdir(parents=True)
        for k, v in {"class": cls, "vendor": "0x10de", "device": "0x20b5",
                     "numa_node": str(numa), "max_link_speed": speed,
                     "max_link_width": width}.items():
            (d / k).write_text(v + "\n")
        link = root / "sys/bus/pci/devices" / Path(path).name
        link.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(os.path.relpath(d, link.parent), link)
        return d
    dev("pci0000:00/0000:00:01.0", "0x060400", 0, "32.0 GT/s PCIe")
    dev("pci0000:00/0000:00:01.0/0000:01:00.0", "0x060400", 0)
    dev("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0", "0x060400", 0)
    dev("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0", "0x060400", 0)
    dev("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0/0000:03:00.0", "0x030200", 0)
    nic = dev("pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:01.0/0000:04:00.0", "0x020700", 0)
    dev("pci0000:80/0000:80:01.0", "0x060400", 1)
    dev("pci0000:80/0000:80:01.0/0000:81:00.0", "0x030200", 1)
    port = root / "sys/class/infiniband/mlx5_0/ports/1"
    port.mkdir(parents=True)
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    (port / "link_layer").write_text("InfiniBand\n")
    os.symlink(os.path.relpath(nic, port.parent.parent), port.parent.parent / "device")


def test_nvml_gpus_with_sysfs_nics_placed_by_the_pci_tree(tmp_path, monkeypatch):
    _tree(tmp_path)
    monkeypatch.setattr(nvml, "init", FakeNVML)
    d = discover.discover(tmp_path, live=True)
    assert d.sources["nvml"] == "used" and d.driver == "550.54.15"
    assert [(g.bus_id, g.numa, g.pcie_gen, g.pcie_max_gen, g.mig) for g in d.gpus] == [
        ("00000000:03:00.0", 0, 1, 4, False), ("00000000:81:00.0", 1, 1, 4, False)]
    assert d.nics == [sysfs.Nic("mlx5_0", "0000:04:00.0", 0, None, "mlx5_0", 400.0,
                                "InfiniBand")]
    t = from_data(d.system, "x")
    m = nvsmi.from_topology(t)
    assert m.labels == ["GPU0", "GPU1", "NIC0"]
    assert m.paths == [["X", "NV12", "PIX"], ["NV12", "X", "SYS"], ["PIX", "SYS", "X"]]
    g0 = t.devices["gpu0"]
    assert (g0.model, g0.attrs["uuid"], g0.attrs["pci"], g0.attrs["mig"]) == \
        ("A100-PCIe", "GPU-fake-0", "0000:03:00.0", False)
    nic = t.devices["nic0"]
    assert (nic.attrs["rdma"], nic.attrs["rate_Gbps"], nic.numa) == ("mlx5_0", 400.0, 0)
    # the GPU's PCIe link at its maximum (NVML: Gen4 x16), not the idle Gen1 it runs at now
    up = [ln for _, ln in t.neighbors("gpu1") if ln.kind == "pcie"][0]
    assert (up.gen, up.lanes) == (4, 16)


def test_sysfs_nics_that_break_nvmls_pcie_tree_are_left_out_with_a_note(tmp_path, monkeypatch):
    _tree(tmp_path)

    def no_nvlink(h, ln):
        raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
    nv = FakeNVML()
    nv.nvmlDeviceGetNvLinkState = no_nvlink
    nv.nvmlDeviceGetTopologyCommonAncestor = lambda a, b: 10     # NVML: one switch (PIX)
    monkeypatch.setattr(nvml, "init", lambda: nv)
    d = discover.discover(tmp_path, live=True)
    assert d.notes[-1] == (
        "sysfs: RDMA NICs left out: with them the matrix is not one PCIe tree (GPU1-NIC0 is SYS, "
        "but the other paths put the two where a PCIe tree gives PIX; the matrix does not "
        "describe one PCIe tree per socket)")
    assert [x["id"] for x in d.system["devices"]] == ["cpu0", "sw0", "gpu0", "gpu1"]


def test_no_pynvml_is_one_note_naming_the_extra(monkeypatch):
    import builtins
    real = builtins.__import__

    def no_pynvml(name, *a, **k):
        if name == "pynvml":
            raise ImportError(name)
        return real(name, *a, **k)
    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    assert nvml.init() is None
    assert nvml.why_not() == "nvidia-ml-py is not installed (pip install 'gpufabric[k8s]')"


# -- the command ---------------------------------------------------------------------------------
def test_discover_on_this_machine_writes_a_file_show_reads(cli, tmp_path):
    out = tmp_path / "x.yaml"
    code, stdout, err = cli("discover", "-o", str(out))
    assert code == 0 and stdout.startswith(f"wrote {out}: ")
    assert all(line.startswith("gpufabric: note: ") for line in err.splitlines())
    assert "Traceback" not in err
    load(str(out))
    code, stdout, _ = cli("show", str(out))
    assert code == 0 and "x" in stdout


def test_discover_of_the_recorded_tree_prints_the_file_and_the_report(cli):
    code, stdout, err = cli("discover", "--root", str(KVM))
    assert code == 0 and yaml.safe_load(stdout)["devices"][1]["attrs"]["name"] == "eth0"
    assert err.splitlines() == [
        "gpufabric: note: cpu: CPU model 'AMD EPYC' is not in the catalog (gpufabric catalog "
        "cpus): written without a model",
        "gpufabric: note: gpu: no GPU found: the system file describes the CPUs and NICs only"]
    import json
    code, stdout, _ = cli("discover", "--root", str(KVM), "--json")
    report = json.loads(stdout)
    assert code == 0 and report["cpu"]["threads"] == 2 and len(report["pci"]) == 6


def test_discover_refuses_bad_input_in_one_line_and_writes_nothing(cli, tmp_path):
    out = tmp_path / "x.yaml"
    bad = tmp_path / "topo.txt"
    bad.write_text("hello\n")
    code, _, err = cli("discover", "--root", str(KVM), "--nvidia-smi", str(bad), "-o", str(out))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith(f"gpufabric: error: {bad}: ") and not out.exists()
    code, _, err = cli("discover", "--root", str(KVM), "-o", str(tmp_path / "no" / "x.yaml"))
    assert code == 2 and err == (f"gpufabric: error: {tmp_path}/no/x.yaml: --output: directory "
                                 f"'{tmp_path}/no' does not exist; create it first\n")
    code, _, err = cli("discover", "--root", str(tmp_path / "nowhere"))
    assert code == 2 and err == (f"gpufabric: error: {tmp_path}/nowhere: --root: no such "
                                 "directory; expected / or a recorded tree "
                                 "(tools/capture_sysfs.py)\n")
    code, _, err = cli("discover", "--root", str(KVM), "--gpu", "H100-SMX")
    assert code == 2 and err.startswith("gpufabric: error: --gpu: unknown GPU 'H100-SMX'; "
                                        "did you mean 'H100-SXM'?")
