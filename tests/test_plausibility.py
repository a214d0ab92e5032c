"""A training prediction above the best published MFU of its GPU generation and model class
says so, with what the prediction rests on."""

from __future__ import annotations

import doctest
import json

import gpufabric.workloads.plausibility as P

H100_64 = "gpu=H100-SXM,gpus_per_node=8,nodes=8,nic=ib-ndr"


def test_every_ceiling_names_its_run_and_source():
    for r in P._rows():
        assert 0 < r["mfu"] < 1 and r["run"] and len(r["source"]) > 30
    assert doctest.testmod(P).failed == 0


def test_train_warns_above_the_published_ceiling(cli):
    code, out, _ = cli("train", "llama3-70b", H100_64, "--zero", "3", "--recompute", "full",
                       "--json")
    r = json.loads(out)
    assert code == 0 and r["mfu"] > P.ceiling("hopper", "dense")["mfu"]
    assert len(r["warnings"]) == 1
    assert r["warnings"][0].startswith("predicted MFU ")
    assert "above the best published for dense models on hopper GPUs (49%" in r["warnings"][0]
    code, out, _ = cli("train", "llama2-7b", "dgx-a100", "--tp", "8", "--json")
    assert code == 0 and json.loads(out)["warnings"] == []    # 7B at TP8 is far below
