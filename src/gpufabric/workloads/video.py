"""Video and image generation with diffusion transformers: seconds per video on a system.

A request (resolution, frames, denoising steps) becomes latent tokens through the model's VAE
compression and patching (``workloads/data/diffusion.yaml``, every shape with its source):

    tokens = ((frames - 1) / t_c + 1) / p_t  x  (H / s_c / p_h)  x  (W / s_c / p_w)

Each denoising step runs every DiT block once per guidance branch: the GEMMs (QKV, output,
MLP; the cross-attention's query, output and text keys/values), the full 3D self-attention
(``4 L^2 d`` FLOPs per block: quadratic in the tokens) and the element-wise passes, each timed by
the one compute model (:mod:`gpufabric.workloads.compute`: per-generation GEMM efficiency,
flash-attention rate, HBM roofline, kernel launches). Classifier-free guidance runs two passes
per step (batched on the same GPUs, or one branch per GPU group with CFG parallelism); a model
with distilled guidance runs one. The text encoders run once per video, the VAE decoder once
(its convolution FLOPs at :data:`CONV_EFF` of the GPU's tensor peak).

Sequence parallelism splits the tokens over GPUs: Ulysses (``ulysses``) trades the sequence
split for a head split around each attention with two all-to-alls (the Q/K/V in, the output
back); ring attention (``ring``) passes each rank's keys and values round the ring. Both are
timed by :func:`gpufabric.collectives.predict` on the system's real topology. Step caching
(TeaCache, First-Block-Cache) is an input: the fraction of steps whose DiT pass is skipped.

Examples
--------
>>> m = load_dit("wan2.1-t2v-14b")
>>> latent_shape(m, 1280, 720, 81)
(21, 45, 80, 75600)
>>> from gpufabric.topology.build import load
>>> r = generate("flux.1-dev", load("gpu=H100-SXM,gpus_per_node=1"))
>>> r["tokens"]["sequence"], 3 < r["seconds_per_video"] < 8
(4608, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from gpufabric.errors import InputError, check_range, unknown_name
from gpufabric.fileio import load_data
from gpufabric.workloads import compute as C
from gpufabric.workloads.models import model_key

BLOCK_TYPES = ("cross", "joint", "double", "single")
GUIDANCE = ("cfg", "distilled")
#: the attention kernels a run names, and how the compute model times each: FlashAttention-2
#: (flash-attn 2, PyTorch SDPA) held to its per-SM rate on Hopper; native: the generation's
#: best (FA3 / cuDNN on Hopper)
ATTN_KERNELS = {"fa2": "fa2-sm", "native": "native"}

#: Achieved fraction of the tensor peak of a VAE decoder's convolutions (cuDNN implicit-GEMM
#: 3x3 / 3x3x3 convolutions at 96-512 channels, activations far larger than the caches)
CONV_EFF = C.record("CONV_EFF", 0.35, "fraction of tensor peak", "VAE decoder convolutions",
                    "prior: cuDNN implicit-GEMM convolutions of 128-512 channels reach about "
                    "0.3-0.5 of the tensor peak (NVIDIA cuDNN developer guide, convolution "
                    "performance figures); not fitted")
#: 16-bit passes of adaLN modulation per block: each of the block's normalised inputs is
#: scaled and shifted, and each branch's output gated, by the timestep's vectors
ADALN_PASSES = C.record("ADALN_PASSES", 3, "2-byte passes per element and norm",
                        "diffusion transformers: adaLN modulate and gate",
                        "physical: read x, write x * (1 + scale) + shift, read again for the "
                        "gate (DiT, Peebles and Xie 2023, adaLN-Zero); not fitted")


@dataclass(frozen=True)
class DiT:
    """One diffusion transformer with its VAE and text encoders (see diffusion.yaml)."""

    name: str
    kind: str
    blocks: tuple[tuple[str, int], ...]
    hidden: int
    heads: int
    ffn: int
    patch: tuple[int, int, int]
    vae_compression: tuple[int, int, int]
    vae_channels: int
    vae_flops_per_pixel: float
    vae_precision: str
    text_encoders: tuple[str, ...]
    text_params: float
    text_tokens: int
    guidance: str
    defaults: dict[str, int] = field(hash=False, compare=False, default_factory=dict)
    source: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def layers(self) -> int:
        return sum(n for _, n in self.blocks)

    def params(self) -> float:
        """The DiT's parameters in its blocks, with the per-block adaLN modulation of
        MMDiT blocks (6 vectors per stream of a double block, 3 of a single one); embeddings
        and the shared timestep MLP left out.

        >>> [round(load_dit(n).params() / 1e9, 1) for n in ("wan2.1-t2v-14b", "flux.1-dev")]
        [14.1, 11.8]
        """
        h, f = self.hidden, self.ffn
        per = {"cross": 8 * h * h + 2 * h * f, "joint": 4 * h * h + 2 * h * f,
               "double": 2 * (4 * h * h + 2 * h * f) + 2 * 6 * h * h,
               "single": 4 * h * h + 2 * h * f + 3 * h * h}
        return float(sum(per[t] * n for t, n in self.blocks))

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "blocks": [list(b) for b in self.blocks],
                "hidden": self.hidden, "heads": self.heads, "ffn": self.ffn,
                "patch": list(self.patch), "vae_compression": list(self.vae_compression),
                "text_encoders": list(self.text_encoders), "text_tokens": self.text_tokens,
                "guidance": self.guidance, "params": self.params(), "source": self.source}


def _triple(v: Any, where: str, key: str) -> tuple[int, int, int]:
    if not (isinstance(v, list) and len(v) == 3 and all(isinstance(x, int) and x >= 1
                                                         for x in v)):
        raise InputError(f"got {v!r}; expected [t, h, w] of whole numbers >= 1", file=where,
                         field=key)
    return (v[0], v[1], v[2])


def _check(raw: dict[str, Any], where: str) -> DiT:
    """A diffusion.yaml entry as a :class:`DiT` (a bad one names its field)."""
    name = str(raw.get("name", "")).lower()
    blocks = tuple((str(b["type"]), int(b["count"])) for b in raw.get("blocks") or [])
    for t, n in blocks:
        if t not in BLOCK_TYPES or n < 1:
            raise InputError(f"got {t!r} x {n}; allowed types: {', '.join(BLOCK_TYPES)}",
                             file=where, field=f"{name}.blocks")
    if raw.get("guidance") not in GUIDANCE:
        raise InputError(f"got {raw.get('guidance')!r}; allowed: {', '.join(GUIDANCE)}",
                         file=where, field=f"{name}.guidance")
    vae, text = raw["vae"], raw["text"]
    return DiT(name=name, kind=str(raw["kind"]), blocks=blocks, hidden=int(raw["hidden"]),
               heads=int(raw["heads"]), ffn=int(raw["ffn"]),
               patch=_triple(raw["patch"], where, f"{name}.patch"),
               vae_compression=_triple(vae["compression"], where, f"{name}.vae.compression"),
               vae_channels=int(vae["channels"]),
               vae_flops_per_pixel=float(vae["decode_flops_per_pixel"]),
               vae_precision=C.check_precision(vae["precision"]),
               text_encoders=tuple(text["encoders"]), text_params=float(text["params"]),
               text_tokens=int(text["tokens"]), guidance=raw["guidance"],
               defaults=dict(raw.get("defaults") or {}), source=str(raw["source"]),
               aliases=tuple(str(a).lower() for a in raw.get("aliases") or ()))


@cache
def _builtin() -> dict[str, DiT]:
    where = "workloads/data/diffusion.yaml"
    out: dict[str, DiT] = {}
    for raw in load_data("gpufabric.workloads", "data", "diffusion.yaml"):
        m = _check(raw, where)
        for key in (m.name, *m.aliases):
            k = model_key(key)
            if k in out and out[k].name != m.name:
                raise InputError(f"duplicate model name {key!r}", file=where)
            out[k] = m
    return out


def list_dits() -> list[DiT]:
    """The built-in diffusion transformers, each once, in file order."""
    return list({m.name: m for m in _builtin().values()}.values())


def load_dit(name: str | DiT) -> DiT:
    """A built-in diffusion transformer by name or alias, in any usual spelling.

    >>> load_dit("Wan2.1-T2V-14B").name, load_dit("FLUX.1-dev").guidance
    ('wan2.1-t2v-14b', 'distilled')
    """
    if isinstance(name, DiT):
        return name
    hit = _builtin().get(model_key(name))
    if hit is None:
        raise unknown_name("diffusion model", str(name), [m.name for m in list_dits()],
                           field="MODEL")
    return hit


# -- a request's tokens -------------------------------------------------------------------------

def frames_for(m: DiT, seconds: float, fps: float) -> int:
    """Frames of a ``seconds``-long video at ``fps``: ``seconds x fps + 1`` (the first frame
    stands alone in a causal video VAE), rounded up to the VAE's ``t_c k + 1``.

    >>> frames_for(load_dit("wan2.1-t2v-14b"), 5, 16), frames_for(load_dit("hunyuanvideo"), 5, 24)
    (81, 121)
    """
    if m.kind == "image":
        return 1
    raw = math.ceil(seconds * fps - 1e-9)
    tc = m.vae_compression[0]
    return (raw + tc - 1) // tc * tc + 1


def latent_shape(m: DiT, width: int, height: int, frames: int) -> tuple[int, int, int, int]:
    """(latent frames in tokens, token rows, token columns, tokens) of a request; an
    InputError when the resolution is not a multiple of the VAE's and patch's stride."""
    tc, sh, sw = m.vae_compression
    pt, ph, pw = m.patch
    for key, v, s in (("width", width, sw * pw), ("height", height, sh * ph)):
        check_range(v, s, 16384, integer=True, field=f"--{'resolution'}",
                    why=f" ({key}: at least {s} pixels, at most 16384)")
        if v % s:
            raise InputError(f"{key} {v} is not a multiple of {s} (the VAE's {s // pw}x "
                             f"compression times the {pw}x{pw} patch of {m.name})",
                             field="--resolution")
    check_range(frames, 1, 10_000, integer=True, field="--frames")
    if m.kind == "image" and frames != 1:
        raise InputError(f"{m.name} makes images: frames must be 1", field="--frames")
    if (frames - 1) % tc:
        raise InputError(f"{frames} frames: the VAE of {m.name} takes {tc}k + 1 frames",
                         field="--frames")
    lt = ((frames - 1) // tc + 1 + pt - 1) // pt
    rows, cols = height // sh // ph, width // sw // pw
    return lt, rows, cols, lt * rows * cols


# -- one denoising step -------------------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    """How one generation is spread over GPUs: Ulysses and ring sequence-parallel degrees and
    CFG parallelism (the two guidance branches on two groups)."""

    ulysses: int = 1
    ring: int = 1
    cfg_parallel: bool = False

    @property
    def sp(self) -> int:
        return self.ulysses * self.ring

    @property
    def gpus(self) -> int:
        return self.sp * (2 if self.cfg_parallel else 1)


@dataclass(frozen=True)
class Run:
    """How the engine runs the model: precision of the DiT, attention kernel (fa2: flash-
    attention 2 / PyTorch SDPA; native: the generation's best, FA3 / cuDNN on Hopper),
    whether its element-wise steps are fused (torch.compile), and the fraction of steps a
    step cache skips."""

    precision: str = "bf16"
    attn_kernel: str = "fa2"
    compiled: bool = False
    cache_skip: float = 0.0


def block_ops(m: DiT, kind: str, video: int, text: int, batch: int, lay: Layout,
              precision: str, fused: bool) -> list[C.Op]:
    """One block's operations on one GPU for ``batch`` sequences of ``video`` latent and
    ``text`` text tokens, split by the layout's sequence parallelism.

    >>> m = load_dit("wan2.1-t2v-14b")
    >>> ops = block_ops(m, "cross", 75600, 512, 1, Layout(), "bf16", True)
    >>> att = next(o for o in ops if o.name == "self_attn")
    >>> att.flops == 4 * 75600 ** 2 * 5120
    True
    """
    eb = C.ACT_BYTES[precision]
    h, f, hd = m.hidden, m.ffn, m.head_dim
    heads = m.heads // lay.ulysses
    joint = kind != "cross"
    seq = video + (text if joint else 0)          # tokens of the self-attention
    n = math.ceil(seq / lay.sp) * batch           # tokens this GPU holds between attentions
    ps = C.PASSES[fused]
    ops: list[C.Op] = [C.elementwise("norm1", n * h, ps["norm"] + ADALN_PASSES.value, eb),
                       C.elementwise("qk_norm_rope", n * 2 * h, ps["norm"] + ps["rope"], eb)]
    if kind == "single":     # one GEMM to QKV and the MLP input, one back from both
        ops.append(C.gemm("qkv_mlp_in", n, 3 * h + f, h, eb))
    else:
        ops.append(C.gemm("qkv", n, 3 * h, h, eb))
    ops.append(C.attention("self_attn", batch, math.ceil(seq / lay.ring), seq,
                           C.Heads(heads, heads, hd, hd), eb, causal=False))
    if kind == "single":
        ops.append(C.elementwise("mlp_act", n * f, ps["act"], eb))
        ops.append(C.gemm("out_mlp_down", n, h, h + f, eb))
        ops.append(C.elementwise("residual", n * h, ps["residual"] + ADALN_PASSES.value, eb))
        return ops
    ops.append(C.gemm("attn_out", n, h, h, eb))
    ops.append(C.elementwise("residual_norm2", n * h, ps["residual_norm"] + ADALN_PASSES.value, eb))
    if kind == "cross":      # every GPU's queries against all the text keys, all heads
        ops.append(C.gemm("cross_q", n, h, h, eb))
        ops.append(C.gemm("cross_kv", text * batch, 2 * h, h, eb))
        ops.append(C.attention("cross_attn", batch, n // batch, text,
                               C.Heads(m.heads, m.heads, hd, hd), eb, causal=False))
        ops.append(C.gemm("cross_out", n, h, h, eb))
        ops.append(C.elementwise("residual_norm3", n * h, ps["residual_norm"], eb))
    ops.append(C.gemm("mlp_up", n, f, h, eb))
    ops.append(C.elementwise("mlp_act", n * f, ps["act"], eb))
    ops.append(C.gemm("mlp_down", n, h, f, eb))
    ops.append(C.elementwise("residual", n * h, ps["residual"] + ADALN_PASSES.value, eb))
    return ops


class _Comm:
    """Collective times on the system's topology, each size predicted once."""

    def __init__(self, topo: Any):
        self.topo = topo
        self.per_node = topo.scale_up()[0]
        self.seen: dict[tuple[str, int, int], float] = {}

    def __call__(self, op: str, size: float, ranks: int) -> float:
        if ranks <= 1 or size <= 0:
            return 0.0
        key = (op, int(size), ranks)
        if key not in self.seen:
            from gpufabric import collectives
            self.seen[key] = collectives.predict(
                self.topo, op, max(int(size), 1), ranks,
                per_node=min(ranks, self.per_node)).time_us * 1e-6
        return self.seen[key]


def step_parts(m: DiT, video: int, text: int, lay: Layout, run: Run, gpu: C.GPUSpec,
               comm: _Comm) -> dict[str, float]:
    """Seconds of one denoising step on one GPU group by part (gemm, attention, elementwise,
    communication) and its FLOPs (gemm_flops, attention_flops) per GPU."""
    branches = 2 if m.guidance == "cfg" else 1
    batch = 1 if lay.cfg_parallel else branches
    eb = C.ACT_BYTES[run.precision]
    parts = dict.fromkeys(("gemm", "attention", "elementwise", "communication",
                           "gemm_flops", "attention_flops"), 0.0)
    kind_of = {"gemm": "gemm", "attn": "attention", "elem": "elementwise"}
    for kind, count in m.blocks:
        for op in block_ops(m, kind, video, text, batch, lay, run.precision, run.compiled):
            t = C.op_time_s(op, gpu, run.precision, ATTN_KERNELS[run.attn_kernel])
            parts[kind_of[op.kind]] += t * count
            if op.kind in ("gemm", "attn"):
                key = "gemm_flops" if op.kind == "gemm" else "attention_flops"
                parts[key] += op.flops * count
        seq = video + (text if kind != "cross" else 0)
        n = math.ceil(seq / lay.sp) * batch
        # Ulysses: Q, K, V to the head split and the output back (per-rank buffers)
        a2a = comm("all_to_all", n * 3 * m.hidden * eb, lay.ulysses) + \
            comm("all_to_all", n * m.hidden * eb, lay.ulysses)
        # ring: each rank's keys and values passed round the ring, one hop per step
        ring = (lay.ring - 1) * comm("send_recv", 2 * n * m.hidden * eb, 2) \
            if lay.ring > 1 else 0.0
        parts["communication"] += (a2a + ring) * count
    cells = m.patch[0] * m.patch[1] * m.patch[2] * m.vae_channels
    out = math.ceil(video / lay.sp) * batch * cells * eb
    parts["communication"] += comm("all_gather", out, lay.sp)        # the step's output
    if lay.cfg_parallel:
        parts["communication"] += comm("all_gather", video * cells * eb, 2)
    return parts


def check_layout(m: DiT, lay: Layout, gpus: int) -> None:
    """An InputError for a layout the model or system cannot run."""
    for key, v in (("--sp", lay.ulysses), ("--ring", lay.ring)):
        check_range(v, 1, 4096, integer=True, field=key)
    if m.heads % lay.ulysses:
        raise InputError(f"{m.name} has {m.heads} heads, not divisible by {lay.ulysses} "
                         "Ulysses ranks (each takes whole heads); use --ring for the rest",
                         field="--sp")
    if lay.cfg_parallel and m.guidance != "cfg":
        raise InputError(f"{m.name} has distilled guidance (one pass per step): nothing for "
                         "CFG parallelism to split", field="--cfg-parallel")
    if lay.gpus > gpus:
        raise InputError(f"the layout needs {lay.gpus} GPUs; the system has {gpus}",
                         field="--sp")


def generate(model: str | DiT, topo: Any, *, width: int | None = None,
             height: int | None = None, frames: int | None = None, steps: int | None = None,
             layout: Layout = Layout(), run: Run = Run()) -> dict[str, Any]:
    """Seconds to generate one video (or image) of ``model`` on ``topo`` with ``layout``, and
    videos per hour of the whole system (as many instances as its GPUs hold), with the
    breakdown: text encoder, DiT steps (GEMM, attention, element-wise, communication) and VAE
    decode. Missing request fields take the model's defaults."""
    m = load_dit(model)
    d = m.defaults
    width = d["width"] if width is None else width
    height = d["height"] if height is None else height
    frames = d["frames"] if frames is None else frames
    steps = d["steps"] if steps is None else steps
    check_range(steps, 1, 10_000, integer=True, field="--steps")
    check_range(run.cache_skip, 0.0, 0.95, field="--cache-skip")
    prec = C.check_precision(run.precision)
    if run.attn_kernel not in ATTN_KERNELS:
        raise InputError(f"got {run.attn_kernel!r}; allowed: {', '.join(ATTN_KERNELS)}",
                         field="--attn-kernel")
    gpus = topo.gpus()
    check_layout(m, layout, len(gpus))
    total_gpus = topo.scale_up()[0] * topo.scale_up()[1]
    gpu = C.gpu_spec(gpus[0].model)
    gpu.peak_tflops(prec)
    lt, rows, cols, video = latent_shape(m, width, height, frames)
    parts = step_parts(m, video, m.text_tokens, layout, run, gpu, _Comm(topo))
    step_s = sum(parts[k] for k in ("gemm", "attention", "elementwise", "communication"))
    computed = math.ceil(steps * (1.0 - run.cache_skip) - 1e-9)
    branches = 2 if m.guidance == "cfg" else 1
    te = C.gemm("text_encoder", m.text_tokens * branches, int(m.text_params / 4096), 4096,
                C.ACT_BYTES[prec])
    text_s = C.op_time_s(te, gpu, prec)
    vae_prec = "tf32" if m.vae_precision == "fp32" else m.vae_precision
    vae_flops = m.vae_flops_per_pixel * width * height * frames
    vae_s = vae_flops / (gpu.peak_tflops(vae_prec) * 1e12 * CONV_EFF.value)
    dit = {k: parts[k] * computed for k in ("gemm", "attention", "elementwise",
                                            "communication")}
    total = text_s + sum(dit.values()) + vae_s
    instances = max(total_gpus // layout.gpus, 1)
    fps = d.get("fps", 1)
    return {
        "model": m.name, "kind": m.kind, "gpu": gpu.name, "system_gpus": total_gpus,
        "layout": {"ulysses": layout.ulysses, "ring": layout.ring,
                   "cfg_parallel": layout.cfg_parallel, "gpus": layout.gpus},
        "run": {"precision": prec, "attn_kernel": run.attn_kernel, "compiled": run.compiled,
                "cache_skip": run.cache_skip, "guidance": m.guidance,
                "passes_per_step": branches},
        "request": {"width": width, "height": height, "frames": frames, "fps": fps,
                    "seconds": (frames - 1) / fps if m.kind == "video" else 0.0,
                    "steps": steps, "steps_computed": computed},
        "tokens": {"latent_frames": lt, "rows": rows, "cols": cols, "video": video,
                   "text": m.text_tokens, "sequence": video + m.text_tokens},
        "flops_per_step": {"gemm": parts["gemm_flops"] * layout.gpus,
                           "attention": parts["attention_flops"] * layout.gpus},
        "step_s": step_s,
        "breakdown_s": {"text_encoder": text_s, "dit_gemm": dit["gemm"],
                        "dit_attention": dit["attention"],
                        "dit_elementwise": dit["elementwise"],
                        "dit_communication": dit["communication"], "vae_decode": vae_s},
        "seconds_per_video": total, "instances": instances,
        "videos_per_hour": instances * 3600.0 / total,
        "source": m.source,
    }


__all__ = ["DiT", "Layout", "Run", "load_dit", "list_dits", "latent_shape", "frames_for",
           "block_ops", "step_parts", "generate", "check_layout", "CONV_EFF", "BLOCK_TYPES"]
