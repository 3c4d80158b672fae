"""A work queue with client-go semantics, for asyncio.

- An item is queued at most once, however often it is added.
- An item being processed is never handed to a second worker; if it is added
  meanwhile it is marked dirty and re-queued when the first worker is done.
- Per-item exponential backoff for retries (`add_rate_limited`), reset by `forget`.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque

from kube import metrics


class WorkQueue:
    def __init__(self, name: str, base_delay: float = 0.5, max_delay: float = 300.0) -> None:
        self.name = name
        self._queue: deque[str] = deque()
        self._queued: dict[str, float] = {}  # item -> time it was queued
        self._processing: set[str] = set()
        self._dirty: set[str] = set()
        self._failures: dict[str, int] = {}
        self._delayed: dict[str, asyncio.TimerHandle] = {}
        self._base = base_delay
        self._max = max_delay
        self._waiters: deque[asyncio.Future[None]] = deque()  # workers blocked in get()
        self._shutting_down = False
        # Bound once: labels() builds a tuple and looks it up on every call.
        self._adds = metrics.QUEUE_ADDS.labels(name)
        self._depth = metrics.QUEUE_DEPTH.labels(name)
        self._retries = metrics.QUEUE_RETRIES.labels(name)
        self._latency = metrics.QUEUE_LATENCY.labels(name)

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, item: str) -> None:
        if self._shutting_down:
            return
        self._adds.inc()
        if item in self._processing:
            self._dirty.add(item)
            return
        if item in self._queued:
            return
        self._queued[item] = time.monotonic()
        self._queue.append(item)
        self._depth.set(len(self._queue))
        self._wake_one()

    def add_after(self, item: str, delay: float) -> None:
        if delay <= 0:
            self.add(item)
            return
        existing = self._delayed.get(item)
        if existing is not None:
            if existing.when() <= asyncio.get_running_loop().time() + delay:
                return  # due sooner already
            existing.cancel()
        self._delayed[item] = asyncio.get_running_loop().call_later(delay, self._fire_delayed, item)

    def _fire_delayed(self, item: str) -> None:
        self._delayed.pop(item, None)
        self.add(item)

    def add_rate_limited(self, item: str) -> float:
        failures = self._failures.get(item, 0)
        self._failures[item] = failures + 1
        delay = min(self._base * (2.0 ** min(failures, 64)), self._max)  # 2**1024 overflows a float
        self._retries.inc()
        self.add_after(item, delay)
        return delay

    def forget(self, item: str) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: str) -> int:
        return self._failures.get(item, 0)

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def get(self) -> str | None:
        """Next item, or None once the queue is shut down (queued items are not drained:
        after a shutdown, for a lost lease above all, no new work may start)."""
        while not self._queue and not self._shutting_down:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():  # woken, then cancelled: wake another
                    self._wake_one()
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        if self._shutting_down or not self._queue:
            return None
        item = self._queue.popleft()
        queued_at = self._queued.pop(item)
        self._latency.observe(time.monotonic() - queued_at)
        self._depth.set(len(self._queue))
        self._processing.add(item)
        return item

    def done(self, item: str) -> None:
        self._processing.discard(item)
        if item in self._dirty:
            self._dirty.discard(item)
            self.add(item)

    def drop(self, item: str) -> None:
        """Forget everything about an item (its object was deleted)."""
        self._failures.pop(item, None)
        if (timer := self._delayed.pop(item, None)) is not None:
            timer.cancel()

    async def shutdown(self) -> None:
        self._shutting_down = True
        for timer in self._delayed.values():
            timer.cancel()
        self._delayed.clear()
        while self._waiters:
            self._wake_one()

    @property
    def idle(self) -> bool:
        return not self._queue and not self._processing and not self._delayed
