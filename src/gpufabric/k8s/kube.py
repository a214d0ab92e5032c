"""The API server, through the official Kubernetes Python client (``pip install gpufabric[k8s]``).

:class:`KubeSource` lists Nodes and Pods for :meth:`Extender.sync
<gpufabric.k8s.extender.Extender.sync>` and creates Bindings for the extender's bind verb
(annotating the pod with the GPUs chosen, ``gpufabric.dev/gpu-index``, first). Responses are read
as raw JSON (``_preload_content=False``) and parsed by :mod:`gpufabric.k8s.objects`, the same
reader as the extender's requests.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from gpufabric.errors import InputError
from gpufabric.k8s.objects import GPU_INDEX_ANNOTATION, NodeInfo, PodInfo, parse_node, parse_pod

#: Pod phases whose pods hold their node's resources.
ACTIVE_PHASES = ("Pending", "Running", "Unknown")


class KubeSource:
    """Nodes, pods and bindings from an API server.

    Parameters
    ----------
    kubeconfig : str
        A kubeconfig path, or ``in-cluster`` for the service account of the pod it runs in.
    api : object, optional
        A ``CoreV1Api``-like object (tests pass a fake); default: built from ``kubeconfig``.
    """

    def __init__(self, kubeconfig: str, api: Any = None):
        if api is None:
            try:
                from kubernetes import client, config
            except ImportError:
                raise InputError("reading the cluster needs the kubernetes package: "
                                 "pip install 'gpufabric[k8s]'", field="--kubeconfig") from None
            try:
                if kubeconfig == "in-cluster":
                    config.load_incluster_config()
                else:
                    config.load_kube_config(config_file=kubeconfig)
            except Exception as exc:
                raise InputError(f"cannot load: {exc}", file=kubeconfig,
                                 field="--kubeconfig") from None
            api = client.CoreV1Api()
        self.api = api

    @staticmethod
    def _json(resp: Any) -> Any:
        data = getattr(resp, "data", resp)
        return json.loads(data) if isinstance(data, (bytes, str)) else data

    def nodes(self) -> list[NodeInfo]:
        out = []
        for k, item in enumerate(self._json(self.api.list_node(_preload_content=False))
                                  .get("items") or []):
            try:
                out.append(parse_node(item, f"nodes[{k}]"))
            except InputError as exc:     # one odd node must not stop the extender
                print(f"gpufabric: skipping a node: {exc}", file=sys.stderr)
        return out

    def pods(self) -> list[PodInfo]:
        data = self._json(self.api.list_pod_for_all_namespaces(
            field_selector="spec.nodeName!=", _preload_content=False))
        out = []
        for k, item in enumerate(data.get("items") or []):
            phase = ((item.get("status") or {}).get("phase")) if isinstance(item, dict) else None
            if phase not in ACTIVE_PHASES:
                continue
            try:
                out.append(parse_pod(item, f"pods[{k}]"))
            except InputError as exc:
                print(f"gpufabric: skipping a pod: {exc}", file=sys.stderr)
        return out

    def pod(self, namespace: str, name: str) -> PodInfo:
        return parse_pod(self._json(self.api.read_namespaced_pod(name, namespace,
                                                                 _preload_content=False)))

    def bind(self, pod: PodInfo, node: str, gpus: tuple[int, ...]) -> None:
        """Annotate the pod with its GPUs, then create its Binding to ``node``."""
        if gpus:
            self.api.patch_namespaced_pod(pod.name, pod.namespace, {"metadata": {
                "annotations": {GPU_INDEX_ANNOTATION: "-".join(str(g) for g in gpus)}}})
        body = {"apiVersion": "v1", "kind": "Binding",
                "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        self.api.create_namespaced_binding(pod.namespace, body, _preload_content=False)
