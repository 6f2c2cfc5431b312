"""`GET /metrics` in the Prometheus text format, on its own thread (operations.md §2.1).

    server = MetricsServer(metrics, settings.metrics_listen)   # only when not None (`off`)
    server.start()          # binds HOST:PORT (port 0 takes a free one) and serves
    server.address          # the bound HOST:PORT, for the ready line
    ...
    server.stop()           # the last shutdown step (operations.md §5 step 8); idempotent

The server is prometheus_client's WSGI app for the process's own registry, under a
thread-per-request `wsgiref` server whose loop runs on one daemon thread, so a scrape never
touches the event loop. No authentication: the port stays inside the cluster.
"""

from __future__ import annotations

import enum
import logging
import socket
import socketserver
import threading
from collections.abc import Callable, Iterable
from typing import Any, Final
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import make_wsgi_app

from gateway.observability.metrics import Metrics

logger = logging.getLogger(__name__)

METRICS_PATH: Final = "/metrics"
"""The one path served; any other answers 404."""

POLL_SECONDS: Final = 0.05
"""How often the serving loop checks for `stop()`: the longest `stop()` waits for it."""

STOP_JOIN_SECONDS: Final = 5.0
"""Longest wait for the serving thread to end after the loop stopped; it is a daemon thread,
so a scrape stuck in a slow client never holds the process."""

_WILDCARDS: Final = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}  # noqa: S104
"""Wildcard hosts, and the loopback host `address` names instead, so it can be dialled."""


class MetricsServerState(enum.StrEnum):
    """A MetricsServer's lifecycle: each state refuses the calls that make no sense in it."""

    CREATED = "created"
    """Built; nothing bound."""
    SERVING = "serving"
    """Bound and answering scrapes."""
    STOPPED = "stopped"
    """Stopped (or never started); it cannot start again."""


class _QuietHandler(WSGIRequestHandler):
    """Logs nothing per request: scrapes come every few seconds."""

    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing."""


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    """One thread per request, never joined at close."""

    daemon_threads = True

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, a DNS lookup that can stall
        # start-up; the WSGI environ only needs the name as given.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)
        self.setup_environ()


class _Server6(_Server):
    address_family = socket.AF_INET6


def _split_listen(listen: str) -> tuple[str, int]:
    """`HOST:PORT` or `[V6]:PORT` into host and port; ValueError when malformed."""
    host, separator, port_text = listen.rpartition(":")
    if not separator or not port_text.isdigit():
        raise ValueError(f"metrics listen address {listen!r} is not HOST:PORT")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"metrics listen address {listen!r} has no valid port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


def _only_metrics(app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != METRICS_PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"only /metrics is served here\n"]
        return app(environ, start_response)

    return serve


class MetricsServer:
    """Serves `metrics`' registry on `listen` (`HOST:PORT`) from its own thread."""

    def __init__(self, metrics: Metrics, listen: str) -> None:
        """Nothing is bound until `start()`; ValueError when `listen` is not `HOST:PORT`."""
        self._host, self._port = _split_listen(listen)
        self._listen = listen
        self._app = _only_metrics(make_wsgi_app(metrics.registry))
        self._state = MetricsServerState.CREATED
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._address: str | None = None
        self._lock = threading.Lock()

    @property
    def state(self) -> MetricsServerState:
        """The lifecycle state."""
        return self._state

    @property
    def address(self) -> str:
        """The bound `HOST:PORT` (the real port when `listen` asked for 0; a wildcard host
        named by its loopback address). RuntimeError before `start()`."""
        if self._address is None:
            raise RuntimeError(f"the metrics server has no address: it is {self._state.value}")
        return self._address

    def start(self) -> None:
        """Bind and serve. OSError when the address cannot be bound; RuntimeError when the
        server was started or stopped before."""
        with self._lock:
            if self._state is not MetricsServerState.CREATED:
                raise RuntimeError(f"the metrics server cannot start: it is {self._state.value}")
            server_class = _Server6 if ":" in self._host else _Server
            try:
                server = server_class((self._host, self._port), _QuietHandler)
            except OSError as error:
                raise OSError(f"cannot listen on {self._listen} for metrics: {error}") from error
            server.set_app(self._app)
            bound_host, bound_port = server.server_address[:2]
            host = _WILDCARDS.get(str(bound_host), str(bound_host))
            self._address = f"[{host}]:{bound_port}" if ":" in host else f"{host}:{bound_port}"
            self._thread = threading.Thread(
                target=server.serve_forever,
                kwargs={"poll_interval": POLL_SECONDS},
                name="metrics-server",
                daemon=True,
            )
            self._server = server
            self._thread.start()
            self._state = MetricsServerState.SERVING
        logger.info("metrics server listening address=%s", self._address)

    def stop(self) -> None:
        """Stop serving and close the socket. Idempotent and safe before `start()`. Blocks
        for up to `POLL_SECONDS` (call it via `asyncio.to_thread` from the event loop if that
        matters)."""
        with self._lock:
            if self._state is MetricsServerState.STOPPED:
                return
            server, thread = self._server, self._thread
            self._state = MetricsServerState.STOPPED
            self._server = self._thread = None
        if server is None or thread is None:
            return
        server.shutdown()
        server.server_close()
        thread.join(STOP_JOIN_SECONDS)
        logger.info("metrics server stopped address=%s", self._address)


__all__ = ["METRICS_PATH", "MetricsServer", "MetricsServerState"]
