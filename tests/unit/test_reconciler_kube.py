"""reconciler.kube: metric labels, client-side rate limit, API errors and watch parsing.

HTTP is served by httpx.MockTransport: no sockets, no cluster.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable

import httpx
import orjson
import pytest

from reconciler.kube import (
    MERGE_PATCH,
    ApiError,
    Credentials,
    KubeClient,
    WatchExpired,
    _resource_label,
)
from reconciler.ratelimit import TokenBucket

pytestmark = pytest.mark.timeout(10)

SERVER = "https://kube.test"


# ------------------------------------------------------------------ _resource_label


@pytest.mark.parametrize(("path", "label"), [
    ("/api/v1/namespaces/ns/pods/x/resize", "pods/resize"),
    ("/api/v1/namespaces/ns/pods/x", "pods"),
    ("/api/v1/namespaces/ns/pods", "pods"),
    ("/api/v1/pods", "pods"),
    ("/api/v1/pods?fieldSelector=spec.nodeName!%3D&watch=1", "pods"),
    ("/api/v1/nodes", "nodes"),
    ("/api/v1/nodes/node-1", "nodes"),
    ("/api/v1/nodes/node-1/status", "nodes/status"),
    ("/apis/coordination.k8s.io/v1/namespaces/ns/leases/x", "leases"),
    ("/apis/coordination.k8s.io/v1/leases", "leases"),
    ("/api/v1/namespaces/ns/events", "events"),
    ("/api/v1/namespaces/ns/events/web.17f2", "events"),
    ("/api/v1/namespaces/ns/configmaps/workload-resizer-config", "configmaps"),
    ("/api/v1/namespaces/ns", "namespaces"),
    ("/api/v1/namespaces", "namespaces"),
    ("/api/v1", "unknown"),
    ("/", "unknown"),
])
def test_resource_label_names_the_resource_and_subresource(path, label):
    assert _resource_label(path) == label


# ------------------------------------------------------------------ TokenBucket


def _timed_takes(bucket: TokenBucket, n: int) -> float:
    async def body() -> float:
        start = time.monotonic()
        for _ in range(n):
            await bucket.take()
        return time.monotonic() - start
    return asyncio.run(body())


def test_token_bucket_lets_a_burst_through_at_once():
    assert _timed_takes(TokenBucket(qps=1.0, burst=10), 10) < 0.05


def test_token_bucket_paces_takes_beyond_the_burst_at_qps():
    async def body() -> tuple[float, float]:
        bucket = TokenBucket(qps=100.0, burst=10)
        start = time.monotonic()
        for _ in range(10):
            await bucket.take()
        burst = time.monotonic() - start
        for _ in range(20):
            await bucket.take()
        return burst, time.monotonic() - start - burst
    burst, paced = asyncio.run(body())
    assert burst < 0.05
    assert 0.15 <= paced < 2.0          # 20 tokens at 100/s is 0.2 s


def test_token_bucket_refill_is_capped_at_the_burst():
    async def body() -> float:
        bucket = TokenBucket(qps=20.0, burst=3)
        for _ in range(3):
            await bucket.take()
        await asyncio.sleep(0.35)       # 7 tokens' worth of time, but only 3 fit
        start = time.monotonic()
        for _ in range(6):
            await bucket.take()
        return time.monotonic() - start
    assert asyncio.run(body()) >= 0.1   # 3 free, then 3 at 20/s = 0.15 s


def test_token_bucket_with_zero_qps_does_not_limit():
    assert _timed_takes(TokenBucket(qps=0, burst=1), 200) < 0.1


def test_token_bucket_with_zero_burst_still_admits_one_request():
    assert _timed_takes(TokenBucket(qps=1.0, burst=0), 1) < 0.05


# ------------------------------------------------------------------ ApiError


@pytest.mark.parametrize("status", [409, 429, 500, 502, 503, 504])
def test_conflicts_throttling_and_server_errors_are_retryable(status):
    assert ApiError(status, {}).retryable


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 422])
def test_client_errors_are_not_retryable(status):
    assert not ApiError(status, {}).retryable


def test_causes_lists_the_cause_types_of_the_status_details():
    err = ApiError(422, {"kind": "Status", "reason": "Invalid", "message": "nope", "details": {"causes": [
        {"type": "FieldValueInvalid", "field": "spec.containers[0].resources"},
        {"type": "NodeCapacity", "message": "exceeds"}, {"message": "untyped"}]}})
    assert err.causes == ["FieldValueInvalid", "NodeCapacity", ""]


@pytest.mark.parametrize("body", [{}, {"details": None}, {"details": {"name": "x"}}, {"details": {"causes": None}}])
def test_causes_is_empty_without_details(body):
    assert ApiError(422, body).causes == []


def test_api_error_carries_reason_and_message_of_the_status():
    err = ApiError(409, {"kind": "Status", "reason": "Conflict", "message": "the object has been modified"})
    assert (err.status, err.reason, err.message) == (409, "Conflict", "the object has been modified")
    assert str(err) == "HTTP 409 Conflict: the object has been modified"


# ------------------------------------------------------------------ a client over MockTransport


def _client(handler: Callable[[httpx.Request], httpx.Response], token: str | None = "s3cret") -> KubeClient:
    client = KubeClient(Credentials(server=SERVER, ssl_context=False, token=lambda: token),
                        qps=0, burst=1, max_connections=1)
    client._http = httpx.AsyncClient(base_url=SERVER, transport=httpx.MockTransport(handler),
                                     headers={"Accept": "application/json"})
    return client


def _lines(*events: dict | str) -> bytes:
    return b"".join((e.encode() if isinstance(e, str) else orjson.dumps(e)) + b"\n" for e in events)


def _event(kind: str, name: str, rv: str) -> dict:
    return {"type": kind, "object": {"kind": "Pod", "metadata": {"name": name, "namespace": "ns",
                                                                  "resourceVersion": rv}}}


def _collect(client: KubeClient, path: str = "/api/v1/pods", rv: str = "100",
             params: dict | None = None) -> tuple[list[dict], BaseException | None]:
    async def body() -> tuple[list[dict], BaseException | None]:
        events: list[dict] = []
        try:
            async for event in client.watch(path, rv, params or {}, server_timeout=300, idle_timeout=5):
                events.append(event)
        except (WatchExpired, ApiError) as err:
            return events, err
        finally:
            await client.close()
        return events, None
    return asyncio.run(body())


def test_watch_yields_each_event_line_in_order():
    body = _lines(_event("ADDED", "a", "101"), _event("MODIFIED", "a", "102"), _event("DELETED", "a", "103"))
    events, err = _collect(_client(lambda req: httpx.Response(200, content=body)))
    assert err is None
    assert [(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in events] == [
        ("ADDED", "101"), ("MODIFIED", "102"), ("DELETED", "103")]


def test_watch_skips_blank_lines():
    body = _lines(_event("ADDED", "a", "101"), "", "", _event("BOOKMARK", "", "150"))
    events, err = _collect(_client(lambda req: httpx.Response(200, content=body)))
    assert err is None
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]


def test_watch_reassembles_an_event_split_across_chunks():
    payload = _lines(_event("ADDED", "a", "101"), _event("ADDED", "b", "102"))

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(payload), 7):
            yield payload[i:i + 7]

    events, err = _collect(_client(lambda req: httpx.Response(200, content=chunks())))
    assert err is None
    assert [e["object"]["metadata"]["name"] for e in events] == ["a", "b"]


def test_watch_asks_for_a_bookmarked_watch_from_the_resource_version():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=b"")

    _collect(_client(handler), rv="4711", params={"fieldSelector": "spec.nodeName!="})
    query = dict(seen[0].url.params)
    assert seen[0].method == "GET" and seen[0].url.path == "/api/v1/pods"
    assert query == {"fieldSelector": "spec.nodeName!=", "watch": "1", "resourceVersion": "4711",
                     "allowWatchBookmarks": "true", "timeoutSeconds": "300"}
    assert seen[0].headers["Authorization"] == "Bearer s3cret"


def test_watch_answered_with_410_gone_raises_watch_expired():
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
    events, err = _collect(_client(lambda req: httpx.Response(410, json=status)))
    assert events == [] and isinstance(err, WatchExpired)


def test_watch_error_event_with_code_410_raises_watch_expired_after_the_earlier_events():
    body = _lines(_event("ADDED", "a", "101"),
                  {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}},
                  _event("ADDED", "b", "102"))
    events, err = _collect(_client(lambda req: httpx.Response(200, content=body)))
    assert [e["object"]["metadata"]["name"] for e in events] == ["a"]
    assert isinstance(err, WatchExpired)


def test_watch_error_event_with_another_code_raises_api_error_with_that_status():
    body = _lines({"type": "ERROR", "object": {"kind": "Status", "code": 500, "reason": "InternalError",
                                               "message": "etcd unavailable"}})
    _, err = _collect(_client(lambda req: httpx.Response(200, content=body)))
    assert isinstance(err, ApiError)
    assert (err.status, err.reason, err.message) == (500, "InternalError", "etcd unavailable")
    assert err.retryable


def test_watch_error_event_without_a_code_is_a_server_error():
    _, err = _collect(_client(lambda req: httpx.Response(200, content=_lines({"type": "ERROR", "object": {}}))))
    assert isinstance(err, ApiError) and err.status == 500


def test_watch_refused_with_a_status_body_raises_api_error():
    status = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "pods is forbidden"}
    _, err = _collect(_client(lambda req: httpx.Response(403, json=status)))
    assert isinstance(err, ApiError)
    assert (err.status, err.reason, err.message) == (403, "Forbidden", "pods is forbidden")


def test_watch_refused_with_a_non_json_body_keeps_the_text_as_message():
    _, err = _collect(_client(lambda req: httpx.Response(502, content=b"<html>Bad Gateway</html>")))
    assert isinstance(err, ApiError)
    assert err.status == 502 and "Bad Gateway" in err.message


# ------------------------------------------------------------------ request


def _request(client: KubeClient, method: str, *args):
    async def body():
        try:
            return await getattr(client, method)(*args)
        finally:
            await client.close()
    return asyncio.run(body())


def test_request_returns_the_parsed_json_body():
    pod = {"kind": "Pod", "metadata": {"name": "p"}}
    assert _request(_client(lambda req: httpx.Response(200, json=pod)), "get", "/api/v1/namespaces/ns/pods/p") == pod


def test_request_with_an_empty_success_body_returns_an_empty_dict():
    assert _request(_client(lambda req: httpx.Response(200, content=b"")), "get", "/api/v1/nodes") == {}


def test_request_with_a_conflict_raises_a_retryable_api_error():
    status = {"kind": "Status", "code": 409, "reason": "Conflict", "message": "modified"}
    with pytest.raises(ApiError) as exc:
        _request(_client(lambda req: httpx.Response(409, json=status)), "update", "/x", {"a": 1})
    assert exc.value.status == 409 and exc.value.retryable and exc.value.reason == "Conflict"


def test_patch_sends_the_json_body_with_its_patch_content_type():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    _request(_client(handler), "patch", "/api/v1/namespaces/ns/pods/p", {"metadata": {"annotations": {"a": "b"}}})
    assert seen[0].method == "PATCH"
    assert seen[0].headers["Content-Type"] == MERGE_PATCH
    assert orjson.loads(seen[0].content) == {"metadata": {"annotations": {"a": "b"}}}


def test_requests_without_a_token_send_no_authorization_header():
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={})

    _request(_client(handler, token=None), "get", "/api/v1/nodes")
    assert "Authorization" not in seen[0].headers


# ------------------------------------------------------------------ replies that are not JSON objects

HTML_503 = b"<html><body><h1>503 Service Unavailable</h1>upstream connect error</body></html>"


@pytest.mark.parametrize(("status", "body"), [
    (503, HTML_503), (502, b"\xff\xfe garbage"), (500, b"[1, 2]"), (403, b"null"),
])
def test_a_failed_request_with_any_body_is_an_api_error(status: int, body: bytes):
    with pytest.raises(ApiError) as exc:
        _request(_client(lambda req: httpx.Response(status, content=body)), "get", "/api/v1/nodes")
    assert exc.value.status == status
    assert exc.value.causes == []


@pytest.mark.parametrize("body", [HTML_503, b"[]", b"\"text\"", b"12", b"{truncated"])
def test_a_successful_reply_that_is_not_a_json_object_is_a_retryable_api_error(body: bytes):
    with pytest.raises(ApiError) as exc:
        _request(_client(lambda req: httpx.Response(200, content=body)), "get", "/api/v1/nodes")
    assert exc.value.reason == "UnexpectedReply" and exc.value.retryable


def test_odd_status_details_do_not_break_causes():
    assert ApiError(422, {"details": "oops"}).causes == []
    assert ApiError(422, {"details": {"causes": ["x", {"type": "FieldValueInvalid"}]}}).causes == ["FieldValueInvalid"]


@pytest.mark.parametrize("line", ["<html>", "[1]", "7"])
def test_a_watch_line_that_is_not_a_json_object_is_an_api_error(line: str):
    body = _lines(_event("ADDED", "a", "101"), line)
    events, err = _collect(_client(lambda req: httpx.Response(200, content=body)))
    assert [e["object"]["metadata"]["name"] for e in events] == ["a"]
    assert isinstance(err, ApiError) and err.reason == "UnexpectedReply"
