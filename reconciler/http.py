"""/healthz, /readyz and /metrics for the reconciler (plain HTTP, no TLS).

Served by uvicorn inside the reconciler's own event loop; uvicorn's signal
handling is switched off because the reconciler owns SIGTERM.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

Check = Callable[[], tuple[bool, str]]


def build_app(checks: dict[str, Check]) -> Starlette:
    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(request: Request) -> Response:
        results = {name: check() for name, check in checks.items()}
        ok = all(passed for passed, _ in results.values())
        if "verbose" in request.query_params or not ok:
            lines = [f"[{'+' if passed else '-'}]{name} {'ok' if passed else 'failed'}: {detail}"
                     for name, (passed, detail) in results.items()]
            body = "\n".join(lines) + f"\nreadyz check {'passed' if ok else 'failed'}\n"
        else:
            body = "ok"
        return PlainTextResponse(body, status_code=200 if ok else 503)

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[Route("/healthz", healthz), Route("/livez", healthz),
                             Route("/readyz", readyz), Route("/metrics", metrics)])


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:   # the reconciler handles signals itself
        yield


def build_server(app: Starlette, address: str) -> uvicorn.Server:
    host, _, port = address.rpartition(":")
    config = uvicorn.Config(app, host=host or "0.0.0.0", port=int(port), log_config=None,
                            access_log=False, lifespan="off")
    return _Server(config)
