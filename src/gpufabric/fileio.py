"""Reading and writing the user's files: every failure is one :class:`InputError` line.

A file given on the command line may be missing, a directory, unreadable, binary, in another
encoding or huge; a YAML file may nest aliases until it expands to gigabytes. Each of these
ends here in an :class:`~gpufabric.errors.InputError` naming the file and what is allowed,
never in a traceback, and no read takes more memory than a bounded multiple of the limit.

Examples
--------
>>> import tempfile, os
>>> d = tempfile.mkdtemp()
>>> p = os.path.join(d, "box.yaml")
>>> write_output(p, "gpu: H100-SXM\\n")
>>> load_yaml(p)
{'gpu': 'H100-SXM'}
>>> try:
...     load_yaml(d)
... except InputError as e:
...     print(str(e).replace(d, "DIR"))
DIR: is a directory; expected a file
"""

from __future__ import annotations

import functools
import io
import marshal
import math
import os
import re
import stat
from pathlib import Path
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from gpufabric.errors import InputError

if TYPE_CHECKING:
    import yaml

#: Largest text file read (bytes). Spec, system, calibration and nvidia-smi files are a few
#: kilobytes; traces a few megabytes.
MAX_TEXT_BYTES = 64 * 2**20
#: Largest YAML file (bytes): a system file listing every device of a large cluster is a few
#: megabytes; parsing this much takes seconds.
MAX_YAML_BYTES = 8 * 2**20
#: Largest YAML document, counted as values after aliases are expanded.
MAX_YAML_VALUES = 1_000_000
#: Longest key of a YAML mapping (characters). gpufabric's own keys are under 40 characters.
MAX_KEY_CHARS = 256
#: Longest text value of a YAML file (characters); the longest ``source`` note of the
#: calibration files is about 1,000.
MAX_TEXT_CHARS = 10_000
#: Largest magnitude of a number in a YAML file. The largest the repository's data holds is
#: 1.5e13 (tokens); sizes are at most a PiB (1.1e15). Past this, a number is a typo or an attack,
#: and sums and products of it would overflow to infinity.
MAX_NUMBER = 1e30
#: A document of one plain word or whole number (a value of a spec's ``key=value``): read
#: without PyYAML. YAML's own words (``yes``, ``off``, ``null``...) go to PyYAML.
_PLAIN_WORD = re.compile(r" *(?:([A-Za-z][A-Za-z0-9_-]{0,199})|([1-9][0-9]{0,17}|0)) *\Z")
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "true", "false", "on", "off", "null"})
#: A plain YAML scalar that the loader reads as an integer (YAML 1.1: signs, digits, ``_``).
_LONG_INT = re.compile(r"[-+]?(0b|0x|0o)?[0-9a-fA-F_]+\Z")


@functools.cache
def yaml_loader() -> Any:
    """libyaml's safe loader when PyYAML has it (ten times faster), else the pure-Python one:
    every YAML file gpufabric reads, its own data and the user's, is parsed with it. (PyYAML
    is imported here, when a file is first parsed: a run whose data files are all in the
    cache, :func:`load_data`, does not import it.)"""
    import yaml
    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _name_limits() -> tuple[int, int]:
    """(NAME_MAX, PATH_MAX) in bytes: the longest file name and path the OS takes."""
    try:
        return os.pathconf("/", "PC_NAME_MAX"), os.pathconf("/", "PC_PATH_MAX")
    except (AttributeError, OSError, ValueError):   # no pathconf (Windows)
        return 255, 4096


def names_a_path(text: str) -> bool:
    """Whether ``text`` can name a file at all: not empty, no NUL byte, at most PATH_MAX bytes
    and no part longer than NAME_MAX bytes (255 and 4096 on Linux). An argument that takes
    "a preset, a file, or an inline spec" is never a file when this is false, and is not handed
    to the OS (which would answer "File name too long").

    Examples
    --------
    >>> names_a_path("box.yaml"), names_a_path("gpu=H100-SXM," * 400), names_a_path("a\\x00b")
    (True, False, False)
    """
    if not text or "\x00" in text:
        return False
    name_max, path_max = _name_limits()
    raw = os.fsencode(text)
    return len(raw) < path_max and all(len(part) <= name_max for part in raw.split(b"/"))


def path_kind(text: str) -> str | None:
    """``"file"``, ``"dir"`` or ``"other"`` for an existing path; None when there is none or
    ``text`` cannot name one (:func:`names_a_path`). Never raises.

    >>> path_kind("."), path_kind("no/such/file.yaml"), path_kind("x" * 5000)
    ('dir', None, None)
    """
    if not names_a_path(text):
        return None
    try:
        st = os.stat(text)
    except (OSError, ValueError):
        return None
    return "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"


def read_text(path: str | os.PathLike[str], *, what: str = "a UTF-8 text file",
              max_bytes: int = MAX_TEXT_BYTES) -> str:
    """The text of a user's file, or an :class:`InputError` saying why it cannot be read.

    Parameters
    ----------
    path : str or path-like
        The file as the user named it (the error names it the same way).
    what : str
        What the file should be, for the message (``"a YAML file"``).
    max_bytes : int
        Files larger than this are refused before they are read.

    Examples
    --------
    >>> try:
    ...     read_text("no/such/file.yaml")
    ... except InputError as e:
    ...     print(e)
    no/such/file.yaml: no such file
    """
    name = str(path)
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError("no such file", file=name) from None
    except NotADirectoryError:
        raise InputError("no such file (a parent is not a directory)", file=name) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", file=name) from None
    except ValueError:   # a NUL byte in the name
        raise InputError("not a file name (it holds a NUL byte)", file=name) from None
    if p.is_dir():
        raise InputError("is a directory; expected a file", file=name)
    if not p.is_file():
        raise InputError(f"not a regular file; expected {what}", file=name)
    if st.st_size > max_bytes:
        raise InputError(f"{st.st_size} bytes; at most {max_bytes} bytes allowed for {what}",
                         file=name)
    try:
        with open(p, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", file=name) from None
    if len(raw) > max_bytes:
        raise InputError(f"more than {max_bytes} bytes; at most {max_bytes} allowed for {what}",
                         file=name)
    return decode(raw, name, what)


def decode(raw: bytes, name: str, what: str = "a UTF-8 text file") -> str:
    """The text of ``raw``: UTF-8, or UTF-16 with a byte-order mark; else an InputError.

    Examples
    --------
    >>> try:
    ...     decode(b"gpu: \\xff", "box.yaml", "a YAML file")
    ... except InputError as e:
    ...     print(e)
    box.yaml: not UTF-8 text (byte 0xff at offset 5); expected a YAML file
    """
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):   # UTF-16 with BOM (Windows PowerShell's >)
        try:
            return raw.decode("utf-16").removeprefix("\ufeff")
        except UnicodeDecodeError:
            raise InputError(f"not valid UTF-16 text; expected {what}", file=name) from None
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise InputError(f"binary data (a NUL byte at offset {nul}); expected {what}", file=name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                         f"expected {what}", file=name) from None
    return text.removeprefix("\ufeff")


def parse_yaml(text: str, name: str, *, max_values: int = MAX_YAML_VALUES) -> Any:
    """Parse YAML text with the safe loader; malformed, recursive or explosive documents raise.

    Examples
    --------
    >>> parse_yaml("a: [1, 2]", "x.yaml")
    {'a': [1, 2]}
    >>> try:
    ...     parse_yaml("a: &x [1, *x]", "x.yaml")
    ... except InputError as e:
    ...     print(e)
    x.yaml: a YAML alias refers to a value that contains it; allowed: aliases of finished values
    >>> try:
    ...     parse_yaml("gpu: H100-SXM\\nnodes: 2\\ngpu: A100-SXM4-80GB\\n", "box.yaml")
    ... except InputError as e:
    ...     print(e)
    box.yaml: line 3: key 'gpu' given twice (first on line 1); allowed: each key once in a mapping
    >>> parse_yaml("H100-SXM", "spec"), parse_yaml(" 8", "spec"), parse_yaml("off", "spec")
    ('H100-SXM', 8, False)
    """
    plain = _PLAIN_WORD.match(text)
    if plain and (plain[2] or plain[1].lower() not in _YAML_WORDS):
        return int(plain[2]) if plain[2] else plain[1]
    import yaml
    loader = yaml_loader()
    try:
        # count the parser's events first: a flat document too big to build is refused
        # before Python objects are made for it
        for events, ev in enumerate(yaml.parse(text, Loader=loader)):
            if events > max_values + 4:   # stream, document and root events aside
                raise InputError(f"more than {max_values} values; allowed: smaller documents",
                                 file=name)
            if (isinstance(ev, yaml.ScalarEvent) and not ev.style and len(ev.value) > 4000
                    and _LONG_INT.match(ev.value)):   # int() refuses past 4300 digits
                mark = ev.start_mark
                raise InputError(f"an integer of {len(ev.value):,} characters; allowed: numbers "
                                 f"of magnitude at most {MAX_NUMBER:g}", file=name,
                                 field=f"line {mark.line + 1}" if mark else None)
        data = _load_once_per_key(text, name)   # a safe loader: plain data only
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"not valid YAML: {problem}", file=name,
                         field=f"line {mark.line + 1}" if mark else None) from None
    except RecursionError:
        raise InputError("not valid YAML: nested too deeply", file=name) from None
    except InputError:
        raise
    except ValueError as exc:   # a number int() will not read (a huge base-60 one, say)
        raise InputError(f"not valid YAML: {str(exc).splitlines()[0]}", file=name) from None
    _check_size(data, name, max_values)
    return data


def _load_once_per_key(text: str, name: str) -> Any:
    """``yaml.load(text, Loader=yaml_loader())``, refusing a mapping that gives a key twice.

    PyYAML keeps the last of two equal keys without a word, so a file that says
    ``gpus_per_node: 8`` and later ``gpus_per_node: 4`` would run with 4. The document is
    composed (nodes with their lines), its mappings checked, then constructed: the same steps
    ``yaml.load`` takes, with either loader (libyaml's or the pure-Python one).
    """
    loader = yaml_loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_keys_once(node, name)
        return loader.construct_document(node)
    finally:
        loader.dispose()


#: The tag of a YAML merge key (``<<: *base``), which may repeat keys of the mapping it merges.
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _check_keys_once(root: yaml.Node, name: str) -> None:
    """An :class:`InputError` naming the line and key of a key given twice in one mapping
    anywhere under ``root`` (each collection visited once, aliases included)."""
    import yaml
    scalar, mapping = yaml.ScalarNode, yaml.MappingNode
    seen: set[int] = set()
    todo = [root]
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if type(node) is mapping:
            pairs = node.value
            keys = [k.value for k, _ in pairs if type(k) is scalar]
            if len(set(keys)) < len(keys):
                _refuse_twice(root, node, name)
            todo.extend(v for _, v in pairs if type(v) is not scalar)
            todo.extend(k for k, _ in pairs if type(k) is not scalar)
        elif type(node) is not scalar:
            todo.extend(v for v in node.value if type(v) is not scalar)


def _refuse_twice(root: yaml.Node, node: yaml.MappingNode, name: str) -> None:
    """The error for a mapping whose keys repeat a text (if two are equal keys, not ``1`` and
    ``'1'``, nor merge keys): the second key's line, the key's place in the document."""
    import yaml
    first: dict[tuple[str, str], int] = {}
    for key, _ in node.value:
        if type(key) is not yaml.ScalarNode or key.tag == _MERGE_TAG:
            continue
        line = key.start_mark.line + 1 if key.start_mark else 0
        k = (key.tag, key.value)
        if k in first:
            shown = _where([*_path_to(root, node), key.value[:60]])
            raise InputError(f"key {shown!r} given twice (first on line {first[k]}); allowed: "
                             "each key once in a mapping", file=name, field=f"line {line}")
        first[k] = line


def _path_to(root: yaml.Node, target: yaml.Node) -> list[Any]:
    """The keys and indices from ``root`` to ``target`` (``['links', 1]``); [] if not found."""
    import yaml
    seen: set[int] = set()
    todo: list[tuple[yaml.Node, list[Any]]] = [(root, [])]
    while todo:
        node, path = todo.pop()
        if node is target:
            return path
        if id(node) in seen or type(node) is yaml.ScalarNode:
            continue
        seen.add(id(node))
        if type(node) is yaml.MappingNode:
            todo.extend((v, [*path, k.value if type(k) is yaml.ScalarNode else "?"])
                        for k, v in node.value)
        else:
            todo.extend((v, [*path, i]) for i, v in enumerate(node.value))
    return []


def csv_rows(text: str, name: str) -> Iterator[list[str]]:
    """The rows of CSV text (every CSV gpufabric reads goes through here).

    A field may be as long as the file itself (:func:`read_text` bounds that), not only
    Python's default 131,072 characters. A quote that is never closed, or text after a closing
    quote, is an :class:`InputError` naming the line the row starts on (rather than a field
    that silently swallows the rest of the file).

    Examples
    --------
    >>> rows = list(csv_rows("name,note\\np1," + "x" * 200_000 + "\\n", "t.csv"))
    >>> rows[0], len(rows[1][1])
    (['name', 'note'], 200000)
    >>> try:
    ...     list(csv_rows('a,b\\n1,2\\n3,"4\\n5,6\\n', "t.csv"))
    ... except InputError as e:
    ...     print(e)
    t.csv: line 3: not valid CSV: a quoted field runs to the end of the file (its closing " is \
missing)
    """
    import csv
    if csv.field_size_limit() < MAX_TEXT_BYTES:
        csv.field_size_limit(MAX_TEXT_BYTES)   # no field is longer than the file it is in
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            why = str(exc)
            if "unexpected end of data" in why:
                why = 'a quoted field runs to the end of the file (its closing " is missing)'
            raise InputError(f"not valid CSV: {why}", file=name, field=f"line {start}") from None
        yield row


def _where(path: list[Any]) -> str | None:
    """``['links', 1, 'bw_GBps']`` -> ``links[1].bw_GBps``; None for the document itself."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or None


def _digits(v: int) -> str:
    """How many decimal digits ``v`` has (``str`` refuses past 4300)."""
    try:
        return f"{len(str(abs(v))):,}"
    except ValueError:
        return "more than 4,300"


def _check_scalar(v: Any, name: str, path: list[Any]) -> None:
    """A number must be finite and at most :data:`MAX_NUMBER` in magnitude; a text at most
    :data:`MAX_TEXT_CHARS` long."""
    if isinstance(v, bool):
        return
    if isinstance(v, float) and not math.isfinite(v):
        shown = ".nan" if v != v else ("-.inf" if v < 0 else ".inf")
        raise InputError(f"got {shown}; allowed: a finite number", file=name,
                         field=_where(path))
    if isinstance(v, (int, float)) and abs(v) > MAX_NUMBER:
        shown = f"{v:.3g}" if isinstance(v, float) else f"an integer of {_digits(v)} digits"
        raise InputError(f"got {shown}; allowed: numbers of magnitude at most {MAX_NUMBER:g}",
                         file=name, field=_where(path))
    if isinstance(v, str) and len(v) > MAX_TEXT_CHARS:
        raise InputError(f"a text of {len(v):,} characters; allowed: at most "
                         f"{MAX_TEXT_CHARS:,} characters", file=name, field=_where(path))


def check_key(key: Any, file: str, field: str | None = None) -> None:
    """Refuse a key (of a YAML mapping, a CSV header, a JSON object) longer than
    :data:`MAX_KEY_CHARS`.

    >>> try:
    ...     check_key("k" * 100_000, "t.csv", "header")
    ... except InputError as e:
    ...     print(e)
    t.csv: header: a key of 100,000 characters ('kkkkkkkkkkkkkkkkkkkk'...); allowed: keys of \
at most 256 characters
    """
    if isinstance(key, str) and len(key) > MAX_KEY_CHARS:
        raise InputError(f"a key of {len(key):,} characters ({key[:20]!r}...); allowed: keys of "
                         f"at most {MAX_KEY_CHARS} characters", file=file, field=field)


def _check_size(data: Any, name: str, max_values: int) -> None:
    """Refuse self-containing aliases, documents whose aliases expand past ``max_values``, and
    values no file means: a non-finite or huge number, a huge text or key (named by field)."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()
    path: list[Any] = []

    def size(v: Any, depth: int) -> int:
        if not isinstance(v, (list, dict)):
            _check_scalar(v, name, path)
            return 1
        key = id(v)
        if key in sizes:
            return sizes[key]
        if key in open_:
            raise InputError("a YAML alias refers to a value that contains it; allowed: "
                             "aliases of finished values", file=name)
        if depth > 100:
            raise InputError("nested more than 100 levels deep", file=name)
        open_.add(key)
        pairs = v.items() if isinstance(v, dict) else enumerate(v)
        n = 1
        for k, item in pairs:
            if isinstance(v, dict):
                check_key(k, name, _where(path))
                n += size(k, depth + 1)
            path.append(k if isinstance(k, (str, int)) and not isinstance(k, bool) else str(k))
            n += size(item, depth + 1)
            path.pop()
            if n > max_values:
                raise InputError(f"expands to more than {max_values} values (YAML aliases?); "
                                 "allowed: smaller documents", file=name)
        open_.discard(key)
        sizes[key] = n
        return n

    size(data, 0)


def load_yaml(path: str | os.PathLike[str], *, what: str = "a YAML file") -> Any:
    """Read and parse a user's YAML file; every failure is an :class:`InputError`."""
    name = str(path)
    return parse_yaml(read_text(path, what=what, max_bytes=MAX_YAML_BYTES), name)


#: A name for one of this process's open descriptors (``/dev/stdout``, ``/dev/fd/3``,
#: ``/proc/self/fd/1``): written through to whatever the shell opened there.
_FD_NAME = re.compile(r"/(dev/(stdout|stderr|fd/\d+)|proc/(self|thread-self|\d+)/fd/\d+)\Z")


def _output_target(path: str | os.PathLike[str], field: str | None
                   ) -> tuple[str, os.stat_result | None, bool]:
    """What writing ``path`` means: (the path to write, its stat or None when there is none
    yet, whether it is written through rather than replaced).

    A symlink is followed to its target (the link stays); the target's rules apply. Anything
    that cannot be written at all is an :class:`InputError`.
    """
    name = str(path)
    if "\x00" in name:
        raise InputError("not a file name (it holds a NUL byte)", file=name, field=field)
    if not names_a_path(name):
        raise InputError("not a file name (longer than the OS allows)", file=name, field=field)
    try:
        st: os.stat_result | None = os.stat(name)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise InputError(f"'{Path(name).parent}' is not a directory", file=name,
                         field=field) from None
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", file=name, field=field) from None
    if st is None:
        # a missing file, or a symlink to one: written where the link points
        target = os.path.realpath(name) if os.path.islink(name) else name
        return target, None, False
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        raise InputError("is a directory; give a file name", file=name, field=field)
    if stat.S_ISREG(mode):
        if _FD_NAME.match(os.path.abspath(name)):    # `-o /dev/stdout >> log`: appended to
            return name, st, True
        return os.path.realpath(name), st, False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return name, st, True        # written through, never replaced
    kind = "a socket" if stat.S_ISSOCK(mode) else "a block device" \
        if stat.S_ISBLK(mode) else "not a regular file"
    raise InputError(f"{kind}; allowed: a regular file (replaced whole), a character device "
                     "such as /dev/null or a pipe (written through)", file=name, field=field)


def check_output(path: str | os.PathLike[str], *, field: str | None = None) -> Path:
    """Check that ``path`` can be written as :func:`write_output` writes it (before long work);
    returns the directory the file is (or will be) in.

    A regular file's directory is probed by creating and removing a temporary file in it, so a
    read-only file system, ``/proc`` or a directory without write permission is refused here,
    before the work, as it would be after it.

    Examples
    --------
    >>> try:
    ...     check_output(".", field="--output")
    ... except InputError as e:
    ...     print(e)
    .: --output: is a directory; give a file name
    >>> try:
    ...     check_output("/proc/report.html", field="--output")
    ... except InputError as e:
    ...     print(e)  # doctest: +ELLIPSIS
    /proc/report.html: --output: cannot write in '/proc': ...
    """
    name = str(path)
    target, st, through = _output_target(path, field)
    parent = Path(target).parent
    if through:
        if not os.access(target, os.W_OK):
            raise InputError("cannot write: permission denied", file=name, field=field)
        return parent
    fd, tmp = _temp_beside(name, target, field)
    os.close(fd)
    Path(tmp).unlink(missing_ok=True)
    return parent


def _temp_beside(name: str, target: str, field: str | None) -> tuple[int, str]:
    """A new temporary file (descriptor, path) in the directory ``target`` is (or will be)
    in; that directory missing, not a directory or not writable is an :class:`InputError`."""
    parent = Path(target).parent
    if not parent.exists():
        raise InputError(f"directory '{parent}' does not exist; create it first", file=name,
                         field=field)
    if not parent.is_dir():
        raise InputError(f"'{parent}' is not a directory", file=name, field=field)
    try:
        import tempfile     # here: its import (random, hashlib) costs every run 5-10 ms
        return tempfile.mkstemp(dir=parent, prefix=f".{Path(target).name[:200]}.")
    except OSError as exc:
        raise InputError(f"cannot write in '{parent}': {exc.strerror or exc}", file=name,
                         field=field) from None


def write_output(path: str | os.PathLike[str], text: str | bytes, *,
                 field: str | None = None) -> None:
    """Write an output (``-o``, ``--state``, a profile): the one writer of every command.

    - A regular file (or a new one) is replaced whole: the text goes to a temporary file in
      the same directory, is flushed to disk (fsync) and renamed over the old file, so a failed
      write (a full disk, an interrupt) leaves the old file as it was and nothing half-written.
      An existing file keeps its permission bits; a new one gets those the umask gives.
    - A character device (``/dev/null``, ``/dev/stdout`` on a terminal) or a pipe (a FIFO,
      ``/dev/stdout`` into ``|``, the shell's ``>(...)``) is written through, never replaced:
      it stays what it was. A FIFO is opened as the shell's ``>`` opens it, waiting for its
      reader. A descriptor's name (``/dev/stdout``, ``/dev/fd/N``) that stands for a regular
      file the shell opened (``> out.yaml``, ``>> log``) is appended to, never replaced.
    - A symlink is followed: the file it points to is written under these rules, the link stays.
    - A directory, a socket, a block device, a directory that does not exist or cannot be
      written (read-only, ``/proc``), a full device (``/dev/full``): an :class:`InputError`.

    Examples
    --------
    >>> import tempfile, os
    >>> d = tempfile.mkdtemp()
    >>> write_output(os.path.join(d, "a.yaml"), "x: 1\\n")
    >>> open(os.path.join(d, "a.yaml")).read()
    'x: 1\\n'
    >>> write_output("/dev/null", "discarded")
    >>> try:
    ...     write_output("/dev/full", "x" * 100_000, field="--output")
    ... except InputError as e:
    ...     print(e)
    /dev/full: --output: cannot write: No space left on device
    >>> try:
    ...     write_output("no/such/dir/report.html", "x", field="--output")
    ... except InputError as e:
    ...     print(e)
    no/such/dir/report.html: --output: directory 'no/such/dir' does not exist; create it first
    """
    name = str(path)
    data = text.encode("utf-8") if isinstance(text, str) else text
    target, st, through = _output_target(path, field)
    if through:
        _write_through(name, target, data, field)
        return
    parent = Path(target).parent
    fd, tmp = _temp_beside(name, target, field)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if st is not None:
            mode = stat.S_IMODE(st.st_mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask      # mkstemp makes 0600; an output is an ordinary file
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"cannot write: {exc.strerror or exc}", file=name, field=field) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(parent)


def _write_through(name: str, target: str, data: bytes, field: str | None) -> None:
    """Write ``data`` into an existing character device or FIFO, which stays what it is, or
    append it to the file a descriptor name (``/dev/stdout``) stands for."""
    fd_name = _FD_NAME.match(os.path.abspath(target)) is not None
    try:
        fd = os.open(target, os.O_WRONLY | getattr(os, "O_NOCTTY", 0)
                     | (os.O_APPEND if fd_name else 0))
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", file=name, field=field) from None
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)
                or stat.S_ISREG(mode) and fd_name):   # swapped since it was looked at
            raise InputError("changed while being written; not written", file=name, field=field)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", file=name, field=field) from None
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    """Flush a rename in ``directory`` to disk, where the OS allows it (not Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)



# -- gpufabric's own data files ---------------------------------------------------------------
#: Where parsed copies of gpufabric's own data files are kept between runs: ``GPUFABRIC_CACHE``
#: (a folder, or one of :data:`CACHE_OFF`), else ``$XDG_CACHE_HOME/gpufabric``, else
#: ``~/.cache/gpufabric``.
CACHE_ENV = "GPUFABRIC_CACHE"
#: Values of :data:`CACHE_ENV` (any case) that turn the cache off, not folders to fill: the
#: words a switch is commonly set to (``GPUFABRIC_CACHE=0`` is never a folder named ``0`` in the
#: working directory).
CACHE_OFF = frozenset({"off", "0", "false", "no", "none", "disable", "disabled"})


def cache_dir() -> Path | None:
    """The folder of :data:`CACHE_ENV`, or None when caching is off."""
    env = os.environ.get(CACHE_ENV, "").strip()
    if env.lower() in CACHE_OFF:
        return None
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpufabric"


try:        # hashlib's BLAKE2 without the OpenSSL bindings hashlib loads first
    from _blake2 import blake2b as _blake2b
except ImportError:     # pragma: no cover - a Python built without it
    from hashlib import blake2b as _blake2b


def _parse_data(raw: bytes, name: str) -> Any:
    return _load_once_per_key(raw.decode("utf-8"), name)


def package_dir(package: str) -> Path:
    """The folder of one of gpufabric's own packages, its data files beside its modules: what
    ``importlib.resources.files`` gives a package installed as files, without importing
    ``importlib.resources`` (and with it ``tempfile``, ``random``, ``zipfile``: 5 ms of every
    run).

    >>> (package_dir("gpufabric.catalog") / "data" / "pcie.yaml").is_file()
    True
    """
    import importlib
    return Path(str(importlib.import_module(package).__file__)).parent


def load_data(package: str, *parts: str) -> Any:
    """One of gpufabric's own YAML data files (``load_data("gpufabric.catalog", "data",
    "gpus.yaml")``), parsed.

    The parse is kept in the user's cache folder (:func:`cache_dir`) under the hash of the
    file's bytes, so a later run reads the same data back in a fraction of a millisecond and
    an edited file is parsed again; a cache that cannot be read or written is skipped. These
    files ship with gpufabric and its tests check them, so the hostile-input checks of
    :func:`parse_yaml` (for the user's files) are not repeated here.

    Examples
    --------
    >>> load_data("gpufabric.catalog", "data", "pcie.yaml")[0]["name"]
    'gen3'
    """
    raw = package_dir(package).joinpath(*parts).read_bytes()
    folder = cache_dir()
    if folder is None:
        return _parse_data(raw, "/".join(parts))
    key = _blake2b(raw, digest_size=16, person=b"yaml-marshal-4").hexdigest()
    stem = ".".join((package, *parts))
    path = folder / f"{stem}.{key}.marshal"
    try:
        return marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        pass
    data = _parse_data(raw, "/".join(parts))
    try:
        blob = marshal.dumps(data)
        folder.mkdir(parents=True, exist_ok=True)
        import tempfile     # here: its import (random, hashlib) costs every run 5-10 ms
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.")
    except (OSError, ValueError):   # a read-only home; a value marshal does not keep (a date)
        return data
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, path)
        for old in folder.glob(f"{stem}.*.marshal"):   # the parses of earlier versions
            if old != path:
                old.unlink(missing_ok=True)
    except OSError:
        Path(tmp).unlink(missing_ok=True)
    return data
