"""The system spec's shape as a declarative schema (pydantic), with the project's error line.

:func:`check` validates what a user wrote (keys, types, ranges, choices) against
:class:`Spec` before :func:`gpufabric.topology.build.normalize_spec` fills in defaults and looks
names up in the catalog. The first problem becomes one :class:`~gpufabric.errors.InputError`
naming the file, the dotted field and what is allowed; the allowed text of a field is its
``description`` in the schema, so the schema is the one place that says what a key takes.

Examples
--------
>>> check({"gpu": "H100-SXM", "host": {"sockets": 0}}, file="box.yaml")
Traceback (most recent call last):
...
gpufabric.errors.InputError: box.yaml: host.sockets: expected an integer >= 1 and <= 72, got 0
>>> check({"gpu": "H100-SXM", "scale_up": "warp"})
Traceback (most recent call last):
...
gpufabric.errors.InputError: scale_up: got 'warp'; allowed: nvswitch, nvlink-mesh, \
nvlink-bridge, xgmi, pcie, sli, crossfire, none
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeAlias, get_args

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError

from gpufabric.errors import InputError

SCALE_UP = ("nvswitch", "nvlink-mesh", "nvlink-bridge", "xgmi", "pcie", "sli", "crossfire", "none")
MESHES = ("full", "hybrid-cube")
SWITCH_LAYOUTS = ("dual-root", "single-root", "cascade")
ATTACH = ("pcie", "c2c")
FABRICS = ("rail-optimized", "fat-tree")

ScaleUp = Literal["nvswitch", "nvlink-mesh", "nvlink-bridge", "xgmi", "pcie", "sli", "crossfire",
                  "none"]
assert get_args(ScaleUp) == SCALE_UP


def _ints(minimum: int, maximum: int | None = None) -> Any:
    """Pydantic constraints of an integer key, with the allowed text the error line shows."""
    allowed = f"an integer >= {minimum}" + (f" and <= {maximum}" if maximum is not None else "")
    return Field(strict=True, ge=minimum, le=maximum, description=allowed)


#: Sizes beyond any machine built, refused before anything is built (a runaway otherwise):
#: the largest NVLink domain announced is NVL576 (576 GPUs); the most NICs on one server is
#: 32 (AWS p5: 32 EFA cards), the most CPU sockets of one server 36 (a 72-GPU Grace domain
#: written as one node).
MAX_GPUS_PER_DOMAIN, MAX_NICS, MAX_SOCKETS, MAX_PCIE_SWITCHES = 576, 64, 72, 64
#: Most downlinks per uplink of a switch: 511 of the 512 ports of the catalog's largest switch
#: (Spectrum-4 SN5600 at 100 GbE) down, one up.
MAX_OVERSUBSCRIPTION = 511

Pos: TypeAlias = Annotated[int, _ints(1)]
DomainGPUs: TypeAlias = Annotated[int, _ints(1, MAX_GPUS_PER_DOMAIN)]
Sockets: TypeAlias = Annotated[int, _ints(1, MAX_SOCKETS)]
PcieSwitches: TypeAlias = Annotated[int, _ints(0, MAX_PCIE_SWITCHES)]
NumaPerSocket: TypeAlias = Annotated[int, _ints(1, 16)]
Links: TypeAlias = Annotated[int, _ints(1, 64)]
Nics: TypeAlias = Annotated[int, _ints(0, MAX_NICS)]
Tiers: TypeAlias = Annotated[int, _ints(1, 3)]
Name = Annotated[str | int | float, Field(description="a catalog name")]
Over = Annotated[float, Field(strict=False, ge=1, le=MAX_OVERSUBSCRIPTION,
                              description=f"a number >= 1 and <= {MAX_OVERSUBSCRIPTION} "
                                          "(downlinks:uplinks)")]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Host(_Section):
    """``host:``: the CPUs and the PCIe switches of a server."""

    cpu: Name | None = None
    sockets: Sockets | None = None
    pcie_switches: PcieSwitches | None = None
    switch_layout: Literal["dual-root", "single-root", "cascade"] | None = None
    switch: Name | None = None
    numa_per_socket: NumaPerSocket | None = None
    attach: Literal["pcie", "c2c"] | None = None


class Fabric(_Section):
    """``fabric:``: the scale-out network (docs/fabrics.md)."""

    topology: Literal["rail-optimized", "fat-tree"] | None = None
    oversubscription: (Annotated[Over | list[Over], Field(
        description=f"a number >= 1 and <= {MAX_OVERSUBSCRIPTION} (downlinks:uplinks) "
                    "or a list [leaf, spine]")] | None) = None
    switch: Name | None = None
    nodes_per_leaf: Pos | None = None
    rails_per_leaf: Pos | None = None
    pod_nodes: Pos | None = None
    tiers: Tiers | None = None
    spine_switch: Name | None = None
    core_switch: Name | None = None


class Supernode(_Section):
    """``supernode:``: an NVLink domain that spans servers (docs/systems.md)."""

    gpus_per_tray: DomainGPUs | None = None
    switch: Name | None = None
    switch_trays: Pos | None = None
    chips_per_tray: Pos | None = None
    ports_per_chip: Pos | None = None
    links_per_gpu: Links | None = None
    racks: Pos | None = None


class Spec(_Section):
    """The shorthand of docs/systems.md, key by key, in the order they are checked."""

    gpu: Annotated[Any, Field(description="a GPU model or a list of them")]
    gpus_per_node: DomainGPUs | None = None
    nodes: Pos | None = None
    supernode: Supernode | None = None
    nvlink_domain: DomainGPUs | None = None
    scale_up: ScaleUp | None = None
    mesh: Literal["full", "hybrid-cube"] | None = None
    nvlink_links: Links | None = None
    bridge: Name | None = None
    host: Host | None = None
    pcie_gen: Annotated[int, Field(strict=True, description="3, 4, 5 or 6")] | None = None
    p2p: Annotated[StrictBool, Field(description="true or false")] | None = None
    nics_per_node: Nics | None = None
    nic: Name | None = None
    fabric: Fabric | None = None
    name: Any = None
    description: Any = None


SPEC_KEYS = tuple(Spec.model_fields)
HOST_KEYS = tuple(Host.model_fields)
FABRIC_KEYS = tuple(Fabric.model_fields)
SUPERNODE_KEYS = tuple(Supernode.model_fields)
_SECTIONS: dict[str, type[BaseModel]] = {"host": Host, "fabric": Fabric, "supernode": Supernode}


def _allowed(model: type[BaseModel], name: str) -> str:
    info = model.model_fields[name]
    desc = info.description
    if desc is None:
        for meta in getattr(info, "metadata", []):
            desc = getattr(meta, "description", None) or desc
    if desc is None:   # Optional[Annotated[...]]: the description sits on the inner type
        for arg in get_args(info.annotation):
            for meta in getattr(arg, "__metadata__", ()):
                desc = getattr(meta, "description", None) or desc
    return desc or "a value of the right type"


def _model_at(loc: tuple[Any, ...]) -> tuple[type[BaseModel], str]:
    model: type[BaseModel] = Spec
    for part in loc[:-1]:
        if isinstance(part, str) and part in _SECTIONS:
            model = _SECTIONS[part]
    return model, str(loc[-1]) if loc else ""


def _field_path(loc: tuple[Any, ...]) -> str:
    """Dotted path of a pydantic location, without its type-union tags."""
    keys = set(SPEC_KEYS) | set(HOST_KEYS) | set(FABRIC_KEYS) | set(SUPERNODE_KEYS)
    return ".".join(p for p in loc if isinstance(p, str) and p in keys)


def _message(err: Any, value: Any) -> str:
    loc = tuple(p for p in err["loc"] if isinstance(p, str) and p in
                set(SPEC_KEYS) | set(HOST_KEYS) | set(FABRIC_KEYS) | set(SUPERNODE_KEYS))
    model, name = _model_at(loc)
    etype = err["type"]
    if etype == "literal_error":
        choices = err.get("ctx", {}).get("expected", "")
        choices = choices.replace("'", "").replace(" or ", ", ")
        return f"got {value!r}; allowed: {choices}"
    if etype in ("model_type", "model_attributes_type", "dict_type") and name in _SECTIONS:
        return f"expected a mapping with keys {', '.join(_SECTIONS[name].model_fields)}, got " \
               f"{value!r}"
    allowed = _allowed(model, name) if name in model.model_fields else "a valid value"
    shown = value if etype in ("greater_than_equal", "less_than_equal") else repr(value)
    return f"expected {allowed}, got {shown}"


def check(spec: Any, file: str | None = None) -> Spec:
    """Validate the shape of a spec; raise one :class:`InputError` for the first problem.

    Unknown keys are reported first (all of one mapping at once, with the allowed keys), then
    a missing ``gpu``, then the first wrong value in the order of :class:`Spec`.
    """
    if not isinstance(spec, dict):
        raise InputError("a system spec must be a mapping of keys to values", file=file)
    levels: list[tuple[str, Any, type[BaseModel]]] = [("", spec, Spec)] + [
        (f"{k}.", spec.get(k), m) for k, m in _SECTIONS.items()]
    for where, keys, model in levels:
        if not isinstance(keys, dict):
            continue
        bad = sorted(str(k) for k in set(keys) - set(model.model_fields))
        if bad:
            raise InputError(f"unknown key(s) {', '.join(bad)}; allowed: "
                             f"{', '.join(model.model_fields)}", file=file, field=where + bad[0])
    if spec.get("gpu") in (None, "", []):
        raise InputError("required: the GPU model (e.g. gpu: H100-SXM)", file=file, field="gpu")
    try:
        return Spec.model_validate(spec)
    except ValidationError as exc:
        errs = exc.errors()
        order = list(SPEC_KEYS)

        def rank(e: Any) -> tuple[int, int]:
            top = e["loc"][0] if e["loc"] else ""
            return (order.index(top) if top in order else len(order), len(e["loc"]))

        err = min(errs, key=rank)
        value: Any = spec
        for part in err["loc"]:
            if isinstance(value, dict) and part in value:
                value = value[part]
            elif isinstance(value, list) and isinstance(part, int) and part < len(value):
                value = value[part]
        raise InputError(_message(err, value), file=file, field=_field_path(err["loc"])
                         or None) from None


# -- a host of CPU ranks (no GPU) -------------------------------------------------------------

HOST_TRANSPORTS = ("shm", "tcp")


class HostSpec(_Section):
    """A host whose ranks are CPU processes (``gpu: none``): MPI over shared memory or Gloo
    over TCP loopback among processes of one machine (docs/systems.md)."""

    gpu: Literal["none"] = Field(description="none")
    cpu: Name | None = None
    sockets: Sockets | None = None
    cores: Annotated[int, _ints(1, 8192)] | None = None
    ranks_per_node: Annotated[int, _ints(1, 8192)] | None = None
    transport: Literal["shm", "tcp"] | None = None
    name: Any = None
    description: Any = None


HOST_SPEC_KEYS = tuple(HostSpec.model_fields)


def is_host_spec(spec: Any) -> bool:
    """Whether a spec describes a host of CPU ranks (``gpu: none``).

    >>> is_host_spec({"gpu": "none", "cpu": "EPYC-7763"}), is_host_spec({"gpu": "H100-SXM"})
    (True, False)
    """
    return isinstance(spec, dict) and str(spec.get("gpu", "")).strip().lower() == "none"


def check_host(spec: Any, file: str | None = None) -> HostSpec:
    """Validate a ``gpu: none`` host spec; one :class:`InputError` for the first problem.

    >>> check_host({"gpu": "none", "transport": "udp"}, file="h.yaml")
    Traceback (most recent call last):
    ...
    gpufabric.errors.InputError: h.yaml: transport: got 'udp'; allowed: shm, tcp
    """
    if not isinstance(spec, dict):
        raise InputError("a system spec must be a mapping of keys to values", file=file)
    bad = sorted(str(k) for k in set(spec) - set(HOST_SPEC_KEYS))
    if bad:
        raise InputError(f"unknown key(s) {', '.join(bad)} for a host without GPUs (gpu: none); "
                         f"allowed: {', '.join(HOST_SPEC_KEYS)}", file=file, field=bad[0])
    try:
        return HostSpec.model_validate({**spec, "gpu": "none"})
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        value = spec.get(name)
        if err["type"] == "literal_error":
            choices = err.get("ctx", {}).get("expected", "").replace("'", "").replace(" or ", ", ")
            msg = f"got {value!r}; allowed: {choices}"
        else:
            allowed = _allowed(HostSpec, name) if name in HostSpec.model_fields else "a value"
            msg = f"expected {allowed}, got {value!r}"
        raise InputError(msg, file=file, field=name or None) from None
