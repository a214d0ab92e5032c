"""One sweep mechanism for every search: map a function over many items, in-process by default,
on a Ray cluster when asked.

The function must be a module-level callable (picklable) taking one item and returning plain
data; the results come back in the order of the items, so a ranking is the same either way.
Ray is an optional dependency (``pip install 'gpufabric[ray]'``).

Examples
--------
>>> run(abs, [-2, 3, -5])
[2, 3, 5]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from gpufabric.errors import InputError

T = TypeVar("T")
R = TypeVar("R")


def _chunk(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    return [fn(x) for x in items]


def run(fn: Callable[[T], R], items: Sequence[T], *, ray: bool = False,
        address: str | None = None, chunks: int = 0) -> list[R]:
    """``[fn(x) for x in items]``, in this process or spread over a Ray cluster.

    Parameters
    ----------
    ray : bool
        Run on Ray: a local instance, or the cluster at ``address`` (``ray://host:10001`` or
        ``auto``).
    chunks : int
        Ray tasks to split the items into (default: 4 per available CPU).
    """
    items = list(items)
    if not (ray or address):
        return [fn(x) for x in items]
    try:
        import ray as _ray
    except ImportError:
        raise InputError("Ray is not installed; install the 'ray' extra "
                         "(pip install 'gpufabric[ray]') or drop --ray", field="--ray") from None
    if not _ray.is_initialized():
        try:
            _ray.init(address=address, include_dashboard=False, log_to_driver=False,
                      ignore_reinit_error=True)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise InputError(f"cannot reach the Ray cluster: {exc}",
                             field="--ray-address") from None
    n = chunks or max(1, 4 * int(_ray.available_resources().get("CPU", 1)))
    size = max(1, -(-len(items) // n))
    task = _ray.remote(_chunk)
    refs = [task.remote(fn, items[i:i + size]) for i in range(0, len(items), size)]
    out: list[R] = []
    for part in _ray.get(refs):
        out.extend(part)
    return out


__all__ = ["run"]
