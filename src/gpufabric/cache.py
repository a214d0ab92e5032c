"""A dict that keeps only its newest entries: the bounded caches a long-lived process keeps.

Examples
--------
>>> seen = BoundedDict(2)
>>> seen["a"], seen["b"] = 1, 2
>>> seen["c"] = 3                 # a third key: the oldest, "a", goes
>>> list(seen.items())
[('b', 2), ('c', 3)]
>>> seen["b"] = 20                # stored again: it keeps its place, so it goes next
>>> seen["d"] = 4
>>> list(seen)
['c', 'd']
>>> recent = BoundedDict(2, refresh=True)
>>> recent["a"], recent["b"] = 1, 2
>>> recent["a"] = 10              # with refresh, storing it again makes it the newest
>>> recent["c"] = 3
>>> list(recent)
['a', 'c']
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Self, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class BoundedDict(OrderedDict[K, V]):
    """A dict of at most ``maxsize`` entries: storing a key it does not hold when it is full
    drops the oldest stored one (first in, first out). Reading never reorders. Storing a key
    it holds keeps that key's place, or, with ``refresh``, makes it the newest (the least
    recently stored then goes first). Every way of storing (``d[k] = v``, ``update``,
    ``setdefault``, ``|=``) keeps the bound, and so do a copy and an unpickled one."""

    def __init__(self, maxsize: int, refresh: bool = False):
        super().__init__()
        self.maxsize, self.refresh = maxsize, refresh

    def __setitem__(self, key: K, value: V) -> None:
        if self.refresh:
            self.pop(key, None)             # stored again: it becomes the newest
        super().__setitem__(key, value)
        while len(self) > self.maxsize:
            self.popitem(last=False)

    def copy(self) -> Self:
        out = type(self)(self.maxsize, self.refresh)
        out.update(self)
        return out

    def __reduce__(self) -> Any:
        return (type(self), (self.maxsize, self.refresh), None, None, iter(self.items()))
