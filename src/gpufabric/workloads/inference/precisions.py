"""Number formats of served weights and KV caches: one table, ``workloads/data/precisions.yaml``.

A format gives the bytes of one stored value with its scales (a group of ``g`` values sharing
an FP16 scale and a 4-bit zero point adds ``(16 + 4) / 8 / g`` bytes), the tensor-core rates
its GEMMs run at, best first (a weight-only format dequantises in the kernel and computes at
the activation precision), and the names engines and papers use for it. Every entry carries
its source.

Examples
--------
>>> lookup("W4A16_AWQ", "weights").name, lookup("fp8_e4m3", "kv").name
('int4-awq', 'fp8')
>>> round(weight_bytes("int4-gptq-g128"), 6), weight_bytes("fp4"), weight_bytes("fp8")
(0.519531, 0.5625, 1.0)
>>> round(kv_bytes("int8", head_dim=128), 4)         # LMDeploy quant_policy 8
1.0312
>>> try:
...     lookup("int3", "weights")
... except InputError as e:
...     print(str(e)[:70])
--precision: unknown data type 'int3' for weights; allowed: fp16, bf16
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field


from gpufabric.errors import InputError
from gpufabric.fileio import load_data

#: where the table lives, for error messages
TABLE = "workloads/data/precisions.yaml"
USES = ("weights", "kv")
#: the command-line option each use is given by
OPTION = {"weights": "--precision", "kv": "--kv-dtype"}


@dataclass(frozen=True)
class Compute:
    """One tensor-core rate a format's GEMMs can run at: a catalog precision, its multiple."""

    prec: str
    rate: float = 1.0
    act_bytes: float = 2.0


@dataclass(frozen=True)
class Format:
    name: str
    use: tuple[str, ...]
    bits: int
    scale_bits: float = 0.0
    zero_bits: float = 0.0
    group: int | str = "tensor"
    super_bits: float = 0.0
    super_group: int = 0
    bpw: float | None = None
    compute: tuple[Compute, ...] = ()
    aliases: tuple[str, ...] = ()
    fit_hint: bool = False
    source: str = ""
    extra: dict = field(default_factory=dict, compare=False)

    def bytes_per_value(self, *, k: int | None = None, head_dim: int | None = None) -> float:
        """Bytes of one stored value with its share of the scales and zero points; ``k`` is
        the GEMM depth of ``channel`` scales, ``head_dim`` the length of ``head`` scales
        (without them, those scales are left out). A mix of block types (llama.cpp's
        Q4_K_M) is its published bits per weight."""
        if self.bpw:
            return self.bpw / 8
        base = self.bits / 8 + (self.super_bits / 8 / self.super_group if self.super_group
                                else 0.0)
        per = self.scale_bits + self.zero_bits
        if not per or self.group == "tensor":
            return base
        g: int | None = ({"channel": k, "head": head_dim}.get(self.group)
                         if isinstance(self.group, str) else self.group)
        return base + per / 8 / g if g else base


def norm(name: str) -> str:
    """A format name as the table matches it: lower case, ``_`` and spaces as ``-``.

    >>> norm(" W4A16_AWQ "), norm("fp8 E4M3")
    ('w4a16-awq', 'fp8-e4m3')
    """
    return re.sub(r"[\s_]+", "-", str(name).strip().lower())


def _fail(msg: str, fld: str) -> InputError:
    return InputError(msg, file=TABLE, field=fld)


@functools.cache
def _table() -> tuple[dict[str, Format], dict[str, float], str]:
    data = load_data("gpufabric.workloads", "data", "precisions.yaml")
    act = {str(k): float(v) for k, v in data["act_bytes"].items()}
    out: dict[str, Format] = {}
    for i, f in enumerate(data["formats"]):
        where = f"formats[{i}]"
        use = tuple(f["use"])
        if not set(use) <= set(USES):
            raise _fail(f"use {use} not in {USES}", where + ".use")
        sc = f.get("scale") or {}
        comp = tuple(Compute(str(c["as"]), float(c.get("rate", 1.0)),
                             float(c.get("act_bytes", act.get(str(c["as"]), 2.0))))
                     for c in f.get("compute") or ())
        if "weights" in use and not comp:
            raise _fail("a weight format needs compute rates", where + ".compute")
        if not f.get("source"):
            raise _fail("every format needs a source", where + ".source")
        sup = sc.get("super") or {}
        bpw = f.get("bpw")
        if bpw is not None and not (isinstance(bpw, (int, float)) and 0 < bpw <= 32):
            raise _fail(f"got {bpw!r}; expected bits per weight in (0, 32]", where + ".bpw")
        fmt = Format(str(f["name"]), use, int(f["bits"]), float(sc.get("bits", 0)),
                     float(sc.get("zero_bits", 0)), sc.get("group", "tensor"),
                     float(sup.get("bits", 0)), int(sup.get("group", 0)),
                     float(bpw) if bpw is not None else None, comp,
                     tuple(norm(a) for a in f.get("aliases") or ()), bool(f.get("fit_hint")),
                     " ".join(str(f["source"]).split()))
        out[fmt.name] = fmt
    return out, act, " ".join(str(data.get("act_bytes_source", "")).split())


def formats() -> dict[str, Format]:
    """Every format by canonical name, in the table's order."""
    return _table()[0]


def names(use: str) -> list[str]:
    """Canonical names of the formats usable for ``use`` (``weights`` or ``kv``)."""
    return [n for n, f in formats().items() if use in f.use]


def default_kv(weights: str) -> str:
    """The KV-cache format a run takes when it names none: FP8 beside FP8 or FP4 weights (the
    engines' quantised checkpoints carry an FP8 KV cache), else BF16.

    >>> default_kv("fp4"), default_kv("int4-awq")
    ('fp8', 'bf16')
    """
    return "fp8" if weights in ("fp8", "fp4") else "bf16"


def lookup(name: str, use: str, fld: str | None = None) -> Format:
    """The format ``name`` (canonical or an alias) for ``use``; an :class:`InputError` naming
    ``fld`` (default: the option of that use) and the allowed names otherwise."""
    n = norm(name)
    fm = formats()
    for f in fm.values():              # canonical names first, then aliases
        if use in f.use and n == norm(f.name):
            return f
    for f in fm.values():
        if use in f.use and n in f.aliases:
            return f
    what = "weights" if use == "weights" else "the KV cache"
    raise InputError(f"unknown data type {name!r} for {what}; allowed: "
                     f"{', '.join(names(use))} (or an alias: gpufabric docs/inference.md, "
                     "Precisions)",
                     field=fld or OPTION[use])


def weight_bytes(name: str, k: int | None = None) -> float:
    """Bytes per stored weight of format ``name`` (scales included; ``k``: GEMM depth)."""
    return lookup(name, "weights").bytes_per_value(k=k)


def kv_bytes(name: str, head_dim: int | None = None) -> float:
    """Bytes per KV-cache element of format ``name`` (scales included)."""
    return lookup(name, "kv").bytes_per_value(head_dim=head_dim)


def act_bytes_source() -> str:
    return _table()[2]
