"""CLI: ``--deploy-dir`` of `recommend` and `advise`: a chosen serving design written as
Kubernetes manifests (:mod:`gpufabric.k8s.manifests`), with the options both commands take."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from gpufabric.errors import InputError

#: The options that say what the manifests run (``deploy_dir`` turns them on).
OPTIONS: dict[str, Any] = {
    "deploy_dir": typer.Option(None, "--deploy-dir", metavar="DIR",
                               help="Also write the design's Kubernetes manifests here."),
    "weights": typer.Option(None, "--weights", help="With --deploy-dir: the weights the "
                            "engine loads (a Hugging Face repo or a path)."),
    "draft_weights": typer.Option(None, "--draft-weights", help="With --deploy-dir and EAGLE "
                                  "or draft-model speculation: the drafter's weights."),
    "image": typer.Option(None, "--image", help="With --deploy-dir: the container image "
                          "(default: the engine's, in k8s/data/serving_engines.yaml)."),
    "name": typer.Option(None, "--name", help="With --deploy-dir: the objects' name."),
    "namespace": typer.Option(None, "--namespace", help="With --deploy-dir: their namespace."),
}


def check(o: dict[str, Any]) -> None:
    """--deploy-dir's needs, before any search runs: the weights, a folder (or none yet, in
    a folder that exists: it is made, its parents are not)."""
    if not o["weights"]:
        raise InputError("--deploy-dir needs the weights the engine loads (a Hugging Face "
                         "repo such as meta-llama/Llama-3.1-8B-Instruct, or a path)",
                         field="--weights")
    p = Path(o["deploy_dir"])
    if p.exists() and not p.is_dir():
        raise InputError(f"{p} exists and is not a folder", field="--deploy-dir")
    if not p.exists() and not p.absolute().parent.is_dir():   # as every output: no parents made
        raise InputError(f"directory '{p.absolute().parent}' does not exist; create it first",
                         field="--deploy-dir")


def node_gpus(gpu: str, gpus_per_node: int) -> int:
    """GPUs of one Kubernetes node in a server of ``gpus_per_node`` ``gpu`` s: the server's,
    or a rack-scale part's compute tray (a GB200 NVL72 domain is 18 hosts of 4 GPUs).

    >>> node_gpus("H100-SXM", 8), node_gpus("GB200", 72)
    (8, 4)
    """
    from gpufabric import catalog
    tray = catalog.gpu(gpu).gpus_per_tray
    return tray if tray and gpus_per_node > tray else gpus_per_node


def design(s: Any, o: dict[str, Any], *, engine: str, layout: dict[str, int],
           gpus_per_instance: int, instances: int, gpu: str, gpus_per_node: int,
           max_num_seqs: int | None, comment: str) -> Any:
    """The :class:`~gpufabric.k8s.manifests.Design` of a serving design of the scenario's
    serve workload ``s`` on servers of ``gpus_per_node`` ``gpu`` s (pods per Kubernetes node,
    :func:`node_gpus`), with the options ``o`` (weights, image, name, namespace)."""
    from gpufabric.k8s.manifests import Design, dns_name
    longest = s.isl + s.osl
    if s.dataset:
        from gpufabric.workloads.inference.datasets import get
        from gpufabric.workloads.models import load_model
        longest = get(s.dataset).max_context or int(load_model(s.model).seq_len)
    return Design(name=o["name"] or dns_name(f"{s.model}-{engine}"), engine=engine,
                  weights=o["weights"], layout=layout, gpus_per_instance=gpus_per_instance,
                  instances=instances, gpus_per_node=node_gpus(gpu, gpus_per_node),
                  max_num_seqs=max_num_seqs,
                  max_model_len=longest, kv_fp8=s.precision in ("fp8", "fp4"),
                  speculative=s.speculative[:2] if s.speculative else None,
                  draft_weights=o["draft_weights"], prefix_caching=bool(s.prefix_tokens),
                  image=o["image"], namespace=o["namespace"], served_name=s.model,
                  comment=comment)


def write(d: Any, folder: str) -> dict[str, Any]:
    """``d``'s manifests written into ``folder`` (each through the one writer): what was
    written, for the answer."""
    from gpufabric.fileio import write_output
    from gpufabric.k8s.manifests import manifests
    files = manifests(d)
    path = Path(folder)
    try:
        path.mkdir(exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {path}: {exc.strerror}", field="--deploy-dir") \
            from None
    for fname, text in files.items():
        write_output(path / fname, text, field="--deploy-dir")
    return {"dir": str(path), "files": sorted(files), "name": d.name,
            "kind": "LeaderWorkerSet" if d.nodes > 1 else "Deployment"}


def wrote(dp: dict[str, Any]) -> str:
    """The line that says what ``--deploy-dir`` wrote."""
    return f"wrote {', '.join(dp['files'])} ({dp['kind']} {dp['name']}) in {dp['dir']}"
