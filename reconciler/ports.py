"""The small typed interfaces `reconcile(key)` reads and writes through, and their API-backed versions.

The reconcile path (reconciler.controller) sees the cluster only through `PodReader` (cached pods
and nodes), `PodWriter` (the three pod writes) and `EventSink`; tests give it fakes of all three.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kube import JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, ApiError, KubeClient
from kube.informer import Informer
from kube.slim import Obj as Obj  # re-exported: the ports' object type (defined once, in slim)
from kube.slim import slim_node, slim_pod
from resizer import CompiledConfig

# A test-only fault hook: called with the name of each write step right after it succeeded.
FaultHook = Callable[[str], None]


def no_fault(step: str) -> None:
    """The production fault hook: nothing happens."""


class PodReader(Protocol):
    def pod(self, key: str) -> Obj | None:
        """The cached (slim) pod `namespace/name`, or None."""

    def unbound(self, key: str) -> Obj | None:
        """The cached pod `namespace/name` not bound to a node yet (slim: only what a gated pod's
        binding reads, reconciler.gated), or None."""

    async def node(self, name: str) -> Obj | None:
        """The (slim) node; a cache miss is read from the apiserver; None if there is no such node."""


class PodWriter(Protocol):
    """Every write the reconcile path makes to a pod. Each returns the pod as written (slim)."""

    async def get(self, pod: Obj) -> Obj:
        """The pod as the apiserver has it now."""

    async def annotate(
        self, pod: Obj, annotations: Mapping[str, str | None], resource_version: str | None = None
    ) -> Obj:
        """Merge-patch annotations (None deletes a key); with `resource_version`, conditional on it (409)."""

    async def resize(
        self, pod: Obj, patch: Obj, resource_version: str | None = None, if_generation: int | None = None
    ) -> Obj:
        """Patch the pods/resize subresource with `patch` (a strategic merge patch's shape); with
        `resource_version`, conditional on it, with `if_generation`, on the pod's uid and
        metadata.generation only (a status update meanwhile does not conflict): 409 otherwise."""

    async def record(
        self, pod: Obj, annotations: Mapping[str, str | None], resource_version: str | None = None
    ) -> None:
        """`annotate` when the pod as written is not needed (its reply is not read)."""


class EventSink(Protocol):
    async def emit(self, ref: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """Record an Event about `ref`; best effort, never raises."""


class ConfigView(Protocol):
    """The config in use (None until a valid one was read) and a counter bumped on each change."""

    @property
    def config(self) -> CompiledConfig | None: ...

    @property
    def generation(self) -> int: ...


def pod_path(pod: Obj, subresource: str | None = None) -> str:
    meta = pod["metadata"]
    path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
    return f"{path}/{subresource}" if subresource else path


class CachedReader:
    """PodReader over the informers' stores (read through the informers each time: a re-list
    replaces them), with a GET for a node the cache has not seen yet."""

    def __init__(self, client: KubeClient, pods: Informer, nodes: Informer, unbound: Informer) -> None:
        self._client = client
        self._pods = pods
        self._nodes = nodes
        self._unbound = unbound

    def pod(self, key: str) -> Obj | None:
        return self._pods.store.get(key)

    def unbound(self, key: str) -> Obj | None:
        return self._unbound.store.get(key)

    async def node(self, name: str) -> Obj | None:
        node = self._nodes.store.get(name)
        if node is not None:
            return node
        try:
            return slim_node(await self._client.get(f"/api/v1/nodes/{name}"))
        except ApiError as err:
            if err.status == 404:
                return None
            raise


class ApiWriter:
    """PodWriter over the API client."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def get(self, pod: Obj) -> Obj:
        return slim_pod(await self._client.get(pod_path(pod)))

    async def annotate(
        self, pod: Obj, annotations: Mapping[str, str | None], resource_version: str | None = None
    ) -> Obj:
        return slim_pod(
            await self._client.patch(pod_path(pod), _annotations_patch(annotations, resource_version), MERGE_PATCH)
        )

    async def resize(
        self, pod: Obj, patch: Obj, resource_version: str | None = None, if_generation: int | None = None
    ) -> Obj:
        if if_generation is not None:
            try:
                fenced = fenced_resize_patch(pod, patch, if_generation)
                return slim_pod(await self._client.patch(pod_path(pod, "resize"), fenced, JSON_PATCH))
            except ApiError as err:
                # A failed `test` is a 422 the apiserver does not tell from other invalid patches:
                # it is a conflict if the pod is no longer the one planned from.
                if err.status == 422 and await self._changed(pod, if_generation):
                    raise ApiError(
                        409, {"reason": "Conflict", "message": "the pod changed since it was read (uid or generation)"}
                    ) from None
                raise
        if resource_version is not None:
            patch = {**patch, "metadata": {"resourceVersion": resource_version}}
        return slim_pod(await self._client.patch(pod_path(pod, "resize"), patch, STRATEGIC_MERGE_PATCH))

    async def _changed(self, pod: Obj, generation: int) -> bool:
        try:
            now = (await self._client.get(pod_path(pod)))["metadata"]
        except ApiError as err:
            if err.status == 404:
                return True
            raise
        return bool(now.get("uid") != pod["metadata"].get("uid") or now.get("generation") != generation)

    async def record(
        self, pod: Obj, annotations: Mapping[str, str | None], resource_version: str | None = None
    ) -> None:
        await self._client.write("PATCH", pod_path(pod), _annotations_patch(annotations, resource_version), MERGE_PATCH)


def fenced_resize_patch(pod: Obj, patch: Obj, generation: int) -> list[Obj]:
    """`patch` as a JSON patch whose first operations test the pod's uid and metadata.generation
    (and each container's position by name): it lands only on the spec it was planned from, so a
    deposed leader's resize still on the wire cannot undo its successor's."""
    ops: list[Obj] = [
        {"op": "test", "path": "/metadata/uid", "value": pod["metadata"]["uid"]},
        {"op": "test", "path": "/metadata/generation", "value": generation},
    ]
    for field in ("containers", "initContainers"):  # initContainers: sidecars
        index = {c["name"]: i for i, c in enumerate(pod["spec"].get(field) or [])}
        for change in (patch.get("spec") or {}).get(field) or []:
            i = index[change["name"]]
            base = f"/spec/{field}/{i}"
            ops.append({"op": "test", "path": f"{base}/name", "value": change["name"]})
            ops.extend(_resources_ops(base, pod["spec"][field][i].get("resources"), change["resources"]))
    pod_level = (patch.get("spec") or {}).get("resources")
    if pod_level:  # the pod level (spec.resources) in the same patch: one atomic resize
        ops.extend(_resources_ops("/spec", pod["spec"].get("resources"), pod_level))
    return ops


def _resources_ops(base: str, current: Obj | None, change: Obj) -> list[Obj]:
    if not current:
        return [{"op": "add", "path": f"{base}/resources", "value": change}]
    ops: list[Obj] = []
    for kind, values in change.items():
        if kind not in current:
            ops.append({"op": "add", "path": f"{base}/resources/{kind}", "value": values})
            continue
        ops.extend(
            {"op": "add", "path": f"{base}/resources/{kind}/{_pointer(name)}", "value": value}
            for name, value in values.items()
        )
    return ops


def _pointer(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def _annotations_patch(annotations: Mapping[str, str | None], resource_version: str | None) -> Obj:
    version = {} if resource_version is None else {"resourceVersion": resource_version}
    return {"metadata": {**version, "annotations": dict(annotations)}}
