"""NVIDIA's best-effort allocator, re-stated, next to gpufabric's preferred allocation."""

from __future__ import annotations

import json

from gpufabric.scheduler import besteffort
from gpufabric.topology.build import load


def test_pair_scores_count_nvlinks_between_gpus_and_nothing_through_nvswitch():
    bridges = besteffort.pair_scores(load("nvlink-bridge-pairs"))
    # 12 NVLinks on a bridge: 1200, plus the PCIe level (same CPU, 20); across sockets 10
    assert (int(bridges[0, 1]), int(bridges[1, 2]), int(bridges[0, 7])) == (1220, 20, 10)
    nvswitch = besteffort.pair_scores(load("hgx-h100"))
    assert int(nvswitch.max()) == 20      # 18 NVLinks each, but to the switch: PCIe only


def test_best_effort_partitions_and_may_answer_short():
    scores = besteffort.pair_scores(load("nvlink-bridge-pairs"))
    assert besteffort.allocate(scores, [0, 2, 4, 5, 6], [], 2) == (4, 5)
    assert besteffort.allocate(scores, [0, 2, 4, 5, 6], [6], 2) == (0, 6)
    assert besteffort.allocate(scores, [0, 1], [], 3) == ()
    # 5 free, size 3: the list is padded to 6; the winning partition's best set is the pair
    # 4-5 plus the padding slot, so the answer holds 2 GPUs
    dgx = besteffort.pair_scores(load("dgx-a100"))
    assert besteffort.allocate(dgx, [0, 2, 4, 5, 6], [], 3) == (4, 5)


def test_compare_command_shows_both_answers(cli):
    code, out, _ = cli("k8s", "compare", "nvlink-bridge-pairs", "dgx-a100", "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 18
    r = next(r for r in rows if r["system"] == "nvlink-bridge-pairs" and r["free"][0] == 1
             and r["size"] == 4)
    # two NVLink pairs against one pair and two loose GPUs; same PCIe bottleneck
    assert (r["gpufabric"], r["besteffort"]) == ([2, 3, 6, 7], [1, 2, 3, 5])
    assert (r["gpufabric_bw_GBps"], r["besteffort_bw_GBps"]) == (31.5, 31.5)
    assert (r["gpufabric_sum_GBps"], r["besteffort_sum_GBps"]) == (726.0, 457.5)
    code, out, _ = cli("k8s", "compare", "dgx-a100", "--random", "20", "--summary", "--json")
    assert json.loads(out) == [{"system": "dgx-a100", "requests": 29, "gpufabric_better": 1,
                                "besteffort_better": 0, "same": 28, "besteffort_short": 1}]
