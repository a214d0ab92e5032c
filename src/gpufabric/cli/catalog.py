"""CLI: catalog (what can be named in a spec or system file, with sources)."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from gpufabric.cli.common import app, emit_json

console = Console()


#: Facts whose 0 means "not recorded" (the catalog's convention), never a value of 0.
UNRECORDED_AT_0 = ("tdp_W",)


def _fact(k: str, v) -> str:
    if k in UNRECORDED_AT_0 and not v:
        return "not recorded"
    return "/".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)


def _facts(facts: dict) -> str:
    """The facts of an entry in one short line (unset and empty values left out)."""
    return ", ".join(f"{k}={_fact(k, v)}"
                     for k, v in facts.items() if v not in (None, "", (), [], {}))


def _plural(kind: str) -> str:
    return kind + ("es" if kind.endswith(("s", "sh", "ch", "x")) else "s")


@app.command()
def catalog(section: str | None = typer.Argument(
                None, metavar="[gpus|cpus|nics|switches|links]",
                help="What to list (default: the names in every section)."),
            json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the hardware a spec or system file can name, each entry with its source."""
    from gpufabric import catalog as cat
    if section is None:
        names = {s: [e["name"] for e in cat.entries(s)] for s in cat.SECTIONS}
        if json:
            emit_json(names)
            return
        for s, ns in names.items():
            console.print(f"[bold]{s}[/bold]: {', '.join(ns)}", highlight=False)
        console.print("details and sources: gpufabric catalog SECTION")
        return
    rows = cat.entries(section)
    if json:
        emit_json(rows)
        return
    for kind in cat.SECTIONS[section]:
        part = [r for r in rows if r["table"] == kind]
        table = Table(title=_plural(part[0]["kind"]), box=None, show_lines=False)
        table.add_column("name", no_wrap=True)
        table.add_column("facts", ratio=3)
        table.add_column("source", ratio=2)
        for r in part:
            extra = "".join(f"; {k}: {v}" for k, v in r["sources"].items())
            aka = f" (also {', '.join(r['aliases'][:3])})" if r["aliases"] else ""
            table.add_row(r["name"], _facts(r["facts"]) + aka, r["source"] + extra)
        console.print(table)
