"""Where the extender's nodes come from: a NodeList file, the scheduler's NODES, or the API.

Examples
--------
>>> infos = load_node_infos("V100M32x8*2+cpu*1")
>>> [(n.name, n.gpus, n.model, n.pool) for n in infos][1:]
[('V100M32x8-0001', 8, 'V100M32', 'gpu'), ('cpu-0002', 0, '', 'cpu')]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpufabric.errors import InputError
from gpufabric.fileio import load_yaml, read_text
from gpufabric.k8s.objects import (GPU_RESOURCE, OPENB_COUNT, OPENB_MODEL, SYSTEM_ANNOTATION,
                                   NodeInfo, parse_node)
from gpufabric.scheduler.cluster import Cluster, load_nodes


def node_items(data: Any, file: str) -> list[Any]:
    """The Node objects of a NodeList, a list of Nodes, or one Node."""
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        return data["items"]
    if isinstance(data, list):
        return data
    if isinstance(data, dict) and "metadata" in data:
        return [data]
    raise InputError("expected a NodeList ({items: [...]}), a list of Nodes or a Node",
                     file=file)


def infos_from_cluster(c: Cluster) -> list[NodeInfo]:
    """The nodes of a scheduler :class:`Cluster` as the extender sees them."""
    return [NodeInfo(c.names[i], int(c.cpu[i]), int(c.mem[i]), int(c.num_gpu[i]), c.model(i),
                     c.presets.get(i, ""), 0, True) for i in range(len(c))]


def load_node_infos(nodes: str) -> list[NodeInfo]:
    """``--nodes``: a JSON/YAML file of Node objects, or anything ``gpufabric schedule --nodes``
    takes (openb node lists, a CSV, a synthetic spec).

    Raises
    ------
    InputError
        A file that is neither, or a Node that cannot be read (names the file and the field).
    """
    p = Path(nodes)
    if p.suffix.lower() in (".json", ".yaml", ".yml"):
        if p.suffix.lower() == ".json":
            text = read_text(nodes, what="a JSON NodeList")
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InputError(f"not valid JSON: {exc}", file=nodes) from None
        else:
            data = load_yaml(nodes, what="a YAML NodeList")
        out = []
        for k, item in enumerate(node_items(data, nodes)):
            try:
                out.append(parse_node(item, f"items[{k}]"))
            except InputError as exc:
                raise exc.located(file=nodes) from None
        if not out:
            raise InputError("no nodes", file=nodes)
        return out
    return infos_from_cluster(load_nodes(nodes))


def node_object(info: NodeInfo, openb: bool = True) -> dict:
    """A ``v1.Node`` (JSON) for a node row: openb labels for openb models, GFD otherwise.

    Used to turn a trace's cluster into the objects kube-scheduler would send.
    """
    labels: dict[str, str] = {"kubernetes.io/hostname": info.name}
    ann: dict[str, str] = {}
    cap = {"cpu": f"{info.cpu_milli}m", "memory": f"{info.memory_mib}Mi", "pods": "110"}
    if info.gpus:
        if openb:
            labels[OPENB_MODEL] = info.model
            cap[OPENB_COUNT] = str(info.gpus)
            cap["alibabacloud.com/gpu-milli"] = str(info.gpus * 1000)
        else:
            labels["nvidia.com/gpu.product"] = info.model
            cap[GPU_RESOURCE] = str(info.gpus)
        if info.system:
            ann[SYSTEM_ANNOTATION] = info.system
    meta: dict[str, Any] = {"name": info.name, "labels": labels}
    if ann:
        meta["annotations"] = ann
    return {"metadata": meta, "spec": {},
            "status": {"capacity": cap, "allocatable": dict(cap),
                       "conditions": [{"type": "Ready", "status": "True"}]}}
