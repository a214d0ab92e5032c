"""Scheduling policies: how an engine forms each iteration's batch from the shared batch state.

The simulator's :class:`~gpufabric.workloads.inference.simulator.BatchState` holds what every
engine has (the waiting queue, the running batch, the KV blocks, the clock) and the phases
every engine's scheduler is built of: reserve a block for each decode (preempting the newest
requests when none is left), continue the running requests' prefill chunks, admit waiting
requests while the budget, the batch limit and the KV cache allow. A policy orders those
phases as its engine does; an engine profile names its policy (``scheduler.order``) with the
source, so a new engine adds a profile and at most one policy, never a branch in the state.

- :class:`DecodeFirst`: every running request decodes each iteration, and the token budget
  left goes to prefill chunks in the same iteration (vLLM V1 and V0 with chunked prefill,
  TensorRT-LLM's in-flight batching, LMDeploy TurboMind, llama.cpp's server).
- :class:`PrefillFirst`: an iteration that can admit a waiting request (or continue a running
  request's prefill) is a prefill-only iteration, the decodes waiting for it; otherwise all
  running requests decode (vLLM V0's default scheduler without chunked prefill, SGLang's
  scheduler, which runs a new prefill batch before the decode batch when it can form one).
"""

from __future__ import annotations

from typing import Any, Protocol


class Policy(Protocol):
    name: str

    def form(self, state: Any) -> Any:
        """The next iteration's batch (an ``Iteration``) from ``state``'s phases."""


class DecodeFirst:
    name = "decode-first"

    def form(self, state: Any) -> Any:
        it = state.reserve_decode()
        state.prefill_running(it)
        state.admit(it)
        return it


class PrefillFirst:
    name = "prefill-first"

    def form(self, state: Any) -> Any:
        if state.waiting or state.prefilling():
            it = state.prefill_only()
            state.prefill_running(it)
            state.admit(it)
            if it.chunks or it.adm:
                return it
        return _DECODE_FIRST.form(state)     # nothing to prefill: the decodes run


_DECODE_FIRST = DecodeFirst()
POLICIES: dict[str, Policy] = {p.name: p for p in (_DECODE_FIRST, PrefillFirst())}


def policy(name: str) -> Policy:
    """The policy an engine profile or a scheduler configuration names."""
    return POLICIES[name]
