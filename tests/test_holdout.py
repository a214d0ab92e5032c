"""Hold-out check: the collective model on published machines that were NOT used to fit it.

tests/data/calibration/holdout.yaml lists nccl-tests results from machines absent from
../shared/calibration/collectives.yaml (GB200, H800, A800, H20, H100 PCIe, T4, RTX 3090 /
4090 / PRO 6000, RoCE and 12-node clusters). Nothing in the model was fitted on it.

The calibration goals (large-message median |busbw error| <= 10 %, small-message median
|time error| <= 25 %) do NOT hold on this set yet: the model measures a large median of
13.9 % (21 points) and a small median of 37.6 % (10 points); docs/benchmarks.md and
docs/collectives.md say which machines miss and why. The test below pins those measured
values as a ceiling (a change that makes the hold-out worse fails) and keeps the goals as an
expected failure, so the day the model meets them the xfail turns into an XPASS to act on.
"""

from pathlib import Path

import pytest

from gpufabric.collectives.validate import validate

HOLDOUT = Path(__file__).parent / "data" / "calibration" / "holdout.yaml"

#: Measured on the hold-out when it was collected (gpufabric validate ... --json), in %.
CURRENT_LARGE_MEDIAN = 13.94
CURRENT_SMALL_MEDIAN = 37.57
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


@pytest.mark.xfail(reason="hold-out goals not met yet: large median 13.9 %, small 37.6 %",
                   strict=False)
def test_holdout_meets_the_calibration_goals(result):
    s = result["summary"]
    assert s["large_median_abs_pct"] <= GOAL_LARGE_MEDIAN, s
    assert s["small_median_abs_pct"] <= GOAL_SMALL_MEDIAN, s


def test_holdout_is_not_the_calibration_file():
    # a hold-out that shared entries with the fitting set would not be one
    import yaml
    shared = Path(__file__).parent / "data" / "calibration" / "collectives.yaml"
    fit = {e["id"] for e in yaml.safe_load(shared.read_text())}
    held = yaml.safe_load(HOLDOUT.read_text())
    assert not fit & {e["id"] for e in held}
    fit_sources = {e["source"] for e in yaml.safe_load(shared.read_text())}
    assert not fit_sources & {e["source"] for e in held}
