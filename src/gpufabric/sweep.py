"""One sweep mechanism for every search: map a function over many items, in-process by default,
across this machine's cores (``jobs``) or on a Ray cluster when asked.

The function must be a module-level callable (picklable) taking one item and returning plain
data; it runs under the caller's parameters (:func:`gpufabric.params.current`) wherever it
runs, and the results come back in the order of the items, so a ranking is the same either way.
Ray is an optional dependency (``pip install 'gpufabric[ray]'``).

Examples
--------
>>> run(abs, [-2, 3, -5])
[2, 3, 5]
>>> run(abs, [-2, 3, -5], jobs=2)     # two worker processes: the same list
[2, 3, 5]
>>> told = []
>>> run(abs, [-2, 3], progress=lambda n, total: told.append((n, total)))
[2, 3]
>>> told
[(1, 2), (1, 2)]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from gpufabric import params
from gpufabric.errors import InputError

T = TypeVar("T")
R = TypeVar("R")


class _Under:
    """``fn`` run under the caller's parameters (:func:`gpufabric.params.current`) and NCCL
    release (:func:`gpufabric.collectives.versions.release`): a worker process or Ray task
    has its own context, which holds the shipped values and no release."""

    def __init__(self, fn: Callable[[Any], Any], p: params.Params, release: Any = None):
        self.fn, self.p, self.release = fn, p, release

    def __call__(self, x: Any) -> Any:
        from gpufabric.collectives import versions
        with params.use(self.p), versions.use(self.release):
            return self.fn(x)


def _chunk(fn: Callable[[Any], Any], items: Sequence[Any]) -> list[Any]:
    return [fn(x) for x in items]


def cores() -> int:
    """The CPU cores this process may use (its affinity mask where the system has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:          # not on Linux
        return max(1, os.cpu_count() or 1)


def run(fn: Callable[[T], R], items: Sequence[T], *, ray: bool = False,
        address: str | None = None, chunks: int = 0, jobs: int = 1,
        progress: Callable[[int, int], None] | None = None) -> list[R]:
    """``[fn(x) for x in items]``, in this process, across ``jobs`` worker processes, or
    spread over a Ray cluster.

    Parameters
    ----------
    ray : bool
        Run on Ray: a local instance, or the cluster at ``address`` (``ray://host:10001`` or
        ``auto``).
    chunks : int
        Ray tasks to split the items into (default: 4 per available CPU).
    jobs : int
        Worker processes on this machine (without Ray): 1 runs in this process; more run the
        items on a pool of that many processes (the one :func:`workers` keeps open, or one for
        this call). The results are the same and in the same order either way.
    progress : callable, optional
        ``progress(n, total)`` is called as each ``n`` more of the ``total`` items are done
        (one by one in this process or the pool, a Ray task's share at a time on Ray).
    """
    items = list(items)
    from gpufabric.collectives import versions
    release = versions.release()
    if (ray or address or jobs > 1) and (params.current() != params.SHIPPED
                                         or release is not None):
        fn = _Under(fn, params.current(), release)
    if not (ray or address) and jobs > 1 and len(items) > 1:
        return _run_pool(fn, items, jobs, progress)
    if not (ray or address):
        if progress is None:
            return [fn(x) for x in items]
        done = []
        for x in items:
            done.append(fn(x))
            progress(1, len(items))
        return done
    try:
        import ray as _ray
    except ImportError:
        raise InputError("Ray is not installed; install the 'ray' extra "
                         "(pip install 'gpufabric[ray]') or drop --ray", field="--ray") from None
    if address and address != "auto":
        _probe(address)
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
    parts: dict[Any, list[R]] = {}
    pending = list(refs)
    while pending:                       # as tasks end, in any order; kept in the items' order
        ready, pending = _ray.wait(pending, num_returns=1)
        parts[ready[0]] = _ray.get(ready[0])
        if progress:
            progress(len(parts[ready[0]]), len(items))
    out: list[R] = []
    for ref in refs:
        out.extend(parts[ref])
    return out


_POOL: list[tuple[int, Any]] = []       # (jobs, pool) of each open :func:`workers`


@contextmanager
def workers(jobs: int) -> Iterator[None]:
    """Keep one pool of ``jobs`` worker processes for the :func:`run` calls inside (with the
    same ``jobs``), instead of one pool per call. The workers are forked here where the
    system can (else spawned): they start with this process's modules, caches and settings as
    they are now.

    >>> with workers(2):
    ...     run(abs, [-1, 2], jobs=2), run(abs, [-3, 4], jobs=2)
    ([1, 2], [3, 4])
    """
    if jobs <= 1:
        yield
        return
    entry = (jobs, _new_pool(jobs))
    _POOL.append(entry)
    try:
        yield
    finally:
        _POOL.remove(entry)
        entry[1].shutdown(cancel_futures=True)


def _new_pool(jobs: int) -> Any:
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else None)
    return ProcessPoolExecutor(max_workers=jobs, mp_context=ctx)


def _run_pool(fn: Callable[[T], R], items: list[T], jobs: int,
              progress: Callable[[int, int], None] | None) -> list[R]:
    from concurrent.futures import FIRST_COMPLETED, wait
    mine = not (_POOL and _POOL[-1][0] == jobs)
    pool = _new_pool(min(jobs, len(items))) if mine else _POOL[-1][1]
    try:
        futures = [pool.submit(fn, x) for x in items]
        pending = set(futures)
        while pending:                   # as items end, in any order; kept in the items' order
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            if progress:
                for _ in done:
                    progress(1, len(items))
        return [f.result() for f in futures]
    finally:
        if mine:
            pool.shutdown(cancel_futures=True)


def each(items: Iterable[T], progress: Callable[[int, int], None] | None,
         total: int) -> Iterator[T]:
    """Each of ``items``, telling ``progress(1, total)`` as the loop over them asks for the next
    one (and at its end): a loop's progress, told after each item's work whatever way its body
    ends (``continue`` included).

    >>> told = []
    >>> for x in each("ab", lambda n, total: told.append((x, n, total)), 2):
    ...     if x == "a":
    ...         continue
    >>> told
    [('a', 1, 2), ('b', 1, 2)]
    """
    for x in items:
        yield x
        if progress:
            progress(1, total)


def _probe(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast (one line, no hang) when nothing listens at a Ray address ``[ray://]host:port``.

    >>> _probe("127.0.0.1:1", 0.5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    gpufabric.errors.InputError: --ray-address: cannot reach the Ray cluster at 127.0.0.1:1 (...)
    """
    import socket
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise InputError(f"got {address!r}; expected [ray://]host:port or auto",
                         field="--ray-address")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise InputError(f"cannot reach the Ray cluster at {address} "
                         f"({exc.strerror or exc})", field="--ray-address") from None


__all__ = ["cores", "each", "run", "workers"]
