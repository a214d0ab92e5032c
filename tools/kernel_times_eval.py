"""End-to-end error of the serving model with measured GEMM times against without them.

Runs ``validate`` on serving measurements files twice, with gpufabric's roofline and with
``--kernel-times aic`` (NVIDIA AIConfigurator's measured GEMMs where they cover the GPU, the
engine's backend and the shape; needs ``pip install 'gpufabric[aic]'``), and prints the median
absolute error of both on the points the database covers (a GPU whose GEMMs it measured through
the engine's own runtime: TensorRT-LLM's TensorRT backend is not its PyTorch flow), by entry
status and by GPU and engine. With ``--cv``,
the leave-one-source-out cross-validation's points instead: every fitted serving constant
refitted without each source, with that source's GEMM times. ``--points`` lists every covered
point with its two errors; ``--all-kernels`` reads every measured kernel, those under
:data:`~gpufabric.kerneldb.timing.MIN_KERNEL_S` too (their launch and drain then counted per
kernel as well as in the engines' per-iteration overheads, which ``--cv`` refits under them).

    python tools/kernel_times_eval.py tests/data/calibration/inference.yaml [--cv] [--points]
"""

from __future__ import annotations

import argparse
from statistics import median

from gpufabric.kerneldb import timing
from gpufabric.workloads.inference.validate import validate


def _points(files: list[str], source: str | None, cv: bool) -> dict[tuple, dict]:
    with timing.use(source):
        if cv:
            from gpufabric.crossval import cross_validate
            pts = [p for p in cross_validate(files)["points"] if p["cv"] == "cross-validated"]
        else:
            pts = [p for f in files for p in validate(f)["points"]]
        return {(p["id"], p["point"], p["metric"]): p for p in pts
                if p.get("error_pct") is not None}


def _line(label: str, rows: list[tuple[dict, dict]]) -> str:
    a = median(abs(p["error_pct"]) for p, _ in rows)
    b = median(abs(q["error_pct"]) for _, q in rows)
    return f"{label:<44} {len(rows):>6} {a:>9.1f}% {b:>9.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="serving measurements files")
    ap.add_argument("--cv", action="store_true", help="the leave-one-source-out points")
    ap.add_argument("--points", action="store_true", help="every covered point's two errors")
    ap.add_argument("--all-kernels", action="store_true",
                    help="read measured kernels under MIN_KERNEL_S too")
    args = ap.parse_args()
    if args.all_kernels:
        timing.MIN_KERNEL_S = 0.0
    model, aic = _points(args.files, None, args.cv), _points(args.files, "aic", args.cv)
    src = timing.Source()
    rows = [(p, aic[k]) for k, p in model.items() if k in aic
            and src.table(str(p.get("gpu", "")), str(p.get("engine", "")))]
    print(f"{'points the database covers':<44} {'points':>6} {'roofline':>10} {'measured':>10}")
    for st in ("held-out", "fitted", "looked-at"):
        sel = [r for r in rows if r[0]["status"] == st]
        if sel:
            print(_line(st, sel))
    print(_line("all", rows))
    by: dict[tuple, list] = {}
    for r in rows:
        by.setdefault((r[0]["gpu"], r[0]["engine"]), []).append(r)
    for (gpu, eng), sel in sorted(by.items()):
        print(_line(f"  {gpu} {eng}", sel))
    if args.points:
        print(f"\n{'entry':<52} {'point':>5} {'metric':<28} {'status':<9} "
              f"{'roofline':>9} {'measured':>9}")
        for p, q in sorted(rows, key=lambda r: abs(r[0]["error_pct"])):
            print(f"{p['id']:<52} {p['point']:>5} {p['metric']:<28} {p['status']:<9} "
                  f"{p['error_pct']:>+8.1f}% {q['error_pct']:>+8.1f}%")


if __name__ == "__main__":
    main()
