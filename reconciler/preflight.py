"""The gates of reconciler.gates, answered from cached state (no API call per pod): LimitRanges
and ResourceQuotas from their informers, the node's other pods from the pod cache, VPAs from
reconciler.vpa. The judgements are resizer.preflight's and resizer.vpa's.

Pods held for a namespace's LimitRange or quota are requeued when one of those changes (quota
freed, LimitRange edited); pods held for their node's room when a pod on that node changes
(a decrease actuated, a pod deleted). A resize just sent counts at its new size on its node
until the pod cache shows it, so two increases decided at once cannot both take the same room.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator

from kube import KubeClient
from kube.informer import Informer, object_key
from kube.slim import Obj, slim_limit_range, slim_quota
from reconciler.gates import VPA, Gate, Held
from reconciler.reasons import Reason
from reconciler.settings import PreflightSettings
from reconciler.vpa import VpaWatch
from resizer.eligibility import TERMINAL_PHASES
from resizer.preflight import Hold, apply_patch, critical_hold, limit_range_hold, node_hold, quota_hold
from resizer.vpa import Unresolved

log = logging.getLogger("reconciler.preflight")

UNRESOLVED_RETRY = 2.0  # seconds: a pod whose VPA status the caches cannot tell yet is looked at again


# How the apiserver's admission refuses a pods/resize request (403) for a LimitRange (the
# LimitRanger's "maximum cpu usage per Container is 1500m, but limit is 2", "... limit to request
# ratio per Pod is ...") and for a ResourceQuota ("exceeded quota: ...").
LIMIT_RANGE_REFUSALS = ("usage per Container", "usage per Pod", "limit to request ratio per")
QUOTA_REFUSAL = "exceeded quota:"


class Preflight(Gate):
    """The gates over the caches (`node_pods(node)`: a node's cached pods; `requeue(keys)`: queue again)."""

    def __init__(
        self,
        client: KubeClient,
        settings: PreflightSettings,
        node_pods: Callable[[str], Iterable[Obj]],
        requeue: Callable[[Iterable[str]], None],
        vpa: VpaWatch | None = None,
        idle_timeout: float = 90.0,
    ) -> None:
        self.settings = settings
        self.vpa = vpa if settings.skip_vpa_managed else None
        self._node_pods = node_pods
        self._requeue = requeue
        # Each resize looks at its namespace's LimitRanges and quotas only: kept by namespace.
        self._limit_ranges_by_ns = NamespaceIndex()
        self._quotas_by_ns = NamespaceIndex()
        self.limit_ranges = (
            self._informer(client, "limitranges", slim_limit_range, self._limit_ranges_by_ns, idle_timeout)
            if "LimitRange" in settings.checks
            else None
        )
        self.quotas = (
            self._informer(client, "resourcequotas", slim_quota, self._quotas_by_ns, idle_timeout)
            if "ResourceQuota" in settings.checks
            else None
        )
        # Pods held, by what they wait for: ("namespace", ns) or ("node", name) -> pod keys.
        self._waiting: dict[tuple[str, str], set[str]] = {}
        # Resizes sent and not yet in the cache: node -> pod uid -> (generation, resized spec).
        self._sent: dict[str, dict[str, tuple[int, Obj]]] = {}

    @property
    def informers(self) -> tuple[Informer, ...]:
        return tuple(i for i in (self.limit_ranges, self.quotas) if i is not None)

    # ---- the gate

    def admit(self, pod: Obj) -> Held | None:
        if self.vpa is None:
            return None
        verdict = self.vpa.verdict(pod)
        if verdict is None:
            return None
        if isinstance(verdict, Unresolved):
            waiting = f"waiting for {verdict.owner.kind} {verdict.owner.name} in the cache"
            return Held(Reason.VPA_MANAGED, VPA, waiting, "unresolved", requeue_after=UNRESOLVED_RETRY, report=False)
        return Held(Reason.VPA_MANAGED, VPA, verdict.message(), f"VerticalPodAutoscaler/{verdict.vpa}/{verdict.mode}")

    def preflight(self, pod: Obj, node: Obj, patch: Obj) -> Held | None:
        key = object_key(pod)
        self._stop_waiting(key)
        hold = self.judge(pod, node, patch)
        if hold is None:
            return None
        waits_for = (
            ("node", str(node["metadata"]["name"]))
            if hold.constraint == "NodeHeadroom"
            else ("namespace", str(pod["metadata"].get("namespace")))
        )
        self._waiting.setdefault(waits_for, set()).add(key)
        room = hold.constraint == "NodeHeadroom" and "beyond" not in hold.subject  # not one that can never fit
        wait = self.settings.node_room_wait if room else None
        return Held(
            Reason.RESIZE_HELD, hold.constraint, hold.message(), hold.fingerprint, requeue_after=wait, at_most=wait
        )

    def would_hold(self, pod: Obj, node: Obj, patch: Obj) -> str | None:
        hold = self.judge(pod, node, patch)
        return None if hold is None else f"{hold.constraint}: {hold.message()}"

    def judge(self, pod: Obj, node: Obj | None, patch: Obj) -> Hold | None:
        """The first constraint that would refuse `patch` (pods/resize) for `pod` on `node`."""
        return next((hold for hold in self._holds(pod, node, apply_patch(pod, patch)) if hold is not None), None)

    def _holds(self, pod: Obj, node: Obj | None, resized: Obj) -> Iterator[Hold | None]:
        """What each check in force says of `resized`, in order, each judged only if those before pass."""
        namespace = str(pod["metadata"].get("namespace"))
        if not self.settings.upsize_critical_pods:
            yield critical_hold(pod, resized)
        if self.limit_ranges is not None:
            yield limit_range_hold(resized, self._limit_ranges_by_ns.get(namespace))
        if self.quotas is not None:
            yield quota_hold(pod, resized, self._quotas_by_ns.get(namespace))
        if "NodeHeadroom" in self.settings.checks and node is not None:
            yield node_hold(node, pod, resized, self._others(pod))

    def judges(self, refusal: str) -> bool:
        if self.limit_ranges is not None and any(fragment in refusal for fragment in LIMIT_RANGE_REFUSALS):
            return True
        return self.quotas is not None and QUOTA_REFUSAL in refusal

    def sent(self, pod: Obj, patch: Obj, generation: int) -> None:
        node = str(pod["spec"].get("nodeName"))
        self._sent.setdefault(node, {})[str(pod["metadata"].get("uid"))] = (generation, apply_patch(pod, patch))

    def _others(self, pod: Obj) -> Iterator[Obj]:
        """The node's other live pods; a resize we sent counts at its size until the cache shows it.
        Lazy: only a resize that grows a request walks them (most shrink)."""
        node = str(pod["spec"].get("nodeName"))
        sent = self._sent.get(node, {})
        for other in self._node_pods(node):
            uid = other["metadata"].get("uid")
            if uid == pod["metadata"].get("uid") or other["status"].get("phase") in TERMINAL_PHASES:
                continue
            pending = sent.get(str(uid))
            if pending is not None and (other["metadata"].get("generation") or 0) < pending[0]:
                other = {**other, "spec": pending[1]}
            elif pending is not None:
                del sent[str(uid)]
            yield other

    # ---- what to look at again

    def _stop_waiting(self, key: str) -> None:
        for what, keys in list(self._waiting.items()):
            keys.discard(key)
            if not keys:
                del self._waiting[what]

    def forget(self, pod: Obj) -> None:
        self._stop_waiting(object_key(pod))
        sent = self._sent.get(str(pod["spec"].get("nodeName")))
        if sent is not None:
            sent.pop(str(pod["metadata"].get("uid")), None)

    def pod_changed(self, node: str, pod: Obj | None = None) -> None:
        """A pod on `node` changed (`pod`, as the cache has it now) or went away: the pods held for
        its room are decided again, and a resize we sent it stops standing in once the cache shows it."""
        sent = self._sent.get(node)
        if sent and pod is not None:
            uid = str(pod["metadata"].get("uid"))
            pending = sent.get(uid)
            if pending is not None and (pod["metadata"].get("generation") or 0) >= pending[0]:
                del sent[uid]
        keys = self._waiting.get(("node", node))
        if keys:
            self._requeue(list(keys))

    def _informer(
        self, client: KubeClient, resource: str, slim: Callable[[Obj], Obj], index: NamespaceIndex, idle_timeout: float
    ) -> Informer:
        """An informer of `resource` that keeps `index` current and requeues the pods its namespace holds."""

        def handle(kind: str, obj: Obj, old: Obj | None) -> None:
            index.apply(kind, obj)
            same = old is not None and (old.get("spec"), old.get("status")) == (obj.get("spec"), obj.get("status"))
            keys = self._waiting.get(("namespace", str(obj["metadata"].get("namespace"))))
            if keys and (kind == "DELETED" or not same):
                extra = {"object": object_key(obj), "pods": len(keys)}
                log.debug("constraint changed; held pods decided again", extra=extra)
                self._requeue(list(keys))

        return Informer(client, resource, f"/api/v1/{resource}", slim, handle, idle_timeout=idle_timeout)


class NamespaceIndex:
    """An informer's objects by namespace, kept current from its events (list included)."""

    def __init__(self) -> None:
        self._by_namespace: dict[str, dict[str, Obj]] = {}

    def apply(self, kind: str, obj: Obj) -> None:
        namespace = str(obj["metadata"].get("namespace"))
        if kind == "DELETED":
            objects = self._by_namespace.get(namespace)
            if objects is not None:
                objects.pop(object_key(obj), None)
                if not objects:
                    del self._by_namespace[namespace]
        else:
            self._by_namespace.setdefault(namespace, {})[object_key(obj)] = obj

    def get(self, namespace: str) -> list[Obj]:
        return list((self._by_namespace.get(namespace) or {}).values())
