"""Thin asynchronous Kubernetes API client: raw JSON over httpx, nothing more.

The official `kubernetes` package is used only to load credentials (kubeconfig
or in-cluster, including token refresh); requests go through one pooled
httpx.AsyncClient and bodies are parsed with orjson into plain dicts, which is
what the pure core consumes. Deserialising into the official client's model
classes would cost several times the CPU and memory per pod.
"""
from __future__ import annotations

import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from reconciler import metrics
from reconciler.ratelimit import TokenBucket

log = logging.getLogger("reconciler.kube")

UNEXPECTED_REPLY = "UnexpectedReply"     # ApiError.reason of a reply that is not a JSON object
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"


class ApiError(Exception):
    """A non-2xx answer from the apiserver, with its Status body."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body
        self.reason: str = str(body.get("reason", "")) if isinstance(body, dict) else ""
        self.message: str = str(body.get("message", "")) if isinstance(body, dict) else str(body)
        super().__init__(f"HTTP {status} {self.reason}: {self.message}")

    @property
    def causes(self) -> list[str]:
        details = self.body.get("details") if isinstance(self.body, dict) else None
        causes = details.get("causes") if isinstance(details, dict) else None
        return [str(c.get("type", "")) for c in causes if isinstance(c, dict)] if isinstance(causes, list) else []

    @property
    def retryable(self) -> bool:
        """Conflicts, throttling, server errors and garbled replies are worth retrying with backoff."""
        return self.status in (409, 429) or self.status >= 500 or self.reason == UNEXPECTED_REPLY


class TransportError(ConnectionError):
    """The apiserver could not be reached or the connection broke (wraps httpx's errors).

    A ConnectionError, so `except OSError` at every call site covers it.
    """


class WatchIdle(TransportError):
    """A watch delivered nothing, not even a bookmark, for the idle timeout: presumed dead."""


class WatchExpired(Exception):
    """The resourceVersion we resume from is too old (410 Gone): re-list."""


@dataclass
class Credentials:
    server: str
    ssl_context: ssl.SSLContext | bool
    token: Callable[[], str | None]


def load_credentials(kubeconfig: str | None, context: str | None = None) -> Credentials:
    """Credentials from --kubeconfig, $KUBECONFIG/~/.kube/config, or the in-cluster service account."""
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    cfg = k8s_client.Configuration()
    if kubeconfig:
        k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)
        except k8s_config.ConfigException:
            k8s_config.load_kube_config(context=context, client_configuration=cfg)
    if cfg.verify_ssl:
        ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.ssl_ca_cert \
            else ssl.create_default_context()
    else:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return Credentials(server=cfg.host.rstrip("/"), ssl_context=ctx, token=_token_source(cfg))


def _token_source(cfg: Any) -> Callable[[], str | None]:
    """Bearer token, refreshed through the loader's hook (projected tokens rotate)."""
    state = {"checked": 0.0}

    def token() -> str | None:
        hook = getattr(cfg, "refresh_api_key_hook", None)
        if hook is not None and time.monotonic() - state["checked"] > 60:
            hook(cfg)
            state["checked"] = time.monotonic()
        value = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
        if not value:
            return None
        return str(value).removeprefix("Bearer ").strip()

    return token


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


class KubeClient:
    """Pooled API access with a client-side rate limit and request metrics."""

    def __init__(self, creds: Credentials, qps: float, burst: int, max_connections: int,
                 timeout: float = 30.0) -> None:
        self.server = creds.server
        self._token = creds.token
        self._limiter = TokenBucket(qps, burst)
        self._timeout = timeout
        self._http = httpx.AsyncClient(
            base_url=creds.server, verify=creds.ssl_context,
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
            timeout=httpx.Timeout(timeout, connect=10.0),
            headers={"Accept": "application/json", "User-Agent": "workload-resizer-reconciler"},
        )

    async def close(self) -> None:
        await self._http.aclose()

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers = {}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json",
                      params: dict[str, Any] | None = None) -> dict[str, Any]:
        await self._limiter.take()
        content = orjson.dumps(body) if body is not None else None
        resource = _resource_label(path)
        try:
            resp = await self._http.request(method, path, content=content, params=params,
                                            headers=self._headers(content_type if content else None))
        except httpx.HTTPError as err:
            metrics.API_REQUESTS.labels(method, resource, "<error>").inc()
            raise TransportError(f"{method} {path}: {err!r}") from err
        metrics.API_REQUESTS.labels(method, resource, str(resp.status_code)).inc()
        if resp.status_code >= 300:
            raise ApiError(resp.status_code, _json_or_message(resp.content))
        return _json_object(resp.status_code, resp.content)

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        return await self.request("GET", path, params=params or None)

    async def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", path, obj)

    async def update(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        return await self.request("PUT", path, obj)

    async def patch(self, path: str, patch: dict[str, Any], content_type: str = MERGE_PATCH) -> dict[str, Any]:
        return await self.request("PATCH", path, patch, content_type=content_type)

    async def watch(self, path: str, resource_version: str, params: dict[str, Any],
                    server_timeout: int, idle_timeout: float) -> AsyncIterator[dict[str, Any]]:
        """Yield watch events; ends when the server closes the stream.

        `idle_timeout` is a client-side read timeout: bookmarks arrive about once a
        minute, so a silent connection for longer than that is presumed dead.
        """
        query = {**params, "watch": "1", "resourceVersion": resource_version,
                 "allowWatchBookmarks": "true", "timeoutSeconds": str(server_timeout)}
        timeout = httpx.Timeout(self._timeout, read=idle_timeout)
        await self._limiter.take()
        resource = _resource_label(path)
        try:
            async with self._http.stream("GET", path, params=query, headers=self._headers(),
                                         timeout=timeout) as resp:
                metrics.API_REQUESTS.labels("WATCH", resource, str(resp.status_code)).inc()
                if resp.status_code == 410:
                    raise WatchExpired(path)
                if resp.status_code >= 300:
                    body = await resp.aread()
                    raise ApiError(resp.status_code, _json_or_message(body))
                async for line in resp.aiter_lines():
                    if not line:
                        continue
                    event = _json_object(resp.status_code, line)
                    if event.get("type") == "ERROR":
                        status = event.get("object") or {}
                        if status.get("code") == 410:
                            raise WatchExpired(path)
                        raise ApiError(status.get("code", 500), status)
                    yield event
        except httpx.TimeoutException as err:
            raise WatchIdle(f"watch {path}: no event or bookmark for {idle_timeout:.0f}s") from err
        except httpx.HTTPError as err:
            raise TransportError(f"watch {path}: {err!r}") from err


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


def _json_or_message(body: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(body)
        return value if isinstance(value, dict) else {"message": str(value)}
    except orjson.JSONDecodeError:
        return {"message": body.decode(errors="replace")[:500]}
