"""Shared pieces of the CLI: the app, ``--version``, ``--profile``, JSON output, progress of
long runs, and the checks every command's options share (whole-number limits, flags that
exclude or need each other)."""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import sys
import time
from types import TracebackType
from collections.abc import Callable, Iterable
from typing import Any, TextIO

import typer
from typer.core import TyperGroup

from gpufabric import __version__
from gpufabric.errors import InputError, check_range


def _click(module: str) -> Any:
    """A module of the click that typer runs on: its own copy (typer 0.2x), else click."""
    try:
        return importlib.import_module(f"typer._click.{module}")
    except ImportError:     # pragma: no cover - older typer runs on click itself
        return importlib.import_module(f"click.{module}")


ParameterSource = _click("core").ParameterSource
ClickException = _click("exceptions").ClickException
MissingParameter = _click("exceptions").MissingParameter

class _Commands(TyperGroup):
    """The root group: its commands listed in :data:`gpufabric.cli.COMMANDS`' order, however
    many of their modules a process has imported and in whatever order; each command's plain
    options read by :class:`_PlainValue`."""

    def list_commands(self, ctx: Any) -> list[str]:
        from gpufabric.cli import COMMANDS
        order = {name: k for k, name in enumerate(COMMANDS)}
        return sorted(self.commands, key=lambda n: order.get(n, len(order)))

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        for param in self.get_params(ctx):
            _PlainValue.install(param)
        return super().parse_args(ctx, args)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        for param in cmd.get_params(ctx) if cmd is not None else ():
            _PlainValue.install(param)
        return cmd


try:        # typer >= 0.25 reads every option's value through a pydantic TypeAdapter
    from typer._coercion import build_runtime_param
except ImportError:     # pragma: no cover - older typer: click's own types, nothing to do
    build_runtime_param = None  # type: ignore[assignment]


class _PlainValue:
    """An option's value read as typer reads it, without pydantic where it is plain.

    typer 0.25+ builds a pydantic TypeAdapter for every option of the command that runs
    (about 3 ms each, and 0.1 s to import pydantic): 0.2 s of a 0.4 s ``gpufabric serve``.
    The values of the commands are mostly plain: a whole number (``--tp 8``), a decimal one
    (``--rate 2.5``), a text, a flag, or the option's default. Those are read here to what
    typer's adapter gives; any other value (``--rate 1e3``, ``--tp abc``) goes to typer's own
    reader, built then, so that its result and its error message are typer's.

    Examples
    --------
    >>> _PlainValue.read(int, "8"), _PlainValue.read(float, "-2.5"), _PlainValue.read(str, "x")
    (8, -2.5, 'x')
    >>> _PlainValue.read(int, "1e3") is _PlainValue.read(float, "inf") is _PlainValue.OTHER
    True
    """

    OTHER = object()
    _INT = re.compile(r"-?[0-9]{1,18}\Z")
    _DECIMAL = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,15})?\Z")

    def __init__(self, param: Any):
        self.param = param
        self.typer: Any = None

    @classmethod
    def install(cls, param: Any) -> None:
        """Read ``param`` (a typer parameter of one value) with this class."""
        desc = getattr(param, "type_descriptor", None)
        if (build_runtime_param is None or desc is None
                or getattr(param, "_runtime_param", 1) is not None
                or param.nargs != 1 or param.multiple or desc.file_annotation is not None):
            return
        info = desc.parameter_info
        if desc.annotation in (int, float, str, bool) and info.parser is None and \
                info.min is None and info.max is None and not info.clamp:
            param._runtime_param = cls(param)

    @classmethod
    def read(cls, kind: type, value: Any) -> Any:
        """``value`` as ``kind``, or :data:`OTHER` when typer's reader should read it."""
        if type(value) is kind:
            return value
        if isinstance(value, str) and kind is not str:
            if kind is int and cls._INT.match(value):
                return int(value)
            if kind is float and cls._DECIMAL.match(value):
                return float(value)
        return cls.OTHER

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None:
            return None
        out = self.read(self.param.type_descriptor.annotation, value)
        if out is self.OTHER:
            if self.typer is None:
                self.typer = build_runtime_param(self.param.type_descriptor)
            return self.typer.coerce(value, param=param, ctx=ctx)
        return out


app = typer.Typer(add_completion=False, no_args_is_help=True, cls=_Commands,
                  help="Model how GPUs are connected and what that connection costs.")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"gpufabric {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version,
                                       is_eager=True, help="Print the version and exit.")
          ) -> None:
    """Model how GPUs are connected and what that connection costs."""


def _use_profile(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> Any:
    """Use the profile's parameter value for the rest of the command (the models read it
    until the command ends); its changes are kept in ``ctx.meta['profile']``
    (``gpufabric params`` shows them)."""
    if value:
        from gpufabric.measure import profile
        ctx.meta["profile"] = (value, ctx.with_resource(profile.apply(value)))
    return value


def _use_nccl(ctx: typer.Context, param: typer.CallbackParam, value: str | None) -> Any:
    """Model NCCL release ``value`` for the rest of the command (its algorithms, its tuner's
    choices: gpufabric.collectives.versions)."""
    if value:
        from gpufabric.collectives import versions
        ctx.with_resource(versions.use(versions.parse(value, "--nccl")))
    return value


def nccl_option() -> Any:
    """The ``--nccl VERSION`` option of the commands whose figures hold collectives: the
    NCCL release to model for the rest of the command."""
    return typer.Option(None, "--nccl", callback=_use_nccl, metavar="VERSION",
                        help="The NCCL release to model (2.7.3 or later, e.g. 2.18.5): its "
                             "algorithms (no NVLS before 2.17.1) and its tuner's choices. "
                             "Default: the release `gpufabric params` names.")


def model_file_option() -> Any:
    """The ``--model-file FILE`` option of `train` and `serve`: the model by a Hugging Face
    config or its shape instead of a name."""
    return typer.Option(None, "--model-file", help="A Hugging Face config.json, or a YAML "
                        "file giving the model by its shape (layers, hidden, heads, kv_heads, "
                        "ffn, vocab, experts, ...).")


def model_and_system(model: str | None, system: str | None,
                     model_file: str | None, ctx: typer.Context | None = None
                     ) -> tuple[str, str]:
    """``MODEL SYSTEM``, or ``--model-file FILE SYSTEM`` (the one argument is then the system);
    the file (a YAML model file or a Hugging Face config.json) is read and checked here, so
    that a bad one is the error; the fields a partial shape left to convention are named in a
    note after the results."""
    from gpufabric.workloads.models import load_model_file
    if model_file is not None:
        if system is not None or model is None:
            raise InputError("give the system as the only argument: --model-file FILE SYSTEM "
                             "(the file gives the model)", field="--model-file")
        spec = load_model_file(model_file)
        if spec.assumed and ctx is not None:
            text = f"{model_file}: assumed {'; '.join(spec.assumed)}"
            ctx.call_on_close(lambda: None if sys.exc_info()[0] else note(text))
        return model_file, model
    if model is None or system is None:
        raise InputError("missing; give MODEL SYSTEM (a model name, see `gpufabric models`, "
                         "or --model-file FILE SYSTEM)", field="SYSTEM" if model else "MODEL")
    return model, system


def profile_option() -> Any:
    """The ``--profile FILE`` option of every prediction command (or ``GPUFABRIC_PROFILE``):
    a calibration profile (``gpufabric calibrate``) whose parameter values the command's
    models use, for that command only. Add it to a command as
    ``profile: str | None = profile_option()``."""
    from gpufabric.measure.profile import ENV
    return typer.Option(None, "--profile", envvar=ENV, callback=_use_profile,
                        show_envvar=True, metavar="FILE",
                        help="A calibration profile (gpufabric calibrate -o FILE): use its "
                             "parameter values.")


def _use_kernel_times(ctx: typer.Context, param: typer.CallbackParam,
                      value: str | None) -> Any:
    """Time GEMMs from the chosen source for the rest of the command."""
    if value and value != "model":
        from gpufabric.kerneldb import timing
        ctx.with_resource(timing.use(value))
    return value


def kernel_times_option() -> Any:
    """The ``--kernel-times SOURCE`` option of the serving predictions: ``model`` (gpufabric's
    roofline, the default) or ``aic`` (dense GEMMs measured by NVIDIA AIConfigurator's
    kernel database where it covers the GPU, engine and shape; ``pip install
    'gpufabric[aic]'``). Add it as ``kernel_times: str = kernel_times_option()``."""
    return typer.Option("model", "--kernel-times", callback=_use_kernel_times,
                        metavar="SOURCE",
                        help="GEMM times: model (gpufabric's roofline) or aic (measured "
                             "kernels of AIConfigurator's database where it covers the GPU, "
                             "engine and shape; needs the \\[aic] extra).")


def flag_name(param: Any) -> str:
    """The long form of an option as the user types it (``--max-num-seqs``), else its name."""
    opts = [o for o in getattr(param, "opts", ()) if o.startswith("--")]
    return max(opts, key=len) if opts else str(getattr(param, "name", param))


def whole(lo: int = 1, hi: int | None = None) -> Callable[..., Any]:
    """A typer ``callback=`` that refuses a whole number outside ``lo``..``hi`` in one line.

    Every count or limit option of the commands uses it, so that ``0`` or ``-1`` is refused
    with the allowed range instead of being taken as "unset" or failing later.

    Examples
    --------
    >>> from types import SimpleNamespace as Param
    >>> check = whole(1)
    >>> check(Param(opts=["--max-num-seqs"]), 8)
    8
    >>> try:
    ...     check(Param(opts=["--max-num-seqs"]), 0)
    ... except InputError as e:
    ...     print(e)
    --max-num-seqs: must be a whole number >= 1, got 0
    >>> try:
    ...     whole(0, 3)(Param(opts=["--zero"]), 4)
    ... except InputError as e:
    ...     print(e)
    --zero: must be a whole number from 0 to 3, got 4
    """
    def check(param: typer.CallbackParam, value: Any) -> Any:
        if value is not None:
            check_range(value, lo, hi, integer=True, field=flag_name(param))
        return value
    return check


def above(lo: float) -> Callable[..., Any]:
    """A typer ``callback=`` that refuses a number not above ``lo`` (``nan`` included).

    >>> from types import SimpleNamespace as Param
    >>> try:
    ...     above(0)(Param(opts=["--power-cap"]), float("nan"))
    ... except InputError as e:
    ...     print(e)
    --power-cap: must be a number above 0, got nan
    """
    def check(param: typer.CallbackParam, value: Any) -> Any:
        if value is not None:
            check_range(value, lo, above=True, field=flag_name(param))
        return value
    return check


def given(ctx: typer.Context, name: str) -> bool:
    """Whether the option called ``name`` (the Python name) was given on the command line."""
    return ctx.get_parameter_source(name) in (ParameterSource.COMMANDLINE,
                                              ParameterSource.ENVIRONMENT)


def _flag(ctx: typer.Context, name: str) -> str:
    for p in ctx.command.params:
        if p.name == name:
            return flag_name(p)
    return name


def refuse_together(ctx: typer.Context, pairs: Iterable[tuple[str, str, str]]) -> None:
    """Refuse options that exclude each other, in one line naming both.

    ``pairs`` holds ``(a, b, why)`` with the Python names of two options; when both were
    given, the message is ``--a: cannot be used with --b (why)``. ``b`` may be a list of
    names joined by ``|``: any of them given with ``a`` is refused.
    """
    for a, bs, why in pairs:
        if not given(ctx, a):
            continue
        for b in bs.split("|"):
            if given(ctx, b):
                raise InputError(f"cannot be used with {_flag(ctx, b)} ({why})",
                                 field=_flag(ctx, a))


def refuse_alone(ctx: typer.Context, needs: Iterable[tuple[str, bool, str]]) -> None:
    """Refuse an option given where it would change nothing: ``(name, applies, why)``,
    the message ``--name: why`` (``why`` says what the option needs)."""
    for a, applies, why in needs:
        if given(ctx, a) and not applies:
            raise InputError(why, field=_flag(ctx, a))


def note(text: str) -> None:
    """``gpufabric: note: ...`` on stderr, printed after the results (so that an error stays one
    line): what a run used in place of what was asked (a stand-in trace, part of a trace, a
    rounded count); nothing when ``text`` is empty."""
    if text:
        print(f"gpufabric: note: {text}", file=sys.stderr)


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


#: Seconds a run may take before it shows progress; ``GPUFABRIC_PROGRESS`` overrides it
#: (a number of seconds, or ``off``).
PROGRESS_AFTER_S = 2.0
#: Off a terminal, the least time between two progress lines (seconds).
PROGRESS_INTERVAL_S = 5.0
#: On a terminal, the least time between two redraws of the bar (seconds).
BAR_INTERVAL_S = 0.1


class Progress:
    """Progress of a run's steps on stderr, shown once the run has taken 2 seconds.

    On a terminal it is a bar that disappears when the run ends; elsewhere (a log, CI, a
    pipe) a line at most every 5 seconds, and one for the last step:
    ``gpufabric: compare: 3/18 dgx-a100 (2.4 s)``. Standard output (tables, ``--json``) is
    never touched. A run of many steps costs one clock reading per step.

    Parameters
    ----------
    label : str
        The run, as the lines name it (``compare``, ``serve --versus``).
    total : int, optional
        Steps planned (unknown: the lines give the count alone).
    after_s : float, optional
        Seconds before anything is shown (default ``PROGRESS_AFTER_S``, or
        ``GPUFABRIC_PROGRESS``).
    interval_s : float, optional
        Off a terminal, the least seconds between two lines (default ``PROGRESS_INTERVAL_S``).
    stream : file, optional
        Where to write (default stderr).
    clock : callable, optional
        Seconds now (default :func:`time.monotonic`; tests give a fake one).

    Examples
    --------
    >>> import io
    >>> err = io.StringIO()
    >>> with Progress("compare", 3, after_s=0, stream=err) as p:
    ...     p.step("dgx-a100")
    ...     p.step("hgx-h100")
    ...     p.step("gb200-nvl72")
    >>> [line.split(" (")[0] for line in err.getvalue().splitlines()]
    ['gpufabric: compare: 1/3 dgx-a100', 'gpufabric: compare: 3/3 gb200-nvl72']

    The first line, then none for 5 seconds, then the last step's.
    """

    def __init__(self, label: str, total: int | None = None, *, after_s: float | None = None,
                 interval_s: float | None = None, stream: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.label, self.total, self.done = label, total, 0
        env = os.environ.get("GPUFABRIC_PROGRESS", "")
        if after_s is None:
            try:
                after_s = float(env) if env and env != "off" else PROGRESS_AFTER_S
            except ValueError:
                after_s = PROGRESS_AFTER_S
        self.after_s = None if env == "off" else after_s
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.interval_s = ((PROGRESS_INTERVAL_S if interval_s is None else interval_s)
                           if not self.tty else BAR_INTERVAL_S)
        self.clock = clock
        self.start = clock()
        self._shown: float | None = None       # when the last line or redraw was
        self._bar: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()

    def told(self, what: str = "") -> Callable[[int, int], None]:
        """A ``progress(n, total)`` callback for the library (:func:`gpufabric.sweep.run`):
        ``n`` more of ``total`` steps done, each named ``what``. The library's steps are
        the whole run's."""
        def tell(n: int, total: int) -> None:
            self.total = total
            self.step(what, n)
        return tell

    def part(self, what: str = "") -> Callable[[int, int], None]:
        """A ``progress(n, total)`` callback for one of the planned steps that the library
        runs in ``total`` steps of its own: they replace that one step in the count, so the
        run's progress goes on where it was instead of starting over.

        >>> import io
        >>> err = io.StringIO()
        >>> with Progress("compare", 3, after_s=0, interval_s=0, stream=err) as p:
        ...     p.step("dgx-a100")
        ...     tell = p.part("inference")
        ...     tell(1, 4); tell(3, 4)
        ...     p.step("report")
        >>> [line.split(" (")[0] for line in err.getvalue().splitlines()]
        ... # doctest: +NORMALIZE_WHITESPACE
        ['gpufabric: compare: 1/3 dgx-a100', 'gpufabric: compare: 2/6 inference',
         'gpufabric: compare: 5/6 inference', 'gpufabric: compare: 6/6 report']
        """
        planned = False

        def tell(n: int, total: int) -> None:
            nonlocal planned
            if not planned and self.total is not None:
                self.total += total - 1
            planned = True
            self.step(what, n)
        return tell

    def step(self, what: str = "", n: int = 1) -> None:
        """Count ``n`` steps done; ``what`` names the last one."""
        self.done += n
        if self.after_s is None:
            return
        now = self.clock()
        elapsed = now - self.start
        last = self.total is not None and self.done >= self.total
        if elapsed < self.after_s or (self._shown is not None and not last
                                      and now - self._shown < self.interval_s):
            return
        self._shown = now
        if not self.tty:
            of = f"/{self.total}" if self.total else ""
            self.stream.write(f"gpufabric: {self.label}: {self.done}{of} {what} "
                              f"({elapsed:.1f} s)\n".replace("  (", " ("))
            self.stream.flush()
            return
        if self._bar is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn
            from rich.progress import Progress as Bar
            from rich.progress import TimeElapsedColumn
            self._bar = Bar(TextColumn(f"{self.label}"), BarColumn(), MofNCompleteColumn(),
                            TextColumn("{task.description}"), TimeElapsedColumn(),
                            console=Console(file=self.stream), transient=True)
            self._bar.start()
            self._task = self._bar.add_task(what, total=self.total, completed=self.done)
        self._bar.update(self._task, total=self.total, completed=self.done, description=what)


#: how `gpufabric validate` names each status block of a summary (held-out first)
_STATUS_LINES = (("held-out", None, "no parameter fitted on it, not looked at"),
                 ("fitted", "fitted", "a parameter record names the entry"),
                 ("looked-at", "looked_at", "marked as seen while the model changed"))


def _figures(b: dict) -> str:
    def f(x: Any) -> str:
        return "n/a" if x is None else f"{x:.1f}%"
    return (f"{b['points']:>4} points, median {f(b['median_abs_pct'])}, p90 "
            f"{f(b['p90_abs_pct'])}, max {f(b['max_abs_pct'])}")


_SIZES = (("large", "large (>= 64 MiB, busbw)"), ("small", "small (< 64 KiB, time)"))
#: what a collective entry's source says of its software stack (collectives.validate.split)
_STACKS = (("release", "stack: NCCL release stated"), ("unstated", "stack: not published"),
           ("unrecorded", "stack: not recorded"))


def print_validation_summary(s: dict, label: str) -> None:
    """The summary lines of `gpufabric validate` (a :func:`gpufabric.validation.summarize`
    result): the held-out figures and each metric's (and message size's, for collectives),
    then fitted and looked-at apart."""
    typer.echo(f"# summary of {label}")
    for name, key, what in _STATUS_LINES:
        block = s if key is None else s[key]
        if key is not None and not block["points"]:
            typer.echo(f"# {name} ({what}): none")
            continue
        typer.echo(f"# {name} ({what}): {_figures(block).strip()}")
        for metric, m in s["by_metric"].items():
            mb = m if key is None else m[key]
            if mb["points"]:
                typer.echo(f"#   {metric:<30} {_figures(mb)}")
        for size, text in _SIZES if "by_size" in block else ():
            if block["by_size"][size]["points"]:
                typer.echo(f"#   {text:<30} {_figures(block['by_size'][size])}")
        for kind, text in _STACKS if "by_stack" in block else ():
            if block["by_stack"][kind]["points"]:
                typer.echo(f"#   {text:<30} {_figures(block['by_stack'][kind])}")


def print_cross_validation(res: dict) -> None:
    """`gpufabric validate --cv source`: the cross-validated figures (per model kind and
    metric), the same points by the status of their entries, what was not cross-validated,
    and each source's median with the values its constants were refitted to without it."""
    srcs = res["sources"]
    typer.echo(f"# gpufabric validate --cv source: {len(res['files'])} file(s), "
               f"{len(srcs)} sources (leave-one-source-out: each source's entries predicted "
               "with every fitted constant refitted without them)")
    typer.echo(f"# cross-validated: {_figures(res['summary']).strip()}")
    for kind, b in res["by_kind"].items():
        typer.echo(f"#   {kind:<30} {_figures(b)}")
        for size, text in _SIZES if "by_size" in b else ():
            if b["by_size"][size]["points"]:
                typer.echo(f"#     {text:<28} {_figures(b['by_size'][size])}")
        for kind, text in _STACKS if "by_stack" in b else ():
            if b["by_stack"][kind]["points"]:
                typer.echo(f"#     {text:<28} {_figures(b['by_stack'][kind])}")
        for metric, m in b["by_metric"].items():
            typer.echo(f"#     {metric:<28} {_figures(m)}")
    for st, b in res["by_status"].items():
        if b["points"]:
            typer.echo(f"# of them, points of {st} entries: {_figures(b).strip()}")
    if res["sole_source"]:
        typer.echo(f"# not cross-validated: {res['sole_source']} points move with a constant "
                   "fitted on their own source alone (nothing else to refit it on)")
    typer.echo(f"# {'source':<44} {'entries':>7} {'points':>6} {'median':>7}  "
               "refitted without it")
    for s in srcs:
        med = "n/a" if s["median_abs_pct"] is None else f"{s['median_abs_pct']:.1f}%"
        refit = ", ".join(f"{k}={'none' if v is None else f'{v:g}'}"
                          for k, v in s["refitted"].items())
        typer.echo(f"  {s['source_id'][:44]:<44} {s['entries']:>7} {s['points']:>6} "
                   f"{med:>7}  {refit}")


# -- tables -------------------------------------------------------------------------------

#: The width a table fits when neither ``COLUMNS`` nor a terminal gives one (a 120-column
#: terminal is the norm).
TABLE_WIDTH = 120


def table_width() -> int:
    """The width every table of the CLI fits: ``COLUMNS``, else the terminal's, else
    :data:`TABLE_WIDTH` (output to a pipe or a file)."""
    import shutil
    return max(40, shutil.get_terminal_size((TABLE_WIDTH, 24)).columns)


def wide_option() -> Any:
    """The ``--wide`` option of every command that prints a table: every column, at full
    width, however wide. Add it as ``wide: bool = wide_option()`` and pass it on to
    :func:`print_table`."""
    return typer.Option(False, "--wide",
                        help=f"Show every column at full width (by default a table fits the "
                             f"terminal, or {TABLE_WIDTH} columns off a terminal).")


@dataclasses.dataclass(frozen=True)
class Col:
    """One column of :func:`print_table`.

    ``drop``: 0 for a column always shown; a column with a higher number is left out first
    when the table is too wide (the note under the table names it). ``wrap``: its text may be
    folded onto following lines (a description, a source, a URL). ``key``: repeated in every
    block when a table with too many columns is printed in blocks (a matrix's row labels).
    """

    header: str
    right: bool = False
    drop: int = 0
    wrap: bool = False
    key: bool = False
    min_width: int = 12


def _fold(text: str, width: int) -> list[str]:
    import textwrap
    return textwrap.wrap(text, width, break_long_words=True, break_on_hyphens=False) or [""]


def _blocks(cols: list[Col], keep: list[int], too_wide: Callable[[list[int]], bool]
            ) -> list[list[int]]:
    """Columns ``keep`` cut into blocks that are not ``too_wide``, the key columns in each."""
    keys = [i for i in keep if cols[i].key]
    blocks, block = [], list(keys)
    for i in keep:
        if i in keys:
            continue
        if len(block) > len(keys) and too_wide(block + [i]):
            blocks.append(block)
            block = list(keys)
        block.append(i)
    blocks.append(block)
    return blocks


def table_lines(cols: list[Col], rows: Iterable[Iterable[Any]], *, wide: bool = False,
                width: int | None = None, prefix: str = "  ",
                header_prefix: str = "# ", gap: int = 1) -> list[str]:
    """The lines of a table that fits ``width`` columns (default :func:`table_width`).

    The one place the CLI fits a table to the terminal. When the natural table is too wide,
    the columns with the highest ``drop`` go first (a note line names them and ``--wide``),
    then the ``wrap`` columns fold their text, and a table still too wide (a matrix of many
    devices) is printed in blocks of columns, the ``key`` columns in each. ``wide``: the
    natural table, whatever its width. ``gap``: spaces between two columns.
    """
    width = table_width() if width is None else width
    data = [["" if c is None else str(c) for c in r] for r in rows]
    for r in data:
        if len(r) != len(cols):
            raise ValueError(f"a row of {len(r)} cells for {len(cols)} columns")
    natural = [max([len(c.header)] + [len(r[i]) for r in data]) for i, c in enumerate(cols)]
    pad = max(len(prefix), len(header_prefix))

    def need(idx: list[int], ws: list[int]) -> int:
        return pad + sum(ws[i] for i in idx) + gap * (len(idx) - 1)

    keep = list(range(len(cols)))
    widths = list(natural)
    dropped: list[str] = []
    if not wide:
        for i in sorted((i for i, c in enumerate(cols) if c.drop),
                        key=lambda i: (-cols[i].drop, -i)):
            if need(keep, widths) <= width:
                break
            keep.remove(i)
            dropped.append(cols[i].header)
        over = need(keep, widths) - width
        wraps = [i for i in keep if cols[i].wrap]
        while over > 0 and wraps:
            i = max(wraps, key=lambda j: widths[j])
            floor = max(cols[i].min_width, len(cols[i].header))
            if widths[i] <= floor:
                wraps.remove(i)
                continue
            cut = min(over, widths[i] - floor)
            widths[i] -= cut
            over -= cut
    blocks = [keep] if wide or need(keep, widths) <= width else _blocks(
        cols, keep, lambda idx: need(idx, widths) > width)
    out: list[str] = []
    for b, idx in enumerate(blocks):
        if b:
            out.append("")
        out += _block_lines(cols, data, idx, widths, prefix, header_prefix, gap)
    if dropped:
        out.append(f"{header_prefix}(left out to fit {width} columns: "
                   f"{', '.join(reversed(dropped))}; --wide shows them)")
    return out


def _block_lines(cols: list[Col], data: list[list[str]], idx: list[int], widths: list[int],
                 prefix: str, header_prefix: str, gap: int) -> list[str]:
    last = idx[-1]

    def cell(i: int, text: str) -> str:
        if cols[i].right:
            return text.rjust(widths[i])
        return text if i == last else text.ljust(widths[i])

    def line(start: str, texts: dict[int, list[str]]) -> list[str]:
        n = max(len(t) for t in texts.values())
        lines = []
        for k in range(n):
            parts = [cell(i, texts[i][k] if k < len(texts[i]) else "") for i in idx]
            lines.append((start if k == 0 else " " * len(start)) + (" " * gap).join(parts).rstrip())
        return lines

    def split(i: int, text: str) -> list[str]:
        return _fold(text, widths[i]) if len(text) > widths[i] else [text]

    width0 = max(len(prefix), len(header_prefix))
    out = line(header_prefix.ljust(width0), {i: split(i, cols[i].header) for i in idx})
    for r in data:
        out += line(prefix.ljust(width0), {i: split(i, r[i]) for i in idx})
    return out


def print_table(cols: list[Col], rows: Iterable[Iterable[Any]], *, title: str | None = None,
                wide: bool = False, prefix: str = "  ", header_prefix: str = "# ") -> None:
    """Print ``title`` (a ``#`` line) and the table of :func:`table_lines`."""
    if title:
        typer.echo(f"{header_prefix}{title}")
    for ln in table_lines(cols, rows, wide=wide, prefix=prefix, header_prefix=header_prefix):
        typer.echo(ln)


def print_wrapped(text: str, indent: int = 0, *, wide: bool = False) -> None:
    """One line of text folded to :func:`table_width` (continuation lines under ``indent``);
    whole with ``wide``."""
    width = table_width()
    if wide or len(text) <= width:
        typer.echo(text)
        return
    head, rest = text[:indent], text[indent:]
    for k, part in enumerate(_fold(rest, width - indent)):
        typer.echo((head if k == 0 else " " * indent) + part)
