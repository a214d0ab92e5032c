"""One error type for bad input: it names the file, the field and what is allowed.

The CLI turns a :class:`InputError` into one line on stderr and exit status 2.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable


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
        parts = [p for p in (self.file, self.field) if p]
        # one line, whatever the input echoed back holds
        return ": ".join(parts + [self.message]).replace("\r", "\\r").replace("\n", "\\n")

    def located(self, file: str | None = None, field_prefix: str | None = None) -> InputError:
        """Return a copy with the file set (if unset) and the field prefixed."""
        field = self.field
        if field_prefix:
            field = f"{field_prefix}.{field}" if field else field_prefix
        return InputError(self.message, file=self.file or file, field=field)


def unknown_name(kind: str, name: str, known: Iterable[str], *, file: str | None = None,
                 field: str | None = None) -> InputError:
    """An :class:`InputError` for an unknown catalog name, suggesting the closest known one.

    Examples
    --------
    >>> str(unknown_name("GPU", "A100-SXM", ["A100-SXM4-80GB", "H100-SXM"], field="gpu"))
    "gpu: unknown GPU 'A100-SXM'; did you mean 'A100-SXM4-80GB'? (known: A100-SXM4-80GB, H100-SXM)"
    """
    known = sorted(known)
    low = name.lower()

    def score(k: str) -> tuple[int, float]:   # longest shared prefix first, then similarity
        kl = k.lower()
        prefix = len(os.path.commonprefix([low, kl]))
        return prefix, difflib.SequenceMatcher(None, low, kl).ratio()

    best = max(known, key=score, default=None)
    close = [best] if best is not None and (score(best)[0] >= 3 or score(best)[1] >= 0.5) else []
    hint = f"; did you mean '{close[0]}'?" if close else ""
    listing = ", ".join(known) if len(known) <= 30 else ", ".join(known[:30]) + ", ..."
    return InputError(f"unknown {kind} '{name}'{hint} (known: {listing})", file=file, field=field)
