"""Kubernetes manifests for a serving design: vLLM or SGLang, the layout's real launch flags.

A design (``gpufabric recommend``'s: a layout, instances, GPUs per instance, the load's
lengths, speculative decoding, a shared prefix) becomes the objects that run it:

- an instance inside one server: a ``Deployment`` of ``instances`` pods, each asking for the
  instance's GPUs (``nvidia.com/gpu``), and a ``Service`` over them;
- an instance across servers: a ``LeaderWorkerSet`` (kubernetes-sigs/lws) of ``instances``
  groups, each of one pod per server (the leader serves the API; the workers join it), and a
  ``Service`` over the leaders.

Every flag name comes from ``k8s/data/serving_engines.yaml``, which cites the engine's
documentation at a version; the values come from the design: tensor parallel for a dense
layout; attention data-parallel with expert parallel for a MoE one (vLLM: ``--data-parallel-size``
with ``--enable-expert-parallel``; SGLang: ``--dp-size`` with ``--enable-dp-attention`` and
``--ep-size``); the batch limit the prediction ran with; the longest request as the context
length; an fp8 KV cache where the prediction used one; MTP, EAGLE or a draft model; prefix
caching where the load shares a prefix. :func:`manifests` returns the files as text; the CLI
writes them through :func:`gpufabric.fileio.write_output`.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

import yaml

from gpufabric.errors import InputError
from gpufabric.fileio import load_data

ENGINES = ("vllm", "sglang")
#: vLLM's data-parallel coordination port across servers (its documented example's).
VLLM_DP_RPC_PORT = 13345


@dataclass(frozen=True)
class Design:
    """What the manifests need of a design (plain data: the recommender's answer fills it)."""

    name: str                   # the objects' name (DNS-1123 label)
    engine: str                 # vllm | sglang
    weights: str                # Hugging Face repo or path the engine loads
    layout: dict[str, int]      # tp, ep, dp_attention (and pp)
    gpus_per_instance: int
    instances: int
    gpus_per_node: int
    max_num_seqs: int | None = None
    max_model_len: int | None = None
    kv_fp8: bool = False
    #: (method, draft tokens) of speculative decoding, or None
    speculative: tuple[str, int] | None = None
    draft_weights: str | None = None
    prefix_caching: bool = False
    image: str | None = None
    namespace: str | None = None
    served_name: str | None = None
    comment: str = ""           # the design in words, written at the top of each file

    @property
    def nodes(self) -> int:
        """Servers (pods) of one instance."""
        return max(1, -(-self.gpus_per_instance // self.gpus_per_node))

    @property
    def gpus_per_pod(self) -> int:
        return self.gpus_per_instance // self.nodes


def engine_table() -> dict[str, Any]:
    """The engines' images, commands and flag names, with their sources."""
    return dict(load_data("gpufabric.k8s", "data", "serving_engines.yaml"))


def dns_name(text: str) -> str:
    """A DNS-1123 label from ``text`` (lower case, ``-`` for the rest, at most 63).

    >>> dns_name("Llama3-70B_vLLM")
    'llama3-70b-vllm'
    """
    s = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].strip("-")
    return s or "serve"


def check(d: Design) -> None:
    """A design the generator can write, else one line naming the option."""
    if d.engine not in ENGINES:
        raise InputError(f"got {d.engine!r}; allowed: {', '.join(ENGINES)}", field="--engine")
    if d.gpus_per_instance % d.nodes:
        raise InputError(f"an instance of {d.gpus_per_instance} GPUs does not split evenly "
                         f"over {d.nodes} servers of {d.gpus_per_node}", field="--deploy-dir")
    if d.speculative and d.speculative[0] in ("eagle", "draft") and not d.draft_weights:
        raise InputError(f"--spec {d.speculative[0]} needs the drafter's weights for the "
                         "engine (a Hugging Face repo or path)", field="--draft-weights")
    if d.name != dns_name(d.name):
        raise InputError(f"must be a DNS-1123 label (lower case letters, digits and '-', at "
                         f"most 63), got {d.name!r}", field="--name")


def _speculative(d: Design, e: dict[str, Any], f: dict[str, str]) -> list[str]:
    if d.speculative is None:
        return []
    method, k = d.speculative
    name = e["speculative_methods"][method]
    if d.engine == "vllm":
        cfg: dict[str, Any] = {"method": name, "num_speculative_tokens": k}
        if method != "mtp":
            cfg["model"] = d.draft_weights
        return [f["speculative"], json.dumps(cfg, separators=(",", ":"))]
    out = [f["spec_algorithm"], name, f["spec_steps"], str(k), f["spec_topk"], "1",
           f["spec_draft_tokens"], str(k + 1)]
    if method != "mtp":
        out += [f["spec_draft_model"], str(d.draft_weights)]
    return out


def _layout(d: Design, f: dict[str, str]) -> list[str]:
    """The parallel layout's flags for one instance (before any multi-server flags)."""
    lay = {"tp": 1, "ep": 1, "dp_attention": 1, "pp": 1, **d.layout}
    out: list[str] = []
    moe = lay["ep"] > 1 or lay["dp_attention"] > 1
    if d.engine == "vllm":
        if moe:       # vLLM: attention DP ranks of TP 1; EP spans TP x DP
            out += [f["dp"], str(lay["dp_attention"]), f["ep"]]
            tp = lay["tp"] // lay["dp_attention"]
            if tp > 1:
                out += [f["tp"], str(tp)]
        else:
            out += [f["tp"], str(lay["tp"])]
    else:
        out += [f["tp"], str(lay["tp"])]
        if lay["dp_attention"] > 1:
            out += [f["dp"], str(lay["dp_attention"]), f["dp_attention"]]
        if lay["ep"] > 1:
            out += [f["ep"], str(lay["ep"])]
    if lay["pp"] > 1:
        out += [f["pp"], str(lay["pp"])]
    return out


def engine_args(d: Design, role: str = "single") -> list[str]:
    """The engine's command line (command and arguments) for a pod of the design: ``single``
    (an instance in one server), ``leader`` or ``worker`` (a multi-server instance, whose
    rank and leader come from LeaderWorkerSet's environment)."""
    e = engine_table()[d.engine]
    f = e["flags"]
    out = list(e["command"])
    out += [e["model_flag"], d.weights] if e["model_flag"] else [d.weights]
    out += _layout(d, f)
    if d.max_num_seqs:
        out += [f["max_num_seqs"], str(d.max_num_seqs)]
    if d.max_model_len:
        out += [f["max_model_len"], str(d.max_model_len)]
    if d.kv_fp8:
        out += [f["kv_cache_dtype"], e["kv_fp8"]]
    if d.prefix_caching and "prefix_caching" in f:
        out.append(f["prefix_caching"])
    out += _speculative(d, e, f)
    out += [f["served_model_name"], d.served_name or d.name, f["host"], "0.0.0.0",
            f["port"], str(e["port"])]
    if role != "single":
        out += _multi_node(d, e, f, role)
    return out


def _multi_node(d: Design, e: dict[str, Any], f: dict[str, str], role: str) -> list[str]:
    """A multi-server instance's flags: its servers, this pod's rank, the leader's address."""
    moe = d.layout.get("dp_attention", 1) > 1
    if d.engine == "sglang":
        return [f["nnodes"], "$(LWS_GROUP_SIZE)", f["node_rank"], "$(LWS_WORKER_INDEX)",
                f["dist_init_addr"], f"$(LWS_LEADER_ADDRESS):{e['dist_port']}"]
    if moe:           # vLLM data-parallel ranks across servers (a headless worker per server)
        out = [f["dp_local"], str(d.gpus_per_pod), f["dp_address"], "$(LWS_LEADER_ADDRESS)",
               f["dp_rpc_port"], str(VLLM_DP_RPC_PORT)]
        if role == "worker":
            out += [f["headless"], f["dp_start_rank"],
                    f"$((LWS_WORKER_INDEX * {d.gpus_per_pod}))"]
        return out
    out = [f["nnodes"], "$(LWS_GROUP_SIZE)", f["node_rank"], "$(LWS_WORKER_INDEX)",
           f["master_addr"], "$(LWS_LEADER_ADDRESS)"]
    return out + ([f["headless"]] if role == "worker" else [])


def shell_line(cmd: list[str]) -> str:
    """``cmd`` as one ``sh -c`` line: each word quoted, but a shell arithmetic ``$((...))``
    (Kubernetes expands ``$(VAR)`` before the shell runs, quoted or not).

    >>> print(shell_line(["vllm", "m", "--x", '{"a":1}', "--r", "$((LWS_WORKER_INDEX * 8))"]))
    vllm m --x '{"a":1}' --r $((LWS_WORKER_INDEX * 8))
    """
    return " ".join(w if w.startswith("$((") else shlex.quote(w) for w in cmd)


def _container(d: Design, role: str) -> dict[str, Any]:
    e = engine_table()[d.engine]
    cmd = engine_args(d, role)
    n = len(e["command"])
    c: dict[str, Any] = {"name": d.engine, "image": d.image or e["image"]}
    if role == "single":
        c.update(command=cmd[:n], args=cmd[n:])
    else:         # LWS's variables and a rank's arithmetic: through a shell, as the docs do
        c.update(command=["sh", "-c"], args=[shell_line(cmd)])
    c["env"] = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
        "name": "hf-token", "key": "token", "optional": True}}}]
    c["ports"] = [{"name": "http", "containerPort": int(e["port"])}]
    gpus = str(d.gpus_per_pod)
    c["resources"] = {"limits": {"nvidia.com/gpu": gpus}, "requests": {"nvidia.com/gpu": gpus}}
    c["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if role != "worker":
        c["readinessProbe"] = {"httpGet": {"path": "/health", "port": int(e["port"])},
                               "initialDelaySeconds": 60, "periodSeconds": 10}
    return c


def _pod(d: Design, role: str, labels: dict[str, str]) -> dict[str, Any]:
    """A pod template: the engine's container and a memory-backed /dev/shm (the engines'
    tensor-parallel workers share tensors through it)."""
    return {"metadata": {"labels": labels},
            "spec": {"containers": [_container(d, role)],
                     "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]}}


def _meta(d: Design) -> dict[str, Any]:
    m: dict[str, Any] = {"name": d.name, "labels": {"app": d.name}}
    if d.namespace:
        m["namespace"] = d.namespace
    return m


def objects(d: Design) -> dict[str, dict[str, Any]]:
    """The design's objects by file name: the workload and its Service."""
    check(d)
    port = int(engine_table()[d.engine]["port"])
    labels = {"app": d.name}
    if d.nodes == 1:
        work = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(d),
                "spec": {"replicas": d.instances, "selector": {"matchLabels": labels},
                         "template": _pod(d, "single", labels)}}
        select = labels
        fname = "deployment.yaml"
    else:
        lead = {**labels, "role": "leader"}
        work = {"apiVersion": engine_table()["lws"]["api_version"], "kind": "LeaderWorkerSet",
                "metadata": _meta(d),
                "spec": {"replicas": d.instances, "leaderWorkerTemplate": {
                    "size": d.nodes, "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": _pod(d, "leader", lead),
                    "workerTemplate": _pod(d, "worker", {**labels, "role": "worker"})}}}
        select = lead
        fname = "leaderworkerset.yaml"
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": _meta(d),
           "spec": {"selector": select, "ports": [{"name": "http", "port": port,
                                                   "targetPort": port}]}}
    return {fname: work, "service.yaml": svc}


def manifests(d: Design) -> dict[str, str]:
    """The design's manifests as YAML text by file name, each headed by the design in words
    and the sources of its flag names."""
    import textwrap
    src = engine_table()[d.engine]["source"]
    lines = [*d.comment.splitlines(), f"flag names as documented: {src}"]
    head = "".join(f"# {w}\n" for line in lines if line
                   for w in textwrap.wrap(line, 96, break_on_hyphens=False))
    return {name: head + yaml.dump(obj, Dumper=_Plain, sort_keys=False, width=100)
            for name, obj in objects(d).items()}


class _Plain(yaml.SafeDumper):
    """YAML without anchors and aliases (a label map used twice is written twice)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


__all__ = ["Design", "ENGINES", "dns_name", "engine_args", "manifests", "objects"]
