"""The extender's HTTP front: ``POST <prefix>/<verb>`` with JSON, as kube-scheduler calls it.

kube-scheduler (``pkg/scheduler/extender.go``) POSTs the Go ``encoding/json`` form of the args
to ``<urlPrefix>/<verb>`` with ``Content-Type: application/json`` and treats any status but
200 as an error. Here:

- 200 with the verb's result struct for every request the extender could read, including
  answers that carry ``Error`` (a bind conflict) and pods refused for their own fields;
- every other answer is JSON too, ``{"Error": ...}`` (the verb's result struct where the verb
  is known), never the standard library's HTML page: 400 for a body that is not JSON (or
  nests deeper than the JSON reader allows) or not the verb's args, or a malformed request
  line; 404 for an unknown path or verb; 405 for PUT, DELETE, PATCH, HEAD, OPTIONS and TRACE (501
  for a method HTTP does not define); 408 for a
  request not received whole within :data:`REQUEST_TIMEOUT_S`; 411 without a Content-Length;
  413 for a body over :data:`MAX_BODY_BYTES`; 414 / 431 for a request line / headers over the
  standard library's limits (64 KiB, 100 headers); 415 for a body whose Content-Type is
  not ``application/json`` (none is taken as JSON); 503 when :data:`MAX_CONNECTIONS`
  connections are open already, when the client's address holds
  :data:`MAX_CONNECTIONS_PER_CLIENT` of them, or when only the :data:`RESERVED_CONNECTIONS`
  kept for clients that have completed a request are left and this one never has;
  500 with ``Error`` for an unexpected failure, after which the extender rebuilds its derived
  model from its records (:meth:`Extender.recover`) and keeps serving;
- ``GET /healthz`` answers ``ok`` (for the Deployment's probes).

A client that stalls, sends half a body or disconnects costs one line on stderr and its own
connection, nothing else: a request, once its first byte arrives, must arrive whole within
:data:`REQUEST_TIMEOUT_S`; a kept-alive connection may wait :data:`IDLE_TIMEOUT_S` for its
next request and is then closed quietly. At most :data:`BODY_BUDGET_BYTES` of request bodies
are held at once (:data:`MAX_BODY_BYTES` for one client address), so memory stays bounded
whatever the clients send, and a flood of idle or half-sent connections from one address (or
many) never delays another client's answer.

Calls are served one at a time under one lock (the state is one cluster), on a threading server
with HTTP/1.1 keep-alive, so a slow client does not block the others while it sends.
"""

from __future__ import annotations

import io
import json
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpufabric.cache import BoundedDict
from gpufabric.k8s.extender import Extender, ProtocolError, error_reply

#: Largest request body read (a NodeList of 5,000 full Node objects is about 25 MB).
MAX_BODY_BYTES = 64 * 2**20
#: Seconds one request may take to arrive whole once it has started (kube-scheduler gives up
#: on a call after its ``httpTimeout``, 5 s by default).
REQUEST_TIMEOUT_S = 10.0
#: Seconds a kept-alive connection may wait for its next request before it is closed.
IDLE_TIMEOUT_S = 120.0
#: Connections served at once; one more is answered 503 and closed.
MAX_CONNECTIONS = 256
#: Connections one client address may hold at once; one more from it is answered 503 and
#: closed, so a flood from one address leaves three quarters of :data:`MAX_CONNECTIONS` to the
#: others (kube-scheduler holds a few: one per call in flight).
MAX_CONNECTIONS_PER_CLIENT = 64
#: Connections kept for clients that have completed a request before (kube-scheduler, the
#: probes): a client address that never has is answered 503 once only these are left, so idle
#: or half-sent connections from many addresses cannot lock out the scheduler either.
RESERVED_CONNECTIONS = 64
#: Client addresses remembered as having completed a request (oldest forgotten first).
KNOWN_CLIENTS = 4096
#: Bytes of request bodies held at once, over all connections (two bodies of the largest
#: size); a request waits for its share (up to :data:`REQUEST_TIMEOUT_S`, then 503), so a
#: client that stalls holds only the bytes it announced.
BODY_BUDGET_BYTES = 2 * MAX_BODY_BYTES


def _log(message: str) -> None:
    print(f"gpufabric extender: {message}", file=sys.stderr, flush=True)


class _Deadline(io.RawIOBase):
    """A socket read so that a request, once its first byte is in, must be whole within
    ``request_s``; before that byte the wait is ``idle_s`` and ends as a quiet end of file."""

    def __init__(self, sock: socket.socket, idle_s: float, request_s: float):
        self.sock, self.idle_s, self.request_s = sock, idle_s, request_s
        self.until: float | None = None      # None: between requests

    def readable(self) -> bool:
        return True

    def readinto(self, buf: Any) -> int:
        if self.until is None:
            self.sock.settimeout(self.idle_s)
            try:
                n = self.sock.recv_into(buf)
            except TimeoutError:
                return 0                  # an idle keep-alive connection: close it quietly
            self.until = time.monotonic() + self.request_s
            return n
        left = self.until - time.monotonic()
        late = TimeoutError(f"request not received whole within {self.request_s:g} s")
        if left <= 0:
            raise late
        self.sock.settimeout(left)
        try:
            return self.sock.recv_into(buf)
        except TimeoutError:
            raise late from None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    default_request_version = "HTTP/1.1"   # answer even a garbled request line with a status
    disable_nagle_algorithm = True   # headers and body go out at once, no delayed-ACK stall
    server: ExtenderServer

    def setup(self) -> None:
        super().setup()
        self._reader = _Deadline(self.connection, self.server.idle_timeout_s,
                                 self.server.request_timeout_s)
        self.rfile = io.BufferedReader(self._reader)

    def handle_one_request(self) -> None:
        self._reader.until = None
        super().handle_one_request()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib name)
        if self.server.verbose:
            super().log_message(format, *args)

    def log_error(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib name)
        _log(f"client {self.address_string()}: {format % args}")

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """The standard library's own refusals (a bad request line, a URI or headers too
        long, an unknown method) as JSON, never its HTML page."""
        self.close_connection = True
        self._send(code, {"Error": message or HTTPStatus(code).phrase},
                   {"Allow": "GET, POST"} if code == HTTPStatus.METHOD_NOT_ALLOWED else None)

    def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.connection.settimeout(self.server.request_timeout_s)   # a client must read too
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (stdlib name)
        if self.path.rstrip("/").endswith("healthz"):
            self.server.completed(_host(self.client_address))
            data = b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._send(404, {"Error": f"unknown path {self.path[:200]}; POST <prefix>/<verb>"})

    def do_POST(self) -> None:  # noqa: N802 (stdlib name)
        verb = self.path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
        prefix = self.server.prefix
        if prefix and not self.path.startswith(prefix + "/"):
            self._refuse(404, {"Error": f"unknown path {self.path[:200]}; expected "
                                        f"{prefix}/<verb>"})
            return
        if verb not in Extender.VERBS:
            self._refuse(404, {"Error": f"unknown verb '{verb[:100]}' (allowed: "
                                        f"{', '.join(Extender.VERBS)})"})
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self._refuse(411, error_reply(verb, "a Content-Length header is required"))
            return
        n = int(length)
        if n > MAX_BODY_BYTES:
            self._refuse(413, error_reply(verb, f"request body of {n} bytes is over the "
                                                f"{MAX_BODY_BYTES} byte limit"))
            return
        kind = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if kind not in ("application/json", ""):
            self._refuse(415, error_reply(verb, f"gpufabric: {verb}: Content-Type "
                                                f"'{kind[:100]}'; expected application/json"))
            return
        client = _host(self.client_address)
        if not self.server.bodies.take(n, self.server.request_timeout_s, client):
            self._refuse(503, error_reply(verb, "gpufabric: too many request bytes in flight; "
                                                "try again"))
            return
        try:
            self._answer(verb, n)
        finally:
            self.server.bodies.give(n, client)

    def _answer(self, verb: str, n: int) -> None:
        try:
            raw = self.rfile.read(n)
        except TimeoutError as exc:
            self.log_error("%s", exc)
            self._refuse(408, error_reply(verb, f"gpufabric: {exc}"))
            return
        if len(raw) < n:
            self.log_error("closed the connection after %d of %d body bytes", len(raw), n)
            self.close_connection = True
            return
        self.server.completed(_host(self.client_address))   # sent a request whole
        try:
            args = json.loads(raw, parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            why = "nests too deeply" if isinstance(exc, RecursionError) else f"is not JSON: {exc}"
            self._send(400, error_reply(verb, f"gpufabric: {verb}: body {why}"))
            return
        ext = self.server.extender
        with self.server.lock:
            try:
                reply = ext.handle(verb, args)
            except ProtocolError as exc:
                self._send(400, error_reply(verb, f"gpufabric: {exc}"))
                return
            except Exception as exc:  # never a traceback on the wire; keep serving
                self.server.errors += 1
                ext.recover()
                self.log_error("internal error in %s: %s: %s", verb, type(exc).__name__, exc)
                self._send(500, error_reply(verb, f"gpufabric: internal error in {verb}: "
                                                  f"{type(exc).__name__}: {exc}"))
                return
        self._send(200, reply)

    def _refuse(self, status: int, body: Any) -> None:
        """Answer without reading the body; the connection closes (its body is unread)."""
        self.close_connection = True
        self._send(status, body)

    def _not_allowed(self) -> None:
        self.send_error(HTTPStatus.METHOD_NOT_ALLOWED, f"method {self.command} not allowed")

    do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = do_TRACE = _not_allowed


class _Budget:
    """Bytes shared by all connections: :meth:`take` waits until ``n`` are free, and until the
    client holds at most ``per_client`` with them (so one address cannot hold them all)."""

    def __init__(self, total: int, per_client: int):
        self.free = total
        self.per_client = per_client
        self.held: dict[str, int] = {}
        self.cond = threading.Condition()

    def take(self, n: int, timeout_s: float, client: str = "") -> bool:
        def fits() -> bool:
            return self.free >= n and self.held.get(client, 0) + n <= self.per_client
        with self.cond:
            if not self.cond.wait_for(fits, timeout_s):
                return False
            self.free -= n
            self.held[client] = self.held.get(client, 0) + n
            return True

    def give(self, n: int, client: str = "") -> None:
        with self.cond:
            self.free += n
            left = self.held.get(client, 0) - n
            if left > 0:
                self.held[client] = left
            else:
                self.held.pop(client, None)
            self.cond.notify_all()


def _host(client_address: Any) -> str:
    """The address part of a client address (IPv4 or IPv6 tuple; a Unix socket's path)."""
    return str(client_address[0]) if isinstance(client_address, tuple) else str(client_address)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _busy(message: str) -> bytes:
    """A whole 503 answer carrying ``message`` as its ``Error`` (sent without a handler)."""
    body = json.dumps({"Error": f"gpufabric: {message}; try again"}).encode()
    return (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))


_BUSY = _busy("too many connections")


class ExtenderServer(ThreadingHTTPServer):
    """An HTTP server around an :class:`Extender`.

    Examples
    --------
    >>> from gpufabric.k8s.objects import NodeInfo
    >>> srv = ExtenderServer(("127.0.0.1", 0), Extender([NodeInfo("n", 8000, 1024, 0, "", "",
    ...                      0, True)]))
    >>> srv.server_address[1] > 0
    True
    >>> srv.server_close()
    """

    daemon_threads = True
    allow_reuse_address = True
    #: Connections the kernel queues before they are accepted: a flood of connection attempts
    #: must not leave a good client's waiting in a full queue (the standard library's is 5).
    request_queue_size = 1024

    def __init__(self, address: tuple[str, int], extender: Extender, prefix: str = "",
                 verbose: bool = False, request_timeout_s: float = REQUEST_TIMEOUT_S,
                 idle_timeout_s: float = IDLE_TIMEOUT_S,
                 max_connections: int = MAX_CONNECTIONS,
                 max_per_client: int = MAX_CONNECTIONS_PER_CLIENT,
                 reserved: int | None = None):
        super().__init__(address, _Handler)
        self.extender = extender
        self.prefix = prefix.rstrip("/")
        self.verbose = verbose
        self.request_timeout_s = request_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_connections = max_connections
        self.max_per_client = max_per_client
        # a quarter of the connections (64 of 256) are kept for clients known to complete
        self.reserved = min(RESERVED_CONNECTIONS, max_connections // 4) if reserved is None \
            else reserved
        self.lock = threading.Lock()
        self.bodies = _Budget(BODY_BUDGET_BYTES, per_client=MAX_BODY_BYTES)
        self.errors = 0
        self._open: dict[Any, str] = {}           # connection -> client address
        self._per_client: dict[str, int] = {}
        self._known: BoundedDict[str, None] = BoundedDict(KNOWN_CLIENTS, refresh=True)
        self._open_lock = threading.Lock()

    def _admit(self, host: str) -> bytes | None:
        """None if a new connection from ``host`` may be served now, else the 503 to send."""
        mine = self._per_client.get(host, 0)
        if mine >= self.max_per_client:
            return _busy(f"too many connections from {host[:60]} (at most "
                         f"{self.max_per_client} from one client)")
        if len(self._open) >= self.max_connections:
            return _BUSY
        if len(self._open) >= self.max_connections - self.reserved and host not in self._known:
            return _busy("too many connections (the rest are kept for clients that have "
                         "completed a request)")
        return None

    def open_connections(self) -> int:
        """Client connections being served now."""
        with self._open_lock:
            return len(self._open)

    def completed(self, host: str) -> None:
        """``host`` sent a request whole and was answered: it may use the reserved share."""
        with self._open_lock:
            self._known[host] = None

    def process_request(self, request: Any, client_address: Any) -> None:
        host = _host(client_address)
        with self._open_lock:
            refusal = self._admit(host)
            if refusal is None:
                self._open[request] = host
                self._per_client[host] = self._per_client.get(host, 0) + 1
        if refusal is not None:
            try:                      # never wait on the accepting thread: a fresh socket's
                request.setblocking(False)   # buffer takes these 200 bytes, or they are lost
                request.sendall(refusal)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._open_lock:
                host = self._open.pop(request, None)
                if host is not None:
                    left = self._per_client[host] - 1
                    if left:
                        self._per_client[host] = left
                    else:
                        del self._per_client[host]

    def close_connections(self) -> None:
        """Close every client connection now (after :meth:`shutdown`: nothing more is read)."""
        with self._open_lock:
            for sock in self._open:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-request: one line, no traceback."""
        exc = sys.exc_info()[1]
        host = client_address[0] if isinstance(client_address, tuple) else client_address
        _log(f"client {host}: {type(exc).__name__}: {exc}")

    def start(self) -> threading.Thread:
        """Serve in a background thread (for tests and benchmarks); stop with shutdown()."""
        t = threading.Thread(target=self.serve_forever, args=(0.05,), name="gpufabric-extender",
                             daemon=True)
        t.start()
        return t
