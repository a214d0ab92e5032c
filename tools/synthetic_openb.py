"""Write src/gpufabric/scheduler/data/synthetic_openb.yaml: the statistics the synthetic
openb-like workload is drawn from, computed from the real openb files.

    python tools/synthetic_openb.py ../shared/traces/openb

Only aggregates leave the trace: how many pods ask each request shape (CPU, GPUs, GPU share)
with the median memory of that shape, the QoS mix, quantiles of run time, the span of creation
times, and how many nodes have each configuration (model, GPUs, CPU, memory).
"""

from __future__ import annotations

import csv
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import yaml

from gpufabric.downloads import OPENB_COMMIT, OPENB_DIR, OPENB_FILES, OPENB_REPO


def main(src: Path) -> None:
    pods = list(csv.DictReader(open(src / "openb_pod_list_default.csv", newline="")))
    shapes: dict[tuple, list[int]] = defaultdict(list)
    for p in pods:
        key = (int(p["cpu_milli"]), int(p["num_gpu"]),
               int(p["gpu_milli"]) if int(p["num_gpu"]) else 0)
        shapes[key].append(int(p["memory_mib"]))
    rows = sorted(((k[0], int(statistics.median(m)), k[1], k[2], len(m))
                   for k, m in shapes.items()), key=lambda r: (-r[4], r))
    dur = []
    for p in pods:
        c = float(p["creation_time"])
        s = float(p["scheduled_time"] or c)
        d = float(p["deletion_time"] or c)
        dur.append(max(0.0, d - max(s, c)))
    created = [float(p["creation_time"]) for p in pods]
    nodes = list(csv.DictReader(open(src / "openb_node_list_all_node.csv", newline="")))
    groups = Counter((n["model"], int(n["gpu"]), int(n["cpu_milli"]), int(n["memory_mib"]))
                     for n in nodes)
    gpu_groups = sorted(([m, g, c, mem, k] for (m, g, c, mem), k in groups.items() if g),
                        key=lambda r: (-r[4], r))
    cpu_groups = sorted(([c, mem, k] for (m, g, c, mem), k in groups.items() if not g),
                        key=lambda r: (-r[2], r))
    out = {
        "source": {
            "repo": OPENB_REPO, "commit": OPENB_COMMIT,
            "files": [f"{OPENB_DIR}/openb_pod_list_default.csv",
                      f"{OPENB_DIR}/openb_node_list_all_node.csv"],
            "sha256": {k: OPENB_FILES[k] for k in ("openb_pod_list_default.csv",
                                                   "openb_node_list_all_node.csv")},
            "computed_by": "tools/synthetic_openb.py",
        },
        "pods": len(pods),
        "qos": dict(Counter(p["qos"] for p in pods).most_common()),
        "shapes_columns": ["cpu_milli", "memory_mib_median", "num_gpu", "gpu_milli", "pods"],
        "shapes": [list(r) for r in rows],
        "duration_s_percentiles": [[q, round(float(np.percentile(dur, q)), 1)]
                                   for q in list(range(0, 95, 5)) + list(range(95, 101))],
        "creation_span_s": max(created) - min(created),
        "gpu_nodes_columns": ["model", "gpus", "cpu_milli", "memory_mib", "nodes"],
        "gpu_nodes": gpu_groups,
        "cpu_nodes_columns": ["cpu_milli", "memory_mib", "nodes"],
        "cpu_nodes": cpu_groups,
    }
    dest = Path(__file__).resolve().parents[1] / "src/gpufabric/scheduler/data"
    text = yaml.safe_dump(out, sort_keys=False, default_flow_style=None, width=100)
    (dest / "synthetic_openb.yaml").write_text(
        "# Statistics of the openb trace (alibaba/clusterdata, FGD paper, ATC'23) that the\n"
        "# synthetic openb-like workload is drawn from; written by tools/synthetic_openb.py.\n"
        + text)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "../shared/traces/openb"))
