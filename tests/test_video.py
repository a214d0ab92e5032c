"""Video and image generation with diffusion transformers (`gpufabric generate`, the fourth kind
of `gpufabric validate`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufabric import crossval
from gpufabric.topology.build import load
from gpufabric.workloads import video as V
from gpufabric.workloads.video_validate import is_video_file
from gpufabric.workloads.video_validate import validate as validate_video

DATA = Path(__file__).parent / "data" / "calibration" / "video.yaml"


def test_wan_720p_5s_tokens_follow_from_the_vae_and_patch():
    """Wan 2.1: 5 s at 16 fps is 81 frames; its VAE keeps frame 1 and every 4th after it (21
    latent frames) and shrinks 8x8, the 2x2 patch halves again: 45 x 80 tokens per frame."""
    m = V.load_dit("wan2.1-t2v-14b")
    frames = V.frames_for(m, 5, 16)
    assert frames == 81
    assert V.latent_shape(m, 1280, 720, frames) == (21, 45, 80, 21 * 45 * 80)
    assert 21 * 45 * 80 == 75_600


def test_self_attention_flops_grow_with_the_square_of_the_tokens():
    m = V.load_dit("wan2.1-t2v-14b")

    def flops(tokens: int, kind: str) -> float:
        ops = V.block_ops(m, "cross", tokens, 512, 1, V.Layout(), "bf16", True)
        return sum(o.flops for o in ops if o.name == kind)
    assert flops(2 * 37_800, "self_attn") == 4 * flops(37_800, "self_attn")
    assert flops(2 * 37_800, "self_attn") == 4 * (2 * 37_800) ** 2 * m.hidden
    # the GEMMs and the cross-attention to the 512 text tokens grow linearly
    assert flops(2 * 37_800, "mlp_up") == 2 * flops(37_800, "mlp_up")
    assert flops(2 * 37_800, "cross_attn") == 2 * flops(37_800, "cross_attn")


def test_sequence_parallelism_over_8_gpus_beats_one_and_shows_its_communication():
    one = V.generate("wan2.1-t2v-14b", load("gpu=H100-SXM,gpus_per_node=1"))
    eight = V.generate("wan2.1-t2v-14b", load("hgx-h100"), layout=V.Layout(ulysses=8))
    assert one["breakdown_s"]["dit_communication"] == 0
    comm = eight["breakdown_s"]["dit_communication"]
    assert 0 < comm < 0.1 * eight["seconds_per_video"]   # all-to-alls over NVSwitch
    # the DiT's work splits 8 ways; text encoder and VAE do not
    assert one["seconds_per_video"] / 8 < eight["seconds_per_video"] \
        < one["seconds_per_video"] / 6
    assert one["flops_per_step"]["attention"] == pytest.approx(
        eight["flops_per_step"]["attention"], rel=1e-3)


def test_ring_attention_passes_keys_and_values_round_the_ring():
    ulysses = V.generate("flux.1-dev", load("hgx-h100"), layout=V.Layout(ulysses=4))
    ring = V.generate("flux.1-dev", load("hgx-h100"), layout=V.Layout(ring=4))
    assert ring["breakdown_s"]["dit_communication"] > 0
    assert ulysses["breakdown_s"]["dit_communication"] > 0
    assert ring["layout"]["gpus"] == ulysses["layout"]["gpus"] == 4


def test_cfg_parallel_runs_one_branch_per_group_and_distilled_guidance_has_none():
    sys8 = load("hgx-h100")
    cfg = V.generate("wan2.1-t2v-14b", sys8, layout=V.Layout(ulysses=4, cfg_parallel=True))
    sp = V.generate("wan2.1-t2v-14b", sys8, layout=V.Layout(ulysses=4))
    assert cfg["layout"]["gpus"] == 8 and sp["layout"]["gpus"] == 4
    assert cfg["seconds_per_video"] < 0.6 * sp["seconds_per_video"]
    assert sp["instances"] == 2 and cfg["instances"] == 1
    with pytest.raises(Exception, match="distilled guidance"):
        V.generate("flux.1-dev", sys8, layout=V.Layout(ulysses=2, cfg_parallel=True))


def test_step_caching_skips_the_stated_fraction_of_steps():
    sys1 = load("gpu=H100-SXM,gpus_per_node=1")
    full = V.generate("hunyuanvideo", sys1)
    cached = V.generate("hunyuanvideo", sys1, run=V.Run(cache_skip=0.4))
    assert cached["request"]["steps_computed"] == 30
    dit = [sum(v for k, v in r["breakdown_s"].items() if k.startswith("dit_"))
           for r in (full, cached)]
    assert dit[1] == pytest.approx(dit[0] * 0.6)


def test_generate_prints_the_breakdown(cli):
    code, out, _ = cli("generate", "wan2.1-t2v-14b", "hgx-h100", "--resolution", "1280x720",
                       "--seconds", "5", "--fps", "16", "--steps", "50", "--sp", "8")
    assert code == 0
    for part in ("text encoder", "DiT GEMM", "DiT attention", "DiT communication",
                 "VAE decode", "seconds per video", "videos per hour"):
        assert part in out
    assert "21 x 45 x 80 = 75,600 latent" in out
    code, out, _ = cli("generate", "flux.1-dev", "gpu=H100-SXM,gpus_per_node=1", "--json")
    r = json.loads(out)
    assert code == 0 and r["kind"] == "image" and r["tokens"]["video"] == 64 * 64


@pytest.mark.parametrize("args, field", [
    (["nosuchmodel", "hgx-h100"], "MODEL"),
    (["wan2.1-t2v-14b", "hgx-h100", "--resolution", "1280x719"], "--resolution"),
    (["wan2.1-t2v-14b", "hgx-h100", "--resolution", "wide"], "--resolution"),
    (["wan2.1-t2v-14b", "hgx-h100", "--sp", "16"], "--sp"),
    (["wan2.1-t2v-1.3b", "hgx-h100", "--sp", "8"], "--sp"),
    (["flux.1-dev", "hgx-h100", "--cfg-parallel"], "--cfg-parallel"),
    (["wan2.1-t2v-14b", "hgx-h100", "--cache-skip", "1.5"], "--cache-skip"),
    (["wan2.1-t2v-14b", "hgx-h100", "--frames", "80"], "--frames"),
    (["wan2.1-t2v-14b", "hgx-h100", "--attn-kernel", "fa9"], "--attn-kernel"),
])
def test_bad_input_is_one_line_and_exit_2(cli, args, field):
    code, _, err = cli("generate", *args)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"gpufabric: error: {field}: "), err


def test_published_generation_times_validate_within_the_goal():
    """Issue 32's goal: at least 10 published generation times, held-out median within 20%.
    Nothing of the model is fitted on these entries, so every point is held out. The bound is
    the goal itself; the shipped figure is 14.8% (docs/video.md), which a change of the compute
    model's constants may move."""
    assert is_video_file(str(DATA))
    res = validate_video(str(DATA))
    s = res["summary"]
    assert s["points"] >= 10 and s["fitted"]["points"] == 0 and not res["skipped"]
    assert s["median_abs_pct"] < 20
    sources = {e["source_id"] for e in crossval.entries(DATA)[0]}
    assert len(sources) >= 2


def test_validate_reads_a_video_file_as_its_own_kind(cli):
    code, out, _ = cli("validate", str(DATA))
    assert code == 0 and "(video generation)" in out and "held-out" in out
    assert crossval.kind_of(str(DATA)) == "video"
