"""Hold-out 3: published measurements collected in stop 15 of issue 9, predicted before any
change of that stop and never tuned against (tests/data/calibration/holdout3.yaml). The pins
are the model's errors on them; a change that moves them must say why in docs/collectives.md."""

from pathlib import Path

import pytest

from gpufabric.collectives.validate import validate

HOLDOUT3 = Path(__file__).parent / "data" / "calibration" / "holdout3.yaml"


@pytest.fixture(scope="module")
def result():
    return validate(str(HOLDOUT3))


def test_every_entry_runs_and_nothing_is_fitted_on_it(result):
    s = result["summary"]
    assert result["skipped"] == [] and s["points"] == 2 and s["fitted_entries"] == []


def test_two_node_hgx_clusters_on_eight_ndr_nics(result):
    """NVLS tree across two nodes, one 400G NIC per GPU (CoreWeave, 8 GiB)."""
    rows = {r["id"]: (r["algo"], round(r["err_pct"], 1)) for r in result["points"]}
    assert rows == {"coreweave-hgx-b200-2node": ("nvls_tree", -4.4),
                    "coreweave-hgx-h100-2node": ("nvls_tree", 6.8)}
    assert result["summary"]["large_max_abs_pct"] <= 10.0
