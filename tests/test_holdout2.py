"""Hold-out 2: published measurements collected for issue 9 (rack-scale NVLink domains,
clusters with fewer NICs than GPUs, cloud fabrics), against which nothing was tuned."""

from pathlib import Path

import pytest

from gpufabric.collectives.validate import load_entries, validate
from gpufabric.errors import InputError

HOLDOUT2 = Path(__file__).parent / "data" / "calibration" / "holdout2.yaml"


@pytest.fixture(scope="module")
def result():
    return validate(str(HOLDOUT2))


def test_every_entry_names_its_source_and_what_the_catalog_lacks():
    entries = load_entries(str(HOLDOUT2))
    assert len(entries) == 11
    assert all(e["source"] for e in entries)


def test_entries_the_catalog_cannot_build_are_skipped_with_the_reason(result):
    skipped = {s["id"]: s["error"] for s in result["skipped"]}
    assert set(skipped) == {"p4dn-multinode-efa", "p6-b200-2node-efa-small"}
    assert "unknown network speed 'efa-100'" in skipped["p4dn-multinode-efa"]
    needs = {s["id"]: s.get("needs") for s in result["skipped"]}
    assert needs["p4dn-multinode-efa"].startswith("AWS EFA (100G, SRD) NIC kind")
    assert result["summary"]["points"] == 22
    assert result["summary"]["unfitted"]["points"] == 22     # nothing here was fitted on


def test_a_group_on_one_gpu_per_node_is_validated_as_such(result):
    rows = [r for r in result["points"] if r["id"] == "h100-2x1gpu-4nic-tree"]
    assert [r["ranks"] for r in rows] == [2] * 5 and {r["algo"] for r in rows} == {"tree"}


def test_per_node_must_be_a_positive_integer(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- {id: x, system: {gpu: H100-SXM}, collective: all_reduce, ranks: 2, "
                   "per_node: 0, points: [{size: 8, time_us: 1}]}\n")
    with pytest.raises(InputError, match=r"\[0\]\(x\)\.per_node: got 0; expected a positive"):
        load_entries(str(bad))


#: Measured on hold-out 2 (gpufabric validate tests/data/calibration/holdout2.yaml --json), in %.
#: Goals not met here: large median 17.8 (4 of its 10 large points are the 20-rack GB200 entry
#: the spec approximates), large max 313; small median 24.5 (goal 25). Pinned as ceilings.
CURRENT = {"large_median_abs_pct": 17.77, "large_max_abs_pct": 313.0,
           "small_median_abs_pct": 24.53}


def test_holdout2_no_worse_than_recorded(result):
    s = result["summary"]
    for key, value in CURRENT.items():
        assert s[key] <= value + 0.5, (key, s[key])
    assert (s["large_points"], s["small_points"]) == (10, 6)
