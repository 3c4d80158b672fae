"""Thin asynchronous Kubernetes API client: raw JSON over keep-alive HTTP/1.1, nothing more.

Credentials come from kube.credentials, connections from kube.transport (which says why not
httpx); bodies are parsed with orjson into the plain dicts the pure core consumes: the official
client's model classes would cost several times the CPU and memory per pod.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlencode

import httptools
import orjson

from kube import metrics
from kube.credentials import Credentials, unverified_context
from kube.errors import KubeError
from kube.ratelimit import TokenBucket
from kube.transport import Connection, Pool, ServerClosed

_T = TypeVar("_T")

UNEXPECTED_REPLY = "UnexpectedReply"  # ApiError.reason of a reply that is not a JSON object
# How an admission plugin whose informers have not synced yet (an apiserver just started) refuses.
ADMISSION_NOT_READY = "not yet ready to handle request"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class ApiError(KubeError):
    """A non-2xx answer from the apiserver, with its Status body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body
        self.reason: str = str(body.get("reason", "")) if isinstance(body, dict) else ""
        self.message: str = str(body.get("message", "")) if isinstance(body, dict) else str(body)
        super().__init__(f"HTTP {status} {self.reason}: {self.message}")

    @property
    def causes(self) -> list[str]:
        """The Status's `details.causes[].reason` (e.g. "NodeCapacity"; metav1.StatusCause's Go field
        `Type` is serialised as "reason"), "" for a cause without one."""
        details = self.body.get("details") if isinstance(self.body, dict) else None
        causes = details.get("causes") if isinstance(details, dict) else None
        return [str(c.get("reason") or "") if isinstance(c, dict) else "" for c in causes or []]

    @property
    def retryable(self) -> bool:
        """Conflicts, throttling, server errors, garbled replies and the refusals of an admission
        plugin still starting are worth retrying with backoff."""
        if self.status == 403:
            return self.message.endswith(ADMISSION_NOT_READY)
        return self.status in (409, 429) or self.status >= 500 or self.reason == UNEXPECTED_REPLY


class TransportError(KubeError, ConnectionError):
    """The apiserver could not be reached, the connection broke or an answer timed out (a
    ConnectionError, so `except OSError` at every call site covers it)."""


class WatchIdle(TransportError):
    """A watch delivered nothing, not even a bookmark, for the idle timeout: presumed dead."""


class WatchExpired(KubeError):
    """The resourceVersion we resume from is too old (410 Gone): re-list."""


def _resource_label(path: str) -> str:
    """`pods`, `pods/resize`, `events`, ... for metrics, from an API path."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if parts and parts[0] == "api":
        parts = parts[2:]
    elif parts and parts[0] == "apis":
        parts = parts[3:]
    if len(parts) >= 2 and parts[0] == "namespaces":
        parts = parts[2:] if len(parts) > 2 else ["namespaces"]
    if not parts:
        return "unknown"
    return parts[0] + (f"/{parts[2]}" if len(parts) >= 3 else "")


USER_AGENT = "workload-resizer-reconciler"
_SEND_ATTEMPTS = 3  # a kept-alive connection the server closed meanwhile is retried


class KubeClient:
    """Pooled API access with a client-side rate limit and request metrics."""

    def __init__(
        self,
        creds: Credentials,
        qps: float,
        burst: int,
        max_connections: int,
        timeout: float = 30.0,
        drop_managed_fields: bool = False,
    ) -> None:
        """`drop_managed_fields`: objects come back without `metadata.managedFields` (the
        reconciler never reads them; they are a large part of a pod's JSON and most of its objects)."""
        self.server = creds.server
        self._trim = drop_managed_fields
        self._token = creds.token
        self._limiter = TokenBucket(qps, burst)
        self._timeout = timeout
        context = unverified_context() if creds.ssl_context is False else creds.ssl_context
        self._pool = Pool(
            creds.server,
            context if isinstance(context, ssl.SSLContext) else None,
            max_connections,
            connect_timeout=min(10.0, timeout),
        )
        self._head = f"Host: {self._pool.host_header}\r\nUser-Agent: {USER_AGENT}\r\nAccept: application/json\r\n"
        self._counters: dict[tuple[str, str, int | str], Any] = {}

    async def close(self) -> None:
        await self._pool.close()

    def _request_bytes(
        self, method: str, path: str, params: dict[str, Any] | None, content: bytes | None, content_type: str | None
    ) -> bytes:
        target = self._pool.base_path + path
        if params:
            target += ("&" if "?" in path else "?") + urlencode(params)
        token = self._token()
        auth = f"Authorization: Bearer {token}\r\n" if token else ""
        if content is None:
            return f"{method} {target} HTTP/1.1\r\n{self._head}{auth}\r\n".encode("latin-1")
        return (
            f"{method} {target} HTTP/1.1\r\n{self._head}{auth}Content-Type: {content_type}\r\n"
            f"Content-Length: {len(content)}\r\n\r\n".encode("latin-1")
            + content
        )

    def _count(self, method: str, resource: str, status: int | str) -> None:
        key = (method, resource, status)
        counter = self._counters.get(key)  # labels() builds a tuple of strings per call
        if counter is None:
            counter = self._counters[key] = metrics.API_REQUESTS.labels(method, resource, str(status))
        counter.inc()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        params: dict[str, Any] | None = None,
        decode: bool = True,
    ) -> dict[str, Any]:
        """The reply's JSON object; with `decode=False` the status is checked and {} returned (the
        body of a 2xx reply is not read: a pod is kilobytes of JSON its writer may not need)."""
        content = orjson.dumps(body) if body is not None else None
        status, raw = await self._exchange(method, path, params, content, content_type)
        if not decode:
            return {}
        value = _loads_trimmed(raw, watch_event=False) if self._trim else None
        return value if value is not None else _json_object(status, raw)

    async def _exchange(
        self, method: str, path: str, params: dict[str, Any] | None, content: bytes | None, content_type: str | None
    ) -> tuple[int, bytes]:
        """A 2xx reply's status and body, counted; TransportError, or ApiError for any other status."""
        await self._limiter.take()
        data = self._request_bytes(method, path, params, content, content_type)
        resource = _resource_label(path)
        try:
            conn, (status, raw) = await self._send(lambda conn: conn.exchange(data, self._timeout))
            self._pool.release(conn)
        except (OSError, httptools.HttpParserError) as err:
            self._count(method, resource, "<error>")
            raise TransportError(f"{method} {path}: {err!r}") from err
        self._count(method, resource, status)
        if status >= 300:
            raise ApiError(status, _json_or_message(raw))
        return status, raw

    async def _send(self, send: Callable[[Connection], Awaitable[_T]]) -> tuple[Connection, _T]:
        """`send` on a pooled connection, again on a fresh one after ServerClosed; the caller releases it."""
        for attempt in range(_SEND_ATTEMPTS):
            conn = await self._pool.acquire()
            try:
                return conn, await send(conn)
            except BaseException as err:
                self._pool.release(conn)
                if not isinstance(err, ServerClosed) or attempt == _SEND_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        return await self.request("GET", path, params=params or None)

    async def get_text(self, path: str, **params: Any) -> str:
        """A reply that is not JSON (e.g. pods/NAME/log), as text."""
        _, raw = await self._exchange("GET", path, params or None, None, None)
        return raw.decode(errors="replace")

    async def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, obj)

    async def update(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.request("PUT", path, obj)

    async def patch(
        self, path: str, patch: dict[str, Any] | list[dict[str, Any]], content_type: str = MERGE_PATCH
    ) -> dict[str, Any]:
        return await self.request("PATCH", path, patch, content_type=content_type)

    async def write(self, method: str, path: str, body: Any, content_type: str = "application/json") -> None:
        """A write whose reply is not needed: its status is checked (ApiError), its body not decoded."""
        await self.request(method, path, body, content_type=content_type, decode=False)

    async def watch(
        self, path: str, resource_version: str, params: dict[str, Any], server_timeout: int, idle_timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield watch events; ends when the server closes the stream. `idle_timeout` is a client-side
        read timeout: bookmarks arrive about once a minute, so a longer silence means a dead connection."""
        query = {
            **params,
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(server_timeout),
        }
        await self._limiter.take()
        resource = _resource_label(path)
        data = self._request_bytes("GET", path, query, None, None)
        conn: Connection | None = None
        try:
            conn, (status, stream) = await self._send(lambda conn: conn.open_stream(data, self._timeout))
            self._count("WATCH", resource, status)
            if status == 410:
                raise WatchExpired(path)
            if status >= 300:
                body = b"\n".join([line async for line in stream.lines(self._timeout)])
                raise ApiError(status, _json_or_message(body))
            loads, trim = orjson.loads, self._trim
            async for line in stream.lines(idle_timeout):
                if not line:
                    continue
                event = _loads_trimmed(line, watch_event=True) if trim else None
                if event is None:
                    with contextlib.suppress(orjson.JSONDecodeError):  # not JSON: UnexpectedReply below
                        event = loads(line)
                if type(event) is not dict:
                    event = _json_object(status, line)  # raises ApiError(UnexpectedReply)
                if event.get("type") == "ERROR":
                    status_obj = event.get("object") or {}
                    if status_obj.get("code") == 410:
                        raise WatchExpired(path)
                    raise ApiError(status_obj.get("code", 500), status_obj)
                yield event
        except TimeoutError as err:
            raise WatchIdle(f"watch {path}: no event or bookmark for {idle_timeout:.0f}s") from err
        except (OSError, httptools.HttpParserError) as err:
            if isinstance(err, TransportError):
                raise
            raise TransportError(f"watch {path}: {err!r}") from err
        finally:
            if conn is not None:
                self._pool.release(conn)  # closed unless the stream ended cleanly


def _json_object(status: int, body: bytes | str) -> dict[str, Any]:
    """A 2xx body (or watch line) that must be a JSON object, else an ApiError (e.g. an HTML page from a proxy)."""
    if not body:
        return {}
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        text = body if isinstance(body, str) else body.decode(errors="replace")
        raise ApiError(status, {"reason": UNEXPECTED_REPLY, "message": f"expected a JSON object, got: {text[:200]!r}"})
    return value


_MANAGED_FIELDS = b'"managedFields":['
# The apiserver writes ObjectMeta's fields in Go declaration order, managedFields last, then
# the object's spec: in a pod or node this is where the array ends. Inside managedFields no
# key is "spec" (fieldsV1 keys are "f:spec", "k:{...}", ...) and a JSON string cannot hold an
# unescaped quote, so the first match after the array's start is its end.
_END_OF_MANAGED_FIELDS = b']},"spec":'
_LIST_ITEMS = b'"items":['


def _loads_trimmed(raw: bytes, watch_event: bool) -> dict[str, Any] | None:
    """`raw` (one object, or a watch event of one) decoded with `metadata.managedFields` emptied,
    or None (decode it as it is) when it is not laid out as the apiserver writes pods and nodes:
    also when the result lacks the name or resourceVersion that precede managedFields there (e.g.
    a proxy re-serialised it with sorted keys, and the cut may have taken more)."""
    start = raw.find(_MANAGED_FIELDS)
    if start < 0 or raw.find(_LIST_ITEMS, 0, start) >= 0:  # lists: not worth it
        return None
    end = raw.find(_END_OF_MANAGED_FIELDS, start)
    if end < 0:
        return None
    try:
        value = orjson.loads(raw[: start + len(_MANAGED_FIELDS)] + raw[end:])
    except orjson.JSONDecodeError:
        return None
    obj = value.get("object") if watch_event and type(value) is dict else value
    meta = obj.get("metadata") if type(obj) is dict else None
    if type(meta) is not dict or "name" not in meta or "resourceVersion" not in meta:
        return None
    return value  # type: ignore[no-any-return]


def _json_or_message(body: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(body)
        return value if isinstance(value, dict) else {"message": str(value)}
    except orjson.JSONDecodeError:
        return {"message": body.decode(errors="replace")[:500]}
