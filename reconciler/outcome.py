"""Where a pod's in-place resize stands, read from the pod alone (pure, no I/O).

The kubelet reports a resize (KEP-1287) through ``status.observedGeneration``,
``PodResizePending`` (``Deferred``: retried by the kubelet; ``Infeasible``: never, until the
spec changes), ``PodResizeInProgress`` (reason ``Error`` when actuation failed; retried on each
pod sync) and ``status.containerStatuses[].resources`` (what the containers have). A resize is
*actuated* when the kubelet has observed the spec's generation, no resize condition is
present, and every running container's status resources equal its spec by value.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kube.slim import Obj
from resizer import OriginalsError, QuantityError, original_keys, parse_quantity, sidecars

# The resize-state record and its stages are the pod model's (re-exported for the reconciler).
from resizer.podstate import ResizeState as ResizeState
from resizer.podstate import Stage as Stage

PENDING = "PodResizePending"
IN_PROGRESS = "PodResizeInProgress"
DEFERRED = "Deferred"
INFEASIBLE = "Infeasible"
ERROR = "Error"
RESOURCES = ("cpu", "memory")
KINDS = ("requests", "limits")


@dataclass(frozen=True)
class Observation:
    stage: Stage
    message: str = ""
    since: str | None = None  # the condition's lastTransitionTime, when there is one


def observe(pod: Obj) -> Observation:
    status = pod.get("status") or {}
    generation = pod["metadata"].get("generation")
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    pending = conditions.get(PENDING)
    if pending is not None and _current(pending, generation):
        if pending.get("reason") == INFEASIBLE:
            return _from_condition(Stage.INFEASIBLE, pending)
        if pending.get("reason") == DEFERRED:
            return _from_condition(Stage.DEFERRED, pending)
    progress = conditions.get(IN_PROGRESS)
    if progress is not None and progress.get("reason") == ERROR:
        return _from_condition(Stage.ERROR, progress)
    containers = pod["spec"].get("containers") or []
    statuses = {s.get("name"): s for s in status.get("containerStatuses") or []}
    if any(c["name"] not in statuses for c in containers):
        return Observation(Stage.REQUESTED)  # the kubelet sizes containers when they start
    reported = [statuses[c["name"]] for c in containers]
    if all(s.get("running") for s in reported) and all(s.get("resources") is None for s in reported):
        return Observation(Stage.UNSUPPORTED)
    if any(s.get("resources") is None for s in reported):
        return Observation(Stage.REQUESTED)  # not started yet (a non-running container reports
        # its allocated resources once it has any)
    observed = status.get("observedGeneration")
    stale = observed is not None and generation is not None and observed < generation
    if stale or pending is not None or progress is not None:
        return Observation(Stage.REQUESTED)
    if (
        all(same_resources(c.get("resources"), statuses[c["name"]].get("resources")) for c in containers)
        and _sidecars_actuated(pod)
        and _pod_level_actuated(pod)
    ):
        return Observation(Stage.ACTUATED)
    return Observation(Stage.REQUESTED)


def _sidecars_actuated(pod: Obj) -> bool:
    """Every sidecar that reports its resources has its spec (one that reports none, e.g. not
    running, does not hold the pod's resize back)."""
    statuses = {s.get("name"): s for s in (pod.get("status") or {}).get("initContainerStatuses") or []}
    return all(
        same_resources(c.get("resources"), statuses[c["name"]]["resources"])
        for c in sidecars(pod)
        if (statuses.get(c["name"]) or {}).get("resources") is not None
    )


def _pod_level_actuated(pod: Obj) -> bool:
    """The pod-level values (spec.resources) are what the pod has (status.resources, reported by
    kubelets that resize them, KEP-5419); a kubelet that reports none says nothing about them."""
    spec = pod["spec"].get("resources")
    actual = (pod.get("status") or {}).get("resources")
    return not spec or actual is None or same_resources(spec, actual)


def _current(condition: Obj, generation: int | None) -> bool:
    """A pending condition speaks about the current spec unless it names an older generation."""
    observed = condition.get("observedGeneration")
    return observed is None or generation is None or observed >= generation


def _from_condition(stage: Stage, condition: Obj) -> Observation:
    return Observation(stage, condition.get("message") or "", condition.get("lastTransitionTime"))


def same_resources(spec: Obj | None, actual: Obj | None) -> bool:
    """cpu and memory requests and limits equal by value (1 == 1000m); absent == absent."""
    return _values(spec) == _values(actual)


def _values(resources: Obj | None) -> dict[tuple[str, str], Fraction]:
    values = {}
    for kind in KINDS:
        for name, text in ((resources or {}).get(kind) or {}).items():
            if name in RESOURCES:
                try:
                    values[(kind, name)] = parse_quantity(str(text))
                except QuantityError:
                    values[(kind, name)] = Fraction(-1)  # unreadable: never equal to a real value
    return values


SPEC_SIZE_CHARS = 16


def spec_size(pod: Obj) -> str:
    """A short digest of every container's cpu/memory requests and limits, by value (1 == 1000m), of
    every sidecar's that has originals recorded (one without was never sized: leaving it out keeps the
    digests recorded before sidecars could be sized), and of the pod level's (spec.resources), if set."""
    sized = [*(pod["spec"].get("containers") or []), *_recorded_sidecars(pod)]
    digest = sorted(
        (c["name"], kind, name, str(value))
        for c in sized
        for (kind, name), value in _values(c.get("resources")).items()
    )
    if pod["spec"].get("resources"):  # absent: the digest pods without pod-level resources always had
        digest.extend(
            sorted(("", kind, name, str(value)) for (kind, name), value in _values(pod["spec"]["resources"]).items())
        )
    return hashlib.sha256(repr(digest).encode()).hexdigest()[:SPEC_SIZE_CHARS]


def _recorded_sidecars(pod: Obj) -> list[Mapping[str, Any]]:
    """The sidecars with an original recorded under a key :func:`resizer.original_keys` reads; none
    for a pod whose containers' keys collide (never sized: every program refuses it)."""
    recorded = pod["metadata"].get("annotations") or {}
    try:
        keys = original_keys(pod)
    except OriginalsError:
        return []
    return [c for c in sidecars(pod) if any(key in recorded for key in keys[c["name"]].values())]


def revert_patch(pod: Obj) -> Obj:
    """The pods/resize patch that sets each container's (and sidecar's) spec back to what it actually
    has: only the cpu/memory values that differ; a value the container does not report is left as it is."""
    status = pod.get("status") or {}
    spec: Obj = {}
    for field, containers, statuses in (
        ("containers", pod["spec"].get("containers") or [], status.get("containerStatuses")),
        ("initContainers", sidecars(pod), status.get("initContainerStatuses")),
    ):
        by_name = {s.get("name"): s for s in statuses or []}
        for container in containers:
            resources = _differences(
                container.get("resources") or {}, (by_name.get(container["name"]) or {}).get("resources") or {}
            )
            if resources:
                spec.setdefault(field, []).append({"name": container["name"], "resources": resources})
    if pod["spec"].get("resources"):  # the pod level too, in the same patch (what the pod has)
        pod_level = _differences(pod["spec"]["resources"], status.get("resources") or {})
        if pod_level:
            spec["resources"] = pod_level
    return {"spec": spec} if spec else {}


def _differences(spec: Obj, actual: Obj) -> dict[str, dict[str, str]]:
    resources: dict[str, dict[str, str]] = {}
    for kind in KINDS:
        for name in RESOURCES:
            have = (actual.get(kind) or {}).get(name)
            want = (spec.get(kind) or {}).get(name)
            if have is not None and (want is None or not same_resources({kind: {name: want}}, {kind: {name: have}})):
                resources.setdefault(kind, {})[name] = have
    return resources


def allocatable_fingerprint(node: Obj | None) -> str:
    allocatable = ((node or {}).get("status") or {}).get("allocatable") or {}
    return ",".join(f"{k}={allocatable[k]}" for k in RESOURCES if k in allocatable)
