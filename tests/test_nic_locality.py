"""NIC locality in GPU-set choice: the topology layer says how each GPU reaches each NIC
(GPUDirect RDMA under a PCIe switch, through a CPU of its NUMA node, across sockets), and the
set key counts the NICs a set can use, after bandwidth and hops, before the pair sum."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np
import pytest

from gpufabric.scheduler.cluster import load_nodes
from gpufabric.scheduler.gpuset import nic_counts, preferred_set, set_key
from gpufabric.scheduler.nodetopo import best_gpu_set, tables
from gpufabric.scheduler.policies import make_placement
from gpufabric.scheduler.state import Request, State
from gpufabric.topology.build import from_data, load
from gpufabric.topology.nvsmi import parse, to_system
from gpufabric.topology.paths import gpu_nic_levels

NVSMI = Path(__file__).parent / "fixtures" / "nvsmi"
#: pcie-switch-dual-root (8 A100 PCIe, one switch per socket) with one HDR NIC
DUAL_ROOT_NIC = ("gpu=A100-PCIe,gpus_per_node=8,scale_up=pcie,host.cpu=EPYC-7763,"
                 "host.sockets=2,host.pcie_switches=2,host.switch_layout=dual-root,"
                 "host.switch=PEX88096,nics_per_node=1,nic=ib-hdr")
HGX_4NIC = "gpu=H100-SXM,gpus_per_node=8,nics_per_node=4,nic=ib-ndr"


def test_how_each_gpu_reaches_each_nic():
    # HGX H100 with 4 NDR NICs: NIC k under the switch of GPU 2k (PIX), the others of the
    # socket through the CPU (NODE), the other socket's across (SYS)
    assert gpu_nic_levels(load("hgx-h100-4node-4nic")).tolist() == [
        [2, 1, 0, 0], [1, 1, 0, 0], [1, 2, 0, 0], [1, 1, 0, 0],
        [0, 0, 2, 1], [0, 0, 1, 1], [0, 0, 1, 2], [0, 0, 1, 1]]
    assert gpu_nic_levels(load(DUAL_ROOT_NIC)).T.tolist() == [[2, 2, 2, 2, 0, 0, 0, 0]]
    assert gpu_nic_levels(load("pcie-switch-dual-root")).shape == (8, 0)
    # real nvidia-smi output: the NICs on their own switch, NODE from the GPUs of the socket
    m = parse((NVSMI / "rtx6000ada_4gpu_4nic.txt").read_text())
    t = from_data(to_system(m, "rtx6000ada"), "rtx6000ada")
    assert gpu_nic_levels(t).tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1],
                                          [0, 0, 1, 1]]


def test_the_set_key_counts_nics_after_bandwidth_and_hops():
    t = load("hgx-h100-4node-4nic")
    bw, hops = tables(t)
    lv = gpu_nic_levels(t)
    assert nic_counts([0, 1], lv) == (1, 2) and nic_counts([0, 2], lv) == (2, 2)
    assert nic_counts([0, 2, 4, 6], lv) == (4, 4) and nic_counts([1, 3], lv) == (0, 2)
    assert set_key([0, 2], bw, hops, lv) == (450.0, -2, 2, 2, 450.0)
    assert set_key([0, 2], bw, hops) == (450.0, -2, 0, 0, 450.0)
    assert preferred_set(range(8), 2, bw, hops, nics=lv) == (0, 2)
    assert preferred_set(range(8), 2, bw, hops) == (0, 1)
    assert preferred_set(range(8), 3, bw, hops, nics=lv) == (0, 2, 4)
    assert preferred_set([1, 3, 5, 6, 7], 2, bw, hops, nics=lv) == (1, 6)
    # bandwidth still comes first: on the dual-root box with GPU 0 taken, the 4 GPUs of the
    # switch without the NIC beat the 3 left beside the NIC plus one across the sockets
    t = load(DUAL_ROOT_NIC)
    bw, hops = tables(t)
    lv = gpu_nic_levels(t)
    assert preferred_set([1, 2, 3, 4, 5, 6, 7], 4, bw, hops, nics=lv) == (4, 5, 6, 7)
    assert set_key((4, 5, 6, 7), bw, hops, lv) == (31.5, -2, 0, 0, 189.0)
    assert set_key((1, 2, 3), bw, hops, lv) == (31.5, -2, 1, 1, 94.5)


@pytest.mark.parametrize("k", [2, 3, 4, 5, 6])
def test_exact_greedy_and_the_scheduler_search_agree_on_the_key(k):
    t = load("hgx-h100-4node-4nic")
    bw, hops = tables(t)
    lv = gpu_nic_levels(t)
    best = max(set_key(c, bw, hops, lv) for c in combinations(range(8), k))
    assert best[2] == min(k, 4)                          # a NIC per GPU, 4 NICs at most
    assert set_key(preferred_set(range(8), k, bw, hops, nics=lv), bw, hops, lv) == best
    greedy = preferred_set(range(8), k, bw, hops, nics=lv, exact_limit=0)
    assert set_key(greedy, bw, hops, lv) == best
    assert set_key(best_gpu_set(list(range(8)), k, bw, hops, lv)[0], bw, hops, lv) == best


def test_the_topology_policy_prefers_nodes_whose_sets_have_nics():
    c = load_nodes(f"pcie-switch-dual-root*1+{DUAL_ROOT_NIC}*1+gpu=H100-SXM,gpus_per_node=8*1"
                   f"+{HGX_4NIC}*1")
    assert c.gpu_nics(0) is None and c.gpu_nics(1).shape == (8, 1)
    state = State(c)
    policy = make_placement("topology", c, None, np.random.default_rng(0))
    pcie, nvswitch = np.array([1, 1, 0, 0], bool), np.array([0, 0, 1, 1], bool)
    two, four = Request(8000, 1024, 2, 1000), Request(8000, 1024, 4, 1000)
    # alike but for the NIC, the node with it wins, with the set that uses it
    assert policy.select(state, two, pcie) == (1, (0, 1))
    assert policy.select(state, two, nvswitch) == (3, (0, 2))
    assert policy.select(state, four, nvswitch) == (3, (0, 2, 4, 6))
    assert policy.scores(state, four, np.arange(4)).tolist() == [0.0, 1.0, 2.0, 3.0]
