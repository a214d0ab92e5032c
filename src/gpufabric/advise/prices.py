"""Prices and power of designs, from the catalog's sourced price table and a user's price file.

``catalog/data/prices.yaml`` holds every published price found (with its page and dates); a
user file of the same shape (``--prices FILE``) adds entries or replaces those of the same key
(a GPU, a server design, a cloud instance, a network speed). A design whose GPUs have no price
is not priced (the advisor says so); a network with no price adds nothing to capex and the
design says that its capex counts no network.

Examples
--------
>>> p = load()
>>> p.gpu_usd("H100-SXM"), p.gpu_usd("B200") is None
(27500.0, True)
>>> p.server("H100-SXM", 8, "nvswitch")["usd"]
199000
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from gpufabric import catalog
from gpufabric.errors import InputError
from gpufabric.fileio import load_yaml, parse_yaml

SECTIONS = ("gpus", "servers", "power", "cloud", "network")
KEYS = {"gpus": ("gpu",), "servers": ("gpu", "gpus_per_node", "scale_up"),
        "power": ("gpu",), "cloud": ("instance",), "network": ("nic",)}
NUMBERS = {"gpus": ("usd",), "servers": ("usd", "watts"), "power": ("watts",),
           "cloud": ("usd_per_hour",),
           "network": ("nic_usd", "switch_port_usd", "cable_usd", "switch_port_watts")}
#: Numbers that must be above 0 (a free GPU or server, or one that draws no power, would
#: divide by zero in the cost comparisons); the network's parts may cost nothing.
POSITIVE = {"usd", "usd_per_hour", "watts"}
REQUIRED = {"gpus": ("usd",), "servers": (), "power": ("watts",), "cloud": ("usd_per_hour",
                                                                           "system"),
            "network": ()}


@dataclass
class Prices:
    """The merged price table: ``entries[section][key] -> dict`` (with ``source``)."""

    entries: dict[str, dict[tuple, dict[str, Any]]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def gpu_usd(self, gpu: str) -> float | None:
        e = self.entries["gpus"].get((gpu,))
        return float(e["usd"]) if e else None

    def server(self, gpu: str, gpn: int, scale_up: str) -> dict[str, Any] | None:
        return self.entries["servers"].get((gpu, gpn, scale_up))

    def gpu_watts(self, gpu: str) -> float | None:
        e = self.entries["power"].get((gpu,))
        if e:
            return float(e["watts"])
        w = catalog.gpu(gpu).tdp_W
        return float(w) if w else None

    def cloud(self) -> list[dict[str, Any]]:
        return list(self.entries["cloud"].values())

    def network(self, nic: str) -> dict[str, Any] | None:
        return self.entries["network"].get((nic,))


def _key(section: str, e: dict[str, Any], file: str, where: str) -> tuple:
    out = []
    for k in KEYS[section]:
        if k not in e:
            raise InputError(f"required (an entry of {section} is keyed by "
                             f"{', '.join(KEYS[section])})", file=file, field=f"{where}.{k}")
        v = e[k]
        if k == "gpu":
            v = catalog.gpu(str(v), file=file, field=f"{where}.gpu").name
        elif k == "nic":
            v = catalog.net_speed(str(v), file=file, field=f"{where}.nic").name
        out.append(v)
    return tuple(out)


def _merge(into: dict[str, dict[tuple, dict[str, Any]]], data: Any, file: str,
           need_source: bool) -> None:
    if data is None:
        return
    if not isinstance(data, dict):
        raise InputError(f"expected a mapping of {', '.join(SECTIONS)}", file=file)
    for sec, rows in data.items():
        if sec not in SECTIONS:
            raise InputError(f"unknown section {sec!r}; allowed: {', '.join(SECTIONS)}",
                             file=file, field=str(sec))
        if rows is None:
            continue
        if not isinstance(rows, list):
            raise InputError("expected a list of entries", file=file, field=sec)
        for i, e in enumerate(rows):
            where = f"{sec}[{i}]"
            if not isinstance(e, dict):
                raise InputError(f"expected a mapping, got {e!r}", file=file, field=where)
            for k in NUMBERS[sec]:
                v = e.get(k)
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                                      or v < 0 or not math.isfinite(v)):
                    raise InputError(f"expected a number >= 0, got {v!r}", file=file,
                                     field=f"{where}.{k}")
                if v is not None and k in POSITIVE and v == 0:
                    raise InputError(f"expected a number > 0, got {v!r}", file=file,
                                     field=f"{where}.{k}")
            for k in REQUIRED[sec]:
                if e.get(k) is None:
                    raise InputError("required", file=file, field=f"{where}.{k}")
            if need_source and not e.get("source"):
                raise InputError("every price needs a 'source'", file=file,
                                 field=f"{where}.source")
            row = dict(e)
            row.setdefault("source", f"user price file {file}")
            into[sec][_key(sec, e, file, where)] = row


def load(user_file: str | None = None) -> Prices:
    """The catalog's prices, with ``user_file``'s entries added or replacing."""
    p = Prices(entries={s: {} for s in SECTIONS}, files=["catalog/data/prices.yaml"])
    text = resources.files("gpufabric.catalog").joinpath("data", "prices.yaml").read_text()
    _merge(p.entries, parse_yaml(text, "catalog/data/prices.yaml"), "catalog/data/prices.yaml",
           need_source=True)
    if user_file:
        _merge(p.entries, load_yaml(user_file, what="a price YAML file"), user_file,
               need_source=False)
        p.files.append(user_file)
    return p


__all__ = ["Prices", "load"]
