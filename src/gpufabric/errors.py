"""One error type for bad input: it names the file, the field and what is allowed.

The CLI turns a :class:`InputError` into one line on stderr and exit status 2.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any


#: Longest file name (or inline spec) and field an error line shows; longer ones are cut.
MAX_PART_CHARS = 200
#: Longest message an error line shows (a list of known names fits); longer ones are cut.
MAX_MESSAGE_CHARS = 2000


def clip(text: str, limit: int = 60) -> str:
    """``text`` cut to about ``limit`` characters, saying how long it was.

    >>> clip("gpu=H100-SXM," * 100, 40)
    'gpu=H100-SXM,gpu=H100-SXM,gpu=... (1,300 characters)'
    """
    text = str(text)
    if len(text) <= limit:
        return text
    return f"{text[:limit - 10]}... ({len(text):,} characters)"


class InputError(ValueError):
    """Bad user input: a malformed file, an impossible design, an unknown name.

    Parameters
    ----------
    message : str
        What is wrong and what is allowed.
    file : str, optional
        The file (or preset / spec string) the input came from.
    field : str, optional
        Dotted path of the offending field, e.g. ``host.sockets`` or ``links[3].bw_GBps``.

    Examples
    --------
    >>> str(InputError("must be 1 or 2", file="box.yaml", field="host.sockets"))
    'box.yaml: host.sockets: must be 1 or 2'
    """

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None):
        self.message = message
        self.file = file
        self.field = field
        super().__init__(self.__str__())

    def __str__(self) -> str:
        parts = [clip(p, MAX_PART_CHARS) for p in (self.file, self.field) if p]
        # one line of bounded length, whatever the input echoed back holds
        line = ": ".join(parts + [clip(self.message, MAX_MESSAGE_CHARS)])
        return line.replace("\r", "\\r").replace("\n", "\\n")

    def located(self, file: str | None = None, field_prefix: str | None = None) -> InputError:
        """Return a copy with the file set (if unset) and the field prefixed."""
        field = self.field
        if field_prefix:
            field = f"{field_prefix}.{field}" if field else field_prefix
        return InputError(self.message, file=self.file or file, field=field)


def _shown(v: object) -> str:
    """A value as an error echoes it: floats in ``%g``, huge integers by their digit count."""
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) > 10**30:
        try:
            return f"an integer of {len(str(abs(v))):,} digits"
        except ValueError:                      # str refuses past 4,300 digits
            return "an integer of more than 4,300 digits"
    return clip(repr(v) if isinstance(v, str) else str(v))


def allowed_range(lo: float | None, hi: float | None = None, *, integer: bool = False,
                  above: bool = False) -> str:
    """What :func:`check_range` allows, in words: ``a whole number from 1 to 576``,
    ``a number above 0 and at most 700``.

    >>> allowed_range(1, integer=True), allowed_range(0, 3, integer=True)
    ('a whole number >= 1', 'a whole number from 0 to 3')
    >>> allowed_range(0, above=True), allowed_range(0, 1e15, above=True)
    ('a number above 0', 'a number above 0 and at most 1e+15')
    """
    def f(v: float) -> str:
        return f"{int(v):,}" if integer else f"{v:g}"
    kind = "a whole number" if integer else "a number"
    if lo is None:
        return f"{kind} at most {f(hi)}" if hi is not None else kind
    if above:
        return f"{kind} above {f(lo)}" + (f" and at most {f(hi)}" if hi is not None else "")
    return f"{kind} >= {f(lo)}" if hi is None else f"{kind} from {f(lo)} to {f(hi)}"


def check_range(value: Any, lo: float | None, hi: float | None = None, *,
                field: str | None, file: str | None = None, integer: bool = False,
                above: bool = False, unit: str = "", why: str = "") -> Any:
    """``value`` if it is a number in range, else an :class:`InputError` naming the field and
    the allowed range: the one range check of command options and file fields.

    ``lo`` is allowed unless ``above``; ``hi`` is allowed (None: no upper bound). ``integer``
    asks for a whole number (``bool`` is never one). ``nan`` and infinities are out of every
    range. ``unit`` follows the range (`` W``), ``why`` follows that (`` (H100-SXM's TDP)``).

    Examples
    --------
    >>> check_range(8, 1, 576, field="gpus_per_node", integer=True)
    8
    >>> try:
    ...     check_range(1e9, 0, 700, field="--power-cap", above=True, unit=" W",
    ...                 why=" (H100-SXM's TDP)")
    ... except InputError as e:
    ...     print(e)
    --power-cap: must be a number above 0 and at most 700 W (H100-SXM's TDP), got 1e+09
    >>> try:
    ...     check_range("8", 1, 576, field="gpus_per_node", file="s.yaml", integer=True)
    ... except InputError as e:
    ...     print(e)
    s.yaml: gpus_per_node: must be a whole number from 1 to 576, got '8'
    """
    import math
    v = value
    ok = isinstance(v, int) if integer else isinstance(v, (int, float))
    if ok and not isinstance(v, bool) and (not isinstance(v, float) or math.isfinite(v)) and (
            lo is None or (v > lo if above else v >= lo)) and (hi is None or v <= hi):
        return value
    raise InputError(f"must be {allowed_range(lo, hi, integer=integer, above=above)}{unit}{why}, "
                     f"got {_shown(value)}", file=file, field=field)


def _model_tokens(name: str) -> set[str]:
    """The words of a name that carry a digit: model numbers, generations, sizes.

    >>> sorted(_model_tokens("RTX-4070-Ti-SUPER")), sorted(_model_tokens("A100-SXM4-80GB"))
    (['4070'], ['80gb', 'a100', 'sxm4'])
    """
    return {w for w in re.split(r"[^a-z0-9+]+", name.lower()) if any(c.isdigit() for c in w)}


def _same_word(a: str, b: str) -> bool:
    """Equal, or two neighbouring letters swapped (``smx4``/``sxm4``); ``v100`` is not ``a100``.
    """
    if a == b:
        return True
    if len(a) != len(b):
        return False
    diff = [i for i in range(len(a)) if a[i] != b[i]]
    return (len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]] and not (a[diff[0]] + a[diff[1]]).isdigit())


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9+]", "", name.lower())


def closest_name(name: str, known: Iterable[str]) -> str | None:
    """The known name that ``name`` is a misspelling of, or None when none is close enough.

    A suggestion must not name a different product: every word of ``name`` that holds a
    digit (``L40``, ``4090``, ``SXM4``, ``80GB``) must be a word of the suggestion, up to a
    swapped or mistyped letter, so ``L40`` does not become ``L40S`` nor ``RTX-4080``
    ``RTX-4090``. Beyond that the spelling
    must be close (case, separators, a typo) or ``name`` must end the suggestion (``4090``
    for ``RTX-4090``).

    Examples
    --------
    >>> closest_name("H100-SXN", ["H100-SXM", "H100-PCIe", "A100-SXM4-80GB"])
    'H100-SXM'
    >>> closest_name("4090", ["RTX-4090", "RTX-4070-Ti-SUPER"])
    'RTX-4090'
    >>> closest_name("L40", ["L40S", "L4"]) is None, closest_name("RTX-4070", ["RTX-4070-Ti-SUPER"])
    (True, None)
    """
    want, squashed = _model_tokens(name), _squash(name)

    def ratio(k: str) -> float:
        return difflib.SequenceMatcher(None, squashed, _squash(k)).ratio()

    fits = [k for k in known
            if _squash(k) == squashed
            or (all(any(_same_word(w, v) for v in _model_tokens(k)) for w in want)
                and (ratio(k) > 0.8 or (len(squashed) >= 3 and _squash(k).endswith(squashed))))]
    return max(fits, key=lambda k: (_squash(k) == squashed, ratio(k)), default=None)


def unknown_name(kind: str, name: str, known: Iterable[str], *, file: str | None = None,
                 field: str | None = None) -> InputError:
    """An :class:`InputError` for an unknown catalog name, suggesting the name it misspells.

    Examples
    --------
    >>> str(unknown_name("GPU", "H100-SMX", ["A100-SXM4-80GB", "H100-SXM"], field="gpu"))
    "gpu: unknown GPU 'H100-SMX'; did you mean 'H100-SXM'? (known: A100-SXM4-80GB, H100-SXM)"
    >>> str(unknown_name("GPU", "L40", ["L40S", "L4"], field="gpu"))
    "gpu: unknown GPU 'L40' (known: L4, L40S)"
    """
    known = sorted(known)
    close = closest_name(name, known)
    hint = f"; did you mean '{close}'?" if close else ""
    listing = ", ".join(known) if len(known) <= 30 else ", ".join(known[:30]) + ", ..."
    return InputError(f"unknown {kind} '{clip(name, 100)}'{hint} (known: {listing})", file=file,
                      field=field)
