"""The one bounded cache of the package's long-lived caches (:class:`gpufabric.cache.BoundedDict`):
at most N entries, the oldest stored dropped first, and the same entries, in the same order,
as the hand-written caches it replaced."""

from __future__ import annotations

import copy
import pickle
import random

import pytest

from gpufabric.cache import BoundedDict


def test_a_full_cache_drops_its_oldest_entries_in_the_order_they_were_stored():
    d: BoundedDict[int, str] = BoundedDict(3)
    dropped = []
    for k in range(7):
        before = set(d)
        d[k] = str(k)
        dropped += sorted(before - set(d))
        assert len(d) == min(k + 1, 3)
    assert dropped == [0, 1, 2, 3]
    assert list(d.items()) == [(4, "4"), (5, "5"), (6, "6")]


def test_reading_never_reorders_and_storing_a_held_key_keeps_its_place():
    d: BoundedDict[str, int] = BoundedDict(2)
    d["a"], d["b"] = 1, 2
    assert d["a"] == 1 and d.get("a") == 1 and "a" in d
    d["a"] = 10                           # no refresh: "a" is still the oldest
    assert len(d) == 2
    d["c"] = 3
    assert list(d.items()) == [("b", 2), ("c", 3)]


def test_with_refresh_storing_a_held_key_makes_it_the_newest():
    d: BoundedDict[str, int] = BoundedDict(2, refresh=True)
    d["a"], d["b"] = 1, 2
    assert d["a"] == 1                    # a read is not a store: no refresh
    d["c"] = 3
    assert list(d) == ["b", "c"]
    d["b"] = 20
    d["d"] = 4
    assert list(d.items()) == [("b", 20), ("d", 4)]


@pytest.mark.parametrize("store", [
    lambda d, k: d.update({k: k}),
    lambda d, k: d.update([(k, k)]),
    lambda d, k: d.setdefault(k, k),
    lambda d, k: d.__ior__({k: k}),
])
def test_every_way_of_storing_keeps_the_bound(store):
    d: BoundedDict[int, int] = BoundedDict(2)
    for k in range(5):
        store(d, k)
    assert list(d) == [3, 4]


def test_copies_and_pickles_keep_the_bound_and_the_order():
    d: BoundedDict[int, int] = BoundedDict(3, refresh=True)
    for k in (1, 2, 3, 1):
        d[k] = k
    for twin in (d.copy(), copy.copy(d), copy.deepcopy(d), pickle.loads(pickle.dumps(d))):
        assert type(twin) is BoundedDict and twin is not d
        assert (twin.maxsize, twin.refresh, list(twin)) == (3, True, [2, 3, 1])
        twin[4] = 4
        assert list(twin) == [3, 1, 4] and list(d) == [2, 3, 1]


def _fifo_before(d: dict, n: int, key: int) -> None:
    """The advise, serving and KV-cache idiom: a new key, room made first."""
    if key not in d:
        while len(d) >= n:
            d.pop(next(iter(d)))
        d[key] = key


def _fifo_after(d: dict, n: int, key: int) -> None:
    """The extender's workload window and the device plugin's answered pods: stored, then
    trimmed (a held key keeps its place)."""
    d[key] = key
    while len(d) > n:
        d.pop(next(iter(d)))


def _refreshed(d: dict, n: int, key: int) -> None:
    """The collectives' and the calibration's models, the extender's pods, the known
    clients: stored again as the newest, then trimmed."""
    d.pop(key, None)
    d[key] = key
    while len(d) > n:
        d.pop(next(iter(d)))


@pytest.mark.parametrize("n", [1, 2, 4, 9])
@pytest.mark.parametrize("idiom,refresh,new_only", [
    (_fifo_before, False, True), (_fifo_after, False, False), (_refreshed, True, False)])
def test_it_holds_what_the_hand_written_caches_held(idiom, refresh, new_only, n):
    rng = random.Random(n)
    old: dict[int, int] = {}
    new: BoundedDict[int, int] = BoundedDict(n, refresh=refresh)
    for _ in range(2000):
        key = rng.randrange(3 * n)
        idiom(old, n, key)
        if not (new_only and key in new):
            new[key] = key
        assert list(new.items()) == list(old.items())
        assert len(new) <= n
