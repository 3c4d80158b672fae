"""uvicorn's httptools protocol, writing each response in one piece.

uvicorn writes the status line and headers on ``http.response.start`` and the
body on ``http.response.body``: two ``transport.write`` calls. Over TLS each
one is encrypted into its own TLS record and sent with its own ``send``
syscall. :class:`CoalescingHttpToolsProtocol` hands uvicorn a thin transport
proxy that collects writes and passes them on as one ``write`` when the
response completes (or, for anything else, at the next event-loop iteration,
or before the connection is closed). Same bytes, same order; one record and
one syscall per response instead of two.

It only overrides ``connection_made`` (to wrap the transport) and
``on_response_complete`` (to flush), both part of asyncio's / uvicorn's
protocol surface; if httptools is missing, uvicorn's h11 protocol is used
unmodified (see app/run.py).
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
