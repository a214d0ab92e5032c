"""Cluster scheduling: where jobs go on GPU servers, TPU slices and CPU nodes, and what it costs.

The pieces (each importable on its own):

- :mod:`~gpufabric.scheduler.jobs`: :class:`Job` / :class:`JobSet`, the openb pod-list reader;
- :mod:`~gpufabric.scheduler.cluster`: :class:`Cluster` from the openb node lists, synthetic
  specs and system presets, with pools (GPU, TPU, CPU) and routing by job kind;
- :mod:`~gpufabric.scheduler.policies`: placement policies (``random``, ``spread``, ``best-fit``,
  ``dot-product``, ``fgd``, ``topology``), queue orders (``fifo``, ``priority``) and routings,
  all in one :data:`REGISTRY`;
- :mod:`~gpufabric.scheduler.arrival`: the FGD paper's packing protocol;
- :mod:`~gpufabric.scheduler.replay`: trace replay with queueing, preemption and failover.

Examples
--------
>>> from gpufabric.scheduler import load_jobs, load_nodes, run_arrival
>>> r = run_arrival(load_nodes("synthetic-openb"), load_jobs("synthetic-openb"), "random",
...                 seed=42)
>>> 80 < r.allocation_pct[100] < 95
True
"""

from gpufabric.scheduler import policies as _policies  # noqa: F401  (registers plugins)
from gpufabric.scheduler.arrival import run_arrival, run_arrivals  # noqa: F401
from gpufabric.scheduler.cluster import Cluster, load_nodes  # noqa: F401
from gpufabric.scheduler.failures import parse_failures  # noqa: F401
from gpufabric.scheduler.jobs import Job, JobSet, load_jobs  # noqa: F401
from gpufabric.scheduler.registry import REGISTRY, register  # noqa: F401
from gpufabric.scheduler.replay import run_replay  # noqa: F401
