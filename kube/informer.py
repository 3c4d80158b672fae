"""List + watch into a local cache, like client-go's reflector and informer.

Lists in pages, then watches from the list's resourceVersion with bookmarks, resumes from the
last seen resourceVersion when a stream ends, re-lists on 410 Gone, and treats a silent connection
(no event or bookmark for `idle_timeout`) as dead. The cache holds objects as `slim` reduces them.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from kube import metrics
from kube.client import ApiError, KubeClient, WatchExpired, WatchIdle
from kube.errors import KubeError
from kube.slim import Obj

log = logging.getLogger("kube.informer")

Handler = Callable[[str, Obj, Obj | None], None]  # (ADDED|MODIFIED|DELETED, new, old)


SHORT_WATCH = 1.0  # seconds: a watch ending sooner without any event counts as a failure
WATCH_TIMEOUT = (240, 360)  # seconds, the range a watch's server-side timeout is drawn from


class ShortWatch(KubeError):
    """A watch stream ended at once without delivering anything."""


def object_key(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


def object_informer(
    client: KubeClient, resource: str, namespace: str, name: str, handler: Handler, idle_timeout: float = 90.0
) -> Informer:
    """An informer of one core (v1) object, ``namespace/name`` of ``resource``, kept whole: a field
    selector on its name, so the list and the watch carry nothing else."""
    return Informer(
        client,
        resource,
        f"/api/v1/namespaces/{namespace}/{resource}",
        slim=lambda obj: obj,
        handler=handler,
        params={"fieldSelector": f"metadata.name={name}"},
        idle_timeout=idle_timeout,
    )


class Informer:
    def __init__(
        self,
        client: KubeClient,
        resource: str,
        path: str,
        slim: Callable[[Obj], Obj],
        handler: Handler,
        params: dict[str, Any] | None = None,
        page_size: int = 500,
        idle_timeout: float = 90.0,
    ) -> None:
        self.resource = resource
        self.store: dict[str, Obj] = {}
        self.synced = asyncio.Event()
        self._client = client
        self._path = path
        self._slim = slim
        self._handler = handler
        self._params = params or {}
        self._page_size = page_size
        self._idle_timeout = idle_timeout
        self._resource_version = ""
        self._cached_gauge = metrics.CACHED_OBJECTS.labels(resource)

    async def run(self) -> None:
        backoff = 0.5
        need_list = True
        while True:
            try:
                if need_list:
                    await self._list()
                    need_list = False
                started = time.monotonic()
                events = await self._watch()
                if events == 0 and time.monotonic() - started < SHORT_WATCH:
                    # Closed at once with nothing delivered (a proxy, an overloaded apiserver):
                    # like client-go's "very short watch", back off instead of reconnecting in a loop.
                    raise ShortWatch(
                        f"watch {self._path} closed after {time.monotonic() - started:.3f}s without an event"
                    )
                backoff = 0.5
            except WatchExpired:
                metrics.WATCH_RESTARTS.labels(self.resource, "expired").inc()
                log.info("watch expired, re-listing", extra={"resource": self.resource})
                need_list = True
            except Exception as err:  # ApiError, OSError, and any reply we could not make sense of
                cause = "idle" if isinstance(err, WatchIdle) else "error"
                metrics.WATCH_RESTARTS.labels(self.resource, cause).inc()
                log.warning(
                    "watch interrupted, resuming",
                    extra={"resource": self.resource, "error": repr(err), "resourceVersion": self._resource_version},
                )
                if isinstance(err, ApiError) and err.status == 410:
                    need_list = True
                await asyncio.sleep(backoff + random.random() * backoff)
                backoff = min(backoff * 2, 30.0)

    async def _list(self) -> None:
        fresh: dict[str, Obj] = {}
        params = {**self._params, "limit": str(self._page_size)}
        while True:
            page = await self._client.get(self._path, **params)
            for item in page.get("items") or []:
                obj = self._slim(item)
                fresh[object_key(obj)] = obj
            cont = page.get("metadata", {}).get("continue")
            if not cont:
                self._resource_version = page["metadata"]["resourceVersion"]
                break
            params["continue"] = cont
        old_store, self.store = self.store, fresh
        for key, obj in fresh.items():
            old = old_store.get(key)
            if old is None:
                self._handler("ADDED", obj, None)
            elif old["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                self._handler("MODIFIED", obj, old)
        for key, old in old_store.items():
            if key not in fresh:
                self._handler("DELETED", old, old)
        self._cached_gauge.set(len(self.store))
        self.synced.set()
        log.info(
            "listed", extra={"resource": self.resource, "count": len(fresh), "resourceVersion": self._resource_version}
        )

    async def _watch(self) -> int:
        """Watch until the stream ends; the number of events (bookmarks included) it delivered."""
        count = 0
        server_timeout = random.randint(*WATCH_TIMEOUT)
        store, slim, handler, gauge = self.store, self._slim, self._handler, self._cached_gauge
        async for event in self._client.watch(
            self._path, self._resource_version, self._params, server_timeout, self._idle_timeout
        ):
            count += 1
            kind = event.get("type")
            raw = event.get("object") or {}
            rv = (raw.get("metadata") or {}).get("resourceVersion")
            if kind == "BOOKMARK":
                if rv:
                    self._resource_version = rv
                continue
            obj = slim(raw)
            key = object_key(obj)
            if kind in ("ADDED", "MODIFIED"):
                old = store.get(key)
                store[key] = obj
                if old is None:
                    gauge.set(len(store))
                handler("MODIFIED" if old is not None else "ADDED", obj, old)
            elif kind == "DELETED":
                old = store.pop(key, None)
                gauge.set(len(store))
                handler("DELETED", obj, old)
            if rv:
                self._resource_version = rv
        return count
