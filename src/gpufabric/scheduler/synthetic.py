"""A synthetic openb-like workload and cluster, so that ``schedule`` runs without the trace.

Drawn from ``data/synthetic_openb.yaml``: aggregates of the openb trace (alibaba/clusterdata,
FGD paper, ATC'23; the file names its source commit and the sha256 of the files it was
computed from by ``tools/synthetic_openb.py``):

- the pods ask the trace's request shapes (CPU, GPUs, GPU share) in exactly the trace's
  proportions: each shape as many times as the 8,152-pod default trace asks it, with the
  median memory of that shape; no GPU-model constraint (the default trace has none);
- QoS classes in the trace's proportions (LS 57%, BE 42%, Burstable, Guaranteed);
- run times drawn from the trace's run-time percentiles (interpolated on a log scale);
- creation times uniform over the trace's span (a Poisson process), in order;
- the cluster: as many nodes of each configuration (GPU model, GPUs, CPU, memory) as the
  openb node lists have (1,213 GPU nodes, 6,212 GPUs; ``all_node`` adds 310 CPU nodes).

One seed (``seed``, default 0) fixes the order, the run times and the creation times.

This module draws the data only (job columns, node rows), and imports neither the job nor the
cluster module: :func:`gpufabric.scheduler.jobs.synthetic_jobs` and
:func:`gpufabric.scheduler.cluster.synthetic_nodes` make the job set and the cluster of them.

Examples
--------
>>> cols = job_columns()
>>> len(cols[0]), int(cols[3].sum()), cols[-1]
(8152, 7433, 'synthetic-openb')
>>> rows, name = node_rows("gpu_node")
>>> len(rows), sum(r[3] for r in rows), name
(1213, 6212, 'synthetic-openb:gpu_node')
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from gpufabric.fileio import load_data
from gpufabric.scheduler.openb import KINDS, QOS_PRIORITY

#: The name that selects the synthetic workload (as a trace) or cluster (as ``--nodes``).
NAME = "synthetic-openb"


@cache
def stats() -> dict[str, Any]:
    """The aggregates of ``data/synthetic_openb.yaml``."""
    return load_data("gpufabric.scheduler", "data", "synthetic_openb.yaml")


def job_columns(seed: int = 0) -> tuple:
    """The synthetic openb-like pod list's columns, in the order ``JobSet`` takes them (see
    the module doc)."""
    s = stats()
    rng = np.random.default_rng(seed)
    shapes = np.array([row[:4] for row in s["shapes"]], dtype=np.int64)
    counts = np.array([row[4] for row in s["shapes"]], dtype=np.int64)
    idx = rng.permutation(np.repeat(np.arange(len(shapes)), counts))
    n = len(idx)
    cpu, mem, ngpu, gmilli = (shapes[idx, k].copy() for k in range(4))
    qos_names = list(s["qos"])
    qos_idx = rng.permutation(np.repeat(np.arange(len(qos_names)), list(s["qos"].values())))
    qos = [qos_names[k] for k in qos_idx.tolist()]
    pct = np.array([p for p, _ in s["duration_s_percentiles"]], dtype=float)
    val = np.log1p(np.array([v for _, v in s["duration_s_percentiles"]], dtype=float))
    duration = np.round(np.expm1(np.interp(rng.uniform(0, 100, n), pct, val)))
    creation = np.round(np.sort(rng.uniform(0, s["creation_span_s"], n)))
    kind = np.where(ngpu > 0, KINDS.index("training"), KINDS.index("service"))
    return ([f"synth-pod-{k:04d}" for k in range(n)], cpu, mem, ngpu, gmilli,
            np.zeros(n, np.int64), [()], kind.astype(np.int64),
            np.array([QOS_PRIORITY.get(q, 0) for q in qos], np.int64), qos,
            np.ones(n, np.int64), creation, duration, np.zeros(n), NAME)


def node_rows(which: str = "gpu_node") -> tuple[list[tuple[str, int, int, int, str, str]], str]:
    """The openb cluster's node configurations (``gpu_node``; ``all_node`` adds CPU nodes) as
    rows ``Cluster.from_rows`` takes, and the cluster's name."""
    s = stats()
    rows: list[tuple[str, int, int, int, str, str]] = []
    for model, gpus, cpu, mem, count in s["gpu_nodes"]:
        rows += [("", cpu, mem, gpus, model, "gpu")] * count
    if which == "all_node":
        for cpu, mem, count in s["cpu_nodes"]:
            rows += [("", cpu, mem, 0, "", "cpu")] * count
    rows = [(f"synth-node-{k:04d}",) + r[1:] for k, r in enumerate(rows)]
    return rows, f"{NAME}:{which}"
