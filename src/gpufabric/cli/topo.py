"""CLI: systems, show, p2p, topo, import, compare."""

from __future__ import annotations

import typer

from gpufabric.cli.common import app


@app.command()
def systems() -> None:
    """List the built-in example systems (presets)."""
    from gpufabric.topology import presets
    for name in presets.names():
        typer.echo(name)
