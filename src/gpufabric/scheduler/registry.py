"""One registry for every scheduler plugin, keyed by family and name.

Families: ``placement`` (which node and which GPUs), ``queue`` (which waiting job goes next),
``routing`` (which pools a job kind may use). Registering a name twice is an error, never a
silent replacement.

Examples
--------
>>> r = Registry()
>>> @r.register("placement", "first")
... class First: ...
>>> r.names("placement")
['first']
>>> r.register("placement", "first")(object)
Traceback (most recent call last):
...
ValueError: placement plugin 'first' is already registered
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpufabric.errors import unknown_name

FAMILIES = ("placement", "queue", "routing")


class Registry:
    """Plugins by family and name."""

    def __init__(self) -> None:
        self._items: dict[str, dict[str, Any]] = {f: {} for f in FAMILIES}

    def register(self, family: str, name: str) -> Callable[[Any], Any]:
        """Decorator registering ``obj`` as ``name`` in ``family``; a duplicate raises."""
        if family not in self._items:
            raise ValueError(f"unknown plugin family {family!r} (known: {', '.join(FAMILIES)})")

        def deco(obj: Any) -> Any:
            if name in self._items[family]:
                raise ValueError(f"{family} plugin {name!r} is already registered")
            self._items[family][name] = obj
            return obj
        return deco

    def get(self, family: str, name: str) -> Any:
        """The plugin, or an :class:`~gpufabric.errors.InputError` naming the known ones."""
        try:
            return self._items[family][name]
        except KeyError:
            raise unknown_name(f"{family} policy", name, self._items[family],
                               field="--policy" if family == "placement" else f"--{family}"
                               ) from None

    def names(self, family: str) -> list[str]:
        return list(self._items[family])


#: The registry the scheduler uses.
REGISTRY = Registry()
register = REGISTRY.register
