"""Kubernetes Pod and Node objects (JSON as the API server and kube-scheduler send them) read
into what the scheduler layer understands: a :class:`~gpufabric.scheduler.state.Request` with its
job kind, priority, gang and accepted GPU models, and a node row with its GPU model and system.

GPU nodes are read from either label family:

- NVIDIA GPU Feature Discovery (GFD, NVIDIA/k8s-device-plugin v0.20.0): ``nvidia.com/gpu.product``
  (the NVML name sanitised: characters outside ``[A-Za-z0-9-_. ]`` dropped, runs of spaces turned
  into ``-``; ``-SHARED`` appended under time-slicing/MPS) and the ``nvidia.com/gpu`` capacity.
  The product maps to the catalog GPU whose name or alias sanitises to it (the catalog keeps the
  product name nvidia-smi prints as an alias), so no second table of names exists;
- the Alibaba openb trace (cluster-trace-gpu-v2023): ``alibabacloud.com/gpu-card-model`` and the
  ``alibabacloud.com/gpu-count`` capacity; the model names (``V100M32``, ``T4``, ``G2``...) are
  those :mod:`gpufabric.scheduler.nodetopo` builds.

A node annotation ``gpufabric.dev/system`` (a preset such as ``nvlink-bridge-pairs``, a spec file
or an inline spec) says how the GPUs are wired when the labels cannot (PCIe cards with NVLink
bridges); otherwise GFD nodes get the catalog default for their GPU (SXM parts with 8 or more
links on NVSwitch, others on PCIe).

Pods ask for GPUs with the ``nvidia.com/gpu`` resource (whole GPUs) or the openb annotations
``alibabacloud.com/gpu-count`` / ``alibabacloud.com/gpu-milli`` (a share of one GPU, 1..1000) and
``alibabacloud.com/gpu-card-model`` (accepted models, ``|``-separated). Gangs: pods with the same
``scheduling.x-k8s.io/pod-group`` label (kubernetes-sigs/scheduler-plugins coscheduling) in one
namespace; the gang's size is the ``gpufabric.dev/gang-size`` annotation (1 if absent; the
extender may ask the PodGroup's ``minMember`` instead). The job
kind is the ``gpufabric.dev/kind`` label (training, inference, service, batch), else training for
GPU pods and service for the rest, as :func:`gpufabric.scheduler.jobs.load_jobs` decides. A
multi-GPU pod may ask that its GPUs be joined by at least ``gpufabric.dev/min-bw-GBps`` (the
bottleneck between any two of them, GB/s per direction: 100 keeps it on NVLink).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import cache
from typing import Any

from gpufabric import catalog
from gpufabric.errors import InputError, unknown_name
from gpufabric.scheduler.jobs import KINDS
from gpufabric.scheduler.state import MILLI, Request

GPU_RESOURCE = "nvidia.com/gpu"
GFD_PRODUCT = "nvidia.com/gpu.product"
OPENB_MODEL = "alibabacloud.com/gpu-card-model"
OPENB_COUNT = "alibabacloud.com/gpu-count"
OPENB_MILLI = "alibabacloud.com/gpu-milli"
OPENB_INDEX = "alibabacloud.com/gpu-index"
POD_GROUP = "scheduling.x-k8s.io/pod-group"
GANG_SIZE = "gpufabric.dev/gang-size"
KIND_LABEL = "gpufabric.dev/kind"
SYSTEM_ANNOTATION = "gpufabric.dev/system"
GPU_INDEX_ANNOTATION = "gpufabric.dev/gpu-index"
MIN_BW_ANNOTATION = "gpufabric.dev/min-bw-GBps"

_SUFFIX = {"": 1, "m": Decimal("0.001"), "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
           "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40,
           "Pi": 2**50, "Ei": 2**60}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


def quantity(value: Any, where: str) -> Decimal:
    """A Kubernetes resource quantity (``"48"``, ``"480Gi"``, ``"500m"``, ``1e3``) as a number.

    Examples
    --------
    >>> quantity("480Gi", "x") == 480 * 2**30, quantity("500m", "x")
    (True, Decimal('0.500'))
    """
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise InputError(f"'{value}' is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)",
                         field=where)
    try:
        return Decimal(m.group(1)) * Decimal(str(_SUFFIX[m.group(2) or ""]))
    except InvalidOperation:
        raise InputError(f"'{value}' is not a Kubernetes quantity", field=where) from None


def _dict(obj: Any, key: str, where: str) -> dict:
    v = obj.get(key) if isinstance(obj, dict) else None
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise InputError(f"expected an object, got {type(v).__name__}", field=f"{where}.{key}")
    return v


def sanitize_product(name: str) -> str:
    """An NVML product name as GFD writes it into ``nvidia.com/gpu.product``.

    Examples
    --------
    >>> sanitize_product("NVIDIA A100 80GB PCIe")
    'NVIDIA-A100-80GB-PCIe'
    """
    kept = re.sub(r"[^A-Za-z0-9\-_. ]", "", name)
    return re.sub(r" +", "-", kept.strip())


@cache
def _products() -> dict[str, str]:
    out: dict[str, str] = {}
    for obj in catalog.table("gpu").values():
        for alias in (obj.name, *obj.aliases):
            out.setdefault(sanitize_product(str(alias)).lower(), obj.name)
    return out


def gpu_from_product(label: str, where: str = GFD_PRODUCT) -> str:
    """The catalog GPU name of a GFD product label (``-SHARED`` and MIG suffixes ignored).

    Examples
    --------
    >>> gpu_from_product("NVIDIA-H100-80GB-HBM3"), gpu_from_product("Tesla-T4-SHARED")
    ('H100-SXM', 'T4')
    """
    base = re.sub(r"-SHARED$", "", label)
    base = re.sub(r"-MIG-\d+g\.\d+gb$", "", base)
    hit = _products().get(base.lower())
    if hit is None:
        raise unknown_name("GPU product", label, sorted({sanitize_product(a) for a in (
            a for o in catalog.table("gpu").values() for a in o.aliases) if " " in a}),
            field=where)
    return hit


@dataclass(frozen=True)
class NodeInfo:
    """One Node as the scheduler layer sees it.

    ``model`` is the catalog GPU (GFD) or the openb model; ``system`` the preset / spec that
    describes its wiring ("" for openb models, built by :mod:`~gpufabric.scheduler.nodetopo`);
    ``unhealthy`` GPUs are capacity minus allocatable.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str
    system: str
    unhealthy: int
    ready: bool

    @property
    def pool(self) -> str:
        if not self.gpus:
            return "cpu"
        return "tpu" if self.model.upper().startswith("TPU") else "gpu"


def _int_quantity(res: dict, key: str, where: str, scale: int = 1) -> int:
    if key not in res:
        return 0
    return int(quantity(res[key], f"{where}.{key}") * scale)


def _named(obj: Any, kind: str, where: str) -> tuple[dict, str]:
    """The metadata of a Kubernetes object of ``kind`` and its name (one line if either lacks)."""
    if not isinstance(obj, dict):
        raise InputError(f"expected a {kind} object", field=where)
    meta = _dict(obj, "metadata", where)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InputError(f"a {kind} needs metadata.name", field=f"{where}.metadata.name")
    return meta, name


def parse_node(node: Any, where: str = "Node") -> NodeInfo:
    """Read a ``v1.Node`` (as JSON) into a :class:`NodeInfo`.

    Raises
    ------
    InputError
        No name, a malformed quantity, or a GPU product label that maps to no catalog GPU.
    """
    meta, name = _named(node, "Node", where)
    where = f"Node {name}"
    labels = _dict(meta, "labels", where)
    ann = _dict(meta, "annotations", where)
    status = _dict(node, "status", where)
    cap = _dict(status, "capacity", f"{where}.status")
    alloc = _dict(status, "allocatable", f"{where}.status") or cap
    cpu = _int_quantity(alloc, "cpu", f"{where}.status.allocatable", 1000)
    mem = int(quantity(alloc.get("memory", 0), f"{where}.status.allocatable.memory") / 2**20)
    if GPU_RESOURCE in cap or GFD_PRODUCT in labels:
        gpus = _int_quantity(cap, GPU_RESOURCE, f"{where}.status.capacity")
        healthy = _int_quantity(alloc, GPU_RESOURCE, f"{where}.status.allocatable")
        product = labels.get(GFD_PRODUCT)
        if gpus and not product:
            raise InputError(f"the node has {gpus} GPUs but no {GFD_PRODUCT} label (run GPU "
                             "Feature Discovery)", field=f"{where}.metadata.labels")
        model = gpu_from_product(str(product), f"{where}.metadata.labels.{GFD_PRODUCT}") \
            if gpus else ""
        system = ann.get(SYSTEM_ANNOTATION) or (f"gpu={model},gpus_per_node={gpus}"
                                                if gpus else "")
    elif OPENB_COUNT in cap or OPENB_MODEL in labels:
        gpus = _int_quantity(cap, OPENB_COUNT, f"{where}.status.capacity")
        healthy = _int_quantity(alloc, OPENB_COUNT, f"{where}.status.allocatable")
        model = str(labels.get(OPENB_MODEL, "")) if gpus else ""
        if gpus and not model:
            raise InputError(f"a node with {OPENB_COUNT} needs the {OPENB_MODEL} label",
                             field=f"{where}.metadata.labels")
        system = ann.get(SYSTEM_ANNOTATION, "")
    else:
        gpus = healthy = 0
        model = system = ""
    ready = True
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Ready":
            ready = c.get("status") == "True"
    unsched = bool(_dict(node, "spec", where).get("unschedulable"))
    return NodeInfo(name, cpu, mem, gpus, model, system, max(0, gpus - healthy),
                    ready and not unsched)


@dataclass(frozen=True)
class PodInfo:
    """One Pod as the scheduler layer sees it."""

    uid: str
    namespace: str
    name: str
    request: Request
    models: tuple[str, ...]
    kind: str
    priority: int
    group: str          # "" when not in a gang
    gang: int
    node: str           # spec.nodeName ("" while pending)
    gpu_index: tuple[int, ...]
    min_bw_GBps: float = 0.0    # the chosen GPUs' bottleneck must reach this (multi-GPU pods)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _containers(spec: dict, where: str) -> list[dict]:
    cs = spec.get("containers") or []
    if not isinstance(cs, list):
        raise InputError("expected a list", field=f"{where}.spec.containers")
    return [c for c in cs if isinstance(c, dict)]


def _requests(c: dict) -> dict:
    res = c.get("resources") or {}
    if not isinstance(res, dict):
        return {}
    out = dict(res.get("limits") or {})
    out.update(res.get("requests") or {})   # a request defaults to its limit
    return out


def parse_pod(pod: Any, where: str = "Pod") -> PodInfo:
    """Read a ``v1.Pod`` (as JSON) into a :class:`PodInfo`.

    The pod's request is the sum over its containers (init containers: the largest, as
    Kubernetes counts them). Raises :class:`InputError` on a malformed pod.

    Examples
    --------
    >>> p = parse_pod({"metadata": {"name": "a", "namespace": "ns", "uid": "u1"},
    ...                "spec": {"containers": [{"resources": {"limits": {
    ...                    "nvidia.com/gpu": "2", "cpu": "8", "memory": "64Gi"}}}]}})
    >>> p.request, p.kind
    (Request(cpu=8000, mem=65536, num_gpu=2, gpu_milli=1000), 'training')
    """
    meta, name = _named(pod, "Pod", where)
    ns = str(meta.get("namespace") or "default")
    where = f"Pod {ns}/{name}"
    uid = str(meta.get("uid") or f"{ns}/{name}")
    labels = _dict(meta, "labels", where)
    ann = _dict(meta, "annotations", where)
    spec = _dict(pod, "spec", where)
    cpu = mem = gpus = 0
    for c in _containers(spec, where):
        r = _requests(c)
        cpu += _int_quantity(r, "cpu", f"{where}.resources", 1000)
        mem += int(quantity(r.get("memory", 0), f"{where}.resources.memory") / 2**20)
        gpus += _int_quantity(r, GPU_RESOURCE, f"{where}.resources")
    milli = MILLI
    if OPENB_COUNT in ann or OPENB_MILLI in ann:
        gpus = _ann_int(ann, OPENB_COUNT, where, 1 if OPENB_MILLI in ann else 0)
        milli = _ann_int(ann, OPENB_MILLI, where, MILLI)
        if gpus and not 0 < milli <= MILLI:
            raise InputError("must be 1..1000 (milli of one GPU)",
                             field=f"{where}.metadata.annotations.{OPENB_MILLI}")
        if gpus > 1 and milli < MILLI:
            raise InputError("a GPU share (gpu-milli < 1000) needs gpu-count 1",
                             field=f"{where}.metadata.annotations.{OPENB_MILLI}")
    models = tuple(sorted(m for m in str(ann.get(OPENB_MODEL, "")).split("|") if m))
    kind = labels.get(KIND_LABEL) or ("training" if gpus else "service")
    if kind not in KINDS:
        raise unknown_name("job kind", kind, KINDS, field=f"{where}.metadata.labels.{KIND_LABEL}")
    prio = spec.get("priority") or 0
    if not isinstance(prio, int):
        raise InputError("expected an integer", field=f"{where}.spec.priority")
    group = str(labels.get(POD_GROUP, ""))
    gang = _ann_int(ann, GANG_SIZE, where, 1) if group else 1
    if gang < 1:
        raise InputError("must be at least 1", field=f"{where}.metadata.annotations.{GANG_SIZE}")
    idx_text = ann.get(GPU_INDEX_ANNOTATION) or ann.get(OPENB_INDEX) or ""
    try:
        index = tuple(int(x) for x in str(idx_text).split("-") if x != "")
    except ValueError:
        raise InputError(f"'{idx_text}' is not GPU indices like 0-1-2",
                         field=f"{where}.metadata.annotations") from None
    node = str(spec.get("nodeName") or "")
    min_bw = 0.0
    if MIN_BW_ANNOTATION in ann:
        try:
            min_bw = float(str(ann[MIN_BW_ANNOTATION]))
        except ValueError:
            min_bw = -1.0
        if not min_bw >= 0:
            raise InputError(f"'{ann[MIN_BW_ANNOTATION]}' is not a bandwidth in GB/s (a number "
                             ">= 0)", field=f"{where}.metadata.annotations.{MIN_BW_ANNOTATION}")
    return PodInfo(uid, ns, name, Request(cpu, mem, gpus, milli if gpus else 0), models, kind,
                   prio, f"{ns}/{group}" if group else "", gang, node, index, min_bw)


def _ann_int(ann: dict, key: str, where: str, default: int) -> int:
    if key not in ann:
        return default
    try:
        return int(str(ann[key]).strip())
    except ValueError:
        raise InputError(f"'{ann[key]}' is not an integer",
                         field=f"{where}.metadata.annotations.{key}") from None
