"""The probe endpoints shared by the webhook and the reconciler."""

from __future__ import annotations

import asyncio

import httpx
from starlette.applications import Starlette

from ops.probes import probe_routes, readiness
from ops.prometheus import Counter, new_registry


def test_ready_is_a_plain_ok_unless_asked_for_details() -> None:
    assert readiness({"config": lambda: (True, "valid")}, verbose=False) == (200, "ok")
    assert readiness({"config": lambda: (True, "valid")}, verbose=True) == (
        200,
        "[+]config ok: valid\nreadyz check passed\n",
    )


def test_a_failing_check_makes_it_503_with_every_check_listed() -> None:
    status, body = readiness({"config": lambda: (True, "valid"), "caches": lambda: (False, "syncing")}, verbose=False)
    assert status == 503
    assert body == "[+]config ok: valid\n[-]caches failed: syncing\nreadyz check failed\n"


def test_routes_serve_health_readiness_and_the_given_registry() -> None:
    registry = new_registry(runtime_collectors=False)
    Counter("probe_test_hits", "hits", registry=registry).inc()
    app = Starlette(routes=probe_routes({"x": lambda: (False, "no")}, registry))

    async def get_all() -> dict[str, httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://probe") as client:
            return {path: await client.get(path) for path in ("/healthz", "/livez", "/readyz", "/metrics")}

    answers = asyncio.run(get_all())
    assert answers["/healthz"].text == "ok" and answers["/livez"].text == "ok"
    assert answers["/readyz"].status_code == 503
    assert "probe_test_hits_total 1.0" in answers["/metrics"].text
