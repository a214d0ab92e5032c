"""The ``gpufabric`` command: thin shells over the library, one module per area.

Each module registers its commands on :data:`app` when imported:
``topo`` (systems, show, p2p, topo, import, compare), ``collective`` (collective, validate),
``schedule`` (schedule), ``catalog`` (catalog).
"""

from __future__ import annotations

import sys

from gpufabric.cli import catalog as _catalog  # noqa: F401,E402
from gpufabric.cli import collective as _collective  # noqa: F401,E402
from gpufabric.cli import data as _data  # noqa: F401,E402
from gpufabric.cli import k8s as _k8s  # noqa: F401,E402
from gpufabric.cli import schedule as _schedule  # noqa: F401,E402
from gpufabric.cli import serve as _serve  # noqa: F401,E402
from gpufabric.cli import topo as _topo  # noqa: F401,E402  (registers commands)
from gpufabric.cli import train as _train  # noqa: F401,E402
from gpufabric.cli.common import app
from gpufabric.errors import InputError


def main(argv: list[str] | None = None) -> None:
    """Entry point: bad input becomes one line on stderr and exit status 2.

    Usage errors (a missing option, an unknown command) exit 2 through typer itself.
    """
    try:
        app(args=argv, prog_name="gpufabric")
    except InputError as exc:
        print(f"gpufabric: error: {exc}", file=sys.stderr)
        sys.exit(2)
