"""The ``gpufabric`` command: a thin shell over the library."""

from __future__ import annotations

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Model how GPUs are connected and what that connection costs.")


@app.command()
def systems() -> None:
    """List the built-in example systems (presets)."""
    from gpufabric.topology import presets
    for name in presets.names():
        typer.echo(name)


def main() -> None:
    app()
