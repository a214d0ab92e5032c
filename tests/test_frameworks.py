"""Framework profiles (workloads/data/frameworks/*.yaml) and run settings as entry keys."""

from __future__ import annotations

import pytest
from gpufabric.errors import InputError
from gpufabric.workloads.frameworks import (
    SETTINGS, load_profile, normalise, profiles, resolve, step_options,
)
from gpufabric.workloads.models import load_model
from gpufabric.workloads.validate import _one, run_settings, validate

SYSTEM = "gpu=H100-SXM,gpus_per_node=8,nodes=2,nic=ib-ndr"


def test_every_profile_loads_and_names_a_source_for_each_default():
    ps = profiles()
    assert set(ps) == {"megatron", "nemo", "torchtitan", "deepspeed", "pytorch-fsdp",
                       "composer", "maxtext", "kempnerforge"}
    for p in ps.values():
        assert p.defaults and set(p.defaults) <= set(SETTINGS)
        assert set(p.sources) == set(p.defaults)
        assert all(len(src) > 20 for src in p.sources.values())


@pytest.mark.parametrize("name,profile", [
    ("Megatron-LM", "megatron"), ("megatron core", "megatron"), ("Megatron-Core r0.8.0",
                                                                 "megatron"),
    ("NeMo 2.0", "nemo"), ("Megatron-Bridge", "nemo"), ("torchtitan (FSDP2)", "torchtitan"),
    ("PyTorch FSDP", "pytorch-fsdp"), ("llm-foundry", "composer"), ("MaxText", "maxtext"),
    ("DeepSpeed", "deepspeed"),
])
def test_framework_names_match_after_normalising(name, profile):
    assert load_profile(name).name == profile


def test_framework_defaults_are_the_documented_ones():
    # facts from each framework's code at the version the profile names
    mg, tt = load_profile("megatron"), load_profile("torchtitan")
    assert (mg.defaults["sp"], mg.defaults["zero"], mg.defaults["overlap_grad_reduce"],
            mg.defaults["tp_comm_overlap"]) == (False, 0, False, False)
    assert (tt.defaults["fsdp"], tt.defaults["attention"], tt.defaults["fused_kernels"],
            tt.defaults["sac"]) == ("full", "sdpa", False, "op")
    assert load_profile("deepspeed").defaults["zero3_overlap"] is True
    # Megatron-Core r0.8.0: the asynchronous TP backward is on, the pipeline scatter/gather
    # (Megatron-LM 2021-2023) is gone; NeMo runs Megatron-Core's layers
    assert (mg.defaults["tp_bwd_overlap"], mg.defaults["pp_scatter_gather"]) == (True, False)
    assert load_profile("nemo").defaults["tp_bwd_overlap"] is True
    assert step_options({"tp_bwd_overlap": True, "pp_scatter_gather": True}) == {
        "tp_bwd_overlap": True, "pp_scatter_gather": True}
    assert normalise("NeMo 24.04") == "nemo"


def test_a_stated_key_overrides_the_profile():
    tt = load_profile("torchtitan")
    run = resolve(tt, {"fused_kernels": True, "recompute": "full"})
    assert (run["fused_kernels"], run["recompute"], run["sac"]) == (True, "full", "op")
    assert step_options(run)["fused"] is True
    # through an entry: the framework's default and the entry's own key
    run = run_settings({"framework": "Megatron-LM", "tp_comm_overlap": True})
    assert isinstance(run, dict)
    assert (run["tp_comm_overlap"], run["overlap_grad_reduce"]) == (True, False)


def _entry(**par):
    return {"id": "x", "system": {"gpu": "H100-SXM", "gpus": 8, "gpus_per_node": 8,
                                  "nodes": 1, "scale_up": "nvswitch"},
            "model": {"name": "Llama 3 8B", "seq_len": 4096},
            "parallelism": {"tp": 8, "micro_batch": 1, "global_batch": 8, **par},
            "result": {"tokens_per_s_per_gpu": 1000}}


def test_sp_false_is_honoured():
    m = load_model("llama3-8b")
    for stated, sp in (({"sp": False}, False), ({}, True), ({"framework": "NeMo"}, True),
                       ({"framework": "NeMo", "sp": False}, False),
                       ({"framework": "Megatron-LM"}, False)):
        e = _entry(**stated)
        got = _one(e, {}, m, {}, dict(e["parallelism"]))
        assert not isinstance(got, str)
        assert got[1].parallel["sp"] is sp, stated


def test_a_bad_setting_names_the_field_and_the_allowed_values():
    with pytest.raises(InputError, match="parallelism.attention: got 'fast'; allowed: flash, "
                                         "sdpa, unfused"):
        run_settings({"attention": "fast"})
    with pytest.raises(InputError, match="parallelism.sp: got 'no'; expected true or false"):
        run_settings({"sp": "no"})


def test_unknown_framework_is_skipped_with_its_reason_in_validate(tmp_path):
    import yaml
    f = tmp_path / "runs.yaml"
    f.write_text(yaml.safe_dump([_entry(framework="caffe")]))
    rep = validate(str(f))
    assert not rep.points
    assert "unknown framework 'caffe'" in rep.skipped[0]["reason"]


def test_train_framework_option(cli):
    code, out, _ = cli("train", "llama3-8b", SYSTEM, "--framework", "torchtitan", "--seq-len",
                       "4096", "--json")
    assert code == 0
    assert '"fsdp": "full"' in out and '"recompute": "selective"' in out
    # an option given on the command line overrides the profile
    code, out, _ = cli("train", "llama3-8b", SYSTEM, "--framework", "torchtitan", "--recompute",
                       "none", "--seq-len", "4096", "--json")
    assert code == 0 and '"recompute": "none"' in out
    code, out, err = cli("train", "llama3-8b", SYSTEM, "--framework", "caffe")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "gpufabric: error: --framework: unknown framework 'caffe' (known: composer, deepspeed, "
        "kempnerforge, maxtext, megatron, nemo, pytorch-fsdp, torchtitan)"]


def test_a_users_profile_file(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("name: mine\ndefaults:\n  sp: {value: false, source: 'our launcher, "
                 "train.sh line 12'}\n")
    assert load_profile(str(f)).defaults == {"sp": False}
    f.write_text("name: mine\ndefaults:\n  sp: {value: false}\n")
    with pytest.raises(InputError, match="every default names its source"):
        load_profile(str(f))


def test_recompute_modules_recompute_only_those_submodules():
    from gpufabric.workloads.parallel import Parallel
    from gpufabric.workloads.training import predict_step
    par = Parallel(tp=1, pp=1, dp=16, micro_batch=1, global_batch=16, recompute="selective")
    attn = predict_step("llama3-8b", SYSTEM, par, 4096)
    mlp = predict_step("llama3-8b", SYSTEM, par, 4096, recompute_modules=("mlp",))
    none = predict_step("llama3-8b", SYSTEM, par.with_(recompute="none"), 4096)
    # the MLP's three GEMMs cost more to recompute than the flash-attention core at 4096
    assert none.breakdown_s["compute"] < attn.breakdown_s["compute"] < \
        mlp.breakdown_s["compute"]
    with pytest.raises(InputError, match="recompute_modules: got 'mlps'; allowed: core_attn"):
        predict_step("llama3-8b", SYSTEM, par, 4096, recompute_modules=("mlps",))
    assert step_options({"recompute_modules": ["mlp", "moe_act"]})["recompute_modules"] == \
        ("mlp", "moe_act")
    with pytest.raises(InputError, match="parallelism.recompute_modules: got"):
        run_settings({"recompute_modules": ["attention"]})


def test_nccl_algo_and_proto_are_honoured():
    from gpufabric.workloads.parallel import Parallel
    from gpufabric.workloads.training import predict_step
    par = Parallel(tp=8, pp=1, dp=2, micro_batch=1, global_batch=2)
    auto = predict_step("llama3-8b", SYSTEM, par, 4096)
    ring = predict_step("llama3-8b", SYSTEM, par, 4096, nccl_algo="ring")
    ll = predict_step("llama3-8b", SYSTEM, par, 4096, nccl_algo="ring", nccl_proto="LL")
    # forcing the low-latency protocol on megabyte TP collectives costs bandwidth
    assert ll.comm_s["tp"] > ring.comm_s["tp"] >= auto.comm_s["tp"] * 0.999
    assert step_options(run_settings({"nccl_algo": "ring"}))["nccl_algo"] == "ring"
    with pytest.raises(InputError, match="parallelism.nccl_proto: got 'll'; allowed: LL, LL128"):
        run_settings({"nccl_proto": "ll"})
