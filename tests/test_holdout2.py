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


def test_every_entry_names_its_source_and_is_built_as_its_machine():
    entries = load_entries(str(HOLDOUT2))
    assert len(entries) == 11
    assert all(e["source"] for e in entries)
    assert not any(e.get("needs") for e in entries)
    racks = next(e for e in entries if e["id"] == "coreweave-gb200-20racks")["system"]
    assert (racks["gpus_per_node"], racks["nodes"], racks["nvlink_domain"]) == (4, 360, 72)


def test_every_entry_runs_now_that_efa_and_nvlink_domains_exist(result):
    assert result["skipped"] == []
    assert result["summary"]["points"] == 29
    assert result["summary"]["unfitted"]["points"] == 29     # nothing here was fitted on


def test_summary_against_the_goals(result):
    """Large-message goals (median <= 10 %, max <= 25 %) are NOT met here; see docs."""
    s = result["summary"]
    assert (s["large_median_abs_pct"], s["large_max_abs_pct"]) == (13.4, 33.53)
    assert s["small_median_abs_pct"] == 19.34


def test_20_nvl72_racks_are_timed_as_rings_and_trees_across_the_racks(result):
    """NCCL's NVLS-tree and tree estimates beyond two domains count one channel per NIC of a
    compute tray (4), so at 1-4 GiB the ring over 1440 ranks is chosen, as the measured
    curve's ~4.6 ms fixed cost says."""
    rows = [r for r in result["points"] if r["id"] == "coreweave-gb200-20racks"]
    assert [r["algo"] for r in rows] == ["tree", "ring", "ring", "ring"]
    assert [round(r["err_pct"], 1) for r in rows] == [15.2, 10.6, 23.8, 33.5]


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
