"""Pod QoS class, computed exactly as Kubernetes' ``ComputePodQOS`` does."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any, Literal

from resizer.quantity import coerce_quantity

QoSClass = Literal["Guaranteed", "Burstable", "BestEffort"]

_QOS_RESOURCES = ("cpu", "memory")


def pod_qos_class(pod_spec: Mapping[str, Any]) -> QoSClass:
    """QoS class of a pod spec (k8s.io/kubernetes pkg/apis/core/helper/qos). Only cpu and memory
    quantities above zero count, requests and limits summed per resource over containers and init containers;
    Guaranteed needs every container to set cpu and memory limits and the summed requests to equal
    the summed limits. Pod-level ``spec.resources`` setting cpu or memory replaces the containers
    (as with the PodLevelResources feature)."""
    pod_resources = pod_spec.get("resources") or {}
    if _positive(pod_resources.get("requests")) or _positive(pod_resources.get("limits")):
        holders: Iterable[Mapping[str, Any]] = [pod_resources]
    else:
        containers = [*(pod_spec.get("containers") or []), *(pod_spec.get("initContainers") or [])]
        holders = [container.get("resources") or {} for container in containers]
    requests: Counter[str] = Counter()
    limits: Counter[str] = Counter()
    every_holder_limits_both = True
    for resources in holders:
        requests.update(_positive(resources.get("requests")))
        holder_limits = _positive(resources.get("limits"))
        limits.update(holder_limits)
        every_holder_limits_both &= set(_QOS_RESOURCES) <= holder_limits.keys()
    if not requests and not limits:
        return "BestEffort"
    if every_holder_limits_both and requests == limits:
        return "Guaranteed"
    return "Burstable"


def _positive(resource_list: Mapping[str, Any] | None) -> dict[str, Fraction]:
    values = {name: coerce_quantity(value) for name, value in (resource_list or {}).items() if name in _QOS_RESOURCES}
    return {name: value for name, value in values.items() if value.numerator > 0}
