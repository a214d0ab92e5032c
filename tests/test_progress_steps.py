"""Long commands report progress through the shared ``cli.common.Progress``: off a terminal, one
line per step on stderr (here from the start: ``GPUFABRIC_PROGRESS=0``); stdout untouched."""

import json


def _steps(err: str) -> list[str]:
    return [line.split(" (")[0] for line in err.splitlines() if line.startswith("gpufabric: ")
            and not line.startswith("gpufabric: note:")]


def test_schedule_reports_each_policy_and_seed(cli, monkeypatch):
    monkeypatch.setenv("GPUFABRIC_PROGRESS", "0")
    code, out, err = cli("schedule", "synthetic-openb", "--policy", "random", "--runs", "2",
                         "--json")
    assert code == 0 and json.loads(out)["policy"] == "random"
    assert _steps(err) == ["gpufabric: schedule: 1/2 random seed 42",
                           "gpufabric: schedule: 2/2 random seed 43"]


def test_train_search_reports_each_layout(cli, monkeypatch):
    monkeypatch.setenv("GPUFABRIC_PROGRESS", "0")
    code, out, err = cli("train", "llama3-8b", "dgx-a100", "--search", "--json")
    assert code == 0 and json.loads(out)["layouts"]
    steps = _steps(err)
    assert steps[0].startswith("gpufabric: train --search: 1/")
    total = int(steps[0].split("/")[1].split()[0])
    assert len(steps) == total and steps[-1] == f"gpufabric: train --search: {total}/{total} layouts"
