"""/healthz, /livez, /readyz and /metrics for the reconciler (plain HTTP/1.1, no TLS).

A small server on the reconciler's own event loop, on the httptools parser the client already
uses: four GET endpoints do not need an ASGI stack (uvicorn + starlette cost startup CPU and a
10 Hz timer while the reconciler idles). The reconciler owns the signals; `stop()` closes the
listeners and the connections.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import cast
from urllib.parse import urlsplit

import httptools

from ops.probes import Check, readiness
from ops.prometheus import CONTENT_TYPE, REGISTRY, CollectorRegistry, exposition

log = logging.getLogger("reconciler.http")

TEXT = "text/plain; charset=utf-8"
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 503: "Service Unavailable"}
# A request this server answers fits in far less; anything bigger is not a probe or a scrape.
MAX_REQUEST_BYTES = 64 * 1024


@dataclass(frozen=True)
class ProbeApp:
    """What the endpoints answer: the readiness checks and the metrics registry."""

    checks: Mapping[str, Check]
    registry: CollectorRegistry = REGISTRY

    def respond(self, method: str, target: str) -> tuple[int, str, bytes]:
        """(status, content type, body) of one request."""
        url = urlsplit(target)
        if url.path not in ("/healthz", "/livez", "/readyz", "/metrics"):
            return 404, TEXT, b"404 page not found\n"
        if method not in ("GET", "HEAD"):
            return 405, TEXT, b"method not allowed\n"
        if url.path == "/metrics":
            return 200, CONTENT_TYPE, exposition(self.registry)
        if url.path == "/readyz":
            verbose = any(param.partition("=")[0] == "verbose" for param in url.query.split("&"))
            status, body = readiness(self.checks, verbose)
            return status, TEXT, body.encode()
        return 200, TEXT, b"ok"


class _Connection(asyncio.Protocol):
    def __init__(self, app: ProbeApp, connections: set[_Connection]) -> None:
        self._app = app
        self._connections = connections
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._received = 0

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._connections.discard(self)
        self._transport = None

    def data_received(self, data: bytes) -> None:
        self._received += len(data)
        if self._received > MAX_REQUEST_BYTES:
            self._reply(400, TEXT, b"request too large\n", keep_alive=False)
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._reply(400, TEXT, b"upgrade not supported\n", keep_alive=False)
        except httptools.HttpParserError:
            self._reply(400, TEXT, b"bad request\n", keep_alive=False)

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._url = b""

    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_message_complete(self) -> None:
        method = self._parser.get_method().decode("latin-1")
        try:
            status, content_type, body = self._app.respond(method, self._url.decode("latin-1"))
        except Exception:  # a failing check or collector: answer, log, keep serving
            log.exception("probe handler failed", extra={"path": self._url.decode("latin-1", "replace")})
            status, content_type, body = 500, TEXT, b"internal error\n"
        self._reply(
            status,
            content_type,
            b"" if method == "HEAD" else body,
            keep_alive=self._parser.should_keep_alive(),
            length=len(body),
        )
        self._received = 0

    def _reply(self, status: int, content_type: str, body: bytes, keep_alive: bool, length: int | None = None) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Internal Server Error')}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body) if length is None else length}\r\n"
            f"X-Content-Type-Options: nosniff\r\n"
            f"{'' if keep_alive else 'Connection: close' + chr(13) + chr(10)}\r\n"
        )
        self._transport.write(head.encode("latin-1") + body)
        if not keep_alive:
            self._transport.close()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


class ProbeServer:
    """Serves a ProbeApp on one address until stop()."""

    def __init__(self, app: ProbeApp, address: str) -> None:
        self._app = app
        self.address = address
        self._connections: set[_Connection] = set()
        self._stopped = asyncio.Event()

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        """Listen (on `sockets` if given, already bound, else on the address) until stop()."""
        factory = partial(_Connection, self._app, self._connections)
        loop = asyncio.get_running_loop()
        servers = [await loop.create_server(factory, sock=sock) for sock in sockets or [bind(self.address)]]
        log.info("serving probes and metrics", extra={"address": self.address})
        try:
            await self._stopped.wait()
        finally:
            for server in servers:
                server.close()
            for conn in list(self._connections):
                conn.close()
            for server in servers:
                await server.wait_closed()

    def stop(self) -> None:
        self._stopped.set()


def bind(address: str) -> socket.socket:
    """A listening socket on `address` (host:port; an empty host: every IPv4 address)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, int(port)))
        sock.listen(128)
    except OSError as err:
        sock.close()
        raise OSError(err.errno, f"{address}: {err.strerror}") from None
    except ValueError as err:
        sock.close()
        raise OSError(f"{address}: invalid address ({err})") from None
    return sock
