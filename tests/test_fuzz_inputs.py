"""Fuzzing every input format: arbitrary and mutated inputs end in a result or an InputError.

Each test starts from real inputs (the presets, the nvidia-smi fixtures, the calibration
file, a node list) and breaks them the way people and tools do: a value of the wrong type,
a missing or unknown key, an absurd number, a mangled line, binary junk. Whatever comes in,
the parser must return a result or raise :class:`gpufabric.errors.InputError`; any other
exception fails the test, and so does an example that takes longer than the deadline. (The
scheduler's inputs, traces, node lists and ``--nodes`` pools, have their own fuzz tests.)

Runs are derandomized (the same examples on every run) and sized to stay well under a minute
in CI; ``HYPOTHESIS_PROFILE=fuzz-long`` runs many more examples by hand.
"""

from __future__ import annotations

import copy
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufabric import catalog
from gpufabric.errors import InputError
from gpufabric.fileio import parse_yaml
from gpufabric.topology import nvsmi, presets
from gpufabric.topology.build import (
    SPEC_KEYS,
    from_data,
    from_spec,
    from_system_file,
    load,
)

HERE = Path(__file__).parent
NVSMI = sorted((HERE / "fixtures" / "nvsmi").glob("*.txt"))
CALIBRATION = HERE / "data" / "calibration" / "collectives.yaml"

settings.register_profile("fuzz", max_examples=40, derandomize=True, database=None,
                          deadline=timedelta(seconds=5),
                          suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.data_too_large])
settings.register_profile("fuzz-long", parent=settings.get_profile("fuzz"), max_examples=2000,
                          derandomize=False)
pytestmark = pytest.mark.usefixtures("bounded_memory")

FUZZ = settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "fuzz")
                            if os.environ.get("HYPOTHESIS_PROFILE", "").startswith("fuzz")
                            else "fuzz")


def ends_well(fn, *args, **kw) -> Any:
    """Call ``fn``; an InputError is a fine ending (its message must name something)."""
    try:
        return fn(*args, **kw)
    except InputError as exc:
        assert str(exc).strip(), "an InputError with an empty message"
        return None


# -- values a YAML file can hold ---------------------------------------------------------
NAMES = sorted({*catalog.names("gpu"), *catalog.names("cpu"), *catalog.names("net_speed"),
                *catalog.names("pcie_switch"), *catalog.names("net_switch"),
                "nvswitch", "nvlink-mesh", "pcie", "xgmi", "sli", "hybrid-cube", "fat-tree",
                "rail-optimized", "c2c", "gpu", "cpu", "nic", "net", "nvlink", "n0.gpu0"})
NUMBERS = st.one_of(st.integers(-3, 20), st.sampled_from([0, -1, 2**31, 10**6, 10**18]),
                    st.floats(allow_nan=True, allow_infinity=True))
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=12),
                    st.sampled_from(NAMES))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(NAMES) | st.text(max_size=6), inner,
                                        max_size=3), max_leaves=6)


def mutate(draw, data: Any, steps: int = 3) -> Any:
    """Replace, delete or add a few values anywhere in nested YAML data."""
    data = copy.deepcopy(data)
    for _ in range(draw(st.integers(1, steps))):
        # walk down to a random container
        node, path = data, []
        while True:
            kids = (list(node) if isinstance(node, dict) else list(range(len(node)))
                    if isinstance(node, list) else [])
            if not kids or draw(st.integers(0, 2)) == 0:
                break
            k = draw(st.sampled_from(kids))
            if not isinstance(node[k], (dict, list)):
                path.append((node, k))
                break
            node = node[k]
        if not path:
            if isinstance(node, dict):
                node[draw(st.sampled_from(NAMES) | st.text(max_size=6))] = draw(VALUES)
            elif isinstance(node, list) and node:
                node.pop(draw(st.integers(0, len(node) - 1)))
            continue
        parent, k = path[-1]
        action = draw(st.integers(0, 2))
        if action == 0 and isinstance(parent, dict):
            del parent[k]
        else:
            parent[k] = draw(VALUES)
    return data


def _preset_specs() -> list[dict]:
    out = []
    for name in presets.names():
        raw = yaml.safe_load((Path(presets.__file__).parent / f"{name}.yaml").read_text())
        out.append(raw)
    return out


PRESETS = _preset_specs()
SPECS = [p.get("system", p) for p in PRESETS if "devices" not in p]
SYSTEM_FILES = [p for p in PRESETS if "devices" in p] + [
    nvsmi.to_system(nvsmi.parse(f.read_text(), file=f.name), f.stem) for f in NVSMI[:4]]


def build_small(data: Any) -> None:
    """Build what a file holds; large clusters only in part, as the collective model does."""
    t = from_data(data, "fuzz", "fuzz.yaml", materialize_nodes=2)
    assert t.devices


@FUZZ
@given(st.data())
def test_mutated_specs(data):
    spec = mutate(data.draw, data.draw(st.sampled_from(SPECS)))
    ends_well(build_small, spec)


@FUZZ
@given(st.dictionaries(st.sampled_from(SPEC_KEYS), VALUES, max_size=6))
def test_arbitrary_specs(spec):
    ends_well(from_spec, spec, materialize_nodes=2)


@FUZZ
@given(st.data())
def test_mutated_system_files(data):
    system = mutate(data.draw, data.draw(st.sampled_from(SYSTEM_FILES)), steps=4)
    ends_well(from_system_file, system, "fuzz", "fuzz.yaml")


@FUZZ
@given(VALUES)
def test_arbitrary_yaml_documents(doc):
    ends_well(from_data, doc, "fuzz", "fuzz.yaml", materialize_nodes=2)


INLINE = st.lists(st.tuples(st.sampled_from([*SPEC_KEYS, "host.cpu", "host.sockets",
                                              "fabric.oversubscription", "x.y.z", ""]),
                            st.sampled_from(["=", "", "=="]),
                            st.one_of(st.sampled_from(NAMES), st.text(max_size=8),
                                      NUMBERS.map(str), st.sampled_from(["[1,2]", "{a: 1}",
                                                                         "&a [*a]", "'"]))),
                  max_size=5).map(lambda parts: ",".join(k + s + v for k, s, v in parts))


@FUZZ
@given(st.one_of(INLINE, st.text(max_size=40)))
def test_inline_specs(text):
    ends_well(load, text, materialize_nodes=2)


@FUZZ
@given(st.data())
def test_mutated_nvidia_smi_text(data):
    text = data.draw(st.sampled_from(NVSMI)).read_text()
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 40)))
        new = data.draw(st.one_of(st.text(max_size=6), st.sampled_from(
            ["NV12", "SYS", "X", "PIX", "\t", "\n", "GPU9", "NIC0", "0-63", "N/A", ""])))
        text = text[:i] + new + text[j:]

    def run() -> None:
        m = nvsmi.parse(text, file="topo.txt")
        sysf = nvsmi.to_system(m, "fuzz")
        from_system_file(sysf, "fuzz", "topo.txt")
    ends_well(run)


@FUZZ
@given(st.text(max_size=200))
def test_arbitrary_nvidia_smi_text(text):
    ends_well(lambda: nvsmi.to_system(nvsmi.parse(text, file="topo.txt"), "fuzz"))


CAL_ENTRIES = yaml.safe_load(CALIBRATION.read_text())[:6]


@FUZZ
@given(data=st.data())
def test_mutated_calibration_files(tmp_path_factory, data):
    from gpufabric.collectives.validate import load_entries, validate
    entries = [dict(e, points=e["points"][:2]) for e in CAL_ENTRIES[:2]]
    doc = mutate(data.draw, entries, steps=4)
    f = tmp_path_factory.mktemp("cal") / "points.yaml"
    f.write_text(yaml.safe_dump(doc))
    if ends_well(load_entries, str(f)) is not None:
        ends_well(validate, str(f))


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes_as_yaml_and_text(raw):
    from gpufabric.fileio import decode
    text = ends_well(decode, raw, "fuzz.yaml")
    if text is not None:
        ends_well(parse_yaml, text, "fuzz.yaml")


ODD = st.one_of(st.text(max_size=8), st.sampled_from(
    ["0", "-1", "1", "3", "nan", "inf", "1e400", "8G", "1.5K", "", " ", "/", ".", "..", "--json",
     "all_to_all", "collnet", "LL128", "dgx-a100", "gpu=H100-SXM", "9" * 30]))
COMMANDS = st.sampled_from([
    ["show"], ["p2p"], ["topo"], ["catalog"], ["collective", "--max", "64K"],
    ["validate"], ["compare", "--no-html"], ["import", "nvidia-smi"]])
OPTIONS = st.sampled_from(["--node", "--op", "--algo", "--proto", "--ranks", "--min",
                           "--step-factor", "--gpu", "--json", "-o"])


@settings(FUZZ, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])
@given(COMMANDS, st.one_of(st.sampled_from(["dgx-a100", "hgx-h100-4node-ndr", "gpus",
                                            "t4-cloud-server"]), ODD),
       st.lists(st.tuples(OPTIONS, ODD), max_size=3))
def test_command_lines(cli, tmp_path, monkeypatch, command, target, options):
    """Any command line ends in exit 0 (a result) or 2 (one line naming what is wrong)."""
    monkeypatch.chdir(tmp_path)          # whatever a command line writes lands here
    args = [*command[:1], target, *command[1:], *(x for pair in options for x in pair)]
    code, _, err = cli(*args)
    assert code in (0, 2), (args, code, err)
    assert "Traceback" not in err, (args, err)
    if code == 2 and err.startswith("gpufabric: error:"):
        assert err.count("\n") == 1, (args, err)


BOMB = ("a: &a [1,1,1,1,1,1,1,1,1,1]\n" + "".join(
    f"{k}: &{k} [{', '.join(['*' + p] * 10)}]\n" for p, k in zip("abcde", "bcdef", strict=True)))


@pytest.mark.parametrize("doc, message", [
    ("a: &a [*a]", "a YAML alias refers to a value that contains it; allowed: aliases of "
                   "finished values"),
    ("[" * 150 + "]" * 150, "nested more than 100 levels deep"),
    # libyaml's limit (PyYAML built without libyaml: Python's recursion limit)
    ("[" * 5000 + "]" * 5000, ("line 1: not valid YAML: exceeded maximum nesting depth",
                               "not valid YAML: nested too deeply")),
    (BOMB, "expands to more than 1000000 values (YAML aliases?); allowed: smaller documents"),
])
def test_yaml_that_recurses_or_explodes_is_refused(doc, message):
    with pytest.raises(InputError) as err:
        parse_yaml(doc, "bomb.yaml")
    allowed = message if isinstance(message, tuple) else (message,)
    assert str(err.value) in [f"bomb.yaml: {m}" for m in allowed]
