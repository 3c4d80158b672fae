"""/healthz, /livez, /readyz and /metrics: the same endpoints for the webhook and the reconciler.

/readyz answers like the kube-apiserver's: ``ok``, or with ``?verbose`` (and always
when failing, with 503) one ``[+]name ok: detail`` / ``[-]name failed: detail`` line per
check and a closing ``readyz check passed|failed``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ops.prometheus import CONTENT_TYPE, REGISTRY, CollectorRegistry, exposition

if TYPE_CHECKING:  # starlette only for the webhook's routes: the reconciler serves without it
    from starlette.routing import BaseRoute

Check = Callable[[], tuple[bool, str]]  # -> (passed, detail)


def readiness(checks: Mapping[str, Check], verbose: bool) -> tuple[int, str]:
    """(HTTP status, body) of /readyz."""
    results = {name: check() for name, check in checks.items()}
    ok = all(passed for passed, _ in results.values())
    if not verbose and ok:
        return 200, "ok"
    lines = [
        f"[{'+' if passed else '-'}]{name} {'ok' if passed else 'failed'}: {detail}"
        for name, (passed, detail) in results.items()
    ]
    return (200 if ok else 503), "\n".join(lines) + f"\nreadyz check {'passed' if ok else 'failed'}\n"


def probe_routes(checks: Mapping[str, Check], registry: CollectorRegistry = REGISTRY) -> list[BaseRoute]:
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response
    from starlette.routing import Route

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok")

    async def readyz(request: Request) -> Response:
        status, body = readiness(checks, "verbose" in request.query_params)
        return PlainTextResponse(body, status_code=status)

    async def metrics(_: Request) -> Response:
        return Response(exposition(registry), media_type=CONTENT_TYPE)

    return [Route("/healthz", healthz), Route("/livez", healthz), Route("/readyz", readyz), Route("/metrics", metrics)]
