"""Presets: well-known systems as data files (``presets/*.yaml``), not code paths.

Each file is a spec (the shorthand) or a full system file, plus a ``description`` and, for
archetypes that ``gpufabric compare`` puts side by side, ``compare: true``.

Examples
--------
>>> "dgx-a100" in names()
True
>>> len(load("dgx-a100").gpus())
8
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any

import yaml

from gpufabric.catalog import FAST_YAML
from gpufabric.errors import unknown_name
from gpufabric.topology.model import Topology

_EXTRA_KEYS = ("description", "compare")


@cache
def _raw() -> dict[str, dict[str, Any]]:
    out = {}
    for f in sorted(resources.files("gpufabric.topology.presets").iterdir(), key=lambda p: p.name):
        if f.name.endswith(".yaml"):
            out[f.name[:-5]] = yaml.load(f.read_text(), Loader=FAST_YAML)
    return out


def names() -> list[str]:
    """Preset names, in a stable order: the order of ``ORDER`` then alphabetical."""
    raw = _raw()
    return sorted(raw, key=lambda n: (raw[n].get("order", 999), n))


def exists(name: str) -> bool:
    """True if ``name`` is a preset (checks the file, parses nothing)."""
    from gpufabric.fileio import names_a_path
    return names_a_path(f"{name}.yaml") and "/" not in name and \
        resources.files("gpufabric.topology.presets").joinpath(f"{name}.yaml").is_file()


def describe(name: str) -> str:
    return str(_raw()[name].get("description", ""))


def compared() -> list[str]:
    """The archetypes that ``gpufabric compare`` puts side by side."""
    return [n for n in names() if _raw()[n].get("compare")]


def load(name: str, materialize_nodes: int | None = None, first_node: int = 0) -> Topology:
    """Build the preset ``name``."""
    from gpufabric.topology.build import from_data
    raw = _raw()
    if name not in raw:
        raise unknown_name("preset", name, raw)
    data = {k: v for k, v in raw[name].items() if k not in _EXTRA_KEYS + ("order",)}
    t = from_data(data, name, f"preset {name}", materialize_nodes, first_node)
    t.meta["description"] = describe(name)
    t.meta["preset"] = name
    return t
