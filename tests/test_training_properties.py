"""Properties of the training model that must hold for every layout."""

from functools import cache

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufabric.errors import InputError
from gpufabric.topology.build import load
from gpufabric.workloads.compute import gpu_spec
from gpufabric.workloads.memory import training_memory
from gpufabric.workloads.parallel import Parallel
from gpufabric.workloads.training import predict_step

NICS = ("ib-ndr", "ib-hdr", "ib-edr")          # 400, 200, 100 Gbit/s: each slower than the last


@cache
def system(nic: str, links: int = 18):
    return load(f"gpu=H100-SXM,gpus_per_node=8,nodes=8,nic={nic},nics_per_node=8,"
                f"nvlink_links={links}", materialize_nodes=4)


layouts = st.builds(
    lambda tp, pp, mb, zero, model, rc: (model, Parallel(
        tp=tp, pp=pp, dp=64 // (tp * pp), micro_batch=mb, zero=zero, recompute=rc,
        global_batch=(64 // (tp * pp)) * mb * 4)),
    st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2]),
    st.sampled_from([0, 1, 3]), st.sampled_from(["llama3-8b", "mixtral-8x7b", "gpt-j-6b"]),
    st.sampled_from(["none", "full"]))

FAST = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(layouts)
def test_step_time_never_falls_when_a_link_gets_slower(case):
    model, par = case
    try:
        times = [predict_step(model, system(nic), par, 2048).step_time_s for nic in NICS]
    except InputError:
        return                                   # a layout the model cannot take
    assert times == sorted(times)
    fewer_nvlinks = predict_step(model, system("ib-ndr", 9), par, 2048).step_time_s
    assert fewer_nvlinks >= times[0]


@FAST
@given(layouts, st.sampled_from(["bf16", "fp8"]))
def test_throughput_never_above_the_gpus_peak(case, precision):
    model, par = case
    try:
        r = predict_step(model, system("ib-ndr"), par, 2048, precision=precision)
    except InputError:
        return
    peak = gpu_spec("H100-SXM").peak_tflops(precision)
    assert 0 < r.mfu < 1 and r.tflops_per_gpu < peak


@FAST
@given(st.sampled_from(["llama3-70b", "deepseek-v3", "gpt3-175b", "bert-large"]),
       st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2, 8]),
       st.sampled_from(["none", "selective", "full"]), st.integers(1, 4),
       st.sampled_from([512, 1024, 4096]))
def test_memory_grows_with_micro_batch_and_sequence(model, tp, pp, rc, mb, seq):
    def mem(mb_: int, seq_: int) -> float:
        par = Parallel(tp=tp, pp=pp, dp=8, micro_batch=mb_, recompute=rc, zero=1,
                       global_batch=8 * mb_ * 8)
        return training_memory(model, par, seq_, "H100-SXM").total_GiB
    try:
        base = mem(mb, seq)
    except InputError:
        return
    assert mem(mb + 1, seq) >= base
    assert mem(mb, 2 * seq) >= base
