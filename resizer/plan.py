"""Desired resources of a pod on a given node type, and the ``pods/resize`` patch."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, Literal

from resizer.config import Bounds, Policy
from resizer.errors import ResizerError
from resizer.originals import ContainerOriginals, ResourceOriginal, read_originals, read_pod_originals
from resizer.podstate import sidecars
from resizer.preflight import pod_totals
from resizer.qos import QoSClass, pod_qos_class
from resizer.quantity import (
    MAX_QUANTITY,
    RESOURCES,
    QuantityError,
    Resource,
    coerce_quantity,
    format_cpu,
    format_memory,
    round_ratio,
    to_bytes,
    to_millicores,
)

Clamp = Literal["min", "max"]
Outcome = Literal["Resize", "AlreadyAligned", "UnknownNodeType", "QoSChange", "NothingToSize", "PodLevelResources"]

# What a node's kubelet declares (status.declaredFeatures, KEP-5328) when it resizes pod-level
# resources in place (KEP-5419); the apiserver refuses such a resize on a node without it.
POD_LEVEL_RESIZE_FEATURE = "InPlacePodLevelResourcesVerticalScaling"
# The ResourceChange.container of the pod-level (spec.resources) values: no container's name.
POD_LEVEL = ""
RESTART_CONTAINER_POLICY = "RestartContainerPolicy"
SIDECARS_OFF = "sidecars=false"
MEMORY_LIMIT_KEPT = "memoryLimitDecrease=Never"
# The largest amount a quantity can hold, in the plan's units (Kubernetes caps a quantity
# at 2^63-1 base units): a limit grows with the ratio only up to here.
MAX_UNITS: Mapping[Resource, int] = {"cpu": MAX_QUANTITY * 1000, "memory": MAX_QUANTITY}
_TO_UNITS: Mapping[Resource, Callable[[Fraction], int]] = {"cpu": to_millicores, "memory": to_bytes}
_FORMAT: Mapping[Resource, Callable[[int], str]] = {"cpu": format_cpu, "memory": format_memory}


@dataclass(frozen=True)
class ResourceChange:
    """One resource of one container: baseline, target and what the spec holds now, in whole
    millicores (cpu) or bytes (memory); None: not set."""

    container: str
    resource: Resource
    original_request: int
    desired_request: int
    current_request: int | None
    original_limit: int | None
    desired_limit: int | None
    current_limit: int | None
    clamped: Clamp | None = None
    skipped: str | None = None
    held: str | None = None
    sidecar: bool = False  # a restartable init container (patched under spec.initContainers)

    @property
    def changed(self) -> bool:
        if self.skipped is not None:
            return False
        limit_differs = self.desired_limit is not None and self.desired_limit != self.current_limit
        return self.desired_request != self.current_request or limit_differs

    def describe(self) -> str:
        """E.g. ``cpu 1 -> 800m (limit 1 -> 800m, clamped to min)``."""
        text = f"{self.resource} {self._show(self.current_request)}"
        if self.skipped is not None:
            return f"{text} (skipped: {self.skipped})"
        text += f" -> {self._show(self.desired_request)}"
        details = []
        if self.desired_limit is not None:
            details.append(f"limit {self._show(self.current_limit)} -> {self._show(self.desired_limit)}")
        if self.clamped is not None:
            details.append(f"clamped to {self.clamped}")
        if self.held is not None:
            details.append(f"held: {self.held}")
        return f"{text} ({', '.join(details)})" if details else text

    def _show(self, amount: int | None) -> str:
        return "unset" if amount is None else _FORMAT[self.resource](amount)


@dataclass(frozen=True)
class ResizePlan:
    """What to do with a pod on ``node_type``; ``patch``, the ``pods/resize`` body, is non-empty
    only for ``Resize`` (``QoSChange``: the target would change the QoS class, so nothing is sent)."""

    node_type: str
    baseline_node_type: str
    rule: str
    outcome: Outcome
    changes: tuple[ResourceChange, ...] = ()
    patch: dict[str, Any] = field(default_factory=dict)

    @property
    def clamped(self) -> bool:
        return any(change.clamped is not None for change in self.changes)

    @property
    def changed(self) -> tuple[ResourceChange, ...]:
        return tuple(change for change in self.changes if change.changed)

    def summary(self) -> str:
        """One line for an Event, e.g. ``app: cpu 1 -> 800m (limit 1 -> 800m), memory 1Gi -> 1Gi``."""
        if self.outcome == "UnknownNodeType":
            return f"node type {self.node_type!r} is not in the configuration"
        if self.outcome == "PodLevelResources":
            return (
                "the pod sets pod-level resources (spec.resources), which the scheduler counts instead of "
                "its containers', and its node cannot resize them in place (Kubernetes 1.36+ with "
                "InPlacePodLevelResourcesVerticalScaling on, declared in the node's status.declaredFeatures): "
                "resizing only the containers would save nothing and could exceed the pod-level limits; "
                "left alone"
            )
        if self.outcome == "NothingToSize" and not self.changes:
            return "no container has a cpu or memory request to size"
        text = "; ".join(
            f"{container or 'pod level'}{' (sidecar)' if changes[0].sidecar else ''}: "
            f"{', '.join(change.describe() for change in changes)}"
            for container, changes in _by_container(self.changes).items()
        )
        return f"would change the QoS class: {text}" if self.outcome == "QoSChange" else text


def node_resizes_pod_level(node: Mapping[str, Any] | None) -> bool:
    """Whether the node's kubelet resizes pod-level resources in place: it declares the feature
    in ``status.declaredFeatures``. Kubelets of 1.35 (no such resize) declare nothing by default,
    a 1.36 kubelet with the feature gate off leaves it out."""
    features = ((node or {}).get("status") or {}).get("declaredFeatures") or []
    return isinstance(features, list) and POD_LEVEL_RESIZE_FEATURE in features


class PlanError(ResizerError):
    """The pod's baseline cannot be sized into quantities Kubernetes can hold."""


def desired_quantity(original: int, ratio: Fraction, bounds: Bounds) -> tuple[int, Clamp | None]:
    """``original x ratio`` (rounded half away from zero) and the bound that stopped it, if any.

    A shrink stops at ``min(bounds.min, original)``, a growth at ``max(bounds.max, original)``: the
    bounds stop the ratio but never push a value past its original, nor pull one already outside
    them in against the ratio. A positive amount never becomes 0 (it would leave the QoS computation).
    """
    scaled = round_ratio(original * ratio.numerator, ratio.denominator)
    if ratio < 1:
        floor = max(min(bounds.min, original), 1)
        return (floor, "min") if scaled < floor else (scaled, None)
    if ratio > 1:
        ceiling = max(bounds.max, original)
        return (ceiling, "max") if scaled > ceiling else (scaled, None)
    return original, None


def desired_limit(original_request: int, original_limit: int, desired_request: int, maximum: int) -> int:
    """The limit that keeps its relation to the request, so the QoS class holds by construction.

    A limit equal to its request follows it exactly (Guaranteed stays Guaranteed); one above it is
    scaled by the request's effective ratio (bounds included) and stays strictly above the new
    request after rounding (Burstable never turns Guaranteed). A growth stops at
    ``max(original_limit, maximum)`` so no quantity overflows.
    """
    if original_limit == original_request:
        return desired_request
    scaled = round_ratio(original_limit * desired_request, original_request)
    if original_limit > original_request:
        scaled = max(scaled, desired_request + 1)
    if desired_request > original_request:
        scaled = min(scaled, max(original_limit, maximum))
    return max(scaled, 1)


def plan_resize(
    pod: Mapping[str, Any],
    policy: Policy,
    node_type: str,
    resize_restart_containers: bool = False,
    pod_level: bool = False,
) -> ResizePlan:
    """Plan the resize of a pod bound to a ``node_type`` node.

    Per resource with a baseline request: :func:`desired_quantity` of original x baselinePerf /
    nodePerf, the limit by :func:`desired_limit`; ``memoryLimitDecrease: Never`` keeps memory
    limits at least at their originals. ``RestartContainer`` resources are left alone unless
    ``resize_restart_containers``. Sidecars are sized when the policy opts in (``sidecars: true``),
    else planned back to their recorded originals. Pod-level ``spec.resources`` (KEP-2837) are
    sized with the containers in one patch when ``pod_level`` (the node resizes them, KEP-5419),
    else the pod is left alone. Raises :class:`resizer.originals.OriginalsError` on a corrupt
    baseline annotation, :class:`PlanError` on a value no Kubernetes quantity can hold.
    """

    def plan(
        outcome: Outcome, changes: tuple[ResourceChange, ...] = (), patch: dict[str, Any] | None = None
    ) -> ResizePlan:
        return ResizePlan(node_type, policy.baseline_node_type, policy.rule, outcome, changes, patch or {})

    node = policy.node_types.get(node_type)
    if node is None:
        return plan("UnknownNodeType")
    if _pod_level(pod) and not pod_level:
        return plan("PodLevelResources")
    baseline = policy.node_types[policy.baseline_node_type]
    sizing = _Sizing(
        {"cpu": baseline.cpu_perf / node.cpu_perf, "memory": baseline.mem_perf / node.mem_perf},
        {"cpu": policy.cpu_bounds, "memory": policy.memory_bounds},
        resize_restart_containers,
        policy.memory_limit_decrease == "Never",
    )
    changes = tuple(_changes(pod, read_originals(pod), sizing, policy.sidecars))
    pod_originals = read_pod_originals(pod)
    if pod_originals is not None:
        try:
            changes += tuple(_pod_level_changes(pod, pod_originals, changes, sizing))
        except QuantityError as error:
            raise PlanError(f"cannot read the containers' resources: {error}") from None
    if all(change.skipped is not None for change in changes):
        return plan("NothingToSize", changes)
    try:
        # The construction keeps the QoS class; checking the result guards against
        # originals that do not describe the spec (e.g. edited after admission).
        if pod_qos_class(resized_spec(pod, changes)) != _current_qos(pod):
            return plan("QoSChange", changes)
        patch = _patch(changes)
    except QuantityError as error:
        raise PlanError(f"cannot express the resized values as quantities: {error}") from None
    return plan("Resize" if patch else "AlreadyAligned", changes, patch)


@dataclass(frozen=True)
class _Sizing:
    """What sizes each resource of a pod on its node type (the policy's, for this node type)."""

    ratios: Mapping[Resource, Fraction]
    bounds: Mapping[Resource, Bounds]
    resize_restart_containers: bool
    keep_memory_limits: bool  # memoryLimitDecrease: Never


def _changes(
    pod: Mapping[str, Any], originals: Mapping[str, ContainerOriginals], sizing: _Sizing, size_sidecars: bool
) -> Iterator[ResourceChange]:
    for container in (pod.get("spec") or {}).get("containers") or []:
        yield from _container_changes(container, originals, sizing)
    unchanged = replace(sizing, ratios={resource: Fraction(1) for resource in RESOURCES})
    for sidecar in sidecars(pod):
        if size_sidecars:
            yield from _container_changes(sidecar, originals, sizing, sidecar=True)
            continue
        # Not sized: back to its original if it differs (sized while the opt-in was on).
        for change in _container_changes(sidecar, originals, unchanged, sidecar=True):
            if change.changed:
                yield replace(change, held=SIDECARS_OFF)


def _container_changes(
    container: Mapping[str, Any], originals: Mapping[str, ContainerOriginals], sizing: _Sizing, sidecar: bool = False
) -> Iterator[ResourceChange]:
    restart_resources = set() if sizing.resize_restart_containers else _restart_resources(container)
    for resource in RESOURCES:
        original = originals[container["name"]].of(resource)
        change = _resource_change(container, resource, original, sizing, resource in restart_resources)
        if change is not None:
            yield replace(change, sidecar=True) if sidecar else change


def _resource_change(
    container: Mapping[str, Any], resource: Resource, original: ResourceOriginal, sizing: _Sizing, skip: bool
) -> ResourceChange | None:
    to_units = _TO_UNITS[resource]
    original_request = to_units(original.request) if original.request is not None else 0
    if original_request <= 0:
        return None  # nothing to scale; a zero request is left alone like a missing one
    original_limit = to_units(original.limit) if original.limit is not None else None
    current_request, current_limit = (_current(container, kind, resource) for kind in ("requests", "limits"))
    clamped: Clamp | None = None
    held: str | None = None
    if skip:  # left as it is (restart policy)
        desired_request = original_request if current_request is None else current_request
        limit = current_limit
    else:
        desired_request, clamped = desired_quantity(original_request, sizing.ratios[resource], sizing.bounds[resource])
        limit = None
        if original_limit is not None:
            limit = desired_limit(original_request, original_limit, desired_request, MAX_UNITS[resource])
            if sizing.keep_memory_limits and resource == "memory" and limit < original_limit:
                # Never lower a memory limit below the author's: a Guaranteed container keeps
                # its memory request too (request == limit), a Burstable one only its limit.
                held = MEMORY_LIMIT_KEPT
                limit = original_limit
                if original_limit == original_request:
                    desired_request, clamped = original_request, None
    return ResourceChange(
        container["name"],
        resource,
        original_request=original_request,
        desired_request=desired_request,
        current_request=current_request,
        original_limit=original_limit,
        desired_limit=limit,
        current_limit=current_limit,
        clamped=clamped,
        held=held,
        skipped=RESTART_CONTAINER_POLICY if skip else None,
    )


def _pod_level_changes(
    pod: Mapping[str, Any],
    originals: ContainerOriginals,
    container_changes: tuple[ResourceChange, ...],
    sizing: _Sizing,
) -> Iterator[ResourceChange]:
    """The pod-level values (``spec.resources``), each like a container's, then raised to what
    the apiserver validates against the resized containers: a pod-level request at least the
    containers' aggregate request, a pod-level limit at least every container's limit
    (and a pod-level limit equal to its request stays equal, so the QoS class holds)."""
    containers_spec = {**resized_spec(pod, container_changes), "resources": None}
    aggregate = pod_totals(containers_spec)
    level = {"resources": (pod.get("spec") or {}).get("resources") or {}}
    for resource in RESOURCES:
        change = _resource_change(level | {"name": POD_LEVEL}, resource, originals.of(resource), sizing, False)
        if change is None:
            continue
        needed_request = aggregate.get(("requests", resource), 0)
        needed_limit = max((_current(c, "limits", resource) or 0 for c in containers_spec["containers"]), default=0)
        yield _within_validation(change, needed_request, needed_limit)


def _within_validation(change: ResourceChange, needed_request: int, needed_limit: int) -> ResourceChange:
    request, limit = max(change.desired_request, needed_request), change.desired_limit
    if limit is not None:
        limit = max(limit, needed_limit, request)
        if change.original_limit == change.original_request:
            request = limit  # Guaranteed at pod level: request and limit move together
        elif change.original_limit is not None and change.original_limit > change.original_request:
            limit = max(limit, request + 1)  # Burstable stays Burstable
    if (request, limit) == (change.desired_request, change.desired_limit):
        return change
    return replace(change, desired_request=request, desired_limit=limit, clamped=None)


def _current(container: Mapping[str, Any], kind: str, resource: Resource) -> int | None:
    value = ((container.get("resources") or {}).get(kind) or {}).get(resource)
    return None if value is None else _TO_UNITS[resource](coerce_quantity(value))


def _restart_resources(container: Mapping[str, Any]) -> set[str]:
    return {
        entry.get("resourceName")
        for entry in container.get("resizePolicy") or []
        if entry.get("restartPolicy") == "RestartContainer"
    }


def _current_qos(pod: Mapping[str, Any]) -> QoSClass:
    recorded = (pod.get("status") or {}).get("qosClass")
    return recorded if recorded else pod_qos_class(pod.get("spec") or {})


def resized_spec(pod: Mapping[str, Any], changes: tuple[ResourceChange, ...]) -> dict[str, Any]:
    """The pod spec as it would be with every (non-skipped) target applied: containers, sidecars
    and the pod level (``spec.resources``)."""
    targets = _by_container(tuple(change for change in changes if change.skipped is None))
    spec = dict(pod.get("spec") or {})
    for group in ("containers", "initContainers"):  # initContainers: sidecars
        if group in spec:
            spec[group] = [
                {
                    **container,
                    "resources": _resources_with(container.get("resources"), targets.get(container["name"], ())),
                }
                for container in spec.get(group) or []
            ]
    if POD_LEVEL in targets:
        spec["resources"] = _resources_with(spec.get("resources"), targets[POD_LEVEL])
    return spec


def _resources_with(current: Mapping[str, Any] | None, changes: Iterable[ResourceChange]) -> dict[str, Any]:
    """A ``resources`` map (requests, limits) with the changes' desired values written in."""
    resources = {kind: dict(values or {}) for kind, values in (current or {}).items()}
    for change in changes:
        for kind, amount in (("requests", change.desired_request), ("limits", change.desired_limit)):
            if amount is not None:
                resources.setdefault(kind, {})[change.resource] = _FORMAT[change.resource](amount)
    return resources


def _patch(changes: tuple[ResourceChange, ...]) -> dict[str, Any]:
    """Strategic merge patch for ``pods/resize``: only containers (sidecars under ``initContainers``,
    the pod level as ``spec.resources``) and resources that differ from the spec, a changed
    resource's request and limit together. All in one patch: the apiserver validates the levels
    against each other, and the kubelet actuates them together."""
    spec: dict[str, Any] = {}
    for container, container_changes in _by_container(tuple(c for c in changes if c.changed)).items():
        resources = _resources_with(None, container_changes)
        if container == POD_LEVEL:
            spec["resources"] = resources
        else:
            field = "initContainers" if container_changes[0].sidecar else "containers"
            spec.setdefault(field, []).append({"name": container, "resources": resources})
    return {"spec": spec} if spec else {}


def _by_container(changes: tuple[ResourceChange, ...]) -> dict[str, list[ResourceChange]]:
    grouped: dict[str, list[ResourceChange]] = {}
    for change in changes:
        grouped.setdefault(change.container, []).append(change)
    return grouped


def _pod_level(pod: Mapping[str, Any]) -> bool:
    resources = (pod.get("spec") or {}).get("resources") or {}
    return any(r in (resources.get(kind) or {}) for kind in ("requests", "limits") for r in RESOURCES)
