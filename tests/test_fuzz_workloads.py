"""Fuzzing the workload inputs: model files, measurement files, serving traces, command lines.

The same rules as tests/test_fuzz_inputs.py (whose profile, memory guard and ``ends_well`` this
file uses): a user's model YAML (``gpufabric train MYMODEL.yaml SYSTEM``), a training or
inference measurements file (``gpufabric validate``), a serving trace (``gpufabric serve
--trace``, CSV or JSON lines) and the ``train``/``serve`` command lines with absurd option values
all end in a result or in one :class:`~gpufabric.errors.InputError` line (exit 2), within the
deadline and the memory cap; never another exception, a hang or memory without bound.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufabric.errors import InputError
from gpufabric.workloads.inference.requests import load_trace
from gpufabric.workloads.models import load_model
from test_fuzz_inputs import FUZZ, VALUES, ends_well, mutate

pytestmark = pytest.mark.usefixtures("bounded_memory")     # conftest.py

HERE = Path(__file__).parent
MODELS = Path(load_model.__code__.co_filename).parent / "data" / "models"
MODEL_ENTRIES = [m for f in sorted(MODELS.glob("*.yaml")) for m in yaml.safe_load(f.read_text())]
CAL = HERE / "data" / "calibration"
FIXTURE_OK = settings(FUZZ, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])


def _write(tmp_path_factory, name: str, text: str | bytes) -> Path:
    f = tmp_path_factory.mktemp("fuzz") / name
    if isinstance(text, bytes):
        f.write_bytes(text)
    else:
        f.write_text(text)
    return f


# -- a user's model file ------------------------------------------------------------------------
def _train_small(m) -> None:
    """A model that loads is usable: time one step on one server (as `gpufabric train` does)."""
    from gpufabric.workloads.parallel import Parallel
    from gpufabric.workloads.search import _topology
    from gpufabric.workloads.training import predict_step
    topo = _topology("dgx-a100")
    predict_step(m, topo, Parallel(tp=1, pp=1, dp=8, micro_batch=1, global_batch=8),
                 min(m.seq_len or 2048, 4096), check_memory=True)


@FUZZ
@given(data=st.data())
def test_mutated_model_files(tmp_path_factory, data):
    doc = mutate(data.draw, data.draw(st.sampled_from(MODEL_ENTRIES)), steps=3)
    f = _write(tmp_path_factory, "mine.yaml", yaml.safe_dump(doc))
    m = ends_well(load_model, str(f))
    if m is not None:
        ends_well(_train_small, m)


@FUZZ
@given(data=st.one_of(VALUES, st.binary(max_size=200)))
def test_arbitrary_model_files(tmp_path_factory, data):
    text = data if isinstance(data, bytes) else yaml.safe_dump(data)
    f = _write(tmp_path_factory, "mine.yaml", text)
    ends_well(load_model, str(f))


# -- measurement files (`gpufabric validate`) ----------------------------------------------------
def _entries(name: str, n: int, ids: tuple[str, ...] = ()) -> list[dict]:
    out = []
    for e in yaml.safe_load((CAL / name).read_text()):
        if ids and e["id"] not in ids:
            continue
        e = dict(e)
        if isinstance(e.get("points"), list):
            e["points"] = e["points"][:1]
        out.append(e)
        if len(out) == n:
            break
    return out


TRAINING = _entries("training.yaml", 2)
INFERENCE = _entries("inference.yaml", 2)


@FUZZ
@given(data=st.data())
def test_mutated_training_measurements(tmp_path_factory, data):
    from gpufabric.workloads.validate import validate
    doc = mutate(data.draw, TRAINING, steps=4)
    f = _write(tmp_path_factory, "train.yaml", yaml.safe_dump(doc))
    ends_well(validate, str(f))


@FUZZ
@given(data=st.data())
def test_mutated_inference_measurements(tmp_path_factory, data):
    from gpufabric.workloads.inference.validate import validate
    doc = mutate(data.draw, INFERENCE, steps=4)
    f = _write(tmp_path_factory, "serve.yaml", yaml.safe_dump(doc))
    ends_well(validate, str(f))


# -- serving traces ------------------------------------------------------------------------------
CSV_TRACE = "arrival_s,isl,osl\n0.0,512,128\n0.25,1024,64\n0.5,128,256\n"
JSONL_TRACE = ('{"timestamp": "2023-11-16 18:15:46.6805900", "ContextTokens": 512, '
               '"GeneratedTokens": 128}\n{"timestamp": "2023-11-16 18:15:47.1", '
               '"ContextTokens": 100, "GeneratedTokens": 20}\n')
TOKENS = st.sampled_from(["0", "-1", "1e400", "nan", "inf", "1e18", "9" * 40, "", " ", ",", '"',
                          "\n", "\x00", "{", "}", "[1]", "null", "true", "1.5", "arrival_s",
                          "2023-13-45 99:99:99", "-1e308"])


def _mangle(draw, text: str) -> str:
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 12)))
        text = text[:i] + draw(st.one_of(TOKENS, st.text(max_size=5))) + text[j:]
    return text


def _serve_trace(path: Path) -> None:
    from gpufabric.topology.build import load
    from gpufabric.workloads.inference.serve import ServeConfig, serve
    serve("llama3-8b", load("hgx-h100"), ServeConfig(trace=str(path), requests=50))


@FUZZ
@given(data=st.data(), kind=st.sampled_from(["csv", "jsonl"]))
def test_mutated_traces(tmp_path_factory, data, kind):
    text = _mangle(data.draw, CSV_TRACE if kind == "csv" else JSONL_TRACE)
    f = _write(tmp_path_factory, f"trace.{kind}", text)
    if ends_well(load_trace, str(f)) is not None:
        ends_well(_serve_trace, f)


@FUZZ
@given(raw=st.binary(max_size=200), kind=st.sampled_from(["csv", "jsonl"]))
def test_arbitrary_trace_bytes(tmp_path_factory, raw, kind):
    f = _write(tmp_path_factory, f"trace.{kind}", raw)
    ends_well(load_trace, str(f))


# -- command lines -------------------------------------------------------------------------------
ABSURD = st.sampled_from(["0", "-1", "1", "2", "3", "7", "1e308", "-1e308", "nan", "inf", "1e-300",
                          str(10**12), str(2**63), "1000000", "", "x", "9" * 30])
TRAIN_OPTS = st.sampled_from(["--tp", "--pp", "--dp", "--cp", "--ep", "--vpp", "--zero",
                              "--micro-batch", "--global-batch", "--seq-len", "--top"])
SERVE_OPTS = st.sampled_from(["--tp", "--ep", "--pp", "--dp-attention", "--replicas", "--rate",
                              "--burst-cv", "--concurrency", "--requests", "--isl", "--osl",
                              "--slo-ttft", "--slo-tpot", "--max-num-seqs",
                              "--max-batched-tokens", "--seed", "--pd"])


def _check_exit(cli, args: list[str]) -> None:
    code, _, err = cli(*args)
    assert code in (0, 2), (args, code, err)
    assert "Traceback" not in err, (args, err)
    if code == 2 and err.startswith("gpufabric: error:"):   # else: click's usage message
        assert err.count("\n") == 1, (args, err)


@FIXTURE_OK
@given(model=st.sampled_from(["llama2-7b", "mixtral-8x7b", "resnet50", "nope", "x.yaml"]),
       system=st.sampled_from(["dgx-a100", "hgx-h100", "gpus=0", "nodes=3"]),
       options=st.lists(st.tuples(TRAIN_OPTS, ABSURD), max_size=3))
def test_train_command_lines(cli, tmp_path, monkeypatch, model, system, options):
    monkeypatch.chdir(tmp_path)
    _check_exit(cli, ["train", model, system, *(x for pair in options for x in pair)])


@FIXTURE_OK
@given(model=st.sampled_from(["llama3-8b", "mixtral-8x7b", "nope"]),
       system=st.sampled_from(["hgx-h100", "dgx-a100"]),
       options=st.lists(st.tuples(SERVE_OPTS, ABSURD), max_size=3))
def test_serve_command_lines(cli, tmp_path, monkeypatch, model, system, options):
    monkeypatch.chdir(tmp_path)
    args = ["serve", model, system, "--requests", "40"]
    _check_exit(cli, [*args, *(x for pair in options for x in pair)])


@pytest.mark.parametrize("name", ["trace.csv", "trace.jsonl"])
def test_a_trace_that_is_a_directory_is_refused(tmp_path, name):
    d = tmp_path / name
    d.mkdir()
    with pytest.raises(InputError) as err:
        load_trace(str(d))
    assert str(err.value) == f"{d}: is a directory; expected a file"


# -- what the fuzz tests found, each pinned to its message ---------------------------------------
MINE = ("name: mine\narch: dense\nlayers: 2\nhidden: 64\nheads: 4\nffn: 128\nvocab: 100\n"
        "source: me\n")


@pytest.mark.parametrize("extra, message", [
    ("published: {params: null}", "published.params: got None; expected a number"),
    ("params: null", "params: got None; expected a non-negative number"),
    ("aliases: 3", "aliases: got 3; expected a list of names"),
    ("published: 7", "published: got 7; expected a mapping of published numbers "
                     "(params: 6.74e9)"),
])
def test_a_model_file_with_a_bad_value_is_refused(tmp_path, extra, message):
    f = tmp_path / "mine.yaml"
    f.write_text(MINE + extra + "\n")
    with pytest.raises(InputError) as err:
        load_model(str(f))
    assert str(err.value) == f"{f}: {message}"


def test_a_model_file_is_read_like_every_other_file(tmp_path):
    binary, bomb = tmp_path / "bin.yaml", tmp_path / "bomb.yaml"
    binary.write_bytes(b"\x00\x01")
    bomb.write_text("a: &a [*a]\n")
    with pytest.raises(InputError) as err:
        load_model(str(binary))
    assert str(err.value) == (f"{binary}: binary data (a NUL byte at offset 0); expected a "
                              "model file (YAML or a Hugging Face config.json)")
    with pytest.raises(InputError) as err:
        load_model(str(bomb))
    assert str(err.value) == (f"{bomb}: a YAML alias refers to a value that contains it; "
                              "allowed: aliases of finished values")


@pytest.mark.parametrize("text, message", [
    ("arrival_s,isl,osl\n0,10,10\nnan,10,10\n",
     "row 3.arrival_s: got 'nan'; expected a number of seconds from 0 to 1e+12 or an ISO "
     "date-time"),
    ("arrival_s,isl,osl\n0,1e40,10\n",
     "row 2.isl: got '1e40'; expected a whole number of tokens from 1 to 100,000,000"),
    ('arrival_s,isl,osl\n0,"' + "x" * 200_000 + "\n",
     'line 2: not valid CSV: a quoted field runs to the end of the file (its closing " is '
     "missing)"),
    ("arrival_s,isl,osl\n0,10,1\n-1,10,1\n",
     "row 3.arrival_s: got '-1'; expected a number of seconds from 0 to 1e+12 or an ISO "
     "date-time"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.68,374,44\n5,396,109\n",
     "row 3.TIMESTAMP: got '5' (seconds), but row 2 gave an ISO date-time; expected one form "
     "in the whole column"),
])
def test_a_trace_with_a_bad_value_is_refused(tmp_path, text, message):
    f = tmp_path / "t.csv"
    f.write_text(text)
    with pytest.raises(InputError) as err:
        load_trace(str(f))
    assert str(err.value) == f"{f}: {message}"


@pytest.mark.parametrize("args, message", [
    # checked before the unloaded TTFT is summed chunk by chunk (10**12 tokens: a hang)
    (["--isl", "10000000"], "--isl/--osl: a request of 10000000 + 256 tokens needs 625016 KV "
                            "blocks of 16 tokens; the cache holds "),
    (["--isl", str(10**12)], "--isl: must be from 0 to 100,000,000 tokens, got 1000000000000"),
    (["--rate", "1", "--burst-cv", "1e308"],        # was an OverflowError
     "--burst-cv: must be a number above 0 and at most 100, got 1e+308"),
    (["--requests", str(10**12)],                  # named the number per replica
     "--requests: must be an integer from 1 to 5000000, got 1000000000000"),
])
def test_absurd_serve_options_are_refused(cli, args, message):
    code, _, err = cli("serve", "llama3-8b", "hgx-h100", *args)
    assert code == 2 and err.startswith(f"gpufabric: error: {message}") and err.count("\n") == 1


@pytest.mark.parametrize("args, message", [
    (["--seq-len", "0"], "--seq-len: must be a whole number of tokens >= 1, got 0"),
    (["--global-batch", "0"], "--global-batch: must be a whole number >= 1, got 0"),
    (["--search", "--top", "0", "--json"], "--top: must be a whole number from 1 to 100, got 0"),
    (["--tp", "0"], "--tp: must be a whole number >= 1, got 0"),     # was a ZeroDivisionError
    (["--cp", "0"], "--cp: must be a whole number >= 1, got 0"),
])
def test_zero_train_options_are_refused_not_taken_as_defaults(cli, args, message):
    code, _, err = cli("train", "llama2-7b", "dgx-a100", *args)
    assert (code, err) == (2, f"gpufabric: error: {message}\n")


def test_an_inference_entry_with_bad_numbers_is_refused_point_by_point(tmp_path):
    from gpufabric.workloads.inference.validate import validate
    entry = dict(INFERENCE[0], parallelism={"tp": [2], "pp": 1})
    f = tmp_path / "serve.yaml"
    f.write_text(yaml.safe_dump([entry]))
    res = validate(str(f))
    assert res["points"] == []
    assert res["skipped"] == [{"id": entry["id"], "point": 0,
                               "reason": "refused: tp: got [2]; expected a whole number >= 1"}]
    f.write_text(yaml.safe_dump([dict(entry, engine="TensorRT-LLM")]))
    with pytest.raises(InputError) as err:
        validate(str(f))
    assert str(err.value) == f"{f}: [0]({entry['id']}).engine: not a mapping"
