"""Long commands report progress through the shared ``cli.common.Progress``: off a terminal, a
line at most every ``PROGRESS_INTERVAL_S`` seconds and one for the last step, on stderr (here
from the start: ``GPUFABRIC_PROGRESS=0``); stdout untouched."""

import json
from functools import partial
from io import StringIO

import pytest
import yaml

from gpufabric.cli import common
from gpufabric.cli.common import Progress
from gpufabric.report import inference as inf

CALIBRATION = "tests/data/calibration"


def _steps(err: str) -> list[str]:
    return [line.split(" (")[0] for line in err.splitlines() if line.startswith("gpufabric: ")
            and not line.startswith("gpufabric: note:")]


@pytest.fixture
def every_step(monkeypatch):
    """Progress shown from the start, a line for every step (no time between lines)."""
    monkeypatch.setenv("GPUFABRIC_PROGRESS", "0")
    monkeypatch.setattr(common, "PROGRESS_INTERVAL_S", 0.0)


@pytest.fixture
def first_and_last(monkeypatch):
    """Progress shown from the start, then nothing until the last step (a long interval)."""
    monkeypatch.setenv("GPUFABRIC_PROGRESS", "0")
    monkeypatch.setattr(common, "PROGRESS_INTERVAL_S", 1e9)


class FakeClock:
    """Seconds that pass only when told to."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_long_run_off_a_terminal_prints_a_line_every_few_seconds():
    # 100,000 steps over 100 s: the first line at 2 s, then one every 5 s, and the last step
    err, clock = StringIO(), FakeClock()
    with Progress("serve", 100_000, stream=err, clock=clock) as p:
        for i in range(1, 100_001):
            clock.now = i / 1000
            p.step("requests")
    lines = err.getvalue().splitlines()
    assert len(lines) == 21
    assert lines[0] == "gpufabric: serve: 2000/100000 requests (2.0 s)"
    assert lines[1] == "gpufabric: serve: 7000/100000 requests (7.0 s)"
    assert lines[-2] == "gpufabric: serve: 97000/100000 requests (97.0 s)"
    assert lines[-1] == "gpufabric: serve: 100000/100000 requests (100.0 s)"


def test_the_interval_is_a_knob_and_a_short_run_prints_nothing():
    err, clock = StringIO(), FakeClock()
    with Progress("validate", 1000, after_s=0, interval_s=30, stream=err, clock=clock) as p:
        for i in range(1, 1001):
            clock.now = i / 10                                 # 100 s in all
            p.step()
    assert len(err.getvalue().splitlines()) == 5             # 0.1 s, 30.1, 60.1, 90.1, end
    err, clock = StringIO(), FakeClock()
    with Progress("validate", 1000, stream=err, clock=clock) as p:
        for i in range(1, 1001):
            clock.now = i / 1000                               # 1 s: under the 2 s
            p.step()
    assert err.getvalue() == ""


def test_nested_steps_go_on_from_where_the_run_is():
    # a planned step that the library runs in steps of its own (compare's inference section)
    err = StringIO()
    with Progress("compare", 3, after_s=0, interval_s=0, stream=err) as p:
        p.step("dgx-a100")
        tell = p.part("inference serving")
        for _ in range(4):
            tell(1, 4)
        p.step("report")
    assert _steps(err.getvalue()) == [
        "gpufabric: compare: 1/3 dgx-a100", "gpufabric: compare: 2/6 inference serving",
        "gpufabric: compare: 3/6 inference serving", "gpufabric: compare: 4/6 inference serving",
        "gpufabric: compare: 5/6 inference serving", "gpufabric: compare: 6/6 report"]


def test_schedule_reports_each_policy_and_seed(cli, every_step):
    code, out, err = cli("schedule", "synthetic-openb", "--policy", "random", "--runs", "2",
                         "--json")
    assert code == 0 and json.loads(out)["policy"] == "random"
    assert _steps(err) == ["gpufabric: schedule: 1/2 random seed 42",
                           "gpufabric: schedule: 2/2 random seed 43"]


def test_train_search_reports_its_layouts(cli, first_and_last):
    code, out, err = cli("train", "llama3-8b", "dgx-a100", "--search", "--json")
    assert code == 0 and json.loads(out)["layouts"]
    # shape by shape, in the order of their bounds; the shapes pruned by bound end it at once
    steps = _steps(err)
    total = steps[0].split("/")[1]
    assert steps == [f"gpufabric: train --search: 1/{total}",
                     f"gpufabric: train --search: {total.split()[0]}/{total}"]


def test_serve_reports_finished_requests_at_most_once_a_percent(cli, every_step):
    code, out, err = cli("serve", "llama3-8b", "hgx-h100", "--requests", "800", "--json")
    assert code == 0 and json.loads(out)["requests"] == 800
    # 100 requests for each of the 8 instances, all queued at once; they finish in batches
    done = [8, 15, 23, 31, 39, 47, 55, 63, 71, 79, 87, 95, 100]
    assert _steps(err) == [f"gpufabric: serve: {i}/100 requests of one instance" for i in done]


def test_serve_search_reports_its_layouts(cli, every_step):
    code, out, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=2", "--rate", "4",
                         "--requests", "40", "--slo-ttft", "500", "--slo-tpot", "30",
                         "--search", "--json")
    n = json.loads(out)["candidates"]
    assert code == 0 and n > 1
    assert _steps(err) == [f"gpufabric: serve --search: {i}/{n} layouts"
                           for i in range(1, n + 1)]


def test_serve_versus_counts_the_layouts_of_both_systems_once(cli, every_step):
    # one count over both systems' searches: it goes on from the first system's, no restart
    code, out, err = cli("serve", "llama3-8b", "gpu=H100-SXM,gpus_per_node=1", "--versus",
                         "gpu=A100-SXM4-80GB,gpus_per_node=1", "--requests", "20", "--isl",
                         "2000", "--osl", "100", "--slo-ttft", "1000", "--slo-tpot", "50",
                         "--json")
    assert code == 0 and json.loads(out)["ratio"] > 1
    assert _steps(err) == ["gpufabric: serve --versus: 1/2 layouts of both systems",
                           "gpufabric: serve --versus: 2/2 layouts of both systems"]


def test_validate_reports_training_points(cli, every_step, tmp_path):
    entries = yaml.safe_load(open(f"{CALIBRATION}/training.yaml"))[:3]   # real entries
    path = tmp_path / "training.yaml"
    path.write_text(yaml.safe_dump(entries))
    code, out, err = cli("validate", str(path), "--json")
    assert code == 0 and len(json.loads(out)["points"]) == 3
    assert _steps(err) == [f"gpufabric: validate: {i}/3 points" for i in (1, 2, 3)]


def test_validate_reports_inference_points(cli, first_and_last, tmp_path):
    entries = yaml.safe_load(open(f"{CALIBRATION}/inference.yaml"))[1:2]  # 7 points, real
    path = tmp_path / "inference.yaml"
    path.write_text(yaml.safe_dump(entries))
    code, out, err = cli("validate", str(path), "--json")
    assert code == 0 and json.loads(out)["summary"]["points"] == 7
    assert _steps(err) == ["gpufabric: validate: 1/7 points", "gpufabric: validate: 7/7 points"]


def test_validate_reports_collective_entries(cli, first_and_last):
    code, out, err = cli("validate", f"{CALIBRATION}/collectives.yaml", "--json")
    n = len(yaml.safe_load(open(f"{CALIBRATION}/collectives.yaml")))
    assert code == 0 and json.loads(out)["summary"]["all"]["points"] == 21
    assert _steps(err)[-1].startswith(f"gpufabric: validate: {n}/{n} ")


def test_compare_inference_counts_the_sections_steps(cli, every_step, monkeypatch):
    # the inference section, made small: its 2 request rates become 2 of compare's steps
    monkeypatch.setattr(inf, "section", partial(inf.section, rates=(2.0, 4.0), requests=60,
                                                versus=False))
    code, out, err = cli("compare", "dgx-a100", "--no-training", "--inference", "--no-html",
                         "--json")
    assert code == 0 and len(json.loads(out)["inference"]["sweep"]) == 2
    assert _steps(err) == ["gpufabric: compare: 1/2 dgx-a100",
                           "gpufabric: compare: 2/3 inference serving",
                           "gpufabric: compare: 3/3 inference serving"]
