"""The preset files of :mod:`gpufabric.topology.presets`: their names, data and descriptions."""

from __future__ import annotations

from functools import cache
from typing import Any

from gpufabric.errors import unknown_name
from gpufabric.fileio import load_data, package_dir

_EXTRA_KEYS = ("description", "compare")


@cache
def _one(name: str) -> dict[str, Any]:
    """One preset's file, parsed (a run that builds one preset reads only its file)."""
    return load_data("gpufabric.topology.presets", f"{name}.yaml")


@cache
def _raw() -> dict[str, dict[str, Any]]:
    """Every preset's file, parsed."""
    files = package_dir("gpufabric.topology.presets").iterdir()
    return {n: _one(n) for n in sorted(f.name[:-5] for f in files if f.name.endswith(".yaml"))}


def names() -> list[str]:
    """Preset names, in a stable order: the order of ``ORDER`` then alphabetical."""
    raw = _raw()
    return sorted(raw, key=lambda n: (raw[n].get("order", 999), n))


def exists(name: str) -> bool:
    """True if ``name`` is a preset (checks the file, parses nothing)."""
    from gpufabric.fileio import names_a_path
    return names_a_path(f"{name}.yaml") and "/" not in name and \
        package_dir("gpufabric.topology.presets").joinpath(f"{name}.yaml").is_file()


def describe(name: str) -> str:
    return str(_one(name).get("description", ""))


def compared() -> list[str]:
    """The archetypes that ``gpufabric compare`` puts side by side."""
    return [n for n in names() if _raw()[n].get("compare")]


def data(name: str) -> dict[str, Any]:
    """The preset's system description (a spec or a system file), without its listing keys;
    :func:`gpufabric.topology.build.load` builds it (this module only reads the files, so the
    builder can name presets without an import running back)."""
    if not exists(name):
        raise unknown_name("preset", name, _raw())
    return {k: v for k, v in _one(name).items() if k not in _EXTRA_KEYS + ("order",)}
