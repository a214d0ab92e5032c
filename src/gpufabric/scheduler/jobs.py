"""Jobs: what a workload asks of the cluster, and the openb pod-list reader.

A :class:`Job` is one unit of work: CPU in milli-cores, memory in MiB, whole GPUs or a share of
one (``gpu_milli`` < 1000 with ``num_gpu`` = 1, as in GPU sharing), the accelerator models it
accepts, its kind (``training``, ``inference``, ``service``, ``batch``), a priority, a gang size
(``gang`` members that start all together or not at all, each asking the same resources), a
duration and a checkpoint interval.

For speed the simulators work on a :class:`JobSet`: the same fields as numpy columns.

Examples
--------
>>> js = load_jobs("synthetic-openb")   # or "default": the openb trace, where you have it
>>> len(js), int(js.num_gpu.max())
(8152, 8)
>>> js.job(1).gpu_milli, js.job(1).kind
(1000, 'training')
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpufabric.errors import InputError, clip, unknown_name
from gpufabric.fileio import check_key, csv_rows, path_kind, read_text

from gpufabric.scheduler import synthetic
from gpufabric.scheduler.openb import KINDS, QOS_PRIORITY

#: Short names of the bundled openb pod lists.
TRACES = ("default", "cpu050", "gpushare40", "multigpu20", "gpuspec10")

#: Columns every pod list must have (the ``multigpu*`` files stop here).
REQUIRED_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
#: The full openb pod columns.
OPENB_COLUMNS = REQUIRED_COLUMNS + ("gpu_spec", "qos", "pod_phase", "creation_time",
                                    "deletion_time", "scheduled_time")
#: Extra optional columns gpufabric understands (not in openb).
EXTRA_COLUMNS = ("kind", "priority", "gang", "checkpoint_s", "duration_s")

MILLI = 1000
#: Largest number a trace field may hold (keeps every column inside int64).
MAX_VALUE = 1e15


@dataclass(frozen=True)
class Job:
    """One job (a pod in Kubernetes terms); for a gang, each of ``gang`` members asks this much.

    Parameters
    ----------
    name : str
    cpu_milli : int
        CPU request in milli-cores.
    memory_mib : int
    num_gpu : int
        Accelerators per member (0 for a CPU job).
    gpu_milli : int
        Share of each accelerator in milli (1000: whole GPUs; < 1000 only with ``num_gpu`` 1).
    gpu_models : tuple of str
        Accepted accelerator models; empty: any.
    kind : str
        One of :data:`KINDS`.
    priority : int
        Higher is more important; a job may preempt jobs of lower priority.
    qos : str
    gang : int
        Members placed all or nothing (1: a plain job).
    creation_s, duration_s : float
        Arrival time and run time (seconds) for replay.
    checkpoint_s : float
        Checkpoint interval; after a failure the job redoes the work since its last checkpoint
        (0: no checkpoints, it restarts from the beginning).

    Examples
    --------
    >>> Job("train", 8000, 65536, num_gpu=4).gpu_request_milli
    4000
    >>> Job("share", 4000, 8192, num_gpu=1, gpu_milli=250).gpu_request_milli
    250
    """

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    gpu_milli: int = MILLI
    gpu_models: tuple[str, ...] = ()
    kind: str = "batch"
    priority: int = 0
    qos: str = ""
    gang: int = 1
    creation_s: float = 0.0
    duration_s: float = 0.0
    checkpoint_s: float = 0.0

    @property
    def gpu_request_milli(self) -> int:
        """Milli-GPUs one member asks for (``num_gpu * gpu_milli``)."""
        return self.num_gpu * (self.gpu_milli if self.num_gpu else 0)


@dataclass
class JobSet:
    """Jobs as numpy columns (see :class:`Job` for the fields).

    ``spec`` indexes ``specs`` (the distinct accepted-model tuples; ``()`` is any);
    ``kind`` indexes :data:`KINDS`.
    """

    names: list[str]
    cpu: np.ndarray
    mem: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray
    spec: np.ndarray
    specs: list[tuple[str, ...]]
    kind: np.ndarray
    priority: np.ndarray
    qos: list[str]
    gang: np.ndarray
    creation: np.ndarray
    duration: np.ndarray
    checkpoint: np.ndarray
    source: str = ""
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.names)

    @property
    def gpu_request(self) -> np.ndarray:
        """Milli-GPU request of each job (all gang members together)."""
        return self.num_gpu * self.gpu_milli * self.gang

    def job(self, i: int) -> Job:
        """Job ``i`` as a :class:`Job`."""
        return Job(self.names[i], int(self.cpu[i]), int(self.mem[i]), int(self.num_gpu[i]),
                   int(self.gpu_milli[i]), self.specs[self.spec[i]], KINDS[self.kind[i]],
                   int(self.priority[i]), self.qos[i], int(self.gang[i]),
                   float(self.creation[i]), float(self.duration[i]), float(self.checkpoint[i]))

    def take(self, idx) -> JobSet:
        """A new JobSet of the jobs at ``idx`` (repeats allowed; copies get ``#k`` names)."""
        idx = np.asarray(idx, dtype=np.int64)
        seen: dict[str, int] = {}
        names = []
        for i in idx.tolist():
            n = self.names[i]
            k = seen.get(n, 0)
            seen[n] = k + 1
            names.append(n if k == 0 else f"{n}#{k}")
        return JobSet(names, self.cpu[idx], self.mem[idx], self.num_gpu[idx],
                      self.gpu_milli[idx], self.spec[idx], self.specs, self.kind[idx],
                      self.priority[idx], [self.qos[i] for i in idx.tolist()], self.gang[idx],
                      self.creation[idx], self.duration[idx], self.checkpoint[idx],
                      self.source, dict(self.meta))

    @classmethod
    def from_jobs(cls, jobs: list[Job], source: str = "") -> JobSet:
        """Build a JobSet from :class:`Job` objects.

        Examples
        --------
        >>> js = JobSet.from_jobs([Job("a", 1000, 1024), Job("b", 2000, 2048, 2, kind="training")])
        >>> js.num_gpu.tolist(), [js.job(1).kind]
        ([0, 2], ['training'])
        """
        specs: list[tuple[str, ...]] = [()]
        spec_ids = []
        for j in jobs:
            if j.kind not in KINDS:
                raise unknown_name("job kind", j.kind, KINDS, file=source or None,
                                   field=f"{j.name}.kind")
            _check_request(j.num_gpu, j.gpu_milli, source, j.name)
            if j.gang < 1:
                raise InputError("gang must be at least 1", file=source or None,
                                 field=f"{j.name}.gang")
            t = tuple(j.gpu_models)
            if t not in specs:
                specs.append(t)
            spec_ids.append(specs.index(t))
        a = lambda f, dt=np.int64: np.array([getattr(j, f) for j in jobs], dtype=dt)  # noqa: E731
        return cls([j.name for j in jobs], a("cpu_milli"), a("memory_mib"), a("num_gpu"),
                   np.array([j.gpu_milli if j.num_gpu else 0 for j in jobs], dtype=np.int64),
                   np.array(spec_ids, dtype=np.int64), specs,
                   np.array([KINDS.index(j.kind) for j in jobs], dtype=np.int64),
                   a("priority"), [j.qos for j in jobs], a("gang"),
                   a("creation_s", float), a("duration_s", float), a("checkpoint_s", float),
                   source)


def _check_request(num_gpu: int, gpu_milli: int, file: str | None, where: str) -> None:
    if num_gpu < 0:
        raise InputError("must be 0 or more", file=file or None, field=f"{where}.num_gpu")
    if num_gpu and not (0 < gpu_milli <= MILLI):
        raise InputError("must be 1..1000 when num_gpu > 0", file=file or None,
                         field=f"{where}.gpu_milli")
    if num_gpu > 1 and gpu_milli < MILLI:
        raise InputError("a GPU share (gpu_milli < 1000) needs num_gpu = 1", file=file or None,
                         field=f"{where}.gpu_milli")


def bundled_path(kind: str, short: str, data_dir: str | os.PathLike | None = None) -> Path:
    """Path of an openb CSV (``kind`` is ``pod_list`` or ``node_list``), found as
    :func:`gpufabric.downloads.find` looks (``--data-dir``, ``GPUFABRIC_DATA_DIR``, the
    cache); :class:`~gpufabric.downloads.DataMissing` says how to get it if absent."""
    from gpufabric import downloads as data
    what = f"openb {'trace' if kind == 'pod_list' else 'node list'} '{short}'"
    return data.require(f"openb_{kind}_{short}.csv", what, data_dir)


def resolve_trace(trace: str, data_dir: str | os.PathLike | None = None) -> Path:
    """A short trace name or a CSV path -> the CSV path (InputError if neither)."""
    if trace in TRACES:
        return bundled_path("pod_list", trace, data_dir)
    p = Path(trace)
    kind = path_kind(trace)
    if kind == "file":
        return p
    if kind == "dir":
        raise InputError("is a directory; expected a CSV file with the openb pod columns",
                         file=trace)
    if p.suffix.lower() == ".csv" or os.sep in trace:
        raise InputError("no such file", file=trace)
    raise unknown_name("trace", trace, TRACES + ("synthetic-openb",), field="TRACE")


def read_csv(path: Path, required: tuple[str, ...], allowed: tuple[str, ...]
             ) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a CSV, checking the header names the required columns."""
    text = read_text(path, what="a CSV file")
    rows = list(csv_rows(text, str(path)))
    if not rows:
        raise InputError(f"empty file; expected a header with columns {','.join(allowed)}",
                         file=str(path))
    header = [h.strip() for h in rows[0]]
    for h in header:
        check_key(h, str(path), "header")
    missing = [c for c in required if c not in header]
    if missing:
        raise InputError(f"missing column '{missing[0]}'; expected columns "
                         f"{','.join(allowed)} (the first {len(required)} required)",
                         file=str(path), field="header")
    return header, [r for r in rows[1:] if r and any(x.strip() for x in r)]


#: What a time column of a pod list allows.
TIME_ALLOWED = "seconds from 0 up"


def _num(row: list[str], col: int | None, name: str, line: int, path: Path, default=0,
         cast=int, minimum=0, allowed: str = ""):
    if col is None or col >= len(row) or row[col].strip() == "":
        if col is not None and col >= len(row):
            raise InputError(f"row has {len(row)} fields, the header more", file=str(path),
                             field=f"line {line}")
        return default
    text = row[col].strip()
    try:
        v = cast(float(text)) if cast is int and "." in text else cast(text)
    except (ValueError, OverflowError):
        raise InputError(f"'{clip(text)}' is not a number", file=str(path),
                         field=f"line {line}.{name}") from None
    if not math.isfinite(v) or abs(v) > MAX_VALUE:
        raise InputError(f"'{clip(text)}' is not a finite number below {MAX_VALUE:.0e}",
                         file=str(path), field=f"line {line}.{name}")
    if v < minimum:
        raise InputError(f"got {text}; expected {allowed or f'a number >= {minimum}'}",
                         file=str(path), field=f"line {line}.{name}")
    return v


def load_jobs(trace: str | os.PathLike, data_dir: str | os.PathLike | None = None) -> JobSet:
    """Read a pod list with the openb columns (a short name or a path).

    A short name (:data:`TRACES`) is looked up in ``data_dir``, then as
    :mod:`gpufabric.downloads` says; ``synthetic-openb`` is the synthetic openb-like
    workload of :mod:`gpufabric.scheduler.synthetic`.

    Jobs get kind ``service`` when they ask no GPU and ``training`` otherwise, unless a ``kind``
    column says; priority comes from ``qos`` (:data:`QOS_PRIORITY`) unless a ``priority`` column
    says. Duration is ``deletion_time - scheduled_time`` (or ``- creation_time``).

    Rows may come in any order of ``creation_time`` (the openb variants ``cpu050`` and
    ``gpushare40`` are sampled out of order; replay takes the jobs in time order). What is
    refused is a negative time and a row whose own times go backwards: scheduled before it was
    created, deleted before it was created or scheduled.

    Raises
    ------
    InputError
        The file is missing, lacks an openb column, or has a value that is not a number.
    """
    if str(trace) == synthetic.NAME:
        return synthetic_jobs()
    path = resolve_trace(str(trace), data_dir)
    header, rows = read_csv(path, REQUIRED_COLUMNS, OPENB_COLUMNS + EXTRA_COLUMNS)
    if not rows:
        raise InputError("no pods under the header; a trace needs at least one row",
                         file=str(path))
    rd = _Rows(header, path)
    n = len(rows)
    cpu = np.zeros(n, np.int64)
    mem = np.zeros(n, np.int64)
    ngpu = np.zeros(n, np.int64)
    gmilli = np.zeros(n, np.int64)
    spec = np.zeros(n, np.int64)
    kind = np.zeros(n, np.int64)
    prio = np.zeros(n, np.int64)
    gang = np.ones(n, np.int64)
    create = np.zeros(n)
    dur = np.zeros(n)
    ckpt = np.zeros(n)
    specs: list[tuple[str, ...]] = [()]
    spec_index: dict[tuple[str, ...], int] = {(): 0}
    names: list[str] = []
    qos: list[str] = []
    p = str(path)
    for k, r in enumerate(rows):
        line = k + 2
        if len(r) < len(header):
            raise InputError(f"row has {len(r)} fields, the header {len(header)}",
                             file=p, field=f"line {line}")
        names.append(rd.cell(r, "name"))
        cpu[k] = rd.num(r, "cpu_milli", line)
        mem[k] = rd.num(r, "memory_mib", line)
        ngpu[k] = rd.num(r, "num_gpu", line)
        gm = rd.num(r, "gpu_milli", line)
        gmilli[k] = gm if ngpu[k] else 0
        _check_request(int(ngpu[k]), int(gm), p, f"line {line}")
        t = tuple(sorted(s.strip() for s in rd.cell(r, "gpu_spec").split("|") if s.strip()))
        spec[k] = spec_index.setdefault(t, len(specs))
        if spec[k] == len(specs):
            specs.append(t)
        qos.append(rd.cell(r, "qos"))
        kind[k], prio[k] = _kind_and_priority(rd, r, line, bool(ngpu[k]))
        gang[k] = rd.num(r, "gang", line, default=1, minimum=1)
        create[k], dur[k] = _times(rd, r, line)
        ckpt[k] = rd.num(r, "checkpoint_s", line, cast=float)
    js = JobSet(names, cpu, mem, ngpu, gmilli, spec, specs, kind, prio, qos, gang, create, dur,
                ckpt, p)
    js.meta["has_times"] = "creation_time" in rd.col
    return js


class _Rows:
    """One trace file's columns: a row's optional cells and checked numbers by column name."""

    def __init__(self, header: list[str], path: Path) -> None:
        self.col = {h: i for i, h in enumerate(header)}
        self.path = path

    def cell(self, r: list[str], name: str) -> str:
        """The stripped value of an optional column ("" when the file has no such column)."""
        i = self.col.get(name)
        return r[i].strip() if i is not None and i < len(r) else ""

    def num(self, r: list[str], name: str, line: int, **kw: Any) -> Any:
        """The column's value checked as :func:`_num` does."""
        return _num(r, self.col.get(name), name, line, self.path, **kw)


def _kind_and_priority(rd: _Rows, r: list[str], line: int, gpus: bool) -> tuple[int, int]:
    """A row's kind (its ``kind`` column, else training when it asks GPUs, service otherwise)
    and priority (its ``priority`` column, else by its ``qos``: :data:`QOS_PRIORITY`)."""
    kd = rd.cell(r, "kind")
    if kd and kd not in KINDS:
        raise unknown_name("job kind", kd, KINDS, file=str(rd.path), field=f"line {line}.kind")
    kind = KINDS.index(kd or ("training" if gpus else "service"))
    if rd.cell(r, "priority"):
        return kind, rd.num(r, "priority", line, minimum=-10**9)
    return kind, QOS_PRIORITY.get(rd.cell(r, "qos"), 0)


def _times(rd: _Rows, r: list[str], line: int) -> tuple[float, float]:
    """A row's creation time and duration (its ``duration_s`` column, else from deletion less
    scheduling), refusing times that go backwards."""
    p = str(rd.path)
    c = rd.num(r, "creation_time", line, cast=float, allowed=TIME_ALLOWED)
    d = rd.num(r, "deletion_time", line, default=c, cast=float, allowed=TIME_ALLOWED)
    if d < c:
        raise InputError(f"{d:g} is before creation_time {c:g}; a pod is deleted after "
                         "it is created", file=p, field=f"line {line}.deletion_time")
    s = rd.num(r, "scheduled_time", line, default=c, cast=float, allowed=TIME_ALLOWED)
    if s < c:
        raise InputError(f"{s:g} is before creation_time {c:g}; a pod is scheduled after "
                         "it is created", file=p, field=f"line {line}.scheduled_time")
    if d < s:
        raise InputError(f"{d:g} is before scheduled_time {s:g}; a pod is deleted after "
                         "it is scheduled", file=p, field=f"line {line}.deletion_time")
    if rd.cell(r, "duration_s"):
        return c, rd.num(r, "duration_s", line, cast=float)
    return c, max(0.0, d - max(s, c))


def synthetic_jobs(seed: int = 0) -> JobSet:
    """The synthetic openb-like pod list (:mod:`gpufabric.scheduler.synthetic`).

    >>> js = synthetic_jobs()
    >>> len(js), int(js.num_gpu.sum()), js.source
    (8152, 7433, 'synthetic-openb')
    """
    js = JobSet(*synthetic.job_columns(seed))
    js.meta["has_times"] = True
    return js
