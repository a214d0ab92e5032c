"""gpufabric calibrate and --profile: recovery of known parameters from measurements the model
itself generated, the profile round trip, and bad profiles and inputs (one line, exit 2)."""

import json
from pathlib import Path

import pytest
import yaml

from gpufabric import params as shared
from gpufabric.collectives import params as P
from gpufabric.collectives.validate import load_entries, predict_entry
from gpufabric.measure import calibrate as cal
from gpufabric.measure import profile

DATA = Path(__file__).parent / "data" / "calibration" / "collectives.yaml"
#: 8x H100 per node, 2 nodes, one 400G NDR NIC per GPU: NVLink, PCIe and the network
H100_2NODE = {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 2, "scale_up": "nvswitch",
              "nic": "ib-ndr"}
SIZES = [8, 256, 8192, 262144, 8388608, 268435456, 2147483648]
#: what the synthetic machine differs in: NVLink share x0.8, network hop latency x1.5
TRUTH = {"USABLE_RATE_SCALE.nvlink": 0.8, "HOP_LAT_US.net.Simple": 14.0 * 1.5}


def _entries() -> list[dict]:
    one = {"system": H100_2NODE, "collective": "all_reduce", "algorithm": "ring",
           "protocol": "Simple", "points": [{"size": s, "busbw": 1.0} for s in SIZES]}
    return [{**one, "id": "h100-1node-ring", "ranks": 8, "per_node": 8},
            {**one, "id": "h100-2node-ring", "ranks": 16, "per_node": 8}]


def _synthetic(tmp_path: Path, truth: dict) -> Path:
    """A measurements file whose times the model predicts with ``truth`` set."""
    raw = _entries()
    path = tmp_path / "synthetic.yaml"
    path.write_text(yaml.safe_dump(raw))
    with profile.overrides(truth):
        for e, r in zip(load_entries(str(path)), raw, strict=True):
            preds, _ = predict_entry(e, str(path))
            r["points"] = [{"size": p.size, "time_us": p.time_us} for p in preds]
    path.write_text(yaml.safe_dump(raw))
    return path


def _snapshot() -> dict:
    return {name: repr(p.value) for name, p in shared.REGISTRY.items()}


def test_calibrate_recovers_known_parameters_and_moves_nothing_else(tmp_path):
    path = _synthetic(tmp_path, TRUTH)
    shipped = _snapshot()
    res = cal.calibrate(str(path))
    assert _snapshot() == shipped                      # nothing leaks out of the fit
    new = {p["name"]: p["new"] for p in res["params"]}
    for name, value in TRUTH.items():
        assert new[name] == pytest.approx(value, rel=0.02), name
    # every candidate is fitted or reported as not pinned, never both
    unpinned = {u["name"] for u in res["unpinned"]}
    assert not unpinned & set(new)
    assert {"HOP_LAT_US.nvlink.LL", "TREE_HOP_LAT_US.net.Simple"} <= unpinned
    # the parameters the points do not constrain are not in the profile: exactly unchanged
    assert set(res["profile"]) == set(new)
    assert {"HOP_LAT_US.nvlink.Simple"} < set(new)      # pinned, and found as shipped
    assert new["HOP_LAT_US.nvlink.Simple"] == pytest.approx(3.4, rel=0.02)
    with profile.overrides({k: v["value"] for k, v in res["profile"].items()}):
        moved = {n for n, r in shared.REGISTRY.items() if repr(r.value) != shipped[n]}
    assert moved == {"USABLE_RATE_SCALE", "HOP_LAT_US"}
    assert [p["pinned_by"] for p in res["params"] if p["name"] == "HOP_LAT_US.net.Simple"] == [
        ["h100-2node-ring (8, 8K, 8M)"]]
    # the held-out sizes (every other one) are predicted better after
    assert res["held_out_points"] == 6 and res["fitted_points"] == 8
    assert res["after"]["all"]["median_abs_pct"] < 0.5 < res["before"]["all"]["median_abs_pct"]


def test_calibrate_cli_writes_a_profile_that_collective_and_validate_use(cli, tmp_path):
    path = _synthetic(tmp_path, TRUTH)
    prof = tmp_path / "p.yaml"
    code, out, err = cli("calibrate", str(path), "-o", str(prof))
    assert code == 0, err
    assert "USABLE_RATE_SCALE.nvlink" in out and "# held-out before" in out
    doc = yaml.safe_load(prof.read_text())
    assert doc["params"]["USABLE_RATE_SCALE.nvlink"]["value"] == pytest.approx(0.8, rel=0.02)
    assert doc["params"]["USABLE_RATE_SCALE.nvlink"]["fitted_on"] == ["h100-1node-ring",
                                                                        "h100-2node-ring"]

    def busbw(*extra):
        code, out, err = cli("collective", "hgx-h100", "--min", "1G", "--max", "1G",
                             "--algo", "ring", "--json", *extra)
        assert code == 0, err
        return json.loads(out)["rows"][0]["busbw"]

    shipped = busbw()
    assert busbw("--profile", str(prof)) == pytest.approx(shipped * 0.8, rel=0.02)
    assert busbw() == shipped                           # no leak into the next run

    def err_pct(*extra):
        code, out, err = cli("validate", str(path), "--json", *extra)
        assert code == 0, err
        return json.loads(out)["summary"]["all"]["median_abs_pct"]

    assert err_pct("--profile", str(prof)) < 0.5 < err_pct()


def test_profile_env_and_params_shows_old_and_new(cli, tmp_path, monkeypatch):
    prof = tmp_path / "p.yaml"
    prof.write_text("params:\n  HOP_LAT_US.net.Simple: {value: 21.0, fitted_on: [x]}\n"
                    "  NVLS_KERNEL_SHARE: 0.7\n")
    code, out, _ = cli("params", "--profile", str(prof))
    assert code == 0
    assert out.splitlines()[:3] == [
        f"# profile {prof}: 2 values changed (old -> new)",
        "HOP_LAT_US.net.Simple          14.0 -> 21.0",
        "NVLS_KERNEL_SHARE              0.76 -> 0.7"]
    assert "value: 0.7\n" in out                       # the table shows the values in use
    monkeypatch.setenv("GPUFABRIC_PROFILE", str(prof))
    code, out, _ = cli("params", "--json")
    assert json.loads(out)["profile"]["changes"][1] == {
        "name": "NVLS_KERNEL_SHARE", "old": 0.76, "new": 0.7}
    monkeypatch.delenv("GPUFABRIC_PROFILE")
    code, out, _ = cli("params", "--json")
    assert "profile" not in json.loads(out)
    assert P.NVLS_KERNEL_SHARE == 0.76 and P.REGISTRY["NVLS_KERNEL_SHARE"].value == 0.76
    assert P.HOP_LAT_US["net"]["Simple"] == 14.0


def test_a_refused_option_after_the_profile_leaves_nothing_applied(cli, tmp_path):
    prof = tmp_path / "p.yaml"
    prof.write_text("params:\n  HOP_LAT_US.net.Simple: 21.0\n")
    for bad in (["--ranks", "0"], ["--step-factor", "x"], ["--explain", "--json"]):
        code, _, _ = cli("collective", "dgx-a100", "--profile", str(prof), *bad)
        assert code == 2 and P.HOP_LAT_US["net"]["Simple"] == 14.0, bad


def test_overrides_reach_every_alias_and_come_back():
    from gpufabric.network import capacity
    with profile.overrides({"USABLE_RATE_SCALE.net": 0.9, "SHM_HOP_LAT_US.LL": 3.0,
                            "DRAM_EFFICIENCY": 0.5}):
        assert capacity.USABLE_RATE_SCALE.value["net"] == 0.9
        assert P.HOP_LAT_US["shm"]["LL"] == 3.0 == P.TREE_HOP_LAT_US["shm"]["LL"]
        assert capacity.DRAM_EFFICIENCY.value == 0.5 == shared.REGISTRY["DRAM_EFFICIENCY"].value
        assert shared.REGISTRY["DRAM_EFFICIENCY"].value == 0.5
    assert capacity.USABLE_RATE_SCALE.value["net"] == 1.0 and P.HOP_LAT_US["shm"]["LL"] == 1.5
    assert capacity.DRAM_EFFICIENCY.value == 0.73 == shared.REGISTRY["DRAM_EFFICIENCY"].value


@pytest.mark.parametrize("text, message", [
    ("params:\n  HOP_LAT_US.nvlink.Simpel: 4.0\n",
     "params.HOP_LAT_US.nvlink.Simpel: unknown key of HOP_LAT_US 'Simpel'; did you mean "
     "'Simple'? (known: LL, LL128, Simple)"),
    ("params:\n  HOP_LAT_US.nvlink: 4.0\n",
     "params.HOP_LAT_US.nvlink: got 4.0; expected a mapping of LL, LL128, Simple (or name one "
     "key: HOP_LAT_US.nvlink.LL)"),
    ("params:\n  PROTO_EFFICIENCY.LL: 1.5\n",
     "params.PROTO_EFFICIENCY.LL: got 1.5; allowed: (0, 1]"),
    ("params:\n  HOP_LAT_US.net.LL: -1\n",
     "params.HOP_LAT_US.net.LL: got -1.0; allowed: [0, 1000]"),
    ("params:\n  MAX_CHANNELS: 2.5\n",
     "params.MAX_CHANNELS: got 2.5; expected a whole number"),
    ("params:\n  USABLE_RATE_SCALE.nvlink: '0.8'\n",
     "params.USABLE_RATE_SCALE.nvlink: got '0.8'; expected a number"),
    ("params:\n  HOP_LAT_US.net.LL: .nan\n",
     "params.HOP_LAT_US.net.LL: got .nan; allowed: a finite number"),
    ("params: {}\n", "params: empty; expected at least one NAME: value"),
    ("- 1\n", "params: expected a mapping with params: {NAME: value, ...} (a profile as "
     "gpufabric calibrate writes it)"),
])
def test_bad_profile_is_one_line(cli, tmp_path, text, message):
    prof = tmp_path / "bad.yaml"
    prof.write_text(text)
    before = _snapshot()
    code, out, err = cli("collective", "dgx-a100", "--min", "8", "--max", "8",
                         "--profile", str(prof))
    assert code == 2 and out == ""
    assert err == f"gpufabric: error: {prof}: {message}\n"
    assert _snapshot() == before


def test_unknown_parameter_and_missing_profile(cli, tmp_path):
    prof = tmp_path / "bad.yaml"
    prof.write_text("params:\n  HOP_LAT: 1.0\n")
    code, _, err = cli("validate", str(DATA), "--profile", str(prof))
    assert code == 2 and err.startswith(
        f"gpufabric: error: {prof}: params.HOP_LAT: unknown parameter 'HOP_LAT'; did you mean "
        f"'HOP_LAT_US'?")
    code, _, err = cli("train", "dgx-a100", "--profile", str(tmp_path / "none.yaml"))
    assert (code, err) == (2, f"gpufabric: error: {tmp_path / 'none.yaml'}: no such profile "
                              f"file\n")


def test_calibrate_refuses_bad_input_in_one_line(cli, tmp_path):
    out_p = tmp_path / "p.yaml"
    empty = tmp_path / "empty.yaml"
    empty.write_text("- {id: x, system: {gpu: H100-SXM}, collective: all_reduce, points: []}\n")
    training = Path(__file__).parent / "data" / "calibration" / "training.yaml"
    bad_gpu = tmp_path / "gpu.yaml"
    bad_gpu.write_text("- {id: x, system: {gpu: H100-SXMX}, collective: all_reduce, points: "
                       "[{size: 8, time_us: 10}]}\n")
    one_op = tmp_path / "one.yaml"
    one_op.write_text(yaml.safe_dump(_entries()[:1]))
    cases = [
        (("calibrate", str(empty), "-o", str(out_p)),
         f"{empty}: no points to fit; expected entries with points: [{{size, busbw | "
         f"time_us}}, ...]"),
        (("calibrate", str(training), "-o", str(out_p)),
         f"{training}: a training measurements file; calibrate fits the collective model: a "
         f"file of nccl-tests points (docs/calibration.md)"),
        (("calibrate", str(DATA), "--system", "gpu=H100-SXMX", "-o", str(out_p)),
         None),
        (("calibrate", str(bad_gpu), "-o", str(out_p)), None),
        (("calibrate", str(one_op), "--hold-out", "ops", "-o", str(out_p)),
         f"{one_op}: --hold-out: the file measures one collective (all_reduce); hold out "
         f"sizes or none"),
        (("calibrate", str(DATA), "--hold-out", "half", "-o", str(out_p)),
         "--hold-out: unknown hold-out 'half'; allowed: sizes, ops, none"),
        (("calibrate", str(DATA), "-o", str(tmp_path)),
         f"{tmp_path}: --output: is a directory; give a file name"),
    ]
    for args, message in cases:
        code, out, err = cli(*args)
        assert code == 2 and out == "" and len(err.splitlines()) == 1, (args, err)
        if message:
            assert err == f"gpufabric: error: {message}\n"
        else:
            assert "unknown GPU 'H100-SXMX'" in err
    assert not out_p.exists()


def test_a_forced_protocol_pins_its_efficiency(tmp_path):
    """Entries forcing LL128 next to Simple ones: LL128's efficiency is told apart from the
    NVLink share (Simple's points fix the share), and LL's, which no entry forces, is no
    candidate at all."""
    raw = _entries()[:1]
    raw.append({**raw[0], "id": "h100-1node-ll128", "protocol": "LL128"})
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(raw))
    truth = {"USABLE_RATE_SCALE.nvlink": 0.9, "PROTO_EFFICIENCY.LL128": 0.92 * 0.9}
    with profile.overrides(truth):
        for e, r in zip(load_entries(str(path)), raw, strict=True):
            r["points"] = [{"size": p.size, "time_us": p.time_us}
                           for p in predict_entry(e, str(path))[0]]
    path.write_text(yaml.safe_dump(raw))
    res = cal.calibrate(str(path), hold_out="none")
    new = {p["name"]: p["new"] for p in res["params"]}
    for name, value in truth.items():
        assert new[name] == pytest.approx(value, rel=0.02), name
    assert "PROTO_EFFICIENCY.LL" not in new | {u["name"]: 0 for u in res["unpinned"]}
    assert res["before"] is None and res["held_out_points"] == 0


def test_hold_out_ops_and_system_option(cli, tmp_path):
    raw = _entries()[:1]
    raw.append({**raw[0], "id": "h100-1node-allgather", "collective": "all_gather"})
    for r in raw:
        del r["system"]
        r["system"] = {"gpu": "H100-SXM"}          # replaced by --system
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(raw))
    prof = tmp_path / "p.yaml"
    code, out, err = cli("calibrate", str(path), "--system", "hgx-h100", "--hold-out", "ops",
                         "-o", str(prof), "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["system"] == "hgx-h100" and res["held_out"] == "every all_gather point"
    assert res["held_out_points"] == len(SIZES) and res["fitted_points"] == len(SIZES)
    assert res["before"]["all"]["points"] == res["after"]["all"]["points"] == len(SIZES)


def test_train_reads_a_workloads_parameter_from_a_profile(cli, tmp_path):
    """A profile sets any recorded parameter the models read, the workloads' records too."""
    prof = tmp_path / "p.yaml"
    prof.write_text("params:\n  KERNEL_US: 40.0\n")

    def step(*extra):
        code, out, err = cli("train", "resnet-50", "dgx-a100", "--json", *extra)
        assert code == 0, err
        return json.loads(out)["step_time_s"]

    shipped = step()
    assert step("--profile", str(prof)) > shipped
    assert step() == shipped and shared.REGISTRY["KERNEL_US"].value == 4.0


def test_every_shipped_value_is_a_valid_profile_value():
    """The bounds hold the shipped constants: a profile of them all is accepted (and no-op)."""
    reg = profile.registry()
    ok = {name: (list(p.value) if isinstance(p.value, tuple) else p.value)
          for name, p in reg.items()
          if not (isinstance(p.value, dict) and any(
              isinstance(v, tuple) and any(isinstance(x, tuple) for x in v)
              for v in p.value.values()))}
    assert len(ok) >= 70
    before = _snapshot()
    with profile.overrides(ok) as changes:
        assert all(c["old"] == c["new"] for c in changes)
    assert _snapshot() == before
