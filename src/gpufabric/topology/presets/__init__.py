"""Presets: well-known systems as data files (``presets/*.yaml``), not code paths.

Each file is a spec (the shorthand) or a full system file, plus a ``description`` and, for
archetypes that ``gpufabric compare`` puts side by side, ``compare: true``.

Examples
--------
>>> "dgx-a100" in names()
True
>>> sorted(data("dgx-a100")), describe("dgx-a100").startswith("NVIDIA DGX A100")
(['devices', 'links'], True)
"""

from gpufabric.topology.presets.files import compared, data, describe, exists, names

__all__ = ["compared", "data", "describe", "exists", "names"]
