"""/healthz, /readyz and /metrics for the reconciler (plain HTTP, no TLS).

Served by uvicorn inside the reconciler's own event loop; uvicorn's signal
handling is switched off because the reconciler owns SIGTERM.
"""
from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import uvicorn
from starlette.applications import Starlette

from ops.probes import Check, probe_routes


def build_app(checks: dict[str, Check]) -> Starlette:
    return Starlette(routes=probe_routes(checks))


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._exit = asyncio.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:   # the reconciler handles signals itself
        yield

    def stop(self) -> None:
        """Ask the server to shut down (it closes its sockets and returns from serve())."""
        self.should_exit = True
        self._exit.set()

    async def main_loop(self) -> None:
        # uvicorn polls should_exit ten times a second; an idle reconciler should not pay
        # for that. Wake once a second for the Date header, and at once on stop().
        while not await self.on_tick(0):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit.wait(), 1.0)


def build_server(app: Starlette, address: str) -> _Server:
    host, _, port = address.rpartition(":")
    config = uvicorn.Config(app, host=host or "0.0.0.0", port=int(port), log_config=None,
                            access_log=False, lifespan="off")
    return _Server(config)
