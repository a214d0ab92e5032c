"""Node failures for replay: drawn at random from a mean time between failures, or listed.

``--failures`` takes

- ``mtbf=DURATION[,repair=DURATION][,seed=N]``: every node fails as a Poisson process with that
  mean time between failures, and comes back ``repair`` later (default 2h; ``repair=never`` for
  permanent failures);
- a list ``NODE@TIME[+REPAIR],...`` where NODE is a node name or index, e.g.
  ``openb-node-0001@3600,5@2d+6h`` (no ``+REPAIR``: the node never comes back);
- a path to a text file with one such item per line (``#`` starts a comment).

Durations are seconds or a number with ``s``, ``m``, ``h`` or ``d``.

Examples
--------
>>> parse_duration("1.5h"), parse_duration("90")
(5400.0, 90.0)
>>> spec = parse_failures("0@1h+30m,2@2h", ["a", "b", "c"])
>>> [(f.node, f.time_s, f.repair_s) for f in spec.events(0.0, 1e9, 3, None)]
[(0, 3600.0, 1800.0), (2, 7200.0, inf)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from gpufabric.errors import InputError
from gpufabric.fileio import path_kind, read_text

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
#: Most node failures one replay draws (the openb replay at mtbf=1000h draws about 4,300).
MAX_FAILURES = 1_000_000


def parse_duration(text: str, field: str = "--failures", file: str | None = None) -> float:
    t = text.strip().lower()
    if t in ("never", "inf", "forever"):
        return math.inf
    mult = 1.0
    if t and t[-1] in _UNITS:
        mult, t = _UNITS[t[-1]], t[:-1]
    try:
        v = float(t) * mult
    except ValueError:
        raise InputError(f"'{text}' is not a duration (seconds, or a number with s/m/h/d)",
                         file=file, field=field) from None
    if v < 0 or math.isnan(v):
        raise InputError(f"'{text}' must not be negative", file=file, field=field)
    return v


@dataclass(frozen=True)
class Failure:
    """Node ``node`` fails at ``time_s`` and is back ``repair_s`` later (inf: never)."""

    node: int
    time_s: float
    repair_s: float


@dataclass
class FailureSpec:
    """Either a mean time between failures (per node) or an explicit list."""

    mtbf_s: float | None = None
    repair_s: float = 7200.0
    seed: int | None = None
    listed: list[Failure] = field(default_factory=list)
    text: str = ""

    def events(self, t0: float, t1: float, nodes: int, seed: int | None) -> list[Failure]:
        """The failures between ``t0`` and ``t1``, in time order."""
        if self.mtbf_s is None:
            return sorted(self.listed, key=lambda f: (f.time_s, f.node))
        rng = np.random.default_rng(self.seed if self.seed is not None else seed)
        out = []
        span = max(t1 - t0, 0.0)
        expected = nodes * span / (self.mtbf_s + (0.0 if math.isinf(self.repair_s)
                                                  else self.repair_s))
        if expected > MAX_FAILURES:
            raise InputError(f"mtbf={self.mtbf_s:g}s on {nodes:,} nodes over {span:,.0f} s "
                             f"means about {expected:,.0f} failures; at most "
                             f"{MAX_FAILURES:,} (a longer mtbf, or fewer nodes)",
                             field="--failures")
        for n in range(nodes):
            t = t0
            while True:
                t += rng.exponential(self.mtbf_s)
                if t > t0 + span:
                    break
                out.append(Failure(n, float(t), self.repair_s))
                if math.isinf(self.repair_s):
                    break
                t += self.repair_s
        return sorted(out, key=lambda f: (f.time_s, f.node))


def parse_failures(text: str, node_names: list[str]) -> FailureSpec:
    """Parse ``--failures`` (see the module doc); InputError names what is wrong."""
    text = text.strip()
    file = None
    if "@" not in text and "=" not in text and path_kind(text) == "file":
        file = text
        text_of_file = read_text(text, what="a failures file (--failures)")
        lines = [ln.split("#")[0].strip() for ln in text_of_file.splitlines()]
        items = [x for ln in lines for x in ln.split(",") if x.strip()]
    elif text.startswith("mtbf="):
        spec = FailureSpec(text=text)
        for part in text.split(","):
            k, _, v = part.partition("=")
            k = k.strip()
            if k == "mtbf":
                spec.mtbf_s = parse_duration(v, "--failures mtbf")
                if spec.mtbf_s <= 0 or math.isinf(spec.mtbf_s):
                    raise InputError("mtbf must be a positive duration", field="--failures")
            elif k == "repair":
                spec.repair_s = parse_duration(v, "--failures repair")
            elif k == "seed":
                try:
                    spec.seed = int(v)
                except ValueError:
                    raise InputError(f"seed '{v}' is not an integer",
                                     field="--failures") from None
            else:
                raise InputError(f"unknown key '{k}' (allowed: mtbf, repair, seed)",
                                 field="--failures")
        return spec
    else:
        items = [x for x in text.split(",") if x.strip()]
    index = {n: i for i, n in enumerate(node_names)}
    out = []
    for item in items:
        node, at, when = item.strip().partition("@")
        if not at:
            raise InputError(f"'{item}': write NODE@TIME[+REPAIR], or mtbf=DURATION",
                             file=file, field="--failures")
        node = node.strip()
        if node in index:
            n = index[node]
        elif node.isdigit() and int(node) < len(node_names):
            n = int(node)
        else:
            raise InputError(f"'{item}': no node '{node}' (names like {node_names[0]!r} or "
                             f"an index 0..{len(node_names) - 1})", file=file,
                             field="--failures")
        t, plus, rep = when.partition("+")
        at_s = parse_duration(t, "--failures", file)
        if math.isinf(at_s):
            raise InputError(f"'{item}': the failure time must be finite", file=file,
                             field="--failures")
        out.append(Failure(n, at_s,
                           parse_duration(rep, "--failures", file) if plus else math.inf))
    return FailureSpec(listed=out, text=text)
