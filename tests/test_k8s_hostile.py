"""The extender against hostile pods and clients, over real sockets on loopback.

One pod asking "-4" GPUs used to pass filter and then turn every later prioritize and bind, for
every pod, into HTTP 500 until a restart. Here each bad pod is refused alone, every refusal is
JSON, a client that stalls or hangs up costs one log line, and a restart loses nothing.
"""

from __future__ import annotations

import http.client
import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpufabric.errors import InputError
from gpufabric.k8s.extender import Extender
from gpufabric.k8s.http import ExtenderServer
from gpufabric.k8s.nodes import load_node_infos
from gpufabric.k8s.objects import amount, parse_pod, quantity
from gpufabric.k8s.statefile import StateFile
from gpufabric.topology import presets

pytestmark = pytest.mark.usefixtures("bounded_memory", "deadline")   # conftest.py

ROOT = Path(__file__).resolve().parents[1]
NODES = "V100M32x8*2+T4x4*2+cpu*1"
NAMES = [n.name for n in load_node_infos(NODES)]


def pod(name: str, gpus=None, ann=None, **spec) -> dict:
    limits = {"cpu": "2", "memory": "4Gi"}
    if gpus is not None:
        limits["nvidia.com/gpu"] = gpus
    return {"metadata": {"name": name, "namespace": "t", "uid": f"u-{name}",
                         "annotations": ann or {}},
            "spec": {"containers": [{"resources": {"limits": limits}}], **spec}}


@pytest.fixture
def server():
    started = []

    def start(ext: Extender, **kw) -> ExtenderServer:
        srv = ExtenderServer(("127.0.0.1", 0), ext, **kw)
        srv.start()
        started.append(srv)
        return srv
    yield start
    for s in started:
        s.shutdown()
        s.close_connections()
        s.server_close()


def call(srv: ExtenderServer, verb: str, obj) -> tuple[int, object]:
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=10)
    conn.request("POST", f"/{verb}", json.dumps(obj), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def raw(srv: ExtenderServer, data: bytes) -> tuple[int, dict, bytes]:
    """Send bytes; (status, headers, body) of the answer."""
    with socket.create_connection(("127.0.0.1", srv.server_address[1]), timeout=10) as s:
        s.sendall(data)
        resp = http.client.HTTPResponse(s)
        resp.begin()
        return resp.status, dict(resp.getheaders()), resp.read()


# -- quantities as Kubernetes reads them ------------------------------------------------------

@pytest.mark.parametrize("text, value", [
    ("4", 4), ("+2", 2), ("1.5", 1.5), (".5", 0.5), ("5.", 5), ("500m", 0.5), ("1e3", 1000),
    ("1E3", 1000), ("1E", 10**18), ("2Ki", 2048), ("1Gi", 2**30), ("250u", 0.00025),
    ("7n", 7e-9), ("-4", -4), (3, 3)])
def test_quantities_parse_as_kubernetes_parses_them(text, value):
    assert float(quantity(text, "x")) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", " 4", "4 ", "four", "0x10", "1,000", "1.2.3", "e3", "Ki",
                                  "1e3Ki", "1KiB", "1k1", "1e99999", True, None, [4], {}])
def test_what_kubernetes_would_not_parse_is_refused(text):
    with pytest.raises(InputError, match="is not a Kubernetes quantity"):
        quantity(text, "x")


def test_a_quantity_refusal_names_the_field_and_the_value():
    for value, shown in [("", "''"), ("2 GPUs", "'2 GPUs'"), ([2], "a list"), (None, "a NoneType")]:
        with pytest.raises(InputError) as e:
            quantity(value, "Pod t/p.resources.nvidia.com/gpu")
        assert str(e.value) == (f"Pod t/p.resources.nvidia.com/gpu: {shown} is not a "
                                "Kubernetes quantity (e.g. 4, 500m, 16Gi)")


def test_requests_are_whole_non_negative_and_bounded():
    assert amount("0.0001", "cpu", 1000) == 1                   # rounded up, as MilliValue
    for text, why in [("-4", "is negative"), ("2.5", "whole numbers only"),
                      ("500m", "whole numbers only"), ("1e30", "over the largest allowed")]:
        with pytest.raises(InputError, match=why):
            amount(text, "gpu", whole=True, most=10**18)


@pytest.mark.parametrize("bad, field, why", [
    ({"nvidia.com/gpu": "-4"}, "resources.nvidia.com/gpu", "'-4' is negative"),
    ({"nvidia.com/gpu": "2.5"}, "resources.nvidia.com/gpu", "whole numbers only"),
    ({"nvidia.com/gpu": "500m"}, "resources.nvidia.com/gpu", "whole numbers only"),
    ({"nvidia.com/gpu": "1e9"}, "resources.nvidia.com/gpu", "over the largest allowed (128)"),
    ({"nvidia.com/gpu": "1Ki"}, "resources.nvidia.com/gpu", "over the largest allowed (128)"),
    ({"cpu": "1e30"}, "resources.cpu", "over the largest allowed"),
    ({"memory": "-1Gi"}, "resources.memory", "is negative"),
    ({"alibabacloud.com/gpu-count": "-4"}, "annotations.alibabacloud.com/gpu-count",
     "-4 is outside 0..128"),
    ({"alibabacloud.com/gpu-count": "1", "alibabacloud.com/gpu-milli": "5000"},
     "annotations.alibabacloud.com/gpu-milli", "5000 is outside 0..1,000"),
    ({"gpufabric.dev/min-bw-GBps": "inf"}, "annotations.gpufabric.dev/min-bw-GBps",
     "not a bandwidth"),
    ({"gpufabric.dev/gpu-index": "0-0"}, "metadata.annotations", "not distinct GPU indices"),
])
def test_a_pods_own_fields_are_checked(bad, field, why):
    limits = {k: v for k, v in bad.items() if "/" not in k or k == "nvidia.com/gpu"}
    ann = {k: v for k, v in bad.items() if k not in limits}
    p = pod("p", ann=ann)
    p["spec"]["containers"][0]["resources"]["limits"].update(limits)
    with pytest.raises(InputError) as e:
        parse_pod(p)
    assert field in str(e.value) and why in str(e.value)


def test_a_gpu_request_must_equal_its_limit_and_init_containers_count_as_kubernetes_counts():
    p = pod("p", "2")
    p["spec"]["containers"][0]["resources"]["requests"] = {"nvidia.com/gpu": "1"}
    with pytest.raises(InputError, match="must equal its limit"):
        parse_pod(p)
    p = pod("p", "2", initContainers=[{"resources": {"limits": {"cpu": "16"}}},
                                      {"resources": {"limits": {"cpu": "1"}}}])
    assert parse_pod(p).request.cpu == 16000          # max(2 of the app, 16 of an init one)


# -- one bad pod is that pod's problem --------------------------------------------------------

BAD_PODS = [pod("neg", "-4"), pod("frac", "2.5"), pod("milli", "500m"), pod("huge", "1e9"),
            pod("word", "four"), pod("kilo", "1Ki"), pod("empty", ""), pod("list", ["2"]),
            pod("gang", "1", {"gpufabric.dev/gang-size": "1000000000"}),     # labelled below
            pod("share", None, {"alibabacloud.com/gpu-count": "-4"}),
            pod("bw", "2", {"gpufabric.dev/min-bw-GBps": "nan"}),
            pod("prio", "1", priority=2**40), {"metadata": {}}, {"spec": "x"}]
BAD_PODS[8]["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "g"}


def schedule(srv: ExtenderServer, p: dict) -> tuple[object, object, object]:
    _, f = call(srv, "filter", {"Pod": p, "Nodes": None, "NodeNames": NAMES})
    _, s = call(srv, "prioritize", {"Pod": p, "Nodes": None, "NodeNames": f["NodeNames"]})
    best = max(s, key=lambda x: x["Score"])["Host"]
    _, b = call(srv, "bind", {"PodName": p["metadata"]["name"], "PodNamespace": "t",
                              "PodUID": p["metadata"]["uid"], "Node": best})
    return f, s, b


def test_bad_pods_are_refused_alone_and_change_nothing(server):
    clean = server(Extender(load_node_infos(NODES)))
    hit = server(Extender(load_node_infos(NODES)))
    good = [pod("a", "4"), pod("b", "1"), pod("c", None, {"alibabacloud.com/gpu-milli": "300"}),
            pod("d", "2"), pod("e")]
    for g in good:
        for b in BAD_PODS:
            s, f = call(hit, "filter", {"Pod": b, "Nodes": None, "NodeNames": NAMES})
            assert s == 200 and f["NodeNames"] == [] and f["Error"] == ""
            reasons = f["FailedAndUnresolvableNodes"]
            assert list(reasons) == NAMES and len(set(reasons.values())) == 1
            assert next(iter(reasons.values())).startswith("gpufabric: ")
            s, p = call(hit, "prioritize", {"Pod": b, "Nodes": None, "NodeNames": NAMES[:2]})
            assert s == 200 and p == [{"Host": NAMES[0], "Score": 0},
                                      {"Host": NAMES[1], "Score": 0}]
            s, v = call(hit, "preempt", {"Pod": b, "NodeNameToMetaVictims": {}})
            assert s == 200 and v == {"NodeNameToMetaVictims": {}}
        # every later call for every good pod is answered exactly as if no bad pod had come
        assert schedule(hit, g) == schedule(clean, g), g["metadata"]["name"]
    assert hit.errors == 0
    assert (hit.extender._state.gpu_left == clean.extender._state.gpu_left).all()
    assert set(hit.extender.bound) == {f"u-{c}" for c in "abcde"}


def test_a_node_whose_system_annotation_is_wrong_is_that_nodes_problem(server):
    from gpufabric.k8s.nodes import node_object
    infos = load_node_infos("hgx-h100*2")
    items = [node_object(n) for n in infos]
    items[0]["metadata"].setdefault("annotations", {})["gpufabric.dev/system"] = "/etc/passwd"
    items[1]["metadata"].setdefault("annotations", {})["gpufabric.dev/system"] = "dgx1-v100"
    srv = server(Extender())
    s, f = call(srv, "filter", {"Pod": pod("p", "2", {"gpufabric.dev/min-bw-GBps": "40"}),
                                "Nodes": {"metadata": {}, "items": items}})
    assert s == 200 and [n["metadata"]["name"] for n in f["Nodes"]["items"]] == [infos[1].name]
    assert f["FailedAndUnresolvableNodes"][infos[0].name].endswith(
        "metadata.annotations.gpufabric.dev/system: '/etc/passwd' is not a system preset or "
        "inline spec (known presets: " + ", ".join(presets.names()) + ")")
    items[1]["metadata"]["annotations"]["gpufabric.dev/system"] = "gpu=H100-SXM,gpus_per_node=4"
    s, f = call(srv, "filter", {"Pod": pod("p", "2"), "Nodes": {"metadata": {}, "items": items}})
    assert f["FailedAndUnresolvableNodes"][infos[1].name].endswith(
        "'gpu=H100-SXM,gpus_per_node=4' has 4 GPUs per node; the node has 8")


# -- every answer JSON; a client that misbehaves costs its own connection -----------------------

def test_every_refusal_is_json_with_its_status(server):
    srv = server(Extender(load_node_infos(NODES)))
    body = json.dumps({"Pod": pod("p", "1"), "Nodes": None, "NodeNames": NAMES}).encode()
    many = json.dumps({"Pod": pod("p", "1"), "NodeNames": ["n"] * 200_000}).encode()
    post = "POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: {}\r\nContent-Length: {}\r\n\r\n"
    cases = [
        (b"GARBAGE\r\n\r\n", 400, "Bad request"),
        (b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n", 404, "unknown path /nowhere"),
        (b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", 404, "unknown verb"),
        (b"PUT /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405,
         "method PUT not allowed"),
        (b"DELETE /filter HTTP/1.1\r\nHost: x\r\n\r\n", 405, "method DELETE not allowed"),
        (b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
         411, "a Content-Length header is required"),
        (post.format("application/json", 2**40).encode(), 413, "over the 67108864 byte limit"),
        (b"GET /" + b"x" * 70_000 + b" HTTP/1.1\r\n\r\n", 414, "Request-URI Too Long"),
        (b"GET /healthz HTTP/1.1\r\nX: " + b"y" * 70_000 + b"\r\n\r\n", 431, "Line too long"),
        (b"GET /healthz HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n", 431, "Too many headers"),
        (post.format("text/plain", len(body)).encode() + body, 415,
         "Content-Type 'text/plain'; expected application/json"),
        (post.format("application/json", 200_002).encode() + b"[" * 100_001 + b"]" * 100_001,
         400, "body nests too deeply"),
        (post.format("application/json", 3).encode() + b"NaN", 400, "NaN is not JSON"),
        (post.format("application/json", len(many)).encode() + many, 400,
         "200,000 node names; a cluster has at most 100,000"),
        (post.format("application/json; charset=utf-8", 9).encode() + b'{"Pod": [', 400,
         "body is not JSON"),
    ]
    for data, status, text in cases:
        got, headers, reply = raw(srv, data)
        assert got == status, (data[:40], got, reply[:200])
        assert headers["Content-Type"] == "application/json", data[:40]
        assert text in json.loads(reply)["Error"], (data[:40], reply[:200])
        if status == 405:
            assert headers["Allow"] == "GET, POST"
    assert raw(srv, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")[::2] == (200, b"ok")
    assert call(srv, "filter", {"Pod": pod("p", "1"), "Nodes": None, "NodeNames": NAMES})[0] \
        == 200 and srv.errors == 0


def test_an_internal_error_is_a_json_500_and_the_state_is_rebuilt_from_the_records(server):
    ext = Extender(load_node_infos(NODES))
    srv = server(ext)
    assert schedule(srv, pod("a", "4"))[2] == {"Error": ""}
    before = ext._state.gpu_left.copy()
    real = ext.bind

    def broken(args):            # a verb that fails halfway: GPUs taken, nothing recorded
        ext._state.place(ext._index[NAMES[1]], ext.pods["u-a"].request, (0, 1, 2, 3))
        raise RuntimeError("disk on fire")
    ext.bind = broken
    s, r = call(srv, "bind", {"PodName": "b", "PodNamespace": "t", "PodUID": "u-b",
                              "Node": NAMES[1]})
    assert s == 500 and r == {"Error": "gpufabric: internal error in bind: RuntimeError: "
                                       "disk on fire"}
    ext.bind = real
    s, _ = call(srv, "filter", {"Pod": pod("b", "1"), "Nodes": None, "NodeNames": NAMES})
    assert s == 200 and (ext._state.gpu_left == before).all()       # nothing counted twice


@pytest.mark.slow
def test_a_stalled_or_vanishing_client_costs_one_log_line_and_nobody_waits(server, capfd):
    srv = server(Extender(load_node_infos(NODES)), request_timeout_s=1.5)
    port = srv.server_address[1]
    head = b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    stalled = socket.create_connection(("127.0.0.1", port))
    stalled.sendall(head + b"Content-Length: 1000\r\n\r\n{\"Pod\":")
    dripping = socket.create_connection(("127.0.0.1", port))
    dripping.sendall(b"POST /filter HTTP/1.1\r\n")
    with socket.create_connection(("127.0.0.1", port)) as gone:
        gone.sendall(head + b"Content-Length: 1000\r\n\r\n{\"Pod\":")
    # meanwhile a good client is answered, before the stalled one's deadline has passed
    assert call(srv, "filter", {"Pod": pod("p", "1"), "Nodes": None, "NodeNames": NAMES})[0] \
        == 200
    stalled.setblocking(False)
    with pytest.raises(BlockingIOError):
        stalled.recv(1)
    stalled.settimeout(5)
    status = stalled.recv(4096).split(b"\r\n")[0]
    assert status == b"HTTP/1.1 408 Request Timeout"
    for _ in range(3):           # a header at a time, each in time, the whole too late
        time.sleep(0.6)
        try:
            dripping.sendall(b"X: y\r\n")
        except OSError:
            break
    dripping.settimeout(5)
    try:
        got = dripping.recv(4096)
    except ConnectionResetError:
        got = b""
    assert got == b""                           # closed by the server, no answer owed
    stalled.close()
    dripping.close()
    time.sleep(0.3)
    err = capfd.readouterr().err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("gpufabric extender: client")]
    assert any("closed the connection after 7 of 1000 body bytes" in ln for ln in lines), err
    assert any("request not received whole within 1.5 s" in ln for ln in lines), err
    assert len(lines) <= 4, err


def test_connections_past_the_limit_are_told_503_and_the_rest_go_on(server):
    srv = server(Extender(load_node_infos(NODES)), max_connections=2)
    port = srv.server_address[1]
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    time.sleep(0.2)
    got, _, reply = raw(srv, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert got == 503 and json.loads(reply) == {
        "Error": "gpufabric: too many connections; try again"}
    for s in idle:
        s.close()
    time.sleep(0.2)
    assert raw(srv, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")[0] == 200


def _other_client_can_bind(address: str) -> bool:
    """Whether this host routes a second loopback address (Linux routes all of 127/8)."""
    try:
        with socket.socket() as s:
            s.bind((address, 0))
        return True
    except OSError:
        return False


def _filter_from(srv: ExtenderServer, address: str, timeout_s: float = 5.0) -> int:
    """A well-behaved client at ``address``: one filter call, its HTTP status."""
    port = srv.server_address[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
    conn.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s,
                                         source_address=(address, 0))
    conn.request("POST", "/filter", json.dumps({"Pod": pod("p", "1"), "Nodes": None,
                                                "NodeNames": NAMES}),
                 {"Content-Type": "application/json"})
    status = conn.getresponse().status
    conn.close()
    return status


@pytest.mark.skipif(not _other_client_can_bind("127.0.0.2"), reason="no second loopback address")
def test_a_flood_of_half_sent_connections_from_one_address_never_locks_out_another(server):
    """1,000 connections from 127.0.0.1, each with half a request line and headers sent and
    then silent: the extender holds 64 of them (one client's share) and answers the rest 503
    at once, so a client at 127.0.0.2 is answered in well under its timeout."""
    srv = server(Extender(load_node_infos(NODES)))
    port = srv.server_address[1]
    flood: list[socket.socket] = []
    try:
        for _ in range(1000):
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            s.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n")
            flood.append(s)
        flood[-1].settimeout(5)
        refusal = flood[-1].recv(4096)
        assert refusal.startswith(b"HTTP/1.1 503 ")
        assert json.loads(refusal.split(b"\r\n\r\n", 1)[1]) == {
            "Error": "gpufabric: too many connections from 127.0.0.1 (at most 64 from one "
                     "client); try again"}
        t0 = time.monotonic()
        assert _filter_from(srv, "127.0.0.2", timeout_s=5) == 200
        assert time.monotonic() - t0 < 2.0
    finally:
        for s in flood:
            s.close()


@pytest.mark.skipif(not _other_client_can_bind("127.0.0.2"), reason="no second loopback address")
def test_announced_bodies_from_one_address_leave_room_for_another(server):
    """Two requests from 127.0.0.1 announce the largest body (64 MiB) each and send none of it:
    one address holds at most one such body's share, so 127.0.0.2 is answered at once."""
    from gpufabric.k8s.http import MAX_BODY_BYTES
    srv = server(Extender(load_node_infos(NODES)), request_timeout_s=3)
    port = srv.server_address[1]
    head = (b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n{" % MAX_BODY_BYTES)
    hogs = [socket.create_connection(("127.0.0.1", port)) for _ in range(2)]
    try:
        for h in hogs:
            h.sendall(head)
        time.sleep(0.3)
        t0 = time.monotonic()
        assert _filter_from(srv, "127.0.0.2", timeout_s=5) == 200
        assert time.monotonic() - t0 < 1.0
    finally:
        for h in hogs:
            h.close()


@pytest.mark.skipif(not _other_client_can_bind("127.0.0.6"), reason="no second loopback address")
def test_connections_are_kept_for_clients_that_have_completed_a_request(server):
    """Idle connections from many addresses fill what they may (8 connections, 2 of them kept):
    a new address is told 503, a client that completed a request before is still served."""
    srv = server(Extender(load_node_infos(NODES)), max_connections=8, max_per_client=2,
                 reserved=2)
    port = srv.server_address[1]
    assert _filter_from(srv, "127.0.0.2") == 200           # the scheduler, before the flood
    # its finished connection let go first: under load its handler may still be closing it,
    # and counted it would leave the flood one unreserved place fewer
    until = time.monotonic() + 10
    while srv.open_connections() and time.monotonic() < until:
        time.sleep(0.05)
    idle = [socket.create_connection(("127.0.0.1", port), source_address=(f"127.0.0.{a}", 0))
            for a in (3, 4, 5) for _ in range(2)]
    try:
        until = time.monotonic() + 10
        # accepted: the 6 of 8 places not kept for clients that completed a request
        while srv.open_connections() != 6 and time.monotonic() < until:
            time.sleep(0.05)
        assert srv.open_connections() == 6
        with socket.create_connection(("127.0.0.1", port), timeout=5,
                                      source_address=("127.0.0.6", 0)) as fresh:
            fresh.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = fresh.recv(4096)
        assert reply.startswith(b"HTTP/1.1 503 ") and b"kept for clients that have completed" \
            in reply
        assert _filter_from(srv, "127.0.0.2") == 200
    finally:
        for s in idle:
            s.close()


# -- a restart loses nothing ------------------------------------------------------------------

def test_a_restart_rebuilds_the_state_from_the_state_file(tmp_path, server):
    path = tmp_path / "state.jsonl"
    ext = Extender(load_node_infos(NODES), state_file=StateFile(path))
    srv = server(ext)
    for name, gpus in [("a", "4"), ("b", "1"), ("c", "2"), ("d", "1")]:
        assert schedule(srv, pod(name, gpus))[2] == {"Error": ""}
    gang = [pod(f"g{k}", "2", {"gpufabric.dev/gang-size": "3"}) for k in range(3)]
    for g in gang:
        g["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "job"}
    assert schedule(srv, gang[0])[2] == {"Error": ""}         # 1 of 3 bound, 2 places held
    ext.forget("u-b")
    before = {u: (b.node, b.gpus) for u, b in ext.bound.items()}
    free = ext._state.gpu_left.copy()
    with path.open("a") as fh:
        fh.write('{"bind": "x", "node": "n", "gpus": [0], "pod": {"uid": "x", "namespace": "t", '
                 '"name": "x", "request": {"cpu": 0, "mem": 0, "num_gpu": -4, "gpu_milli": '
                 '1000}, "models": [], "kind": "training", "priority": 0, "group": "", '
                 '"gang": 1, "node": "n", "gpu_index": [], "min_bw_GBps": 0}}\n')  # edited by hand
        fh.write('{"bind": "half-writ')                     # killed mid-line
    again = Extender(load_node_infos(NODES), state_file=StateFile(path))
    assert {u: (b.node, b.gpus) for u, b in again.bound.items()} == before
    assert (again._model()[1].gpu_left == free).all()
    assert again.gangs["t/job"].slots == ext.gangs["t/job"].slots
    srv2 = server(again)
    for g in gang[1:]:              # the gang's other members get the places held for them
        f, _, b = schedule(srv2, g)
        assert b == {"Error": ""}
    assert "t/job" not in again.gangs
    assert StateFile(path).load()[1] == {}        # compacted: the finished gang is gone


def test_a_file_that_is_not_a_state_file_is_refused(tmp_path):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello\n")
    with pytest.raises(InputError, match="not a gpufabric extender state file"):
        StateFile(bad).load()
    assert bad.read_text() == "hello\n"          # untouched


# -- the device plugin ------------------------------------------------------------------------

def test_the_device_plugin_removes_its_socket_on_sigint_as_on_sigterm(tmp_path):
    for sig in (signal.SIGINT, signal.SIGTERM):
        sock = tmp_path / "gpufabric-gpu.sock"
        proc = subprocess.Popen([sys.executable, "-c", "from gpufabric.cli import main; main()",
                                 "k8s", "device-plugin", "--system", "dgx-a100", "--socket-dir",
                                 str(tmp_path)], stderr=subprocess.PIPE, text=True)
        for _ in range(400):
            if sock.exists():
                break
            time.sleep(0.05)
        assert sock.exists()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0 and not sock.exists(), (sig, err)
        assert "Traceback" not in err


def test_the_device_plugin_without_grpc_names_the_extra_to_install():
    code = ("import sys; sys.modules['grpc'] = None; from gpufabric.cli import main; "
            "main(['k8s', 'device-plugin', '--system', 'dgx-a100', '--socket-dir', '.'])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1] == (
        "gpufabric: error: k8s device-plugin: the device plugin needs gRPC (grpc is not "
        "installed): pip install 'gpufabric[k8s]'")


def test_the_device_plugin_survives_junk_and_oversized_grpc_requests(tmp_path):
    grpc = pytest.importorskip("grpc")
    from gpufabric.k8s.api import deviceplugin_pb2 as pb
    from gpufabric.k8s.api import deviceplugin_pb2_grpc as pb_grpc
    from gpufabric.k8s.deviceplugin import DevicePlugin
    from gpufabric.k8s.devices import DeviceSet

    ds = DeviceSet.from_system("dgx-a100")
    plugin = DevicePlugin(ds, str(tmp_path), log=lambda m: None)
    plugin.serve()
    try:
        with socket.socket(socket.AF_UNIX) as s:        # not HTTP/2 at all
            s.connect(str(plugin.socket))
            s.sendall(b"GET / HTTP/1.1\r\n\r\n" + bytes(range(256)) * 64)
        with grpc.insecure_channel(f"unix://{plugin.socket}") as ch:
            stub = pb_grpc.DevicePluginStub(ch)
            huge = pb.PreferredAllocationRequest(container_requests=[
                pb.ContainerPreferredAllocationRequest(
                    available_deviceIDs=["x" * 1000] * 5000, allocation_size=1)])
            with pytest.raises(grpc.RpcError) as err:
                stub.GetPreferredAllocation(huge, timeout=10)
            assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED     # over 4 MiB
            many = pb.PreferredAllocationRequest(container_requests=[
                pb.ContainerPreferredAllocationRequest(available_deviceIDs=ds.ids,
                                                       allocation_size=4)] * 2000)
            got = stub.GetPreferredAllocation(many, timeout=30)
            assert len(got.container_responses) == 2000
            one = pb.PreferredAllocationRequest(container_requests=[
                pb.ContainerPreferredAllocationRequest(available_deviceIDs=ds.ids,
                                                       allocation_size=2)])
            assert len(stub.GetPreferredAllocation(one, timeout=10)
                       .container_responses[0].deviceIDs) == 2
    finally:
        plugin.stop_server()


def test_the_state_file_stays_as_small_as_its_records(tmp_path):
    path = tmp_path / "state.jsonl"
    ext = Extender(load_node_infos(NODES), policy="best-fit", state_file=StateFile(path))
    p = pod("churn", "1")
    for _ in range(6000):                 # bind, end, bind again: 12,000 journal lines
        ext.filter({"Pod": p, "Nodes": None, "NodeNames": NAMES})
        assert ext.bind({"PodName": "churn", "PodNamespace": "t", "PodUID": "u-churn",
                         "Node": NAMES[0]}) == {"Error": ""}
        ext.forget("u-churn")
    assert ext.state_file.lines <= 10_001
    assert len(path.read_text().splitlines()) == ext.state_file.lines
    assert StateFile(path).load() == ({}, {})
