"""Gates a pod passes before it is planned and before its resize is sent: a pod left to another
controller (an updating VerticalPodAutoscaler) and a resize the apiserver or the kubelet would
refuse (LimitRange, ResourceQuota, the node's room) are held, not written.

A hold writes nothing to the pod: it is reported once (one Event per distinct hold), counted
in the workload_resizer_resizes_held gauge, and decided again when its constraint changes
(the manager requeues the pods concerned) or after `requeue_after`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kube.slim import Obj
from reconciler import metrics
from reconciler.reasons import Reason


@dataclass(frozen=True)
class Held:
    reason: Reason
    constraint: str  # LimitRange, ResourceQuota, NodeHeadroom, VerticalPodAutoscaler
    message: str
    fingerprint: str  # the same hold is reported once
    requeue_after: float | None = None
    report: bool = True  # False: a transient wait (a cache not synced yet), not worth an Event
    # Held at most this long (seconds), then sent anyway (None: until the constraint changes).
    at_most: float | None = None


VPA = "VerticalPodAutoscaler"


class Gate:
    """The gates' questions; this one lets everything pass (reconciler.preflight answers from the caches)."""

    def admit(self, pod: Obj) -> Held | None:
        """Before planning: whether the pod is to be left alone."""
        return None

    def preflight(self, pod: Obj, node: Obj, patch: Obj) -> Held | None:
        """Before sending `patch` (pods/resize) for `pod` on `node`: whether it would be refused."""
        return None

    def would_hold(self, pod: Obj, node: Obj, patch: Obj) -> str | None:
        """What would hold `patch` (why, for a dry run's report), remembering nothing."""
        return None

    def sent(self, pod: Obj, patch: Obj, generation: int) -> None:
        """`patch` was accepted, the pod is at `generation`: count it on its node until the cache shows it."""

    def judges(self, refusal: str) -> bool:
        """Whether the apiserver's `refusal` names a constraint this gate checks (and let through)."""
        return False


class HoldMemory:
    """The hold each pod is under (by uid): whether a hold is new (to report) and the gauge."""

    def __init__(self) -> None:
        self._held: dict[str, Held] = {}
        self._since: dict[str, float] = {}  # when the pod's current hold began (clock seconds)

    @property
    def held(self) -> Mapping[str, Held]:
        return self._held

    def since(self, uid: str) -> float | None:
        return self._since.get(uid)

    def hold(self, uid: str, held: Held, now: float = 0.0) -> bool:
        """Record the pod as held; True if this hold was not the pod's last one (report it)."""
        old = self._held.get(uid)
        self._held[uid] = held
        if old is None or old.fingerprint != held.fingerprint:
            self._since[uid] = now
        if old is None or old.constraint != held.constraint:
            if old is not None:
                metrics.RESIZES_HELD.labels(old.constraint).dec()
            metrics.RESIZES_HELD.labels(held.constraint).inc()
        return held.report and (old is None or old.fingerprint != held.fingerprint)

    def release(self, uid: str, constraint: str | None = None) -> None:
        """The pod is no longer held (only if held for `constraint`, when given)."""
        old = self._held.get(uid)
        if old is not None and constraint in (None, old.constraint):
            del self._held[uid]
            self._since.pop(uid, None)
            metrics.RESIZES_HELD.labels(old.constraint).dec()
