"""Collective algorithms as registered plugins: one class per file in this package.

Each algorithm says when it applies (:meth:`Algorithm.applies`), builds its schedule on a
topology as concurrent transfers for the network to time (:meth:`Algorithm.plan`), and gives
its latency and efficiency per protocol. Every module here is imported when the package is, and
``@register`` files its class under the class's ``name``; a second class with a name already
taken is refused. A new algorithm is one new file:

.. code-block:: python

    from gpufabric.collectives.algorithms.base import Algorithm, register

    @register
    class Direct(Algorithm):
        name = "direct"
        ops = ("all_gather",)
        auto = False                  # only when asked for by name
        def plan(self, m, op, lays): ...

Examples
--------
>>> sorted(REGISTRY)
['hierarchical', 'nvls', 'nvls_tree', 'p2p', 'pairwise', 'pat', 'ring', 'tree']
>>> get("tree").ops
('all_reduce',)
"""

from __future__ import annotations

import importlib
import pkgutil

from gpufabric.collectives.algorithms.base import REGISTRY, Algorithm, Plan, get, register

for _mod in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _mod != "base":
        importlib.import_module(f"{__name__}.{_mod}")

__all__ = ["REGISTRY", "Algorithm", "Plan", "get", "register"]
