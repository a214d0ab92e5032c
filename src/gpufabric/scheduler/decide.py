"""One placement decision at a time, for front doors that are asked node by node.

A replay places a job in one call (:func:`gpufabric.scheduler.engine.place_gang`). A scheduler
extender is asked in pieces: which of these nodes could host the pod (filter), how good is each
(prioritize), then bind to the node the scheduler picked. These functions give those pieces
with the same policy objects and the same tiers of pools, so both front doors reach the same
placement.

Examples
--------
>>> import numpy as np
>>> from gpufabric.scheduler.cluster import load_nodes
>>> from gpufabric.scheduler.policies import make_placement
>>> from gpufabric.scheduler.state import Request, State
>>> c = load_nodes("V100M32x8*2+cpu*1")
>>> t = pool_tiers(c, "kind", "training", (), True)
>>> [m.tolist() for m in t]
[[True, True, False]]
>>> s = State(c)
>>> choose(s, make_placement("topology", c, None, np.random.default_rng(0)),
...        Request(8000, 1024, 2, 1000), t)
(0, (0, 3))
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpufabric.scheduler.cluster import POOLS, ROUTES, Cluster
from gpufabric.scheduler.registry import REGISTRY
from gpufabric.scheduler.state import Request, State


def pool_tiers(cluster: Cluster, routing: str | Callable[[Cluster, str], np.ndarray],
               kind: str, models: tuple[str, ...], wants_gpu: bool) -> list[np.ndarray]:
    """[every node the job may use, then each pool in the order the routing prefers].

    The routing's nodes for the kind (``routing``: a registered routing's name or the routing
    itself), narrowed for a GPU job to nodes with accelerators of an accepted model; the
    per-pool tiers only when the kind may use more than one pool present. A replay's
    :meth:`gpufabric.scheduler.engine.BaseMasks.tiers` asks this for each of a trace's jobs.
    """
    route = REGISTRY.get("routing", routing) if isinstance(routing, str) else routing
    m = route(cluster, kind).copy()
    if wants_gpu:
        m &= cluster.model_mask(models)
        m &= cluster.num_gpu > 0
    prefs = [m & (cluster.pool == POOLS.index(p)) for p in ROUTES[kind]]
    prefs = [p for p in prefs if p.any()]
    return [m] + (prefs if len(prefs) > 1 else [])


def choose(state: State, policy, r: Request, tiers: list[np.ndarray],
           within: np.ndarray | None = None) -> tuple[int, tuple[int, ...]] | None:
    """The (node, GPUs) the policy picks for one member, preferred pools first, or None.

    ``within`` narrows the nodes further (the candidates a scheduler sent).
    """
    for tier in (tiers[1:] or tiers[:1]):
        mask = tier if within is None else tier & within
        sel = policy.select(state, r, state.feasible(r, mask))
        if sel is not None:
            return sel
    return None


def node_scores(state: State, policy, r: Request, idx: np.ndarray) -> np.ndarray:
    """The policy's score of each node in ``idx`` (higher is better; compare within a call)."""
    if len(idx) == 0:
        return np.zeros(0)
    return np.asarray(policy.scores(state, r, idx), dtype=float)
