"""Prices and power of designs, from the catalog's sourced price table and a user's price file.

``catalog/data/prices.yaml`` holds every published price found (with its page and dates); a
user file of the same shape (``--prices FILE``) adds entries or replaces those of the same key
(a GPU, a server design, a host form, a CPU, NIC or switch model, a link kind and speed, a
facility figure, a cloud instance, a network speed).

:func:`design_cost` prices one design whole: on premises, a bill of materials (GPUs and their
hosts, or a whole-server price where one is sourced; the NICs, switches by tier and cables
with their optics that the design's own fabric plan counts; racks) gives capex, and the
facility figures give opex (energy at the PUE, colocation per kW-month, maintenance as a
share of capex a year); in the cloud, the instance's on-demand or reserved rate. Every line
names its source; what a figure lacks (a part with no price, a power not recorded, a price
taken from a sibling part) is said in the cost's ``notes``.

Examples
--------
>>> p = load()
>>> p.gpu_usd("H100-SXM"), p.gpu_usd("B200")
(27500.0, 40000.0)
>>> p.server("H100-SXM", 8, "nvswitch")["usd"]
199000
>>> p.facility("pue")
1.2
>>> c, kw = design_cost("H100-SXM", 8, 2, "gpu=H100-SXM,gpus_per_node=8,nodes=2,nic=ib-ndr,"
...                     "nics_per_node=8,fabric.topology=rail-optimized", p, kwh_usd=0.1,
...                     amortize_years=4)
>>> sorted(c["capex_breakdown"])
['links', 'servers', 'switches']
>>> c["capex_breakdown"]["servers"]
398000.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

from gpufabric import catalog
from gpufabric.errors import InputError, check_range
from gpufabric.fileio import load_yaml, package_dir, parse_yaml

HOURS_PER_YEAR = 24 * 365
HOURS_PER_MONTH = HOURS_PER_YEAR / 12

SECTIONS = ("gpus", "servers", "power", "hosts", "cpus", "nics", "switches", "links",
            "facility", "cloud", "network")
KEYS = {"gpus": ("gpu",), "servers": ("gpu", "gpus_per_node", "scale_up"),
        "power": ("gpu",), "hosts": ("form",), "cpus": ("model",), "nics": ("model",),
        "switches": ("model",), "links": ("link", "gbps"), "facility": ("item",),
        "cloud": ("instance",), "network": ("nic",)}
#: Host forms: SXM/OAM baseboards, PCIe cards, rack-scale trays.
HOST_FORMS = ("baseboard", "pcie", "rack")
#: Link kinds of a fabric plan's cables (each with its transceivers at both ends).
LINK_KINDS = ("copper", "optical-nic", "optical-switch")
#: Facility figures and their allowed ranges (low, high, low excluded).
FACILITY = {"pue": (1.0, 5.0, False), "colo_usd_per_kw_month": (0.0, 100_000.0, True),
            "maintenance_fraction_per_year": (0.0, 1.0, True), "rack_kw": (0.0, 10_000.0, True),
            "rack_usd": (0.0, 10_000_000.0, True)}
CLOUD_TERMS = {"on-demand": "usd_per_hour", "1y": "usd_per_hour_1y", "3y": "usd_per_hour_3y"}

#: The most a price (US$), a power (W) or an hourly rate may be: past these a file is a typo.
MAX_USD, MAX_WATTS, MAX_USD_PER_HOUR = 1e9, 1e7, 1e6
_USD = (MAX_USD, " US$")
_W = (MAX_WATTS, " W")
#: Numbers of each section: name -> (most allowed, unit, must be above 0). A price or power of
#: 0 would hide a missing figure (a free GPU, a switch that draws nothing): it is refused unless
#: the entry says what pays for it (``included_in``). A ``network`` row's parts may cost nothing.
NUMBERS: dict[str, dict[str, tuple[float, str, bool]]] = {
    "gpus": {"usd": (*_USD, True)},
    "servers": {"usd": (*_USD, True), "watts": (*_W, True)},
    "power": {"watts": (*_W, True)},
    "hosts": {"cpu_usd_per_socket": (*_USD, True), "memory_usd": (*_USD, True),
              "storage_usd": (*_USD, True), "chassis_usd": (*_USD, True),
              "watts": (*_W, True), "watts_per_gpu": (*_W, True),
              "memory_GB": (1e7, " GB", False), "storage_TB": (1e6, " TB", False)},
    "cpus": {"usd": (*_USD, True), "watts": (*_W, True)},
    "nics": {"usd": (*_USD, True), "watts": (*_W, True)},
    "switches": {"usd": (*_USD, True), "watts": (*_W, True)},
    "links": {"usd": (*_USD, True), "watts": (*_W, True)},
    "facility": {},
    "cloud": {"usd_per_hour": (MAX_USD_PER_HOUR, " $/hour", True),
              "usd_per_hour_1y": (MAX_USD_PER_HOUR, " $/hour", True),
              "usd_per_hour_3y": (MAX_USD_PER_HOUR, " $/hour", True)},
    "network": {"nic_usd": (*_USD, False), "switch_port_usd": (*_USD, False),
                "cable_usd": (*_USD, False), "switch_port_watts": (*_W, False)},
}
REQUIRED = {"gpus": ("usd",), "servers": (), "power": ("watts",), "hosts": (), "cpus": (),
            "nics": (), "switches": (), "links": (), "facility": ("value",),
            "cloud": ("usd_per_hour", "system"), "network": ()}


@dataclass
class Prices:
    """The merged price table: ``entries[section][key] -> dict`` (with ``source``)."""

    entries: dict[str, dict[tuple, dict[str, Any]]] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    #: :func:`design_cost`'s bill-of-materials parts already priced from this table (the
    #: servers of a GPU kind and count, a network, racks), by what each depends on: an
    #: advisor's hundred thousand designs share a few thousand of them. A table is read once
    #: loaded (:func:`load`); one whose entries change needs a new :class:`Prices`.
    memo: dict[tuple, Any] = field(default_factory=dict, repr=False, compare=False)

    def gpu_usd(self, gpu: str) -> float | None:
        e = self.entries["gpus"].get((gpu,))
        return float(e["usd"]) if e else None

    def server(self, gpu: str, gpn: int, scale_up: str) -> dict[str, Any] | None:
        return self.entries["servers"].get((gpu, gpn, scale_up))

    def gpu_watts(self, gpu: str) -> float | None:
        e = self.entries["power"].get((gpu,))
        if e:
            return float(e["watts"])
        g = catalog.gpu(gpu)            # a part that ships power-limited draws its limit
        w = g.power_limit_W or g.tdp_W
        return float(w) if w else None

    def cloud(self) -> list[dict[str, Any]]:
        return list(self.entries["cloud"].values())

    def network(self, nic: str) -> dict[str, Any] | None:
        return self.entries["network"].get((nic,))

    def part(self, section: str, *key: Any) -> dict[str, Any] | None:
        """The entry of ``section`` keyed ``key`` (a host form, a model, a link), or None."""
        return self.entries[section].get(tuple(key))

    def facility(self, item: str) -> float | None:
        e = self.entries["facility"].get((item,))
        return float(e["value"]) if e else None


def _key(section: str, e: dict[str, Any], file: str, where: str) -> tuple:
    out = []
    for k in KEYS[section]:
        if k not in e:
            raise InputError(f"required (an entry of {section} is keyed by "
                             f"{', '.join(KEYS[section])})", file=file, field=f"{where}.{k}")
        v = e[k]
        f = f"{where}.{k}"
        if k == "gpu":
            v = catalog.gpu(str(v), file=file, field=f).name
        elif k == "nic":
            v = catalog.net_speed(str(v), file=file, field=f).name
        elif k == "model":
            kind = {"cpus": "cpu", "nics": "nic", "switches": "net_switch"}[section]
            v = catalog.get(kind, str(v), file=file, field=f).name
        elif k == "gbps":
            v = check_range(v, 0, 1e5, field=f, file=file, above=True, unit=" Gbit/s")
        else:
            allowed = {"form": HOST_FORMS, "link": LINK_KINDS, "item": tuple(FACILITY)}.get(k)
            if allowed and v not in allowed:
                raise InputError(f"got {v!r}; allowed: {', '.join(allowed)}", file=file, field=f)
        out.append(v)
    return tuple(out)


def _check_numbers(sec: str, e: dict[str, Any], file: str, where: str) -> None:
    """Every number of the entry in its range (:func:`~gpufabric.errors.check_range`); a 0
    where a part must cost or draw something only with ``included_in`` saying why."""
    paid_elsewhere = bool(e.get("included_in"))
    for k, (hi, unit, positive) in NUMBERS[sec].items():
        v = e.get(k)
        if v is None:
            continue
        above = positive and not paid_elsewhere
        check_range(v, 0, hi, field=f"{where}.{k}", file=file, above=above, unit=unit,
                    why=" (a part paid for elsewhere says so with included_in)" if above else "")
    if sec == "facility" and "item" in e and e["item"] in FACILITY and "value" in e:
        lo, hi, above = FACILITY[e["item"]]
        check_range(e["value"], lo, hi, field=f"{where}.value", file=file, above=above)


def _merge(into: dict[str, dict[tuple, dict[str, Any]]], data: Any, file: str,
           need_source: bool) -> None:
    if data is None:
        return
    if not isinstance(data, dict):
        raise InputError(f"expected a mapping of {', '.join(SECTIONS)}", file=file)
    for sec, rows in data.items():
        if sec not in SECTIONS:
            raise InputError(f"unknown section {sec!r}; allowed: {', '.join(SECTIONS)}",
                             file=file, field=str(sec))
        if rows is None:
            continue
        if not isinstance(rows, list):
            raise InputError("expected a list of entries", file=file, field=sec)
        for i, e in enumerate(rows):
            where = f"{sec}[{i}]"
            if not isinstance(e, dict):
                raise InputError(f"expected a mapping, got {e!r}", file=file, field=where)
            key = _key(sec, e, file, where)
            _check_numbers(sec, e, file, where)
            for k in REQUIRED[sec]:
                if e.get(k) is None:
                    raise InputError("required", file=file, field=f"{where}.{k}")
            if need_source and not e.get("source"):
                raise InputError("every price needs a 'source'", file=file,
                                 field=f"{where}.source")
            row = dict(e)
            row.setdefault("source", f"user price file {file}")
            into[sec][key] = row


def load(user_file: str | None = None) -> Prices:
    """The catalog's prices, with ``user_file``'s entries added or replacing."""
    p = Prices(entries={s: {} for s in SECTIONS}, files=["catalog/data/prices.yaml"])
    text = (package_dir("gpufabric.catalog") / "data" / "prices.yaml").read_text()
    _merge(p.entries, parse_yaml(text, "catalog/data/prices.yaml"), "catalog/data/prices.yaml",
           need_source=True)
    if user_file:
        _merge(p.entries, load_yaml(user_file, what="a price YAML file"), user_file,
               need_source=False)
        p.files.append(user_file)
    return p


# --------------------------------------------------------------------------------------------
# one design, priced whole
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Design:
    """What the price of a design depends on, read once from its spec."""

    scale_up: str
    form: str
    cpu: str
    sockets: int
    speed: str | None
    nic_model: str | None
    nics_per_node: int
    tiers: tuple[tuple[str, str, int], ...]        # (tier, switch model, switches)
    cables: tuple[tuple[str, int], ...]            # (fabric plan's cable kind, count)
    optics: tuple[tuple[str, int], ...]            # (transceiver kind, count), for the BOM
    end_ports: int
    switch_ports: int


def _design(system: str) -> _Design:
    """The :class:`_Design` of ``system`` (an inline spec): its servers read once per server
    design and network (:func:`_servers`), its fabric once per shape (:func:`_fabric`): an
    advisor's hundred thousand designs are a few thousand of these times their node counts."""
    parts = system.split(",")
    count = next((p for p in parts if p.startswith("nodes=")), None)
    if count is None or not count[6:].isdigit() or int(count[6:]) < 1:
        return _servers(system, None)[0]          # (the count as the spec reads it)
    n = int(count[6:])
    d, trays, net = _servers(",".join(p for p in parts if p is not count), n > 1)
    if not d.speed or n * trays <= 1:
        return d
    # (built field by field: dataclasses.replace costs more than the rest of this)
    return _Design(d.scale_up, d.form, d.cpu, d.sockets, d.speed, d.nic_model, d.nics_per_node,
                   **_fabric(*net, n * trays))


@lru_cache(maxsize=1 << 15)
def _servers(system: str, several: bool | None) -> tuple[_Design, int, tuple]:
    """The :class:`_Design` of ``system`` without its fabric, normalized as one server
    (``several`` false) or as a cluster of them (true; None: the count the spec gives), the
    normalized nodes per server (a rack-scale part's trays) and what its fabric is planned
    from but the count (:func:`_fabric`'s arguments)."""
    from gpufabric.topology.build import normalize_spec, parse_inline
    spec = parse_inline(system)
    k = spec.get("nodes", 1) if several is None else 2 if several else 1
    s = normalize_spec({**spec, "nodes": k}, file="design")
    g = catalog.gpu(s["gpu"] if isinstance(s["gpu"], str) else s["gpu"][0])
    gpn = int(s["gpus_per_node"])
    form = ("rack" if g.gpus_per_tray and gpn > 8 else
            "baseboard" if g.form_factor in ("sxm", "oam") and gpn >= 4 else "pcie")
    speed = s.get("nic") if s.get("nics_per_node") else None
    d = _Design(str(s.get("scale_up") or ""), form, s["host"]["cpu"], int(s["host"]["sockets"]),
                speed, catalog.net_speed(speed).nic if speed else None,
                int(s.get("nics_per_node") or 0), (), (), (), 0, 0)
    fab = s["fabric"] if "switch" in (spec.get("fabric") or {}) else \
        {k: v for k, v in s["fabric"].items() if k != "switch"}   # (sized to the count)
    net = (s["nic"], int(s["nics_per_node"]),
           tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in fab.items()))
    if several is None and speed and int(s["nodes"]) > 1:
        d = replace(d, **_fabric(*net, int(s["nodes"])))
    return d, int(s["nodes"]) // k, net


@lru_cache(maxsize=8192)
def _fabric(nic: str, nics: int, fab: tuple, nodes: int) -> dict[str, Any]:
    """The :class:`_Design` fields of the fabric of ``nodes`` servers of ``nics`` NICs of
    ``nic`` (``fab``: the normalized spec's ``fabric`` items; its leaf switch, where absent,
    the default sized to the cluster): the same for every GPU kind."""
    from gpufabric.topology import fabric
    f: dict[str, Any] = {k: list(v) if isinstance(v, tuple) else v for k, v in fab}
    s = {"nic": nic, "nodes": nodes, "nics_per_node": nics, "fabric": f}
    if "switch" not in f:
        f["switch"] = fabric.default_switch(s, "design")
    p = fabric.plan(s, file="design")
    return {"tiers": tuple((t.name, t.switch, t.switches) for t in p.tiers),
            "cables": tuple(p.cables.items()), "optics": tuple(p.optics.items()),
            "end_ports": p.end_ports, "switch_ports": sum(t.ports_used for t in p.tiers)}


def _line(category: str, item: str, count: float, row: dict[str, Any] | None,
          usd_key: str = "usd", watts: float | None = None, *, unit_usd: float | None = None,
          source: str | None = None) -> dict[str, Any]:
    """One bill-of-materials line: ``count`` of ``item`` at the row's price and power."""
    if unit_usd is None and row is not None and row.get(usd_key) is not None:
        unit_usd = float(row[usd_key])
    if watts is None and row is not None and row.get("watts") is not None:
        watts = float(row["watts"])
    return {"category": category, "item": item, "count": count, "unit_usd": unit_usd,
            "usd": None if unit_usd is None else unit_usd * count,
            "unit_watts": watts, "watts": None if watts is None else watts * count,
            "source": source or (str(row.get("source", "")) if row else ""),
            "lacks": str(row.get("lacks", "")) if row else ""}


def _link_kind(cable: str) -> str:
    return "copper" if "copper" in cable else "optical-nic" if "NIC" in cable \
        else "optical-switch"


def design_cost(gpu: str, gpus_per_node: int, nodes: int, system: str, prices: Prices, *,
                kwh_usd: float, amortize_years: float, deployment: str = "on-prem",
                instance: str = "", cloud_term: str = "on-demand"
                ) -> tuple[dict[str, Any], float | None]:
    """``(cost, power_kW)`` of ``nodes`` servers of the design ``system`` (its inline spec).

    On premises ``cost`` holds ``capex_usd`` (None when the GPUs have no price),
    ``usd_per_hour`` (capex over ``amortize_years``), ``opex_usd_per_hour`` and its parts
    (``opex``: energy at the facility's PUE and ``kwh_usd``, colocation, maintenance),
    ``capex_breakdown`` by category, ``bom`` (every line with its count, price, power and
    source), ``usd_per_gpu_hour`` and ``notes`` (what a figure lacks). In the cloud it holds
    the instance's rate for ``cloud_term`` (on-demand, 1y or 3y reserved). ``power_kW`` is the
    equipment's power (IT load, before the PUE)."""
    gpus = gpus_per_node * nodes
    d = _design(system)
    srv = prices.server(gpu, gpus_per_node, d.scale_up)
    whole = bool(srv and srv.get("usd") is not None)
    lines, notes = _servers_part(gpu, gpus_per_node, nodes, d, prices, srv, whole)
    bom = [dict(ln) for ln in lines]
    notes = list(notes)
    if d.speed and nodes > 1:
        lines, more = _network_part(d, prices, srv if whole else None)
        bom += [dict(ln) for ln in lines]
        notes += more
    _racks(bom, d, prices, notes)
    watts = sum(ln["watts"] or 0.0 for ln in bom)
    power_kW = watts / 1000 if watts > 0 else None
    if deployment == "cloud":
        return _cloud_cost(instance, nodes, gpus, prices, cloud_term), power_kW
    gpu_line = bom[0]
    capex = None if gpu_line["usd"] is None else sum(ln["usd"] or 0.0 for ln in bom)
    breakdown: dict[str, float] = {}
    for ln in bom:
        if ln["usd"]:
            breakdown[ln["category"]] = breakdown.get(ln["category"], 0.0) + ln["usd"]
    cost: dict[str, Any] = {
        "capex_usd": capex, "usd_per_hour": None, "notes": list(dict.fromkeys(notes)),
        "basis": ("whole server" if whole else "parts") + " (" + str(gpu_line["source"]) + ")",
        "bom": bom, "capex_breakdown": breakdown}
    if capex is not None:
        cost["usd_per_hour"] = capex / (amortize_years * HOURS_PER_YEAR)
        cost["amortized_over_years"] = amortize_years
        cost["network_share"] = breakdown.get("nics", 0.0) + breakdown.get("switches", 0.0) + \
            breakdown.get("links", 0.0) + breakdown.get("network", 0.0)
        cost["network_share"] /= capex
    _opex(cost, power_kW, capex, prices, kwh_usd)
    if cost["usd_per_hour"] is not None:
        cost["usd_per_gpu_hour"] = (cost["usd_per_hour"] + cost["opex_usd_per_hour"]) / gpus
    return cost, power_kW


def _servers_part(gpu: str, gpus_per_node: int, nodes: int, d: _Design, prices: Prices,
                  srv: dict[str, Any] | None, whole: bool
                  ) -> tuple[list[dict[str, Any]], list[str]]:
    """The bill-of-materials lines of ``nodes`` servers (a whole-server price, or the GPUs and
    host by parts) and their notes (:func:`_parts_lines`, :func:`_bom_notes`), once per
    table and what they depend on (kept in :attr:`Prices.memo`; callers copy the lines)."""
    key = ("servers", gpu, gpus_per_node, nodes, d.scale_up, d.form, d.cpu, d.sockets)
    hit = prices.memo.get(key)
    if hit is None:
        bom: list[dict[str, Any]] = []
        notes: list[str] = []
        if whole:
            assert srv is not None
            w = float(srv["watts"]) if srv.get("watts") else None
            bom.append(_line("servers", f"{gpus_per_node}x {gpu} server", nodes, srv, watts=w))
        else:
            _parts_lines(bom, notes, gpu, gpus_per_node, nodes, d, prices)
        _bom_notes(bom, notes)
        hit = prices.memo[key] = (bom, notes)
    return hit


def _network_part(d: _Design, prices: Prices, srv: dict[str, Any] | None
                  ) -> tuple[list[dict[str, Any]], list[str]]:
    """The lines of a design's scale-out network (:func:`_network_lines`) and their notes,
    once per table and network (kept in :attr:`Prices.memo`; callers copy the lines)."""
    key = ("network", d.speed, d.nic_model, d.nics_per_node, d.tiers, d.cables, d.end_ports,
           d.switch_ports, None if srv is None else id(srv))
    hit = prices.memo.get(key)
    if hit is None:
        bom: list[dict[str, Any]] = []
        notes: list[str] = []
        _network_lines(bom, d, prices, srv)
        _bom_notes(bom, notes)
        hit = prices.memo[key] = (bom, notes)
    return hit


def _parts_lines(bom: list[dict[str, Any]], notes: list[str], gpu: str, gpus_per_node: int,
                 nodes: int, d: _Design, prices: Prices) -> None:
    """A server bought as parts: its GPUs, and its host (CPUs, memory, storage, chassis) by
    form, each line with its price, power and source."""
    g_row = prices.entries["gpus"].get((gpu,))
    g_w = prices.gpu_watts(gpu)
    bom.append(_line("gpus", gpu, gpus_per_node * nodes, g_row, watts=g_w,
                     source=None if g_row else "no published price"))
    if g_row is None:
        notes.append(f"{gpu} has no published price: add one with --prices")
    if g_w is None:
        notes.append(f"{gpu} board power not recorded: add power with --prices")
    host = prices.part("hosts", d.form)
    if host is None:
        notes.append(f"no host price for {d.form} servers: capex counts the GPUs only")
        return
    cpu_row = prices.part("cpus", d.cpu)
    per_socket = float(cpu_row["usd"]) if cpu_row and cpu_row.get("usd") is not None \
        else host.get("cpu_usd_per_socket")
    src = str((cpu_row or host).get("source", ""))
    h_w = float(host.get("watts") or 0) + float(host.get("watts_per_gpu") or 0) * \
        gpus_per_node
    inc = host.get("included_in")
    bom.append(_line("host", f"{d.cpu} CPU", d.sockets * nodes, None,
                     unit_usd=None if per_socket is None else float(per_socket),
                     watts=0.0, source=src))
    for part, label in (("memory_usd", "memory"), ("storage_usd", "storage"),
                        ("chassis_usd", "chassis, board, cooling, power supplies")):
        size = (f" ({host['memory_GB']:g} GB)" if part == "memory_usd" and
                host.get("memory_GB") else f" ({host['storage_TB']:g} TB)"
                if part == "storage_usd" and host.get("storage_TB") else "")
        bom.append(_line("host", f"{d.form} host {label}{size}", nodes, host, part,
                         watts=(h_w or None) if part == "chassis_usd" else 0.0))
    if inc:
        bom[-1]["included_in"] = str(inc)
    if host.get("lacks"):
        notes.append(str(host["lacks"]))


def _network_lines(bom: list[dict[str, Any]], d: _Design, prices: Prices,
                   srv: dict[str, Any] | None) -> None:
    """The scale-out network of a design of several servers: a user's whole-network row
    where one is given for its speed, else its NICs (``srv``: the whole server's price row,
    which may include them), switches and links with their transceivers."""
    net_row = prices.network(d.speed) if d.speed else None
    if net_row is not None:
        # a user's whole-network row: NIC ports, switch ports and one cable per NIC port
        usd = (d.end_ports * float(net_row.get("nic_usd") or 0)
               + d.switch_ports * float(net_row.get("switch_port_usd") or 0)
               + sum(n for _, n in d.cables) * float(net_row.get("cable_usd") or 0))
        sw_w = net_row.get("switch_port_watts")
        bom.append(_line("network", f"{d.speed} network (per-port prices)", 1, net_row,
                         unit_usd=usd, watts=None if sw_w is None else
                         float(sw_w) * d.switch_ports))
        return
    nic = catalog.nic(str(d.nic_model))
    adapters = math.ceil(d.end_ports / max(1, nic.ports))
    if srv is not None and srv.get("includes_nics"):
        bom.append(_line("nics", f"{nic.name} (in the server price)", adapters, None,
                         unit_usd=0.0, watts=0.0, source=str(srv.get("source", ""))))
    else:
        bom.append(_line("nics", nic.name, adapters, prices.part("nics", nic.name)))
    for tier, model, n in d.tiers:
        bom.append(_line("switches", f"{model} ({tier})", n,
                         prices.part("switches", model)))
    gbps = catalog.net_speed(str(d.speed)).gbps
    for cable, n in d.cables:
        kind = _link_kind(cable)
        bom.append(_line("links", f"{cable} link ({kind})", n,
                         prices.part("links", kind, gbps)))


def _bom_notes(bom: list[dict[str, Any]], notes: list[str]) -> None:
    """What each line lacks: a part with no price, a part whose power is not recorded."""
    for ln in bom:
        what = ln["item"]
        if ln["unit_usd"] is None and ln["category"] != "gpus":
            notes.append(f"{what} not priced (no published price): capex leaves out "
                         f"{ln['count']:g} of them; add it with --prices")
        if ln["lacks"]:
            notes.append(ln["lacks"])
        elif ln["unit_watts"] is None and ln["category"] not in ("gpus", "racks"):
            notes.append(f"{what.split(' (')[0]} power not recorded: left out of the power "
                         "figure")


def _racks(bom: list[dict[str, Any]], d: _Design, prices: Prices, notes: list[str]) -> None:
    """Racks the design fills at the facility's kW per rack (a rack-scale system is one)."""
    if d.form == "rack":
        return
    per = prices.facility("rack_kw")
    it_kw = sum(ln["watts"] or 0.0 for ln in bom) / 1000
    if not per or it_kw <= 0:
        return
    n = math.ceil(it_kw / per - 1e-9)
    key = ("racks", n)
    hit = prices.memo.get(key)
    if hit is None:
        row = prices.part("facility", "rack_usd")
        line = [_line("racks", f"rack ({per:g} kW)", n, row, "value", watts=0.0,
                      source=str(prices.part("facility", "rack_kw")["source"])  # type: ignore
                      if row is None else None)]
        hit = prices.memo[key] = (line, [])
        _bom_notes(line, hit[1])
    bom.append(dict(hit[0][0]))
    notes += hit[1]


def _opex(cost: dict[str, Any], power_kW: float | None, capex: float | None, prices: Prices,
          kwh_usd: float) -> None:
    pue = prices.facility("pue")
    colo = prices.facility("colo_usd_per_kw_month")
    maint = prices.facility("maintenance_fraction_per_year")
    notes = cost["notes"]
    if pue is None:
        notes.append("no PUE recorded: energy counts the equipment's power alone")
    if colo is None:
        notes.append("no colocation price recorded: opex counts no facility rent")
    if maint is None:
        notes.append("no maintenance rate recorded: opex counts no support")
    kw = power_kW or 0.0
    opex = {"energy": kw * (pue or 1.0) * kwh_usd,
            "colocation": kw * (colo or 0.0) / HOURS_PER_MONTH,
            "maintenance": (capex or 0.0) * (maint or 0.0) / HOURS_PER_YEAR}
    cost["opex"] = opex
    cost["opex_usd_per_hour"] = sum(opex.values())
    cost["pue"] = pue or 1.0
    cost["kwh_usd"] = kwh_usd
    cost["energy_usd_per_day"] = opex["energy"] * 24


def _cloud_cost(instance: str, nodes: int, gpus: int, prices: Prices, term: str
                ) -> dict[str, Any]:
    """A cloud design's rate (it includes power, network and facility)."""
    inst = prices.entries["cloud"][(instance,)]
    rate = inst.get(CLOUD_TERMS.get(term, "usd_per_hour"))
    used = term
    notes: list[str] = []
    if rate is None:
        rate, used = inst["usd_per_hour"], "on-demand"
        notes.append(f"{instance} has no published {term} reserved rate: on-demand used")
    per_h = float(rate) * nodes
    return {"capex_usd": None, "usd_per_hour": per_h, "usd_per_gpu_hour": per_h / gpus,
            "term": used, "notes": notes,
            "rates": {t: inst.get(k) for t, k in CLOUD_TERMS.items() if inst.get(k)},
            "basis": f"{instance} {used} ({inst['source']}; {inst.get('url', '')})"}


def sum_costs(costs: list[dict[str, Any]]) -> dict[str, Any]:
    """One cost of several parts (a disaggregated design's prefill and decode pools)."""
    out: dict[str, Any] = {"notes": list(dict.fromkeys(n for c in costs
                                                      for n in c.get("notes", [])))}
    for k in ("capex_usd", "usd_per_hour", "energy_usd_per_day", "opex_usd_per_hour"):
        vals = [c.get(k) for c in costs]
        if any(k in c for c in costs):
            out[k] = None if any(v is None for v in vals) else sum(vals)
    out["kwh_usd"] = costs[0].get("kwh_usd", 0.0) if costs else 0.0
    out["basis"] = "; ".join(str(c.get("basis", "")) for c in costs)
    if any("bom" in c for c in costs):
        out["bom"] = [ln for c in costs for ln in c.get("bom", [])]
    for k in ("capex_breakdown", "opex"):
        if any(k in c for c in costs):
            agg: dict[str, float] = {}
            for c in costs:
                for kk, v in c.get(k, {}).items():
                    agg[kk] = agg.get(kk, 0.0) + v
            out[k] = agg
    return out


def capex_linked_per_hour(cost: dict[str, Any]) -> float:
    """The part of a design's $/hour that scales with its capex (amortisation and
    maintenance): what a price cut of the hardware moves."""
    return float(cost.get("usd_per_hour") or 0.0) + float(cost.get("opex", {}).get(
        "maintenance", 0.0))


__all__ = ["Prices", "load", "design_cost", "sum_costs", "capex_linked_per_hour",
           "CLOUD_TERMS"]
