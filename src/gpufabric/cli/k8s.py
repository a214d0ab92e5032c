"""CLI: k8s extender, k8s device-plugin, k8s compare (see gpufabric.k8s)."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from gpufabric.cli.common import app, emit_json
from gpufabric.errors import InputError

k8s_app = typer.Typer(help="Kubernetes: a topology-aware scheduler extender and a GPU device "
                      "plugin.", no_args_is_help=True)
app.add_typer(k8s_app, name="k8s")


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise InputError(f"'{text}' is not HOST:PORT (e.g. 0.0.0.0:8888)", field="--listen")
    return host.strip("[]") or "0.0.0.0", int(port)


@k8s_app.command("extender")
def extender_cmd(
    listen: str = typer.Option("0.0.0.0:8888", "--listen", help="HOST:PORT to serve on."),
    nodes: str | None = typer.Option(
        None, "--nodes", help="Nodes known from the start: a JSON/YAML NodeList file, or what "
        "`gpufabric schedule --nodes` takes (gpu_node, a CSV, 'hgx-h100*4+cpu*2')."),
    kubeconfig: str | None = typer.Option(   # "\\[": the help's rich markup would eat "[k8s]"
        None, "--kubeconfig", help="Read Nodes and Pods from the API server and bind through "
        "it: a kubeconfig path or 'in-cluster'. Needs `pip install 'gpufabric\\[k8s]'`."),
    policy: str = typer.Option("topology-fgd", "--policy", help="Placement policy (see "
                               "`gpufabric schedule --policy`)."),
    workload: str | None = typer.Option(
        None, "--workload", help="Typical pods for fgd (a trace name or CSV); default: the "
        "pods seen so far."),
    routing: str = typer.Option("kind", "--routing", help="kind (training to GPU nodes, "
                                "services to CPU nodes) or none."),
    seed: int = typer.Option(42, "--seed", help="Seed of the policy's random tie-breaks."),
    prefix: str = typer.Option("", "--prefix", help="URL path before /<verb> (the urlPrefix "
                               "path of the scheduler config, e.g. /gpufabric/v1)."),
    sync_s: float = typer.Option(10.0, "--sync", help="With --kubeconfig: seconds to wait "
                                 "before listing Nodes or Pods again after a watch failed "
                                 "(they are watched, and listed again at once on 410 Gone)."),
    bind_lock: bool = typer.Option(False, "--bind-lock", help="With --kubeconfig: lock the "
                                   "node at bind (annotation gpufabric.dev/bind-lock) until "
                                   "gpufabric's device plugin there allocates the pod's GPUs; "
                                   "only with that plugin on the GPU nodes."),
    state: str | None = typer.Option(
        None, "--state", help="Journal every binding and gang place in this file and start "
        "from it, so a restart gives out no GPU twice (needed without --kubeconfig, where "
        "nothing else remembers them)."),
    verbose: bool = typer.Option(False, "--verbose", help="Log every request."),
) -> None:
    """Serve the scheduler-extender verbs filter, prioritize, bind, preempt over HTTP."""
    from gpufabric.k8s.extender import Extender
    from gpufabric.k8s.http import ExtenderServer
    from gpufabric.k8s.nodes import load_node_infos
    from gpufabric.scheduler.jobs import load_jobs

    host, port = _listen(listen)
    if sync_s <= 0:
        raise InputError("must be above 0", field="--sync")
    infos = load_node_infos(nodes) if nodes else []
    jobs = load_jobs(workload) if workload else None
    source = None
    if kubeconfig:
        from gpufabric.k8s.kube import KubeSource
        source = KubeSource(kubeconfig, lock=bind_lock)
    journal = _journal(state) if state else None
    ext = Extender(infos, policy, jobs, seed, routing, binder=source.bind if source else None,
                   gang_size=source.gang_size if source else None, state_file=journal)
    try:
        srv = ExtenderServer((host, port), ext, prefix, verbose)
    except OSError as exc:
        raise InputError(f"cannot listen on {host}:{port}: {exc.strerror}",
                         field="--listen") from None
    print(f"gpufabric extender: serving on http://{host}:{srv.server_address[1]}{prefix}"
          f"/<verb> ({len(infos)} nodes, policy {policy})", file=sys.stderr)
    _serve(srv, ext, source, sync_s, journal)


def _journal(state: str) -> Any:
    """The --state journal (its path checked as an output of ours)."""
    from gpufabric.fileio import check_output
    from gpufabric.k8s.statefile import StateFile
    check_output(state, field="--state")
    return StateFile(state)


def _serve(srv: Any, ext: Any, source: Any, sync_s: float, journal: Any) -> None:
    """Serve until SIGTERM or SIGINT, the API server's Nodes and Pods watched where there is
    one; then stop the watch, close the socket and the journal."""
    watcher = None
    if source is not None:
        from gpufabric.k8s.kube import KubeWatch

        def apply(got_nodes: list, got_pods: list) -> None:
            with srv.lock:
                ext.sync(got_nodes, got_pods)
        watcher = KubeWatch(source.api, apply, retry_s=sync_s)
        watcher.start()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: threading.Thread(target=srv.shutdown).start())
    try:
        srv.serve_forever()
    finally:
        if watcher is not None:
            watcher.stop()
        srv.server_close()
        if journal is not None:
            journal.close()


@k8s_app.command("device-plugin")
def device_plugin_cmd(
    socket_dir: str = typer.Option("/var/lib/kubelet/device-plugins/", "--socket-dir",
                                   help="The kubelet's device-plugins directory."),
    system: str | None = typer.Option(
        None, "--system", help="Describe the GPUs by a system (preset, spec file or k=v spec) "
        "instead of NVML; used when NVML finds no GPU."),
    resource: str = typer.Option("nvidia.com/gpu", "--resource",
                                 help="Extended resource name to register."),
    endpoint: str = typer.Option("gpufabric-gpu.sock", "--endpoint",
                                 help="Socket file name in --socket-dir."),
    kubeconfig: str | None = typer.Option(
        None, "--kubeconfig", help="Honour the GPUs the extender chose (pod annotation "
        "gpufabric.dev/gpu-index): a kubeconfig path or 'in-cluster'; needs --node-name."),
    node_name: str | None = typer.Option(None, "--node-name", envvar="NODE_NAME",
                                         help="This node's name (with --kubeconfig)."),
) -> None:
    """Serve the kubelet device-plugin API (v1beta1) with topology-aware preferred allocation."""
    from pathlib import Path

    from gpufabric.k8s.devices import DeviceSet, from_nvml, watch_health

    if not Path(socket_dir).is_dir():
        raise InputError("no such directory", file=socket_dir, field="--socket-dir")
    devices = None if system else from_nvml()
    nvml = devices is not None
    if devices is None:
        if not system:
            raise InputError("NVML is not available or finds no GPU; name the GPUs with "
                             "--system (e.g. dgx-a100)", field="--system")
        devices = DeviceSet.from_system(system)
    try:
        from gpufabric.k8s.deviceplugin import DevicePlugin
    except ImportError as exc:
        raise InputError(f"the device plugin needs gRPC ({exc.name} is not installed): "
                         "pip install 'gpufabric[k8s]'", field="k8s device-plugin") from None
    hint = None
    if kubeconfig:
        if not node_name:
            raise InputError("--kubeconfig needs the node's name (or NODE_NAME)",
                             field="--node-name")
        from gpufabric.k8s.kube import AssignedGPUs, KubeSource
        hint = AssignedGPUs(KubeSource(kubeconfig).api, node_name, devices.ids)
    try:
        plugin = DevicePlugin(devices, socket_dir, resource, endpoint, hint=hint)
    except ValueError as exc:
        raise InputError(str(exc), field="--resource") from None
    for sig in (signal.SIGTERM, signal.SIGINT):      # either: stop, close, remove the socket
        signal.signal(sig, lambda *_: plugin.stop())
    if nvml:
        threading.Thread(target=watch_health, args=(devices, plugin.stop_event),
                         daemon=True).start()
    plugin.run()


@k8s_app.command("compare")
def compare_cmd(
    systems: list[str] = typer.Argument(None, help="Systems (default: the presets with 8 GPUs "
                                        "or fewer per node)."),
    random_requests: int = typer.Option(0, "--random", help="Also this many random requests "
                                        "(free set, size) per system."),
    seed: int = typer.Option(1, "--seed", help="Seed of the random requests."),
    summary: bool = typer.Option(False, "--summary", help="Only the counts per system."),
    json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """gpufabric's preferred allocation against NVIDIA's best-effort allocator, same requests."""
    from gpufabric.k8s.compare import DEFAULT_SYSTEMS, compare_allocators, summarize

    if not 0 <= random_requests <= 10000:
        raise InputError("must be 0..10000", field="--random")
    rows = compare_allocators(systems or DEFAULT_SYSTEMS, random_requests, seed)
    if summary:
        sums = summarize(rows)
        if json:
            emit_json(sums)
            return
        t = Table(title="gpufabric vs NVIDIA best-effort: requests where each answer is better "
                  "(bottleneck GB/s, then sum over pairs)")
        for c in ("system", "requests", "gpufabric better", "best-effort better", "same",
                  "best-effort short"):
            t.add_column(c)
        for sm in sums:
            t.add_row(sm["system"], str(sm["requests"]), str(sm["gpufabric_better"]),
                      str(sm["besteffort_better"]), str(sm["same"]), str(sm["besteffort_short"]))
        Console().print(t)
        return
    if json:
        emit_json(rows)
        return
    t = Table(title="Preferred allocation: gpufabric vs NVIDIA best-effort (GB/s: bottleneck "
              "between the chosen GPUs per direction; sum: over the chosen pairs)")
    for c in ("system", "free", "size", "gpufabric", "GB/s", "sum", "best-effort", "GB/s ",
              "sum "):
        t.add_column(c)
    for r in rows:
        t.add_row(r.system, ",".join(map(str, r.free)), str(r.size),
                  ",".join(map(str, r.gpufabric)), f"{r.gpufabric_bw_GBps:g}",
                  f"{r.gpufabric_sum_GBps:g}",
                  ",".join(map(str, r.besteffort)) + (" (short)" if r.besteffort_short else ""),
                  f"{r.besteffort_bw_GBps:g}", f"{r.besteffort_sum_GBps:g}")
    Console().print(t)
