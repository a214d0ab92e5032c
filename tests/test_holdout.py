"""Hold-out check: the collective model on published machines that were NOT used to fit it.

tests/data/calibration/holdout.yaml lists nccl-tests results from machines absent from
../shared/calibration/collectives.yaml (GB200, H800, A800, H20, H100 PCIe, T4, RTX 3090 /
4090 / PRO 6000, RoCE and 12-node clusters). No parameter was fitted on it, but it has been
looked at: its GB200 NVL72 miss is what sent the NVLS model to NCCL's own form (bus bandwidth
independent of the number of GPUs), so it is no longer a blind hold-out (docs/collectives.md);
tests/data/calibration/holdout2.yaml was the blind one (see its test for what changed that).
The NVLS pipeline fill (one loop of 16 channels x ranks x 128 KiB, NCCL's defaults) was added
with this file's NVL72 rack in view (+36 % -> +6.5 % at 512 MiB) and the calibration file's H200.

Both goals hold: large-message median 6.9 % over 21 points, small-message median 18.8 % over
10. The maximum (111.2 %, the H100 PCIe pair on NVLink bridges) does not. The tests pin the
medians as ceilings, so a change that makes the hold-out worse fails.
"""

from pathlib import Path

import pytest

from gpufabric.collectives.validate import validate

HOLDOUT = Path(__file__).parent / "data" / "calibration" / "holdout.yaml"

#: Measured on the hold-out (gpufabric validate ... --json), in %.
CURRENT_LARGE_MEDIAN = 6.92
CURRENT_SMALL_MEDIAN = 18.84
GOAL_LARGE_MEDIAN = 10.0
#: issue 22 point 5: small messages (< 64 KiB, time) at most 20 % median on every public file
GOAL_SMALL_MEDIAN = 20.0


@pytest.fixture(scope="module")
def result():
    return validate(str(HOLDOUT))


def test_every_holdout_entry_runs(result):
    assert result["skipped"] == []
    s = result["summary"]
    # no parameter is fitted on this file and no entry is marked looked_at: all held out
    assert s["points"] == s["all"]["points"] == 31
    assert s["by_size"]["large"]["points"] == 21
    assert s["by_size"]["small"]["points"] == 10


def test_holdout_medians_no_worse_than_recorded(result):
    # current values, not the goals: the goals are not met on the hold-out (see module doc)
    s = result["summary"]
    assert s["by_size"]["large"]["median_abs_pct"] <= CURRENT_LARGE_MEDIAN + 0.5, s
    assert s["by_size"]["small"]["median_abs_pct"] <= CURRENT_SMALL_MEDIAN + 0.5, s


def test_holdout_meets_the_small_message_goal(result):
    s = result["summary"]["by_size"]["small"]
    assert s["median_abs_pct"] <= GOAL_SMALL_MEDIAN, s


def test_holdout_meets_the_large_message_goal(result):
    s = result["summary"]["by_size"]["large"]
    assert s["median_abs_pct"] <= GOAL_LARGE_MEDIAN, s


def test_holdout_is_not_the_calibration_file():
    # a hold-out that shared entries with the fitting set would not be one
    import yaml
    shared = Path(__file__).parent / "data" / "calibration" / "collectives.yaml"
    fit = {e["id"] for e in yaml.safe_load(shared.read_text())}
    held = yaml.safe_load(HOLDOUT.read_text())
    assert not fit & {e["id"] for e in held}
    fit_sources = {e["source"] for e in yaml.safe_load(shared.read_text())}
    assert not fit_sources & {e["source"] for e in held}
