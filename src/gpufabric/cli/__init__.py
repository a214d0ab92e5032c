"""The ``gpufabric`` command: thin shells over the library, one module per area.

Each module registers its commands on :data:`app` when imported:
``topo`` (systems, show, p2p, topo, import, compare), ``collective`` (collective, validate),
``schedule`` (schedule), ``catalog`` (catalog), ``measure`` (discover), ``bench`` (bench),
``calibrate`` (calibrate), ``advise`` (advise).
"""

from __future__ import annotations

import sys

import typer

from gpufabric.cli import advise as _advise  # noqa: F401,E402
from gpufabric.cli import bench as _bench  # noqa: F401,E402
from gpufabric.cli import calibrate as _calibrate  # noqa: F401,E402
from gpufabric.cli import catalog as _catalog  # noqa: F401,E402
from gpufabric.cli import collective as _collective  # noqa: F401,E402
from gpufabric.cli import data as _data  # noqa: F401,E402
from gpufabric.cli import k8s as _k8s  # noqa: F401,E402
from gpufabric.cli import measure as _measure  # noqa: F401,E402
from gpufabric.cli import schedule as _schedule  # noqa: F401,E402
from gpufabric.cli import serve as _serve  # noqa: F401,E402
from gpufabric.cli import topo as _topo  # noqa: F401,E402  (registers commands)
from gpufabric.cli import train as _train  # noqa: F401,E402
from gpufabric.cli.common import app, flag_name
from gpufabric.errors import InputError


def main(argv: list[str] | None = None) -> None:
    """Entry point: bad input becomes one line on stderr and exit status 2.

    An option value typer cannot read (``--requests abc``) is bad input too: one line,
    ``gpufabric: error: --requests: ...``. Other usage errors (a missing argument, an unknown
    command or option) exit 2 with typer's usage text.
    """
    from typer import BadParameter

    from gpufabric.cli.common import ClickException, MissingParameter
    try:
        rv = app(args=argv, prog_name="gpufabric", standalone_mode=False)
    except InputError as exc:
        print(f"gpufabric: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except BadParameter as exc:
        if isinstance(exc, MissingParameter):
            _usage_error(exc)
        field = flag_name(exc.param) if exc.param is not None else None
        print(f"gpufabric: error: {InputError(_bad_value(exc), field=field)}",
              file=sys.stderr)
        sys.exit(2)
    except ClickException as exc:
        _usage_error(exc)
    except typer.Abort:
        print("Aborted.", file=sys.stderr)
        sys.exit(1)
    if isinstance(rv, int) and rv:       # typer.Exit(code) of a command
        sys.exit(rv)


#: What a value typer cannot read should have been, by the kind of parse that failed.
_EXPECTED = {"int_parsing": "a whole number", "int_from_float": "a whole number",
             "float_parsing": "a number", "bool_parsing": "true or false"}


def _bad_value(exc) -> str:
    """``got 'abc'; expected a whole number`` for a value typer's parser refused (else its own
    message)."""
    cause = exc.__cause__
    errors = getattr(cause, "errors", None)
    if callable(errors):
        try:
            first = errors()[0]
            return f"got {first['input']!r}; expected {_EXPECTED[first['type']]}"
        except (IndexError, KeyError, TypeError):
            pass
    return str(exc.message)


def _usage_error(exc) -> None:
    """What typer prints for a usage error, and its exit status."""
    try:
        from typer import rich_utils
        rich_utils.rich_format_error(exc)
    except (ImportError, AttributeError):     # typer without rich
        exc.show()
    sys.exit(exc.exit_code)
