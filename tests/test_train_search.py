"""The training layout search: branch and bound against brute force, its axes and counts, and
optimizer-state offload."""

from __future__ import annotations

import pytest

from gpufabric.workloads import search as S
from gpufabric.workloads.memory import training_memory
from gpufabric.workloads.parallel import Parallel
from gpufabric.workloads.training import OFFLOAD_B, host_link_GBps, predict_step

ONE_NODE = "gpu=H100-SXM,gpus_per_node=8,nodes=1"
AXES = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "micro_batch", "zero", "fsdp", "sp",
        "recompute", "offload", "tp_overlap", "dp_overlap", "tp_bwd_overlap", "order")


def _layout(r):
    return {k: r.parallel[k] for k in AXES}


@pytest.mark.parametrize("model, kw", [
    # dense, memory-bound: 70B on 8 GPUs needs sharding (the best found offloads)
    ("llama3-70b", {"global_batch": 8, "seq_len": 4096, "micro_batches": (1,), "max_cp": 2,
                    "max_vpp": 2}),
    # MoE: expert layouts carved out of dp and folded over tp x dp
    pytest.param("qwen3-30b-a3b", {"global_batch": 8, "seq_len": 4096, "micro_batches": (1,),
                                   "max_cp": 1, "max_pp": 1}, marks=pytest.mark.slow),
    # two nodes: data parallelism and HSDP across the network
    pytest.param("llama3-8b", {"system": "gpu=H100-SXM,gpus_per_node=4,nodes=2,nic=ib-ndr",
                               "global_batch": 8, "seq_len": 8192, "micro_batches": (1,),
                               "max_cp": 2, "max_vpp": 2}, marks=pytest.mark.slow),
])
def test_pruned_search_finds_what_brute_force_finds(model, kw):
    kw = dict(kw)
    system = kw.pop("system", ONE_NODE)
    rs, n = S.search_layouts(model, system, top=3, **kw)
    bf = S.brute_force(model, system, top=3, **kw)
    assert [_layout(r) for r in rs] == [_layout(r) for r in bf]
    assert [r.step_time_s for r in rs] == [r.step_time_s for r in bf]
    # every layout considered is counted once: pruned by memory or bound, or timed
    assert n.considered == n.pruned_memory + n.pruned_bound + n.timed
    assert n.pruned_bound > 0 and n.pruned_memory > 0
    assert n.timed < n.considered / 5        # the bounds do the work, not the timing


def test_search_covers_every_axis():
    ax = S.Axes()
    sh = S.Shape(tp=2, cp=1, pp=1, dp=8, ep=1, etp=0, vpp=1, micro_batch=1)
    sts = S.settings(sh, 8, ax, 4096)
    assert {s.recompute for s in sts} == {"none", "selective", "full"}
    assert {s.sp for s in sts} == {True, False}
    assert {(s.zero, s.fsdp) for s in sts} == {(0, ""), (1, ""), (2, ""), (3, ""),
                                               (3, "hybrid")}
    assert {s.offload for s in sts} == {True, False}
    # TP overlap: full (userbuffers), the backward only (Megatron's asynchronous
    # column-parallel backward) or none
    assert {(s.tp_overlap, s.tp_bwd_overlap) for s in sts} == {(True, False), (False, True),
                                                               (False, False)}
    assert {s.dp_overlap for s in sts} == {True, False}
    assert len(sts) == 3 * 2 * 5 * 2 * 3 * 2
    # with pipeline and data parallelism where tp leaves room in a node: which of the two
    # runs inside the node (over NVLink) and which over the NICs
    piped = S.settings(S.Shape(2, 1, 2, 4, 1, 0, 1, 1), 8, ax, 4096)
    assert {s.order for s in piped} == {"tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"}
    full = S.settings(S.Shape(8, 1, 2, 4, 1, 0, 1, 1), 8, ax, 4096)
    assert {s.order for s in full} == {"tp-cp-ep-dp-pp"}       # tp fills the node
    # settings a shape cannot tell apart take one value: no sp or TP overlap at tp 1, no
    # sharding or DP overlap without a data-parallel group; ZeRO-3 / HSDP only without pp
    one = S.settings(S.Shape(1, 1, 8, 1, 1, 0, 1, 1), 8, ax, 4096)
    assert len(one) == 3 * 1 * 1 * 2 * 1 * 1
    piped = S.settings(S.Shape(2, 1, 2, 4, 1, 0, 1, 1), 8, ax, 4096)
    assert {s.zero for s in piped} == {0, 1, 2}
    shapes = list(S.shapes(S.load_model("llama3-8b"), 16, 8, global_batch=32, seq=4096,
                           axes=ax))
    assert {s.cp for s in shapes} >= {1, 2, 4} and {s.vpp for s in shapes} >= {1, 2, 4, 8}
    assert {s.micro_batch for s in shapes} == {1, 2, 4, 8}
    assert {s.micro_batch for s in shapes if s.dp == 16} == {1, 2}   # 32 / 16 per rank


def test_tp_overlap_fixed_by_the_caller_is_kept():
    rs = S.search("llama3-8b", "gpu=H100-SXM,gpus_per_node=8,nodes=2,nic=ib-ndr",
                  global_batch=32, seq_len=4096, top=3, tp_overlap=False,
                  micro_batches=(1,), max_cp=1, max_vpp=1)
    assert all(r.parallel["tp_overlap"] is False for r in rs)


def test_offload_frees_the_optimizer_states_and_streams_them_over_the_host_link():
    from gpufabric.workloads.search import _topology
    topo = _topology(ONE_NODE)
    # H100 SXM hangs off PCIe Gen5 x16: 63 GB/s per direction (catalog)
    assert host_link_GBps(topo) == 63.0
    assert host_link_GBps(_topology("gb200-nvl72")) == 450.0    # NVLink-C2C to Grace
    par = Parallel(tp=8, dp=1, zero=1)
    on = par.with_(offload=True)
    assert training_memory("llama3-8b", on, 4096, "H100-SXM").optimizer_GiB == 0.0
    assert training_memory("llama3-8b", par, 4096, "H100-SXM").optimizer_GiB > 10
    r0 = predict_step("llama3-8b", topo, par, 4096)
    r1 = predict_step("llama3-8b", topo, on, 4096)
    # 8.03e9 / 8 parameters per GPU, 12 B each way over 63 GB/s: ~0.19 s, far above the HBM
    # pass of the on-GPU step
    params = 8.03e9 / 8
    assert r1.breakdown_s["optimizer"] == pytest.approx(
        OFFLOAD_B.value * params / 63e9, rel=0.02)
    assert r1.step_time_s - r0.step_time_s == pytest.approx(
        r1.breakdown_s["optimizer"] - r0.breakdown_s["optimizer"])
    assert r1.parallel["offload"] is True and r0.parallel["offload"] is False


def test_offload_must_be_a_bool():
    from gpufabric.errors import InputError
    with pytest.raises(InputError, match="offload"):
        Parallel(offload=1)


def test_cli_search_says_what_it_considered_and_pruned(cli):
    import json
    args = ("train", "llama3-70b", ONE_NODE, "--global-batch", "8", "--seq-len", "4096",
            "--search", "--top", "2")
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    n = json.loads(out)["search"]
    assert n["considered"] == n["pruned"] + n["timed"] > 0
    assert n["pruned"] == n["pruned_bound"] + n["pruned_memory"]
    code, out, err = cli(*args)
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("# considered"))
    assert line == (f"# considered {n['considered']:,} layouts ({n['shapes']:,} shapes): "
                    f"{n['pruned_bound']:,} pruned by bound, {n['pruned_memory']:,} by memory, "
                    f"{n['timed']:,} timed")
