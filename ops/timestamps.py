"""RFC 3339 timestamps in UTC, as Kubernetes writes them.

- rfc3339():        ``2024-05-01T12:00:00Z``         (metav1.Time: Events, annotations)
- rfc3339_micro():  ``2024-05-01T12:00:00.123456Z``  (metav1.MicroTime: Lease renewTime)
- rfc3339_millis(): ``2024-05-01T12:00:00.123Z``     (log lines)
"""

from __future__ import annotations

import functools
import time
from datetime import datetime, timezone


@functools.lru_cache(maxsize=2)
def _second(sec: int) -> str:
    """``sec`` (Unix time) as ``YYYY-MM-DDTHH:MM:SS``: formatted once per second, as log lines, Events
    and annotations stamp the time at high rates."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))


def rfc3339() -> str:
    """Now, to the second."""
    return _second(int(time.time())) + "Z"


def rfc3339_micro(when: datetime | None = None) -> str:
    return (when or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339_millis(created: float) -> str:
    """`created` (Unix time) with milliseconds."""
    sec = int(created)
    return "%s.%03dZ" % (_second(sec), int((created - sec) * 1000))
