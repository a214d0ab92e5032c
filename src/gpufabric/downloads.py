"""Where the data sets gpufabric reads but does not ship come from: a path, a data directory,
or a cache filled by a download (:data:`SETS`: the openb cluster trace, Mooncake's serving
traces).

gpufabric ships no file of them (they belong to their repositories). A short name such as
``default`` or ``gpu_node`` (openb) is looked up, in this order, in

1. the data directory given by the caller (``--data-dir``);
2. the directory in the environment variable :data:`ENV_VAR` (``GPUFABRIC_DATA_DIR``);
3. the cache that :func:`fetch` fills (``$XDG_CACHE_HOME/gpufabric/SET``, by default
   ``~/.cache/gpufabric/openb`` for openb).

A directory may hold the files directly or in a folder named after the set (``openb/``).
:func:`fetch` downloads a set's files from its repository at the pinned commit and keeps a file
only when its sha256 is the pinned one.

Examples
--------
>>> sorted(OPENB_FILES)[0]
'openb_node_list_all_node.csv'
>>> OPENB_URL.endswith("/cluster-trace-gpu-v2023/csv/")
True
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpufabric.errors import InputError

OPENB_REPO = "alibaba/clusterdata"
#: A commit of ``alibaba/clusterdata`` at which every file below is present (the files have not
#: changed since they were added with the FGD paper, ATC'23).
OPENB_COMMIT = "7358bbaf40778d4bd0464a64a430812088b7b74e"
OPENB_DIR = "cluster-trace-gpu-v2023/csv"
OPENB_URL = f"https://raw.githubusercontent.com/{OPENB_REPO}/{OPENB_COMMIT}/{OPENB_DIR}/"

#: The openb files gpufabric names, with their sha256 (computed on the copies the FGD
#: reproduction in docs/scheduler.md was measured on).
OPENB_FILES = {
    "openb_node_list_all_node.csv":
        "5a85c2af79c66a1efff8bbcbda430400aae56d8431370d738480967e1a9c6b15",
    "openb_node_list_gpu_node.csv":
        "2beca64b4d3dfa342036a34b56a495c6cef9225db836c81f541282cb1df320b5",
    "openb_pod_list_cpu050.csv":
        "747f43247bffc2b0bb081d7f61f0705ca8d390dafc0b647e642c92f3baf3ba1e",
    "openb_pod_list_default.csv":
        "1ee7ed79c27a3b0861cda8ddba86a004c6aba904caafa329a76ae93ca63834a8",
    "openb_pod_list_gpushare40.csv":
        "d83ce79a4eb6987524bedbb0c65e41aed3a36bf6c1b78b86234c3687a07e1d40",
    "openb_pod_list_gpuspec10.csv":
        "2dc7e4cb9480484f08539720b433a9ec9ab5d76b396f3f7557c53a2ff78a7611",
    "openb_pod_list_multigpu20.csv":
        "d9ec6f6c74fb980cc0b81239470c6353fceea077ea9abd610003b604c7cc2b01",
}

MOONCAKE_REPO = "kvcache-ai/Mooncake"
#: The commit of ``kvcache-ai/Mooncake`` whose FAST'25 traces the figures in docs/inference.md
#: were read from.
MOONCAKE_COMMIT = "3b5a594133958449a1feaf1c9e0fc1b553e34a28"
MOONCAKE_DIR = "FAST25-release/traces"


@dataclass(frozen=True)
class DataSet:
    """A data set gpufabric downloads on demand: its repository, the commit and folder its
    files are pinned at, each file's sha256, and what it is for."""

    name: str
    repo: str
    commit: str
    folder: str
    files: dict[str, str]
    what: str

    @property
    def url(self) -> str:
        """The base URL of its files at the pinned commit."""
        return f"https://raw.githubusercontent.com/{self.repo}/{self.commit}/{self.folder}/"


#: Every data set ``gpufabric data fetch`` knows, by name.
SETS: dict[str, DataSet] = {
    "openb": DataSet("openb", OPENB_REPO, OPENB_COMMIT, OPENB_DIR, OPENB_FILES,
                     "the Alibaba GPU cluster trace of the FGD paper (ATC'23), for `schedule`"),
    "mooncake": DataSet(
        "mooncake", MOONCAKE_REPO, MOONCAKE_COMMIT, MOONCAKE_DIR,
        {"conversation_trace.jsonl":   # sha256 of the file at the commit (git show | sha256sum)
         "b8cbb061a85206d729d91cdc2981f43c9e0d99209dce588d3af5f7934408b9df",
         "synthetic_trace.jsonl":
         "bd070915a98fc0ed264d7cfef2ce746002eb3076a695ec31ba2674c0111ec131"},
        "Mooncake's FAST'25 request traces with prefix hash ids (Kimi conversation, synthetic), "
        "for `serve --trace NAME --kv-tier`"),
}

#: Serving traces by short name (``serve --trace NAME``): the data set and file they are.
TRACES: dict[str, tuple[str, str]] = {
    "mooncake-conversation": ("mooncake", "conversation_trace.jsonl"),
    "mooncake-synthetic": ("mooncake", "synthetic_trace.jsonl"),
}

#: Environment variable naming a data directory.
ENV_VAR = "GPUFABRIC_DATA_DIR"

#: Largest file :func:`fetch` accepts (the largest openb file is 0.6 MB, Mooncake's 3 MB).
MAX_BYTES = 64 * 2**20


class DataMissing(InputError):
    """A named data file is in none of the places :func:`find` looks."""


def cache_dir(name: str = "openb") -> Path:
    """Where :func:`fetch` puts the files of data set ``name`` by default."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "gpufabric" / name


def search_dirs(data_dir: str | os.PathLike | None = None, name: str = "openb") -> list[Path]:
    """The directories :func:`find` looks in for data set ``name``, in order (see the module
    doc)."""
    dirs = []
    if data_dir:
        dirs.append(Path(data_dir))
    if os.environ.get(ENV_VAR):
        dirs.append(Path(os.environ[ENV_VAR]))
    dirs.append(cache_dir(name))
    return dirs


def find(filename: str, data_dir: str | os.PathLike | None = None,
         name: str = "openb") -> Path | None:
    """The first ``filename`` in :func:`search_dirs` (or its folder named after the set), or
    None."""
    for d in search_dirs(data_dir, name):
        for p in (d / filename, d / name / filename):
            if p.is_file():
                return p
    return None


def require(filename: str, what: str, data_dir: str | os.PathLike | None = None,
            name: str = "openb") -> Path:
    """:func:`find`, or a :class:`DataMissing` that says where it looked and how to get it."""
    p = find(filename, data_dir, name)
    if p is None:
        where = ", ".join(str(d) for d in search_dirs(data_dir, name))
        ds = SETS[name]
        raise DataMissing(f"{what} is not in {where}; get it with `gpufabric data fetch "
                          f"{name}`, or point --data-dir or {ENV_VAR} at a copy of "
                          f"{ds.repo}/{ds.folder}", field=filename)
    return p


def trace_path(text: str) -> str:
    """A serving trace's path: ``text`` itself, or for a short name of :data:`TRACES` (not a
    file here) the file where :func:`require` finds it.

    >>> trace_path("my_trace.csv")
    'my_trace.csv'
    """
    if text not in TRACES or Path(text).exists():
        return text
    name, filename = TRACES[text]
    return str(require(filename, f"the {text} trace", None, name))


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 16), b""):
            h.update(block)
    return h.hexdigest()


def fetch(dest: str | os.PathLike | None = None, *, base_url: str | None = None,
          files: dict[str, str] | None = None,
          progress: Callable[[str, int, int], None] | None = None,
          timeout_s: float = 30.0, name: str = "openb") -> list[Path]:
    """Download ``files`` (name -> sha256; default: data set ``name``'s, :data:`SETS`) from
    ``base_url`` (default: the set's repository at its pinned commit).

    A file already in ``dest`` (default :func:`cache_dir`) with the right sha256 is kept as
    is. Each download goes to a temporary file and is moved into place only when its sha256
    matches. On failure nothing partial stays: the temporary file is removed, and so are the
    directories this call created if they are empty. ``progress(name, bytes_done,
    bytes_total)`` is called as data arrives (``bytes_total`` 0 when the server does not say).

    Raises
    ------
    InputError
        The server cannot be reached (offline), answers with an error, sends more than
        :data:`MAX_BYTES`, or sends a file whose sha256 is not the pinned one.
    """
    ds = SETS[name]
    files = ds.files if files is None else files
    base_url = ds.url if base_url is None else base_url
    out = Path(dest) if dest is not None else cache_dir(name)
    made = [d for d in (out, *out.parents) if not d.exists()]   # deepest first
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _remove_empty(made)
        raise InputError(f"cannot create the directory: {exc.strerror}", file=str(out)
                         ) from None
    try:
        return _fetch_into(out, files, base_url, progress, timeout_s)
    except BaseException:
        _remove_empty(made)       # a failed fetch leaves no folder it made empty behind
        raise


def _remove_empty(dirs: list[Path]) -> None:
    """Remove the directories of ``dirs`` (deepest first) that are empty."""
    for d in dirs:
        try:
            d.rmdir()
        except OSError:
            return


def _fetch_into(out: Path, files: dict[str, str], base_url: str,
                progress: Callable[[str, int, int], None] | None, timeout_s: float
                ) -> list[Path]:
    """:func:`fetch` once ``out`` exists: each file to a temporary one, kept when it checks."""
    got = []
    for name, want in files.items():
        target = out / name
        if target.is_file() and sha256(target) == want:
            got.append(target)
            if progress:
                size = target.stat().st_size
                progress(name, size, size)
            continue
        url = base_url + name
        fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", dir=out)
        tmp = Path(tmp_name)
        try:
            h = hashlib.sha256()
            with os.fdopen(fd, "wb") as fh:
                _download(url, fh, h, name, progress, timeout_s)
            if h.hexdigest() != want:
                raise InputError(f"sha256 {h.hexdigest()} is not the pinned {want}; the file "
                                 "was not kept", file=url)
            tmp.replace(target)
        finally:
            tmp.unlink(missing_ok=True)
        got.append(target)
    return got


def _download(url: str, fh, h, name: str, progress, timeout_s: float) -> None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            total = int(resp.headers.get("Content-Length") or 0)
            done = 0
            while True:
                block = resp.read(1 << 16)
                if not block:
                    break
                done += len(block)
                if done > MAX_BYTES:
                    raise InputError(f"more than {MAX_BYTES} bytes; not a file of the data "
                                     "set", file=url)
                h.update(block)
                fh.write(block)
                if progress:
                    progress(name, done, total)
    except urllib.error.HTTPError as exc:
        raise InputError(f"the server answered {exc.code} {exc.reason}", file=url) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise InputError(f"cannot download ({reason}); offline? Copy the files into a "
                         f"directory and pass --data-dir or set {ENV_VAR}", file=url) from None
