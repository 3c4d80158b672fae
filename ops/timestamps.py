"""RFC 3339 timestamps in UTC, as Kubernetes writes them.

- rfc3339():        ``2024-05-01T12:00:00Z``         (metav1.Time: Events, annotations)
- rfc3339_micro():  ``2024-05-01T12:00:00.123456Z``  (metav1.MicroTime: Lease renewTime)
- rfc3339_millis(): ``2024-05-01T12:00:00.123Z``     (log lines; the seconds part is cached)
"""

from __future__ import annotations

import time
from datetime import datetime, timezone


def rfc3339(when: datetime | None = None) -> str:
    if when is None:
        return _now_seconds()
    return when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


_now_cache: tuple[int, str] = (-1, "")  # (second, formatted), replaced as one object


def _now_seconds() -> str:
    """rfc3339() of now, formatted once per second (Events and annotations stamp it per pod)."""
    global _now_cache
    sec = int(time.time())
    cached_sec, text = _now_cache
    if sec != cached_sec:
        text = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(sec))
        _now_cache = (sec, text)
    return text


def rfc3339_micro(when: datetime | None = None) -> str:
    return (when or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_seconds_cache: tuple[int, str] = (-1, "")  # (second, formatted prefix), replaced as one object


def rfc3339_millis(created: float) -> str:
    """`created` (Unix time) with milliseconds; cheap at high rates."""
    global _seconds_cache
    sec = int(created)
    cached_sec, prefix = _seconds_cache
    if sec != cached_sec:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        _seconds_cache = (sec, prefix)
    return "%s.%03dZ" % (prefix, int((created - sec) * 1000))
