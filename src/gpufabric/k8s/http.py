"""The extender's HTTP front: ``POST <prefix>/<verb>`` with JSON, as kube-scheduler calls it.

kube-scheduler (``pkg/scheduler/extender.go``) POSTs the Go ``encoding/json`` form of the args
to ``<urlPrefix>/<verb>`` and treats any status but 200 as an error. Here:

- 200 with the verb's result struct for every request the extender could read, including
  answers that carry ``Error`` (a bind conflict);
- 400 with the result struct and ``Error`` set for a body that is not JSON or not the verb's
  args; 404 with ``Error`` for an unknown verb; 413 for a body over :data:`MAX_BODY_BYTES`;
  411 without a Content-Length. Never a traceback: an unexpected failure is a 500 with
  ``Error`` and the server keeps serving;
- ``GET /healthz`` answers ``ok`` (for the Deployment's probes).

Calls are served one at a time under one lock (the state is one cluster), on a threading server
with HTTP/1.1 keep-alive, so a slow client does not block the others while it sends.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpufabric.k8s.extender import Extender, ProtocolError, error_reply

#: Largest request body read (a NodeList of 5,000 full Node objects is about 25 MB).
MAX_BODY_BYTES = 64 * 2**20


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True   # headers and body go out at once, no delayed-ACK stall
    timeout = 120                    # an idle or stalled connection is closed, not kept forever
    server: ExtenderServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (stdlib name)
        if self.server.verbose:
            super().log_message(format, *args)

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (stdlib name)
        if self.path.rstrip("/").endswith("healthz"):
            data = b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self._send(404, {"Error": f"unknown path {self.path}; POST <prefix>/<verb>"})

    def do_POST(self) -> None:  # noqa: N802 (stdlib name)
        verb = self.path.split("?")[0].rstrip("/").rsplit("/", 1)[-1]
        prefix = self.server.prefix
        if prefix and not self.path.startswith(prefix + "/"):
            self._drain()
            self._send(404, {"Error": f"unknown path {self.path}; expected {prefix}/<verb>"})
            return
        if verb not in Extender.VERBS:
            self._drain()
            self._send(404, {"Error": f"unknown verb '{verb}' (allowed: "
                                      f"{', '.join(Extender.VERBS)})"})
            return
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            self.close_connection = True
            self._send(411, error_reply(verb, "a Content-Length header is required"))
            return
        n = int(length)
        if n > MAX_BODY_BYTES:
            self.close_connection = True
            self._send(413, error_reply(verb, f"request body of {n} bytes is over the "
                                              f"{MAX_BODY_BYTES} byte limit"))
            return
        raw = self.rfile.read(n)
        try:
            args = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            self._send(400, error_reply(verb, f"gpufabric: {verb}: body is not JSON: {exc}"))
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
                self._send(500, error_reply(verb, f"gpufabric: internal error in {verb}: "
                                                  f"{type(exc).__name__}: {exc}"))
                return
        self._send(200, reply)

    def _drain(self) -> None:
        length = self.headers.get("Content-Length")
        if length and length.isdigit() and int(length) <= MAX_BODY_BYTES:
            self.rfile.read(int(length))
        else:
            self.close_connection = True


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

    def __init__(self, address: tuple[str, int], extender: Extender, prefix: str = "",
                 verbose: bool = False):
        super().__init__(address, _Handler)
        self.extender = extender
        self.prefix = prefix.rstrip("/")
        self.verbose = verbose
        self.lock = threading.Lock()
        self.errors = 0

    def start(self) -> threading.Thread:
        """Serve in a background thread (for tests and benchmarks); stop with shutdown()."""
        t = threading.Thread(target=self.serve_forever, args=(0.05,), name="gpufabric-extender",
                             daemon=True)
        t.start()
        return t
