"""Speculative decoding and multi-token prediction (MTP): a drafter proposes ``k`` tokens, the
target model verifies them in one pass.

One decode step of a sequence then

- runs the **drafter** ``k`` times, one token each: an MTP module (DeepSeek-V3/R1: one
  transformer layer of the model's shape with its projection of the embedding and hidden state,
  sharing the output head), an EAGLE-style head (one decoder layer of the target's width and its
  projection, sharing the output head) or a separate draft model (``k`` decode steps of it);
- **verifies** ``k + 1`` tokens with the target model: a decode step whose GEMMs and logits see
  ``batch x (k + 1)`` rows while attention reads each sequence's KV cache once (its FLOPs
  ``k + 1`` times);
- keeps ``1 + sum_i prod_{j<=i} a_j`` tokens on average (:func:`tokens_per_step`), ``a_j`` the
  acceptance of draft position ``j`` given the ones before it were accepted; the KV cache grows
  by those tokens.

:class:`SpecStep` is that step as a step cost for the serving simulator: it carries
``tokens_per_step``, the only thing the simulator's batch state reads of it (each decoding
sequence advances that many tokens per step, on average).

Acceptance depends on the model, the drafter and the text, so it is the user's to state
(``--acceptance``), or a sourced default for a method and model (:data:`DEFAULTS`).

>>> tokens_per_step([0.8], 1)
1.8
>>> round(tokens_per_step([0.9, 0.8, 0.7], 3), 4)      # 1 + 0.9 + 0.72 + 0.504
3.124
>>> round(tokens_per_step(DEFAULTS["mtp", "deepseek-v3"].acceptance, 3), 4)
2.82
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from gpufabric.errors import InputError, check_range
from gpufabric.workloads.inference.itertime import Breakdown, ServeLayout, StepModel

#: The speculative methods ``serve --spec`` takes.
METHODS = ("mtp", "eagle", "draft")
#: Most draft tokens per step (engines run 1-8; EAGLE trees go wider, chains do not).
MAX_SPEC_TOKENS = 16


def tokens_per_step(acceptance, k: int) -> float:
    """Expected tokens one verify step keeps: ``1 + sum_{i=1..k} prod_{j<=i} a_j``.

    ``acceptance``: one rate for every position (a list of one) or one per position (the
    acceptance of position ``i`` given that the ones before it were accepted).

    >>> tokens_per_step([0.85], 1), tokens_per_step([0.5], 2)
    (1.85, 1.75)
    >>> tokens_per_step([1.0, 1.0], 2), tokens_per_step([0.0, 0.9], 2)
    (3.0, 1.0)
    """
    a = list(acceptance)
    rates = a * k if len(a) == 1 else a[:k]
    out, p = 1.0, 1.0
    for r in rates:
        p *= float(r)
        out += p
    return out


@dataclass(frozen=True)
class Default:
    """A sourced acceptance for a method and model: per-position rates, where they come from."""

    acceptance: tuple[float, ...]
    source: str


def _chain(lengths: list[float]) -> tuple[float, ...]:
    """Per-position acceptance from the mean accepted lengths of runs with 1, 2, ... draft
    tokens: position ``i`` adds ``L_i - L_{i-1}`` = prod_{j<=i} a_j."""
    p = [b - a for a, b in zip([1.0] + lengths[:-1], lengths, strict=True)]
    return tuple(round(x / y, 4) for x, y in zip(p, [1.0] + p[:-1], strict=True))


#: Sourced acceptance per (method, model). DeepSeek-R1's MTP with 1 to 5 chained draft tokens
#: (strict top-1 acceptance, TensorRT-LLM, ISL/OSL 1k/2k of its real dataset): mean accepted
#: lengths 1.92, 2.58, 2.82, 2.99, 3.01, from which the per-position rates follow
#: (:func:`_chain`); the first, 0.92, is near the DeepSeek-V3 report's 85-90% for the second
#: token.
DEFAULTS: dict[tuple[str, str], Default] = {
    ("mtp", "deepseek-v3"): Default(
        _chain([1.92, 2.58, 2.82, 2.99, 3.01]),
        "NVIDIA/TensorRT-LLM docs/source/blogs/tech_blog/blog1_Pushing_Latency_Boundaries_"
        "Optimizing_DeepSeek-R1_Performance_on_NVIDIA_B200_GPUs.md (commit 5685103), table "
        "'Autoregressive MTP Layers': acceptance length 1.92/2.58/2.82/2.99/3.01 with MTP 1-5, "
        "DeepSeek-R1, 8x B200; DeepSeek-V3 Technical Report (arXiv 2412.19437) section 5.4.3: "
        "second-token acceptance 85-90%"),
}

#: Models that ship an MTP module (DeepSeek-V3 Technical Report, section 2.2; DeepSeek-R1
#: shares the architecture).
MTP_MODELS = ("deepseek-v3",)


@dataclass(frozen=True)
class Speculative:
    """A speculative decoding setting: method, draft tokens per step, per-position acceptance,
    the draft model (method ``draft``) and where the acceptance comes from."""

    method: str
    tokens: int
    acceptance: tuple[float, ...]
    draft_model: str | None = None
    source: str = "stated (--acceptance)"

    @property
    def tokens_per_step(self) -> float:
        return tokens_per_step(self.acceptance, self.tokens)


def parse_acceptance(text: str | float | list | tuple | None,
                     field: str = "--acceptance") -> tuple[float, ...] | None:
    """Rates from ``0.8`` or ``"0.9,0.8,0.7"`` (or a list), each from 0 to 1.

    >>> parse_acceptance("0.9, 0.8,0.7")
    (0.9, 0.8, 0.7)
    >>> parse_acceptance("1.2")
    Traceback (most recent call last):
    ...
    gpufabric.errors.InputError: --acceptance: must be a number from 0 to 1, got 1.2
    """
    if text is None:
        return None
    if isinstance(text, str):
        parts = [x.strip() for x in text.split(",")]
        vals: list = []
        for x in parts:
            try:
                vals.append(float(x))
            except ValueError:
                raise InputError(f"expected a rate from 0 to 1 or a comma-separated list of "
                                 f"them, got {text!r}", field=field) from None
    elif isinstance(text, (list, tuple)):
        vals = list(text)
    else:
        vals = [text]
    if not vals:
        raise InputError("expected at least one rate", field=field)
    return tuple(float(check_range(v, 0, 1, field=field)) for v in vals)


def resolve(method: str, tokens: int | None, acceptance, model: str,
            draft_model: str | None = None, field: str = "--spec") -> Speculative:
    """The setting ``serve --spec`` runs: the flags checked, the acceptance stated or the sourced
    default for the method and model (else a one-line error asking for ``--acceptance``).

    >>> s = resolve("mtp", 3, None, "deepseek-r1")
    >>> s.tokens, round(s.tokens_per_step, 2)
    (3, 2.82)
    >>> resolve("eagle", 2, "0.8", "llama3-8b").acceptance
    (0.8, 0.8)
    """
    from gpufabric.workloads.models import load_model
    if method not in METHODS:
        raise InputError(f"unknown method {method!r}; allowed: {', '.join(METHODS)}",
                         field=field)
    acc = parse_acceptance(acceptance, "--acceptance") if not isinstance(acceptance, tuple) \
        else tuple(float(check_range(v, 0, 1, field="--acceptance")) for v in acceptance)
    if tokens is None:
        tokens = len(acc) if acc and len(acc) > 1 else (1 if method == "mtp" else None)
    if tokens is None:
        raise InputError(f"--spec {method} needs the draft length (--spec-tokens)",
                         field="--spec-tokens")
    check_range(tokens, 1, MAX_SPEC_TOKENS, integer=True, field="--spec-tokens")
    name = load_model(model).name
    if method == "mtp" and name not in MTP_MODELS:
        raise InputError(f"{name} has no MTP module (models with one: "
                         f"{', '.join(MTP_MODELS)}); use --spec eagle or --spec draft",
                         field=field)
    if method == "draft":
        if not draft_model:
            raise InputError("--spec draft needs --draft-model NAME", field="--draft-model")
        load_model(draft_model)
    elif draft_model:
        raise InputError(f"applies only with --spec draft, not --spec {method}",
                         field="--draft-model")
    if acc is not None:
        if len(acc) not in (1, tokens):
            raise InputError(f"give one rate or {tokens} (one per draft position), got "
                             f"{len(acc)}", field="--acceptance")
        return Speculative(method, int(tokens), acc if len(acc) > 1 else acc * tokens,
                           draft_model)
    d = DEFAULTS.get((method, name))
    if d is None or len(d.acceptance) < tokens:
        have = f" (the sourced default covers {len(d.acceptance)} draft tokens)" if d else ""
        raise InputError(f"no sourced acceptance for --spec {method} on {name}{have}: state "
                         "it with --acceptance (one rate or one per draft position)",
                         field="--acceptance")
    return Speculative(method, int(tokens), d.acceptance[:tokens], None, d.source)


@dataclass
class SpecBreakdown(Breakdown):
    """A :class:`Breakdown` with the drafter's share of the step."""

    draft_s: float = 0.0


class SpecStep:
    """A speculative decode step over a target :class:`StepModel`: the same step-cost callable
    ``(p_tok, p_attn, p_ctx, d_n, d_ctx) -> seconds``, where ``d_n`` sequences each verify
    ``k + 1`` tokens after the drafter's ``k`` passes; ``tokens_per_step`` tokens are kept per
    sequence and step. Other attributes are the target's (its memory, profile, model).

    The drafter's weights and its KV cache come out of the target's KV cache (an MTP or
    EAGLE layer: one layer's weights and KV; a draft model: its own, on the same GPUs).

    >>> from gpufabric.topology.build import from_spec
    >>> topo = from_spec({"gpu": "H100-SXM", "gpus_per_node": 8})
    >>> sm = StepModel("llama3-8b", topo, ServeLayout(tp=1))
    >>> sp = SpecStep(sm, resolve("eagle", 3, "0.8", "llama3-8b"))
    >>> round(sp.tokens_per_step, 3)
    2.952
    >>> one, step = float(sm(0, 0, 0, 1, 1000)), float(sp(0, 0, 0, 1, 1000))
    >>> one < step < 2 * one            # a verify step costs more, less than two steps
    True
    """

    def __init__(self, target: StepModel, spec: Speculative):
        self.target, self.spec = target, spec
        self.tokens_per_step = spec.tokens_per_step
        t = target
        if "_fixed" not in t.__dict__:
            t._fuse()
        m = t.model
        self.k = k = spec.tokens
        g = t._grid
        self._dec_c = m.layers * max((k + 1) * t._dec_flops_tok * t._attn_flops_s,
                                     t._kv_layer_bytes * t._hbm_s)
        self.draft_sm: StepModel | None = None
        if spec.method == "draft":
            assert spec.draft_model
            lay = ServeLayout(tp=t.layout.attn_tp)
            try:
                self.draft_sm = StepModel(spec.draft_model, t.topo, lay,
                                          precision=t.precision, kv_dtype=t.kv_dtype,
                                          engine=t.engine, max_tokens=t.max_tokens)
            except InputError:        # heads the TP does not divide: one GPU's copy
                self.draft_sm = StepModel(spec.draft_model, t.topo, ServeLayout(),
                                          precision=t.precision, kv_dtype=t.kv_dtype,
                                          engine=t.engine, max_tokens=t.max_tokens)
            d = self.draft_sm
            self.draft_weights_bytes = d.weights_bytes
            self.draft_kv_bytes_per_token = d.kv_bytes_per_token
        else:
            # one layer of the target's shape (MTP: an MoE layer where the model's are; an
            # EAGLE head: a dense one) with its 2h -> h projection; the output head is shared
            moe = spec.method == "mtp" and m.moe_layers > 0
            share = 1.0 / m.layers
            proj = [t._linear("draft_proj", int(T), m.hidden, 2 * m.hidden) for T in g]
            lay_g = [t._layer_gemms(int(T), moe) for T in g]
            comm = (t._tp_comm + t._ep_comm) * share if moe else t._tp_comm * share
            self._draft_fixed = (np.array([a[0] + max(b) for a, b in
                                           zip(lay_g, proj, strict=True)])
                                 + t._logit + comm + t._elem * share)
            self._draft_ctx = t._c_dctx / m.layers
            self._draft_pair = t._c_pair / m.layers
            self._draft_pctx = t._c_pctx / m.layers
            self.draft_weights_bytes = t.weights_bytes * share + \
                2 * m.hidden * m.hidden * t.wb / t.layout.tp
            self.draft_kv_bytes_per_token = t.kv_bytes_per_token * share
        # the drafter's weights and KV come out of the target's KV cache
        per_block = (t.kv_bytes_per_token + self.draft_kv_bytes_per_token) * t.block_size
        free = t.kv_bytes_free - self.draft_weights_bytes
        self.kv_blocks = int(free // per_block) if free > 0 else 0
        if self.kv_blocks < 1:
            raise InputError(f"no room for a KV cache once the drafter's weights "
                             f"({self.draft_weights_bytes / 2**30:.1f} GiB per GPU) are loaded",
                             field="--spec")

    def __getattr__(self, name: str):
        if name in ("target", "spec"):          # not yet set (copying): no recursion
            raise AttributeError(name)
        return getattr(self.target, name)

    # -- costs -----------------------------------------------------------------------------
    def verify(self, p_tok, p_attn, p_ctx, d_n, d_ctx):
        """The target's pass: prefill chunks plus ``k + 1`` tokens per decoding sequence."""
        t, k = self.target, self.k
        rows = np.asarray(d_n, dtype=np.float64) * (k + 1)
        T = np.asarray(p_tok, dtype=np.float64) + rows
        nl = rows + (np.asarray(p_tok) > 0)
        return (np.interp(T, t._grid, t._fixed) + np.interp(nl, t._grid, t._logit)
                + np.maximum(t._c_pair * np.asarray(p_attn, dtype=np.float64),
                             t._c_pctx * np.asarray(p_ctx, dtype=np.float64))
                + self._dec_c * np.asarray(d_ctx, dtype=np.float64))

    def draft(self, p_tok, p_attn, p_ctx, d_n, d_ctx):
        """The drafter: ``k`` one-token passes per decoding sequence, and its pass over the
        prefill chunks (an MTP or EAGLE layer fills its own KV cache; so does a draft model)."""
        k = self.k
        d_n = np.asarray(d_n, dtype=np.float64)
        p_tok = np.asarray(p_tok, dtype=np.float64)
        if self.draft_sm is not None:
            d = self.draft_sm
            dec = k * (np.asarray(d(0, 0, 0, d_n, d_ctx)) - d.overhead_s)
            pre = np.asarray(d(p_tok, p_attn, p_ctx, 0, 0)) - d.overhead_s
            return np.where(d_n > 0, dec, 0.0) + np.where(p_tok > 0, pre, 0.0)
        g, f = self.target._grid, self._draft_fixed
        dec = k * (np.interp(d_n, g, f) + self._draft_ctx * np.asarray(d_ctx, np.float64))
        pre = np.interp(p_tok, g, f) + np.maximum(
            self._draft_pair * np.asarray(p_attn, np.float64),
            self._draft_pctx * np.asarray(p_ctx, np.float64))
        return np.where(d_n > 0, dec, 0.0) + np.where(p_tok > 0, pre, 0.0)

    def __call__(self, p_tok, p_attn, p_ctx, d_n, d_ctx):
        out = self.verify(p_tok, p_attn, p_ctx, d_n, d_ctx) + \
            self.draft(p_tok, p_attn, p_ctx, d_n, d_ctx)
        return float(out) if np.ndim(out) == 0 else out

    def decode_line(self, d_n: int) -> tuple[float, float]:
        """A decode-only step of ``d_n`` sequences reading ``d_ctx`` KV tokens costs
        ``a + b * d_ctx``: (a, b)."""
        a = float(self(0, 0, 0, d_n, 0))
        return a, float(self(0, 0, 0, d_n, 1)) - a

    def draft_share(self, d_n: float, d_ctx: float) -> float:
        """The drafter's share of a decode step of ``d_n`` sequences reading ``d_ctx``."""
        dr = float(self.draft(0, 0, 0, d_n, d_ctx))
        return dr / (dr + float(self.verify(0, 0, 0, d_n, d_ctx)))

    def breakdown(self, p_tok: float, p_attn: float, p_ctx: float, d_n: float,
                  d_ctx: float) -> SpecBreakdown:
        """One step's seconds by cause: the target's verify pass (its parts at ``k + 1`` rows
        per sequence) and the drafter."""
        k = self.k
        parts = {n: float(v) for n, v in
                 self.target.parts(p_tok, p_attn, p_ctx, d_n * (k + 1), d_ctx).items()}
        # attention reads the KV once per sequence (the parts counted it k + 1 times where
        # memory-bound): the verify pass's own figure
        t = self.target
        L = t.model.layers
        pre = float(L * max(p_attn * t._pre_flops_pair * t._attn_flops_s,
                            p_ctx * t._kv_layer_bytes * t._hbm_s))
        parts["attention_s"] = pre + self._dec_c * d_ctx
        return SpecBreakdown(**parts, draft_s=float(self.draft(p_tok, p_attn, p_ctx, d_n,
                                                              d_ctx)))

    def memory(self) -> dict:
        out = self.target.memory()
        out.update({"draft_weights_GB": self.draft_weights_bytes / 1e9,
                    "kv_bytes_per_token": self.target.kv_bytes_per_token
                    + self.draft_kv_bytes_per_token,
                    "kv_blocks": self.kv_blocks,
                    "kv_tokens": self.kv_blocks * self.target.block_size})
        return out

    def max_concurrency(self, isl: int, osl: int) -> int:
        per = -(-(isl + osl) // self.target.block_size)
        return int(self.kv_blocks // per)

    def summary(self, d_n: float, d_ctx: float) -> dict:
        """What ``serve`` prints of the setting (the drafter's share at this batch)."""
        s = self.spec
        return {**asdict(s), "acceptance": list(s.acceptance),
                "tokens_per_step": self.tokens_per_step,
                "draft_share": self.draft_share(d_n, d_ctx)}

