"""The ASGI app (raw /mutate in front of FastAPI) through httpx's ASGI transport."""

from __future__ import annotations

import asyncio
import base64
import itertools
import logging
from pathlib import Path
from typing import Any

import httpx
import orjson

from app.metrics import Metrics
from app.review import Answer
from app.server import create_app
from devkit.metrics import metric_sum
from ops.prometheus import exposition

REVIEW_2C = (Path(__file__).resolve().parents[2] / "bench" / "data" / "review-2c.json").read_bytes()


def run(coro):
    return asyncio.run(coro)


async def _request(app, method: str, path: str, **kw: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
        return await client.request(method, path, **kw)


def request(app, method: str, path: str, **kw: Any) -> httpx.Response:
    return run(_request(app, method, path, **kw))


def make_app(ready: bool = True, max_request_bytes: int = 4 << 20):
    metrics = Metrics(process_metrics=False)
    return create_app(metrics, lambda: ready, max_request_bytes), metrics


def count(metrics: Metrics, result: str) -> float:
    return metric_sum(exposition(metrics.registry).decode(), "workload_resizer_webhook_requests_total", result=result)


def test_mutate_patches_the_bench_review():
    app, metrics = make_app()
    r = request(app, "POST", "/mutate", content=REVIEW_2C, headers={"content-type": "application/json"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    body = r.json()["response"]
    assert body["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002" and body["allowed"] is True
    ops = orjson.loads(base64.b64decode(body["patch"]))
    assert {op["path"] for op in ops} >= {"/metadata/annotations/workload-resizer.io~1original-cpu.api"}
    assert count(metrics, "patched") == 1
    assert (
        metric_sum(exposition(metrics.registry).decode(), "workload_resizer_webhook_request_duration_seconds_count")
        == 1
    )


def test_mutate_with_query_string_is_served():
    app, _ = make_app()
    r = request(app, "POST", "/mutate?timeout=3s", content=REVIEW_2C)
    assert r.status_code == 200 and "patch" in r.json()["response"]


def test_mutate_logs_one_decision_line(caplog):
    app, _ = make_app()
    with caplog.at_level(logging.INFO, logger="workload_resizer.webhook"):
        request(app, "POST", "/mutate", content=REVIEW_2C)
    records = [r for r in caplog.records if r.name == "workload_resizer.webhook"]
    assert len(records) == 1
    rec = records[0]
    assert rec.getMessage() == "admission decision" and rec.levelno == logging.INFO
    assert rec.decision == "patched" and rec.reason == "Eligible"
    assert rec.pod == "checkout-api-6d8f9c7b5d-" and rec.namespace == "shop"
    assert rec.owner == "ReplicaSet/checkout-api-6d8f9c7b5d" and rec.uid.startswith("705ab4f5")
    assert rec.originals["workload-resizer.io/original-cpu.api"] == "500m"
    assert isinstance(rec.duration_ms, float)


def test_malformed_body_is_400_and_counted_as_rejected(caplog):
    app, metrics = make_app()
    with caplog.at_level(logging.WARNING, logger="workload_resizer.webhook"):
        r = request(app, "POST", "/mutate", content=b"{not json")
    assert r.status_code == 400 and "error" in r.json()
    assert count(metrics, "rejected") == 1
    assert any(rec.levelno == logging.WARNING and rec.decision == "rejected" for rec in caplog.records)


def test_declared_oversize_body_is_413_without_reading_it():
    app, metrics = make_app(max_request_bytes=1000)
    r = request(app, "POST", "/mutate", content=b"x" * 1001)
    assert r.status_code == 413 and r.headers["connection"] == "close"
    assert "1000-byte limit" in r.json()["error"]
    assert count(metrics, "rejected") == 1


def test_streamed_oversize_body_is_413():
    app, _ = make_app(max_request_bytes=10_000)

    async def chunks():
        for _ in range(100):
            yield b"y" * 1000

    r = request(app, "POST", "/mutate", content=chunks())
    assert r.status_code == 413


def test_streamed_body_within_limit_is_reassembled():
    app, _ = make_app()

    async def chunks():
        for i in range(0, len(REVIEW_2C), 700):
            yield REVIEW_2C[i : i + 700]

    r = request(app, "POST", "/mutate", content=chunks())
    assert r.status_code == 200 and "patch" in r.json()["response"]


def test_invalid_content_length_is_400():
    app, _ = make_app()

    async def go():
        sent = []

        async def receive():
            return {"type": "http.request", "body": b"{}", "more_body": False}

        async def send(msg):
            sent.append(msg)

        scope = {"type": "http", "method": "POST", "path": "/mutate", "headers": [(b"content-length", b"abc")]}
        await app(scope, receive, send)
        return sent

    sent = run(go())
    assert sent[0]["status"] == 400


def test_get_on_mutate_is_405():
    app, metrics = make_app()
    r = request(app, "GET", "/mutate")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    assert count(metrics, "rejected") == 1


def test_skipped_pod_is_counted_as_skipped():
    app, metrics = make_app()
    review = orjson.loads(REVIEW_2C)
    review["request"]["object"]["metadata"]["annotations"]["workload-resizer.io/skip"] = "true"
    r = request(app, "POST", "/mutate", content=orjson.dumps(review))
    assert r.status_code == 200 and r.json()["response"] == {"uid": review["request"]["uid"], "allowed": True}
    assert count(metrics, "skipped") == 1 and count(metrics, "patched") == 0


def test_internal_error_is_counted_as_error(monkeypatch, caplog):
    import resizer

    monkeypatch.setattr(resizer, "originals_from_spec_annotations", lambda pod: 1 / 0)
    monkeypatch.setattr("app.review._originals_cache", {})
    app, metrics = make_app()
    with caplog.at_level(logging.ERROR, logger="workload_resizer.webhook"):
        r = request(app, "POST", "/mutate", content=REVIEW_2C)
    assert r.status_code == 200 and r.json()["response"]["allowed"] is True and "patch" not in r.json()["response"]
    assert count(metrics, "error") == 1
    assert any(rec.reason == "InternalError" and "ZeroDivisionError" in rec.error for rec in caplog.records)


def test_healthz_is_ok():
    app, _ = make_app(ready=False)
    r = request(app, "GET", "/healthz")
    assert r.status_code == 200 and r.text == "ok"


def test_readyz_is_503_until_certificate_loaded():
    app, _ = make_app(ready=False)
    r = request(app, "GET", "/readyz")
    assert r.status_code == 503 and "[-]certificate failed: no serving certificate loaded" in r.text


def test_readyz_is_ok_when_certificate_loaded():
    app, _ = make_app(ready=True)
    assert request(app, "GET", "/readyz").status_code == 200


def test_metrics_endpoint_exposes_webhook_and_process_metrics():
    metrics = Metrics()
    app = create_app(metrics, lambda: True)
    request(app, "POST", "/mutate", content=REVIEW_2C)
    r = request(app, "GET", "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    assert 'workload_resizer_webhook_requests_total{result="patched"} 1.0' in text
    assert 'workload_resizer_webhook_request_duration_seconds_bucket{le="0.0005"}' in text
    assert "workload_resizer_webhook_cert_reloads_total" in text
    assert "process_cpu_seconds_total" in text or "python_info" in text


def test_unknown_path_is_404_from_fastapi():
    app, _ = make_app()
    assert request(app, "GET", "/nope").status_code == 404


def test_failure_outside_the_decision_is_a_400_not_a_500(monkeypatch):
    app, metrics = make_app()

    def broken(*_a, **_k):
        raise RuntimeError("boom")

    monkeypatch.setattr("app.server.handle_review_inline", broken)
    r = request(app, "POST", "/mutate", content=REVIEW_2C)
    assert r.status_code == 400
    assert count(metrics, "error") == 1


def test_skipped_decision_line_has_the_same_fields_as_a_patched_one(caplog):
    app, _ = make_app()
    review = orjson.loads(REVIEW_2C)
    del review["request"]["object"]["metadata"]["ownerReferences"]
    with caplog.at_level(logging.INFO, logger="workload_resizer.webhook"):
        request(app, "POST", "/mutate", content=orjson.dumps(review))
        request(app, "POST", "/mutate", content=REVIEW_2C)
    skipped, patched = [r for r in caplog.records if r.name == "workload_resizer.webhook"]
    fields = ("uid", "pod", "namespace", "owner", "decision", "reason", "originals", "duration_ms")
    assert all(hasattr(skipped, f) and hasattr(patched, f) for f in fields)
    assert skipped.decision == "skipped" and skipped.reason == "NoController" and skipped.originals == {}
    assert skipped.owner == ""


# -- overload -----------------------------------------------------------------------------
class BlockedWorkers:
    """Stands in for app.worker.ReviewWorkers: every decision waits until ``release`` is set."""

    timeout = 2.0

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.entered = asyncio.Event()

    async def decide(self, body: Any, keys: Any, scope: Any, deadline: float, sizing: Any = None) -> Answer:
        from app.review import handle_review

        self.entered.set()
        await self.release.wait()
        return handle_review(body if isinstance(body, bytes) else b"".join(body))


_fresh = itertools.count(1000)


def costly_review(uid: str) -> bytes:
    """The bench review with 8 containers never seen before (so not memoised): decided by a
    review worker, not inline."""
    base = next(_fresh) * 10
    doc = orjson.loads(REVIEW_2C)
    doc["request"]["uid"] = uid
    template = doc["request"]["object"]["spec"]["containers"][0]
    doc["request"]["object"]["spec"]["containers"] = [
        {**template, "name": f"c{i}", "resources": {"requests": {"cpu": f"{base + i}m"}}} for i in range(8)
    ]
    return orjson.dumps(doc)


def test_overload_answers_at_once_allowing_the_pod_without_a_patch():
    """With max_inflight costly reviews already waiting for a review worker, the next costly
    review is answered at once: allowed (its uid echoed), no patch, connection closed; a small
    review is still decided; the waiting one still completes."""
    metrics = Metrics(process_metrics=False)
    app = create_app(metrics, lambda: True, 4 << 20, None, max_inflight=1)
    workers = BlockedWorkers()
    app.review_workers = workers  # type: ignore[assignment]

    async def body() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
            waiting = asyncio.create_task(client.post("/mutate", content=costly_review("uid-waiting")))
            await asyncio.wait_for(workers.entered.wait(), 2)
            shed = await asyncio.wait_for(client.post("/mutate", content=costly_review("uid-shed")), 2)
            small = await asyncio.wait_for(client.post("/mutate", content=REVIEW_2C), 2)
            workers.release.set()
            return await waiting, shed, small

    waiting, shed, small = run(body())
    assert shed.status_code == 200 and shed.headers["connection"] == "close"
    assert shed.json()["response"] == {"uid": "uid-shed", "allowed": True}
    assert small.status_code == 200 and "patch" in small.json()["response"]
    assert waiting.status_code == 200 and "patch" in waiting.json()["response"]
    assert count(metrics, "overloaded") == 1 and count(metrics, "patched") == 2


def test_bodies_still_arriving_do_not_take_the_room_of_complete_reviews():
    """A client that never finishes its bodies holds no in-flight room: with more stalled
    bodies open than --max-inflight-reviews, a complete review (small, or costly for a worker)
    is still decided with its patch."""
    metrics = Metrics(process_metrics=False)
    app = create_app(metrics, lambda: True, 4 << 20, None, max_inflight=2)
    workers = BlockedWorkers()
    workers.release.set()
    app.review_workers = workers  # type: ignore[assignment]
    never = asyncio.Event()

    async def stalled_body():
        yield REVIEW_2C[:50]
        await never.wait()

    async def body() -> tuple[httpx.Response, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webhook") as client:
            stalled = [asyncio.create_task(client.post("/mutate", content=stalled_body())) for _ in range(5)]
            await asyncio.sleep(0.05)
            small = await asyncio.wait_for(client.post("/mutate", content=REVIEW_2C), 2)
            costly = await asyncio.wait_for(client.post("/mutate", content=costly_review("uid-costly")), 2)
            for task in stalled:
                task.cancel()
            await asyncio.gather(*stalled, return_exceptions=True)
            return small, costly

    small, costly = run(body())
    assert "patch" in small.json()["response"] and "patch" in costly.json()["response"]
    assert count(metrics, "overloaded") == 0 and count(metrics, "patched") == 2


def test_overload_without_a_findable_uid_is_503_which_failure_policy_ignore_admits():
    metrics = Metrics(process_metrics=False)
    app = create_app(metrics, lambda: True, 4 << 20, None, max_inflight=0)
    r = request(app, "POST", "/mutate", content=costly_review("uid-x").replace(b'"uid"', b'"xid"'))
    assert r.status_code == 503 and count(metrics, "overloaded") == 1


def test_readiness_fails_while_draining():
    app, _ = make_app()
    assert request(app, "GET", "/readyz").status_code == 200
    app.draining = True
    assert request(app, "GET", "/readyz").status_code == 503
    r = request(app, "POST", "/mutate", content=REVIEW_2C)
    assert r.status_code == 200 and r.headers["connection"] == "close"


def test_a_review_with_more_json_objects_than_any_pod_is_not_parsed_but_allowed():
    app, metrics = make_app()
    junk = b"[" + b",".join([b"{}"] * 60_000) + b"]"
    body = REVIEW_2C.replace(b'"spec":{', b'"spec":{"junk":' + junk + b",", 1)
    r = request(app, "POST", "/mutate", content=body)
    assert r.status_code == 200 and r.json()["response"] == {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "allowed": True,
    }
    assert count(metrics, "overloaded") == 1
