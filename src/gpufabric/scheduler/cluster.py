"""The cluster: nodes with CPU, memory and accelerators, in pools (GPU servers, TPU slices, CPU).

A :class:`Cluster` is columns over nodes (numpy arrays) plus each node's accelerator model and
pool. Each GPU or TPU node keeps an internal topology (:func:`Cluster.topology`), built from the
node model (:mod:`gpufabric.scheduler.nodetopo`) or taken from a system preset.

``NODES`` in the CLI is one of

- ``gpu_node`` / ``all_node``: the openb node lists (1,213 GPU nodes; plus 310 CPU nodes), found
  as :mod:`gpufabric.downloads` says; ``synthetic-openb`` their node configurations
  without the files;
- a path to a CSV with the openb node columns ``sn,cpu_milli,memory_mib,gpu,model``
  (an optional ``pool`` column: ``gpu``, ``tpu`` or ``cpu``);
- a synthetic spec: pools joined by ``+``, each ``NAME*COUNT`` (or ``COUNTxNAME``), where NAME is
  a TPU slice of :data:`TPU_SLICES` (``tpu-v4-8``), ``cpu`` / ``cpu-<cores>`` for a CPU node,
  ``<MODEL>x<N>`` for an openb-style GPU node (``V100M32x8``, ``T4x4``), or a system the topology
  layer builds: a preset of :mod:`gpufabric.topology.presets`, a spec file, or an inline spec
  ``gpu=H100-SXM,gpus_per_node=8`` (its GPUs per node, 16 cores and 128 GiB per GPU, and the
  system's own topology).

Examples
--------
>>> c = load_nodes("synthetic-openb")
>>> len(c), int(c.num_gpu.sum())
(1213, 6212)
>>> c = load_nodes("V100M32x8*2+tpu-v4-8*1+cpu*3")
>>> c.pools(), c.model(0), int(c.num_gpu.sum())
(['gpu', 'tpu', 'cpu'], 'V100M32', 20)
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpufabric.fileio import path_kind
from gpufabric.errors import InputError, unknown_name
from gpufabric.scheduler import nodetopo
from gpufabric.scheduler import synthetic
from gpufabric.scheduler.jobs import KINDS, bundled_path, read_csv
from gpufabric.topology.paths import gpu_nic_levels

POOLS = ("gpu", "tpu", "cpu")
NODE_LISTS = ("gpu_node", "all_node")
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
#: Most nodes one cluster may have: 65x the openb cluster and well beyond the 5,000 nodes
#: Kubernetes supports in one cluster ("Considerations for large clusters"); a larger count is
#: taken as a typo rather than built.
MAX_NODES = 100_000
#: Most accelerators per node and cores per CPU node in a synthetic pool (the largest openb node
#: has 8 GPUs and 128 cores; an NVL72 rack is 72 GPUs).
MAX_GPUS = 128
MAX_CORES = 1024

#: Job kind -> pools it may run in, in order of preference. A pool the cluster lacks is
#: skipped; if the cluster has none of a kind's pools, the job may use any node.
ROUTES = {
    "training": ("gpu",),
    "inference": ("tpu", "gpu"),
    "service": ("cpu",),
    "batch": ("gpu", "tpu", "cpu"),
}

#: TPU slices as schedulable nodes: chips, HBM GiB per chip, host vCPU and memory GiB per slice.
#: Source: Google Cloud TPU documentation, "System architecture" pages for v4, v5e, v5p and v6e
#: (chips per host and HBM per chip; host CPU/memory are those of the TPU VM machine types,
#: rounded).
TPU_SLICES: dict[str, dict[str, Any]] = {
    "tpu-v4-8": dict(chips=4, model="TPU-v4", hbm_GiB=32, cpu=240, mem_GiB=400),
    "tpu-v4-16": dict(chips=8, model="TPU-v4", hbm_GiB=32, cpu=480, mem_GiB=800),
    "tpu-v4-32": dict(chips=16, model="TPU-v4", hbm_GiB=32, cpu=960, mem_GiB=1600),
    "tpu-v5e-4": dict(chips=4, model="TPU-v5e", hbm_GiB=16, cpu=112, mem_GiB=192),
    "tpu-v5e-8": dict(chips=8, model="TPU-v5e", hbm_GiB=16, cpu=224, mem_GiB=384),
    "tpu-v5p-8": dict(chips=4, model="TPU-v5p", hbm_GiB=95, cpu=208, mem_GiB=448),
    "tpu-v6e-8": dict(chips=8, model="TPU-v6e", hbm_GiB=32, cpu=180, mem_GiB=720),
}


@dataclass
class Cluster:
    """Nodes as columns: name, CPU milli, memory MiB, accelerators, model, pool.

    ``model_id`` indexes ``models`` (``""`` for CPU nodes); ``pool`` indexes :data:`POOLS`.
    """

    names: list[str]
    cpu: np.ndarray
    mem: np.ndarray
    num_gpu: np.ndarray
    model_id: np.ndarray
    models: list[str]
    pool: np.ndarray
    source: str = ""
    presets: dict[int, str] = field(default_factory=dict)  # node -> system it was built from

    def __len__(self) -> int:
        return len(self.names)

    @property
    def max_gpus(self) -> int:
        return int(self.num_gpu.max()) if len(self) else 0

    @property
    def gpu_capacity_milli(self) -> int:
        return int(self.num_gpu.sum()) * 1000

    def model(self, i: int) -> str:
        return self.models[self.model_id[i]]

    def pools(self) -> list[str]:
        """Pools present, in :data:`POOLS` order."""
        return [p for k, p in enumerate(POOLS) if (self.pool == k).any()]

    def topology(self, i: int):
        """The internal :class:`~gpufabric.topology.model.Topology` of node ``i``."""
        if i in self.presets:
            return node_system(self.presets[i])
        return nodetopo.build_node(self.model(i), int(self.num_gpu[i]), name=self.names[i])

    def gpu_tables(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(bottleneck GB/s, hops) between the accelerators of node ``i`` (cached per type)."""
        key = (self.model(i), int(self.num_gpu[i]), self.presets.get(i))
        cache = self.__dict__.setdefault("_tables", {})
        if key not in cache:
            if key[2]:
                cache[key] = nodetopo.tables(self.topology(i))
            else:
                cache[key] = nodetopo.node_tables(key[0], key[1])
        return cache[key]

    def gpu_nics(self, i: int) -> np.ndarray | None:
        """How each GPU of node ``i`` reaches each of its NICs
        (:func:`gpufabric.topology.paths.gpu_nic_levels`), or None when it has none (the
        openb node models describe no NICs; a preset or spec may)."""
        name = self.presets.get(i)
        if not name:
            return None
        cache = self.__dict__.setdefault("_nics", {})
        if name not in cache:
            lv = gpu_nic_levels(self.topology(i))
            cache[name] = lv if lv.shape[1] else None
        return cache[name]

    def model_mask(self, allowed: tuple[str, ...]) -> np.ndarray:
        """Nodes whose accelerator model is in ``allowed`` (all nodes if empty)."""
        if not allowed:
            return np.ones(len(self), dtype=bool)
        ok = np.array([m in allowed for m in self.models], dtype=bool)
        return ok[self.model_id]

    def route_mask(self, kind: str) -> np.ndarray:
        """Nodes that :data:`ROUTES` allows for a job kind."""
        present = [POOLS.index(p) for p in ROUTES[kind] if (self.pool == POOLS.index(p)).any()]
        if not present:
            return np.ones(len(self), dtype=bool)
        return np.isin(self.pool, present)

    def summary(self) -> dict:
        """Counts per (pool, model, accelerators) for reports."""
        out: dict[str, int] = {}
        for i in range(len(self)):
            m = self.model(i)
            key = f"{POOLS[self.pool[i]]}:{m}x{self.num_gpu[i]}" if m else "cpu"
            out[key] = out.get(key, 0) + 1
        return out

    @classmethod
    def from_rows(cls, rows: list[tuple[str, int, int, int, str, str]], source: str = "",
                  presets: dict[int, str] | None = None) -> Cluster:
        """Build from (name, cpu_milli, memory_mib, accelerators, model, pool) tuples."""
        models = [""]
        mid = []
        for r in rows:
            if r[4] not in models:
                models.append(r[4])
            mid.append(models.index(r[4]))
        return cls([r[0] for r in rows], np.array([r[1] for r in rows], np.int64),
                   np.array([r[2] for r in rows], np.int64),
                   np.array([r[3] for r in rows], np.int64), np.array(mid, np.int64), models,
                   np.array([POOLS.index(r[5]) for r in rows], np.int64), source,
                   dict(presets or {}))


def _read_node_csv(path: Path) -> Cluster:
    header, rows = read_csv(path, NODE_COLUMNS, NODE_COLUMNS + ("pool",))
    if len(rows) > MAX_NODES:
        raise InputError(f"{len(rows):,} nodes; at most {MAX_NODES:,} in one cluster",
                         file=str(path))
    col = {h: i for i, h in enumerate(header)}
    out = []
    for k, r in enumerate(rows):
        line = k + 2
        if len(r) < len(header):
            raise InputError(f"row has {len(r)} fields, the header {len(header)}",
                             file=str(path), field=f"line {line}")
        vals = []
        for c in ("cpu_milli", "memory_mib", "gpu"):
            t = r[col[c]].strip()
            try:
                v = int(t)
            except ValueError:
                raise InputError(f"'{t}' is not an integer", file=str(path),
                                 field=f"line {line}.{c}") from None
            top = MAX_GPUS if c == "gpu" else 10**15
            if not 0 <= v <= top:
                raise InputError(f"{v} is outside 0..{top}", file=str(path),
                                 field=f"line {line}.{c}")
            vals.append(v)
        model = r[col["model"]].strip()
        if vals[2] and not model:
            raise InputError("a node with GPUs needs a model", file=str(path),
                             field=f"line {line}.model")
        pool = r[col["pool"]].strip() if "pool" in col else ""
        if pool and pool not in POOLS:
            raise unknown_name("pool", pool, POOLS, file=str(path), field=f"line {line}.pool")
        pool = pool or ("cpu" if not vals[2] else
                        "tpu" if model.upper().startswith("TPU") else "gpu")
        out.append((r[col["sn"]].strip(), vals[0], vals[1], vals[2], model if vals[2] else "",
                    pool))
    if not out:
        raise InputError("no nodes", file=str(path))
    return Cluster.from_rows(out, str(path))


_GPU_NODE = re.compile(r"^([A-Za-z][A-Za-z0-9_.-]*?)x(\d+)$")


def _pool_rows(name: str, count: int, start: int, spec: str) -> tuple[list, str | None]:
    if name in TPU_SLICES:
        t = TPU_SLICES[name]
        return [(f"{name}-{start + k:04d}", t["cpu"] * 1000, t["mem_GiB"] * 1024, t["chips"],
                 t["model"], "tpu") for k in range(count)], None
    m = re.fullmatch(r"cpu(?:-(\d+))?", name)
    if m:
        cores = int(m.group(1) or 64)
        if not 1 <= cores <= MAX_CORES:
            raise InputError(f"pool '{name}': {cores} cores; a CPU node has 1..{MAX_CORES}",
                             file=spec, field="NODES")
        return [(f"cpu-{start + k:04d}", cores * 1000, cores * 4096, 0, "", "cpu")
                for k in range(count)], None
    m = _GPU_NODE.match(name)
    if m:
        model, n = m.group(1), int(m.group(2))
        if model not in nodetopo.OPENB_MODELS:
            e = unknown_name("GPU model", model, nodetopo.OPENB_MODELS)
            raise InputError(f"pool '{name}': {e.message}; any other GPU as an inline spec "
                             "such as gpu=H100-SXM,gpus_per_node=8", file=spec, field="NODES")
        if not 1 <= n <= MAX_GPUS:
            raise InputError(f"pool '{name}': {n} GPUs; a node has 1..{MAX_GPUS}", file=spec,
                             field="NODES")
        return [(f"{name}-{start + k:04d}", 12000 * n, 65536 * n, n, model, "gpu")
                for k in range(count)], None
    from gpufabric.topology import presets
    known = presets.names()
    if name in known or "=" in name or name.lower().endswith((".yaml", ".yml")):
        topo = node_system(name)
        if topo.meta.get("nodes", 1) > 1:
            raise InputError(f"pool '{name}' describes {topo.meta['nodes']} nodes; a pool is "
                             "one node type, its node count goes after '*' (NAME*COUNT)",
                             file=spec, field="NODES")
        g = topo.gpus()
        per = len([d for d in g if d.node == g[0].node]) if g else 0
        if per > MAX_GPUS:
            raise InputError(f"pool '{name}': {per} GPUs per node; a node has 1..{MAX_GPUS}",
                             file=spec, field="NODES")
        model = g[0].model if g else ""
        return [(f"{name if name in known else 'node'}-{start + k:04d}", 16000 * max(per, 4),
                 131072 * max(per, 1), per, model, "gpu" if per else "cpu")
                for k in range(count)], name
    raise unknown_name("node type", name,
                       list(TPU_SLICES) + ["cpu", "cpu-<cores>", "<MODEL>x<N>"] + known,
                       file=spec, field="NODES")


def _pool_count(part: str, spec: str) -> tuple[str, int]:
    """``NAME*COUNT``, ``COUNTxNAME`` or ``NAME`` -> (NAME, COUNT), COUNT checked."""
    if "*" in part:
        name, _, count = part.rpartition("*")
    else:
        m = re.fullmatch(r"(\d+)x(.+)", part)
        name, count = (m.group(2), m.group(1)) if m else (part, "1")
    name, count = name.strip(), count.strip()
    if not name:
        raise InputError(f"pool '{part}' names no node type; write NAME*COUNT", file=spec,
                         field="NODES")
    if not count.isdigit():
        raise InputError(f"pool '{part}': count '{count}' is not a whole number; write "
                         "NAME*COUNT with COUNT 1 or more", file=spec, field="NODES")
    if int(count) < 1:
        raise InputError(f"pool '{part}': count {int(count)} must be 1 or more", file=spec,
                         field="NODES")
    return name, int(count)


def node_system(name: str):
    """A system preset, spec file or inline ``k=v,...`` spec, built by the topology layer.

    Only its first node is built (a pool is one node type); an inline spec's size is checked
    before anything is built.
    """
    from gpufabric.topology import presets
    from gpufabric.topology.build import load, normalize_spec, parse_inline
    if "=" in name and name not in presets.names():
        s = normalize_spec(parse_inline(name), file=name)
        if s["gpus_per_node"] > MAX_GPUS:
            raise InputError(f"{s['gpus_per_node']} GPUs per node in a pool; a node has "
                             f"1..{MAX_GPUS}", file=name, field="gpus_per_node")
    return load(name, materialize_nodes=1)


def load_nodes(nodes: str, data_dir: str | os.PathLike | None = None) -> Cluster:
    """A cluster from a node-list name, a CSV path or a synthetic spec (see the module doc).

    ``gpu_node`` and ``all_node`` are looked up in ``data_dir``, then as
    :mod:`gpufabric.downloads` says; ``synthetic-openb`` (or ``synthetic-openb:all_node``)
    are their node configurations without the files (:mod:`gpufabric.scheduler.synthetic`).

    Raises
    ------
    InputError
        Unknown name, missing file, a CSV without the openb node columns.
    """
    if nodes in NODE_LISTS:
        return _read_node_csv(bundled_path("node_list", nodes, data_dir))
    if nodes in ("synthetic-openb", "synthetic-openb:gpu_node", "synthetic-openb:all_node"):
        return synthetic_nodes(nodes.partition(":")[2] or "gpu_node")
    p = Path(nodes)
    kind = path_kind(nodes)      # None for an inline spec longer than a file name may be
    is_dir, is_file = kind == "dir", kind == "file"
    if is_dir:
        raise InputError("is a directory; expected a CSV file with the openb node columns",
                         file=nodes)
    if p.suffix.lower() == ".csv" or is_file:
        if not is_file:
            raise InputError("no such file", file=nodes)
        return _read_node_csv(p)
    rows: list = []
    presets_of: dict[int, str] = {}
    for part in nodes.split("+"):
        name, count = _pool_count(part.strip(), nodes)
        if len(rows) + count > MAX_NODES:
            raise InputError(f"{len(rows) + count:,} nodes; at most {MAX_NODES:,} in one "
                             "cluster", file=nodes, field="NODES")
        new, preset = _pool_rows(name, count, len(rows), nodes)
        if preset:
            for k in range(len(new)):
                presets_of[len(rows) + k] = preset
        rows += new
    return Cluster.from_rows(rows, nodes, presets_of)


def synthetic_nodes(which: str = "gpu_node") -> Cluster:
    """The openb cluster's node configurations (:mod:`gpufabric.scheduler.synthetic`;
    ``gpu_node``, or ``all_node`` with the CPU nodes).

    >>> c = synthetic_nodes("gpu_node")
    >>> len(c), int(c.num_gpu.sum())
    (1213, 6212)
    """
    rows, name = synthetic.node_rows(which)
    return Cluster.from_rows(rows, name)


__all__ = ["Cluster", "load_nodes", "POOLS", "ROUTES", "TPU_SLICES", "KINDS"]
