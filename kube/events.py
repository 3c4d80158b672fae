"""Kubernetes Events, aggregated like client-go's event correlator.

The same (object, type, reason, message) within `aggregate_window` bumps the count of the
existing Event instead of creating a new one, and a per-object token bucket drops a storm of
distinct events (25 at once, then one per 5 minutes), so `kubectl describe` stays readable and
etcd is spared.
"""

from __future__ import annotations

import logging
import os
import random
import socket
import time
from collections import OrderedDict
from typing import Any

from kube.client import MERGE_PATCH, ApiError, KubeClient
from kube.ratelimit import TokenBucket
from ops.timestamps import rfc3339

log = logging.getLogger("kube.events")

COMPONENT = "workload-resizer"
MAX_MESSAGE = 1024


def object_reference(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "kind": kind,
        "apiVersion": "v1",
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
    }


class EventRecorder:
    def __init__(
        self,
        client: KubeClient,
        aggregate_window: float = 600.0,
        cache_size: int = 4096,
        burst: int = 25,
        refill_seconds: float = 300.0,
    ) -> None:
        self._client = client
        self._window = aggregate_window
        self._cache_size = cache_size
        self._seen: OrderedDict[tuple[str, ...], tuple[str, int, float]] = OrderedDict()
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._burst = burst
        self._refill = refill_seconds
        self._host = os.environ.get("POD_NAME") or socket.gethostname()

    async def emit(self, ref: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """Record an Event; failures are logged, never raised (events are best effort)."""
        message = message if len(message) <= MAX_MESSAGE else message[: MAX_MESSAGE - 3] + "..."
        key = (ref.get("uid") or "", ref.get("name") or "", event_type, reason, message)
        try:
            seen = self._seen.get(key)
            if seen is not None and time.monotonic() - seen[2] < self._window:
                await self._bump(ref, key, *seen)
                return
            if not self._allowed(ref.get("uid") or ref.get("name") or ""):
                log.debug("event dropped by spam filter", extra={"reason": reason, "object": ref.get("name")})
                return
            await self._create(ref, key)
        except ApiError as err:
            log.warning(
                "could not record event", extra={"reason": reason, "object": ref.get("name"), "error": str(err)}
            )
        except OSError as err:
            log.warning("could not record event", extra={"reason": reason, "error": repr(err)})

    def _allowed(self, object_id: str) -> bool:
        bucket = self._buckets.get(object_id)
        if bucket is None:
            bucket = self._buckets[object_id] = TokenBucket(1 / self._refill, self._burst)
            if len(self._buckets) > self._cache_size:
                self._buckets.popitem(last=False)
        return bucket.try_take()

    async def _create(self, ref: dict[str, Any], key: tuple[str, ...]) -> None:
        _, _, event_type, reason, message = key
        stamp = rfc3339()
        # client-go names Events <object>.<unix nanos in hex>; 16 random bits more for
        # two events of one object in the same clock tick (not a secret: no os.urandom).
        name = f"{ref['name']}.{time.time_ns():x}{random.getrandbits(16):04x}"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ref["namespace"]},
            "involvedObject": {k: v for k, v in ref.items() if v is not None},
            "type": event_type,
            "reason": reason,
            "message": message,
            "source": {"component": COMPONENT, "host": self._host},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        await self._client.write("POST", f"/api/v1/namespaces/{ref['namespace']}/events", event)
        self._remember(key, name, 1)

    async def _bump(self, ref: dict[str, Any], key: tuple[str, ...], name: str, count: int, _: float) -> None:
        try:
            await self._client.write(
                "PATCH",
                f"/api/v1/namespaces/{ref['namespace']}/events/{name}",
                {"count": count + 1, "lastTimestamp": rfc3339()},
                MERGE_PATCH,
            )
        except ApiError as err:
            if err.status != 404:
                raise
            self._seen.pop(key, None)  # expired by the apiserver's event TTL
            await self._create(ref, key)
            return
        self._remember(key, name, count + 1)

    def _remember(self, key: tuple[str, ...], name: str, count: int) -> None:
        self._seen[key] = (name, count, time.monotonic())
        self._seen.move_to_end(key)
        while len(self._seen) > self._cache_size:
            self._seen.popitem(last=False)
