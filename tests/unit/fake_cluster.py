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

from reconciler.kube import ApiError
from reconciler.slim import slim_node, slim_pod

Obj = dict[str, Any]


@dataclass
class Write:
    op: str                 # "annotate" | "resize"
    pod: str                # namespace/name
    body: Obj
    resource_version: str | None = None


@dataclass
class Event:
    name: str
    type: str
    reason: str
    message: str


@dataclass
class FakeCluster:
    pods: dict[str, Obj] = field(default_factory=dict)            # the apiserver's truth, by namespace/name
    nodes: dict[str, Obj] = field(default_factory=dict)
    cache: dict[str, Obj] = field(default_factory=dict)           # what the informer delivered
    writes: list[Write] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    failures: dict[str, list[ApiError]] = field(default_factory=dict)   # op -> errors raised on the next calls
    lagging_cache: bool = False     # True: writes reach the cache only on sync()
    _rv: int = 100

    # ------------------------------------------------------------------ test setup

    def add_node(self, name: str, labels: Mapping[str, str]) -> None:
        self.nodes[name] = slim_node({"metadata": {"name": name, "resourceVersion": "1", "labels": dict(labels)}})

    def add_pod(self, pod: Obj) -> str:
        pod = copy.deepcopy(pod)
        pod["metadata"].setdefault("generation", 1)
        pod["metadata"]["resourceVersion"] = self._next_rv()
        key = _key(pod)
        self.pods[key] = pod
        self.cache[key] = slim_pod(pod)
        return key

    def fail(self, op: str, *errors: ApiError) -> None:
        """The next calls of `op` (get/annotate/resize) raise these errors, in order."""
        self.failures.setdefault(op, []).extend(errors)

    def sync(self) -> None:
        """Deliver every pending watch event to the cache."""
        self.cache = {key: slim_pod(pod) for key, pod in self.pods.items()}

    def pod_now(self, key: str) -> Obj:
        return self.pods[key]

    def ops(self) -> list[str]:
        return [w.op for w in self.writes]

    # ------------------------------------------------------------------ PodReader

    def pod(self, key: str) -> Obj | None:
        return self.cache.get(key)

    async def node(self, name: str) -> Obj | None:
        return self.nodes.get(name)

    # ------------------------------------------------------------------ PodWriter

    async def get(self, pod: Obj) -> Obj:
        self._maybe_fail("get")
        return slim_pod(self._stored(pod))

    async def annotate(self, pod: Obj, annotations: Mapping[str, str | None],
                       resource_version: str | None = None) -> Obj:
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

    async def resize(self, pod: Obj, patch: Obj) -> Obj:
        self._maybe_fail("resize")
        stored = self._stored(pod)
        self.writes.append(Write("resize", _key(stored), copy.deepcopy(patch)))
        by_name = {c["name"]: c for c in stored["spec"]["containers"]}
        for change in patch.get("spec", {}).get("containers", []):
            resources = by_name[change["name"]].setdefault("resources", {})
            for kind, values in change.get("resources", {}).items():
                resources.setdefault(kind, {}).update(values)
        stored["metadata"]["generation"] = stored["metadata"].get("generation", 1) + 1
        return self._written(stored)

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
            self.cache[_key(stored)] = slim_pod(stored)
        return slim_pod(stored)

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)


@dataclass
class FakeConfig:
    config: Any
    generation: int = 1


def _key(pod: Obj) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
