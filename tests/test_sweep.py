"""The one sweep mechanism: in-process, and on a local Ray instance when Ray is installed."""

import pytest

from gpufabric import sweep
from gpufabric.workloads.search import search

SYS = "gpu=H100-SXM,gpus_per_node=8,nodes=2,nic=ib-ndr"


def test_in_process_map_keeps_order():
    assert sweep.run(abs, [-3, 1, -2]) == [3, 1, 2]


@pytest.mark.slow
def test_ray_gives_the_same_ranking_as_in_process():
    ray = pytest.importorskip("ray")
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    except Exception as exc:  # pragma: no cover - a machine that cannot start Ray
        pytest.skip(f"cannot start a local Ray instance: {exc}")
    try:
        kw = {"global_batch": 32, "seq_len": 4096, "top": 4}
        local = search("llama3-8b", SYS, **kw)
        remote = search("llama3-8b", SYS, ray=True, **kw)
        assert [r.parallel for r in remote] == [r.parallel for r in local]
        assert [r.step_time_s for r in remote] == [r.step_time_s for r in local]
    finally:
        ray.shutdown()


def test_an_unreachable_ray_address_fails_fast_with_one_line(cli):
    code, out, err = cli("train", "llama3-8b", SYS, "--global-batch", "32", "--search",
                         "--ray-address", "127.0.0.1:1")
    assert code == 2 and out == ""
    assert err.strip() == ("gpufabric: error: --ray-address: cannot reach the Ray cluster at "
                           "127.0.0.1:1 (Connection refused)")
