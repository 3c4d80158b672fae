"""Connection limits: the read deadline and the connection cap (app.connections).

The first part runs the real server (uvicorn, TLS) on 127.0.0.1 and plays the client that
never finishes a request; the second drives :class:`ConnectionGuard` with stand-in
transports for what is hard to arrange over a socket (every connection busy deciding).
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import certs
from app.connections import ConnectionGuard, GuardedConnection, RateLimitedLog
from app.metrics import Metrics
from devkit.metrics import metric_sum
from ops.prometheus import exposition
from tests.unit.test_webhook_tls import REVIEW_2C, Server, client_context, issue

HEAD = b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(
    REVIEW_2C
)


@pytest.fixture
def tls(tmp_path: Path) -> tuple[Path, Path, ssl.SSLContext]:
    ca, serving = issue()
    paths = certs.write_pair(str(tmp_path), serving, ca)
    return Path(paths["tls.crt"]), Path(paths["tls.key"]), client_context(ca)


def connect(port: int, ctx: ssl.SSLContext) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def closed_within(sock: ssl.SSLSocket, seconds: float) -> bool:
    """True if the server closes ``sock`` within ``seconds`` (without answering)."""
    sock.settimeout(seconds)
    try:
        return sock.recv(65536) == b""
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False


def closed_connections(srv: Server, ctx: ssl.SSLContext, reason: str) -> float:
    text = httpx.get(srv.url + "/metrics", verify=ctx, timeout=5).text
    return metric_sum(text, "workload_resizer_webhook_connections_closed_total", reason=reason)


def patched(response: httpx.Response) -> bool:
    answer = response.json()["response"]
    return "patch" in answer and any(
        op["path"].endswith("original-cpu.api") for op in orjson.loads(base64.b64decode(answer["patch"]))
    )


def test_a_request_not_read_in_full_within_the_read_timeout_is_closed(tls):
    """Headers cut short, a body cut short, or nothing at all after the handshake: each
    connection is closed once --http-read-timeout has passed since its start, and counted."""
    cert, key, ctx = tls
    srv = Server(cert, key, "--http-read-timeout", "1s")
    try:
        srv.wait_listening()
        lifetimes = []
        for first_bytes in (HEAD[:30], HEAD + REVIEW_2C[:100], b""):
            sock = connect(srv.port, ctx)  # the server's deadline runs from no earlier than now
            connected = time.monotonic()
            sock.sendall(first_bytes)
            assert closed_within(sock, 5.0)
            lifetimes.append(time.monotonic() - connected)
            sock.close()
        assert all(0.95 <= lifetime < 3.0 for lifetime in lifetimes), lifetimes
        assert closed_connections(srv, ctx, "read_timeout") == 3
    finally:
        srv.stop()


def test_a_keep_alive_connection_idle_past_the_read_timeout_stays_open(tls):
    """The read deadline is per request: between requests the keep-alive timeout applies."""
    cert, key, ctx = tls
    srv = Server(cert, key, "--http-read-timeout", "0.3s")
    try:
        srv.wait_listening()
        with httpx.Client(verify=ctx, base_url=srv.url, timeout=5) as client:
            assert patched(client.post("/mutate", content=REVIEW_2C))
            time.sleep(0.8)
            assert patched(client.post("/mutate", content=REVIEW_2C))
            assert client.get("/healthz").status_code == 200
            time.sleep(0.8)
            assert patched(client.post("/mutate", content=REVIEW_2C))
        assert closed_connections(srv, ctx, "read_timeout") == 0
    finally:
        srv.stop()


def test_reviews_are_decided_while_more_connections_stall_their_body_than_reviews_in_flight(tls):
    """40 connections that never finish their body (more than --max-inflight-reviews, 32):
    a review on a new connection is still decided, with its patch, at once."""
    cert, key, ctx = tls
    srv = Server(cert, key, "--http-read-timeout", "30s")
    stalled: list[ssl.SSLSocket] = []
    try:
        srv.wait_listening()
        for _ in range(40):
            sock = connect(srv.port, ctx)
            sock.sendall(HEAD + REVIEW_2C[:100])
            stalled.append(sock)
        time.sleep(0.3)
        with httpx.Client(verify=ctx, base_url=srv.url, timeout=5) as client:
            for _ in range(5):
                started = time.monotonic()
                assert patched(client.post("/mutate", content=REVIEW_2C))
                assert time.monotonic() - started < 1.0
    finally:
        for sock in stalled:
            sock.close()
        srv.stop()


def test_at_the_connection_cap_a_new_connection_closes_the_one_stalled_longest(tls):
    cert, key, ctx = tls
    srv = Server(cert, key, "--http-read-timeout", "30s", "--max-connections", "4")
    stalled: list[ssl.SSLSocket] = []
    try:
        srv.wait_listening()
        for _ in range(4):
            sock = connect(srv.port, ctx)
            sock.sendall(HEAD + REVIEW_2C[:100])
            stalled.append(sock)
            time.sleep(0.05)
        with httpx.Client(verify=ctx, base_url=srv.url, timeout=5) as client:
            assert patched(client.post("/mutate", content=REVIEW_2C))  # evicts stalled[0]
            assert closed_within(stalled[0], 2.0)
            assert not closed_within(stalled[1], 0.2)
            assert patched(client.post("/mutate", content=REVIEW_2C))  # same connection: no eviction
        # The client's connection is gone: the metrics request's fits without evicting.
        assert closed_connections(srv, ctx, "evicted") == 1
        assert not closed_within(stalled[1], 0.2)
    finally:
        for sock in stalled:
            sock.close()
        srv.stop()


# -- ConnectionGuard with stand-in transports -------------------------------------------------
class FakeTransport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted


class FakeInner(asyncio.Protocol):
    def __init__(self) -> None:
        self.made = False

    def connection_made(self, transport: Any) -> None:
        self.made = True


def test_guard_evicts_a_reading_connection_before_an_idle_one_and_refuses_when_all_are_deciding():
    async def body() -> None:
        metrics = Metrics(process_metrics=False)
        guard = ConnectionGuard(max_connections=2, read_timeout=10.0, metrics=metrics)

        def open_one() -> tuple[GuardedConnection, FakeTransport]:
            connection, transport = GuardedConnection(FakeInner(), guard), FakeTransport()
            connection.connection_made(transport)  # type: ignore[arg-type]
            return connection, transport

        idle, idle_t = open_one()
        idle.request_read()
        idle.responded()
        reading, reading_t = open_one()
        third, third_t = open_one()  # at the cap: the reading one goes, not the idle one
        assert reading_t.aborted and not idle_t.aborted and not third_t.aborted
        third.request_read()  # deciding: never evicted
        fourth, fourth_t = open_one()  # the idle one goes
        assert idle_t.aborted and not third_t.aborted and not fourth_t.aborted
        fourth.request_read()
        fifth, fifth_t = open_one()  # everyone deciding: refused
        assert fifth_t.aborted and not isinstance(fifth.inner, FakeInner) or not fifth.inner.made  # type: ignore
        assert set(guard.open) == {third, fourth}
        text = exposition(metrics.registry).decode()
        assert metric_sum(text, "workload_resizer_webhook_connections_refused_total") == 1
        assert metric_sum(text, "workload_resizer_webhook_connections_closed_total", reason="evicted") == 2
        assert metric_sum(text, "workload_resizer_webhook_connections") == 2

    asyncio.run(body())


def test_guard_times_a_pipelined_request_from_its_first_byte():
    """Bytes of the next request arriving while the current one is decided: its deadline
    runs from then, not from the answer."""

    async def body() -> None:
        guard = ConnectionGuard(max_connections=2, read_timeout=0.2)
        inner = FakeInner()
        inner.data_received = lambda data: None  # type: ignore[method-assign]
        connection, transport = GuardedConnection(inner, guard), FakeTransport()
        connection.connection_made(transport)  # type: ignore[arg-type]
        connection.request_read()
        connection.data_received(b"POST /mutate HTTP/1.1\r\n")
        await asyncio.sleep(0.15)
        connection.responded()
        await asyncio.sleep(0.05 + 0.05 + 0.02)  # past its deadline plus one sweep interval
        assert transport.aborted and not guard.open

    asyncio.run(body())


def test_rate_limited_log_says_how_many_events_it_stood_for(caplog):
    now = [100.0]
    limited = RateLimitedLog("connection closed", interval=10.0, clock=lambda: now[0])
    with caplog.at_level("WARNING", logger="workload_resizer.webhook"):
        for step in range(25):  # one event a second for 25 s
            now[0] = 100.0 + step
            limited.event(max_connections=4)
    counts = [record.count for record in caplog.records if record.msg == "connection closed"]
    assert counts == [1, 10, 10]  # at 0 s, 10 s, 20 s; the last 4 wait for the next line


class WritesTransport(FakeTransport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed_after: list[bytes] | None = None

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed_after = list(self.writes)
        super().close()


class Writer(FakeInner):
    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self.transport = transport


def test_a_corked_connection_writes_an_answers_head_and_body_at_once_and_before_closing():
    async def body() -> None:
        guard = ConnectionGuard(max_connections=2, read_timeout=10.0, metrics=Metrics(process_metrics=False))
        transport, inner = WritesTransport(), Writer()
        connection = GuardedConnection(inner, guard)
        connection.connection_made(transport)  # type: ignore[arg-type]
        inner.transport.write(b"uncorked")
        connection.cork()
        inner.transport.write(b"head")
        inner.transport.write(b"body")
        assert transport.writes == [b"uncorked"]
        connection.uncork()
        assert transport.writes == [b"uncorked", b"headbody"]
        connection.cork()
        inner.transport.write(b"last")
        inner.transport.close()  # uvicorn closes after the body of a connection: close answer
        assert transport.closed_after == [b"uncorked", b"headbody", b"last"]
        connection.uncork()
        assert transport.writes == [b"uncorked", b"headbody", b"last"]

    asyncio.run(body())


def test_the_app_sends_an_answers_head_and_body_in_one_write():
    """MutateApp corks its connection around uvicorn's two sends: one transport write per answer."""
    from app.connections import _CURRENT
    from app.server import create_app

    app = create_app(Metrics(process_metrics=False))

    async def body() -> list[bytes]:
        guard = ConnectionGuard(max_connections=2, read_timeout=10.0, metrics=Metrics(process_metrics=False))
        transport, inner = WritesTransport(), Writer()
        connection = GuardedConnection(inner, guard)
        connection.connection_made(transport)  # type: ignore[arg-type]
        messages = [{"type": "http.request", "body": REVIEW_2C, "more_body": False}]

        async def receive() -> dict[str, Any]:
            return messages.pop(0)

        async def send(message: dict[str, Any]) -> None:  # as uvicorn's protocol: a write per message
            inner.transport.write(message.get("body") or b"head %d;" % message["status"])

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/mutate",
            "headers": [(b"content-length", b"%d" % len(REVIEW_2C))],
        }
        token = _CURRENT.set(connection)
        try:
            await app(scope, receive, send)  # type: ignore[arg-type]
        finally:
            _CURRENT.reset(token)
        return transport.writes

    (written,) = asyncio.run(body())
    assert written.startswith(b"head 200;") and b'"allowed":true' in written
