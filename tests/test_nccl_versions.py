"""NCCL releases: each era's latency tables as NCCL's tuning.cc states them, the algorithms a
release has, and the release a measurements entry or ``collective --nccl`` names."""

import pytest
import yaml

from gpufabric import params as gparams
from gpufabric.collectives import Model, versions
from gpufabric.collectives import params as P
from gpufabric.collectives.validate import load_entries, validate
from gpufabric.errors import InputError
from gpufabric.topology.build import load

GIB = 2**30


def test_the_shipped_constants_are_the_newest_eras():
    # one concept, one place: the release the shipped records name is the last era, whose
    # overlay changes nothing
    newest = versions.eras()[-1]
    assert versions.params_for(newest["version"], gparams.SHIPPED).key == "shipped"
    assert versions.parse(P.NCCL_VERSION) >= newest["version"]


@pytest.mark.parametrize("release, name, keys, value", [
    # tuning.cc at v2.16.5-1 (era 2.14.3): baseLat Ring LL 3.6, hwLat NET Ring Simple 9.6
    ("2.16.5", "BASE_LAT_US", ("ring", "LL"), 3.6),
    ("2.16.5", "HOP_LAT_US", ("net", "Simple"), 9.6),
    ("2.16.5", "HOP_LAT_US", ("nvlink", "LL"), 0.47),
    # v2.12.7-1 to v2.13: hwLat NET Ring Simple 28
    ("2.12.12", "HOP_LAT_US", ("net", "Simple"), 28.0),
    # v2.18.3-1 to v2.18.6-1: hwLat Tree Simple NVLINK 4, PCI 6, NET 14
    ("2.18.5", "TREE_HOP_LAT_US", ("pcie", "Simple"), 6.0),
    ("2.18.5", "TREE_HOP_LAT_US", ("nvlink", "Simple"), 4.0),
    # v2.19.1-1 to v2.22.3-1: back to 28 us
    ("2.21.5", "TREE_HOP_LAT_US", ("nvlink", "Simple"), 28.0),
    ("2.21.5", "BASE_LAT_US", ("tree", "Simple"), 0.0),
    # NVLS: 2.17.1 baseLat 40, 2.18 baseLat 23, 2.19 hwLat 23, 2.21.5 on hwLat 25
    ("2.17.1", "NVLS_LAT_US", (), 40.0),
    ("2.18.1", "NVLS_LAT_US", (), 23.0),
    ("2.20.5", "NVLS_LAT_US", (), 23.0),
    ("2.29.7", "NVLS_LAT_US", (), 25.0),
    # hwLat NET NVLSTree Simple: 19 in 2.18, 14 from 2.19.1
    ("2.18.5", "NVLS_TREE_NET_LAT_US", (), 19.0),
    ("2.21.5", "NVLS_TREE_NET_LAT_US", (), 14.0),
])
def test_an_eras_tables_are_ncclsown(release, name, keys, value):
    p = versions.params_for(release, gparams.SHIPPED)
    got = p[name]
    for k in keys:
        got = got[k]
    assert got == value


def test_a_profiles_own_rows_stay_under_a_release():
    # the shared-memory rows are gpufabric's fit, not NCCL's: a release leaves them alone
    base = gparams.SHIPPED.replace({"SHM_HOP_LAT_US.LL": 2.5})
    p = versions.params_for("2.16.5", base)
    assert p["HOP_LAT_US"]["shm"]["LL"] == 2.5 and p["HOP_LAT_US"]["net"]["Simple"] == 9.6


def test_algorithms_a_release_lacks_are_left_out_and_refused():
    m = Model(load("hgx-h100"))
    assert m.predict("all_reduce", GIB).algo == "nvls"
    with versions.use("2.16.5"):
        assert m.predict("all_reduce", GIB).algo != "nvls"
        assert "nvls" not in m.algorithms("all_reduce", m.layout(8))
        with pytest.raises(InputError, match="not in NCCL 2.16.5") as exc:
            m.predict("all_reduce", GIB, algo="nvls")
        assert exc.value.field == "algorithm"
    with versions.use("2.18.5"):
        assert m.predict("all_reduce", GIB).algo == "nvls"
    two = Model(load("hgx-h100-4node-ndr"))
    assert "nvls_tree" in two.algorithms("all_reduce", two.layout(32))
    assert "pat" in two.algorithms("all_gather", two.layout(4, 1))
    with versions.use("2.17.1"):
        assert "nvls_tree" not in two.algorithms("all_reduce", two.layout(32))
    with versions.use("2.22.3"):
        assert "pat" not in two.algorithms("all_gather", two.layout(4, 1))


@pytest.mark.parametrize("text, expected", [
    ("2.18.5", (2, 18, 5)), ("v2.18.5-1", (2, 18, 5)), ("2.26.6+cuda12.8", (2, 26, 6)),
    ("2.21", (2, 21, 0)), (" 2.8.3 ", (2, 8, 3))])
def test_releases_as_they_are_written(text, expected):
    assert versions.parse(text) == expected


@pytest.mark.parametrize("bad", ["2.x", "nccl", "", "2.18.5.1", None, [2, 18], "2.5.6"])
def test_a_bad_release_names_the_field(bad):
    with pytest.raises(InputError) as exc:
        versions.parse(bad, "stack.nccl")
    assert exc.value.field == "stack.nccl"


def _entry(tmp_path, stack, gpu="A100-SXM4-80GB", size=8):
    e = {"id": "dgx-a100-small", "source_id": "test", "collective": "all_reduce", "ranks": 8,
         "system": {"gpu": gpu, "gpus_per_node": 8, "scale_up": "nvswitch"},
         "points": [{"size": size, "time_us": 12.0}]}
    if stack is not None:
        e["stack"] = stack
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump([e]))
    return str(f)


def test_a_release_chooses_by_its_tables_and_is_timed_by_the_current_ones():
    m = Model(load("hgx-h200"))
    plain_small, plain_mib = m.predict("all_reduce", 8), m.predict("all_reduce", 2**20)
    assert (plain_mib.algo, plain_mib.proto) == ("ring", "LL")
    with versions.use("2.20.5"):
        # NCCL 2.20.5's tuner estimates NVLS at 23 us (2.28.3: 25), so at 1 MiB it takes NVLS
        mib = m.predict("all_reduce", 2**20)
        assert (mib.algo, mib.proto) == ("nvls", "Simple")
        assert P.BASE_LAT_US == gparams.SHIPPED["BASE_LAT_US"]        # timed as shipped
        assert mib.time_us == Model(load("hgx-h200")).predict(
            "all_reduce", 2**20, algo="nvls").time_us
    with versions.use("2.16.5"):
        # the same choice (ring LL) at 8 bytes: the same time, though 2.16's tables say less
        small = m.predict("all_reduce", 8)
        assert (small.algo, small.proto, small.time_us) == (
            plain_small.algo, plain_small.proto, plain_small.time_us)


def test_an_entry_names_its_nccl_release(tmp_path):
    plain = validate(_entry(tmp_path, None, "H200-SXM", 2**20))["points"][0]
    stated = validate(_entry(tmp_path, {"nccl": "2.20.5", "net_plugin": "none"}, "H200-SXM",
                             2**20))["points"][0]
    assert (plain["algo"], stated["algo"]) == ("ring", "nvls")
    [e] = load_entries(_entry(tmp_path, {"nccl": "2.16.5", "tuner": "x"}))
    assert e["nccl"] == (2, 16, 5) and e["stack"] == "nccl 2.16.5, tuner x"
    [e] = load_entries(_entry(tmp_path, "unstated: versions not given"))
    assert e["nccl"] is None and e["stack"].startswith("unstated")


@pytest.mark.parametrize("stack, field, words", [
    ({"nccl": "2.x"}, "[0](dgx-a100-small).stack.nccl", "expected an NCCL release"),
    ({"ncl": "2.18"}, "[0](dgx-a100-small).stack", "unknown key 'ncl'"),
    (["2.18"], "[0](dgx-a100-small).stack", "a mapping of nccl, net_plugin, tuner")])
def test_a_bad_stack_names_file_and_field(tmp_path, stack, field, words):
    path = _entry(tmp_path, stack)
    with pytest.raises(InputError) as exc:
        load_entries(path)
    assert exc.value.field == field and words in exc.value.message
    assert exc.value.file == path


def test_collective_nccl_option(cli):
    code, out, _ = cli("collective", "hgx-h100", "-b", "1G", "-e", "1G", "--nccl", "2.16.5")
    assert code == 0 and "NCCL 2.16.5" in out and "nvls" not in out.split("\n")[-3]
    code, out, err = cli("collective", "hgx-h100", "--nccl", "2.x")
    assert code == 2 and out == "" and err.count("\n") == 1 and "--nccl" in err


def test_the_summary_keeps_runs_whose_stack_is_not_published_apart(tmp_path, cli):
    base = {"source_id": "test", "collective": "all_reduce", "ranks": 8,
            "system": {"gpu": "H100-SXM", "gpus_per_node": 8, "scale_up": "nvswitch"},
            "points": [{"size": 2**30, "busbw": 470.0}]}
    entries = [dict(base, id="stated", stack={"nccl": "2.21.5"}),
               dict(base, id="unpublished", stack="unstated: no NCCL version given"),
               dict(base, id="silent"), dict(base, id="silent-too")]
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(entries))
    r = validate(str(f))
    by = r["summary"]["all"]["by_stack"]
    assert {k: b["points"] for k, b in by.items()} == {"release": 1, "unstated": 1,
                                                       "unrecorded": 2}
    assert [p["stack_kind"] for p in r["points"]] == ["release", "unstated", "unrecorded",
                                                      "unrecorded"]
    code, out, _ = cli("validate", str(f))
    assert code == 0 and "stack: not published" in out and "stack: NCCL release stated" in out


def _missing_in_worker(_x):
    return versions.missing()


def test_worker_processes_model_the_callers_nccl_release():
    from gpufabric import sweep
    with versions.use("2.16.5"):
        assert sweep.run(_missing_in_worker, [0, 1], jobs=2) == [("nvls", "nvls_tree", "pat")] * 2
    assert sweep.run(_missing_in_worker, [0, 1], jobs=2) == [(), ()]


def test_train_models_the_release(cli):
    # NCCL 2.16 has no NVLS: tensor-parallel all-reduces (no sequence parallelism) on 8 H100s
    # run as rings, slower
    args = ("train", "llama2-7b", "hgx-h100", "--tp", "8", "--no-sp", "--json")
    import json
    code, out, _ = cli(*args)
    new = json.loads(out)
    code2, out2, _ = cli(*args, "--nccl", "2.16.5")
    old = json.loads(out2)
    assert code == code2 == 0
    assert old["step_time_s"] > new["step_time_s"]
