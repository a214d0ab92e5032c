"""Every fitted or estimated constant of the network and collective models, as records.

Each :class:`~gpufabric.params.Param` (the record type all layers share) holds a value, its
unit, what it applies to (a whole protocol, algorithm, transport, link type or GPU generation;
never one machine), and where it comes from: a
``source`` (NCCL's own tuning code with its version, a datasheet) or, for fitted values, the
calibration ids it was ``fitted_on``. ``gpufabric validate`` uses those ids to report its error
also over the entries no parameter was fitted on; ``gpufabric params`` lists the table.

Link rates are not here: the catalog gives each link type's NCCL-usable rate with its source,
and :mod:`gpufabric.network.capacity` applies them. The network's own fitted constants (host
memory bounce, DRAM and inter-socket efficiencies) are defined beside the code that uses them
and recorded here with their sources; a test keeps both equal.

NCCL figures are from ``src/graph/tuning.cc`` of NCCL 2.28.3 (``ncclTunerConstantsDefaults``,
``ncclTopoTuneModel``, ``ncclTopoGetAlgoTime``) unless a record says otherwise.

The models read a constant as ``P.NAME`` (``from gpufabric.collectives import params as P``):
the value of the current :class:`~gpufabric.params.Params` (:func:`gpufabric.params.current`),
so a calibration profile in use is seen and nothing is copied at import.

Examples
--------
>>> from gpufabric.collectives import params as P
>>> P.HOP_LAT_US["nvlink"]["Simple"], P.HOP_LAT_US["shm"] == P.SHM_HOP_LAT_US
(3.4, True)
>>> REGISTRY["NVLS_EFFICIENCY"].value["nvlink4"], REGISTRY["NVLS_EFFICIENCY"].nccl_version
(0.85, '2.28.3')
>>> REGISTRY["SHM_HOP_LAT_US"].kind, len(REGISTRY["SHM_HOP_LAT_US"].fitted_on) >= 2
('fitted', True)
"""

from __future__ import annotations

from typing import Any

# the network's constants are recorded where they are defined (gpufabric.network and
# gpufabric.network.capacity: SHM_EFFICIENCY, DRAM_EFFICIENCY, INTERSOCKET_EFFICIENCY,
# OTHER_EFFICIENCY, NVLINK_FALLBACK, PCIE_FALLBACK, USABLE_RATE_SCALE, NET_FALLBACK);
# importing them here records them with this layer's constants (first)
import gpufabric.network.capacity  # noqa: F401
from gpufabric import catalog as _catalog
from gpufabric import params as _shared
from gpufabric.params import Param

NCCL_VERSION = "2.28.3"
_TUNING = "NCCL src/graph/tuning.cc"
LAYER = "collectives"

#: this layer's records (name -> :class:`~gpufabric.params.Param`)
REGISTRY: dict[str, Param] = _shared.layer_registry(LAYER)


#: the names recorded by this module (read as ``P.NAME``)
_OWN: set[str] = set()


def record(name: str, value: Any, unit: str, applies_to: str, source: str, *,
           fitted_on: tuple[str, ...] = (), nccl: bool = False, answer: str = "") -> Param:
    """Register one constant, readable as ``P.NAME``, and return its record; ``answer``
    marks a value fitted on a single entry as that entry's answer (why)."""
    _OWN.add(name)
    return _shared.record(LAYER, name, value, unit, applies_to, source, fitted_on=fitted_on,
                          nccl_version=NCCL_VERSION if nccl else "", answer=answer)


def __getattr__(name: str) -> Any:
    """``P.NAME``: the value of constant ``NAME`` in the current Params."""
    if name in _OWN:
        return _shared.value_of(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def fitted_ids() -> set[str]:
    """Calibration ids some parameter was fitted on."""
    return _shared.fitted_ids(LAYER)


def table() -> list[dict]:
    """This layer's records as dicts (see :func:`gpufabric.params.table`)."""
    return _shared.table(LAYER)


PROTOCOLS = ("LL", "LL128", "Simple")

# -- latencies -------------------------------------------------------------------------------
record(
    "BASE_LAT_US", {
        "ring": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
        "tree": {"LL": 6.8, "LL128": 14.0, "Simple": 8.4},
        "nvls": {"Simple": 0.0},
        "p2p": {"LL": 6.6, "LL128": 14.0, "Simple": 8.4},
        "pat": {"Simple": 8.0},
    }, "us", "algorithm x protocol: fixed cost of one collective",
    f"{_TUNING} baseLatencies (Tree 6.8/14/8.4 as the ring for Simple; NVLS 0; PAT 8)",
    nccl=True)

#: GPU to GPU through host memory: one hop (SHM_HOP_LAT_US below, also the ``shm`` row of
#: both hop tables)
_SHM_HOP_LAT_US = {"LL": 1.5, "LL128": 3.5, "Simple": 7.0}

record(
    "HOP_LAT_US", {
        "nvlink": {"LL": 0.6, "LL128": 1.9, "Simple": 3.4},
        "pcie": {"LL": 1.0, "LL128": 2.5, "Simple": 5.7},
        "net": {"LL": 2.7, "LL128": 4.0, "Simple": 14.0},
        "shm": _SHM_HOP_LAT_US,
    }, "us", "transport x protocol: one pipelined (ring) step",
    f"{_TUNING} hwLatencies, Ring row", nccl=True)

record(
    "SHM_HOP_LAT_US", _SHM_HOP_LAT_US, "us",
    "transport shm (GPU to GPU through host memory, no P2P): one hop inside one socket",
    "fitted: the writer's posted write, the reader's flag poll and read of host memory "
    "across PCIe (LL: 1.5 PCIe hops of NCCL's 1.0 us); LL128 and Simple keep their offsets "
    "above LL (estimates). Fitted with SHM_CROSS_SOCKET_US on an 8-GPU dual-socket ring (2 "
    "of its 8 hops cross) and a 4-GPU single-socket ring")

record(
    "SHM_CROSS_SOCKET_US", 4.0, "us",
    "transport shm: a hop whose bounce through host memory crosses the inter-socket link "
    "(UPI, xGMI), any protocol: the reader's polls and reads of the other socket's memory",
    "fitted with SHM_HOP_LAT_US: 8x RTX 4090 on two sockets (42 us, 14 ring steps, 2 of 8 "
    "hops across) and 4x RTX 5090 on one socket (15.6 us, 6 steps)")

record(
    "TREE_HOP_LAT_US", {
        "nvlink": {"LL": 0.6, "LL128": 1.25, "Simple": 4.0},
        "pcie": {"LL": 1.0, "LL128": 1.9, "Simple": 4.0},
        "shm": _SHM_HOP_LAT_US,
        "net": {"LL": 5.0, "LL128": 8.5, "Simple": 14.0},
    }, "us", "transport x protocol: one tree hop (and a ring's network hop at 1 rank/node)",
    f"{_TUNING} hwLatencies, Tree row (shm as SHM_HOP_LAT_US)", nccl=True)
# the shm rows are SHM_HOP_LAT_US: a profile that sets one sets all three
_shared.alias("HOP_LAT_US", "shm", "SHM_HOP_LAT_US")
_shared.alias("TREE_HOP_LAT_US", "shm", "SHM_HOP_LAT_US")

record(
    "NET_REF_WIRE_US", 1.5, "us", "network hop: the wire latency NCCL's NET figures include",
    "estimate: NIC to NIC through one InfiniBand NDR leaf (catalog ib-ndr lat_us); a fabric's "
    "own latency beyond it is added per network hop")

record(
    "NET_SIMPLE_FLUSH", 1.0, "x the NIC's latency beyond NET_REF_WIRE_US",
    "network hop received with the Simple protocol: the receiver's flush (a read of the "
    "received buffer through its own NIC, so the GPU sees the data) pays the NIC's own "
    "latency once more; LL and LL128 carry flags with the data and need no flush",
    f"{_TUNING} ncclTopoTuneModel (interLat = hwLat[NET] + latencyInter, and for Simple "
    "'Also add the flush extra latency': interLat += latencyInter once more); NCCL "
    "src/transport/net.cc (flush after a GPUDirect RDMA receive, Simple only). The NIC's "
    "latency beyond InfiniBand's, as per network hop (catalog net_speeds lat_us - "
    "NET_REF_WIRE_US, at least 0)", nccl=True)

record(
    "LL_MULTINODE_INTRA", 1.8, "x", "LL intra-node hops when the kernel also drives the network",
    f"{_TUNING} (intraLat *= 1.8 for LL across nodes)", nccl=True)

record(
    "RING_PLATEAU_LAT", 1.4, "x",
    "ring Simple all_reduce across nodes, sizes >= 64 B per channel and rank: latency factor",
    f"{_TUNING} ncclTopoGetAlgoTime ('plateau effect of ring', 1.4 from Ampere on)", nccl=True)

record(
    "MAX_CHANNELS", 32, "channels",
    "channels of a full-node ring or tree (the ring plateau's per-channel size test)",
    "NCCL MAXCHANNELS/2 ring search limit; DGX H100 logs show 32 coll channels (estimate for "
    "other machines)")

record(
    "RING_SLICE_BYTES", {"LL": 32768, "LL128": 576000, "Simple": 1048576}, "bytes",
    "ring: data one channel moves per pipelined slice, by protocol; before a ring streams, "
    "each channel's first slice (at most the buffer) is paid once at the steady rate",
    "NCCL src/include/device.h and comm.h: Simple buffer 4 MiB / NCCL_STEPS 8 = 512 KiB a step, "
    "ALLREDUCE_SLICESTEPS 2 steps a slice; LL128 a step of 120 x 640 x 8 B lines, 15/16 data; "
    "LL 8 x 512 x 16 B lines, half data", nccl=True)

record(
    "RING_CHANNELS_PER_NVLINK", 2, "channels per NVLink link",
    "ring channels of a GPU: 2 per NVLink link of the GPU (at most MAX_CHANNELS), 2 on PCIe "
    "(the ring-fill's channel count)",
    "NCCL src/graph/search.cc: one ring per NVLink link found by the search, duplicated "
    "(DGX A100: 12 links, 24 channels in NCCL's logs; H100: 18 links, capped at 32)",
    nccl=True)

record(
    "NET_OVERHEAD_US", {"intel": 1.0, "amd": 2.0, "other": 1.0}, "us",
    "ring across nodes: floor of each intra-node step (x3 for Simple), by host CPU vendor",
    f"{_TUNING} getNetOverhead", nccl=True)

# -- protocol and algorithm efficiencies ------------------------------------------------------
record(
    "PROTO_EFFICIENCY", {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}, "share of link rate",
    "protocol on rings: LL carries 4 data bytes per 8-byte store with a flag; LL128 120 of "
    "128 bytes", f"{_TUNING} (ring LL busBw x 0.5 capped by llMaxBws; LL128 x 0.92)",
    nccl=True)

record(
    "PER_CH_MAX_RING_LL128_GBPS", {
        "volta": 20.0, "ampere": 20.0, "hopper": 36.7, "blackwell": 40.0},
    "GB/s per channel", "ring LL128 by GPU generation (1, 2 and more nodes alike): bus "
    "bandwidth at most ring channels x this",
    f"{_TUNING} perChMaxRingLL128Bws (ring LL128 busBw = min(busBw x 0.92, nChannels x "
    "perChMaxRingLL128Bw))", nccl=True)

record(
    "RING_LL128_ONE_PER_NODE", 0.7, "share of link rate",
    "ring LL128 across nodes with one rank per node (ppn < 2): replaces LL128's 0.92",
    f"{_TUNING} (ring LL128 busBw x (ppn < 2 ? 0.7 : 0.92))", nccl=True)

record(
    "TREE_LL_EFFICIENCY", 1.0 / 3.8, "share of link rate", "protocol LL on trees",
    f"{_TUNING} (tree LL busBw / 3.8, capped by llMaxBws)", nccl=True)

record(
    "LL_MAX_BW_GBPS", {
        "volta": 39.0, "ampere": 87.7, "hopper": 141.0, "blackwell": 282.0,
        "intel": (39.0, 20.4), "amd": (22.5, 19.0)},
    "GB/s bus bandwidth", "LL: ceiling inside one node by GPU generation; across nodes by "
    "host CPU vendor, for 2 nodes and more",
    f"{_TUNING} llMaxBws", nccl=True)

record(
    "TREE_EFFICIENCY", 0.92, "share of link rate",
    "tree algorithms (chains and double binary trees; NVLS trees)",
    f"{_TUNING} (tree all_reduce busBw x 0.92)", nccl=True)

record(
    "PER_CH_MAX_NVLS_TREE_GBPS", {
        "hopper": (0.0, 57.7, 45.5), "blackwell": (0.0, 96.0, 43.1)},
    "GB/s per channel", "NVLS tree by GPU generation and node count (1, 2, more)",
    f"{_TUNING} perChMaxNVLSTreeBws", nccl=True)

record(
    "TREE_CORRECTION", {
        "LL": (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9,
               1.0, 1.0, 1.0, 1.0),
        "LL128": (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9,
                  .9, .9, .9, 1.0, 1.0),
        "Simple": (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7,
                   .7, .8, .9, .9)},
    "x bandwidth", "tree all_reduce at 64 B x 2^i (i = 0..22): NCCL's mid-size correction",
    f"{_TUNING} treeCorrectionFactor", nccl=True)

record(
    "NVLS_EFFICIENCY", {"nvlink4": 0.85, "nvlink5": 0.74}, "share of NVLink rate",
    "NVLS multimem traffic through the NVSwitch, by NVLink generation (Hopper, Blackwell)",
    f"{_TUNING} nvlsEfficiency", nccl=True)

record(
    "NVLS_KERNEL_SHARE", 0.76, "x NVLS efficiency",
    "NVLS all_reduce: share of NCCL's NVLS rate (2 x NVLink rate x nvlsEfficiency) its kernels "
    "sustain, any NVLink generation",
    "fitted on the Hopper NVLS plateaus (8 GiB: 476 and 480 GB/s busbw, NVLink 4 x18 at "
    "20.6 GB/s x 0.85); Blackwell follows from NCCL's own per-generation efficiency")

record(
    "NVLS_CHANNELS", 16, "channels", "NVLS and NVLS tree: channels NCCL runs",
    "NCCL src/transport/nvls.cc NCCL_NVLS_NCHANNELS default 16 (NCCL 2.18-2.22; 2.28 picks "
    "the count itself)")

record(
    "NVLS_CHUNK_BYTES", 128 * 1024, "bytes",
    "NVLS: bytes each channel handles per rank and pipeline step; one loop (channels x ranks "
    "of the domain x chunk, at most the buffer) fills the pipeline before results flow",
    "NCCL src/transport/nvls.cc NCCL_NVLS_CHUNKSIZE default 128 KiB")

record(
    "NVLS_TREE_CHUNK", {"max_4_nodes": 64 * 1024, "rules": ((4, 64 * 1024), (1, 32 * 1024))},
    "bytes",
    "NVLS tree: bytes each channel sends per head and pipeline step. It starts at the NVLS "
    "chunk (NVLS_CHUNK_BYTES; 64 KiB from 4 nodes on) and halves to 64 KiB while a "
    "channel's share of the buffer is under 4 x heads x chunk, then to 32 KiB while under "
    "1 x heads x chunk; a loop is "
    "channels x heads (one per NIC) x chunk",
    "NCCL src/enqueue.cc calcCollChunking, NVLS_TREE branch (2.21-2.28; "
    "NCCL_NVLSTREE_MAX_CHUNKSIZE default: 64 KiB from 4 nodes)", nccl=True)

record(
    "NVLS_TREE_INTER_SHARE", 0.5, "x NIC rate",
    "NVLS tree beyond 2 nodes: each head's (NIC's) tree channel bandwidth",
    f"{_TUNING} ncclTopoTuneModel (NVLS_TREE bw = min(bwIntra, nNodes <= 2 ? bwInter : "
    "bwInter/2)); one channel head per NIC of the host, as search.cc's NVLS graph",
    nccl=True)

record(
    "NVLS_LAT_US", 25.0, "us", "one NVLS operation inside the NVLink domain",
    f"{_TUNING} hwLatencies NVLINK NVLS Simple (latency = intraLat once)", nccl=True)

record(
    "NVLS_TREE_NET_LAT_US", 14.0, "us", "NVLS tree: one network hop of its tree (Simple)",
    f"{_TUNING} hwLatencies NET NVLSTree Simple", nccl=True)

record(
    "PAT", {"efficiency": 0.75, "per_rank_us": 2.8, "log_latency_divisor": 3.5}, "x / us",
    "PAT all_gather / reduce_scatter (one GPU per node): share of the ring's rate, linear "
    "latency per rank, the network latency per log2(nodes) divided by this",
    f"{_TUNING} (PAT busBw x 0.75; latency log2(nNodes) x interLat/3.5 + nRanks x 2.8)",
    nccl=True)

record(
    "P2P_PER_PEER_US", 0.15, "us", "all_to_all: posting and matching one send/receive pair",
    "estimate")

record(
    "EFA_V1_EFFICIENCY", _catalog.net_speed("efa-v1").efficiency, "share of line rate",
    "AWS EFA v1 (SRD, 100 Gb/s cards of p3dn/p4d): what NCCL moves per card, on rings and "
    "trees alike (the catalog's efa-v1 efficiency, read from there)",
    "fitted: 2 p4dn.24xlarge all_reduce 1 GiB (NVIDIA/nccl issue 527); its 3- and 4-node "
    "points are held out. NVIDIA/nccl issue 235 (p3dn) gives 50-60 Gb/s per card on 8-32 nodes")

# -- CPU ranks on one host (gpufabric.collectives.host) ---------------------------------------
HOST_TRANSPORTS = ("shm", "tcp")

record(
    "HOST_LAT_US", {"shm": 0.5, "tcp": 15.0}, "us",
    "host transport (shm: MPI between processes of one host through shared memory; tcp: Gloo "
    "over TCP loopback): one message of a collective step, send posted to receive completed",
    "estimate: shm, MPICH's ch4 shared-memory eager path, one-way osu_latency of 0.2-0.5 us "
    "between cores of current x86 servers (OSU Micro-Benchmarks, MPICH intra-node), plus "
    "posting and matching the receive; tcp, one round through the kernel's loopback stack "
    "(send and receive system calls, a wake-up of the receiving thread), 10-20 us")

record(
    "HOST_COPY_SHARE", {"shm": 0.5, "tcp": 0.25}, "share of the host copy rate",
    "host transport: bytes of a message moved per byte the sending core can copy (shm: MPICH "
    "copies a message into a shared buffer and out of it, two copies pipelined, so about one "
    "half; tcp: the copies into and out of socket buffers and the protocol's work, about a "
    "quarter); a reduction's local pass over the data runs at the same rate",
    "estimate: shm, MPICH ch4 posix eager cells and the LMT copy through a shared buffer "
    "(copy-in, copy-out) without CMA/XPMEM single-copy; tcp, two kernel copies per byte plus "
    "checksum-free loopback processing")

record(
    "HOST_CORE_COPY_GBps", 10.0, "GB/s",
    "one CPU core's memory-to-memory copy rate (STREAM Copy with one thread): a rank's copy "
    "rate, unless the sockets' DRAM bandwidth shared among the host's ranks is lower",
    "estimate: STREAM Copy with one thread on current x86 server cores is 8-20 GB/s "
    "(J. McCalpin, STREAM, https://www.cs.virginia.edu/stream/; one core cannot keep more "
    "than its outstanding-miss limit in flight)")

record(
    "HOST_OVERSUB_WAIT_MS", 1.5, "ms",
    "host with more ranks than cores: the wait of a message whose peer is not running (it "
    "runs again after a scheduler time slice), paid on a share 1 - cores/ranks of the messages",
    "estimate: Linux CFS minimum time slice sched_min_granularity 0.75 ms x (1 + log2 CPUs) "
    "= 1.5 ms at 2 CPUs (kernel/sched/fair.c defaults; a busy-polling MPI rank keeps its "
    "core for its whole slice)")

record(
    "MPICH_THRESHOLDS", {
        "allreduce_short": 2048, "allgather_short": 81920, "allgather_long": 524288,
        "redscat_long": 524288, "bcast_short": 12288, "bcast_long": 524288, "bcast_min_procs": 8,
        "alltoall_short": 256, "alltoall_medium": 32768, "alltoall_min_procs": 8},
    "B (procs for *_min_procs)",
    "MPI collectives over one host's shared memory: the message sizes at which MPICH changes "
    "algorithm (definitions of MPICH's defaults, not fits)",
    "MPICH src/mpi/coll CVARs MPIR_CVAR_ALLREDUCE_SHORT_MSG_SIZE, ALLGATHER_SHORT/LONG_MSG_SIZE, "
    "REDSCAT_COMMUTATIVE_LONG_MSG_SIZE, BCAST_SHORT/LONG_MSG_SIZE, BCAST_MIN_PROCS, "
    "ALLTOALL_SHORT/MEDIUM_MSG_SIZE, ALLTOALL_MIN_PROCS; algorithms of R. Thakur, R. "
    "Rabenseifner, W. Gropp, 'Optimization of Collective Communication Operations in MPICH', "
    "IJHPCA 19(1), 2005")

#: Sizes nccl-tests calls large and small in validation summaries (definitions, not fits).
LARGE_BYTES = 64 * 2**20
SMALL_BYTES = 64 * 2**10
