"""Golden outputs of the main commands, to show a refactor changes none of them.

    .venv/bin/python tests/golden.py          # rewrite tests/data/golden/*.json
    .venv/bin/python tests/golden.py advise   # or only the cases named

Run it when a change of the model is meant to change the figures (and say so in the commit);
``tests/test_golden.py`` compares the commands' ``--json`` output with these files. Each case
is a command line; the figures are compared to a relative 1e-9, text exactly; the time each
run took (``elapsed_s``) is left out.
"""

from __future__ import annotations

import io
import json
import math
import sys
from contextlib import redirect_stdout
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "data" / "golden"
#: name -> command line (run from the repository root, ``--json`` appended)
CASES: dict[str, list[str]] = {
    "train": ["train", "llama3-70b", "gpu=H100-SXM,nodes=4,nic=ib-ndr", "--tp", "8", "--pp", "2",
              "--dp", "2", "--global-batch", "64"],
    "train_moe": ["train", "mixtral-8x7b", "gpu=H100-SXM,nodes=2,nic=ib-ndr", "--tp", "2",
                  "--ep", "8", "--dp", "8", "--global-batch", "64"],
    "serve": ["serve", "llama3-8b", "hgx-h100", "--requests", "300", "--rate", "20"],
    "serve_pd": ["serve", "llama3-8b", "hgx-h100", "--pd", "1P1D", "--requests", "200",
                 "--rate", "8"],
    "collective": ["collective", "hgx-h100-4node-ndr", "--op", "all_reduce"],
    "validate": ["validate", "tests/data/calibration/collectives.yaml"],
    "advise": ["advise", "small-chat", "--jobs", "1"],
}
SKIP_KEYS = {"elapsed_s"}


def run(args: list[str]) -> object:
    """The command's ``--json`` output."""
    from gpufabric.cli import main
    out = io.StringIO()
    with redirect_stdout(out):
        try:
            main([*args, "--json"])
        except SystemExit as e:
            if e.code:
                raise
    return json.loads(out.getvalue())


def same(a: object, b: object, where: str = "") -> list[str]:
    """Where ``a`` and ``b`` differ (numbers to a relative 1e-9)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{where}: keys {sorted(set(a) ^ set(b))}"] if set(a) != set(b) else []
        for k in sorted(set(a) & set(b) - SKIP_KEYS):
            out += same(a[k], b[k], f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where}: length {len(a)} != {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b, strict=True))
                for d in same(x, y, f"{where}[{i}]")]
    if isinstance(a, float | int) and isinstance(b, float | int) and not isinstance(a, bool):
        ok = math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
        return [] if ok else [f"{where}: {a} != {b}"]
    return [] if a == b else [f"{where}: {a!r} != {b!r}"]


def main(names: list[str] | None = None) -> int:
    """Rewrite every case's file, or only those of ``names`` (the command line's arguments)."""
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, args in CASES.items():
        if names and name not in names:
            continue
        (GOLDEN / f"{name}.json").write_text(json.dumps(run(args), indent=1, sort_keys=True))
        print(f"wrote tests/data/golden/{name}.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
