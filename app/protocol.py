"""uvicorn's httptools protocol, writing each response in one piece.

uvicorn writes the headers and the body with two ``transport.write`` calls; over TLS that
is two records and two ``send`` syscalls per response. :class:`CoalescingHttpToolsProtocol`
wraps the transport to collect the writes and pass them on as one when the response
completes (else at the next event-loop iteration, or before the connection closes): same
bytes, same order. It overrides only ``connection_made`` and ``on_response_complete``;
without httptools, uvicorn's h11 protocol is used unmodified (see app/run.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CorkedTransport:
    """Delegates to ``transport``, except that writes are gathered until :meth:`flush`."""

    __slots__ = ("_transport", "_chunks", "_loop", "_scheduled")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._chunks: list[bytes] = []
        self._loop = loop
        self._scheduled = False

    def write(self, data: bytes) -> None:
        self._chunks.append(data)
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._scheduled_flush)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def _scheduled_flush(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
        chunks = self._chunks
        if chunks:
            data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            chunks.clear()
            if not self._transport.is_closing():
                self._transport.write(data)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._chunks.clear()
        self._transport.abort()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._chunks))

    def __getattr__(self, name: str) -> Any:  # get_extra_info, pause_reading, set_protocol, ...
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CorkedTransport(transport, self.loop))  # type: ignore[arg-type]

    def on_response_complete(self) -> None:
        self.transport.flush()  # type: ignore[attr-defined]
        super().on_response_complete()
