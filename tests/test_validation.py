"""The shared validation layer: one point record, one skip record, derived status, one summary."""

import json
from pathlib import Path

import pytest
import yaml

from gpufabric import validation as V
from gpufabric.errors import InputError

DATA = Path(__file__).parent / "data" / "calibration"


def test_stats_are_median_p90_max_of_absolute_errors():
    assert V.stats([]) == {"median_abs_pct": None, "p90_abs_pct": None, "max_abs_pct": None,
                           "points": 0}
    s = V.stats([-10.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, None])
    # nearest rank: the 9th of 10 sorted values
    assert s == {"median_abs_pct": 5.5, "p90_abs_pct": 9.0, "max_abs_pct": 10.0, "points": 10}


def test_summary_leads_with_held_out_and_keeps_the_others_apart():
    ps = [V.point("h", 0, "ttft_ms", 100.0, 120.0, V.HELD_OUT),
          V.point("h", 1, "itl_ms", 10.0, 9.0, V.HELD_OUT),
          V.point("f", 0, "ttft_ms", 100.0, 101.0, V.FITTED),
          V.point("l", 0, "ttft_ms", 100.0, 50.0, V.LOOKED_AT)]
    s = V.summarize(ps)
    assert (s["points"], s["fitted"]["points"], s["looked_at"]["points"],
            s["all"]["points"]) == (2, 1, 1, 4)
    assert s["max_abs_pct"] == 20.0 and s["looked_at"]["max_abs_pct"] == 50.0
    assert set(s["by_metric"]) == {"ttft_ms", "itl_ms"}
    t = s["by_metric"]["ttft_ms"]
    assert (t["points"], t["fitted"]["points"], t["looked_at"]["points"]) == (1, 1, 1)
    # the same shape at every level
    keys = {"median_abs_pct", "p90_abs_pct", "max_abs_pct", "points"}
    assert keys <= set(s["fitted"]) and keys <= set(t) and keys <= set(t["looked_at"])
    # several files pool their points
    assert V.pooled([{"points": ps[:2]}, {"points": ps[2:]}]) == s


def test_status_is_derived_fitted_first():
    import gpufabric.collectives.params  # noqa: F401  (records the collectives' constants)
    assert V.status("p4dn-2node-efa", "a mark") == V.FITTED       # a record names it
    assert V.status("my-entry", "seen while the ring changed") == V.LOOKED_AT
    assert V.status("my-entry") == V.HELD_OUT
    # prefix-* patterns of fitted_on count too
    assert V.status("anything", ids={"any*"}) == V.FITTED


def test_entry_and_file_marks(tmp_path):
    e = {"id": "a", "looked_at": "the tree changed"}
    assert V.looked_at(e) == "the tree changed"
    assert V.looked_at({"id": "b"}, "the whole file") == "the whole file"
    with pytest.raises(InputError, match=r"f.yaml: \[0\]\(c\).looked_at: got ''; expected a "
                                         "sentence"):
        V.looked_at({"id": "c", "looked_at": ""}, path="f.yaml", where="[0](c)")
    entries, mark = V.entries_of({"looked_at": "seen", "entries": [e]}, "f.yaml")
    assert (entries, mark) == ([e], "seen")
    assert V.entries_of([e], "f.yaml") == ([e], "")


def test_a_file_level_mark_makes_every_entry_looked_at(cli, tmp_path):
    entries = yaml.safe_load((DATA / "holdout.yaml").read_text())[:2]
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump({"looked_at": "the NVLS model changed after it",
                                 "entries": entries}))
    code, out, err = cli("validate", str(f), "--json")
    assert code == 0, err
    r = json.loads(out)
    assert {p["status"] for p in r["points"]} == {"looked-at"}
    assert r["summary"]["points"] == 0 and r["summary"]["looked_at"]["points"] > 0
    code, out, err = cli("validate", str(f))
    assert code == 0 and "not looked at): 0 points, median n/a" in out


def test_a_bad_mark_is_one_line_exit_2(cli, tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("looked_at: 3\nentries:\n- {id: x, system: {gpu: H100-SXM}, collective: "
                 "all_reduce, points: [{size: 8, time_us: 10}]}\n")
    code, out, err = cli("validate", str(f))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "m.yaml: looked_at: got 3; expected a sentence" in err


def test_the_repository_files_mark_what_their_headers_say():
    from gpufabric.collectives.validate import load_entries
    # the entries the headers name as seen before a change (and the small-message ones read
    # while the small-message model was chosen) are marked
    h3 = {e["id"] for e in load_entries(str(DATA / "holdout3.yaml")) if e["looked_at"]}
    assert h3 >= {"coreweave-hgx-b200-2node", "coreweave-hgx-h100-2node",
                  "gb200-3x-nvl4-ib-ring", "gb200-3x-nvl4-ib-tree", "gb200-3x-nvl8-ib-ring",
                  "gb200-3x-nvl8-ib-tree"}
    h4 = {e["id"] for e in load_entries(str(DATA / "holdout4.yaml")) if e["looked_at"]}
    assert h4 >= {"aws-p5-4node-efa-alltoall", "aws-p5-32node-efa-alltoall",
                  "aws-p4de-2node-efa-allreduce"}


def test_no_validator_lists_entries_by_hand():
    """Status comes from the records and the files: no id lists in the validators' code."""
    src = Path(V.__file__).parent
    for rel in ("workloads/validate.py", "workloads/inference/validate.py",
                "collectives/validate.py"):
        text = (src / rel).read_text()
        assert "FITTED_ON" not in text and "TUNED_ON" not in text, rel


def test_no_measurement_entry_id_is_written_in_the_code():
    """What a constant was fitted on lives in data (src/gpufabric/data/fits.yaml, the engine
    profiles); run settings in the measurement files: the code names no entry."""
    import re

    ids = set()
    for f in DATA.glob("*.yaml"):
        d = yaml.safe_load(f.read_text())
        d = d.get("entries", []) if isinstance(d, dict) else d
        ids |= {str(e["id"]) for e in d or [] if isinstance(e, dict) and "id" in e}
    pat = re.compile("|".join(re.escape(i) for i in sorted(ids, key=len, reverse=True)))
    src = Path(V.__file__).parent
    hits = [f"{p.relative_to(src)}:{n}" for p in src.rglob("*.py")
            for n, line in enumerate(p.read_text().splitlines(), 1) if pat.search(line)]
    assert hits == []


@pytest.mark.parametrize("name, key, near", [
    ("mlperf_inference.yaml", "scale-up", "scale_up"),     # inference
    ("training.yaml", "gpus_per_nod", "gpus_per_node"),    # training
    ("video.yaml", "nodes", None),                         # generation: one server, no nodes
])
def test_a_system_key_its_validator_does_not_read_is_one_line_exit_2(cli, tmp_path, name, key,
                                                                      near):
    """A key of an entry's system no validator reads used to be dropped without a word (a
    misspelt scale-up left the machine at its default): it is refused, naming the entry's
    field, the nearest allowed key and every allowed one."""
    data = yaml.safe_load((DATA / name).read_text())
    entries = data["entries"] if isinstance(data, dict) else data
    e = {**entries[0], "system": {**entries[0]["system"], key: 4}}
    f = tmp_path / name
    f.write_text(yaml.safe_dump([e]))
    code, out, err = cli("validate", str(f))
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert f"{name}: [0]({e['id']}).system: unknown key {key!r}" in err
    assert (f"did you mean {near!r}?" in err) == (near is not None)
    assert "(allowed: " in err and "gpu" in err
