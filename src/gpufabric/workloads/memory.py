"""Memory per GPU: weights, gradients, optimizer states, activations, buffers, reserve.

Mixed-precision training with Adam keeps, per parameter, a 16-bit working weight (2 B), an
FP32 gradient (4 B; Megatron accumulates and reduces gradients in FP32) and FP32 master weight
plus two moments (12 B): 18 B per parameter, as the Megatron-LM distributed-optimizer notes
count it. ZeRO stage 1 shards the 12 B over the data-parallel group, stage 2 the gradients too,
stage 3 / FSDP the weights as well (plus the gathered weights of the layers in flight).

Activations per transformer block follow Korthikanti et al., "Reducing Activation
Recomputation in Large Transformer Models" (arXiv 2205.05198, Section 4): ``sbh(34 + 5as/h)``
bytes for a GPT block at 16 bit, generalised here to GQA/MLA and gated MLPs by counting every
tensor a block keeps for backward; with flash-attention (or ``selective`` recomputation) the
``5as/h`` score term is gone; tensor parallelism divides the parts inside its regions and
sequence parallelism the rest; ``full`` recomputation keeps only each block's input. In a
pipeline the first stage holds ``pp`` micro-batches in flight (1F1B), times
``1 + (pp-1)/(pp*vpp)`` with interleaving.

Examples
--------
>>> from gpufabric.workloads.parallel import Parallel
>>> m = training_memory("llama3-70b", Parallel(tp=8, pp=4, dp=8, micro_batch=1), 8192,
...                     "H100-SXM")
>>> round(m.weights_GiB, 2), round(m.optimizer_GiB, 1), m.fits
(4.23, 25.4, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from gpufabric.errors import InputError
from gpufabric.workloads.compute import ACT_BYTES, check_precision, gpu_spec, record
from gpufabric.workloads.models import ModelSpec, load_model
from gpufabric.workloads.parallel import Parallel

GiB = 2**30
#: the CUDA context with the framework's kernels loaded (outside the caching allocator)
CUDA_CONTEXT_GiB = record(
    "CUDA_CONTEXT_GiB", 0.5, "GiB", "GPU memory: CUDA context and loaded kernel images",
    "prior: nvidia-smi shows a PyTorch process at 0.3-0.6 GiB before its first allocation "
    "(CUDA context plus the cuBLAS/cuDNN/NCCL kernel images, lazy loading on); not fitted")
#: NCCL's communicators: per channel and peer the proxy and protocol buffers (Simple 4 MiB,
#: LL128 ~4.5 MiB, LL 0.25 MiB per channel and peer as NCCL_BUFFSIZE and its LL/LL128 sizes
#: set them), for the TP, DP, PP (and CP/EP) communicators a rank joins, plus cuBLAS
#: workspaces (CUBLAS_WORKSPACE_CONFIG 4096 KiB x 8 per stream and handle)
WORKSPACE_GiB = record(
    "WORKSPACE_GiB", 2.0, "GiB", "GPU memory: NCCL communicator buffers and cuBLAS workspaces",
    "prior: NCCL src/include/comm.h DEFAULT_BUFFSIZE 4 MiB (Simple), LL128 and LL buffer sizes "
    "per channel and peer, over 3-4 communicators of 8-32 channels; cuBLAS workspace 32 MiB per "
    "handle and stream; not fitted")


def reserve_GiB() -> float:
    """The framework's fixed reserve outside its tensors: CUDA context + NCCL and cuBLAS
    workspaces (:data:`CUDA_CONTEXT_GiB` + :data:`WORKSPACE_GiB`).

    >>> reserve_GiB()
    2.5
    """
    return float(CUDA_CONTEXT_GiB.value + WORKSPACE_GiB.value)


#: caching-allocator fragmentation, as a fraction of what the model allocates
FRAGMENTATION = record("FRAGMENTATION", 0.05, "fraction",
                       "GPU memory: caching-allocator fragmentation",
                       "prior: PyTorch caching allocator, reserved/allocated "
                       "~1.05 in steady-state training (torchtitan memory reports)")
#: bytes per parameter: 16-bit weight, FP32 gradient, FP32 master + Adam moments
WEIGHT_B, GRAD_B, OPT_B = 2, 4, 12
#: PyTorch FSDP (FSDP2, ``MixedPrecisionPolicy``): the sharded parameter stays in FP32 and is
#: the master weight (cast to 16 bits only when gathered), so a parameter's shard holds
#: 4 B of weight and 8 B of Adam moments, not 2 + 12
FSDP_WEIGHT_B, FSDP_OPT_B = 4, 8
#: bytes per logit (token x vocabulary entry on this GPU) held at the loss's peak, by how the
#: cross-entropy is computed (the ``cross_entropy`` run setting)
LOSS_BYTES = record(
    "LOSS_BYTES", {"eager": 12, "eager_tp": 16, "eager_16bit": 8, "vocab_parallel": 6,
                   "fused": 4},
    "B per logit",
    "GPU memory: the cross-entropy over the logits at its peak (the backward of the loss)",
    "eager: F.cross_entropy(pred.float(), labels) (torchtitan train.py at 9dec370, loss_fn): "
    "at log_softmax's backward the FP32 log-probabilities, their gradient (nll_loss backward) "
    "and the input gradient are live, 3 x 4 B, the BF16 logits freed by `del pred`; "
    "eager_tp: the same loss on vocabulary-sharded logits under PyTorch's loss_parallel "
    "(torch/distributed/tensor/parallel/loss.py, _nll_loss_and_log_softmax_backward, as in "
    "PyTorch 2.6): the saved FP32 log-probabilities, zeros_like(x), exp(x) and their sum, "
    "4 x 4 B, at `(grad_input + torch.exp(x)) * grad_output`; eager_16bit: "
    "F.cross_entropy on the 16-bit logits, which the training loop still holds "
    "(KempnerForge scripts/train.py at 01b461a): the logits, log-probabilities, their "
    "gradient and the input gradient, 4 x 2 B; "
    "vocab_parallel: Megatron-Core tensor_parallel/cross_entropy.py "
    "(_VocabParallelCrossEntropy): the FP32 softmax is saved and becomes the gradient in place, "
    "4 B, beside the 16-bit logits or their gradient, 2 B; fused: a compiled or fused loss "
    "(torch.compile of the loss, torchtitan components/loss.py at e7c0cae) saves the 16-bit "
    "logits and writes a 16-bit gradient, 2 x 2 B; not fitted")
#: the pipeline stage whose memory a figure is: the most loaded (``max``, as torchtitan
#: reports the maximum over its ranks), or the ``first`` or ``last`` (a source that reads
#: rank 0, which holds the first stage)
MEMORY_STAGES = ("max", "first", "last")
#: the ``cross_entropy`` run setting's values (``eager`` on vocabulary-sharded logits, with
#: tensor parallelism, counts as ``eager_tp``)
CROSS_ENTROPY = ("eager", "eager_16bit", "vocab_parallel", "fused")
#: what a published peak counts (an entry's ``memory_reported``): ``reserved``, the PyTorch
#: caching allocator's peak reserved memory (``torch.cuda.max_memory_reserved``: tensors and
#: the allocator's cached, fragmented blocks, without the CUDA context or NCCL's buffers);
#: ``allocated``, the peak of live tensors (``max_memory_allocated``); ``device``, what the GPU
#: holds in all (nvidia-smi), the default
MEMORY_REPORTED = ("device", "reserved", "allocated")


@dataclass(frozen=True)
class Accounting:
    """How a framework holds what the memory model counts (the run settings of
    :data:`gpufabric.workloads.frameworks.SETTINGS` of the same names): ``sac`` what
    selective recomputation keeps, ``cross_entropy`` how the loss is computed
    (:data:`LOSS_BYTES`), ``loss_parallel`` whether the loss runs on the vocabulary-sharded
    logits under tensor parallelism (false: the logits are gathered on every rank),
    ``master_weights`` whether FP32 master weights and moments sit beside 16-bit parameters
    (false: parameters, gradients and Adam moments all 16-bit, 2 + 2 + 4 B),
    ``grad_accum_no_sync`` whether FSDP accumulates gradients unsharded until the last
    micro-batch."""

    sac: str = "attention"
    cross_entropy: str = "vocab_parallel"
    loss_parallel: bool = True
    master_weights: bool = True
    grad_accum_no_sync: bool = False


@dataclass
class MemoryBreakdown:
    """Memory of the most loaded GPU (the first pipeline stage, or the last with the logits)."""

    weights_GiB: float
    grads_GiB: float
    optimizer_GiB: float
    activations_GiB: float
    buffers_GiB: float        # ZeRO-3/FSDP gathered layers, pipeline send/recv, logits
    reserve_GiB: float
    total_GiB: float
    capacity_GiB: float
    gpu: str
    stage: str

    @property
    def fits(self) -> bool:
        return self.total_GiB <= self.capacity_GiB

    def reported_GiB(self, what: str = "device") -> float:
        """The peak as a tool reports it (:data:`MEMORY_REPORTED`): ``device`` the total,
        ``reserved`` the caching allocator's (the total less the CUDA context and NCCL and
        cuBLAS workspaces, :func:`reserve_GiB`), ``allocated`` the tensors alone.

        >>> from gpufabric.workloads.parallel import Parallel
        >>> m = training_memory("llama3-8b", Parallel(dp=8, fsdp="full"), 8192, "H100-SXM")
        >>> round(m.total_GiB - m.reported_GiB("reserved"), 2)
        2.5
        """
        if what not in MEMORY_REPORTED:
            raise InputError(f"got {what!r}; allowed: {', '.join(MEMORY_REPORTED)}",
                             field="memory_reported")
        if what == "device":
            return self.total_GiB
        if what == "reserved":
            return self.total_GiB - reserve_GiB()
        return self.total_GiB - self.reserve_GiB

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fits"] = self.fits
        return d


def params_per_gpu(model: ModelSpec, par: Parallel, stage: int = 0) -> tuple[float, float]:
    """(dense, expert) parameters held by one GPU of pipeline ``stage`` before ZeRO sharding.

    Blocks are split evenly over the ``pp * vpp`` model chunks; the embedding sits on the first
    stage and the output layer on the last (both on one stage when tied or pp = 1).
    """
    if not model.is_transformer:
        return model.params() / par.tp, 0.0
    layers = stage_layers(model, par, stage)
    attn, norms = model.attn_params(), 2 * model.norm_params()
    # a block's parameters by its kind, added block by block as before (the same sums)
    mlp = model.mlp_params(model.ffn)
    if model.is_moe:
        routed = model.experts * model.mlp_params(model.expert_ffn) / (par.ep * par.expert_tp)
        shared = (model.shared_experts * model.mlp_params(model.expert_ffn) / par.tp
                  + model.hidden * model.experts)
    dense = expert = 0.0
    for i in layers:
        if model.moe_layer(i):
            expert += routed
            dense += shared
            dense += attn / par.tp + norms
        else:
            dense += (attn + mlp) / par.tp
            dense += norms
    return dense + edge_params(model, par, stage), expert


def edge_params(model: ModelSpec, par: Parallel, stage: int) -> float:
    """Parameters of pipeline ``stage`` outside its transformer blocks, on one GPU: the word
    (and position) embedding on the first stage, the final norm and the output layer on the
    last (one copy when tied on a single stage).

    >>> from gpufabric.workloads.models import load_model
    >>> edge_params(load_model("llama3-8b"), Parallel(tp=8), 0)  # 2 x 128256 x 4096 / 8 + 4096
    131338240.0
    """
    emb = model.vocab * model.hidden / par.tp
    out = 0.0
    if stage == 0:
        out += emb + model.positions * model.hidden
    if stage == par.pp - 1:
        out += model.norm_params()
        if not model.tied_embeddings or par.pp > 1:   # output layer (a copy when tied and split)
            out += emb
    return out


def stage_layers(model: ModelSpec, par: Parallel, stage: int) -> list[int]:
    """Block indices on pipeline ``stage`` (chunks of ``layers / (pp*vpp)`` round-robin)."""
    chunks = par.pp * par.vpp
    if model.layers < chunks:
        raise InputError(f"{model.name} has {model.layers} layers, fewer than pp x vpp = "
                         f"{chunks} model chunks", field="pp")
    bounds = [round(c * model.layers / chunks) for c in range(chunks + 1)]
    out: list[int] = []
    for c in range(stage, chunks, par.pp):
        out.extend(range(bounds[c], bounds[c + 1]))
    return out


def by_kind(model: ModelSpec, layers: list[int], fn: Callable[[int], float]) -> list[float]:
    """``fn(i)`` for each block ``i`` of ``layers``, computed once per kind of block (dense or
    MoE): a block's figures depend on its index only through its kind.

    >>> from gpufabric.workloads.models import load_model
    >>> by_kind(load_model("mixtral-8x7b"), [0, 1, 2], lambda i: float(i))
    [0.0, 0.0, 0.0]
    """
    seen: dict[bool, float] = {}
    out = []
    for i in layers:
        kind = model.moe_layer(i)
        if kind not in seen:
            seen[kind] = fn(i)
        out.append(seen[kind])
    return out


def block_activation_bytes(model: ModelSpec, layer: int, micro_batch: int, seq: int,
                           par: Parallel, precision: str, flash: bool = True) -> float:
    """Bytes one block keeps for backward for one micro-batch on one GPU (no recomputation)."""
    eb = ACT_BYTES[check_precision(precision)]
    t, c = par.tp, par.cp
    tokens = micro_batch * seq / c
    h = model.hidden
    sp = par.sp and t > 1
    rep = t if sp else 1                  # divisor of the parts outside the TP regions
    a = model.heads
    if model.attention == "mla":
        qkv = a * model.q_head_dim * 2 + a * model.v_head_dim + (
            model.q_lora_rank + model.kv_lora_rank + model.qk_rope_head_dim) * t
        core_out = a * model.v_head_dim
    else:
        qkv = (a + model.kv_heads) * model.head_dim + model.kv_heads * model.head_dim
        core_out = a * model.head_dim
    # outside TP regions: 2 norm inputs, QKV input, MLP input (eb each) + 2 dropout masks (1 B)
    outside = (4 * eb + 2) * h / rep
    inside = (qkv + core_out) * eb / t
    if model.moe_layer(layer):
        f = model.expert_ffn
        k = model.top_k
        # each token's k expert inputs and intermediates (balanced routing; a GPU serves 1/tp of
        # the block's tokens' experts, whatever the expert TP)
        inside += k * (h + f * (3 if model.gated else 2)) * eb / t
        if model.shared_experts:
            fs = f * model.shared_experts
            inside += fs * eb * (3 if model.gated else 2) / t
        inside += model.experts * 4         # router logits, FP32
    else:
        f = model.ffn
        inside += f * eb * (3 if model.gated else 2) / t
    per_token = outside + inside
    if not flash and par.recompute == "none":
        per_token += 5 * (a / t) * seq / c    # Korthikanti's 5as/h term, per token
    return tokens * per_token


def op_sac_block_bytes(model: ModelSpec, layer: int, micro_batch: int, seq: int,
                       par: Parallel, precision: str) -> float:
    """Bytes one block keeps for backward under torchtitan's op-level selective
    checkpointing (``sac="op"``, :data:`gpufabric.workloads.training.SAC_POLICIES`): the
    block's input and what the policy saves -- the outputs of the 1st, 3rd, ... matmul in call
    order and of the attention kernel (with its FP32 log-sum-exp) -- everything else being
    recomputed (torchtitan ``_op_sac_save_list`` and ``_get_custom_policy``: "saves output of
    all compute ops, except every second mm"). A column-parallel matmul's output is split by
    ``tp``; a row-parallel one (attention output, MLP down) is the full hidden width before
    its reduction. MoE blocks are counted as :func:`block_activation_bytes` counts them.

    >>> from gpufabric.workloads.models import load_model
    >>> m = load_model("llama3-8b")     # x, wq, wv, w1, w2 and the attention output per token
    >>> op_sac_block_bytes(m, 0, 1, 1, Parallel(), "bf16")    # (4 x 4096 + 1024 + 14336) x 2
    63616.0
    """
    if model.moe_layer(layer) or model.attention == "mla":
        return block_activation_bytes(model, layer, micro_batch, seq, par, precision)
    eb = ACT_BYTES[check_precision(precision)]
    t, h = par.tp, model.hidden
    rep = t if par.sp and t > 1 else 1
    a, kv, hd = model.heads, model.kv_heads, model.head_dim
    widths = [a * hd / t, kv * hd / t, kv * hd / t, h]      # wq wk wv wo
    widths += [model.ffn / t, model.ffn / t] if model.gated else [model.ffn / t]
    widths.append(h)                                          # w2
    saved = sum(widths[0::2]) * eb + h / rep * eb             # every other matmul + input
    saved += a * hd / t * eb + a / t * 4                      # attention output + LSE
    return micro_batch * seq / par.cp * saved


def training_memory(model: ModelSpec | str, par: Parallel, seq_len: int, gpu: str, *,
                    precision: str = "bf16", flash: bool = True,
                    gpus_per_node: int = 8, stage: str = "max",
                    **accounting: Any) -> MemoryBreakdown:
    """Memory of the most loaded GPU for a training layout. ``accounting``: how the framework
    holds it, the fields of :class:`Accounting` as keywords: ``sac``, what selective
    recomputation keeps (``attention``: Megatron's, Korthikanti's ``34 sbh``; ``op``:
    torchtitan's op-level policy, :func:`op_sac_block_bytes`); ``cross_entropy``, how the
    loss is computed (:data:`LOSS_BYTES`: ``eager``, ``eager_16bit``, ``vocab_parallel``,
    ``fused``); ``loss_parallel``, ``master_weights``, ``grad_accum_no_sync``. ``stage``:
    the most loaded pipeline stage (``max``), or the ``first`` or ``last``
    (:data:`MEMORY_STAGES`).

    Raises
    ------
    InputError
        For a layout the model cannot take (more chunks than layers, ...). A layout that does
        not fit is *reported* (``fits``); :func:`check_fits` turns it into an error.
    """
    m = load_model(model)
    prec = check_precision(precision)
    spec = gpu_spec(gpu)
    if seq_len < 1:
        raise InputError(f"must be at least 1, got {seq_len}", field="seq_len")
    if seq_len % par.cp:
        raise InputError(f"seq_len {seq_len} is not a multiple of cp {par.cp}", field="cp")
    acct = accounting_of(accounting)
    if stage not in MEMORY_STAGES:
        raise InputError(f"got {stage!r}; allowed: {', '.join(MEMORY_STAGES)}",
                         field="memory_stage")
    best: MemoryBreakdown | None = None
    stages = {"max": sorted({0, par.pp - 1}), "first": [0], "last": [par.pp - 1]}[stage]
    for st in stages:
        mb = _stage_memory(m, par, seq_len, spec, prec, flash, gpus_per_node, st, acct)
        if best is None or mb.total_GiB > best.total_GiB:
            best = mb
    assert best is not None
    return best


def accounting_of(kw: dict[str, Any]) -> Accounting:
    """An :class:`Accounting` from keywords, each checked (an InputError names the key).

    >>> accounting_of({"cross_entropy": "fused"}).cross_entropy
    'fused'
    >>> accounting_of({"loss": "fused"})
    Traceback (most recent call last):
    ...
    gpufabric.errors.InputError: loss: unknown memory accounting key (known: sac, \
cross_entropy, loss_parallel, master_weights, grad_accum_no_sync)
    """
    known = [f.name for f in fields(Accounting)]
    for k in kw:
        if k not in known:
            raise InputError(f"unknown memory accounting key (known: {', '.join(known)})",
                             field=k)
    acct = Accounting(**kw)
    if acct.cross_entropy not in CROSS_ENTROPY:
        raise InputError(f"got {acct.cross_entropy!r}; allowed: {', '.join(CROSS_ENTROPY)}",
                         field="cross_entropy")
    return acct


def expert_shard(par: Parallel, shard: int) -> int:
    """GPUs the expert parameters' optimizer state is sharded over, when the dense ones are
    sharded over ``shard``: the expert-data-parallel group, or under HSDP the shard group's
    share of it."""
    return max(shard // par.ep, 1) if par.fsdp == "hybrid" else par.edp


def model_states(par: Parallel, dense: float, expert: float, prec: str, gpn: int,
                 master_weights: bool = True) -> tuple[float, float, float]:
    """(weights, gradients, optimizer states) in bytes on one GPU holding ``dense`` and
    ``expert`` parameters before sharding. Megatron and DeepSpeed keep a 16-bit weight, an
    FP32 gradient and FP32 master weight + moments (2 + 4 + 12 B), ZeRO sharding them by
    stage; PyTorch FSDP keeps the FP32 shard as the master (4 + 4 + 8 B, all sharded:
    :data:`FSDP_WEIGHT_B`). Without master weights (16-bit parameters, as KempnerForge
    casts its model; PyTorch's AdamW keeps its moments in the parameter's dtype) a
    parameter holds 2 + 2 + 4 B."""
    z = par.zero_stage
    shard = par.dp * par.cp
    if par.fsdp == "hybrid":
        shard = min(shard, max(gpn // (par.tp * par.cp), 1) * par.cp)
    eshard = expert_shard(par, shard)

    def sharded(stage: int) -> float:
        return dense / (shard if z >= stage else 1) + expert / (eshard if z >= stage else 1)
    fp32 = prec in ("fp32", "tf32")
    wb, gb, ob = (4 if fp32 else WEIGHT_B), GRAD_B, OPT_B
    if not master_weights and not fp32:
        wb, gb, ob = WEIGHT_B, WEIGHT_B, 2 * WEIGHT_B
    elif par.fsdp and not fp32:
        wb, ob = FSDP_WEIGHT_B, FSDP_OPT_B
    opt = 0.0 if par.offload else ob * sharded(1)   # offload: in host memory
    return wb * sharded(3), gb * sharded(2), opt


def _stage_memory(m: ModelSpec, par: Parallel, seq: int, spec: Any, prec: str, flash: bool,
                  gpn: int, stage: int, acct: Accounting) -> MemoryBreakdown:
    dense, expert = params_per_gpu(m, par, stage)
    wb = 4 if prec in ("fp32", "tf32") else WEIGHT_B      # a gathered (working) weight
    weights, grads, opt = model_states(par, dense, expert, prec, gpn, acct.master_weights)
    buffers = 0.0
    eb = ACT_BYTES[prec]
    layers = stage_layers(m, par, stage) if m.is_transformer else []
    if par.zero_stage >= 3 and par.fsdp and par.pp > 1 and par.micro_batches > 1:
        # FSDP under a pipeline schedule: the stage's weights stay gathered and its gradients
        # unsharded (FP32, the reduce dtype) until the last micro-batch's backward (PyTorch
        # torch/distributed/pipelining/stage.py, backward_maybe_with_nosync:
        # set_reshard_after_backward(False), set_requires_gradient_sync(False); torchtitan
        # does not reshard after forward with pipelining)
        buffers += (wb + GRAD_B) * (dense + expert)
    elif par.zero_stage >= 3 and layers:
        buffers += _gathered_bytes(m, par, dense + expert, len(layers), wb, stage)
        if par.fsdp and acct.grad_accum_no_sync and par.micro_batches > 1:
            # FSDP2 without gradient sync until the last micro-batch keeps every parameter's
            # unsharded gradient, upcast to the reduce dtype (FP32) to accumulate
            # (torch/distributed/fsdp/_fully_shard/_fsdp_param.py,
            # to_accumulated_grad_if_needed)
            buffers += GRAD_B * (dense + expert)
    # activations
    if m.is_transformer:
        mb_, s = par.micro_batch, seq
        full = by_kind(m, layers, lambda i: block_activation_bytes(m, i, mb_, s, par, prec,
                                                                   flash))
        if par.recompute == "selective" and acct.sac == "op":
            full = by_kind(m, layers, lambda i: op_sac_block_bytes(m, i, mb_, s, par, prec))
        if par.recompute == "full":
            rep = par.tp if par.sp and par.tp > 1 else 1
            keep = len(layers) * mb_ * s / par.cp * m.hidden * eb / rep
            act_one = keep
            # the block being recomputed holds all its activations (the score matrix too
            # without flash attention)
            whole = par if flash else replace(par, recompute="none")
            working = max(by_kind(m, layers, lambda i: block_activation_bytes(
                m, i, mb_, s, whole, prec, flash)), default=0.0)
        else:
            act_one = sum(full)
            working = 0.0
        inflight: float = min(par.pp - stage, par.micro_batches) if par.pp > 1 else 1
        if par.vpp > 1:     # never more than the step's micro-batches (all chunks in flight)
            inflight = min(inflight * (1 + (par.pp - 1) / (par.pp * par.vpp)),
                           par.micro_batches)
        acts = act_one * max(inflight, 1) + working
        if stage == par.pp - 1:   # the cross-entropy over the logits at its peak
            buffers += _loss_bytes(m, par, mb_ * s / par.cp, acct)
        if par.pp > 1:
            buffers += 2 * mb_ * s / par.cp * m.hidden * eb
    else:
        acts = m.activation_bytes_per_sample * par.micro_batch * eb / 2
    allocated = weights + grads + opt + acts + buffers
    reserve = reserve_GiB() * GiB + FRAGMENTATION.value * allocated
    total = allocated + reserve
    return MemoryBreakdown(weights / GiB, grads / GiB, opt / GiB, acts / GiB, buffers / GiB,
                           reserve / GiB, total / GiB, capacity_GiB(spec.name), spec.name,
                           "first" if stage == 0 else "last")


def _loss_bytes(m: ModelSpec, par: Parallel, tokens: float, acct: Accounting) -> float:
    """The cross-entropy's buffers at their peak (:data:`LOSS_BYTES`): over the vocabulary
    shard of this tensor-parallel rank, or over the whole vocabulary where the logits are
    gathered to every rank (``loss_parallel`` false)."""
    kind = acct.cross_entropy
    split = par.tp if acct.loss_parallel else 1
    if kind == "eager" and split > 1:
        kind = "eager_tp"
    return float(LOSS_BYTES.value[kind] * tokens * m.vocab / split)


def _gathered_bytes(m: ModelSpec, par: Parallel, params: float, n_layers: int, wb: int,
                    stage: int) -> float:
    """Gathered 16-bit weights under ZeRO-3 / FSDP outside a pipeline: the layer in use and
    the one prefetched; with PyTorch FSDP also the root module's parameters (the embedding,
    final norm and output layer, which FSDP2 does not reshard after forward: the root's
    ``post_forward_mesh_info`` is None, torch/distributed/_composable/fsdp/_fsdp_state.py)."""
    root = m.embedding_params() / par.tp if par.fsdp and par.pp == 1 and stage == 0 else 0.0
    return wb * (2 * params / max(n_layers, 1) + root)


def capacity_GiB(gpu: str) -> float:
    """Memory of a GPU in GiB. HBM parts are built in binary sizes (an "80 GB" H100 has
    80 GiB, nvidia-smi shows 81,559 MiB), so the catalog's figure is taken as GiB."""
    return float(gpu_spec(gpu).memory_GB)


#: The cheap changes :func:`fit_hint` tries on a layout that does not fit, in order of what
#: they cost in step time (ZeRO-2 shards gradients at ZeRO-1's traffic; ZeRO-3 gathers the
#: weights each step; selective recomputation repeats attention, full repeats the forward).
FIT_TRIES: tuple[dict, ...] = (
    {"zero": 2}, {"recompute": "selective"}, {"zero": 2, "recompute": "selective"},
    {"zero": 3}, {"zero": 3, "recompute": "selective"}, {"recompute": "full"},
    {"zero": 2, "recompute": "full"}, {"zero": 3, "recompute": "full"})


def fit_hint(model: ModelSpec | str, par: Parallel, seq_len: int, gpu: str, *,
             precision: str = "bf16", flash: bool = True, gpus_per_node: int = 8,
             **accounting: Any) -> str:
    """What would make a layout that does not fit fit, on the same GPUs: the first of
    :data:`FIT_TRIES` that fits (with ``--micro-batch 1`` when the micro-batch is larger and
    that is needed), else ``--search`` (other tp, pp and cp). ``accounting``: the framework's
    :func:`training_memory` keywords (``sac``, ``cross_entropy``, ...), kept for every try.

    >>> from gpufabric.workloads.parallel import Parallel
    >>> fit_hint("llama3-8b", Parallel(dp=8, zero=1), 8192, "H100-SXM")
    'fits with --zero 2 (77.9 GiB)'
    >>> fit_hint("llama3-405b", Parallel(dp=8, zero=1), 8192, "H100-SXM")
    'no --zero, --recompute or --micro-batch setting fits this layout; try --search'
    """
    from dataclasses import replace
    micro: list[dict] = [{}] + ([{"micro_batch": 1}] if par.micro_batch > 1 else [])
    for mb in micro:
        for t in ({},) + FIT_TRIES if mb else FIT_TRIES:
            change = {**t, **mb}
            if par.fsdp and "zero" in change:      # --fsdp sets the sharding
                continue
            if all(getattr(par, k) == v for k, v in change.items()) or any(
                    k == "zero" and v < par.zero for k, v in change.items()):
                continue
            mem = training_memory(model, replace(par, **change), seq_len, gpu,
                                  precision=precision, flash=flash, gpus_per_node=gpus_per_node,
                                  **accounting)
            if mem.fits:
                flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in change.items())
                return f"fits with {flags} ({mem.total_GiB:.1f} GiB)"
    return "no --zero, --recompute or --micro-batch setting fits this layout; try --search"


def check_fits(mem: MemoryBreakdown, hint: str = "") -> None:
    """Raise :class:`InputError` ("needs 92.1 GiB per GPU, H100-SXM has 80") when it does not
    fit; ``hint`` (:func:`fit_hint`) follows after a semicolon.

    >>> from gpufabric.workloads.parallel import Parallel
    >>> check_fits(training_memory("llama3-70b", Parallel(dp=8), 8192, "H100-SXM"))
    Traceback (most recent call last):
    ...
    gpufabric.errors.InputError: memory: needs 1436.9 GiB per GPU, H100-SXM has 80
    """
    if not mem.fits:
        cap = f"{mem.capacity_GiB:g}"
        raise InputError(f"needs {mem.total_GiB:.1f} GiB per GPU, {mem.gpu} has {cap}"
                         + (f"; {hint}" if hint else ""), field="memory")


def kv_cache_bytes_per_token(model: ModelSpec | str, *, tp: int = 1, elem_bytes: float = 2
                             ) -> float:
    """KV-cache bytes one token adds on one GPU (all layers; MLA caches the latent).

    >>> kv_cache_bytes_per_token("llama3-70b")          # 80 x 2 x 8 x 128 x 2 B
    327680.0
    >>> kv_cache_bytes_per_token("deepseek-v3")         # 61 x (512 + 64) x 2 B
    70272.0
    """
    m = load_model(model)
    if m.attention == "mla":
        per = m.kv_lora_rank + m.qk_rope_head_dim
    else:
        per = 2 * max(m.kv_heads // tp, 1) * m.head_dim
    return float(m.layers * per * elem_bytes)


def weight_bytes(model: ModelSpec | str, *, tp: int = 1, pp: int = 1, ep: int = 1,
                 elem_bytes: float = 2) -> float:
    """Weight bytes on the most loaded GPU of a TP x PP x EP layout (inference: no
    gradients or optimizer). As the serving engines lay experts out: with expert parallelism
    each expert whole on one of the ``ep`` GPUs, without it each split over the ``tp`` GPUs.

    >>> round(weight_bytes("llama3-70b", tp=8) / 2**30, 2)
    16.43
    """
    m = load_model(model)
    par = Parallel(tp=tp, pp=pp, ep=ep, dp=ep, etp=1 if ep > 1 else 0)
    return max(sum(params_per_gpu(m, par, st)) for st in sorted({0, pp - 1})) * elem_bytes


__all__ = ["MemoryBreakdown", "training_memory", "check_fits", "capacity_GiB",
           "params_per_gpu", "edge_params", "expert_shard", "stage_layers",
           "block_activation_bytes", "op_sac_block_bytes",
           "kv_cache_bytes_per_token", "weight_bytes", "reserve_GiB", "CUDA_CONTEXT_GiB",
           "WORKSPACE_GiB", "FRAGMENTATION", "LOSS_BYTES", "Accounting", "model_states",
           "MEMORY_REPORTED", "MEMORY_STAGES", "CROSS_ENTROPY", "accounting_of"]
