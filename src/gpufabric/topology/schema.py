"""The system spec's shape as a declarative schema, with the project's error line.

:func:`check` validates what a user wrote (keys, types, ranges, choices) against
:data:`FIELDS` before :func:`gpufabric.topology.build.normalize_spec` fills in defaults and
looks names up in the catalog. The first problem becomes one
:class:`~gpufabric.errors.InputError` naming the file, the dotted field and what is allowed;
the allowed text of a field is its ``description`` in the pydantic model built from
:data:`FIELDS`, so the table is the one place that says what a key takes. A spec whose values
all plainly fit (whole numbers in range, names, choices: what the presets and most specs hold)
passes without pydantic being imported.

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

from functools import cache
from typing import TYPE_CHECKING, Any

from gpufabric.errors import InputError

if TYPE_CHECKING:
    from pydantic import BaseModel

SCALE_UP = ("nvswitch", "nvlink-mesh", "nvlink-bridge", "xgmi", "pcie", "sli", "crossfire", "none")
MESHES = ("full", "hybrid-cube")
SWITCH_LAYOUTS = ("dual-root", "single-root", "cascade")
ATTACH = ("pcie", "c2c")
FABRICS = ("rail-optimized", "fat-tree")
HOST_TRANSPORTS = ("shm", "tcp")

#: Sizes beyond any machine built, refused before anything is built (a runaway otherwise):
#: the largest NVLink domain announced is NVL576 (576 GPUs); the most NICs on one server is
#: 32 (AWS p5: 32 EFA cards), the most CPU sockets of one server 36 (a 72-GPU Grace domain
#: written as one node).
MAX_GPUS_PER_DOMAIN, MAX_NICS, MAX_SOCKETS, MAX_PCIE_SWITCHES = 576, 64, 72, 64
#: Most downlinks per uplink of a switch: 511 of the 512 ports of the catalog's largest switch
#: (Spectrum-4 SN5600 at 100 GbE) down, one up.
MAX_OVERSUBSCRIPTION = 511


def _int(lo: int, hi: int | None = None) -> tuple[str, int, int | None]:
    """An integer key from ``lo`` to ``hi`` (no upper bound: None); not a bool."""
    return ("int", lo, hi)


#: What each key of a spec takes, section by section, in the order they are checked. A kind
#: is ``("int", lo, hi)``, ``("choice", values)``, ``("section", name)`` or one word:
#: ``name`` (a catalog name), ``gpu`` (required: a GPU model or a list of them), ``over`` (an
#: oversubscription or a list of them), ``pcie_gen``, ``bool``, ``any``. The pydantic models
#: that word the error lines are built from this table (:func:`_models`).
FIELDS: dict[str, dict[str, tuple[Any, ...]]] = {
    "Spec": {
        "gpu": ("gpu",), "gpus_per_node": _int(1, MAX_GPUS_PER_DOMAIN), "nodes": _int(1),
        "supernode": ("section", "Supernode"), "nvlink_domain": _int(1, MAX_GPUS_PER_DOMAIN),
        "scale_up": ("choice", SCALE_UP), "mesh": ("choice", MESHES),
        "nvlink_links": _int(1, 64), "bridge": ("name",), "host": ("section", "Host"),
        "pcie_gen": ("pcie_gen",), "p2p": ("bool",), "nics_per_node": _int(0, MAX_NICS),
        "nic": ("name",), "fabric": ("section", "Fabric"), "name": ("any",),
        "description": ("any",)},
    # host: the CPUs and the PCIe switches of a server
    "Host": {
        "cpu": ("name",), "sockets": _int(1, MAX_SOCKETS),
        "pcie_switches": _int(0, MAX_PCIE_SWITCHES), "switch_layout": ("choice", SWITCH_LAYOUTS),
        "switch": ("name",), "numa_per_socket": _int(1, 16), "attach": ("choice", ATTACH)},
    # fabric: the scale-out network (docs/fabrics.md)
    "Fabric": {
        "topology": ("choice", FABRICS), "oversubscription": ("over",), "switch": ("name",),
        "nodes_per_leaf": _int(1), "rails_per_leaf": _int(1), "pod_nodes": _int(1),
        "tiers": _int(1, 3), "spine_switch": ("name",), "core_switch": ("name",)},
    # supernode: an NVLink domain that spans servers (docs/systems.md)
    "Supernode": {
        "gpus_per_tray": _int(1, MAX_GPUS_PER_DOMAIN), "switch": ("name",),
        "switch_trays": _int(1), "chips_per_tray": _int(1), "ports_per_chip": _int(1),
        "links_per_gpu": _int(1, 64), "racks": _int(1)},
    # a host whose ranks are CPU processes (gpu: none): MPI over shared memory or Gloo over
    # TCP loopback among processes of one machine (docs/systems.md)
    "HostSpec": {
        "gpu": ("choice", ("none",)), "cpu": ("name",), "sockets": _int(1, MAX_SOCKETS),
        "cores": _int(1, 8192), "ranks_per_node": _int(1, 8192),
        "transport": ("choice", HOST_TRANSPORTS), "name": ("any",), "description": ("any",)},
}

SPEC_KEYS = tuple(FIELDS["Spec"])
HOST_KEYS = tuple(FIELDS["Host"])
FABRIC_KEYS = tuple(FIELDS["Fabric"])
SUPERNODE_KEYS = tuple(FIELDS["Supernode"])
HOST_SPEC_KEYS = tuple(FIELDS["HostSpec"])
#: The sections of a spec: key -> the model of its mapping.
_SECTION_OF = {"host": "Host", "fabric": "Fabric", "supernode": "Supernode"}


def _plain(value: Any, kind: tuple[Any, ...]) -> bool:
    """Whether ``value`` plainly fits ``kind`` (a value of exactly the type the key takes, in
    range): such a value passes the pydantic model too, and needs no model to pass. False
    says nothing: the model decides."""
    what = kind[0]
    if value is None or what in ("any", "gpu"):
        return True
    if what == "int":
        return type(value) is int and value >= kind[1] and (kind[2] is None or value <= kind[2])
    if what == "choice":
        return type(value) is str and value in kind[1]
    if what == "name":
        return type(value) is str
    if what == "over":
        values = value if type(value) is list else [value]
        return all(type(v) in (int, float) and 1 <= v <= MAX_OVERSUBSCRIPTION for v in values)
    if what == "pcie_gen":
        return type(value) is int
    if what == "bool":
        return type(value) is bool
    if what == "section":
        fields = FIELDS[kind[1]]
        return type(value) is dict and all(
            type(k) is str and k in fields and _plain(v, fields[k]) for k, v in value.items())
    return False


@cache
def _models() -> dict[str, type[BaseModel]]:
    """The pydantic models of :data:`FIELDS` (built when a spec first needs one: importing
    pydantic and building them takes as long as importing numpy)."""
    from typing import Annotated, Literal

    from pydantic import BaseModel, ConfigDict, Field, StrictBool, create_model

    class _Section(BaseModel):
        model_config = ConfigDict(extra="forbid", strict=True)

    name = Annotated[str | int | float, Field(description="a catalog name")]
    over = Annotated[float, Field(strict=False, ge=1, le=MAX_OVERSUBSCRIPTION,
                                  description=f"a number >= 1 and <= {MAX_OVERSUBSCRIPTION} "
                                              "(downlinks:uplinks)")]
    models: dict[str, type[BaseModel]] = {}

    def annotation(kind: tuple[Any, ...]) -> tuple[Any, Any]:
        what = kind[0]
        if what == "int":
            lo, hi = kind[1], kind[2]
            allowed = f"an integer >= {lo}" + (f" and <= {hi}" if hi is not None else "")
            return Annotated[int, Field(strict=True, ge=lo, le=hi, description=allowed)] | None, \
                None
        if what == "choice":
            return Literal[kind[1]] | None, None
        if what == "gpu":
            return Annotated[Any, Field(description="a GPU model or a list of them")], ...
        if what == "over":
            return Annotated[over | list[over], Field(
                description=f"a number >= 1 and <= {MAX_OVERSUBSCRIPTION} (downlinks:uplinks) "
                            "or a list [leaf, spine]")] | None, None
        if what == "pcie_gen":
            return Annotated[int, Field(strict=True, description="3, 4, 5 or 6")] | None, None
        if what == "bool":
            return Annotated[StrictBool, Field(description="true or false")] | None, None
        if what == "section":
            return models[kind[1]] | None, None
        return (name | None, None) if what == "name" else (Any, None)

    for model in ("Host", "Fabric", "Supernode", "Spec", "HostSpec"):   # sections first
        fields = {k: annotation(kind) for k, kind in FIELDS[model].items()}
        if model == "HostSpec":
            fields["gpu"] = (Literal["none"], Field(description="none"))
        models[model] = create_model(model, __base__=_Section, **fields)   # type: ignore
    return models


def _allowed(model: type[BaseModel], name: str) -> str:
    from typing import get_args
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
    model = _models()["Spec"]
    for part in loc[:-1]:
        if isinstance(part, str) and part in _SECTION_OF:
            model = _models()[_SECTION_OF[part]]
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
    if etype in ("model_type", "model_attributes_type", "dict_type") and name in _SECTION_OF:
        return f"expected a mapping with keys {', '.join(FIELDS[_SECTION_OF[name]])}, got " \
               f"{value!r}"
    allowed = _allowed(model, name) if name in model.model_fields else "a valid value"
    shown = value if etype in ("greater_than_equal", "less_than_equal") else repr(value)
    return f"expected {allowed}, got {shown}"


def check(spec: Any, file: str | None = None) -> None:
    """Validate the shape of a spec; raise one :class:`InputError` for the first problem.

    Unknown keys are reported first (all of one mapping at once, with the allowed keys), then
    a missing ``gpu``, then the first wrong value in the order of :data:`FIELDS`. A spec
    whose values all plainly fit passes here; any other is validated by the pydantic model,
    which words the error line.
    """
    if not isinstance(spec, dict):
        raise InputError("a system spec must be a mapping of keys to values", file=file)
    levels: list[tuple[str, Any, str]] = [("", spec, "Spec")] + [
        (f"{k}.", spec.get(k), m) for k, m in _SECTION_OF.items()]
    for where, keys, model in levels:
        if not isinstance(keys, dict):
            continue
        bad = sorted(str(k) for k in set(keys) - set(FIELDS[model]))
        if bad:
            raise InputError(f"unknown key(s) {', '.join(bad)}; allowed: "
                             f"{', '.join(FIELDS[model])}", file=file, field=where + bad[0])
    if spec.get("gpu") in (None, "", []):
        raise InputError("required: the GPU model (e.g. gpu: H100-SXM)", file=file, field="gpu")
    if _plain(spec, ("section", "Spec")):
        return
    from pydantic import ValidationError
    try:
        _models()["Spec"].model_validate(spec)
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

def is_host_spec(spec: Any) -> bool:
    """Whether a spec describes a host of CPU ranks (``gpu: none``).

    >>> is_host_spec({"gpu": "none", "cpu": "EPYC-7763"}), is_host_spec({"gpu": "H100-SXM"})
    (True, False)
    """
    return isinstance(spec, dict) and str(spec.get("gpu", "")).strip().lower() == "none"


def check_host(spec: Any, file: str | None = None) -> Any:
    """Validate a ``gpu: none`` host spec (its pydantic model, fields as attributes); one
    :class:`InputError` for the first problem.

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
    from pydantic import ValidationError
    model = _models()["HostSpec"]
    try:
        return model.model_validate({**spec, "gpu": "none"})
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else ""
        value = spec.get(name)
        if err["type"] == "literal_error":
            choices = err.get("ctx", {}).get("expected", "").replace("'", "").replace(" or ", ", ")
            msg = f"got {value!r}; allowed: {choices}"
        else:
            allowed = _allowed(model, name) if name in model.model_fields else "a value"
            msg = f"expected {allowed}, got {value!r}"
        raise InputError(msg, file=file, field=name or None) from None
