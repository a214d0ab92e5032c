"""Physical parameters of the collective model, each for a whole protocol, algorithm or link
type, never for one machine.

Bandwidths come from the topology through :mod:`gpufabric.network` (the catalog's
NCCL-usable rate of each link type, shared max-min fairly). What is here is time that no link
rate explains: a kernel's fixed cost per algorithm and protocol, the latency of one hop per
transport and protocol, and how much of a link's rate each protocol delivers.

The figures follow NCCL's own cost model (src/graph/tuning.cc: base latencies per algorithm
and protocol, hardware latencies per NVLink / PCI / NET hop, the LL and LL128 bandwidth
factors), with three additions fitted on tests/data/calibration/collectives.yaml and recorded in
docs/collectives.md: the hop latency of a bounce through host memory (``shm``), the NVLS
in-switch reduction efficiency and its per-pass latency.
"""

from __future__ import annotations

PROTOCOLS = ("LL", "LL128", "Simple")

#: Fixed cost of launching one collective (us), per algorithm family and protocol.
#: NCCL tuning.cc baseLat (Tree: 6.8 / 14.0; Ring: 6.6 / 14.0 / 8.4).
BASE_LAT_US = {
    "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
    "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
    "nvls": {"Simple": 0.0},
    "p2p": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
}

#: Latency of one hop (us) by transport and protocol, for ring-like (pipelined) steps.
#: nvlink / pcie / net: NCCL tuning.cc hwLat (Ring row). shm (host-memory bounce, no GPU P2P):
#: the writer's PCIe posted write, the reader's flag poll and read across PCIe, about 2.5 PCIe
#: hops; fitted on the 8x RTX 4090 small-message latency.
HOP_LAT_US = {
    "nvlink": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
    "pcie": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
    "shm": {"LL": 2.5, "LL128": 4.5, "Simple": 8.0},
    "net": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
}

#: The NET figures above include the wire: NIC to NIC through one InfiniBand NDR leaf switch
#: (catalog ib-ndr lat_us). A network hop adds its own fabric latency beyond this reference
#: (RoCE NICs and switches, a hop through the core).
NET_REF_WIRE_US = 1.5

#: Latency of one tree hop (us): NCCL tuning.cc hwLat (Tree row).
TREE_HOP_LAT_US = {
    "nvlink": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0},
    "pcie": {"LL": 1.0, "LL128": 1.9, "Simple": 4.0},
    "shm": {"LL": 2.5, "LL128": 4.5, "Simple": 8.0},
    "net": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0},
}

#: Intra-node LL hops get slower when the same kernel also drives the network (NCCL: x1.8).
LL_MULTINODE_INTRA = 1.8

#: Share of the usable link rate each protocol delivers.
#: LL: 8-byte stores carrying 4 bytes of data with a flag, one thread per line (NCCL: 1/4 for
#: reductions and across nodes, 1/3 otherwise); LL128: 120 of every 128 bytes (NCCL: 0.92).
PROTO_EFFICIENCY = {"LL": 0.25, "LL128": 0.92, "Simple": 1.0}
LL_EFFICIENCY_COPY = 1.0 / 3.0

#: Tree algorithms (chains and double binary trees, NVLS trees too) reach this share of the
#: link rate: a tree node forwards while it reduces, with less pipelining than a ring
#: (NCCL: busBw x 0.9 for trees).
TREE_EFFICIENCY = 0.9

#: NVLS (NVLink SHARP): share of the NVLink rate that multimem reduce / multicast traffic gets
#: through the NVSwitch, per NVLink generation of the switch (NCCL src/graph/tuning.cc
#: nvlsEfficiency: Hopper 0.85, Blackwell 0.74), and the latency of one NVLS operation inside
#: the node (NCCL tuning.cc: NVLS latency = intraLat once, hwLat NVLINK NVLS Simple = 25 us).
NVLS_EFFICIENCY = {"nvlink4": 0.85, "nvlink5": 0.74}
NVLS_LAT_US = 25.0

#: Point-to-point operations (all_to_all): extra cost per peer (us) of posting and matching one
#: send / receive pair in a grouped call.
P2P_PER_PEER_US = 0.15

#: Sizes nccl-tests calls large and small in validation summaries.
LARGE_BYTES = 64 * 2**20
SMALL_BYTES = 64 * 2**10
