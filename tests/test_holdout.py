"""Hold-out check: the collective model on published machines that were NOT used to fit it.

tests/data/calibration/holdout.yaml lists nccl-tests results from machines absent from
../shared/calibration/collectives.yaml (GB200, H800, A800, H20, H100 PCIe, T4, RTX 3090 /
4090 / PRO 6000, RoCE and 12-node clusters). Nothing in the model was fitted on it.

The small-message goal (median |time error| <= 25 %) holds: 18.8 % over 10 points, since the
NVLS latency follows NCCL's own cost model (charged once). The large-message goal (median
|busbw error| <= 10 %) does NOT hold yet: 13.9 % over 21 points, 9 of which come from two
GB200 systems the model over-predicts (docs/benchmarks.md and docs/collectives.md say which
machines miss and why). The tests pin the measured large median as a ceiling (a change that
makes the hold-out worse fails) and keep its goal as an expected failure, so the day the model
meets it the xfail turns into an XPASS to act on.
"""

from pathlib import Path

import pytest

from gpufabric.collectives.validate import validate

HOLDOUT = Path(__file__).parent / "data" / "calibration" / "holdout.yaml"

#: Measured on the hold-out when it was collected (gpufabric validate ... --json), in %.
CURRENT_LARGE_MEDIAN = 13.94
CURRENT_SMALL_MEDIAN = 18.8
GOAL_LARGE_MEDIAN = 10.0
GOAL_SMALL_MEDIAN = 25.0


@pytest.fixture(scope="module")
def result():
    return validate(str(HOLDOUT))


def test_every_holdout_entry_runs(result):
    assert result["skipped"] == []
    s = result["summary"]
    assert s["points"] == 31
    assert s["large_points"] == 21
    assert s["small_points"] == 10


def test_holdout_medians_no_worse_than_recorded(result):
    # current values, not the goals: the goals are not met on the hold-out (see module doc)
    s = result["summary"]
    assert s["large_median_abs_pct"] <= CURRENT_LARGE_MEDIAN + 0.5, s
    assert s["small_median_abs_pct"] <= CURRENT_SMALL_MEDIAN + 0.5, s


def test_holdout_meets_the_small_message_goal(result):
    assert result["summary"]["small_median_abs_pct"] <= GOAL_SMALL_MEDIAN, result["summary"]


@pytest.mark.xfail(reason="hold-out large-message goal not met yet: median 13.9 % (GB200)",
                   strict=False)
def test_holdout_meets_the_large_message_goal(result):
    assert result["summary"]["large_median_abs_pct"] <= GOAL_LARGE_MEDIAN, result["summary"]


def test_holdout_is_not_the_calibration_file():
    # a hold-out that shared entries with the fitting set would not be one
    import yaml
    shared = Path(__file__).parent / "data" / "calibration" / "collectives.yaml"
    fit = {e["id"] for e in yaml.safe_load(shared.read_text())}
    held = yaml.safe_load(HOLDOUT.read_text())
    assert not fit & {e["id"] for e in held}
    fit_sources = {e["source"] for e in yaml.safe_load(shared.read_text())}
    assert not fit_sources & {e["source"] for e in held}
