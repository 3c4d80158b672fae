"""app.protocol.CorkedTransport: one write per response, nothing lost or reordered."""

from __future__ import annotations

import asyncio


from app.protocol import CorkedTransport


class FakeTransport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default=None):
        return {"peername": ("127.0.0.1", 1)}.get(name, default)


def test_writes_are_joined_on_flush():
    loop = asyncio.new_event_loop()
    try:
        t = FakeTransport()
        c = CorkedTransport(t, loop)
        c.write(b"HTTP/1.1 200 OK\r\n\r\n")
        c.write(b"body")
        assert t.writes == [] and c.get_write_buffer_size() == 23
        c.flush()
        assert t.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
    finally:
        loop.close()


def test_unflushed_writes_go_out_on_the_next_loop_iteration():
    async def go():
        t = FakeTransport()
        c = CorkedTransport(t, asyncio.get_running_loop())
        c.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await asyncio.sleep(0)
        return t.writes

    assert asyncio.run(go()) == [b"HTTP/1.1 100 Continue\r\n\r\n"]


def test_close_flushes_first():
    loop = asyncio.new_event_loop()
    try:
        t = FakeTransport()
        c = CorkedTransport(t, loop)
        c.write(b"a")
        c.write(b"b")
        c.close()
        assert t.writes == [b"ab"] and t.closed
        c.flush()  # nothing left, no write on a closed transport
        assert t.writes == [b"ab"]
    finally:
        loop.close()


def test_abort_drops_buffered_bytes():
    loop = asyncio.new_event_loop()
    try:
        t = FakeTransport()
        c = CorkedTransport(t, loop)
        c.write(b"x")
        c.abort()
        assert t.aborted and t.writes == []
    finally:
        loop.close()


def test_other_attributes_are_delegated():
    loop = asyncio.new_event_loop()
    try:
        c = CorkedTransport(FakeTransport(), loop)
        assert c.get_extra_info("peername") == ("127.0.0.1", 1) and c.is_closing() is False
    finally:
        loop.close()
