"""kube: metric labels, client-side rate limit, API errors, requests and watches.

Requests and watches go over real sockets to a small HTTP/1.1 server in the test's
own event loop (tests/unit/kube_server.py): keep-alive, connection limits, broken and
silent connections, chunked streams and TLS with client certificates are the
client's behaviour on the wire, so they are tested there. No cluster.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from kube.client import (
    MERGE_PATCH,
    ApiError,
    Credentials,
    KubeClient,
    TransportError,
    WatchExpired,
    WatchIdle,
    _loads_trimmed,
    _resource_label,
)
from kube.ratelimit import TokenBucket
from tests.unit.kube_server import Handler, KubeServer, Reply, Seen, tls_pair

pytestmark = pytest.mark.timeout(10)


# ------------------------------------------------------------------ _resource_label


@pytest.mark.parametrize(
    ("path", "label"),
    [
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
    ],
)
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
    assert 0.15 <= paced < 2.0  # 20 tokens at 100/s is 0.2 s


def test_token_bucket_refill_is_capped_at_the_burst():
    async def body() -> float:
        bucket = TokenBucket(qps=20.0, burst=3)
        for _ in range(3):
            await bucket.take()
        await asyncio.sleep(0.35)  # 7 tokens' worth of time, but only 3 fit
        start = time.monotonic()
        for _ in range(6):
            await bucket.take()
        return time.monotonic() - start

    assert asyncio.run(body()) >= 0.1  # 3 free, then 3 at 20/s = 0.15 s


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


def test_the_refusal_of_an_admission_plugin_still_starting_is_retryable():
    """What PodResizeValidator and the other informer-backed plugins answer until they sync."""
    starting = {"reason": "Forbidden", "message": 'pods "web-1" is forbidden: not yet ready to handle request'}
    assert ApiError(403, starting).retryable
    assert not ApiError(403, {"reason": "Forbidden", "message": "not yet ready to handle request: no"}).retryable
    assert not ApiError(404, {"message": "not yet ready to handle request"}).retryable


def test_causes_lists_the_cause_reasons_of_the_status_details():
    """metav1.StatusCause.Type is serialised as "reason" (what the 1.36 apiserver sends for NodeCapacity)."""
    err = ApiError(
        403,
        {
            "kind": "Status",
            "reason": "Forbidden",
            "message": "nope",
            "details": {
                "causes": [
                    {"reason": "FieldValueInvalid", "field": "spec.containers[0].resources"},
                    {"reason": "NodeCapacity"},
                    {"message": "without a reason"},
                    "not an object",
                ]
            },
        },
    )
    assert err.causes == ["FieldValueInvalid", "NodeCapacity", "", ""]


def test_a_cause_keyed_type_is_not_a_reason():
    assert ApiError(403, {"details": {"causes": [{"type": "NodeCapacity"}]}}).causes == [""]


@pytest.mark.parametrize(
    "body", [{}, {"details": None}, {"details": {"name": "x"}}, {"details": {"causes": None}}, {"details": "text"}]
)
def test_causes_is_empty_without_details(body):
    assert ApiError(422, body).causes == []


def test_api_error_carries_reason_and_message_of_the_status():
    err = ApiError(409, {"kind": "Status", "reason": "Conflict", "message": "the object has been modified"})
    assert (err.status, err.reason, err.message) == (409, "Conflict", "the object has been modified")
    assert str(err) == "HTTP 409 Conflict: the object has been modified"


# ------------------------------------------------------------------ a client against a local server


def _run(
    handler: Handler,
    use: Callable[[KubeClient], Any],
    token: str | None = "s3cret",
    max_connections: int = 4,
    timeout: float = 5.0,
    tls: bool = False,
) -> tuple[Any, KubeServer]:
    """Start a server answering with `handler`, run `use(client)` against it, close both."""

    async def body() -> tuple[Any, KubeServer]:
        server = KubeServer(handler, tls=tls_pair() if tls else None)
        await server.start()
        client = KubeClient(
            Credentials(server=server.url, ssl_context=server.client_context(), token=lambda: token),
            qps=0,
            burst=1,
            max_connections=max_connections,
            timeout=timeout,
        )
        try:
            return await use(client), server
        finally:
            await client.close()
            await server.stop()

    return asyncio.run(body())


def _json(status: int, obj: Any) -> Reply:
    return Reply(status, orjson.dumps(obj))


def _lines(*events: dict | str) -> bytes:
    return b"".join((e.encode() if isinstance(e, str) else orjson.dumps(e)) + b"\n" for e in events)


def _event(kind: str, name: str, rv: str) -> dict:
    return {
        "type": kind,
        "object": {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}},
    }


def _watch(
    client: KubeClient, path: str = "/api/v1/pods", rv: str = "100", params: dict | None = None, idle_timeout: float = 5
) -> Any:
    async def collect() -> tuple[list[dict], BaseException | None]:
        events: list[dict] = []
        try:
            async for event in client.watch(path, rv, params or {}, server_timeout=300, idle_timeout=idle_timeout):
                events.append(event)
        except (WatchExpired, ApiError, TransportError) as err:
            return events, err
        return events, None

    return collect()


def _collect(handler: Handler, **kw: Any) -> tuple[list[dict], BaseException | None]:
    return _run(handler, lambda client: _watch(client, **kw))[0]


def test_watch_yields_each_event_line_in_order():
    body = _lines(_event("ADDED", "a", "101"), _event("MODIFIED", "a", "102"), _event("DELETED", "a", "103"))
    events, err = _collect(lambda req: Reply(200, [body]))
    assert err is None
    assert [(e["type"], e["object"]["metadata"]["resourceVersion"]) for e in events] == [
        ("ADDED", "101"),
        ("MODIFIED", "102"),
        ("DELETED", "103"),
    ]


def test_watch_skips_blank_lines():
    body = _lines(_event("ADDED", "a", "101"), "", "", _event("BOOKMARK", "", "150"))
    events, err = _collect(lambda req: Reply(200, [body]))
    assert err is None
    assert [e["type"] for e in events] == ["ADDED", "BOOKMARK"]


def test_watch_reassembles_an_event_split_across_chunks():
    payload = _lines(_event("ADDED", "a", "101"), _event("ADDED", "b", "102"))
    chunks = [payload[i : i + 7] for i in range(0, len(payload), 7)]
    events, err = _collect(lambda req: Reply(200, chunks))
    assert err is None
    assert [e["object"]["metadata"]["name"] for e in events] == ["a", "b"]


def test_watch_keeps_a_last_event_without_a_trailing_newline():
    payload = _lines(_event("ADDED", "a", "101")) + orjson.dumps(_event("ADDED", "b", "102"))
    events, err = _collect(lambda req: Reply(200, [payload]))
    assert err is None
    assert [e["object"]["metadata"]["name"] for e in events] == ["a", "b"]


def test_watch_asks_for_a_bookmarked_watch_from_the_resource_version():
    (_, server) = _run(
        lambda req: Reply(200, [b""]),
        lambda client: _watch(client, rv="4711", params={"fieldSelector": "spec.nodeName!="}),
    )
    seen = server.seen[0]
    assert seen.method == "GET" and seen.path == "/api/v1/pods"
    assert seen.query == {
        "fieldSelector": "spec.nodeName!=",
        "watch": "1",
        "resourceVersion": "4711",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "300",
    }
    assert seen.headers["authorization"] == "Bearer s3cret"


def test_watch_answered_with_410_gone_raises_watch_expired():
    status = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
    events, err = _collect(lambda req: _json(410, status))
    assert events == [] and isinstance(err, WatchExpired)


def test_watch_error_event_with_code_410_raises_watch_expired_after_the_earlier_events():
    body = _lines(
        _event("ADDED", "a", "101"),
        {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}},
        _event("ADDED", "b", "102"),
    )
    events, err = _collect(lambda req: Reply(200, [body]))
    assert [e["object"]["metadata"]["name"] for e in events] == ["a"]
    assert isinstance(err, WatchExpired)


def test_watch_error_event_with_another_code_raises_api_error_with_that_status():
    body = _lines(
        {
            "type": "ERROR",
            "object": {"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd unavailable"},
        }
    )
    _, err = _collect(lambda req: Reply(200, [body]))
    assert isinstance(err, ApiError)
    assert (err.status, err.reason, err.message) == (500, "InternalError", "etcd unavailable")
    assert err.retryable


def test_watch_error_event_without_a_code_is_a_server_error():
    _, err = _collect(lambda req: Reply(200, [_lines({"type": "ERROR", "object": {}})]))
    assert isinstance(err, ApiError) and err.status == 500


def test_watch_refused_with_a_status_body_raises_api_error():
    status = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "pods is forbidden"}
    _, err = _collect(lambda req: _json(403, status))
    assert isinstance(err, ApiError)
    assert (err.status, err.reason, err.message) == (403, "Forbidden", "pods is forbidden")


def test_watch_refused_with_a_non_json_body_keeps_the_text_as_message():
    _, err = _collect(lambda req: Reply(502, b"<html>Bad Gateway</html>"))
    assert isinstance(err, ApiError)
    assert err.status == 502 and "Bad Gateway" in err.message


def test_a_silent_watch_raises_watch_idle_after_the_idle_timeout():
    body = _lines(_event("ADDED", "a", "101"))
    started = time.monotonic()
    events, err = _collect(lambda req: Reply(200, [body], hang=True), idle_timeout=0.3)
    assert [e["object"]["metadata"]["name"] for e in events] == ["a"]
    assert isinstance(err, WatchIdle) and isinstance(err, TransportError)
    assert time.monotonic() - started < 4


def test_a_watch_broken_mid_stream_raises_transport_error_after_the_events_received():
    body = _lines(_event("ADDED", "a", "101"))
    events, err = _collect(lambda req: Reply(200, [body], abort=True))
    assert [e["object"]["metadata"]["name"] for e in events] == ["a"]
    assert isinstance(err, TransportError) and not isinstance(err, WatchIdle)


def test_a_watch_the_server_ends_cleanly_leaves_its_connection_for_the_next_request():
    async def use(client: KubeClient) -> None:
        await _watch(client)
        await client.get("/api/v1/nodes")

    def handler(req: Seen) -> Reply:
        return Reply(200, [_lines(_event("ADDED", "a", "1"))]) if "watch" in req.query else _json(200, {})

    _, server = _run(handler, use)
    assert server.connections == 1


# ------------------------------------------------------------------ request


def _request(handler: Handler, method: str, *args: Any, **kw: Any) -> Any:
    return _run(handler, lambda client: getattr(client, method)(*args), **kw)


def test_request_returns_the_parsed_json_body():
    pod = {"kind": "Pod", "metadata": {"name": "p"}}
    assert _request(lambda req: _json(200, pod), "get", "/api/v1/namespaces/ns/pods/p")[0] == pod


def test_request_reads_a_chunked_body():
    pod = orjson.dumps({"kind": "Pod", "metadata": {"name": "p"}})
    assert _request(lambda req: Reply(200, [pod[:5], pod[5:]]), "get", "/api/v1/pods/p")[0]["metadata"] == {"name": "p"}


def test_request_with_an_empty_success_body_returns_an_empty_dict():
    assert _request(lambda req: Reply(200, b""), "get", "/api/v1/nodes")[0] == {}


def test_request_sends_the_query_parameters():
    _, server = _run(
        lambda req: _json(200, {}),
        lambda client: client.get("/api/v1/pods", limit="500", fieldSelector="spec.nodeName!="),
    )
    assert server.seen[0].path == "/api/v1/pods"
    assert server.seen[0].query == {"limit": "500", "fieldSelector": "spec.nodeName!="}


def test_request_with_a_conflict_raises_a_retryable_api_error():
    status = {"kind": "Status", "code": 409, "reason": "Conflict", "message": "modified"}
    with pytest.raises(ApiError) as exc:
        _request(lambda req: _json(409, status), "update", "/x", {"a": 1})
    assert exc.value.status == 409 and exc.value.retryable and exc.value.reason == "Conflict"


def test_patch_sends_the_json_body_with_its_patch_content_type():
    _, server = _request(
        lambda req: _json(200, {}), "patch", "/api/v1/namespaces/ns/pods/p", {"metadata": {"annotations": {"a": "b"}}}
    )
    seen = server.seen[0]
    assert seen.method == "PATCH"
    assert seen.headers["content-type"] == MERGE_PATCH
    assert orjson.loads(seen.body) == {"metadata": {"annotations": {"a": "b"}}}


def test_requests_without_a_token_send_no_authorization_header():
    _, server = _request(lambda req: _json(200, {}), "get", "/api/v1/nodes", token=None)
    assert "authorization" not in server.seen[0].headers


def test_every_request_asks_the_token_source_so_a_rotated_token_is_used():
    current = {"token": "first"}

    async def use(client: KubeClient) -> None:
        await client.get("/a")
        current["token"] = "second"
        await client.get("/b")

    async def body() -> KubeServer:
        server = KubeServer(lambda req: _json(200, {}))
        await server.start()
        client = KubeClient(
            Credentials(server=server.url, ssl_context=False, token=lambda: current["token"]),
            qps=0,
            burst=1,
            max_connections=1,
        )
        try:
            await use(client)
        finally:
            await client.close()
            await server.stop()
        return server

    server = asyncio.run(body())
    assert [s.headers["authorization"] for s in server.seen] == ["Bearer first", "Bearer second"]


def test_requests_reuse_one_kept_alive_connection():
    async def use(client: KubeClient) -> None:
        for i in range(20):
            await client.get(f"/api/v1/namespaces/ns/pods/p{i}")

    _, server = _run(lambda req: _json(200, {}), use)
    assert len(server.seen) == 20 and server.connections == 1


def test_concurrent_requests_open_at_most_max_connections():
    async def use(client: KubeClient) -> list[dict]:
        return await asyncio.gather(*(client.get(f"/api/v1/namespaces/ns/pods/p{i}") for i in range(12)))

    results, server = _run(lambda req: Reply(200, b"{}", delay=0.05), use, max_connections=3)
    assert len(results) == 12 and len(server.seen) == 12
    assert server.connections == 3 and server.max_concurrent == 3


def test_a_kept_alive_connection_closed_by_the_server_is_replaced_transparently():
    answered = {"n": 0}

    def handler(req: Seen) -> Reply:
        answered["n"] += 1
        # The second request meets the first connection just as the server drops it (idle timeout).
        return Reply(200, b"{}", close_before_answer=answered["n"] == 2)

    async def use(client: KubeClient) -> list[dict]:
        return [await client.get("/a"), await client.get("/b")]

    results, server = _run(handler, use)
    assert results == [{}, {}]
    assert server.connections == 2


def test_a_fresh_connection_closed_without_an_answer_is_a_transport_error():
    with pytest.raises(TransportError):
        _request(lambda req: Reply(200, b"{}", close_before_answer=True), "get", "/a")


def test_a_truncated_answer_is_a_transport_error():
    with pytest.raises(TransportError):
        _request(lambda req: Reply(200, b"{}", truncate=True), "get", "/a")


def test_an_answer_that_never_comes_times_out_as_a_transport_error():
    started = time.monotonic()
    with pytest.raises(TransportError) as exc:
        _request(lambda req: Reply(200, b"{}", hang=True), "get", "/a", timeout=0.3)
    assert isinstance(exc.value.__cause__, TimeoutError)
    assert time.monotonic() - started < 4


def test_an_unreachable_server_is_a_transport_error():
    async def body() -> None:
        server = KubeServer(lambda req: _json(200, {}))
        await server.start()
        url = server.url
        await server.stop()  # nothing listens on that port any more
        client = KubeClient(
            Credentials(server=url, ssl_context=False, token=lambda: None), qps=0, burst=1, max_connections=1
        )
        try:
            await client.get("/a")
        finally:
            await client.close()

    with pytest.raises(TransportError):
        asyncio.run(body())


def test_tls_with_a_client_certificate_and_a_verified_server():
    pod = {"kind": "Pod", "metadata": {"name": "p"}}
    result, server = _request(lambda req: _json(200, pod), "get", "/api/v1/namespaces/ns/pods/p", tls=True)
    assert result == pod
    assert server.peer_certificates == ["reconciler-client"]


def test_tls_to_a_server_the_ca_does_not_vouch_for_is_a_transport_error():
    async def body() -> None:
        server = KubeServer(lambda req: _json(200, {}), tls=tls_pair())
        await server.start()
        client = KubeClient(
            Credentials(server=server.url, ssl_context=tls_pair().client_context(), token=lambda: None),
            qps=0,
            burst=1,
            max_connections=1,
        )
        try:
            await client.get("/a")
        finally:
            await client.close()
            await server.stop()

    with pytest.raises(TransportError):
        asyncio.run(body())


# ------------------------------------------------------------------ replies that are not JSON objects

HTML_503 = b"<html><body><h1>503 Service Unavailable</h1>upstream connect error</body></html>"


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (503, HTML_503),
        (502, b"\xff\xfe garbage"),
        (500, b"[1, 2]"),
        (403, b"null"),
    ],
)
def test_a_failed_request_with_any_body_is_an_api_error(status: int, body: bytes):
    with pytest.raises(ApiError) as exc:
        _request(lambda req: Reply(status, body), "get", "/api/v1/nodes")
    assert exc.value.status == status
    assert exc.value.causes == []


@pytest.mark.parametrize("body", [HTML_503, b"[]", b'"text"', b"12", b"{truncated"])
def test_a_successful_reply_that_is_not_a_json_object_is_a_retryable_api_error(body: bytes):
    with pytest.raises(ApiError) as exc:
        _request(lambda req: Reply(200, body), "get", "/api/v1/nodes")
    assert exc.value.reason == "UnexpectedReply" and exc.value.retryable


def test_a_write_checks_the_status_and_does_not_read_the_body():
    """KubeClient.write: a reply the caller does not need is not decoded (even one that is no JSON)."""
    seen: list[Seen] = []

    def handler(req: Seen) -> Reply:
        seen.append(req)
        return Reply(201, HTML_503)

    result, _ = _request(handler, "write", "POST", "/api/v1/namespaces/ns/events", {"kind": "Event"})
    assert result is None
    assert (seen[0].method, seen[0].path, orjson.loads(seen[0].body)) == (
        "POST",
        "/api/v1/namespaces/ns/events",
        {"kind": "Event"},
    )
    with pytest.raises(ApiError) as exc:
        _request(
            lambda req: _json(409, {"reason": "Conflict", "message": "modified"}),
            "write",
            "PATCH",
            "/api/v1/namespaces/ns/pods/p",
            {"metadata": {}},
            "application/merge-patch+json",
        )
    assert exc.value.status == 409 and exc.value.reason == "Conflict"


def test_odd_status_details_do_not_break_causes():
    assert ApiError(422, {"details": "oops"}).causes == []
    assert ApiError(422, {"details": {"causes": ["x", {"reason": "FieldValueInvalid"}]}}).causes == [
        "",
        "FieldValueInvalid",
    ]


@pytest.mark.parametrize("line", ["<html>", "[1]", "7"])
def test_a_watch_line_that_is_not_a_json_object_is_an_api_error(line: str):
    body = _lines(_event("ADDED", "a", "101"), line)
    events, err = _collect(lambda req: Reply(200, [body]))
    assert [e["object"]["metadata"]["name"] for e in events] == ["a"]
    assert isinstance(err, ApiError) and err.reason == "UnexpectedReply"


# ------------------------------------------------------------------ managedFields dropped before decoding

DATA = Path(__file__).parent / "data"
# Bytes exactly as kube-apiserver v1.36.4 wrote them (GET of a pod our reconciler resized, and of a KWOK node).
APISERVER_OBJECTS = ["apiserver-pod.json", "apiserver-node.json"]


def _without_managed(obj: dict) -> dict:
    trimmed = copy.deepcopy(obj)
    trimmed["metadata"]["managedFields"] = []
    return trimmed


@pytest.mark.parametrize("name", APISERVER_OBJECTS)
def test_an_apiserver_object_decodes_to_itself_minus_managed_fields(name):
    raw = (DATA / name).read_bytes().strip()
    full = orjson.loads(raw)
    assert len(full["metadata"]["managedFields"]) >= 2, "the sample must carry managedFields"
    assert _loads_trimmed(raw, watch_event=False) == _without_managed(full)
    event = b'{"type":"MODIFIED","object":' + raw + b"}"
    assert _loads_trimmed(event, watch_event=True) == {"type": "MODIFIED", "object": _without_managed(full)}


def test_text_that_looks_like_the_markers_inside_strings_changes_nothing():
    full = orjson.loads((DATA / "apiserver-pod.json").read_bytes())
    full["metadata"]["annotations"]["x"] = '"managedFields":[ ]},"spec": ]}'
    full["metadata"]["labels"]["managedFields"] = "v"
    full["metadata"]["managedFields"][0]["manager"] = ']},"spec":{'
    assert _loads_trimmed(orjson.dumps(full), watch_event=False) == _without_managed(full)


@pytest.mark.parametrize(
    "layout",
    [
        # keys sorted (e.g. re-serialised by a proxy): name, resourceVersion, ... come after managedFields
        lambda obj: orjson.dumps(obj, option=orjson.OPT_SORT_KEYS),
        # a list: not trimmed at all
        lambda obj: orjson.dumps({"kind": "PodList", "metadata": {"resourceVersion": "9"}, "items": [obj, obj]}),
        # no spec after the metadata (e.g. a ConfigMap)
        lambda obj: orjson.dumps({"metadata": obj["metadata"], "data": {"a": "b"}}),
    ],
)
def test_any_other_layout_is_left_to_a_full_decode(layout):
    full = orjson.loads((DATA / "apiserver-pod.json").read_bytes())
    full["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = True
    assert _loads_trimmed(layout(full), watch_event=False) is None


def _trimming_client(server_url: str, context: Any) -> KubeClient:
    return KubeClient(
        Credentials(server=server_url, ssl_context=context, token=lambda: None),
        qps=0,
        burst=1,
        max_connections=2,
        drop_managed_fields=True,
    )


def test_a_client_told_to_drops_managed_fields_of_replies_and_watch_events_and_keeps_the_rest():
    raw = (DATA / "apiserver-pod.json").read_bytes().strip()
    full = orjson.loads(raw)
    sorted_keys = orjson.dumps(full, option=orjson.OPT_SORT_KEYS)

    def handler(req: Seen) -> Reply:
        if req.query.get("watch"):
            return Reply(
                200,
                [b'{"type":"ADDED","object":' + raw + b"}\n" + b'{"type":"MODIFIED","object":' + sorted_keys + b"}\n"],
            )
        return Reply(200, raw)

    async def body() -> tuple[dict, list[dict]]:
        server = KubeServer(handler)
        await server.start()
        client = _trimming_client(server.url, server.client_context())
        try:
            reply = await client.patch("/api/v1/namespaces/ns/pods/p", {"metadata": {}})
            events = [e async for e in client.watch("/api/v1/pods", "1", {}, server_timeout=300, idle_timeout=5)]
            return reply, events
        finally:
            await client.close()
            await server.stop()

    reply, events = asyncio.run(body())
    assert reply == _without_managed(full)
    assert events[0]["object"] == _without_managed(full)
    assert events[1]["object"] == full, "a layout it cannot vouch for is decoded whole"


def test_get_text_returns_a_plain_reply_and_raises_on_errors():
    def handler(req: Seen) -> Reply:
        if req.path.endswith("/log"):
            return Reply(200, b'warming up\n{"score": 12.5}\n')
        return _json(404, {"kind": "Status", "reason": "NotFound", "message": 'pods "x" not found'})

    async def use(client: KubeClient) -> tuple[str, ApiError]:
        text = await client.get_text("/api/v1/namespaces/ns/pods/p/log", container="c", tailLines=20)
        with pytest.raises(ApiError) as caught:
            await client.get_text("/api/v1/namespaces/ns/pods/x")
        return text, caught.value

    (text, error), server = _run(handler, use)
    assert text == 'warming up\n{"score": 12.5}\n'
    assert error.status == 404
    assert server.seen[0].query == {"container": "c", "tailLines": "20"}


def test_a_cancellation_that_comes_as_the_connection_is_made_is_not_swallowed(monkeypatch):
    """Ctrl-C (a task cancelled) at the moment a connection completes must still cancel: 3.11's
    wait_for returned the connection instead, and a command interrupted then went on running."""
    from kube.transport import Pool

    async def connect(task_box: list[asyncio.Task[Any]]) -> str:
        loop = asyncio.get_running_loop()

        async def connected_as_cancelled(factory, host, port, **kwargs):
            task_box[0].cancel()  # the cancellation and the connection land in the same loop turn
            return None, factory()

        monkeypatch.setattr(loop, "create_connection", connected_as_cancelled)
        await Pool("http://127.0.0.1:1", None, max_connections=1).acquire()
        return "connected"

    async def main() -> bool:
        task_box: list[asyncio.Task[Any]] = []
        task_box.append(asyncio.create_task(connect(task_box)))
        await asyncio.wait(task_box)
        return task_box[0].cancelled()

    assert asyncio.run(main()), "the connection was returned, the cancellation lost"
