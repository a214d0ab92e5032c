"""``gpufabric discover``: a system file (docs/systems.md) that describes the machine it runs on.

Discovery is one more way to build a :class:`~gpufabric.topology.model.Topology`, beside spec
files and ``nvidia-smi topo -m``. It asks each source in turn, and a source that is absent
adds one note and is otherwise skipped:

* GPUs: NVML (:mod:`~gpufabric.measure.nvml`), else ``nvidia-smi topo -m``
  (:mod:`~gpufabric.measure.smi`), or a saved output of it. Their matrix becomes the system
  file through :func:`gpufabric.topology.nvsmi.to_system`, as ``gpufabric import nvidia-smi``
  does; NVML's matrix gains the RDMA NICs of sysfs, placed by the PCI tree the way nvidia-smi
  places them.
* the CPU (:mod:`~gpufabric.measure.cpu`): sockets, NUMA nodes and the catalog model.
* sysfs (:mod:`~gpufabric.measure.sysfs`): PCIe generation and width of the GPU and NIC links,
  and, on a machine without GPUs, the NICs and the PCIe switches above them.

Examples
--------
>>> import tempfile
>>> d = discover(tempfile.mkdtemp())     # an empty tree: no CPU files, no PCI bus, no GPU
>>> [(x["id"], x["kind"]) for x in d.system["devices"]], d.notes[-1]
([('cpu0', 'cpu')], 'gpu: no GPU found: the system file describes the CPUs and NICs only')
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpufabric.errors import InputError
from gpufabric.measure import cpu as cpu_src
from gpufabric.measure import nvml, smi, sysfs
from gpufabric.topology import nvsmi
from gpufabric.topology.build import from_data


@dataclass
class Discovery:
    """What discovery found: the system file, one note per missing or partial source, and
    the facts behind them (the ``--json`` report)."""

    system: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    #: source -> "used", or why it was not
    sources: dict[str, str] = field(default_factory=dict)
    cpu: cpu_src.CpuInfo | None = None
    pci: dict[str, sysfs.PciDevice] = field(default_factory=dict)
    nics: list[sysfs.Nic] = field(default_factory=list)
    gpus: list[nvml.NvmlGpu] = field(default_factory=list)
    gpu_name: str = ""
    driver: str = ""

    def report(self) -> dict[str, Any]:
        """Plain data for ``--json``."""
        return {"sources": self.sources, "notes": self.notes,
                "cpu": asdict(self.cpu) if self.cpu else None,
                "gpus": [asdict(g) for g in self.gpus], "gpu_name": self.gpu_name,
                "driver": self.driver, "nics": [asdict(n) for n in self.nics],
                "pci": [{**asdict(p), "kind": p.kind} for p in self.pci.values()],
                "system": self.system}


def _bus(bus_id: str) -> str:
    """NVML's ``00000000:17:00.0`` as sysfs names it, ``0000:17:00.0``."""
    return bus_id.lower()[-12:]


def _add_nics(m: nvsmi.TopoMatrix, gpus: list[nvml.NvmlGpu], nics: list[sysfs.Nic],
              pci: dict[str, sysfs.PciDevice], notes: list[str]) -> nvsmi.TopoMatrix:
    """NVML's GPU matrix with the RDMA NICs of sysfs (what ``nvidia-smi topo -m`` lists)."""
    rdma = [n for n in nics if n.rdma and n.pci in pci]
    if not rdma:
        return m
    gdev = [pci.get(_bus(g.bus_id)) for g in gpus]
    if any(d is None for d in gdev):
        notes.append("sysfs: the GPUs' PCI functions are not in sysfs: RDMA NICs left out")
        return m
    devs = [*gdev, *(pci[n.pci] for n in rdma)]
    labels = [*m.labels, *(f"NIC{k}" for k in range(len(rdma)))]
    n_gpu = len(m.labels)
    paths = [[m.paths[i][j] if i < n_gpu and j < n_gpu else
              "X" if i == j else sysfs.level(devs[i], devs[j])    # type: ignore[arg-type]
              for j in range(len(devs))] for i in range(len(devs))]
    return nvsmi.TopoMatrix(labels, paths, m.cpu_affinity, m.numa_affinity, m.gpu_numa_id,
                            {f"NIC{k}": n.rdma for k, n in enumerate(rdma)})


def _nic_attrs(n: sysfs.Nic) -> dict[str, Any]:
    attrs: dict[str, Any] = {"name": n.name, "pci": n.pci}
    for key in ("speed_Mbps", "rdma", "rate_Gbps", "link_layer"):
        if getattr(n, key) not in (None, ""):
            attrs[key] = getattr(n, key)
    return attrs


def _set_link(link: dict[str, Any], gen: int | None, lanes: int | None) -> None:
    if gen:
        link["gen"] = gen
    if lanes:
        link["lanes"] = lanes


def _enrich(data: dict[str, Any], d: Discovery) -> None:
    """Facts the matrix lacks: the CPU model, PCIe generation and width of each GPU and NIC
    link, the GPUs' bus IDs, UUIDs and MIG mode, the NICs' rates."""
    by_id = {x["id"]: x for x in data["devices"]}
    up = {ln["b"]: ln for ln in data["links"] if ln["kind"] == "pcie"}
    for dev in data["devices"]:
        if dev["kind"] == "cpu" and d.cpu:
            dev["model"] = d.cpu.model
            if d.cpu.model_name:
                dev.setdefault("attrs", {})["model_name"] = d.cpu.model_name
    for g in d.gpus:
        dev = by_id.get(f"gpu{g.index}")
        if dev is None:
            continue
        attrs = dev.setdefault("attrs", {})
        attrs.update({"uuid": g.uuid, "pci": _bus(g.bus_id)})
        if g.mig is not None:
            attrs["mig"] = g.mig
        p = d.pci.get(_bus(g.bus_id))
        gen, lanes = (g.pcie_max_gen, g.pcie_max_width)
        if p is not None and not (gen and lanes):
            gen, lanes = sysfs.link_of(p, d.pci)
        if f"gpu{g.index}" in up:
            _set_link(up[f"gpu{g.index}"], gen, lanes)
    by_rdma = {n.rdma: n for n in d.nics if n.rdma}
    for dev in data["devices"]:
        n = by_rdma.get(dev.get("attrs", {}).get("name", "")) if dev["kind"] == "nic" else None
        if n is None:
            continue
        dev["attrs"].update({k: v for k, v in _nic_attrs(n).items() if k != "name"})
        if dev["numa"] < 0 <= n.numa:
            dev["numa"] = n.numa
        p = d.pci.get(n.pci)
        if p is not None and dev["id"] in up:
            _set_link(up[dev["id"]], *sysfs.link_of(p, d.pci))


def host_system(d: Discovery, name: str) -> dict[str, Any]:
    """A system file of a machine without GPUs: its CPU sockets, the NICs and the PCIe switches
    above them (sysfs)."""
    sockets = d.cpu.socket_numa if d.cpu else {0: [0]}
    numa_socket = {k: s for s, ks in sockets.items() for k in ks}
    cpu_id = {s: f"cpu{k}" for k, s in enumerate(sorted(sockets))}
    devices: list[dict[str, Any]] = []
    for k, s in enumerate(sorted(sockets)):
        dev: dict[str, Any] = {"id": cpu_id[s], "kind": "cpu", "model": d.cpu.model if d.cpu
                               else "", "index": k, "numa": (sockets[s] or [k])[0]}
        if d.cpu:
            dev["attrs"] = {"model_name": d.cpu.model_name,
                            "numa_nodes": sockets[s]}
            if d.cpu.cores:     # this socket's share of the cores (the host model's ranks)
                dev["attrs"]["cores"] = max(1, d.cpu.cores // max(1, len(sockets)))
        devices.append(dev)
    ids = [cpu_id[s] for s in sorted(sockets)]
    links: list[dict[str, Any]] = [{"a": a, "b": b, "kind": "cpu"}
                                   for x, a in enumerate(ids) for b in ids[x + 1:]]
    switches: dict[str, str] = {}
    first = sorted(sockets)[0]
    for k, n in enumerate(d.nics):
        socket = numa_socket.get(n.numa, first)
        parent = cpu_id[socket]
        p = d.pci.get(n.pci)
        for sw in sysfs.switches_above(p, d.pci) if p else []:
            if sw not in switches:
                switches[sw] = f"sw{len(switches)}"
                devices.append({"id": switches[sw], "kind": "pcie_switch", "model": "",
                                "numa": devices[ids.index(parent)]["numa"],
                                "attrs": {"pci": sw}})
                up: dict[str, Any] = {"a": parent, "b": switches[sw], "kind": "pcie"}
                _set_link(up, *sysfs.link_of(d.pci[sw], d.pci))
                links.append(up)
            parent = switches[sw]
        devices.append({"id": f"nic{k}", "kind": "nic", "model": "", "index": k,
                        "numa": n.numa if n.numa >= 0 else devices[ids.index(cpu_id[socket])]
                        ["numa"], "attrs": _nic_attrs(n)})
        link: dict[str, Any] = {"a": parent, "b": f"nic{k}", "kind": "pcie"}
        if p is not None:
            gen, lanes = sysfs.link_of(p, d.pci)
            _set_link(link, gen, lanes)
            if not (gen and lanes):
                link["attrs"] = {"pcie_link": "not in sysfs (a virtual device): gen and lanes "
                                              "are the loader's defaults"}
        links.append(link)
    return {"name": name, "devices": devices, "links": links}


def _checked(data: dict[str, Any], name: str, notes: list[str]) -> dict[str, Any]:
    """``data`` if it builds; with a CPU model the design breaks (lanes), without it and a note."""
    try:
        from_data(data, name, name)
        return data
    except InputError as exc:
        models = {x["model"] for x in data["devices"] if x["kind"] == "cpu" and x["model"]}
        if not models:
            raise
        for x in data["devices"]:
            if x["kind"] == "cpu":
                x["model"] = ""
        notes.append(f"CPU model {', '.join(sorted(models))} left out: with it the design "
                     f"does not build ({exc.message})")
        from_data(data, name, name)
        return data


def _to_system(matrix: nvsmi.TopoMatrix, plain: nvsmi.TopoMatrix | None, name: str, model: str,
               saved: str | Path | None, notes: list[str]) -> dict[str, Any] | None:
    """The system file of a matrix; a saved output that is not one PCIe tree is the user's
    input (an error), a live one a note: without the sysfs NICs, else without GPUs (None)."""
    try:
        return nvsmi.to_system(matrix, name, model, file=str(saved or name))
    except InputError as exc:
        if saved is not None:
            raise
        why = exc.message
    if plain is not None and plain is not matrix:
        try:
            data = nvsmi.to_system(plain, name, model, file=name)
            notes.append(f"sysfs: RDMA NICs left out: with them the matrix is not one PCIe "
                         f"tree ({why})")
            return data
        except InputError as exc:
            why = exc.message
    notes.append(f"gpu: the GPUs' matrix is not one PCIe tree ({why}): GPUs left out")
    return None


def _gpu_matrix(d: Discovery, root: str | Path, nvidia_smi: str | Path | None, gpu: str,
                live: bool) -> tuple[nvsmi.TopoMatrix | None, nvsmi.TopoMatrix | None, str]:
    """(the GPUs' topology matrix with the sysfs NICs joined, NVML's matrix before they joined,
    the GPU model) from a saved ``nvidia-smi topo -m`` output, NVML, or nvidia-smi, in that
    order; each source's use or why not in ``d.sources``, what it lacked in ``d.notes``."""
    sources, notes = d.sources, d.notes
    matrix: nvsmi.TopoMatrix | None = None
    plain: nvsmi.TopoMatrix | None = None      # NVML's matrix before the sysfs NICs joined
    model = gpu
    if nvidia_smi is not None:
        matrix, src, _ = smi.topo_matrix(nvidia_smi, gpu)
        sources["nvml"] = "not asked: --nvidia-smi names a saved output"
        sources["nvidia-smi"] = f"used: {src}"
    elif not live:
        sources["nvml"] = sources["nvidia-smi"] = "not asked: a recorded tree, not this machine"
    else:
        nv = nvml.init()
        rep = None
        if nv is not None:
            try:
                rep = nvml.read(nv, root)
            finally:
                nvml.shutdown(nv)
        if rep is not None:
            sources["nvml"] = "used"
            sources["nvidia-smi"] = "not asked: NVML answered"
            d.gpus, d.gpu_name, d.driver = rep.gpus, rep.name, rep.driver
            model = gpu or rep.model
            plain = rep.matrix
            matrix = _add_nics(rep.matrix, rep.gpus, d.nics, d.pci, notes)
        else:
            sources["nvml"] = (nvml.why_not() if nv is None
                               else "NVML lists no GPU, or does not answer about one")
            notes.append(f"nvml: {sources['nvml']}")
            matrix, src, why = smi.topo_matrix(None, gpu)
            sources["nvidia-smi"] = f"used: {src}" if matrix is not None else why
            if matrix is None:
                notes.append(f"nvidia-smi: {why}")
            elif not gpu:
                model, d.gpu_name = smi.gpu_model()
    return matrix, plain, model


def discover(root: str | Path = "/", *, name: str = "", nvidia_smi: str | Path | None = None,
             gpu: str = "", live: bool | None = None) -> Discovery:
    """Describe the machine under ``root`` (``/``: this one) as a system file.

    Parameters
    ----------
    root : path
        Where sysfs and /proc are read (a recorded tree in tests).
    name : str
        System name (default: ``discovered``).
    nvidia_smi : path, optional
        A saved ``nvidia-smi topo -m`` output to read instead of asking NVML and nvidia-smi.
    gpu : str
        GPU model (catalog name) when the sources do not name one.
    live : bool, optional
        Whether to ask NVML and nvidia-smi (default: when ``root`` is ``/``).
    """
    name = name or "discovered"
    live = str(root) == "/" if live is None else live
    notes: list[str] = []
    sources: dict[str, str] = {}
    d = Discovery({}, notes, sources)
    d.cpu = cpu_src.read(root)
    if d.cpu is None:
        sources["cpu"] = f"nothing readable under {Path(root) / 'sys/devices/system/cpu'}"
        notes.append(f"cpu: {sources['cpu']}: one CPU socket of unknown model assumed")
    else:
        sources["cpu"] = "used"
        notes.extend(f"cpu: {n}" for n in d.cpu.notes)
    d.pci = sysfs.pci_devices(root)
    sources["sysfs"] = "used" if d.pci else f"no PCI devices under {Path(root) / 'sys/bus/pci'}"
    if not d.pci:
        notes.append(f"sysfs: {sources['sysfs']}: PCIe links written with default gen and lanes")
    d.nics = sysfs.nics(root, d.pci)

    matrix, plain, model = _gpu_matrix(d, root, nvidia_smi, gpu, live)
    data: dict[str, Any] | None = None
    if matrix is not None:
        if not model:
            notes.append("gpu: GPU model unknown"
                         + (f" (the driver calls it {d.gpu_name!r})" if d.gpu_name else "")
                         + ": NVLink speeds are guessed; give --gpu MODEL "
                           "(see `gpufabric catalog gpus`)")
        data = _to_system(matrix, plain, name, model, nvidia_smi, notes)
    if data is not None:
        _enrich(data, d)
    else:
        if matrix is None:
            notes.append("gpu: no GPU found: the system file describes the CPUs and NICs only")
        data = host_system(d, name)
    d.system = _checked(data, name, notes)
    return d
