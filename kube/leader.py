"""Leader election on a coordination.k8s.io/v1 Lease, as client-go does it.

Expiry is judged by when *we* last saw the lease record change, not by the holder's clock
(clock skew must not hand out two leases); updates carry the resourceVersion, so two
candidates never both win. Each renewal is bounded by the renew deadline; once it has passed
since the last successful renewal began, :meth:`LeaderElector.may_write` is false:
:class:`FencedClient` refuses writes and :meth:`hold` raises :class:`LeadershipLost` (at once,
too, when someone else holds the lease). The renew deadline is shorter than the lease duration,
so the last write is sent before any standby can take over. A failed attempt is never an
exception out of acquire() or hold().
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from kube import metrics
from kube.client import ApiError, KubeClient
from kube.errors import KubeError
from ops.timestamps import rfc3339_micro

log = logging.getLogger("kube.leader")


class LeadershipLost(KubeError):
    """The lease could not be renewed within the renew deadline: stop all work."""


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        self._client = client
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self._duration = lease_duration
        self._renew_deadline = renew_deadline
        self._retry = retry_period
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._fence = 0.0  # monotonic time after which we may no longer write
        self._lost_to: str | None = None
        self.is_leader = False

    def may_write(self) -> bool:
        """True while leading and within the renew deadline of the last successful renewal."""
        return self.is_leader and time.monotonic() < self._fence

    async def acquire(self) -> None:
        log.info("waiting for leadership", extra={"lease": f"{self.namespace}/{self.name}", "identity": self.identity})
        while True:
            started = time.monotonic()
            if await self._try_acquire_or_renew():
                break
            await asyncio.sleep(self._retry)
        self._fence = started + self._renew_deadline
        self.is_leader = True
        metrics.LEADER.labels(self.name).set(1)
        log.info("became leader", extra={"lease": f"{self.namespace}/{self.name}", "identity": self.identity})

    async def hold(self) -> None:
        """Renew every retry period; raise LeadershipLost past the renew deadline or on another holder."""
        while True:
            delay = min(self._retry, self._fence - time.monotonic())
            if delay > 0:
                await asyncio.sleep(delay)
            remaining = self._fence - time.monotonic()
            if remaining <= 0:
                self._lose(
                    f"could not renew lease {self.namespace}/{self.name} within the renew deadline "
                    f"({self._renew_deadline:g}s)"
                )
            started = time.monotonic()
            self._lost_to = None
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation of
                # hold() that arrives as the renewal ends, and hold() then never returns.
                async with asyncio.timeout(remaining):
                    renewed = await self._try_acquire_or_renew()
            except TimeoutError:
                log.warning(
                    "lease renewal timed out",
                    extra={"lease": f"{self.namespace}/{self.name}", "timeout_s": round(remaining, 3)},
                )
                renewed = False
            if renewed:
                self._fence = started + self._renew_deadline
            elif self._lost_to is not None:
                self._lose(f"lease {self.namespace}/{self.name} is held by {self._lost_to}")

    def _lose(self, why: str) -> None:
        self._step_down()
        raise LeadershipLost(why)

    def _step_down(self) -> None:
        self.is_leader = False
        self._fence = 0.0
        metrics.LEADER.labels(self.name).set(0)

    async def release(self) -> None:
        """Give the lease up on graceful shutdown so a standby takes over at once."""
        if not self.is_leader:
            return
        self._step_down()
        try:
            lease = await self._client.get(f"{self._path}/{self.name}")
            if lease.get("spec", {}).get("holderIdentity") != self.identity:
                return
            lease["spec"].update({"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": rfc3339_micro()})
            await self._client.update(f"{self._path}/{self.name}", lease)
            log.info("released leadership", extra={"lease": f"{self.namespace}/{self.name}"})
        except Exception as err:  # best effort: the lease expires anyway
            log.warning("could not release lease", extra={"error": repr(err)})

    async def _try_acquire_or_renew(self) -> bool:
        try:
            return await self._attempt()
        except ApiError as err:
            if err.status != 409:
                log.warning("lease update failed", extra={"error": str(err)})
        except OSError as err:
            log.warning("lease update failed", extra={"error": repr(err)})
        except Exception as err:  # anything unexpected is a failed attempt, never a crash
            log.warning("lease update failed unexpectedly", extra={"error": repr(err)})
        return False

    async def _attempt(self) -> bool:
        now = rfc3339_micro()
        try:
            lease = await self._client.get(f"{self._path}/{self.name}")
        except ApiError as err:
            if err.status != 404:
                raise
            await self._client.create(
                self._path,
                {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": {
                        "holderIdentity": self.identity,
                        "leaseDurationSeconds": int(self._duration),
                        "acquireTime": now,
                        "renewTime": now,
                        "leaseTransitions": 0,
                    },
                },
            )
            return True
        spec = lease.setdefault("spec", {})
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        holder = spec.get("holderIdentity")
        duration = spec.get("leaseDurationSeconds") or self._duration
        if holder and holder != self.identity and time.monotonic() - self._observed_at < duration:
            self._lost_to = holder
            return False
        if holder != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = (spec.get("leaseTransitions") or 0) + 1
        spec.update({"holderIdentity": self.identity, "leaseDurationSeconds": int(self._duration), "renewTime": now})
        await self._client.update(f"{self._path}/{self.name}", lease)
        return True


class NotLeader(ApiError):
    """A write refused locally: this instance is not (or no longer surely) the leader."""

    def __init__(self, method: str, path: str) -> None:
        super().__init__(0, {"reason": "NotLeader", "message": f"{method} {path}: not the leader; write refused"})

    @property
    def retryable(self) -> bool:
        return False


class FencedClient:
    """The KubeClient for the workers: reads pass through, writes only while ``may_write()``."""

    def __init__(self, client: KubeClient, may_write: Callable[[], bool]) -> None:
        self._client = client
        self._may_write = may_write

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def request(self, method: str, path: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if method not in ("GET", "HEAD") and not self._may_write():
            raise NotLeader(method, path)
        return await self._client.request(method, path, *args, **kwargs)

    # KubeClient's writers, sending through request() above.
    create = KubeClient.create
    update = KubeClient.update
    patch = KubeClient.patch
    write = KubeClient.write
