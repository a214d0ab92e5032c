"""The entry point of the ``gpufabric`` command: which command module to import, and bad
input as one line and exit status 2 (the package docstring, :mod:`gpufabric.cli`, tells how
the commands are laid out)."""

from __future__ import annotations

import importlib
import sys

#: Every command (or group) of ``gpufabric``, in the order ``gpufabric --help`` lists them,
#: with the module of this package that registers it.
COMMANDS: dict[str, str] = {
    "advise": "advise", "recommend": "recommend", "serve": "serve", "datasets": "serve",
    "clients": "serve",
    "collective": "collective",
    "validate": "collective", "params": "collective", "bench": "bench",
    "calibrate": "calibrate", "catalog": "catalog", "discover": "measure",
    "schedule": "schedule", "systems": "topo", "show": "topo", "p2p": "topo", "topo": "topo",
    "compare": "topo", "models": "train", "train": "train", "data": "data", "k8s": "k8s",
    "import": "topo", "generate": "generate", "kernels": "kernels",
}


def register(argv: list[str]) -> None:
    """Import the module of the command ``argv`` starts with, or every command module when it
    starts with none that :data:`COMMANDS` knows (``--help``, nothing, a misspelt name)."""
    word = argv[0] if argv else None
    wanted = [COMMANDS[word]] if word in COMMANDS else dict.fromkeys(COMMANDS.values())
    for module in wanted:
        importlib.import_module(f"gpufabric.cli.{module}")


def main(argv: list[str] | None = None) -> None:
    """Entry point: bad input becomes one line on stderr and exit status 2.

    An option value typer cannot read (``--requests abc``) is bad input too: one line,
    ``gpufabric: error: --requests: ...``. Other usage errors (a missing argument, an unknown
    command or option) exit 2 with typer's usage text.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv == ["--version"]:            # before typer is imported
        from gpufabric import __version__
        print(f"gpufabric {__version__}")
        return
    register(argv)
    import typer
    from typer import BadParameter

    from gpufabric.cli.common import ClickException, MissingParameter, app, flag_name
    from gpufabric.errors import InputError
    try:
        rv = _command(app)(args=argv, prog_name="gpufabric", standalone_mode=False)
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


#: the click command built from the typer app, with what was registered when it was built
_BUILT: list[tuple] = []


def _registered(app) -> tuple:
    """What ``app`` has registered: its commands' callbacks and its groups', recursively."""
    return (tuple(id(c.callback) for c in app.registered_commands),
            tuple((g.name, _registered(g.typer_instance)) for g in app.registered_groups
                  if g.typer_instance is not None))


def _command(app):
    """The click command of ``app``, built once for what it has registered (typer builds it
    again on every call: 40 ms a call with every command registered, as in a process that
    runs several commands)."""
    import typer.main

    key = _registered(app)
    if not _BUILT or _BUILT[0][0] != key:
        command = typer.main.get_command(app)
        _reflow_help(command)
        _BUILT[:] = [(key, command)]
    return _BUILT[0][1]


def _reflow_help(command) -> None:
    """Each paragraph of every command's help as one line for the terminal to wrap: typer
    keeps a docstring's line breaks after its first paragraph, so text written at 95 columns
    broke mid-sentence in an 80-column terminal (a paragraph starting with ``\\b`` is kept)."""
    import inspect

    if command.help:
        text, cut, rest = inspect.cleandoc(command.help).partition("\f")
        command.help = "\n\n".join(
            p if p.startswith("\b") else " ".join(p.split("\n"))
            for p in text.split("\n\n")) + cut + rest
    for sub in getattr(command, "commands", {}).values():
        _reflow_help(sub)


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
