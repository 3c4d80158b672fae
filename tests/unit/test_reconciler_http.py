"""The reconciler's probes and metrics server: what each request gets, on a real socket."""

from __future__ import annotations

import asyncio
import socket

from devkit.ports import free_port
from ops.prometheus import Counter, new_registry
from reconciler.http import MAX_REQUEST_BYTES, ProbeApp, ProbeServer


def app(config_ok: bool = True) -> ProbeApp:
    registry = new_registry(runtime_collectors=False)
    Counter("probe_test_total", "A metric only this test registers.", registry=registry).inc()
    return ProbeApp(
        {
            "config": lambda: (config_ok, "loaded" if config_ok else "not loaded yet"),
            "caches": lambda: (True, "synced"),
        },
        registry,
    )


def test_each_endpoint_answers_like_the_kube_apiserver_probes():
    assert app().respond("GET", "/healthz") == (200, "text/plain; charset=utf-8", b"ok")
    assert app().respond("GET", "/livez")[0] == 200
    assert app().respond("GET", "/readyz")[2] == b"ok"
    status, _, body = app().respond("GET", "/readyz?verbose")
    assert status == 200 and body.endswith(b"readyz check passed\n") and b"[+]config ok: loaded" in body
    status, _, body = app(config_ok=False).respond("GET", "/readyz")
    assert status == 503 and b"[-]config failed: not loaded yet" in body
    status, content_type, body = app().respond("GET", "/metrics")
    assert status == 200 and content_type.startswith("text/plain; version=") and b"probe_test_total 1.0" in body


def test_other_paths_and_methods_are_refused():
    assert app().respond("GET", "/")[0] == 404
    assert app().respond("GET", "/healthz/x")[0] == 404
    assert app().respond("POST", "/healthz")[0] == 405
    assert app().respond("DELETE", "/metrics")[0] == 405


async def _exchange(port: int, *requests: bytes) -> list[bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answers = []
    for request in requests:
        writer.write(request)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(
            next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        )
        body = b"" if request.startswith(b"HEAD") else await reader.readexactly(length)
        answers.append(head + body)
    writer.close()
    return answers


async def _serving(test):
    port = free_port()
    server = ProbeServer(app(), f"127.0.0.1:{port}")
    task = asyncio.create_task(server.serve())
    for _ in range(100):
        try:
            (await asyncio.open_connection("127.0.0.1", port))[1].close()
            break
        except OSError:
            await asyncio.sleep(0.01)
    try:
        return await test(port)
    finally:
        server.stop()
        await asyncio.wait_for(task, 5)


def test_one_connection_carries_several_requests_and_head_has_no_body():
    async def test(port: int) -> list[bytes]:
        return await _exchange(
            port,
            b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
            b"HEAD /livez HTTP/1.1\r\nHost: x\r\n\r\n",
            b"GET /readyz?verbose HTTP/1.1\r\nHost: x\r\n\r\n",
        )

    healthz, head, readyz = asyncio.run(_serving(test))
    assert healthz.startswith(b"HTTP/1.1 200 OK\r\n") and healthz.endswith(b"\r\n\r\nok")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"Content-Length: 2\r\n" in head and head.endswith(b"\r\n\r\n")
    assert readyz.endswith(b"readyz check passed\n")


def test_a_request_it_cannot_parse_or_too_large_gets_400_and_the_connection_closes():
    async def send(port: int, data: bytes) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(data)
        answer = await asyncio.wait_for(reader.read(), 5)  # read() to EOF: the server closed
        writer.close()
        return answer

    async def test(port: int) -> tuple[bytes, bytes]:
        garbage = await send(port, b"GARBAGE\r\n\r\n")
        huge = await send(port, b"GET /healthz HTTP/1.1\r\nX-Pad: " + b"a" * MAX_REQUEST_BYTES + b"\r\n\r\n")
        return garbage, huge

    garbage, huge = asyncio.run(_serving(test))
    assert garbage.startswith(b"HTTP/1.1 400 ") and b"Connection: close\r\n" in garbage
    assert huge.startswith(b"HTTP/1.1 400 ")


def test_stop_closes_the_listener_and_open_connections():
    async def scenario() -> None:
        port = free_port()
        server = ProbeServer(app(), f"127.0.0.1:{port}")
        task = asyncio.create_task(server.serve())
        await asyncio.sleep(0.2)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)  # idle keep-alive client
        server.stop()
        await asyncio.wait_for(task, 5)
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed by the server
        writer.close()
        try:
            await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            return
        raise AssertionError("still listening after stop()")

    asyncio.run(scenario())


def test_a_port_already_taken_is_an_error_of_serve():
    async def scenario() -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen()
            server = ProbeServer(app(), f"127.0.0.1:{taken.getsockname()[1]}")
            try:
                await asyncio.wait_for(server.serve(), 5)
            except OSError:
                return
            raise AssertionError("served on a port another socket listens on")

    asyncio.run(scenario())
