"""Where AIConfigurator's kernel database is, what it covers, and its rows.

The database is a tree ``<system>/<kernel dir>/<backend>/<version>/<table>`` under the
``systems/data`` folder of the installed ``aiconfigurator_core`` package: one table per kernel
family (``gemm_perf``, ``context_attention_perf``, ...), each row a measured shape and its
``latency`` in milliseconds. Tables are Parquet files (read with pyarrow, which the package
brings); earlier releases wrote the same columns as comma-separated ``.txt`` files, and a
``.csv`` or ``.txt`` table with those columns is read too (the tests' fixture is one).

Examples
--------
>>> from pathlib import Path
>>> fx = Path(__file__).parents[3] / "tests" / "data" / "kerneldb"
>>> [(t.system, t.family, t.backend, t.version) for t in tables(fx, gpu="H100-SXM")][:2]
[('h100_sxm', 'allreduce', 'nccl', '2.27.3'), ('h100_sxm', 'attention-decode', 'vllm', '0.24.0')]
>>> read(tables(fx, family="gemm")[0])[0]["gemm_dtype"]
'bfloat16'
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufabric import fileio
from gpufabric.errors import InputError, unknown_name

#: How to get the database, for every message that needs it.
INSTALL = "pip install 'gpufabric[aic]' (NVIDIA AIConfigurator's measured kernel database)"
#: The environment variable naming a database folder (else the installed package's).
ENV = "GPUFABRIC_KERNEL_DB"

#: AIConfigurator's system folders and the catalog GPU each one measured (systems whose GPU the
#: catalog lacks are listed by ``coverage`` and left out of comparisons).
SYSTEMS = {"a100_sxm": "A100-SXM4-80GB", "a100_pcie": "A100-PCIe", "h100_sxm": "H100-SXM",
           "h100_pcie": "H100-PCIe", "h200_sxm": "H200-SXM", "b200_sxm": "B200",
           "b300_sxm": "B300", "gb200": "GB200", "gb300": "GB300", "l4": "L4", "l40s": "L40S",
           "rtx_pro_6000_server": "RTX-PRO-6000"}

#: Each kernel family gpufabric compares: the database's kernel folder and table names.
FAMILIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "gemm": ("gemm", ("gemm_perf",)),
    "attention-prefill": ("attention", ("context_attention_perf",)),
    "attention-decode": ("attention", ("generation_attention_perf",)),
    "moe": ("moe", ("moe_perf",)),
    "allreduce": ("comm", ("nccl_perf", "custom_allreduce_perf")),
}
_SUFFIXES = (".parquet", ".csv", ".txt")


@dataclass(frozen=True)
class Table:
    """One measured table: its system folder, family, backend, backend version and file."""

    system: str
    family: str
    backend: str
    version: str
    path: Path

    @property
    def gpu(self) -> str | None:
        """The catalog GPU the system measured (None: not in gpufabric's catalog)."""
        return SYSTEMS.get(self.system)


def root(path: str | os.PathLike[str] | None = None, *, field: str = "--db") -> Path:
    """The database folder: ``path``, else ``$GPUFABRIC_KERNEL_DB``, else the installed
    ``aiconfigurator_core`` package's ``systems/data``; an :class:`InputError` saying how to
    install it when there is none."""
    given = path if path is not None else os.environ.get(ENV) or None
    if given is not None:
        p = Path(given)
        if not p.is_dir():
            raise InputError(f"not a folder: {given} (the kernel database's systems/data "
                             "folder)", field=field)
        return p
    data = package_data()
    if data is None:
        raise InputError(f"the kernel database is not installed: {INSTALL}", field=field)
    return data


def package_data() -> Path | None:
    """The ``systems/data`` folder of the installed ``aiconfigurator_core`` package (found,
    not imported), or None without it."""
    spec = importlib.util.find_spec("aiconfigurator_core")
    origin = spec.origin if spec is not None else None
    data = Path(origin).parent / "systems" / "data" if origin else None
    return data if data is not None and data.is_dir() else None


def _version_key(v: str) -> tuple:
    """Order of backend versions: numbers as numbers (``1.3.0rc20`` after ``1.3.0rc5``)."""
    return tuple((0, int(t)) if t.isdigit() else (1, t) for t in re.findall(r"\d+|[a-z]+",
                                                                              v.lower()))


def tables(db: str | os.PathLike[str] | None = None, *, gpu: str | None = None,
           family: str | None = None, backend: str | None = None,
           latest: bool = True) -> list[Table]:
    """The tables under ``db`` (see :func:`root`), filtered by catalog GPU name, family and
    backend; ``latest``: only each backend's newest version per system and family. Sorted by
    system, family, backend, version."""
    base = root(db)
    if family is not None and family not in FAMILIES:
        raise unknown_name("kernel family", family, FAMILIES, field="--family")
    out: list[Table] = []
    for fam, (folder, stems) in FAMILIES.items():
        if family not in (None, fam):
            continue
        for f in sorted(base.glob(f"*/{folder}/*/*/*")):
            if f.suffix in _SUFFIXES and f.stem in stems:
                system, _, be, ver = f.relative_to(base).parts[:4]
                out.append(Table(system, fam, be, ver, f))
    if gpu is not None:
        out = [t for t in out if t.gpu == gpu]
    if backend is not None:
        out = [t for t in out if t.backend == backend]
    if latest:
        newest: dict[tuple, Table] = {}
        for t in out:
            key = (t.system, t.family, t.backend, t.path.stem)
            if key not in newest or _version_key(t.version) > _version_key(newest[key].version):
                newest[key] = t
        out = list(newest.values())
    return sorted(out, key=lambda t: (t.system, t.family, t.backend, _version_key(t.version)))


def coverage(db: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """What the database measured: per system folder, its catalog GPU and, per family, the
    backends with every version they were measured at."""
    out: dict[str, dict[str, Any]] = {}
    for t in tables(db, latest=False):
        row = out.setdefault(t.system, {"system": t.system, "gpu": t.gpu, "families": {}})
        vers = row["families"].setdefault(t.family, {}).setdefault(t.backend, [])
        if t.version not in vers:
            vers.append(t.version)
    return list(out.values())


def _number(text: str) -> Any:
    """A CSV cell as the Parquet column would hold it: int, float, or the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


#: Columns of a row that are not the measured kernel's shape (what it measured, and where).
NOT_SHAPE = frozenset({"latency", "framework", "version", "device"})


def reused(table: Table) -> Table | None:
    """The table of an earlier version that ``table``'s version declares it reuses (its
    ``reuse.yaml``: ``reuse: [{table: moe_perf, from_version: 1.3.0rc20}]``, written where a
    new version re-measured only some shapes), or None."""
    decl = table.path.parent / "reuse.yaml"
    if not decl.is_file():
        return None
    doc = fileio.load_yaml(decl, what="a kernel database's reuse declaration")
    entries = doc.get("reuse") if isinstance(doc, dict) else None
    for e in entries if isinstance(entries, list) else []:
        if not isinstance(e, dict) or e.get("table") != table.path.stem:
            continue
        ver = str(e.get("from_version", ""))
        for suffix in _SUFFIXES:
            f = table.path.parent.parent / ver / f"{table.path.stem}{suffix}"
            if ver and ver != table.version and f.is_file():
                return Table(table.system, table.family, table.backend, ver, f)
    return None


def read(table: Table, columns: list[str] | None = None,
         _after: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """The rows of ``table``, one dict per measured kernel (``latency`` in milliseconds), and
    those of the earlier version it declares it reuses (:func:`reused`, followed once per
    version) for the shapes it did not measure again."""
    older = reused(table)
    if older is None or older.version in _after:
        return _read_file(table, columns)
    rows = _read_file(table, None)

    def shape(r: dict[str, Any]) -> tuple:
        return tuple(sorted((k, v) for k, v in r.items() if k not in NOT_SHAPE))
    seen = {shape(r) for r in rows}
    rows = [r for r in read(older, None, _after | {table.version}) if shape(r) not in seen] + rows
    return rows if columns is None else [{k: r[k] for k in columns if k in r} for r in rows]


def _read_file(table: Table, columns: list[str] | None) -> list[dict[str, Any]]:
    if table.path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise InputError(f"reading {table.path.name} needs pyarrow: {INSTALL}",
                             field="--db") from None
        pf = pq.ParquetFile(table.path)
        if columns is not None:      # the columns asked for that the table has
            have = set(pf.schema_arrow.names)
            columns = [c for c in columns if c in have]
        return pf.read(columns=columns).to_pylist()
    name = str(table.path)
    rows = list(fileio.csv_rows(fileio.read_text(table.path, what="a kernel table"), name))
    if not rows:
        return []
    head = [h.strip() for h in rows[0]]
    if "latency" not in head:
        raise InputError(f"no latency column; the columns are {', '.join(head)}", file=name,
                         field="line 1")
    keep = head if columns is None else [c for c in head if c in columns]
    return [{h: _number(v.strip()) for h, v in zip(head, r, strict=False) if h in keep}
            for r in rows[1:] if r]
