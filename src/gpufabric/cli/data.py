"""CLI: data command (see gpufabric.downloads)."""

from __future__ import annotations

import sys

import typer

from gpufabric.cli.common import app, emit_json
from gpufabric.errors import unknown_name

data_app = typer.Typer(no_args_is_help=True, help="Data sets gpufabric reads but does not ship.")
app.add_typer(data_app, name="data")


@data_app.command("fetch")
def fetch(
    name: str = typer.Argument(..., help="The data set: openb (the Alibaba GPU cluster trace "
                               "of the FGD paper, for schedule) or mooncake (Mooncake's "
                               "FAST'25 serving traces with prefix hash ids, for serve --trace "
                               "mooncake-conversation --kv-tier)."),
    dest: str | None = typer.Option(None, "--dest", help="Directory to fill (default: the "
                                    "cache, ~/.cache/gpufabric/NAME)."),
    url: str | None = typer.Option(None, "--url", help="Base URL to download from (default: "
                                   "the set's repository at the pinned commit)."),
    json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Download a data set's files, check their sha256 and keep them for `schedule` (openb) or
    `serve --trace` (mooncake)."""
    from gpufabric import downloads as data

    if name not in data.SETS:
        raise unknown_name("data set", name, sorted(data.SETS), field="NAME")
    last: dict[str, int] = {}

    def progress(file: str, done: int, total: int) -> None:
        """A line on stderr per file (and per MB while a large one arrives)."""
        if done == total:
            print(f"  {file}: {done / 1e6:.2f} MB", file=sys.stderr)
        elif done >> 20 > last.get(file, 0):
            last[file] = done >> 20
            print(f"  {file}: {done / 1e6:.0f} of {total / 1e6:.1f} MB" if total else
                  f"  {file}: {done / 1e6:.0f} MB", file=sys.stderr)

    got = data.fetch(dest, base_url=url, progress=progress, name=name)
    if json:
        emit_json({"dir": str(got[0].parent), "files": [str(p) for p in got]})
        return
    typer.echo(f"{len(got)} files, sha256 checked, in {got[0].parent}")
