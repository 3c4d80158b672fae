"""Connection limits uvicorn's HTTP protocol lacks: a read deadline and a cap.

:func:`guarded_protocol` wraps uvicorn's protocol class, unmodified, so that

* every request must arrive, headers and body, within ``read_timeout`` of its first byte (a new
  connection's first request: of the TLS handshake's end), else the connection is dropped (a
  client sending part of a request would hold it, and what it sent, as long as it likes);
* at most ``max_connections`` are open: a new one beyond that closes the one that has waited
  longest for its request, else the one idle longest, and is refused only when every connection
  has a request being decided. So the apiserver's next connection gets in, and reviews whose
  body is complete are never dropped for it.

The ASGI app says when it has read a body and answered (:func:`current_connection`), and corks
the connection around an answer's head and body (one write, one TLS record). Connections still
in the TLS handshake are not seen here; the event loop gives up on a handshake after 60 s.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from typing import Any, Callable, cast

from app.metrics import Metrics

log = logging.getLogger("workload_resizer.webhook")

DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_READ_TIMEOUT = 1.0
LOG_INTERVAL_SECONDS = 10.0

# The connection whose bytes are being parsed, seen by the ASGI task uvicorn starts for a
# request (tasks copy the context they are created in, inside data_received).
_CURRENT: contextvars.ContextVar[GuardedConnection | None] = contextvars.ContextVar(
    "workload_resizer_connection", default=None
)
current_connection = _CURRENT.get  # the connection the calling ASGI request arrived on (None: not guarded)

# Connection states
_READING = 0  # waiting for (the rest of) a request: the read deadline runs
_DECIDING = 1  # request read, answer not yet sent
_IDLE = 2  # answered, no byte of the next request yet (uvicorn's keep-alive timeout runs)
_DROPPED = 3  # closed by the guard


class RateLimitedLog:
    """A warning at most every ``interval`` seconds, with the count of events since the last one."""

    __slots__ = ("message", "interval", "_last", "_suppressed", "_clock")

    def __init__(
        self, message: str, interval: float = LOG_INTERVAL_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.message = message
        self.interval = interval
        self._clock = clock
        self._last = -interval
        self._suppressed = 0

    def event(self, **fields: Any) -> None:
        self._suppressed += 1
        now = self._clock()
        if now - self._last >= self.interval:
            log.warning(self.message, extra={**fields, "count": self._suppressed, "interval_s": self.interval})
            self._last = now
            self._suppressed = 0


class ConnectionGuard:
    """The open connections of one server, and its limits. The read deadline is checked by a sweep
    every ``read_timeout / 4`` (at most every second), not a timer per request (which then costs
    two attribute writes): a connection is dropped 1 to 1.25 read timeouts after its request began."""

    def __init__(
        self,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        metrics: Metrics | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        if read_timeout <= 0:
            raise ValueError("read_timeout must be positive")
        self.max_connections = max_connections
        self.read_timeout = read_timeout
        self.sweep_interval = min(read_timeout / 4, 1.0)
        metrics = metrics if metrics is not None else Metrics(process_metrics=False)
        self._gauge = metrics.connections
        self._refused = metrics.connections_refused
        self._timed_out = metrics.connections_closed.labels("read_timeout")
        self._evicted = metrics.connections_closed.labels("evicted")
        self._refused_log = RateLimitedLog("connection refused: every connection has a review being decided")
        self._timeout_log = RateLimitedLog("connection closed: request not read within the read timeout")
        self._evicted_log = RateLimitedLog("connection closed to make room for a new one")
        self.open: dict[GuardedConnection, None] = {}  # in order of arrival
        self._sweeper: asyncio.TimerHandle | None = None

    def admit(self, connection: GuardedConnection) -> bool:
        """Register a new connection; False: refused (the caller closes it)."""
        if len(self.open) >= self.max_connections:
            victim = self._eviction_candidate()
            if victim is None:
                self._refused.inc()
                self._refused_log.event(max_connections=self.max_connections)
                return False
            self._evicted.inc()
            self._evicted_log.event(
                max_connections=self.max_connections, state="reading" if victim.state == _READING else "idle"
            )
            victim.drop()
        self.open[connection] = None
        self._gauge.set(len(self.open))
        if self._sweeper is None:
            self._sweeper = connection.loop.call_later(self.sweep_interval, self._sweep, connection.loop)
        return True

    def release(self, connection: GuardedConnection) -> None:
        if self.open.pop(connection, 0) is None:
            self._gauge.set(len(self.open))

    def _eviction_candidate(self) -> GuardedConnection | None:
        for state in (_READING, _IDLE):
            oldest = min((c for c in self.open if c.state == state), key=lambda c: c.since, default=None)
            if oldest is not None:
                return oldest
        return None

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        if not self.open:
            self._sweeper = None
            return
        started_before = loop.time() - self.read_timeout
        late = [c for c in self.open if c.state == _READING and c.since <= started_before]
        for connection in late:
            self._timed_out.inc()
            self._timeout_log.event(read_timeout_s=self.read_timeout)
            connection.drop()
        self._sweeper = loop.call_later(self.sweep_interval, self._sweep, loop)


class CorkableTransport:
    """The transport uvicorn's protocol sees: while corked, its writes go out as one at :meth:`uncork`."""

    __slots__ = ("_transport", "_corked")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._corked: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        corked = self._corked
        if corked is None:
            self._transport.write(data)
        else:
            corked.append(data)

    def cork(self) -> None:
        if self._corked is None:
            self._corked = []

    def uncork(self) -> None:
        corked, self._corked = self._corked, None
        if corked and not self._transport.is_closing():
            self._transport.write(corked[0] if len(corked) == 1 else b"".join(corked))

    def close(self) -> None:
        self.uncork()
        self._transport.close()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class GuardedConnection(asyncio.Protocol):
    """One connection: uvicorn's protocol (``inner``) behind the read deadline and the cap."""

    __slots__ = ("inner", "guard", "loop", "transport", "state", "since", "early", "writes")

    def __init__(self, inner: asyncio.Protocol, guard: ConnectionGuard) -> None:
        self.inner = inner
        self.guard = guard
        self.loop = asyncio.get_event_loop()
        self.transport: asyncio.Transport | None = None
        self.state = _READING
        self.since = 0.0  # when the current state began (loop time)
        self.early = -1.0  # loop time of a next request's first byte while deciding (-1: none)
        self.writes: CorkableTransport | None = None  # the transport uvicorn's protocol writes to

    # -- asyncio protocol ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream transport (TCP, TLS)
        self.since = self.loop.time()
        if not self.guard.admit(self):
            self.transport = None
            cast(asyncio.Transport, transport).abort()
            return
        self.writes = CorkableTransport(self.transport)
        self.inner.connection_made(cast(asyncio.Transport, self.writes))

    def data_received(self, data: bytes) -> None:
        if self.transport is None:  # refused
            return
        if self.state == _IDLE:
            self.state, self.since = _READING, self.loop.time()
        elif self.state == _DECIDING and self.early < 0:
            self.early = self.loop.time()
        token = _CURRENT.set(self)
        try:
            self.inner.data_received(data)
        finally:
            _CURRENT.reset(token)

    def eof_received(self) -> bool | None:
        return None if self.transport is None else self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is None:  # refused: uvicorn never saw it
            return
        self.guard.release(self)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    # -- told by the ASGI app --------------------------------------------------------------
    def cork(self) -> None:
        """Gather what uvicorn writes until :meth:`uncork` (an answer's head and body)."""
        if self.writes is not None:
            self.writes.cork()

    def uncork(self) -> None:
        if self.writes is not None:
            self.writes.uncork()

    def request_read(self) -> None:
        """The current request has arrived in full: the read deadline stops."""
        self.state = _DECIDING
        self.early = -1.0

    def responded(self) -> None:
        """The answer to the current request is sent."""
        if self.state != _DECIDING:  # answered before reading it all (413, overload), or dropped
            return
        if self.early >= 0:  # the next request began meanwhile: its deadline runs from then
            self.state, self.since, self.early = _READING, self.early, -1.0
        else:
            self.state, self.since = _IDLE, self.loop.time()

    def drop(self) -> None:
        """Drop the connection at once and stop counting it (uvicorn's protocol sees
        connection_lost, its request a disconnect). Not a TLS close: that would wait up to
        30 s for the peer's close_notify, which a client that stalls on purpose never sends."""
        self.state = _DROPPED
        self.guard.release(self)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()


def guarded_protocol(inner: Callable[..., asyncio.Protocol], guard: ConnectionGuard) -> type[asyncio.Protocol]:
    """For uvicorn's ``Config.http_protocol_class``: each connection is ``inner(**kwargs)`` behind ``guard``."""

    class Guarded(GuardedConnection):
        __slots__ = ()

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(inner(**kwargs), guard)

    return Guarded
