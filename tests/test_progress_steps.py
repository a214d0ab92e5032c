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
    assert _steps(err) == [f"gpufabric: train --search: {i}/60 layouts" for i in range(1, 61)]


def test_serve_reports_finished_requests_at_most_once_a_percent(cli, monkeypatch):
    monkeypatch.setenv("GPUFABRIC_PROGRESS", "0")
    code, out, err = cli("serve", "llama3-8b", "hgx-h100", "--requests", "800", "--json")
    assert code == 0 and json.loads(out)["requests"] == 800
    # 100 requests for each of the 8 instances, all queued at once; they finish in batches
    done = [8, 15, 23, 31, 39, 47, 55, 63, 71, 79, 87, 95, 100]
    assert _steps(err) == [f"gpufabric: serve: {i}/100 requests of one instance" for i in done]
