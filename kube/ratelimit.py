"""The token bucket behind the client's QPS limit and the Event spam filter.

`qps` tokens per second accrue up to `burst` (at least one); the bucket starts full.
"""

from __future__ import annotations

import asyncio
import time


class TokenBucket:
    def __init__(self, qps: float, burst: int) -> None:
        self._rate = qps
        self._capacity = max(1, burst)
        self._tokens = float(self._capacity)
        self._updated = time.monotonic()
        self._lock = asyncio.Lock()

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self._capacity, self._tokens + (now - self._updated) * self._rate)
        self._updated = now

    def try_take(self) -> bool:
        self._refill()
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        return False

    async def take(self) -> None:
        """Take a token, waiting for it if need be, first come first served; qps <= 0 means no limit."""
        if self._rate <= 0:
            return
        async with self._lock:
            self._refill()
            if self._tokens < 1:
                await asyncio.sleep((1 - self._tokens) / self._rate)
                self._tokens = 1
                self._updated = time.monotonic()
            self._tokens -= 1
