"""Hold-out 4: 30 published runs collected blind in stop 16 of issue 9 and predicted once
before anything changed (tests/data/calibration/holdout4.yaml; first predictions in
docs/collectives.md, "Hold-out 4"). The pins are the model's errors on them now; a change that
moves them must say why there."""

from pathlib import Path

import pytest

from gpufabric.collectives.validate import validate

HOLDOUT4 = Path(__file__).parent / "data" / "calibration" / "holdout4.yaml"


@pytest.fixture(scope="module")
def result():
    return validate(str(HOLDOUT4))


def _errs(result, entry):
    return {r["size"]: round(r["err_pct"], 1) for r in result["points"] if r["id"] == entry}


def test_every_entry_runs_and_one_is_fitted_on(result):
    s = result["summary"]
    # the host-memory hop inside one socket (SHM_HOP_LAT_US) rests on the 4x RTX 5090 run
    assert result["skipped"] == [] and s["points"] == 111
    assert s["fitted_entries"] == ["rtx5090-4gpu-genoa-no-p2p"]
    # first prediction (blind, at 1545f19): 19.8 / 112.1 / 23.5; goals: 10 / 25 / 20
    assert s["large_median_abs_pct"] <= 17 and s["large_max_abs_pct"] <= 115   # not met; docs
    # the small-message goal (issue 22 point 5): median at most 20 %, also without the
    # fitted entry
    assert s["small_median_abs_pct"] <= 20
    assert s["unfitted"]["small_median_abs_pct"] <= 20


def test_all_to_all_on_p5_uses_every_efa_card(result):
    """4 EFA cards per GPU: -71 / -70 % at 2 GiB while one card per GPU was used."""
    G = 2**30
    assert _errs(result, "aws-p5-4node-efa-alltoall")[2 * G] == 14.6
    assert _errs(result, "aws-p5-32node-efa-alltoall")[2 * G] == 20.9


def test_first_generation_efa_runs_simple(result):
    """p4de: aws-ofi-nccl forces Simple on EFA v1; the 8-byte time was -64 % as an LL tree."""
    rows = [r for r in result["points"] if r["id"] == "aws-p4de-2node-efa-allreduce"]
    assert {r["proto"] for r in rows} == {"Simple"}
    # with the receiver's flush on each Simple network hop (EFA's latency once more, as
    # NCCL's cost model adds the plugin's latency again for Simple): -27 % -> within 15 %
    assert abs(_errs(result, "aws-p4de-2node-efa-allreduce")[8]) <= 15


def test_two_b200_clusters_differ_where_the_model_cannot(result):
    """Same hardware (8x B200, 8 NDR NICs a node), forced rings: one cluster within 8 %, the
    other 25 % slower than predicted."""
    G = 2**30
    assert _errs(result, "together-b200-32node-ring-allreduce")[32 * G] == -3.2
    assert _errs(result, "together-dgxc-b200-46node-ring-allreduce")[16 * G] == 24.8
