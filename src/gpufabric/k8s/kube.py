"""The API server, through the official Kubernetes Python client (``pip install gpufabric[k8s]``).

:class:`KubeSource` lists Nodes and Pods for :meth:`Extender.sync
<gpufabric.k8s.extender.Extender.sync>` and creates Bindings for the extender's bind verb
(annotating the pod with the GPUs chosen, ``gpufabric.dev/gpu-index``, first). Responses are read
as raw JSON (``_preload_content=False``) and parsed by :mod:`gpufabric.k8s.objects`, the same
reader as the extender's requests.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

from gpufabric.cache import BoundedDict
from gpufabric.errors import InputError
from gpufabric.k8s.objects import GPU_INDEX_ANNOTATION, NodeInfo, PodInfo, parse_node, parse_pod

#: Pod phases whose pods hold their node's resources.
ACTIVE_PHASES = ("Pending", "Running", "Unknown")
#: Node annotation of the bind lock: ``<namespace>/<name>/<uid> <unix seconds>`` of the pod
#: whose GPUs the node's device plugin is to hand out next (HAMi's node lock, in our names).
BIND_LOCK_ANNOTATION = "gpufabric.dev/bind-lock"
#: A lock older than this is stale (its pod never reached the kubelet): taken over.
LOCK_TTL_S = 300.0


def parse_lock(text: Any) -> tuple[str, float] | None:
    """(pod UID, unix time) of a bind-lock annotation, or None if it is not one.

    Examples
    --------
    >>> parse_lock("ml/train-0/uid-1 1767225600")
    ('uid-1', 1767225600.0)
    """
    try:
        who, at = str(text).rsplit(" ", 1)
        return who.rsplit("/", 1)[1], float(at)
    except (ValueError, IndexError):
        return None


def node_lock(api: Any, node: str) -> tuple[tuple[str, float] | None, str | None]:
    """(the node's bind lock or None, its resourceVersion), read through ``api``."""
    obj = KubeSource._json(api.read_node(node, _preload_content=False))
    meta = (obj.get("metadata") or {}) if isinstance(obj, dict) else {}
    held = (meta.get("annotations") or {}).get(BIND_LOCK_ANNOTATION)
    return (parse_lock(held) if held else None), meta.get("resourceVersion")


def set_node_lock(api: Any, node: str, value: str | None, resource_version: str | None) -> None:
    """Write (or, None, remove) the bind lock; with ``resource_version`` the API server
    refuses it (409 Conflict) when the node changed since it was read."""
    meta: dict[str, Any] = {"annotations": {BIND_LOCK_ANNOTATION: value}}
    if resource_version:
        meta["resourceVersion"] = resource_version
    api.patch_node(node, {"metadata": meta})


class KubeSource:
    """Nodes, pods and bindings from an API server.

    Parameters
    ----------
    kubeconfig : str
        A kubeconfig path, or ``in-cluster`` for the service account of the pod it runs in.
    api, custom : object, optional
        ``CoreV1Api`` / ``CustomObjectsApi``-like objects (tests pass fakes); default: built
        from ``kubeconfig``.
    lock : bool
        Take the node's bind lock (:data:`BIND_LOCK_ANNOTATION`) before binding a GPU pod, so
        that the node's device plugin hands out the GPUs of one pod at a time, the one it
        knows: a node locked for another pod (less than :data:`LOCK_TTL_S` ago) refuses the
        bind, and kube-scheduler tries the pod again later. gpufabric's device plugin releases
        the lock when the kubelet allocates that pod's devices: use it only with that plugin
        on the GPU nodes (with another, every lock would wait out :data:`LOCK_TTL_S`).
    """

    def __init__(self, kubeconfig: str, api: Any = None, custom: Any = None, lock: bool = False,
                 clock: Any = time.time):
        self.lock = lock
        self.clock = clock
        self._sizes: dict[tuple[str, str], int | None] = {}
        if api is None:
            try:
                from kubernetes import client, config
            except ImportError:
                raise InputError("reading the cluster needs the kubernetes package: "
                                 "pip install 'gpufabric[k8s]'", field="--kubeconfig") from None
            try:
                if kubeconfig == "in-cluster":
                    config.load_incluster_config()
                else:
                    config.load_kube_config(config_file=kubeconfig)
            except Exception as exc:
                raise InputError(f"cannot load: {exc}", file=kubeconfig,
                                 field="--kubeconfig") from None
            api = client.CoreV1Api()
            custom = client.CustomObjectsApi()
        self.api = api
        self.custom = custom

    @staticmethod
    def _json(resp: Any) -> Any:
        data = getattr(resp, "data", resp)
        return json.loads(data) if isinstance(data, (bytes, str)) else data

    def nodes(self) -> list[NodeInfo]:
        out = []
        for k, item in enumerate(self._json(self.api.list_node(_preload_content=False))
                                  .get("items") or []):
            try:
                out.append(parse_node(item, f"nodes[{k}]"))
            except InputError as exc:     # one odd node must not stop the extender
                print(f"gpufabric: skipping a node: {exc}", file=sys.stderr)
        return out

    def pods(self) -> list[PodInfo]:
        data = self._json(self.api.list_pod_for_all_namespaces(
            field_selector="spec.nodeName!=", _preload_content=False))
        out = []
        for k, item in enumerate(data.get("items") or []):
            phase = ((item.get("status") or {}).get("phase")) if isinstance(item, dict) else None
            if phase not in ACTIVE_PHASES:
                continue
            try:
                out.append(parse_pod(item, f"pods[{k}]"))
            except InputError as exc:
                print(f"gpufabric: skipping a pod: {exc}", file=sys.stderr)
        return out

    def pod(self, namespace: str, name: str) -> PodInfo:
        return parse_pod(self._json(self.api.read_namespaced_pod(name, namespace,
                                                                 _preload_content=False)))

    def gang_size(self, namespace: str, group: str) -> int | None:
        """``spec.minMember`` of the coscheduling PodGroup (scheduling.x-k8s.io/v1alpha1), or
        None when there is none or it cannot be read. Cached: a group's size does not change
        while it is being placed."""
        key = (namespace, group)
        if key in self._sizes:
            return self._sizes[key]
        size = None
        try:
            obj = self._json(self.custom.get_namespaced_custom_object(
                "scheduling.x-k8s.io", "v1alpha1", namespace, "podgroups", group,
                _preload_content=False))
            size = int((obj.get("spec") or {}).get("minMember") or 0) or None
        except Exception:
            size = None
        if len(self._sizes) > 10_000:
            self._sizes.clear()
        self._sizes[key] = size
        return size

    def bind(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> None:
        """Take the node's bind lock (GPU pods, with ``lock``), annotate the pod with its GPUs,
        then create its Binding to ``node``; a failure after the lock gives the lock back."""
        locked = False
        if gpus and self.lock:
            held, version = node_lock(self.api, node)
            if held is not None and held[0] != pod.uid and self.clock() - held[1] < LOCK_TTL_S:
                raise RuntimeError(f"node {node} is locked for pod {held[0]} since "
                                   f"{self.clock() - held[1]:.0f} s ago (its GPUs are being "
                                   "handed out); the pod will be tried again")
            set_node_lock(self.api, node, f"{pod.namespace}/{pod.name}/{pod.uid} "
                          f"{int(self.clock())}", version)
            locked = True
        try:
            if gpus:
                self.api.patch_namespaced_pod(pod.name, pod.namespace, {"metadata": {
                    "annotations": {GPU_INDEX_ANNOTATION: "-".join(str(g) for g in gpus)}}})
            body = {"apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
            self.api.create_namespaced_binding(pod.namespace, body, _preload_content=False)
        except Exception:
            if locked:
                try:
                    set_node_lock(self.api, node, None, None)
                except Exception:
                    pass                       # it goes stale after LOCK_TTL_S
            raise


class AssignedGPUs:
    """The device plugin's side channel: GPUs the extender chose, read from pending pods.

    The kubelet's ``GetPreferredAllocation`` carries no pod identity. The extender writes the GPUs
    it chose into the pod (``gpufabric.dev/gpu-index``) before binding; this looks among the pods
    bound to this node and not yet running for one whose GPUs fit the request (the right count,
    all available, every must-include device among them), the oldest first, and answers with its
    devices. Each pod is answered once. Any failure to ask the API server returns None, and the
    plugin chooses by itself.

    One call at a time (the plugin is the only one answering for its node): the kubelet may
    ask for two pods bound at once to the node in parallel, and without it both calls could
    read the same pending pod before either marks it answered and hand its GPUs out twice.
    With the extender's bind lock on the node (:data:`BIND_LOCK_ANNOTATION`) the pod that
    holds it is answered first, whatever its age, and :meth:`allocated` (the kubelet's
    ``Allocate``) releases the lock, letting the extender bind the next GPU pod there.

    Parameters
    ----------
    api : object
        A ``CoreV1Api``-like object.
    node : str
        This node's name.
    ids : list of str
        Device IDs in GPU index order (what the indices in the annotation refer to).
    """

    def __init__(self, api: Any, node: str, ids: list[str], timeout_s: float = 2.0):
        self.api = api
        self.node = node
        self.ids = ids
        self.timeout_s = timeout_s
        self.answered: BoundedDict[str, None] = BoundedDict(10_000)
        self.lock = threading.Lock()
        self.holder: str | None = None      # the lock holder answered last, until Allocate

    def __call__(self, available: list[str], must: list[str], size: int) -> list[str] | None:
        with self.lock:
            return self._answer(available, must, size)

    def _answer(self, available: list[str], must: list[str], size: int) -> list[str] | None:
        try:
            resp = self.api.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={self.node},status.phase=Pending",
                _preload_content=False, _request_timeout=self.timeout_s)
            items = KubeSource._json(resp).get("items") or []
        except Exception:
            return None
        try:
            held = node_lock(self.api, self.node)[0] if hasattr(self.api, "read_node") \
                else None
        except Exception:
            held = None
        avail, need = set(available), set(must)
        found = []
        for item in items:
            meta = item.get("metadata") or {} if isinstance(item, dict) else {}
            uid = meta.get("uid")
            text = (meta.get("annotations") or {}).get(GPU_INDEX_ANNOTATION, "")
            if not uid or uid in self.answered or not text:
                continue
            try:
                index = [int(x) for x in str(text).split("-") if x != ""]
            except ValueError:
                continue
            if len(index) != size or not all(0 <= i < len(self.ids) for i in index):
                continue
            devs = [self.ids[i] for i in index]
            if set(devs) <= avail and need <= set(devs):
                found.append((held is None or uid != held[0],
                              str(meta.get("creationTimestamp") or ""), uid, devs))
        if not found:
            return None
        first, _, uid, devs = min(found)
        self.holder = None if first else uid
        self.answered[uid] = None
        return devs

    def allocated(self) -> None:
        """The kubelet allocated devices: release the node's bind lock if the pod it names is
        the one answered last (its GPUs are handed out); never fails."""
        with self.lock:
            uid, self.holder = self.holder, None
            if uid is None:
                return
            try:
                held, version = node_lock(self.api, self.node)
                if held is not None and held[0] == uid:
                    set_node_lock(self.api, self.node, None, version)
            except Exception:
                pass                           # it goes stale after LOCK_TTL_S


class KubeWatch:
    """Nodes and the pods bound to them, mirrored from the API server: list, then watch.

    Each kind is listed once (its ``resourceVersion`` kept), then watched from that version
    with the official client's :class:`kubernetes.watch.Watch` (raw events,
    ``allowWatchBookmarks``;
    each watch request ends after ``watch_s`` and the next one resumes from the last version
    seen). When the API server answers 410 Gone (the version is older than it keeps), the kind
    is listed again; any other failure waits ``retry_s`` and lists again. After every change
    ``on_change(nodes, pods)`` gets the whole picture (pods of the active phases only), at
    most once per ``settle_s``, from one thread.

    Parameters
    ----------
    api : kubernetes.client.CoreV1Api
        The client (``KubeSource.api``).
    on_change : callable
        ``on_change(list of NodeInfo, list of PodInfo)``, e.g. ``Extender.sync`` under the
        server's lock.
    """

    def __init__(self, api: Any, on_change: Any, watch_s: int = 300, retry_s: float = 5.0,
                 settle_s: float = 0.05, log: Any = None):
        self.api = api
        self.on_change = on_change
        self.watch_s = watch_s
        self.retry_s = retry_s
        self.settle_s = settle_s
        self.log = log or (lambda msg: print(msg, file=sys.stderr))
        self.stop_event = threading.Event()
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, PodInfo] = {}
        self.listed = {"nodes": 0, "pods": 0}       # lists done (a relist after 410 counts)
        self._ready = {"nodes": False, "pods": False}
        self._changed = threading.Condition()
        self._dirty = False
        self._watches: list[Any] = []

    def start(self) -> list[threading.Thread]:
        """Start the two watch threads and the one that calls ``on_change``."""
        threads = [threading.Thread(target=self._run, args=(k,), daemon=True)
                   for k in ("nodes", "pods")]
        threads.append(threading.Thread(target=self._apply, daemon=True))
        for t in threads:
            t.start()
        return threads

    def stop(self) -> None:
        self.stop_event.set()
        for w in list(self._watches):
            w.stop()
        with self._changed:
            self._changed.notify_all()

    # -- one kind ---------------------------------------------------------------------------
    def _call(self, kind: str) -> tuple[Any, dict]:
        if kind == "nodes":
            return self.api.list_node, {}
        return self.api.list_pod_for_all_namespaces, {"field_selector": "spec.nodeName!="}

    def _put(self, kind: str, item: Any, gone: bool = False) -> None:
        """Store (or, ``gone``, drop) one object as the API server sent it."""
        if not isinstance(item, dict):
            return
        meta = item.get("metadata") or {}
        if kind == "nodes":
            name = str(meta.get("name") or "")
            if gone:
                self.nodes.pop(name, None)
                return
            try:
                self.nodes[name] = parse_node(item, f"node {name}")
            except InputError as exc:
                self.log(f"gpufabric: skipping a node: {exc}")
                self.nodes.pop(name, None)
            return
        uid = str(meta.get("uid") or "")
        phase = (item.get("status") or {}).get("phase")
        if gone or phase not in ACTIVE_PHASES:
            self.pods.pop(uid, None)
            return
        try:
            self.pods[uid] = parse_pod(item, f"pod {meta.get('namespace')}/{meta.get('name')}")
        except InputError as exc:
            self.log(f"gpufabric: skipping a pod: {exc}")
            self.pods.pop(uid, None)

    def _list(self, kind: str) -> str:
        func, kw = self._call(kind)
        data = KubeSource._json(func(_preload_content=False, **kw))
        with self._changed:
            if kind == "nodes":
                self.nodes = {}
            else:
                self.pods = {}
            for item in data.get("items") or []:
                self._put(kind, item)
            self.listed[kind] += 1
            self._ready[kind] = True
            self._mark()
        return str((data.get("metadata") or {}).get("resourceVersion") or "")

    def _run(self, kind: str) -> None:
        from kubernetes import watch
        from kubernetes.client.rest import ApiException

        class RawWatch(watch.Watch):
            """Events as the API server sent them: no model objects (whose validation would
            end the watch on one odd object); read by :mod:`gpufabric.k8s.objects`."""

            def unmarshal_event(self, data: Any, return_type: Any) -> Any:
                return super().unmarshal_event(data, None)

        while not self.stop_event.is_set():
            try:
                rv = self._list(kind)
                while not self.stop_event.is_set():
                    w = RawWatch()
                    self._watches.append(w)
                    func, kw = self._call(kind)
                    try:
                        for ev in w.stream(func, resource_version=rv, allow_watch_bookmarks=True,
                                           timeout_seconds=self.watch_s, **kw):
                            obj = ev.get("raw_object") or {}
                            rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                            if ev.get("type") == "BOOKMARK":
                                continue
                            with self._changed:
                                self._put(kind, obj, gone=ev.get("type") == "DELETED")
                                self._mark()
                    finally:
                        self._watches.remove(w)
            except ApiException as exc:
                if exc.status == 410:             # too old: list again, at once
                    continue
                self.log(f"gpufabric: watching {kind} failed: {exc.status} {exc.reason}")
                self.stop_event.wait(self.retry_s)
            except Exception as exc:   # keep serving on the last picture
                self.log(f"gpufabric: watching {kind} failed: {exc}")
                self.stop_event.wait(self.retry_s)

    # -- the picture -----------------------------------------------------------------------
    def _mark(self) -> None:
        self._dirty = True
        self._changed.notify_all()

    def _apply(self) -> None:
        while not self.stop_event.is_set():
            with self._changed:
                while not (self._dirty and all(self._ready.values())):
                    if self.stop_event.is_set():
                        return
                    self._changed.wait(1.0)
            self.stop_event.wait(self.settle_s)     # let a burst of events land
            with self._changed:
                self._dirty = False
                nodes, pods = list(self.nodes.values()), list(self.pods.values())
            try:
                self.on_change(nodes, pods)
            except Exception as exc:
                self.log(f"gpufabric: applying the cluster's state failed: {exc}")
