"""An in-memory stand-in for the apiserver behind reconciler.ports (PodReader, PodWriter, EventSink).

It keeps pods and nodes as the apiserver would (resourceVersion bumped on every
write, metadata.generation on every spec change, merge-patch annotations with an
optional resourceVersion precondition, strategic-merge of pods/resize by
container name), a cache the reconciler reads that can lag behind, a log of
every write, the events recorded, and errors to inject per operation.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kube.client import ApiError
from kube.slim import Obj, slim_node, slim_pod


@dataclass
class Write:
    op: str  # "annotate" | "resize"
    pod: str  # namespace/name
    body: Obj
    resource_version: str | None = None
    if_generation: int | None = None


@dataclass
class Event:
    name: str
    type: str
    reason: str
    message: str


@dataclass
class FakeCluster:
    pods: dict[str, Obj] = field(default_factory=dict)  # the apiserver's truth, by namespace/name
    nodes: dict[str, Obj] = field(default_factory=dict)
    cache: dict[str, Obj] = field(default_factory=dict)  # what the informer delivered
    writes: list[Write] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    failures: dict[str, list[ApiError]] = field(default_factory=dict)  # op -> errors raised on the next calls
    lagging_cache: bool = False  # True: writes reach the cache only on sync()
    auto_actuate: bool = False  # True: the kubelet actuates every resize at once (like the KWOK node)
    _rv: int = 100

    # ------------------------------------------------------------------ test setup

    def add_node(
        self,
        name: str,
        labels: Mapping[str, str],
        cpu: str = "8",
        memory: str = "32Gi",
        declared_features: list[str] | None = None,
    ) -> None:
        status: Obj = {"allocatable": {"cpu": cpu, "memory": memory}}
        if declared_features is not None:
            status["declaredFeatures"] = list(declared_features)
        self.nodes[name] = slim_node(
            {"metadata": {"name": name, "resourceVersion": "1", "labels": dict(labels)}, "status": status}
        )

    def add_pod(self, pod: Obj) -> str:
        pod = copy.deepcopy(pod)
        pod["metadata"].setdefault("generation", 1)
        pod["metadata"]["resourceVersion"] = self._next_rv()
        key = _key(pod)
        self.pods[key] = pod
        self.cache[key] = _snapshot(pod)
        return key

    def fail(self, op: str, *errors: ApiError) -> None:
        """The next calls of `op` (get/annotate/resize) raise these errors, in order."""
        self.failures.setdefault(op, []).extend(errors)

    def sync(self) -> None:
        """Deliver every pending watch event to the cache."""
        self.cache = {key: _snapshot(pod) for key, pod in self.pods.items()}

    def pod_now(self, key: str) -> Obj:
        return self.pods[key]

    def ops(self) -> list[str]:
        return [w.op for w in self.writes]

    # ------------------------------------------------------------------ the kubelet, as KEP-1287 describes it

    def actuate(self, key: str) -> None:
        """The kubelet applied the spec: status resources follow it, resize conditions go."""
        pod = self.pods[key]
        by_name = {c["name"]: c for c in [*pod["spec"]["containers"], *pod["spec"].get("initContainers", [])]}
        for status in [*pod["status"]["containerStatuses"], *pod["status"].get("initContainerStatuses", [])]:
            status["resources"] = copy.deepcopy(by_name[status["name"]]["resources"])
        if pod["spec"].get("resources"):
            pod["status"]["resources"] = copy.deepcopy(pod["spec"]["resources"])
        self._kubelet_status(pod, [])

    def defer(self, key: str, message: str = "Node didn't have enough resource: cpu") -> None:
        self._pending(key, "Deferred", message)

    def mark_infeasible(self, key: str, message: str = "Node didn't have enough capacity: cpu") -> None:
        self._pending(key, "Infeasible", message)

    def fail_actuation(self, key: str, message: str = "attempting to set memory limit below usage") -> None:
        pod = self.pods[key]
        self._kubelet_status(
            pod,
            [
                {
                    "type": "PodResizeInProgress",
                    "status": "True",
                    "reason": "Error",
                    "message": message,
                    "observedGeneration": pod["metadata"]["generation"],
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        )

    def start_containers(self, key: str, report_resources: bool = True) -> None:
        """The containers start; a kubelet without in-place resize reports no resources."""
        pod = self.pods[key]
        by_name = {c["name"]: c for c in pod["spec"]["containers"]}
        for status in pod["status"]["containerStatuses"]:
            status["state"] = {"running": {}}
            status["resources"] = copy.deepcopy(by_name[status["name"]]["resources"]) if report_resources else None
        pod["status"]["phase"] = "Running"
        if report_resources:
            self._kubelet_status(pod, [])
        else:
            pod["status"].pop("observedGeneration", None)
            pod["metadata"]["resourceVersion"] = self._next_rv()
            self.cache[_key(pod)] = _snapshot(pod)

    def ungate(self, key: str) -> None:
        """The pod's scheduling gates removed (a spec change: the apiserver bumps the generation)."""
        pod = self.pods[key]
        pod["spec"].pop("schedulingGates", None)
        pod["metadata"]["generation"] = pod["metadata"].get("generation", 1) + 1
        self._written(pod)

    def schedule(self, key: str, node: str = "node-1") -> None:
        """The scheduler binds the pod to `node` (a Binding: no spec change counted)."""
        pod = self.pods[key]
        pod["spec"]["nodeName"] = node
        self._written(pod)

    def settle(self, key: str) -> None:
        """The kubelet saw a spec equal to what runs (e.g. after a revert): conditions go."""
        self._kubelet_status(self.pods[key], [])

    def _pending(self, key: str, reason: str, message: str) -> None:
        pod = self.pods[key]
        self._kubelet_status(
            pod,
            [
                {
                    "type": "PodResizePending",
                    "status": "True",
                    "reason": reason,
                    "message": message,
                    "observedGeneration": pod["metadata"]["generation"],
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        )

    def _kubelet_status(self, pod: Obj, conditions: list[Obj]) -> None:
        pod["status"]["conditions"] = conditions
        pod["status"]["observedGeneration"] = pod["metadata"]["generation"]
        pod["metadata"]["resourceVersion"] = self._next_rv()
        self.cache[_key(pod)] = _snapshot(pod)

    # ------------------------------------------------------------------ PodReader

    def pod(self, key: str) -> Obj | None:
        return self.cache.get(key)

    def unbound(self, key: str) -> Obj | None:
        cached = self.cache.get(key)
        return cached if cached is not None and not cached["spec"].get("nodeName") else None

    async def node(self, name: str) -> Obj | None:
        return self.nodes.get(name)

    # ------------------------------------------------------------------ PodWriter

    async def get(self, pod: Obj) -> Obj:
        self._maybe_fail("get")
        return slim_pod(self._stored(pod))

    async def annotate(
        self, pod: Obj, annotations: Mapping[str, str | None], resource_version: str | None = None
    ) -> Obj:
        self._maybe_fail("annotate")
        stored = self._stored(pod)
        if resource_version is not None and resource_version != stored["metadata"]["resourceVersion"]:
            raise ApiError(409, {"reason": "Conflict", "message": "the object has been modified"})
        self.writes.append(Write("annotate", _key(stored), dict(annotations), resource_version))
        current = stored["metadata"].setdefault("annotations", {})
        for key, value in annotations.items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value
        return self._written(stored)

    async def record(
        self, pod: Obj, annotations: Mapping[str, str | None], resource_version: str | None = None
    ) -> None:
        await self.annotate(pod, annotations, resource_version)

    async def resize(
        self, pod: Obj, patch: Obj, resource_version: str | None = None, if_generation: int | None = None
    ) -> Obj:
        self._maybe_fail("resize")
        stored = self._stored(pod)
        if resource_version is not None and resource_version != stored["metadata"]["resourceVersion"]:
            raise ApiError(409, {"reason": "Conflict", "message": "the object has been modified"})
        if if_generation is not None and if_generation != stored["metadata"].get("generation", 1):
            raise ApiError(409, {"reason": "Conflict", "message": "the pod changed since it was read"})
        self.writes.append(Write("resize", _key(stored), copy.deepcopy(patch), resource_version, if_generation))
        by_name = {c["name"]: c for c in [*stored["spec"]["containers"], *stored["spec"].get("initContainers", [])]}
        for change in [*patch.get("spec", {}).get("containers", []), *patch.get("spec", {}).get("initContainers", [])]:
            resources = by_name[change["name"]].setdefault("resources", {})
            for kind, values in change.get("resources", {}).items():
                resources.setdefault(kind, {}).update(values)
        for kind, values in patch.get("spec", {}).get("resources", {}).items():
            stored["spec"].setdefault("resources", {}).setdefault(kind, {}).update(values)
        stored["metadata"]["generation"] = stored["metadata"].get("generation", 1) + 1
        written = self._written(stored)
        if self.auto_actuate:
            self.actuate(_key(stored))
        return written

    # ------------------------------------------------------------------ EventSink

    async def emit(self, ref: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        self.events.append(Event(ref["name"], str(event_type), str(reason), message))

    # ------------------------------------------------------------------ internals

    def _maybe_fail(self, op: str) -> None:
        pending = self.failures.get(op)
        if pending:
            raise pending.pop(0)

    def _stored(self, pod: Obj) -> Obj:
        stored = self.pods.get(_key(pod))
        if stored is None:
            raise ApiError(404, {"reason": "NotFound", "message": f"pods {pod['metadata']['name']!r} not found"})
        return stored

    def _written(self, stored: Obj) -> Obj:
        stored["metadata"]["resourceVersion"] = self._next_rv()
        if not self.lagging_cache:
            self.cache[_key(stored)] = _snapshot(stored)
        return _snapshot(stored)

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)


@dataclass
class FakeConfig:
    config: Any
    generation: int = 1


@dataclass
class FakeClock:
    now: float = 1_767_225_600.0  # 2026-01-01T00:00:00Z, when the fake kubelet sets its conditions

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def _snapshot(pod: Obj) -> Obj:
    """The slim pod as a watch event would deliver it: a copy sharing nothing with the store."""
    return slim_pod(copy.deepcopy(pod))


def _key(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
