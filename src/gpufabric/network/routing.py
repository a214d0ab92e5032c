"""Routes: which links a transfer crosses, and by which transport.

The rules follow what NCCL does on real machines:

- two GPUs with a direct NVLink (or xGMI) bundle use it; two GPUs on one NVSwitch fabric go
  through the switch (transport ``nvlink``);
- otherwise PCIe peer-to-peer along the shortest PCIe path when :func:`topology.paths.path`
  says P2P is used (GPUs that allow it, a path NCCL allows: transport ``pcie``);
- no P2P (GeForce cards with the stock driver, or a path through the CPU on most hosts): the
  data bounces through host memory, up to the sender's CPU socket and down to the receiver
  (transport ``shm``);
- GPU to NIC: GPUDirect RDMA when :func:`topology.paths.path` allows it (PIX/PXB);
  when it is not, and an NVLink peer sits next to the NIC, NCCL's PXN relays through that peer
  over NVLink; otherwise the data is staged through host memory (transport ``shm``);
- across nodes: sender GPU -> its rail's NIC -> leaf -> (core) -> leaf -> NIC -> receiver GPU;
  equal-cost fabric paths (ECMP) share the bytes evenly.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import pairwise

from gpufabric.topology.model import CPU, GPU, NET_SWITCH, NIC, NVSWITCH, PCIE_SWITCH, Topology
from gpufabric.topology.paths import path

HOST_LINKS = ("pcie", "cpu", "c2c")
PEER_LINKS = ("nvlink", "xgmi")

#: transports, fastest first
TRANSPORTS = ("nvlink", "pcie", "shm", "net")


@dataclass(frozen=True)
class Route:
    """A route: device walks (several for ECMP, bytes split evenly) and the transport class.

    ``transport`` is the slowest class of hop on the way: ``nvlink``, ``pcie`` (P2P or
    GPUDirect), ``shm`` (bounce through host memory) or ``net`` (crosses the fabric).
    ``staged`` is True when some part is staged through host memory, ``hosts`` then names
    the CPU sockets whose memory holds the data on the way.
    """

    walks: tuple[tuple[str, ...], ...]
    transport: str
    staged: bool = False
    hosts: tuple[str, ...] = ()      # CPU sockets whose DRAM the data passes through


def _bfs(topo: Topology, src: str, ok_link, ok_via) -> dict[str, str | None]:
    """Parents of a BFS from ``src`` over links passing ``ok_link`` and devices ``ok_via``."""
    parent: dict[str, str | None] = {src: None}
    q = deque([src])
    while q:
        u = q.popleft()
        if u != src and not ok_via(u):
            continue
        for v, ln in topo.neighbors(u):
            if v in parent or not ok_link(ln):
                continue
            parent[v] = u
            q.append(v)
    return parent


def _walk(parent: dict[str, str | None], dst: str) -> tuple[str, ...] | None:
    if dst not in parent:
        return None
    out = [dst]
    while (up := parent[out[-1]]) is not None:
        out.append(up)
    return tuple(reversed(out))


class Router:
    """Computes and caches routes on one topology."""

    def __init__(self, topo: Topology):
        self.topo = topo
        self._host_bfs: dict[str, dict] = {}
        self._cache: dict[tuple, Route] = {}
        self._near_nic: dict[str, str | None] = {}
        self._home_gpu: dict[str, str | None] = {}

    def kind_in_node(self, kind: str, node: int) -> list:
        """Devices of one kind in one node, in build order (cached)."""
        idx = self.__dict__.get("_by_node")
        if idx is None:
            idx = {}
            for d in self.topo.devices.values():
                idx.setdefault((d.kind, d.node), []).append(d)
            self.__dict__["_by_node"] = idx
        return idx.get((kind, node), [])

    def kind_in_domain(self, kind: str, domain: int) -> list:
        """Devices of one kind in one NVLink domain (all its servers), in build order."""
        idx = self.__dict__.get("_by_domain")
        if idx is None:
            idx = {}
            for d in self.topo.devices.values():
                idx.setdefault((d.kind, self.topo.domain_of(d.id)), []).append(d)
            self.__dict__["_by_domain"] = idx
        return idx.get((kind, domain), [])

    # -- host (PCIe) side ------------------------------------------------------------------
    def host_walk(self, src: str, dst: str) -> tuple[str, ...] | None:
        """Shortest PCIe / inter-socket walk; intermediate devices are switches and CPUs."""
        if src not in self._host_bfs:
            devs = self.topo.devices
            self._host_bfs[src] = _bfs(
                self.topo, src, lambda ln: ln.kind in HOST_LINKS,
                lambda d: devs[d].kind in (PCIE_SWITCH, CPU))
        return _walk(self._host_bfs[src], dst)

    def _cpu_of(self, dev: str) -> str | None:
        d = self.topo.devices[dev]
        cpus = self.kind_in_node(CPU, d.node)
        for c in cpus:
            if c.numa == d.numa:
                return c.id
        # nearest CPU by PCIe hops
        best = None
        for c in cpus:
            w = self.host_walk(dev, c.id)
            if w and (best is None or len(w) < len(best)):
                best = w
        return best[-1] if best else None

    def gdr(self, gpu: str, nic: str) -> bool:
        """GPUDirect RDMA between a GPU and a NIC of its node (:func:`topology.paths.path`)."""
        cache = self.__dict__.setdefault("_gdr", {})
        if (gpu, nic) not in cache:
            cache[(gpu, nic)] = path(self.topo, gpu, nic).p2p
        return cache[(gpu, nic)]

    def host_of(self, walk: tuple[str, ...]) -> str | None:
        """The first CPU socket on a walk (where a staged copy lands in memory)."""
        return next((d for d in walk if self.topo.devices[d].kind == CPU), None)

    # -- scale-up side ---------------------------------------------------------------------
    def peer_walk(self, a: str, b: str) -> tuple[str, ...] | None:
        """GPU-GPU over NVLink / xGMI: a direct bundle, or one NVSwitch fabric."""
        ln = self.topo.link(a, b)
        if ln is not None and ln.kind in PEER_LINKS:
            return (a, b)
        for v, l1 in self.topo.neighbors(a):
            if l1.kind in PEER_LINKS and self.topo.devices[v].kind == NVSWITCH:
                l2 = self.topo.link(v, b)
                if l2 is not None and l2.kind in PEER_LINKS:
                    return (a, v, b)
        return None

    # -- NICs ------------------------------------------------------------------------------
    def _rails(self, node: int) -> None:
        """Match NICs and GPUs of a node one to one, closest first (NCCL's rail pairing)."""
        gpus = self.kind_in_node(GPU, node)
        nics = self.kind_in_node(NIC, node)
        cand = []
        for n in nics:
            for g in gpus:
                w = self.host_walk(g.id, n.id)
                if w is not None:
                    cand.append(((not self.gdr(g.id, n.id), len(w), abs(g.index - n.index),
                                  n.index, g.index), n.id, g.id))
        cand.sort()
        used_g: set[str] = set()
        for _, n, g in cand:
            if n in self._home_gpu or g in used_g:
                continue
            self._home_gpu[n] = g
            self._near_nic[g] = n
            used_g.add(g)
        for _key, n, g in cand:             # more NICs than GPUs: share the closest GPU
            self._home_gpu.setdefault(n, g)
        # more GPUs than NICs: the closest NIC, the least shared of equally close ones (NCCL
        # spreads GPUs without a NIC of their own over the NICs at the same distance)
        load = {n: 1 for n in self._home_gpu}
        for key, _n, g in cand:
            if g in self._near_nic:
                continue
            near = [(load.get(n2, 0), k2, n2) for k2, n2, g2 in cand
                    if g2 == g and k2[:2] == key[:2]]
            pick = min(near)[2]
            self._near_nic[g] = pick
            load[pick] = load.get(pick, 0) + 1
        for g in gpus:
            self._near_nic.setdefault(g.id, None)
        for n in nics:
            self._home_gpu.setdefault(n.id, None)

    def nearest_nic(self, gpu: str) -> str | None:
        """The NIC paired with a GPU (its rail): the closest, one NIC per GPU where possible."""
        if gpu not in self._near_nic:
            self._rails(self.topo.devices[gpu].node)
        return self._near_nic[gpu]

    def home_gpu(self, nic: str) -> str | None:
        """The GPU paired with a NIC (the GPU that owns that rail)."""
        if nic not in self._home_gpu:
            self._rails(self.topo.devices[nic].node)
        return self._home_gpu[nic]

    def gpu_nic_walk(self, gpu: str, nic: str, prefer_pxn: bool = False
                     ) -> tuple[tuple[str, ...], str, bool]:
        """Walk from a GPU to a NIC of its node: (walk, transport, staged).

        ``prefer_pxn``: relay through the NIC's own GPU over NVLink even when a PCIe path
        exists (NCCL's rings and trees keep each NIC fed by one GPU this way).
        """
        cache = self.__dict__.setdefault("_gn_cache", {})
        key = (gpu, nic, prefer_pxn)
        if key not in cache:
            cache[key] = self._gpu_nic_walk(gpu, nic, prefer_pxn)
        return cache[key]

    def _gpu_nic_walk(self, gpu: str, nic: str, prefer_pxn: bool
                      ) -> tuple[tuple[str, ...], str, bool]:
        w = self.host_walk(gpu, nic)
        home = self.home_gpu(nic)
        pxn = self.peer_walk(gpu, home) if prefer_pxn and home and home != gpu else None
        if pxn and home:
            hw = self.host_walk(home, nic)
            if hw and self.gdr(home, nic):
                return pxn + hw[1:], "nvlink", False
        if w is not None and self.gdr(gpu, nic):
            return w, "pcie", False
        if home and home != gpu:
            pw = self.peer_walk(gpu, home)
            hw = self.host_walk(home, nic)
            if pw and hw and self.gdr(home, nic):
                return pw + hw[1:], "nvlink", False          # PXN
        if w is None:
            # a GPU on another tray of an NVLink domain: NVLink to the NIC's own GPU, which
            # stages through its host when it has no GPUDirect path to that NIC
            pw = self.peer_walk(gpu, home) if home and home != gpu else None
            hw = self.host_walk(home, nic) if pw and home else None
            if pw and hw:
                return pw + hw[1:], "shm", True
            raise ValueError(f"no PCIe path from {gpu} to {nic}")
        cpu = self._cpu_of(gpu)
        if cpu and cpu not in w:
            a, b = self.host_walk(gpu, cpu), self.host_walk(cpu, nic)
            if a and b:
                w = a + b[1:]
        return w, "shm", True

    def fabric_walks(self, nic_a: str, nic_b: str, limit: int = 8) -> list[tuple[str, ...]]:
        """Equal-cost walks over the scale-out fabric (net links, through net switches)."""
        cache = self.__dict__.setdefault("_fabric_cache", {})
        key = (nic_a, nic_b, limit)
        if key not in cache:
            cache[key] = self._fabric_walks(nic_a, nic_b, limit)
        return cache[key]

    def _fabric_walks(self, nic_a: str, nic_b: str, limit: int) -> list[tuple[str, ...]]:
        import networkx as nx
        g = self._fabric_graph()
        if nic_a == nic_b:
            leaf = next((v for v, ln in self.topo.neighbors(nic_a) if ln.kind == "net"), None)
            if leaf is None:
                raise ValueError(f"{nic_a} has no fabric port")
            return [(nic_a, leaf, nic_a)]
        try:
            out = []
            for p in nx.all_shortest_paths(g, nic_a, nic_b):
                out.append(tuple(p))
                if len(out) >= limit:
                    break
            return out
        except nx.NetworkXNoPath:
            raise ValueError(f"no fabric path from {nic_a} to {nic_b}") from None

    def _fabric_graph(self):
        if not hasattr(self, "_fg"):
            import networkx as nx
            g = nx.Graph()
            # a NIC has one fabric port, so it is only ever an end of a walk
            g.add_edges_from((ln.a, ln.b) for ln in self.topo.links if ln.kind == "net")
            self._fg = g
        return self._fg

    # -- the general entry -----------------------------------------------------------------
    def route(self, src: str, dst: str, *, nic_src: str | None = None,
              nic_dst: str | None = None) -> Route:
        """Route between two devices (GPUs usually), following NCCL's transport rules.

        Examples
        --------
        >>> from gpufabric.topology.build import from_spec
        >>> t = from_spec({"gpu": "RTX-4090", "gpus_per_node": 2, "scale_up": "pcie",
        ...                "host": {"sockets": 1}})
        >>> r = Router(t).route("n0.gpu0", "n0.gpu1")      # GeForce: no P2P
        >>> r.transport, r.walks[0], r.hosts
        ('shm', ('n0.gpu0', 'n0.cpu0', 'n0.gpu1'), ('n0.cpu0',))
        """
        key = (src, dst, nic_src, nic_dst)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        r = self._route(src, dst, nic_src, nic_dst)
        self._cache[key] = r
        return r

    def _route(self, src, dst, nic_src, nic_dst) -> Route:
        devs = self.topo.devices
        if src == dst and nic_src is None:
            return Route(((src,),), "nvlink")
        a, b = devs[src], devs[dst]
        # GPUs of one NVLink domain (trays of one rack included) meet over NVLink
        remote = (self.topo.domain_of(src) != self.topo.domain_of(dst) if a.kind == b.kind == GPU
                  else a.node != b.node) or nic_src is not None or nic_dst is not None
        if a.kind == GPU and b.kind == GPU and not remote:
            pw = self.peer_walk(src, dst)
            if pw:
                return Route((pw,), "nvlink")
            hw = self.host_walk(src, dst)
            if hw is None:
                raise ValueError(f"no path from {src} to {dst}")
            if path(self.topo, src, dst).p2p:
                return Route((hw,), "pcie")
            cpu = self._cpu_of(src)
            up = self.host_walk(src, cpu) if cpu else None
            down = self.host_walk(cpu, dst) if cpu else None
            if cpu is None or up is None or down is None:
                raise ValueError(f"no path through host memory from {src} to {dst}")
            return Route((up + down[1:],), "shm", True, (cpu,))
        if a.kind == GPU and b.kind == GPU:
            ns = nic_src or self.nearest_nic(src)
            nd = nic_dst or self.nearest_nic(dst)
            if ns is None or nd is None:
                raise ValueError(f"no NIC to reach {dst} from {src}")
            w1, t1, s1 = self.gpu_nic_walk(src, ns)
            w3, t3, s3 = self.gpu_nic_walk(dst, nd)
            hosts = tuple(h for h, st in ((self.host_of(w1), s1), (self.host_of(w3), s3))
                          if st and h)
            w3 = tuple(reversed(w3))
            walks = tuple(w1 + f[1:-1] + w3 for f in self.fabric_walks(ns, nd))
            return Route(walks, "net", s1 or s3, hosts)
        if a.kind == GPU and b.kind == NIC:
            w, t, s = self.gpu_nic_walk(src, dst)
            h = self.host_of(w)
            return Route((w,), t, s, (h,) if s and h else ())
        if a.kind == NIC and b.kind == GPU:
            w, t, s = self.gpu_nic_walk(dst, src)
            h = self.host_of(w)
            return Route((tuple(reversed(w)),), t, s, (h,) if s and h else ())
        # anything else (GPU <-> NVSwitch for NVLS, NIC <-> switch...): shortest usable walk
        par = _bfs(self.topo, src, lambda ln: ln.kind not in ("sli", "crossfire"),
                   lambda d: devs[d].kind in (PCIE_SWITCH, CPU, NVSWITCH, NET_SWITCH))
        walk = _walk(par, dst)
        if walk is None:
            raise ValueError(f"no path from {src} to {dst}")
        kinds = {self.topo.hop(x, y).kind for x, y in pairwise(walk)}
        t = "net" if "net" in kinds else "pcie" if kinds & set(HOST_LINKS) else "nvlink"
        return Route((walk,), t)
