"""The scheduler-extender verbs (filter, prioritize, bind, preempt) over gpufabric's scheduler.

:class:`Extender` keeps its own picture of the cluster: the nodes (from ``--nodes``, from the
``Nodes`` kube-scheduler sends when ``nodeCacheCapable`` is false, or from the API server), a
:class:`~gpufabric.scheduler.state.State` of what is free on each, and the pods it has bound.
Placement is the scheduler layer's: a registered policy (``topology-fgd`` by default), the tiers
of pools the routing gives a job kind, and :func:`~gpufabric.scheduler.engine.place_gang` for
gangs, so a pod goes where ``gpufabric schedule`` with the same policy would put it.

How the verbs answer (extender/v1 types, JSON keys are the Go field names, unset is ``null``):

- filter: nodes that can host the pod now pass (and, for a pod that sets
  ``gpufabric.dev/min-bw-GBps``, whose free GPUs hold a set that fast). A node that never
  could (wrong pool for the job kind, no GPU of an accepted model, too small even when empty,
  not ready, unknown to the extender, GPU product not in the catalog) is in
  ``FailedAndUnresolvableNodes``; one that could after other pods leave is in ``FailedNodes``.
  A gang (pods sharing the pod-group label) is reserved whole when its first member is
  filtered; its members then pass only where a reserved place is still open. ``Error`` only
  when the extender cannot decide at all;
- prioritize: 10 for the node the policy picks, 1..9 for the others by the policy's own score,
  0 where the pod does not fit (``MaxExtenderPriority`` is 10);
- bind: takes the GPUs the policy picks on the chosen node and records the binding; binding a
  pod again to the node it is bound to succeeds (the scheduler retries a bind that timed out),
  to another node is an error;
- preempt: keeps the nodes where evicting the proposed victims lets the pod fit, with the same
  victims, always in the UID form.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from gpufabric.cache import BoundedDict
from gpufabric.errors import InputError
from gpufabric.k8s.objects import MAX_GANG, NodeInfo, PodInfo, parse_node, parse_pod
from gpufabric.k8s.statefile import StateFile, pod_from, pod_record
from gpufabric.scheduler.cluster import MAX_NODES, Cluster
from gpufabric.scheduler.decide import choose, node_scores, pool_tiers
from gpufabric.scheduler.engine import place_gang
from gpufabric.scheduler.gpuset import preferred_set, set_key
from gpufabric.scheduler.jobs import Job, JobSet
from gpufabric.scheduler.policies import make_placement
from gpufabric.scheduler.registry import REGISTRY
from gpufabric.scheduler.state import MILLI, Request, State

MIN_PRIORITY = 0
MAX_PRIORITY = 10
FILTER_KEYS = ("Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error")
#: pods remembered from filter calls (for bind), oldest forgotten first
POD_CACHE = 50_000
#: pods whose shapes teach fgd its target workload when none is given
WORKLOAD_WINDOW = 20_000


class ProtocolError(ValueError):
    """A request the extender cannot read: answered with HTTP 400 and ``Error``."""


class PodRefused(ProtocolError):
    """A readable request for a pod whose own fields are invalid (a GPU count of "-4" or "2.5",
    a gang of a million): that pod only is refused (filter fails it on every candidate node,
    unresolvably; prioritize scores 0; preempt proposes nothing), and the extender's state is
    not touched."""

    def __init__(self, reason: str, names: list[str], full: bool):
        super().__init__(reason)
        self.reason, self.names, self.full = reason, names, full


@dataclass
class Bound:
    pod: PodInfo
    node: str
    gpus: tuple[int, ...]
    at_s: float = 0.0        # when this extender bound it (0: adopted from the API server)


@dataclass
class Gang:
    """Places reserved for a gang: (node name, GPUs) each, and which member took which."""

    request: Request
    slots: list[tuple[str, tuple[int, ...]]]
    taken: dict[str, int] = field(default_factory=dict)     # pod uid -> slot
    created_s: float = 0.0

    def open_nodes(self) -> set[str]:
        used = set(self.taken.values())
        return {n for k, (n, _) in enumerate(self.slots) if k not in used}


def _need_dict(args: Any, verb: str) -> dict:
    if not isinstance(args, dict):
        raise ProtocolError(f"{verb}: expected a JSON object, got {type(args).__name__}")
    return args


class Extender:
    """Cluster state and the four verbs; thread-safety is the caller's (one lock around calls).

    Parameters
    ----------
    nodes : list of NodeInfo
        Nodes known from the start (more arrive with ``Nodes`` in requests).
    policy : str
        A placement policy of :data:`gpufabric.scheduler.REGISTRY`.
    workload : JobSet, optional
        The typical pods fgd measures fragmentation against; default: the pods seen so far.
    seed : int
        Seeds the policy's random choices (ties), as ``gpufabric schedule --seed``.
    routing : str
        ``kind`` (training to GPU nodes, services to CPU nodes) or ``none``.
    binder : callable, optional
        ``binder(pod, node, gpus)`` creates the Binding in the API server; raising fails the
        bind. None: the binding is only recorded here.
    gang_ttl_s : float
        A gang's unclaimed places are given back after this long.
    gang_size : callable, optional
        ``gang_size(namespace, group)``: the members of a pod group whose pods carry no
        ``gpufabric.dev/gang-size`` (the coscheduling PodGroup's ``minMember``), or None.
    state_file : StateFile, optional
        Journal every binding and gang place there, and start from what it holds (a restart
        without the API server loses nothing; see :mod:`gpufabric.k8s.statefile`).

    Examples
    --------
    >>> from gpufabric.k8s.objects import NodeInfo
    >>> ext = Extender([NodeInfo("n1", 64000, 512000, 8, "V100M32", "", 0, True)], "topology")
    >>> pod = {"metadata": {"name": "p", "uid": "u"}, "spec": {"containers": [
    ...     {"resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "4"}}}]}}
    >>> r = ext.filter({"Pod": pod, "Nodes": None, "NodeNames": ["n1", "gone"]})
    >>> r["NodeNames"], r["FailedAndUnresolvableNodes"]
    (['n1'], {'gone': 'gpufabric: node gone is not in the extender node cache'})
    >>> ext.prioritize({"Pod": pod, "Nodes": None, "NodeNames": ["n1"]})
    [{'Host': 'n1', 'Score': 10}]
    >>> ext.bind({"PodName": "p", "PodNamespace": "default", "PodUID": "u", "Node": "n1"})
    {'Error': ''}
    >>> ext.bound["u"].gpus
    (0, 3)
    """

    def __init__(self, nodes: list[NodeInfo] | None = None, policy: str = "topology-fgd",
                 workload: JobSet | None = None, seed: int = 42, routing: str = "kind",
                 binder: Callable[[PodInfo, str, tuple[int, ...]], None] | None = None,
                 gang_ttl_s: float = 300.0, clock: Callable[[], float] = time.monotonic,
                 gang_size: Callable[[str, str], int | None] | None = None,
                 state_file: StateFile | None = None):
        REGISTRY.get("placement", policy)
        REGISTRY.get("routing", routing)
        self.policy_name = policy
        self.workload = workload
        self.seed = seed
        self.routing = routing
        self.binder = binder
        self.gang_size = gang_size
        self.gang_ttl_s = gang_ttl_s
        self.clock = clock
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: BoundedDict[str, PodInfo] = BoundedDict(POD_CACHE, refresh=True)
        self.bound: dict[str, Bound] = {}
        self.gangs: dict[str, Gang] = {}
        self._shapes: BoundedDict[str, Job] = BoundedDict(WORKLOAD_WINDOW)
        self._shape_keys: set[tuple] = set()
        self._policy: Any = None
        self._cluster: Cluster | None = None
        self._state: State | None = None
        self._index: dict[str, int] = {}
        self._tiers: dict[tuple, list[np.ndarray]] = {}
        self._sets: dict[tuple, tuple[tuple[int, ...], float]] = {}
        for n in nodes or []:
            self.nodes[n.name] = n
        self.state_file = state_file
        if state_file is not None:
            self._restore()

    # -- cluster model ------------------------------------------------------------------
    def update_nodes(self, infos: list[NodeInfo], replace: bool = False) -> None:
        """Add or change nodes (``replace``: the list is the whole cluster)."""
        changed = False
        if replace and set(self.nodes) != {n.name for n in infos}:
            self.nodes = {}
            changed = True
        for n in infos:
            if self.nodes.get(n.name) != n:
                self.nodes[n.name] = n
                changed = True
        if changed:
            self._cluster = None

    def _model(self) -> tuple[Cluster, State]:
        if self._cluster is not None and self._state is not None:
            return self._cluster, self._state
        if not self.nodes:
            raise ProtocolError("the extender knows no nodes yet (start it with --nodes or "
                                "--kubeconfig, or set nodeCacheCapable: false)")
        infos = list(self.nodes.values())
        rows = [(n.name, n.cpu_milli, n.memory_mib, n.gpus, n.model, n.pool) for n in infos]
        presets = {i: n.system for i, n in enumerate(infos) if n.system}
        cluster = Cluster.from_rows(rows, "kubernetes", presets)
        state = State(cluster)
        self._index = {n.name: i for i, n in enumerate(infos)}
        for uid, b in list(self.bound.items()):
            at = self._index.get(b.node)
            if at is None:
                continue        # a node not heard of (yet): placed once it is
            if not self._try_place(state, at, b.pod.request, b.gpus):
                self._unbind(uid)        # its GPUs are another pod's: the API server says
        for g in list(self.gangs.values()):
            for k, (node, gpus) in enumerate(g.slots):
                if k in g.taken.values():
                    continue
                at = self._index.get(node)
                if at is None or not self._try_place(state, at, g.request, gpus):
                    g.slots[k] = ("", ())
        for i, n in enumerate(infos):
            if not n.ready:     # pods on it keep their places; nothing new goes there
                state.up[i] = False
        for i, n in enumerate(infos):
            self._hold_unhealthy(state, i, n.unhealthy)
        self._cluster, self._state = cluster, state
        self._policy = None
        self._tiers = {}
        return cluster, state

    # -- the records (bound pods, gangs' places), journaled when a state file is given ------
    def _bind_record(self, uid: str, b: Bound) -> None:
        self.bound[uid] = b
        self._journal(self._bind_json(uid, b))

    def _unbind(self, uid: str) -> Bound | None:
        b = self.bound.pop(uid, None)
        if b is not None:
            self._journal({"forget": uid})
        return b

    def _gang_record(self, key: str, g: Gang) -> None:
        self.gangs[key] = g
        self._journal(self._gang_json(key, g))

    def _ungang(self, key: str) -> None:
        if self.gangs.pop(key, None) is not None:
            self._journal({"ungang": key})

    @staticmethod
    def _bind_json(uid: str, b: Bound) -> dict:
        return {"bind": uid, "pod": pod_record(b.pod), "node": b.node, "gpus": list(b.gpus)}

    @staticmethod
    def _gang_json(key: str, g: Gang) -> dict:
        return {"gang": key, "request": asdict(g.request),
                "slots": [[n, list(gp)] for n, gp in g.slots], "taken": g.taken}

    def _journal(self, rec: dict) -> None:
        """Append a change to the state file; rewrite it as the live records alone once it
        holds four times as many lines as there are records (and at least 10,000)."""
        f = self.state_file
        if f is None:
            return
        f.write(rec)
        if f.lines > max(10_000, 4 * (len(self.bound) + len(self.gangs))):
            f.compact([self._bind_json(u, b) for u, b in self.bound.items()],
                      [self._gang_json(k, g) for k, g in self.gangs.items()])

    def _restore(self) -> None:
        """The records of the state file (a restart): placed when the model is next built."""
        assert self.state_file is not None
        binds, gangs = self.state_file.load()
        now = self.clock()
        for uid, rec in binds.items():
            self.bound[uid] = Bound(pod_from(rec["pod"]), rec["node"], tuple(rec["gpus"]), now)
        for key, rec in gangs.items():
            self.gangs[key] = Gang(Request(**rec["request"]),
                                   [(n, tuple(gp)) for n, gp in rec["slots"]],
                                   dict(rec["taken"]), created_s=now)

    def recover(self) -> None:
        """Drop the derived model (free GPUs, the policy's tables): the next call rebuilds it
        from the nodes, the bound pods and the gangs' places, the extender's records. The
        HTTP front calls it after an unexpected failure, so that a verb that stopped halfway
        leaves nothing counted twice."""
        self._cluster = self._state = self._policy = None
        self._tiers = {}

    @staticmethod
    def _try_place(state: State, i: int, r: Request, gpus: tuple[int, ...]) -> bool:
        """Record a pod that is on node ``i`` (even a node now not ready); False if it cannot
        be (its GPUs are taken or the node is too small)."""
        up = bool(state.up[i])
        state.up[i] = True
        try:
            state.place(i, r, gpus)
        except RuntimeError:
            return False
        finally:
            state.up[i] = up
        return True

    @classmethod
    def _hold_unhealthy(cls, state: State, i: int, count: int) -> None:
        """Unhealthy GPUs (capacity - allocatable) are not offered: the highest free ones."""
        if count <= 0:
            return
        row = state.gpu_left[i]
        free = [g for g in np.flatnonzero(row == MILLI).tolist()][::-1][:count]
        if free:
            cls._try_place(state, i, Request(0, 0, len(free), MILLI), tuple(sorted(free)))

    def _placement(self) -> Any:
        cluster, _ = self._model()
        if self._policy is None:
            jobs = self.workload
            if jobs is None:
                jobs = JobSet.from_jobs(list(self._shapes.values()) or [Job("any", 0, 0)])
            self._policy = make_placement(self.policy_name, cluster, jobs,
                                          np.random.default_rng(self.seed))
        return self._policy

    def _sized(self, pod: PodInfo) -> PodInfo:
        """The pod with its gang's size from the PodGroup when its annotation does not say."""
        if not pod.group or pod.gang > 1 or self.gang_size is None:
            return pod
        ns, _, group = pod.group.partition("/")
        size = self.gang_size(ns, group)
        if size is not None and not (isinstance(size, int) and 0 <= size <= MAX_GANG):
            raise InputError(f"PodGroup {pod.group}: minMember {size!r} is outside "
                             f"1..{MAX_GANG:,}", field=f"Pod {pod.key}")
        return replace(pod, gang=size) if size and size > 1 else pod

    def _learn(self, pod: PodInfo) -> None:
        self.pods[pod.uid] = pod
        if self.workload is not None:
            return
        r = pod.request
        self._shapes[pod.uid] = Job(pod.uid, r.cpu, r.mem, r.num_gpu, r.gpu_milli or MILLI,
                                    pod.models, pod.kind)
        key = (r.cpu, r.num_gpu, r.gpu_milli, pod.models)
        if key not in self._shape_keys:
            self._shape_keys.add(key)
            self._policy = None          # a new shape: fgd relearns its target workload

    def _tiers_of(self, pod: PodInfo) -> list[np.ndarray]:
        cluster, _ = self._model()
        key = (pod.kind, pod.models, pod.request.num_gpu > 0)
        t = self._tiers.get(key)
        if t is None:
            t = pool_tiers(cluster, self.routing, pod.kind, pod.models, key[2])
            self._tiers[key] = t
        return t

    def _best_on(self, i: int, k: int, free: list[int]) -> tuple[tuple[int, ...], float]:
        """The best-connected ``k`` of ``free`` GPUs of node ``i`` and their bottleneck GB/s."""
        cluster, _ = self._model()
        key = (cluster.model(i), int(cluster.num_gpu[i]), cluster.presets.get(i), tuple(free), k)
        hit = self._sets.get(key)
        if hit is None:
            bw, hops = cluster.gpu_tables(i)
            gpus = preferred_set(free, k, bw, hops, nics=cluster.gpu_nics(i))
            hit = (gpus, set_key(gpus, bw, hops)[0])
            if len(self._sets) > 100_000:
                self._sets.clear()
            self._sets[key] = hit
        return hit

    def _bw_short(self, pod: PodInfo, i: int) -> tuple[bool, str] | None:
        """None if node ``i``'s free GPUs hold a set fast enough for the pod; else why not."""
        cluster, state = self._model()
        k = pod.request.num_gpu
        if pod.min_bw_GBps <= 0 or k < 2:
            return None
        free = np.flatnonzero(state.gpu_left[i] == MILLI).tolist()
        if len(free) >= k:
            gpus, bw = self._best_on(i, k, free)
            if bw >= pod.min_bw_GBps:
                return None
        _, empty_bw = self._best_on(i, k, list(range(int(cluster.num_gpu[i]))))
        name = cluster.names[i]
        if empty_bw < pod.min_bw_GBps:
            return True, (f"gpufabric: the best {k} GPUs of node {name} have {empty_bw:g} GB/s "
                          f"between them; the pod asks at least {pod.min_bw_GBps:g}")
        got = f"{bw:g} GB/s (GPUs {','.join(map(str, gpus))})" if len(free) >= k else "none"
        return False, (f"gpufabric: the best {k} of the free GPUs of node {name} "
                       f"({','.join(map(str, free))}): {got}; the pod asks at least "
                       f"{pod.min_bw_GBps:g} GB/s")

    # -- reading requests ---------------------------------------------------------------
    def _args(self, args: Any, verb: str) -> tuple[PodInfo, list[str], bool]:
        """(pod, candidate node names, whether the scheduler sent full Node objects)."""
        args = _need_dict(args, verb)
        if "Pod" not in args or args["Pod"] is None:
            raise ProtocolError(f"{verb}: ExtenderArgs.Pod is missing")
        names, full = self._candidates(args, verb)
        try:
            pod = self._sized(parse_pod(args["Pod"], "Pod"))
        except InputError as exc:
            raise PodRefused(f"gpufabric: {exc}", names, full) from None
        return pod, names, full

    def _candidates(self, args: dict, verb: str) -> tuple[list[str], bool]:
        """The candidate node names, and whether the scheduler sent full Node objects (these
        update the node cache; those that cannot be read are remembered as refused)."""
        nodes, names = args.get("Nodes"), args.get("NodeNames")
        if nodes is not None:
            items = nodes.get("items") if isinstance(nodes, dict) else None
            if not isinstance(items, list):
                raise ProtocolError(f"{verb}: ExtenderArgs.Nodes must be a NodeList with items")
            if len(items) > MAX_NODES:
                raise ProtocolError(f"{verb}: {len(items):,} nodes; a cluster has at most "
                                    f"{MAX_NODES:,}")
            infos, bad = [], {}
            for k, item in enumerate(items):
                try:
                    infos.append(parse_node(item, f"Nodes.items[{k}]"))
                except InputError as exc:
                    nm = (item.get("metadata") or {}).get("name") if isinstance(item, dict) \
                        else None
                    if not isinstance(nm, str):
                        raise ProtocolError(f"{verb}: {exc}") from None
                    bad[nm] = f"gpufabric: {exc}"
            self.update_nodes(infos)
            self._bad_nodes = bad
            return [n.name for n in infos] + list(bad), True
        self._bad_nodes = {}
        if not isinstance(names, list) or not set(map(type, names)) <= {str}:
            raise ProtocolError(f"{verb}: ExtenderArgs needs Nodes or NodeNames (a list of "
                                "node names)")
        if len(names) > MAX_NODES:
            raise ProtocolError(f"{verb}: {len(names):,} node names; a cluster has at most "
                                f"{MAX_NODES:,}")
        return names, False

    # -- filter ------------------------------------------------------------------------
    def _expire_gangs(self) -> None:
        now = self.clock()
        for key, g in list(self.gangs.items()):
            if now - g.created_s > self.gang_ttl_s and len(g.taken) < len(g.slots):
                _, state = self._model()
                for k, (node, gpus) in enumerate(g.slots):
                    if k not in g.taken.values() and node in self._index:
                        state.release(self._index[node], g.request, gpus)
                self._ungang(key)

    def _why_not(self, pod: PodInfo, i: int, tiers: list[np.ndarray],
                 pre: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[bool, str] | None:
        """None if the pod fits node ``i`` now; else (unresolvable, reason).

        ``pre``: (feasible now, fits when empty) over all nodes, computed once per request.
        """
        cluster, state = self._model()
        r = pod.request
        feas, fits = pre if pre is not None else (state.feasible(r), state.fits_empty(r))
        name = cluster.names[i]
        if not state.up[i]:
            return True, f"gpufabric: node {name} is not ready"
        if not tiers[0][i]:
            if r.num_gpu and cluster.num_gpu[i] == 0:
                return True, f"gpufabric: node {name} has no GPUs"
            if r.num_gpu and pod.models and cluster.model(i) not in pod.models:
                return True, (f"gpufabric: node {name} has {cluster.model(i)} GPUs; the pod "
                              f"accepts {'|'.join(pod.models)}")
            return True, (f"gpufabric: {pod.kind} pods do not run on the "
                          f"{'GPU' if cluster.num_gpu[i] else 'CPU'} node {name} "
                          f"(routing {self.routing})")
        if not fits[i]:
            return True, (f"gpufabric: node {name} is too small even when empty "
                          f"({cluster.num_gpu[i]} GPUs, {cluster.cpu[i]}m CPU, "
                          f"{cluster.mem[i]} MiB)")
        if feas[i]:
            return None
        if state.cpu_free[i] < r.cpu or state.mem_free[i] < r.mem:
            return False, (f"gpufabric: node {name} has {state.cpu_free[i]}m CPU and "
                           f"{state.mem_free[i]} MiB free; the pod asks {r.cpu}m and {r.mem} MiB")
        if r.share:
            return False, (f"gpufabric: no GPU of node {name} has {r.gpu_milli} milli free "
                           f"(largest free share {state.max_left[i]})")
        return False, (f"gpufabric: {state.full[i]} of {cluster.num_gpu[i]} GPUs of node {name} "
                       f"free; the pod asks {r.num_gpu}")

    def filter(self, args: Any) -> dict:
        """ExtenderArgs -> ExtenderFilterResult (see the module doc)."""
        try:
            pod, names, full = self._args(args, "filter")
        except PodRefused as no:
            return self._filter_result(args, [], {}, {n: no.reason for n in no.names}, no.full)
        self._learn(pod)
        cluster, state = self._model()
        self._expire_gangs()
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = dict(self._bad_nodes)
        passed: list[str] = []
        tiers = self._tiers_of(pod)
        known = [n for n in names if n in self._index and n not in unresolvable]
        for n in names:
            if n not in self._index and n not in unresolvable:
                unresolvable[n] = f"gpufabric: node {n} is not in the extender node cache"
        prior = self.bound.get(pod.uid)
        if prior is not None:
            for n in known:
                if n == prior.node:
                    passed.append(n)
                else:
                    unresolvable[n] = f"gpufabric: pod is already bound to {prior.node}"
        elif pod.group and pod.gang > 1:
            g = self._gang(pod, known)
            open_nodes = g.open_nodes() if g else set()
            for n in known:
                if g is not None and g.request != pod.request:
                    unresolvable[n] = (f"gpufabric: gang {pod.group} was reserved for members "
                                       f"asking {g.request}; this pod asks {pod.request}")
                elif n in open_nodes:
                    passed.append(n)
                elif g is None:
                    fast = (f" with at least {pod.min_bw_GBps:g} GB/s between each "
                            "member's GPUs" if pod.min_bw_GBps > 0 else "")
                    failed[n] = (f"gpufabric: gang {pod.group} of {pod.gang} members "
                                 f"does not fit all together on these nodes{fast}")
                else:
                    failed[n] = f"gpufabric: no open place of gang {pod.group} on {n}"
        else:
            feas = state.feasible(pod.request)       # vectorized once, read per node
            pre = (feas, state.fits_empty(pod.request))
            ok = (feas & tiers[0]).tolist()
            index = self._index
            asks_bw = pod.min_bw_GBps > 0 and pod.request.num_gpu >= 2
            for n in known:
                why = None if ok[index[n]] else self._why_not(pod, index[n], tiers, pre)
                if why is None and asks_bw:
                    why = self._bw_short(pod, index[n])
                if why is None:
                    passed.append(n)
                elif why[0]:
                    unresolvable[n] = why[1]
                else:
                    failed[n] = why[1]
        return self._filter_result(args, passed, failed, unresolvable, full)

    @staticmethod
    def _filter_result(args: dict, passed: list[str], failed: dict[str, str],
                       unresolvable: dict[str, str], full: bool) -> dict:
        """ExtenderFilterResult: the passed nodes as the scheduler sent them (Node objects or
        names); a node both failed and unresolvable is reported unresolvable."""
        for n in unresolvable:
            failed.pop(n, None)
        out: dict[str, Any] = {"Nodes": None, "NodeNames": None, "FailedNodes": failed,
                               "FailedAndUnresolvableNodes": unresolvable, "Error": ""}
        if full:
            items = {(it.get("metadata") or {}).get("name"): it
                     for it in args["Nodes"]["items"] if isinstance(it, dict)}
            out["Nodes"] = {"metadata": {}, "items": [items[n] for n in passed]}
        else:
            out["NodeNames"] = passed
        return out

    def _gang(self, pod: PodInfo, candidates: list[str]) -> Gang | None:
        """The gang's reservation, made now (all members or none) if there is none."""
        g = self.gangs.get(pod.group)
        if g is not None:
            return g
        cluster, state = self._model()
        within = np.zeros(len(cluster), dtype=bool)
        within[[self._index[n] for n in candidates]] = True
        tiers = [t & within for t in self._tiers_of(pod)]
        if pod.min_bw_GBps > 0 and pod.request.num_gpu >= 2:
            got = self._place_fast_gang(pod, tiers)
        else:
            got = place_gang(state, self._placement(), pod.request, tiers, pod.gang)
        if got is None:
            return None
        g = Gang(pod.request, [(cluster.names[i], tuple(gp)) for i, gp in got],
                 created_s=self.clock())
        self._gang_record(pod.group, g)
        return g

    def _place_fast_gang(self, pod: PodInfo, tiers: list[np.ndarray]
                         ) -> list[tuple[int, tuple[int, ...]]] | None:
        """:func:`~gpufabric.scheduler.engine.place_gang` for a gang whose members each ask
        ``gpufabric.dev/min-bw-GBps``: member by member, the policy's node among those whose
        free GPUs still hold a set that fast, and that set; all members or none (state
        unchanged)."""
        _, state = self._model()
        r, policy = pod.request, self._placement()
        for tier in (tiers[1:] or tiers[:1]):
            done: list[tuple[int, tuple[int, ...]]] = []
            for _ in range(pod.gang):
                mask = state.feasible(r, tier)
                for i in np.flatnonzero(mask).tolist():
                    mask[i] = self._bw_short(pod, i) is None
                sel = policy.select(state, r, mask)
                if sel is None:
                    break
                free = np.flatnonzero(state.gpu_left[sel[0]] == MILLI).tolist()
                gpus = self._best_on(sel[0], r.num_gpu, free)[0]
                state.place(sel[0], r, gpus)
                done.append((sel[0], gpus))
            if len(done) == pod.gang:
                return done
            for node, gpus in reversed(done):
                state.release(node, r, gpus)
        return None

    # -- prioritize --------------------------------------------------------------------
    def prioritize(self, args: Any) -> list[dict]:
        """ExtenderArgs -> HostPriorityList (scores 0..10)."""
        try:
            pod, names, _ = self._args(args, "prioritize")
        except PodRefused as no:
            return [{"Host": n, "Score": MIN_PRIORITY} for n in dict.fromkeys(no.names)]
        self._learn(pod)
        cluster, state = self._model()
        scores = {n: MIN_PRIORITY for n in names}
        known = [n for n in names if n in self._index]
        g = self.gangs.get(pod.group) if pod.group else None
        prior = self.bound.get(pod.uid)
        if prior is not None:
            if prior.node in scores:
                scores[prior.node] = MAX_PRIORITY
        elif g is not None:
            for n in g.open_nodes() & set(known):
                scores[n] = MAX_PRIORITY
        elif known:
            if pod.min_bw_GBps > 0:
                known = [n for n in known if self._bw_short(pod, self._index[n]) is None]
            within = np.zeros(len(cluster), dtype=bool)
            within[np.fromiter(map(self._index.__getitem__, known), np.int64, len(known))] = True
            tiers = self._tiers_of(pod)
            policy = self._placement()
            pick = choose(state, policy, pod.request, tiers, within)
            if pick is not None:
                idx = np.flatnonzero(state.feasible(pod.request, tiers[0] & within))
                raw = node_scores(state, policy, pod.request, idx)
                lo, hi = (float(raw.min()), float(raw.max())) if len(raw) else (0.0, 0.0)
                for i, v in zip(idx.tolist(), raw.tolist(), strict=True):
                    frac = (v - lo) / (hi - lo) if hi > lo else 1.0
                    scores[cluster.names[i]] = 1 + int(frac * (MAX_PRIORITY - 2) + 0.5)
                scores[cluster.names[pick[0]]] = MAX_PRIORITY
        return [{"Host": n, "Score": s} for n, s in scores.items()]

    # -- bind --------------------------------------------------------------------------
    def bind(self, args: Any) -> dict:
        """ExtenderBindingArgs -> ExtenderBindingResult; idempotent for the same node."""
        args = _need_dict(args, "bind")
        for k in ("PodName", "PodNamespace", "PodUID", "Node"):
            if not isinstance(args.get(k), str) or not args.get(k):
                raise ProtocolError(f"bind: ExtenderBindingArgs.{k} must be a non-empty string")
        uid, node = args["PodUID"], args["Node"]
        who = f"{args['PodNamespace']}/{args['PodName']}"
        prior = self.bound.get(uid)
        if prior is not None:
            if prior.node == node:
                return {"Error": ""}
            return {"Error": f"gpufabric: {who} is already bound to {prior.node}, not {node}"}
        pod = self.pods.get(uid)
        if pod is None:
            return {"Error": f"gpufabric: binding {who} to {node} failed: the pod was never "
                             "filtered by this extender"}
        cluster, state = self._model()
        i = self._index.get(node)
        if i is None:
            return {"Error": f"gpufabric: binding {who} failed: node {node} is not in the "
                             "extender node cache"}
        g = self.gangs.get(pod.group) if pod.group else None
        slot: int | None = None
        if g is not None and g.request != pod.request:
            return {"Error": f"gpufabric: binding {who} failed: gang {pod.group} was reserved "
                             f"for members asking {g.request}, this pod asks {pod.request}"}
        if g is not None:
            used = set(g.taken.values())
            slot = next((k for k, (n, _) in enumerate(g.slots) if n == node and k not in used),
                        None)
            if slot is None:
                return {"Error": f"gpufabric: binding {who} to {node} failed: no open place of "
                                 f"gang {pod.group} there"}
            gpus = g.slots[slot][1]
        else:
            only = np.zeros(len(cluster), dtype=bool)
            only[i] = True
            pick = choose(state, self._placement(), pod.request, self._tiers_of(pod), only)
            if pick is None:
                return {"Error": f"gpufabric: binding {who} to {node} failed: "
                                 + (self._why_not(pod, i, self._tiers_of(pod)) or (False, "it "
                                    "does not fit"))[1].removeprefix("gpufabric: ")}
            gpus = pick[1]
            if pod.min_bw_GBps > 0 and pod.request.num_gpu >= 2:
                short = self._bw_short(pod, i)
                if short is not None:
                    return {"Error": f"gpufabric: binding {who} to {node} failed: "
                                     + short[1].removeprefix("gpufabric: ")}
                free = np.flatnonzero(state.gpu_left[i] == MILLI).tolist()
                gpus = self._best_on(i, pod.request.num_gpu, free)[0]
            state.place(i, pod.request, gpus)
        if self.binder is not None:
            try:
                self.binder(pod, node, gpus)
            except Exception as exc:  # the API server said no: give the place back
                if g is None:
                    state.release(i, pod.request, gpus)
                return {"Error": f"gpufabric: binding {who} to {node} failed: {exc}"}
        if g is not None and slot is not None:
            g.taken[uid] = slot
            if len(g.taken) == len(g.slots):
                self._ungang(pod.group)         # all members bound: the gang is done
            else:
                self._gang_record(pod.group, g)
        self._bind_record(uid, Bound(pod, node, tuple(gpus), self.clock()))
        return {"Error": ""}

    def forget(self, uid: str) -> bool:
        """A bound pod ended (or was evicted): give its place back. False if unknown."""
        b = self._unbind(uid)
        if b is None:
            return False
        g = self.gangs.get(b.pod.group) if b.pod.group else None
        if g is not None and uid in g.taken:
            del g.taken[uid]     # a gang still forming: its place stays reserved for it
            self._gang_record(b.pod.group, g)
            return True
        _, state = self._model()
        i = self._index.get(b.node)
        if i is not None:
            state.release(i, b.pod.request, b.gpus)
        return True

    def sync(self, nodes: list[NodeInfo], pods: list[PodInfo], grace_s: float = 60.0
             ) -> dict[str, int]:
        """Make the state what the API server says: these nodes, these pods running on them.

        Pods bound elsewhere (by another scheduler, or before a restart) are adopted on the GPUs
        their ``gpufabric.dev/gpu-index`` annotation names, else on the first free ones; bound
        pods that are gone are given back, except those this extender bound less than
        ``grace_s`` ago (a listing taken before the binding does not show them yet). Returns
        counts of what changed.
        """
        self.update_nodes(nodes, replace=True)
        cluster, state = self._model()
        live = {p.uid: p for p in pods if p.node}
        now = self.clock()
        gone = [u for u, b in self.bound.items()
                if u not in live and not (b.at_s and now - b.at_s < grace_s)]
        for u in gone:
            self.forget(u)
        adopted = 0
        for uid, p in live.items():
            if uid in self.bound or p.node not in self._index:
                continue
            i = self._index[p.node]
            named = len(p.gpu_index) == p.request.num_gpu and \
                max(p.gpu_index, default=0) < cluster.num_gpu[i]
            gpus = p.gpu_index if named else state.pick_gpus(i, p.request)
            if self._try_place(state, i, p.request, tuple(gpus)):
                self._bind_record(uid, Bound(p, p.node, tuple(gpus)))
                adopted += 1
        return {"nodes": len(self.nodes), "released": len(gone), "adopted": adopted}

    # -- preempt -----------------------------------------------------------------------
    def preempt(self, args: Any) -> dict:
        """ExtenderPreemptionArgs -> ExtenderPreemptionResult (UID form)."""
        args = _need_dict(args, "preempt")
        if not isinstance(args.get("Pod"), dict):
            raise ProtocolError("preempt: ExtenderPreemptionArgs.Pod is missing")
        try:
            pod = self._sized(parse_pod(args["Pod"], "Pod"))
        except InputError:
            return {"NodeNameToMetaVictims": {}}    # evicting nothing helps a refused pod
        full, meta = args.get("NodeNameToVictims"), args.get("NodeNameToMetaVictims")
        proposals: dict[str, tuple[list[str], int]] = {}
        for src, is_full in ((full, True), (meta, False)):
            if src is None:
                continue
            if not isinstance(src, dict):
                raise ProtocolError("preempt: NodeNameToVictims / NodeNameToMetaVictims must "
                                    "be objects")
            for node, v in src.items():
                if not isinstance(v, dict) or not isinstance(v.get("Pods") or [], list):
                    raise ProtocolError(f"preempt: victims of {node} must be {{Pods: [...]}}")
                uids = []
                for p in v.get("Pods") or []:
                    uid = ((p.get("metadata") or {}).get("uid") if is_full else p.get("UID")) \
                        if isinstance(p, dict) else None
                    if not isinstance(uid, str):
                        raise ProtocolError(f"preempt: a victim on {node} has no UID")
                    uids.append(uid)
                pdb = v.get("NumPDBViolations") or 0
                if not isinstance(pdb, int) or isinstance(pdb, bool):
                    raise ProtocolError(f"preempt: NumPDBViolations of {node} must be an "
                                        "integer")
                proposals[node] = (uids, pdb)
        self._learn(pod)
        cluster, state = self._model()
        tiers = self._tiers_of(pod)
        out: dict[str, Any] = {}
        for node, (uids, pdb) in proposals.items():
            i = self._index.get(node)
            if i is None:
                continue
            gone = [self.bound[u] for u in uids if u in self.bound and self.bound[u].node == node
                    and self.bound[u].pod.priority < pod.priority]
            for b in gone:
                state.release(i, b.pod.request, b.gpus)
            try:
                fits = self._why_not(pod, i, tiers) is None
            finally:
                for b in gone:
                    state.place(i, b.pod.request, b.gpus)
            if fits:
                out[node] = {"Pods": [{"UID": u} for u in uids], "NumPDBViolations": pdb}
        return {"NodeNameToMetaVictims": out}

    # -- dispatch ----------------------------------------------------------------------
    VERBS = ("filter", "prioritize", "bind", "preempt")

    def handle(self, verb: str, args: Any) -> Any:
        """Run one verb on decoded JSON; :class:`ProtocolError` for unreadable requests."""
        if verb not in self.VERBS:
            raise ProtocolError(f"unknown verb '{verb}' (allowed: {', '.join(self.VERBS)})")
        return getattr(self, verb)(args)


def error_reply(verb: str, message: str) -> Any:
    """The verb's result struct carrying only ``Error`` (every other field null)."""
    if verb == "filter":
        return {k: None for k in FILTER_KEYS[:-1]} | {"Error": message}
    if verb == "preempt":
        return {"NodeNameToMetaVictims": None, "Error": message}
    return {"Error": message}
