"""Hold-out 4: 30 published runs collected blind in stop 16 of issue 9 and predicted once
before anything changed (tests/data/calibration/holdout4.yaml; first predictions in
docs/collectives.md, "Hold-out 4"); the three entries the two changes after it were made for
carry looked_at. The tests bound the model's errors with the reason; a change that moves one
out of its band must say why there."""

from pathlib import Path

import pytest

from gpufabric.collectives.validate import validate

HOLDOUT4 = Path(__file__).parent / "data" / "calibration" / "holdout4.yaml"


@pytest.fixture(scope="module")
def result():
    return validate(str(HOLDOUT4))


def _errs(result, entry):
    return {r["size"]: r["error_pct"] for r in result["points"] if r["id"] == entry}


def test_every_entry_runs_and_one_is_fitted_on(result):
    s = result["summary"]
    # the host-memory hop inside one socket (SHM_HOP_LAT_US) rests on the 4x RTX 5090 run
    assert result["skipped"] == [] and s["all"]["points"] == 111
    assert sorted({r["id"] for r in result["points"] if r["status"] == "fitted"}) == [
        "rtx5090-4gpu-genoa-no-p2p"]
    # first prediction (blind, at 1545f19): large median 19.8, max 112.1, small median 23.5
    # (docs/collectives.md). The small-message goal (issue 22 point 5: median <= 20 %) holds
    # over all points; the large median (goal 10 %) does not: bounded, it must not get worse
    large, small = s["all"]["by_size"]["large"], s["all"]["by_size"]["small"]
    assert small["median_abs_pct"] <= 20, small
    assert large["median_abs_pct"] <= 19.8 and large["max_abs_pct"] <= 112.2, large


def test_all_to_all_on_p5_uses_every_efa_card(result):
    """4 EFA cards per GPU: -71 / -70 % at 2 GiB while one card per GPU was used."""
    G = 2**30
    # the GPU's own PCIe port binds now: over-predicted, within 25 %
    assert 0 < _errs(result, "aws-p5-4node-efa-alltoall")[2 * G] <= 25
    assert 0 < _errs(result, "aws-p5-32node-efa-alltoall")[2 * G] <= 25


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
    assert abs(_errs(result, "together-b200-32node-ring-allreduce")[32 * G]) <= 8
    assert 20 <= _errs(result, "together-dgxc-b200-46node-ring-allreduce")[16 * G] <= 30
