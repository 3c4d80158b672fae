"""Leader election on a coordination.k8s.io/v1 Lease, as client-go does it.

Expiry is judged by when *we* last saw the lease record change, not by the
holder's clock (clock skew between replicas must not hand out two leases).
Updates carry the resourceVersion, so two candidates can never both win.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ops.timestamps import rfc3339_micro
from reconciler import metrics
from reconciler.kube import ApiError, KubeClient

log = logging.getLogger("reconciler.leader")


class LeadershipLost(Exception):
    """The lease could not be renewed within the renew deadline: stop all work."""


class LeaderElector:
    def __init__(self, client: KubeClient, namespace: str, name: str, identity: str,
                 lease_duration: float = 15.0, renew_deadline: float = 10.0, retry_period: float = 2.0) -> None:
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
        self.is_leader = False

    async def acquire(self) -> None:
        """Block until this instance holds the lease."""
        log.info("waiting for leadership", extra={"lease": f"{self.namespace}/{self.name}",
                                                  "identity": self.identity})
        while not await self._try_acquire_or_renew():  # noqa: ASYNC110  (polls the apiserver's Lease)
            await asyncio.sleep(self._retry)
        self.is_leader = True
        metrics.LEADER.labels(self.name).set(1)
        log.info("became leader", extra={"lease": f"{self.namespace}/{self.name}", "identity": self.identity})

    async def hold(self) -> None:
        """Renew until a renewal deadline is missed; then raise LeadershipLost."""
        last_renew = time.monotonic()
        while True:
            await asyncio.sleep(self._retry)
            if await self._try_acquire_or_renew():
                last_renew = time.monotonic()
            elif time.monotonic() - last_renew > self._renew_deadline:
                self.is_leader = False
                metrics.LEADER.labels(self.name).set(0)
                raise LeadershipLost(f"failed to renew lease {self.namespace}/{self.name}")

    async def release(self) -> None:
        """Give the lease up on graceful shutdown so a standby takes over at once."""
        if not self.is_leader:
            return
        self.is_leader = False
        metrics.LEADER.labels(self.name).set(0)
        try:
            lease = await self._client.get(f"{self._path}/{self.name}")
            if lease.get("spec", {}).get("holderIdentity") != self.identity:
                return
            lease["spec"].update({"holderIdentity": None, "leaseDurationSeconds": 1, "renewTime": rfc3339_micro()})
            await self._client.update(f"{self._path}/{self.name}", lease)
            log.info("released leadership", extra={"lease": f"{self.namespace}/{self.name}"})
        except (ApiError, OSError) as err:
            log.warning("could not release lease", extra={"error": repr(err)})

    async def _try_acquire_or_renew(self) -> bool:
        try:
            return await self._attempt()
        except ApiError as err:
            if err.status != 409:
                log.warning("lease update failed", extra={"error": str(err)})
            return False
        except OSError as err:
            log.warning("lease update failed", extra={"error": repr(err)})
            return False

    async def _attempt(self) -> bool:
        now = rfc3339_micro()
        try:
            lease = await self._client.get(f"{self._path}/{self.name}")
        except ApiError as err:
            if err.status != 404:
                raise
            await self._client.create(self._path, {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": int(self._duration),
                         "acquireTime": now, "renewTime": now, "leaseTransitions": 0}})
            return True
        spec = lease.setdefault("spec", {})
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        holder = spec.get("holderIdentity")
        duration = spec.get("leaseDurationSeconds") or self._duration
        if holder and holder != self.identity and time.monotonic() - self._observed_at < duration:
            return False
        if holder != self.identity:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = (spec.get("leaseTransitions") or 0) + 1
        spec.update({"holderIdentity": self.identity, "leaseDurationSeconds": int(self._duration),
                     "renewTime": now})
        await self._client.update(f"{self._path}/{self.name}", lease)
        return True
