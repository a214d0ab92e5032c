"""Shared pieces of the CLI: the app, JSON output."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import typer

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Model how GPUs are connected and what that connection costs.")


def _default(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"not JSON-serializable: {type(obj).__name__}")


def emit_json(obj: Any) -> None:
    """Print ``obj`` as JSON (dataclasses and numpy values included)."""
    typer.echo(json.dumps(obj, indent=2, default=_default))
