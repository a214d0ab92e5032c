"""CLI: kernels (gpufabric's compute model against AIConfigurator's measured kernel database)."""

from __future__ import annotations

import typer

from gpufabric.cli.common import Col, Progress, app, emit_json, print_table, wide_option

kernels_app = typer.Typer(no_args_is_help=True, help="gpufabric's kernel times against measured "
                          "kernels (NVIDIA AIConfigurator's database: pip install "
                          "'gpufabric\\[aic]').")
app.add_typer(kernels_app, name="kernels")

_DB = typer.Option(None, "--db", help="The database's systems/data folder (default: "
                   "$GPUFABRIC_KERNEL_DB, else the installed aiconfigurator_core package's).")
_GPU = typer.Option(None, "--gpu", help="Only this catalog GPU (H100-SXM, B200, ...).")
_FAMILY = typer.Option(None, "--family", help="Only this kernel family: gemm, "
                       "attention-prefill, attention-decode, moe, allreduce.")
_BACKEND = typer.Option(None, "--backend", help="Only this backend (vllm, sglang, trtllm; "
                        "nccl for NCCL's all-reduce).")
_ROWS = typer.Option(3000, "--max-rows", help="Rows per table, evenly spaced (0: all).")


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:+.1f}%" if v < 0 else f"{v * 100:.1f}%"


def _check_gpu(gpu: str | None) -> str | None:
    if gpu is None:
        return None
    from gpufabric import catalog
    return catalog.gpu(gpu, field="--gpu").name


@kernels_app.command("coverage")
def coverage(db: str | None = _DB, json: bool = typer.Option(False, "--json"),
             wide: bool = wide_option()) -> None:
    """What the database measured: systems, kernel families, backends and their versions."""
    from gpufabric.kerneldb import db as D
    rows = D.coverage(db)
    if json:
        emit_json(rows)
        return
    print_table([Col("system"), Col("gpu"), Col("family"), Col("backend versions", wrap=True)],
                [(r["system"], r["gpu"] or "(not in the catalog)", fam,
                  "; ".join(f"{b} {', '.join(v)}" for b, v in bes.items()))
                 for r in rows for fam, bes in r["families"].items()], wide=wide)


@kernels_app.command("compare")
def compare(gpu: str | None = _GPU, family: str | None = _FAMILY,
            backend: str | None = _BACKEND, db: str | None = _DB, max_rows: int = _ROWS,
            json: bool = typer.Option(False, "--json"), wide: bool = wide_option()) -> None:
    """Median error of gpufabric's kernel times against the measured kernels, per GPU, kernel
    family and backend (each backend's newest version): all rows, and the large kernels
    (0.1 ms or longer) whose time the efficiencies set."""
    from gpufabric.kerneldb import compare as K
    with Progress("kernels compare") as p:
        res = K.compare(db, gpu=_check_gpu(gpu), family=family, backend=backend,
                        max_rows=max_rows or None, progress=p.told())
    if json:
        emit_json(res)
        return
    print_table([Col("gpu"), Col("family"), Col("backend"), Col("version", drop=1),
                 Col("rows", right=True), Col("median err", right=True),
                 Col("bias", right=True), Col("large rows", right=True),
                 Col("large median", right=True), Col("large bias", right=True)],
                [(r["gpu"], r["family"], r["backend"], r["version"], r["rows"],
                  _pct(r["median_err"]), _pct(r["bias"]), r["large_rows"],
                  _pct(r["large_median_err"]), _pct(r["large_bias"])) for r in res],
                title="gpufabric's kernel time against AIConfigurator's measured kernels "
                      "(error = predicted / measured - 1; bias: its median)", wide=wide)


@kernels_app.command("fit")
def fit(gpu: str | None = _GPU, family: str | None = _FAMILY,
        backend: str | None = _BACKEND, db: str | None = _DB, max_rows: int = _ROWS,
        json: bool = typer.Option(False, "--json"), wide: bool = wide_option()) -> None:
    """Fit each family's physical efficiency per GPU, backend and precision on half the
    shapes of its large kernels; report the median error on the other half, shipped value
    against fitted. Reports only: the shipped constants are not changed."""
    from gpufabric.kerneldb import compare as K
    with Progress("kernels fit") as p:
        res = K.fit(db, gpu=_check_gpu(gpu), family=family, backend=backend,
                    max_rows=max_rows or None, progress=p.told())
    if json:
        emit_json(res)
        return
    print_table([Col("gpu"), Col("family"), Col("backend"), Col("precision"),
                 Col("held-out err, shipped", right=True),
                 Col("held-out err, fitted", right=True), Col("shipped", right=True),
                 Col("fitted", right=True), Col("fit/held rows", right=True, drop=1),
                 Col("parameter", wrap=True, drop=2)],
                [(r["gpu"], r["family"], r["backend"], r["precision"],
                  _pct(r["held_out_err_shipped"]), _pct(r["held_out_err_fitted"]),
                  f"{r['shipped']:.3f}", f"{r['fitted']:.3f}",
                  f"{r['fit_rows']}/{r['held_out_rows']}", r["parameter"]) for r in res],
                title="held out by shape: fitted on every other shape, errors on the rest",
                wide=wide)
