"""The ``nvidia-smi topo -m`` matrix: parse it, print it, turn it into a system file and back.

``nvidia-smi topo -m`` prints, for every pair of GPUs and NICs of one server, how data travels
between them (``NV#``, ``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``; see docs/systems.md), and
for every GPU the CPUs and NUMA node it is close to. This module reads that text
(:func:`parse`), prints it back the way a current driver does (:func:`render`), infers a system
file that reproduces it (:func:`to_system`) and computes the matrix of any
:class:`~gpufabric.topology.model.Topology` (:func:`from_topology`).

What the parser tolerates, because real outputs pasted into issues and docs differ:

- cells separated by tabs (what nvidia-smi writes) or by spaces (what a terminal or a web page
  turns them into), and a mix of both;
- ANSI escape codes (nvidia-smi underlines the header row on a terminal);
- the multi-word columns ``CPU Affinity``, ``NUMA Affinity`` and ``GPU NUMA ID``, any of them
  missing (old drivers print only ``CPU Affinity``), and empty cells in them;
- NIC columns named ``NIC0``.. with a ``NIC Legend:`` block naming them (current drivers) or
  named ``mlx5_0``.. directly (older drivers);
- ``SOC``, the old name of ``SYS`` (read as ``SYS``);
- text before the header (a prompt, the command) and after the matrix (the ``Legend:`` block).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpufabric import catalog
from gpufabric.errors import InputError
from gpufabric.topology.schema import MAX_GPUS_PER_DOMAIN, MAX_NICS, MAX_SOCKETS

#: Path types other than ``NV#`` (``X`` only on the diagonal).
PATH_TYPES = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")
#: The columns after the device columns, in the order nvidia-smi prints them.
INFO_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
#: PCIe link assumed by :func:`to_system`; ``nvidia-smi topo -m`` does not show link widths.
DEFAULT_PCIE_GEN = 4
DEFAULT_PCIE_LANES = 16

_ALLOWED = ("X (diagonal only), NV<n> (GPU pairs only), PIX, PXB, PHB, NODE, SYS "
            "(or SOC, the old name of SYS)")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_NV = re.compile(r"^NV(\d+)$")
_GPU = re.compile(r"^GPU(\d{1,6})$")
_NICN = re.compile(r"^NIC(\d+)$")
_LEGEND_ENTRY = re.compile(r"^\s*(\S+):\s+(\S+)\s*$")

#: Rank of each PCIe path type: the level of the PCIe tree at which two devices meet.
_LEVEL = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}

LEGEND = """Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


@dataclass
class TopoMatrix:
    """One ``nvidia-smi topo -m`` matrix.

    Parameters
    ----------
    labels : list of str
        Column (and row) labels in printed order: ``GPU0``.. then ``NIC0``.. (or ``mlx5_0``..).
    paths : list of list of str
        Square matrix of path types, ``paths[i][j]`` between ``labels[i]`` and ``labels[j]``:
        ``X`` on the diagonal, else ``NV#``, ``PIX``, ``PXB``, ``PHB``, ``NODE`` or ``SYS``.
    cpu_affinity, numa_affinity, gpu_numa_id : list of str
        Per GPU, in GPU order, verbatim (``"48-63,176-191"``, ``"3"``, ``"N/A"``); ``""`` where
        the output has no such column or an empty cell. Missing lists are filled with ``""``.
    nic_names : dict of str to str
        From the ``NIC Legend:`` block: ``{"NIC0": "mlx5_0", ...}``; empty when there is none.

    Examples
    --------
    >>> m = parse("\\tGPU0\\tGPU1\\tCPU Affinity\\tNUMA Affinity\\n"
    ...           "GPU0\\t X \\tNV4\\t0-31\\t0\\nGPU1\\tNV4\\t X \\t0-31\\t0\\n")
    >>> m.path("GPU0", "GPU1"), m.numa_affinity
    ('NV4', ['0', '0'])
    """

    labels: list[str]
    paths: list[list[str]]
    cpu_affinity: list[str] = field(default_factory=list)
    numa_affinity: list[str] = field(default_factory=list)
    gpu_numa_id: list[str] = field(default_factory=list)
    nic_names: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n_gpu = len(self.gpus)
        for name in ("cpu_affinity", "numa_affinity", "gpu_numa_id"):
            values = list(getattr(self, name))
            setattr(self, name, values + [""] * (n_gpu - len(values)))

    @property
    def gpus(self) -> list[str]:
        """GPU labels, in order."""
        return [ln for ln in self.labels if _GPU.match(ln)]

    @property
    def nics(self) -> list[str]:
        """NIC labels, in order."""
        return [ln for ln in self.labels if not _GPU.match(ln)]

    def path(self, a: str, b: str) -> str:
        """The path type between two labels."""
        return self.paths[self.labels.index(a)][self.labels.index(b)]

    def nic_name(self, label: str) -> str:
        """The device name of a NIC column: from the legend, or the label itself when the
        column is named after the device (``mlx5_0``); ``""`` if unknown."""
        if label in self.nic_names:
            return self.nic_names[label]
        return "" if _NICN.match(label) else label


# -- parse ----------------------------------------------------------------------------------
def _group(rx: re.Pattern[str], text: str) -> str:
    """The first group of ``rx`` in ``text``, which the parser already matched."""
    m = rx.match(text)
    if m is None:
        raise ValueError(f"{text!r} does not match {rx.pattern}")
    return m.group(1)


def _clean(line: str) -> str:
    return _ANSI.sub("", line).replace("\r", "")


def _split_header(tokens: list[str], file: str) -> tuple[list[str], list[str]]:
    """Device labels and info columns of a header row (tokens split on whitespace)."""
    labels: list[str] = []
    info: list[str] = []
    i = 0
    while i < len(tokens):
        for col in INFO_COLUMNS:
            words = col.split()
            if tokens[i:i + len(words)] == words:
                if col in info:
                    raise InputError(f"column '{col}' appears twice", file=file, field="header")
                info.append(col)
                i += len(words)
                break
        else:
            tok = tokens[i]
            if info:
                raise InputError(
                    f"'{tok}' after the {info[-1]!r} column; allowed after the device columns: "
                    + ", ".join(INFO_COLUMNS), file=file, field="header")
            if tok in labels:
                raise InputError(f"column '{tok}' appears twice", file=file, field="header")
            labels.append(tok)
            i += 1
    if [c for c in INFO_COLUMNS if c in info] != info:
        raise InputError(f"columns {info} out of order; nvidia-smi prints "
                         + ", ".join(INFO_COLUMNS), file=file, field="header")
    gpu_seen_after_nic = False
    seen_nic = False
    for ln in labels:
        if _GPU.match(ln):
            gpu_seen_after_nic |= seen_nic
        else:
            seen_nic = True
    if gpu_seen_after_nic:
        raise InputError("GPU columns must come before NIC columns", file=file, field="header")
    n_gpu = sum(1 for ln in labels if _GPU.match(ln))
    if n_gpu > MAX_GPUS_PER_DOMAIN:
        raise InputError(f"{n_gpu} GPU columns; allowed: at most {MAX_GPUS_PER_DOMAIN} (the "
                         "largest NVLink domain, gpus_per_node's bound in a spec)", file=file,
                         field="header")
    if len(labels) - n_gpu > MAX_NICS:
        raise InputError(f"{len(labels) - n_gpu} NIC columns; allowed: at most {MAX_NICS} "
                         "(nics_per_node's bound in a spec)", file=file, field="header")
    return labels, info


def nvlink_bound(gpu_model: str = "") -> tuple[int, str]:
    """The largest ``NV#`` a matrix may hold, and why: the NVLink links of ``gpu_model``, or
    without a model the most any GPU of the catalog has.

    >>> nvlink_bound("A100-SXM4-80GB"), nvlink_bound("RTX-4090")
    ((12, 'A100-SXM4-80GB has 12'), (0, 'RTX-4090 has no NVLink'))
    >>> nvlink_bound()
    (18, 'no GPU in the catalog has more than 18, H100-SXM')
    """
    if gpu_model:
        g = catalog.gpu(gpu_model)
        if not (g.peer_link or "").startswith("nvlink") or not g.peer_links:
            return 0, f"{g.name} has no NVLink"
        return g.peer_links, f"{g.name} has {g.peer_links}"
    most, name = catalog.most_nvlinks()
    return most, f"no GPU in the catalog has more than {most}, {name}"


def _check_cell(cell: str, row: str, col: str, diagonal: bool, file: str,
                nv_bound: tuple[int, str] = (0, "")) -> str:
    where = f"row {row}, column {col}"
    if cell == "SOC":
        cell = "SYS"
    if diagonal:
        if cell != "X":
            raise InputError(f"'{cell}' on the diagonal; allowed: X", file=file, field=where)
        return cell
    m = _NV.match(cell)
    if m:
        if not (_GPU.match(row) and _GPU.match(col)) or int(m.group(1)[:6]) < 1:
            raise InputError(f"'{cell}' is not a path type here; allowed: {_ALLOWED}",
                             file=file, field=where)
        most, why = nv_bound
        if int(m.group(1)[:6]) > most:   # NV# counts bonded NVLinks: at most a GPU's links
            allowed = f"NV1 to NV{most} (NV# counts bonded NVLinks; {why})" if most else \
                f"no NV# cell ({why})"
            raise InputError(f"'{cell}' is more NVLinks than a GPU has; allowed: {allowed}",
                             file=file, field=where)
        return cell
    if cell not in _LEVEL:
        raise InputError(f"'{cell}' is not a path type; allowed: {_ALLOWED}",
                         file=file, field=where)
    return cell


def _read_row(tokens: list[str], labels: list[str], info: list[str], paths: list[list[str]],
              extra: dict[str, list[str]], file: str, nv_bound: tuple[int, str]) -> None:
    """Append the next row of the matrix (its cells to ``paths``, a GPU row's affinity columns
    to ``extra``), refusing a row out of order, short of cells or with fields it cannot have."""
    n = len(labels)
    row = labels[len(paths)]
    if tokens[0] != row:
        raise InputError(f"expected the row of {row}, found a line starting with "
                         f"'{tokens[0]}'; rows follow the column order "
                         + " ".join(labels), file=file, field=f"row {len(paths) + 1}")
    cells = tokens[1:1 + n]
    if len(cells) < n:
        raise InputError(f"{len(cells)} cells, expected {n} (one per column "
                         + " ".join(labels) + ")", file=file, field=f"row {row}")
    r = len(paths)
    paths.append([_check_cell(c, row, labels[j], j == r, file, nv_bound)
                  for j, c in enumerate(cells)])
    rest = tokens[1 + n:]
    if _GPU.match(row):
        if len(rest) > len(info):
            raise InputError(f"{len(rest)} fields after the matrix cells, but the header "
                             f"has only these columns there: {info}",
                             file=file, field=f"row {row}")
        got = dict(zip(info, rest + [""] * (len(info) - len(rest)), strict=True))
        for c in INFO_COLUMNS:
            extra[c].append(got.get(c, ""))
    elif rest:
        raise InputError(f"unexpected fields {rest} after the matrix cells; NIC rows "
                         "have no affinity columns", file=file, field=f"row {row}")


def _check_symmetric(labels: list[str], paths: list[list[str]], file: str) -> None:
    """The matrix reads the same both ways (a path from A to B is the path from B to A)."""
    n = len(labels)
    for a in range(n):
        for b in range(a + 1, n):
            if paths[a][b] != paths[b][a]:
                raise InputError(
                    f"not symmetric: {labels[a]}->{labels[b]} is {paths[a][b]} but "
                    f"{labels[b]}->{labels[a]} is {paths[b][a]}",
                    file=file, field=f"row {labels[b]}, column {labels[a]}")


def parse(text: str, file: str = "<input>", *, gpu_model: str = "") -> TopoMatrix:
    """Read the output of ``nvidia-smi topo -m``.

    Parameters
    ----------
    text : str
        The output, as printed or as pasted (see the module docstring for what is tolerated).
    file : str
        Where it came from, for error messages.
    gpu_model : str
        Catalog name of the GPUs, if known: ``NV#`` is at most its NVLink links (without it,
        at most the most links of any GPU in the catalog, :func:`nvlink_bound`).

    Returns
    -------
    TopoMatrix

    Raises
    ------
    InputError
        Naming the file, the row/column (or header / NIC Legend) and what is allowed.

    Examples
    --------
    >>> m = parse("        GPU0    GPU1    CPU Affinity\\n"
    ...           "GPU0     X      SOC     0-7\\n"
    ...           "GPU1    SOC      X      8-15\\n")
    >>> m.labels, m.path("GPU1", "GPU0"), m.cpu_affinity, m.numa_affinity
    (['GPU0', 'GPU1'], 'SYS', ['0-7', '8-15'], ['', ''])
    """
    lines = [_clean(ln) for ln in text.splitlines()]
    start = next((i for i, ln in enumerate(lines) if "GPU0" in ln.split()), None)
    if start is None:
        raise InputError("no header row with a GPU0 column; expected the output of "
                         "`nvidia-smi topo -m`", file=file, field="header")
    labels, info = _split_header(lines[start].split(), file)
    n = len(labels)
    nv_bound = nvlink_bound(gpu_model)
    paths: list[list[str]] = []
    extra: dict[str, list[str]] = {c: [] for c in INFO_COLUMNS}
    i = start + 1
    while i < len(lines) and len(paths) < n:
        tokens = lines[i].split()
        i += 1
        if not tokens:
            if paths:
                break
            continue
        if tokens[0].startswith("Legend"):
            break
        _read_row(tokens, labels, info, paths, extra, file, nv_bound)
    if len(paths) < n:
        raise InputError(f"matrix has {len(paths)} rows, expected {n} (one per column); "
                         f"missing the row of {labels[len(paths)]}", file=file,
                         field=f"row {labels[len(paths)]}")
    _check_symmetric(labels, paths, file)
    nic_names = _parse_nic_legend(lines[i:], labels, file)
    return TopoMatrix(labels=labels, paths=paths, cpu_affinity=extra["CPU Affinity"],
                      numa_affinity=extra["NUMA Affinity"], gpu_numa_id=extra["GPU NUMA ID"],
                      nic_names=nic_names)


def _parse_nic_legend(lines: list[str], labels: list[str], file: str) -> dict[str, str]:
    names: dict[str, str] = {}
    in_legend = False
    for line in lines:
        if line.strip() == "NIC Legend:":
            in_legend = True
            continue
        if not in_legend or not line.strip():
            continue
        m = _LEGEND_ENTRY.match(line)
        if not m:
            break
        label, name = m.groups()
        if label not in labels or _GPU.match(label):
            raise InputError(f"names '{label}', which is not a NIC column; NIC columns: "
                             + " ".join(ln for ln in labels if not _GPU.match(ln)),
                             file=file, field="NIC Legend")
        names[label] = name
    return names


# -- render ---------------------------------------------------------------------------------
def render(m: TopoMatrix) -> str:
    """Print a matrix the way a current nvidia-smi does (tab separated, then the legends).

    ``parse(render(m)) == m`` for every matrix in which no GPU has an empty affinity cell
    before a filled one: such a cell is printed ``N/A``, as nvidia-smi does, because the
    columns after the matrix are read left to right.

    Examples
    --------
    >>> m = TopoMatrix(["GPU0", "GPU1"], [["X", "PHB"], ["PHB", "X"]], ["0-63", "0-63"],
    ...                ["0", "0"])
    >>> print(render(m).split("\\n\\n")[0].expandtabs(8))
            GPU0    GPU1    CPU Affinity    NUMA Affinity
    GPU0     X      PHB     0-63    0
    GPU1    PHB      X      0-63    0
    """
    gpu_numa = any(m.gpu_numa_id)
    head = ["", *m.labels, "CPU Affinity", "NUMA Affinity"] + (["GPU NUMA ID"] if gpu_numa else [])
    out = ["\t".join(head)]
    g = 0
    for i, label in enumerate(m.labels):
        cells = [" X " if c == "X" else c for c in m.paths[i]]
        row = label + "\t" + "\t".join(cells)
        if _GPU.match(label):
            vals = [m.cpu_affinity[g], m.numa_affinity[g]]
            vals += [m.gpu_numa_id[g]] if gpu_numa else []
            # an empty cell before a filled one would read as a shift of columns: print N/A
            vals = [v or ("N/A" if any(vals[k + 1:]) else "") for k, v in enumerate(vals)]
            row += "\t" + "\t".join(vals[:2]) + ("\t\t" + vals[2] if gpu_numa else "")
            g += 1
        out.append(row)
    text = "\n".join(out) + "\n\n" + LEGEND
    if m.nic_names:
        text += "\nNIC Legend:\n\n" + "".join(
            f"  {label}: {m.nic_names[label]}\n" for label in m.nics if label in m.nic_names)
    return text


# -- to_system ------------------------------------------------------------------------------
class _Clusters:
    """Single-linkage clusters of matrix indices at each PCIe level (1 PIX .. 4 NODE)."""

    def __init__(self, m: TopoMatrix, idx: list[int]):
        self.idx = idx
        self.level: dict[tuple[int, int], int] = {}
        for x, a in enumerate(idx):
            for b in idx[x + 1:]:
                lv = _LEVEL.get(m.paths[a][b])
                if lv is not None:
                    self.level[(a, b)] = self.level[(b, a)] = lv

    def groups(self, members: list[int], max_level: int) -> list[list[int]]:
        parent = {a: a for a in members}

        def find(a: int) -> int:
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        for x, a in enumerate(members):
            for b in members[x + 1:]:
                if self.level.get((a, b), 99) <= max_level:
                    parent[find(a)] = find(b)
        out: dict[int, list[int]] = {}
        for a in members:
            out.setdefault(find(a), []).append(a)
        return list(out.values())


def _socket_groups(m: TopoMatrix, cl: _Clusters) -> list[list[int]]:
    """Devices grouped by CPU socket / NUMA node: joined by any path short of SYS; GPUs whose
    PCIe path is hidden behind NVLink join when they share a NUMA (else CPU) affinity."""
    groups = cl.groups(list(range(len(m.labels))), 4)
    gpu_pos = {m.labels.index(ln): k for k, ln in enumerate(m.gpus)}

    def key(a: int) -> str:
        k = gpu_pos.get(a)
        if k is None:
            return ""
        return m.numa_affinity[k] or m.cpu_affinity[k]

    merged = True
    while merged:
        merged = False
        for x, ga in enumerate(groups):
            for gb in groups[x + 1:]:
                if any(m.paths[a][b] == "SYS" for a in ga for b in gb):
                    continue
                if any(m.paths[a][b].startswith("NV") and key(a) and key(a) == key(b)
                       for a in ga for b in gb):
                    ga.extend(gb)
                    groups.remove(gb)
                    merged = True
                    break
            if merged:
                break
    for g in groups:
        g.sort()
    groups.sort(key=lambda g: g[0])
    return groups


def _check_tree(m: TopoMatrix, cl: _Clusters, sockets: list[list[int]], file: str) -> None:
    """Every known PCIe path must be the level at which the two devices' clusters meet."""
    where: dict[int, tuple] = {}
    for s, members in enumerate(sockets):
        for hb, hb_members in enumerate(cl.groups(members, 3)):
            for sw, sw_members in enumerate(cl.groups(hb_members, 2)):
                for leaf, leaf_members in enumerate(cl.groups(sw_members, 1)):
                    for a in leaf_members:
                        where[a] = (s, hb, sw, leaf)
    for (a, b), lv in cl.level.items():
        wa, wb = where[a], where[b]
        same = next((k for k in range(4) if wa[k] != wb[k]), 4)
        implied = 5 - same if same < 4 else 1
        if implied != lv:
            names = {1: "PIX", 2: "PXB", 3: "PHB", 4: "NODE", 5: "SYS"}
            raise InputError(
                f"{m.labels[a]}-{m.labels[b]} is {names[lv]}, but the other paths put the two "
                f"where a PCIe tree gives {names[implied]}; the matrix does not describe one "
                "PCIe tree per socket", file=file, field=f"row {m.labels[a]}, column {m.labels[b]}")


def to_system(m: TopoMatrix, name: str, gpu_model: str = "", *,
              nvlink_gen: int | None = None, file: str | None = None) -> dict[str, Any]:
    """A system file (docs/systems.md) that reproduces the matrix when built and classified.

    Structure is inferred from the path types: devices that are not ``SYS`` to each other share
    a CPU socket (GPUs whose PCIe path is hidden behind ``NV#`` join by NUMA affinity); inside a
    socket, devices that are ``PHB`` or closer share a host bridge (``NODE`` otherwise); a
    ``PIX`` group hangs off one PCIe switch; groups joined by ``PXB`` sit under lower switches
    below one upper switch (a cascade). ``NV#`` between two GPUs becomes an NVLink link with
    ``count`` #, or, when every GPU pair has the same ``NV#`` and there are more than 4 GPUs
    (or direct bundles would need more links per GPU than a GPU has: four GPUs of an NVSwitch
    baseboard, all NV18), one ``nvswitch`` device linked to each GPU with that count. Affinity strings and NIC names
    are kept verbatim in device attrs so that :func:`from_topology` prints the same matrix.
    Link speeds are not in the matrix: PCIe links are written as Gen :data:`DEFAULT_PCIE_GEN`
    x :data:`DEFAULT_PCIE_LANES`, and NVLink links of a GPU of unknown model get ``gen``
    ``nvlink_gen`` (default: 4 when a GPU has more than 12 links, NVLink 3's most, else 3).

    Parameters
    ----------
    m : TopoMatrix
    name : str
        System name.
    gpu_model : str
        Catalog name of the GPUs, or ``""`` if unknown.
    nvlink_gen : int, optional
        NVLink generation to assume when ``gpu_model`` is unknown.
    file : str, optional
        Where the matrix came from, for error messages (default: ``name``).

    Raises
    ------
    InputError
        If the PCIe path types cannot come from one PCIe tree per socket.

    Examples
    --------
    >>> m = parse("\\tGPU0\\tGPU1\\tCPU Affinity\\n"
    ...           "GPU0\\t X \\tPIX\\t0-7\\nGPU1\\tPIX\\t X \\t0-7\\n")
    >>> sysf = to_system(m, "box")
    >>> [(d["id"], d["kind"]) for d in sysf["devices"]]
    [('cpu0', 'cpu'), ('sw0', 'pcie_switch'), ('gpu0', 'gpu'), ('gpu1', 'gpu')]
    >>> [(l["a"], l["b"]) for l in sysf["links"]]
    [('cpu0', 'sw0'), ('sw0', 'gpu0'), ('sw0', 'gpu1')]
    """
    n = len(m.labels)
    cl = _Clusters(m, list(range(n)))
    sockets = _socket_groups(m, cl)
    if len(sockets) > MAX_SOCKETS:
        raise InputError(f"the SYS paths put the devices on {len(sockets)} CPU sockets; allowed: "
                         f"at most {MAX_SOCKETS} (host.sockets' bound in a spec)",
                         file=file or name)
    _check_tree(m, cl, sockets, file or name)
    dev_id: dict[int, str] = {}
    for label in m.gpus:
        dev_id[m.labels.index(label)] = f"gpu{_group(_GPU, label)}"
    for k, label in enumerate(m.nics):
        dev_id[m.labels.index(label)] = f"nic{k}"
    tree = _PcieTree(dev_id)
    for members, numa in zip(sockets, _socket_numas(m, sockets), strict=True):
        tree.socket(cl, members, numa)
    devices = [*tree.cpus, *tree.switches, *_endpoints(m, dev_id, tree.numa_of, gpu_model)]
    nv_devices, nv_links = _nvlinks(m, dev_id, gpu_model, nvlink_gen)
    return {"name": name, "devices": devices + nv_devices,
            "links": [*tree.cpu_links(), *tree.links, *nv_links]}


def _socket_numas(m: TopoMatrix, sockets: list[list[int]]) -> list[int]:
    """NUMA node of each socket: the GPUs' NUMA affinity when it is one number shared by them
    (and no two sockets share it), else the first free numbers."""
    numas: list[int | None] = []
    for members in sockets:
        vals = {m.numa_affinity[m.gpus.index(m.labels[a])]
                for a in members if _GPU.match(m.labels[a])}
        v = vals.pop() if len(vals) == 1 else ""
        numas.append(int(v) if v.isdigit() else None)
    taken = [v for v in numas if v is not None]
    if len(set(taken)) != len(taken):
        numas = [None] * len(numas)
        taken = []
    free = (k for k in range(len(m.labels) + len(sockets) + 1) if k not in taken)
    return [v if v is not None else next(free) for v in numas]


class _PcieTree:
    """The CPUs, PCIe switches and PCIe links of a system file, socket by socket: devices
    that are ``PHB`` or closer share a host bridge, a ``PIX`` group hangs off one switch, and
    groups joined by ``PXB`` sit under lower switches below one upper switch."""

    def __init__(self, dev_id: dict[int, str]) -> None:
        self.dev_id = dev_id
        self.cpus: list[dict[str, Any]] = []
        self.switches: list[dict[str, Any]] = []
        self.links: list[dict[str, Any]] = []
        self.numa_of: dict[int, int] = {}

    @staticmethod
    def pcie(a: str, b: str, host_bridge: int | None = None) -> dict[str, Any]:
        link: dict[str, Any] = {"a": a, "b": b, "kind": "pcie", "gen": DEFAULT_PCIE_GEN,
                                "lanes": DEFAULT_PCIE_LANES}
        if host_bridge is not None:
            link["attrs"] = {"host_bridge": host_bridge}
        return link

    def switch(self, numa: int) -> str:
        sid = f"sw{len(self.switches)}"
        self.switches.append({"id": sid, "kind": "pcie_switch", "model": "", "numa": numa})
        return sid

    def socket(self, cl: _Clusters, members: list[int], numa: int) -> None:
        cpu = f"cpu{numa}"
        self.cpus.append({"id": cpu, "kind": "cpu", "model": "", "numa": numa})
        for a in members:
            self.numa_of[a] = numa
        for hb, hb_members in enumerate(cl.groups(members, 3)):
            for sw_members in cl.groups(hb_members, 2):
                self.under(cpu, hb, sw_members, cl.groups(sw_members, 1), numa)

    def under(self, cpu: str, hb: int, members: list[int], leaves: list[list[int]],
              numa: int) -> None:
        """One host-bridge port's devices: direct, behind one switch, or a cascade."""
        ids = self.dev_id
        if len(members) == 1:
            self.links.append(self.pcie(cpu, ids[members[0]], hb))
        elif len(leaves) == 1:
            sw = self.switch(numa)
            self.links.append(self.pcie(cpu, sw, hb))
            self.links.extend(self.pcie(sw, ids[a]) for a in members)
        else:
            upper = self.switch(numa)
            self.links.append(self.pcie(cpu, upper, hb))
            for leaf in leaves:
                lower = self.switch(numa)
                self.links.append(self.pcie(upper, lower))
                self.links.extend(self.pcie(lower, ids[a]) for a in leaf)

    def cpu_links(self) -> list[dict[str, Any]]:
        return [{"a": self.cpus[x]["id"], "b": self.cpus[y]["id"], "kind": "cpu"}
                for x in range(len(self.cpus)) for y in range(x + 1, len(self.cpus))]


def _endpoints(m: TopoMatrix, dev_id: dict[int, str], numa_of: dict[int, int],
               gpu_model: str) -> list[dict[str, Any]]:
    """The GPU and NIC devices, with the affinity strings and NIC names kept verbatim."""
    devices: list[dict[str, Any]] = []
    for k, label in enumerate(m.gpus):
        a = m.labels.index(label)
        devices.append({"id": dev_id[a], "kind": "gpu", "model": gpu_model,
                        "index": int(_group(_GPU, label)), "numa": numa_of[a],
                        "attrs": {"cpu_affinity": m.cpu_affinity[k],
                                  "numa_affinity": m.numa_affinity[k],
                                  "gpu_numa_id": m.gpu_numa_id[k]}})
    for k, label in enumerate(m.nics):
        a = m.labels.index(label)
        devices.append({"id": dev_id[a], "kind": "nic", "model": "", "index": k,
                        "numa": numa_of[a],
                        "attrs": {"name": m.nic_name(label), "label": label}})
    return devices


def _nvlinks(m: TopoMatrix, dev_id: dict[int, str], gpu_model: str, nvlink_gen: int | None
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(devices, links) of the NVLink fabric: direct bundles, or one NVSwitch when every pair
    has the same ``NV#`` and there are more than 4 GPUs or more links per GPU than it has."""
    gidx = [m.labels.index(ln) for ln in m.gpus]
    nv = {(a, b): int(_group(_NV, m.paths[a][b]))
          for x, a in enumerate(gidx) for b in gidx[x + 1:] if _NV.match(m.paths[a][b])}
    # links per GPU if every NV# were a direct bundle; more than a GPU has means a switch
    per_gpu = {a: sum(c for pair, c in nv.items() if a in pair) for a in gidx}
    most = max(per_gpu.values(), default=0)
    bound = nvlink_bound(gpu_model)[0] if gpu_model else catalog.most_nvlinks()[0]
    pairs = len(gidx) * (len(gidx) - 1) // 2
    switched = (len(nv) == pairs > 1 and len(set(nv.values())) == 1
                and (len(gidx) > 4 or most > bound))

    def nvlink(a: str, b: str, count: int) -> dict[str, Any]:
        link: dict[str, Any] = {"a": a, "b": b, "kind": "nvlink", "count": count}
        if not gpu_model:   # the generation whose GPUs have that many links
            link["gen"] = nvlink_gen or (4 if (count if switched else most) > 12 else 3)
        return link

    if switched:
        count = next(iter(nv.values()))
        return ([{"id": "nvsw", "kind": "nvswitch", "model": "", "numa": -1}],
                [nvlink(dev_id[a], "nvsw", count) for a in gidx])
    return [], [nvlink(dev_id[a], dev_id[b], c) for (a, b), c in nv.items()]


# -- from_topology --------------------------------------------------------------------------
def from_topology(topo: Any, node: int = 0) -> TopoMatrix:
    """The ``nvidia-smi topo -m`` matrix of one server of a topology.

    Path types come from :func:`gpufabric.topology.paths.path_type`. GPU columns are
    ``GPU<index>``; NIC columns keep the label they were imported with (attr ``label``), else
    ``NIC<k>``, with the NIC's ``name`` attr in the legend. Affinities come from the GPU's
    ``cpu_affinity`` / ``numa_affinity`` / ``gpu_numa_id`` attrs; without them the NUMA
    affinity is the device's ``numa``.

    Parameters
    ----------
    topo : Topology
    node : int
        Which server (default 0).
    """
    from gpufabric.topology import paths as _paths

    path_type = getattr(_paths, "path_type", None) or (
        lambda t, a, b: _paths.path(t, a, b).type)

    topo.check_node(node)
    gpus = sorted(topo.gpus(node), key=lambda d: d.index)
    nics = sorted(topo.nics(node), key=lambda d: d.index)
    labels = [f"GPU{d.index}" for d in gpus]
    nic_names: dict[str, str] = {}
    for k, d in enumerate(nics):
        label = d.attrs.get("label") or f"NIC{k}"
        labels.append(label)
        name = d.attrs.get("name", "")
        if _NICN.match(label) and name:
            nic_names[label] = name
    devs = [*gpus, *nics]
    paths = [["X" if i == j else path_type(topo, a.id, b.id) for j, b in enumerate(devs)]
             for i, a in enumerate(devs)]

    def numa_aff(d: Any) -> str:
        if "numa_affinity" in d.attrs:
            return d.attrs["numa_affinity"]
        return str(d.numa) if d.numa >= 0 else ""

    return TopoMatrix(labels=labels, paths=paths,
                      cpu_affinity=[d.attrs.get("cpu_affinity", "") for d in gpus],
                      numa_affinity=[numa_aff(d) for d in gpus],
                      gpu_numa_id=[d.attrs.get("gpu_numa_id", "") for d in gpus],
                      nic_names=nic_names)
