"""The extender's records on disk: which pods it bound where, and the places it holds for gangs.

Without ``--kubeconfig`` nothing else remembers what the extender gave out, so a restart would
hand the same GPUs out again. :class:`StateFile` keeps the records as a journal of JSON lines,
one per change (``bind``, ``forget``, ``gang``, ``ungang``), each written and flushed before the
verb answers, so a killed extender loses nothing it has answered. Loading replays the journal
(the last record of a pod or gang wins) and rewrites it compacted through the one output writer
(:func:`~gpufabric.fileio.write_output`: a temporary file and a rename), so a crash while
compacting leaves the old journal whole; a running extender compacts it the same way once it
holds four times more lines than live records. A symlink is followed; a state file that is not a
regular file (a device, a FIFO) is refused. A line that cannot be read
(the half-written last line of a killed process) is skipped with one note on stderr; a file that
is not a journal at all is refused.

With ``--kubeconfig`` the API server is the truth (the extender lists and watches the pods
bound in the cluster); a state file is then optional.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from gpufabric.errors import InputError
from gpufabric.fileio import write_output
from gpufabric.k8s.objects import MAX_GPUS_PER_NODE, PodInfo
from gpufabric.scheduler.state import MILLI, Request

#: The journal's first line, naming its format.
HEADER = {"gpufabric": "extender-state", "version": 1}


def pod_record(pod: PodInfo) -> dict:
    return asdict(pod)


def pod_from(rec: dict) -> PodInfo:
    """A pod record read back; ValueError if its request is not one a pod can make (the same
    bounds :func:`~gpufabric.k8s.objects.parse_pod` enforces)."""
    r = dict(rec)
    q = Request(**r["request"])
    ints = (q.cpu, q.mem, q.num_gpu, q.gpu_milli)
    if not all(isinstance(v, int) and v >= 0 for v in ints) or q.num_gpu > MAX_GPUS_PER_NODE \
            or q.gpu_milli > MILLI or (q.num_gpu and not q.gpu_milli):
        raise ValueError(f"request {q} is not one a pod can make")
    r["request"] = q
    r["models"] = tuple(r["models"])
    r["gpu_index"] = tuple(r["gpu_index"])
    return PodInfo(**r)


def gpus_from(value: Any) -> tuple[int, ...]:
    """A record's GPU indices; ValueError unless distinct whole numbers below a node's limit."""
    if not isinstance(value, list) or len(set(value)) < len(value) or not all(
            isinstance(g, int) and 0 <= g < MAX_GPUS_PER_NODE for g in value):
        raise ValueError(f"GPUs {str(value)[:60]} are not distinct indices")
    return tuple(value)


class StateFile:
    """A journal of the extender's bindings and gang places at ``path``.

    Examples
    --------
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "state.jsonl")
    >>> f = StateFile(path)
    >>> f.load()
    ({}, {})
    >>> f.write({"forget": "u1"}); f.close()
    >>> StateFile(path).load()
    ({}, {})
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._fh: IO[str] | None = None
        self.lines = 0          # records in the file now

    def load(self) -> tuple[dict[str, dict], dict[str, dict]]:
        """Replay the journal: ({pod uid: bind record}, {gang key: gang record}), then
        rewrite it compacted (a missing file is an empty state)."""
        binds: dict[str, dict] = {}
        gangs: dict[str, dict] = {}
        if self.path.is_dir():
            raise InputError("is a directory; expected the extender's state file",
                             file=str(self.path), field="--state")
        if self.path.exists() and not self.path.is_file():
            raise InputError("not a regular file; the state file is read back at start, so it "
                             "must be one (or not exist yet)", file=str(self.path),
                             field="--state")
        if self.path.exists():
            with open(self.path, encoding="utf-8", errors="replace") as fh:
                first = fh.readline()
                try:
                    head = json.loads(first) if first.strip() else HEADER
                except ValueError:
                    head = None
                if head != HEADER:
                    raise InputError("not a gpufabric extender state file (its first line "
                                     f"is not {json.dumps(HEADER)})", file=str(self.path),
                                     field="--state")
                skipped = 0
                for k, line in enumerate(fh, start=2):
                    try:
                        rec = json.loads(line)
                        self._replay(rec, binds, gangs)
                    except (ValueError, TypeError, KeyError) as exc:
                        skipped += 1
                        if skipped <= 5:
                            print(f"gpufabric extender: {self.path}: line {k} skipped "
                                  f"({str(exc)[:200]})", file=sys.stderr)
                if skipped > 5:
                    print(f"gpufabric extender: {self.path}: {skipped} lines skipped in all",
                          file=sys.stderr)
        self.compact(binds.values(), gangs.values())
        return binds, gangs

    @staticmethod
    def _replay(rec: Any, binds: dict, gangs: dict) -> None:
        if not isinstance(rec, dict):
            raise ValueError("not a record")
        if "bind" in rec:
            pod_from(rec["pod"])                     # readable, or the line is skipped
            gpus_from(rec["gpus"])
            binds[rec["bind"]] = rec
        elif "forget" in rec:
            binds.pop(rec["forget"], None)
        elif "gang" in rec:
            Request(**rec["request"])
            for _node, gpus in rec["slots"]:
                gpus_from(gpus)
            gangs[rec["gang"]] = rec
        elif "ungang" in rec:
            gangs.pop(rec["ungang"], None)
        else:
            raise ValueError(f"unknown record {sorted(rec)[:3]}")

    def compact(self, binds: Any, gangs: Any) -> None:
        """Rewrite the journal as just these records (atomically), and keep it open."""
        self.close()
        lines = [json.dumps(rec, separators=(",", ":")) + "\n" for rec in (HEADER, *binds, *gangs)]
        write_output(self.path, "".join(lines), field="--state")
        self.lines = len(lines)
        self._fh = open(self.path, "a", encoding="utf-8")

    def write(self, rec: dict) -> None:
        """Append one record and flush it (a process that is killed keeps it)."""
        if self._fh is None:
            if not self.path.exists():
                self.compact((), ())
            else:
                self._fh = open(self.path, "a", encoding="utf-8")
        assert self._fh is not None
        self._fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
        self._fh.flush()
        self.lines += 1

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
