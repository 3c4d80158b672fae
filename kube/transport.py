"""Keep-alive HTTP/1.1 to one server on asyncio protocols, parsed by httptools.

The reconciler talks to exactly one apiserver, a few requests per pod and a few long watches;
a general-purpose client (httpx: pool, h11, anyio wrappers, cancel scopes) spent most of the
reconciler's CPU on that. This is the part it needs: a bounded LIFO pool of persistent
connections (watches included), one write per request, httptools (the webhook server's C
parser), timeouts, and a request that meets a kept-alive connection the server just closed
sent once more on a fresh one, as Go's net/http does. Errors are the builtin ones
(`TimeoutError`, `ConnectionError`, `OSError`); kube maps them onto its own.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httptools

from kube.errors import KubeError

# A watch that outpaces its consumer pauses the socket rather than buffering without bound.
_PAUSE_LINES = 4096
_RESUME_LINES = 512


class ServerClosed(KubeError, ConnectionError):
    """The server closed a kept-alive connection before answering: safe to send again."""


class _Stream:
    """Newline-delimited body of a streaming response (a watch), line by line."""

    __slots__ = ("_conn", "_lines", "_partial", "_waiter", "_done", "_error", "_paused")

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lines: collections.deque[bytes] = collections.deque()
        self._partial = b""
        self._waiter: asyncio.Future[None] | None = None
        self._done = False
        self._error: BaseException | None = None
        self._paused = False

    def feed(self, data: bytes) -> None:
        if self._partial:
            data = self._partial + data
        parts = data.split(b"\n")
        self._partial = parts.pop()  # (b"" after a final newline)
        self._lines.extend(parts)
        if len(self._lines) > _PAUSE_LINES and not self._paused and self._conn.transport is not None:
            self._paused = True
            self._conn.transport.pause_reading()
        self._wake()

    def end(self, error: BaseException | None = None) -> None:
        if self._done:
            return
        if error is None and self._partial:
            self._lines.append(self._partial)
        self._partial = b""
        self._done = True
        self._error = error
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def lines(self, idle_timeout: float) -> AsyncIterator[bytes]:
        """Each line as it arrives (blank ones included); TimeoutError after `idle_timeout` of silence."""
        loop = self._conn.loop
        lines = self._lines
        while True:
            while lines:
                if self._paused and len(lines) < _RESUME_LINES and self._conn.transport is not None:
                    self._paused = False
                    self._conn.transport.resume_reading()
                yield lines.popleft()
            if self._done:
                if self._error is not None:
                    raise self._error
                return
            waiter = self._waiter = loop.create_future()
            timer = loop.call_later(idle_timeout, _expire, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._waiter = None


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class Connection(asyncio.Protocol):
    """One HTTP/1.1 connection: one exchange at a time."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[int] | None = None
        self._body: list[bytes] = []
        self._stream: _Stream | None = None
        self._answered = False  # a byte of the current answer has arrived
        self._complete = True
        self._keep_alive = True

    # ---- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self._answered = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as err:
            self._fail(ConnectionError(f"malformed HTTP response: {err}"))
            self.abort()

    def eof_received(self) -> bool | None:
        self.closed = True
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._complete:
            return
        if not self._answered and self.reused:
            self._fail(ServerClosed("the server closed the kept-alive connection"))
        elif exc:
            self._fail(ConnectionError(f"connection lost before the response was complete: {exc!r}"))
        else:
            self._fail(ConnectionError("connection closed before the response was complete"))

    # ---- httptools callbacks

    def on_headers_complete(self) -> None:
        if self._stream is not None and self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(self._parser.get_status_code())

    def on_body(self, body: bytes) -> None:
        if self._stream is not None:
            self._stream.feed(body)
        else:
            self._body.append(body)

    def on_message_complete(self) -> None:
        self._complete = True
        self._keep_alive = self._parser.should_keep_alive()
        if self._stream is not None:
            self._stream.end()
        elif self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(self._parser.get_status_code())

    # ---- exchanges

    def _fail(self, error: BaseException) -> None:
        self._complete = True
        self._keep_alive = False
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)
        if self._stream is not None:
            self._stream.end(error)

    def _start(self, data: bytes, stream: bool) -> asyncio.Future[int]:
        if self.transport is None or self.transport.is_closing():
            raise ServerClosed("the connection closed while idle")
        self._waiter = waiter = self.loop.create_future()
        self._body = []
        self._stream = _Stream(self) if stream else None
        self._answered = False
        self._complete = False
        self._keep_alive = True
        self.transport.write(data)
        return waiter

    async def exchange(self, data: bytes, time_limit: float) -> tuple[int, bytes]:
        """Send a request, wait for the whole response: (status, body)."""
        status = await self._within(self._start(data, stream=False), time_limit)
        body, self._body = self._body, []
        return status, b"".join(body)

    async def open_stream(self, data: bytes, time_limit: float) -> tuple[int, _Stream]:
        """Send a request, wait for the response's head: (status, its body as a stream)."""
        status = await self._within(self._start(data, stream=True), time_limit)
        assert self._stream is not None
        return status, self._stream

    async def _within(self, waiter: asyncio.Future[int], time_limit: float) -> int:
        """The status ``waiter`` is given, within ``time_limit`` (else the connection is aborted)."""
        timer = self.loop.call_later(time_limit, self._time_out)
        try:
            return await waiter
        finally:
            timer.cancel()

    def _time_out(self) -> None:
        self._fail(TimeoutError("no complete response in time"))
        self.abort()

    @property
    def reusable(self) -> bool:
        return (
            self._complete
            and self._keep_alive
            and not self.closed
            and self.transport is not None
            and not self.transport.is_closing()
        )

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class Pool:
    """At most `max_connections` connections to one server (http or https URL)."""

    def __init__(
        self, server: str, ssl_context: ssl.SSLContext | None, max_connections: int, connect_timeout: float = 10.0
    ) -> None:
        url = urlsplit(server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) server URL: {server!r}")
        self.host = url.hostname
        self.port = url.port or (443 if url.scheme == "https" else 80)
        self.host_header = url.netloc.rpartition("@")[2]
        self.base_path = url.path.rstrip("/")
        self._ssl = (ssl_context or ssl.create_default_context()) if url.scheme == "https" else None
        self._max = max(1, max_connections)
        self._connect_timeout = connect_timeout
        self._idle: list[Connection] = []
        self._count = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed = False

    async def acquire(self) -> Connection:
        while True:
            if self._closed:
                raise ConnectionError("the client is closed")
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed:
                    conn.reused = True
                    return conn
                self._count -= 1
            if self._count < self._max:
                self._count += 1
                try:
                    return await self._connect()
                except BaseException:
                    self._count -= 1
                    self._wake_one()
                    raise
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # pass on the wake-up we were given
                raise
            finally:
                with contextlib.suppress(ValueError):  # already taken off by a wake-up
                    self._waiters.remove(waiter)

    async def _connect(self) -> Connection:
        loop = asyncio.get_running_loop()
        # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that comes as
        # the connection is made (a command's Ctrl-C would then go unheeded).
        async with asyncio.timeout(self._connect_timeout):
            _, conn = await loop.create_connection(
                lambda: Connection(loop),
                self.host,
                self.port,
                ssl=self._ssl,
                server_hostname=self.host if self._ssl is not None else None,
            )
        return conn

    def release(self, conn: Connection) -> None:
        """Return a connection after its exchange; it is closed unless it can carry another."""
        if conn.reusable and not self._closed:
            self._idle.append(conn)
        else:
            conn.abort()
            self._count -= 1
        self._wake_one()

    def _wake_one(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
                return

    async def close(self) -> None:
        self._closed = True
        for conn in self._idle:
            conn.abort()
            self._count -= 1
        self._idle.clear()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
