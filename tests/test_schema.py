"""The system spec's declarative schema: one line naming the field and what it takes."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufabric.errors import InputError
from gpufabric.topology import schema
from gpufabric.topology.build import from_spec


@pytest.mark.parametrize("spec, line", [
    ({"gpu": "H100-SXM", "host": {"sockets": 0}},
     "box.yaml: host.sockets: expected an integer >= 1 and <= 72, got 0"),
    ({"gpu": "H100-SXM", "host": {"sockets": "two"}},
     "box.yaml: host.sockets: expected an integer >= 1 and <= 72, got 'two'"),
    ({"gpu": "H100-SXM", "nodes": True}, "box.yaml: nodes: expected an integer >= 1, got True"),
    ({"gpu": "H100-SXM", "gpus_per_node": 10**6},
     "box.yaml: gpus_per_node: expected an integer >= 1 and <= 576, got 1000000"),
    ({"gpu": "H100-SXM", "p2p": "yes"}, "box.yaml: p2p: expected true or false, got 'yes'"),
    ({"gpu": "H100-SXM", "fabric": {"tiers": 4}},
     "box.yaml: fabric.tiers: expected an integer >= 1 and <= 3, got 4"),
    ({"gpu": "H100-SXM", "fabric": {"topology": "mesh"}},
     "box.yaml: fabric.topology: got 'mesh'; allowed: rail-optimized, fat-tree"),
    ({"gpu": "H100-SXM", "fabric": {"oversubscription": 0.5}},
     "box.yaml: fabric.oversubscription: expected a number >= 1 and <= 511 (downlinks:uplinks) "
     "or a list [leaf, spine], got 0.5"),
    ({"gpu": "H100-SXM", "host": 3}, "box.yaml: host: expected a mapping with keys cpu, sockets,"),
    ({"gpu": "H100-SXM", "host": {"sokets": 2, "cpus": 1}},
     "box.yaml: host.cpus: unknown key(s) cpus, sokets; allowed: cpu, sockets, pcie_switches"),
    ({"gpu": "GB200", "supernode": {"racks": 0}},
     "box.yaml: supernode.racks: expected an integer >= 1, got 0"),
    ({"nodes": 2}, "box.yaml: gpu: required: the GPU model (e.g. gpu: H100-SXM)"),
])
def test_each_bad_value_is_one_line(spec, line):
    with pytest.raises(InputError) as exc:
        from_spec(spec, file="box.yaml")
    assert str(exc.value).startswith(line) and "\n" not in str(exc.value)


def test_the_schema_lists_the_keys_the_docs_name():
    assert schema.SPEC_KEYS[:3] == ("gpu", "gpus_per_node", "nodes")
    assert {"nvlink_domain", "supernode", "fabric", "host"} <= set(schema.SPEC_KEYS)
    assert schema.FABRIC_KEYS == ("topology", "oversubscription", "switch", "nodes_per_leaf",
                                  "rails_per_leaf", "pod_nodes", "tiers", "spine_switch",
                                  "core_switch")


VALID = {"gpu": "H100-SXM", "gpus_per_node": 8, "nodes": 4, "nic": "ib-ndr",
         "host": {"sockets": 2, "pcie_switches": 8}, "fabric": {"oversubscription": 2}}
values = st.one_of(st.none(), st.booleans(), st.integers(-3, 10**7), st.floats(allow_nan=True),
                   st.text(max_size=8), st.lists(st.integers(-2, 5), max_size=3),
                   st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
paths = st.sampled_from([(k,) for k in schema.SPEC_KEYS]
                        + [("host", k) for k in schema.HOST_KEYS]
                        + [("fabric", k) for k in schema.FABRIC_KEYS]
                        + [("supernode", k) for k in schema.SUPERNODE_KEYS])


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(paths, values), min_size=1, max_size=3))
def test_any_mutated_spec_builds_or_says_one_line(mutations):
    spec = {k: dict(v) if isinstance(v, dict) else v for k, v in VALID.items()}
    for path, value in mutations:
        cur = spec
        for p in path[:-1]:
            if not isinstance(cur.get(p), dict):
                cur[p] = {}
            cur = cur[p]
        cur[path[-1]] = value
    try:
        t = from_spec(spec, file="fuzz.yaml", materialize_nodes=1)
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("fuzz.yaml")
    else:
        assert t.gpus()


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(paths, values), min_size=1, max_size=3))
def test_a_spec_passed_without_the_model_passes_the_model(mutations):
    # check() lets a spec whose values plainly fit pass without pydantic: the model, built
    # from the same table, must agree with each of those
    spec = {k: dict(v) if isinstance(v, dict) else v for k, v in VALID.items()}
    for path, value in mutations:
        cur = spec
        for p in path[:-1]:
            if not isinstance(cur.get(p), dict):
                cur[p] = {}
            cur = cur[p]
        cur[path[-1]] = value
    if schema._plain(spec, ("section", "Spec")):
        schema._models()["Spec"].model_validate(spec)


def test_the_plain_values_of_each_kind_pass_the_model():
    spec = {"gpu": ["H100-SXM", "A100"], "gpus_per_node": 576, "nodes": 1, "scale_up": "pcie",
            "nvlink_links": 64, "pcie_gen": 7, "p2p": False, "nics_per_node": 0, "name": 3,
            "host": {"sockets": 72, "pcie_switches": 0, "switch_layout": "cascade",
                     "attach": "c2c", "numa_per_socket": None},
            "fabric": {"oversubscription": [1, 511.0], "tiers": 3, "switch": "QM9700"},
            "supernode": {"racks": 1, "links_per_gpu": 18}}
    assert schema._plain(spec, ("section", "Spec"))
    schema._models()["Spec"].model_validate(spec)
    for bad in ({"nodes": 0}, {"nodes": True}, {"p2p": 1}, {"scale_up": "warp"},
                {"fabric": {"oversubscription": float("nan")}}, {"host": {"sockets": 2.0}}):
        assert not schema._plain({**spec, **bad}, ("section", "Spec"))
