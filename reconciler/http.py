"""/healthz, /readyz and /metrics for the reconciler (plain HTTP, no TLS).

Served by uvicorn inside the reconciler's own event loop; uvicorn's signal
handling is switched off because the reconciler owns SIGTERM.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import uvicorn
from starlette.applications import Starlette

from ops.probes import Check, probe_routes


def build_app(checks: dict[str, Check]) -> Starlette:
    return Starlette(routes=probe_routes(checks))


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:   # the reconciler handles signals itself
        yield


def build_server(app: Starlette, address: str) -> uvicorn.Server:
    host, _, port = address.rpartition(":")
    config = uvicorn.Config(app, host=host or "0.0.0.0", port=int(port), log_config=None,
                            access_log=False, lifespan="off")
    return _Server(config)
