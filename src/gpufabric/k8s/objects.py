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
from decimal import ROUND_CEILING, Decimal
from functools import cache, lru_cache
from typing import Any

from gpufabric import catalog
from gpufabric.errors import InputError, unknown_name
from gpufabric.scheduler.cluster import MAX_GPUS, node_system
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

#: Suffixes of a Kubernetes quantity and what they multiply (k8s.io/apimachinery
#: ``pkg/api/resource/suffix.go``: decimal n u m "" k M G T P E, binary Ki..Ei).
_SUFFIX = {"n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("0.001"), "": Decimal(1),
           "k": Decimal(10**3), "M": Decimal(10**6), "G": Decimal(10**9), "T": Decimal(10**12),
           "P": Decimal(10**15), "E": Decimal(10**18), "Ki": Decimal(2**10),
           "Mi": Decimal(2**20), "Gi": Decimal(2**30), "Ti": Decimal(2**40),
           "Pi": Decimal(2**50), "Ei": Decimal(2**60)}
#: The quantity grammar of ``pkg/api/resource/quantity.go``: a signed number (``5``, ``5.``,
#: ``.5``, ``5.5``), then one suffix or a decimal exponent (``e3``, ``E-2``); no spaces. A
#: suffix is tried before an exponent, so ``1E`` is one exa.
_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
                       r"(?:(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])|[eE]([+-]?[0-9]{1,4}))?")
#: Largest value of a quantity read (in the unit it is kept in: CPU milli, memory MiB, GPUs):
#: Kubernetes keeps a quantity's milli value in an int64, so more is not a real request.
MAX_QUANTITY = 2**63 - 1
#: Most GPUs one pod or node may have: the scheduler layer's limit for a node
#: (:data:`gpufabric.scheduler.cluster.MAX_GPUS`); more is refused, not modelled.
MAX_GPUS_PER_NODE = MAX_GPUS
#: Most members of a gang (``gpufabric.dev/gang-size``): 10,000 pods, 80,000 GPUs in 8s.
MAX_GANG = 10_000


def quantity(value: Any, where: str) -> Decimal:
    """A Kubernetes resource quantity (``"48"``, ``"480Gi"``, ``"500m"``, ``1e3``) as a number.

    Parsed as Kubernetes parses it (k8s.io/apimachinery ``resource.ParseQuantity``): anything
    else, such as ``"2 "``, ``"1e3Ki"``, ``"0x10"`` or ``True``, is an :class:`InputError`.

    Examples
    --------
    >>> quantity("480Gi", "x") == 480 * 2**30, quantity("500m", "x"), quantity("1E", "x")
    (True, Decimal('0.500'), Decimal('1000000000000000000'))
    """
    scalar = isinstance(value, (str, int, float, Decimal)) and not isinstance(value, bool)
    text = str(value) if scalar else ""
    m = _QUANTITY.fullmatch(text)
    if not m:
        shown = f"'{text[:40]}'" if scalar else f"a {type(value).__name__}"
        raise InputError(f"{shown} is not a Kubernetes quantity (e.g. 4, 500m, 16Gi)",
                         field=where)
    number = Decimal(m.group(1))
    if m.group(3) is not None:
        return number.scaleb(int(m.group(3)))
    return number * _SUFFIX[m.group(2) or ""]


def amount(value: Any, where: str, scale: int | Decimal = 1, whole: bool = False,
           most: int = MAX_QUANTITY) -> int:
    """A request or capacity: a quantity times ``scale``, rounded up as Kubernetes rounds
    (``MilliValue``), from 0 to ``most``; ``whole``: no fraction allowed (an extended resource
    such as ``nvidia.com/gpu``, which Kubernetes validation requires to be an integer).

    Examples
    --------
    >>> amount("1500m", "cpu", 1000), amount("0.0001", "cpu", 1000), amount("2", "gpu", whole=True)
    (1500, 1, 2)
    >>> amount("2.5", "gpu", whole=True)
    Traceback (most recent call last):
    ...
    gpufabric.errors.InputError: gpu: '2.5': an extended resource takes whole numbers only
    """
    q = quantity(value, where)
    if q < 0:
        raise InputError(f"'{value}' is negative; a request or capacity is 0 or more",
                         field=where)
    if whole and q != q.to_integral_value():
        raise InputError(f"'{value}': an extended resource takes whole numbers only",
                         field=where)
    v = q * scale
    if v > most:
        raise InputError(f"'{str(value)[:40]}' is over the largest allowed ({most:,})",
                         field=where)
    return int(v.to_integral_value(rounding=ROUND_CEILING))


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


#: memory is kept in MiB
_PER_MIB = Decimal(1) / Decimal(2**20)


def _res(res: dict, key: str, where: str, scale: int | Decimal = 1, whole: bool = False,
         most: int = MAX_QUANTITY) -> int:
    """:func:`amount` of ``res[key]`` (0 when absent)."""
    if key not in res:
        return 0
    return amount(res[key], f"{where}.{key}", scale, whole, most)


def _gpus(res: dict, key: str, where: str) -> int:
    """A whole number of GPUs, at most :data:`MAX_GPUS_PER_NODE`."""
    return _res(res, key, where, whole=True, most=MAX_GPUS_PER_NODE)


@lru_cache(maxsize=256)
def _system_gpus(text: str) -> int | str:
    """GPUs per node of a ``gpufabric.dev/system`` annotation (a preset or an inline spec),
    or why it cannot be read. Never a file: an annotation is not a path on this host."""
    from gpufabric.topology import presets
    if text not in presets.names() and "=" not in text:
        return (f"'{text[:60]}' is not a system preset or inline spec (known presets: "
                f"{', '.join(presets.names())})")
    try:
        g = node_system(text).gpus()
    except InputError as exc:
        return str(exc)
    return len([d for d in g if d.node == g[0].node]) if g else 0


def _check_system(text: Any, gpus: int, where: str) -> str:
    """The node's system annotation, checked: it must describe ``gpus`` GPUs per node."""
    field = f"{where}.metadata.annotations.{SYSTEM_ANNOTATION}"
    if not isinstance(text, str) or len(text) > 4096:
        raise InputError("expected a preset name or an inline spec of at most 4096 characters",
                         field=field)
    got = _system_gpus(text)
    if isinstance(got, str):
        raise InputError(got, field=field)
    if got != gpus:
        raise InputError(f"'{text[:60]}' has {got} GPUs per node; the node has {gpus}",
                         field=field)
    return text


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
    cpu = _res(alloc, "cpu", f"{where}.status.allocatable", 1000)
    mem = _res(alloc, "memory", f"{where}.status.allocatable", _PER_MIB)
    if GPU_RESOURCE in cap or GFD_PRODUCT in labels:
        gpus = _gpus(cap, GPU_RESOURCE, f"{where}.status.capacity")
        healthy = _gpus(alloc, GPU_RESOURCE, f"{where}.status.allocatable")
        product = labels.get(GFD_PRODUCT)
        if gpus and not product:
            raise InputError(f"the node has {gpus} GPUs but no {GFD_PRODUCT} label (run GPU "
                             "Feature Discovery)", field=f"{where}.metadata.labels")
        model = gpu_from_product(str(product), f"{where}.metadata.labels.{GFD_PRODUCT}") \
            if gpus else ""
        system = ann.get(SYSTEM_ANNOTATION) or (f"gpu={model},gpus_per_node={gpus}"
                                                if gpus else "")
    elif OPENB_COUNT in cap or OPENB_MODEL in labels:
        gpus = _gpus(cap, OPENB_COUNT, f"{where}.status.capacity")
        healthy = _gpus(alloc, OPENB_COUNT, f"{where}.status.allocatable")
        model = str(labels.get(OPENB_MODEL, "")) if gpus else ""
        if gpus and not model:
            raise InputError(f"a node with {OPENB_COUNT} needs the {OPENB_MODEL} label",
                             field=f"{where}.metadata.labels")
        system = ann.get(SYSTEM_ANNOTATION, "")
    else:
        gpus = healthy = 0
        model = system = ""
    if SYSTEM_ANNOTATION in ann and gpus:
        system = _check_system(system, gpus, where)
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


def _containers(spec: dict, part: str, where: str) -> list[dict]:
    cs = spec.get(part) or []
    if not isinstance(cs, list):
        raise InputError("expected a list", field=f"{where}.spec.{part}")
    return [c for c in cs if isinstance(c, dict)]


def _requests(c: dict, where: str) -> dict:
    """A container's requests, each defaulting to its limit. An extended resource (GPUs) may
    not ask a request other than its limit (Kubernetes validation: not overcommittable)."""
    res = c.get("resources") or {}
    if not isinstance(res, dict):
        return {}
    limits, requests = res.get("limits") or {}, res.get("requests") or {}
    for part, v in (("limits", limits), ("requests", requests)):
        if not isinstance(v, dict):
            raise InputError(f"expected an object, got {type(v).__name__}",
                             field=f"{where}.resources.{part}")
    for key in (GPU_RESOURCE,):
        if key in limits and key in requests and str(limits[key]) != str(requests[key]) \
                and quantity(limits[key], f"{where}.resources.limits.{key}") != \
                quantity(requests[key], f"{where}.resources.requests.{key}"):
            raise InputError(f"request {requests[key]} differs from limit {limits[key]}; an "
                             "extended resource's request must equal its limit",
                             field=f"{where}.resources.{key}")
    return {**limits, **requests}


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
    totals = []
    for part in ("containers", "initContainers"):
        got = [0, 0, 0]
        for c in _containers(spec, part, where):
            r = _requests(c, where)
            got[0] += _res(r, "cpu", f"{where}.resources", 1000)
            got[1] += _res(r, "memory", f"{where}.resources", _PER_MIB)
            got[2] += _gpus(r, GPU_RESOURCE, f"{where}.resources")
            if part == "initContainers":     # they run one at a time: the largest counts
                totals.append(got)
                got = [0, 0, 0]
        if part == "containers":
            totals.append(got)
    cpu, mem, gpus = (max(t[k] for t in totals) for k in range(3))
    for value, what, most in ((cpu, "cpu", MAX_QUANTITY), (mem, "memory", MAX_QUANTITY),
                              (gpus, GPU_RESOURCE, MAX_GPUS_PER_NODE)):
        if value > most:
            raise InputError(f"{value:,} over its containers; at most {most:,}",
                             field=f"{where}.resources.{what}")
    milli = MILLI
    if OPENB_COUNT in ann or OPENB_MILLI in ann:
        gpus = _ann_int(ann, OPENB_COUNT, where, 1 if OPENB_MILLI in ann else 0,
                        0, MAX_GPUS_PER_NODE)
        milli = _ann_int(ann, OPENB_MILLI, where, MILLI, 0, MILLI)
        if gpus and not milli:
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
    if not isinstance(prio, int) or isinstance(prio, bool) or not -2**31 <= prio < 2**31:
        raise InputError("expected an integer (int32, as Kubernetes keeps it)",
                         field=f"{where}.spec.priority")
    group = str(labels.get(POD_GROUP, ""))
    gang = _ann_int(ann, GANG_SIZE, where, 1, 1, MAX_GANG) if group else 1
    idx_text = str(ann.get(GPU_INDEX_ANNOTATION) or ann.get(OPENB_INDEX) or "")
    parts = [x for x in idx_text.split("-") if x != ""]
    if not all(x.isdigit() and int(x) < MAX_GPUS_PER_NODE for x in parts[:MAX_GPUS_PER_NODE]) \
            or len(parts) > MAX_GPUS_PER_NODE or len(set(parts)) < len(parts):
        raise InputError(f"'{idx_text[:40]}' is not distinct GPU indices like 0-1-2 (each "
                         f"below {MAX_GPUS_PER_NODE})", field=f"{where}.metadata.annotations")
    index = tuple(int(x) for x in parts)
    node = str(spec.get("nodeName") or "")
    min_bw = 0.0
    if MIN_BW_ANNOTATION in ann:
        try:
            min_bw = float(str(ann[MIN_BW_ANNOTATION]))
        except ValueError:
            min_bw = -1.0
        if not 0 <= min_bw < float("inf"):
            raise InputError(f"'{ann[MIN_BW_ANNOTATION]}' is not a bandwidth in GB/s (a number "
                             ">= 0)", field=f"{where}.metadata.annotations.{MIN_BW_ANNOTATION}")
    return PodInfo(uid, ns, name, Request(cpu, mem, gpus, milli if gpus else 0), models, kind,
                   prio, f"{ns}/{group}" if group else "", gang, node, index, min_bw)


def _ann_int(ann: dict, key: str, where: str, default: int, least: int, most: int) -> int:
    """An integer annotation from ``least`` to ``most`` (``default`` when absent)."""
    if key not in ann:
        return default
    text = str(ann[key]).strip()
    field = f"{where}.metadata.annotations.{key}"
    if not re.fullmatch(r"[+-]?[0-9]{1,19}", text):
        raise InputError(f"'{text[:40]}' is not an integer", field=field)
    value = int(text)
    if not least <= value <= most:
        raise InputError(f"{value} is outside {least}..{most:,}", field=field)
    return value
