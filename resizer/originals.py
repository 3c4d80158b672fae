"""Baseline (pre-resize) requests and limits, persisted as pod annotations.

The annotations are the recovery contract: once a pod has been resized its spec no
longer shows the baseline, so the baseline must come from the annotations or a
restarted controller would compound resizes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from resizer.annotations import original_key, pod_original_key
from resizer.quantity import QuantityError, Resource, coerce_quantity, format_cpu, format_memory

__all__ = [
    "ContainerOriginals",
    "OriginalsError",
    "POD_ORIGINAL_KEYS",
    "ResourceOriginal",
    "missing_original_annotations",
    "missing_pod_level_originals",
    "originals_from_spec_annotations",
    "read_originals",
    "read_pod_originals",
    "sidecar_original_keys",
    "sidecars",
]

Kind = Literal["request", "limit"]
_RESOURCES: tuple[Resource, ...] = ("cpu", "memory")
_KINDS: tuple[Kind, ...] = ("request", "limit")
_SPEC_FIELD: Mapping[Kind, str] = {"request": "requests", "limit": "limits"}
_UNITS_PER_BASE: Mapping[Resource, int] = {"cpu": 1000, "memory": 1}
_FORMATTERS = {"cpu": format_cpu, "memory": format_memory}
# The pod-level (spec.resources) keys, which pods stamped before pod-level sizing lack.
POD_ORIGINAL_KEYS: frozenset[str] = frozenset(
    pod_original_key(resource, kind) for resource in _RESOURCES for kind in _KINDS)


class OriginalsError(ValueError):
    """An ``original-*`` annotation is present but does not hold a usable quantity."""


@dataclass(frozen=True)
class ResourceOriginal:
    """Baseline request and limit of one resource (None = not set)."""

    request: Fraction | None
    limit: Fraction | None


@dataclass(frozen=True)
class ContainerOriginals:
    name: str
    cpu: ResourceOriginal
    memory: ResourceOriginal

    def of(self, resource: Resource) -> ResourceOriginal:
        return self.cpu if resource == "cpu" else self.memory


def read_originals(pod: Mapping[str, Any]) -> dict[str, ContainerOriginals]:
    """Baselines of every ``spec.containers`` entry and every sidecar (:func:`sidecars`), keyed
    by container name (names are unique across containers and init containers).

    Each of the four values (cpu/memory x request/limit) comes from its annotation when
    present, otherwise from the spec. A corrupt annotation raises :class:`OriginalsError`:
    falling back to the (possibly already resized) spec would compound resizes.
    """
    annotations = _annotations(pod)
    return {
        container["name"]: ContainerOriginals(
            name=container["name"],
            cpu=_resource_original(annotations, container, "cpu"),
            memory=_resource_original(annotations, container, "memory"),
        )
        for container in _resizable(pod)
    }


def read_pod_originals(pod: Mapping[str, Any]) -> ContainerOriginals | None:
    """Baselines of the pod-level ``spec.resources`` (KEP-2837), None when the pod sets no
    pod-level cpu or memory. Like :func:`read_originals`: the annotation when present, else the
    spec; a corrupt annotation raises :class:`OriginalsError`."""
    level = _pod_level(pod)
    if not any(_spec_resources(level, kind).get(r) is not None for r in _RESOURCES for kind in _KINDS):
        return None
    annotations = _annotations(pod)
    values = {(resource, kind): _value(annotations, pod_original_key(resource, kind), level, resource, kind, "pod")
              for resource in _RESOURCES for kind in _KINDS}
    return ContainerOriginals(
        name="",
        cpu=ResourceOriginal(request=values[("cpu", "request")], limit=values[("cpu", "limit")]),
        memory=ResourceOriginal(request=values[("memory", "request")], limit=values[("memory", "limit")]),
    )


def originals_from_spec_annotations(pod: Mapping[str, Any]) -> dict[str, str]:
    """Every ``original-*`` annotation describing the spec as it is now (for the webhook):
    the containers' and the pod level's (``spec.resources``).

    Values are canonical (``format_cpu``/``format_memory``) when the quantity is a whole
    number of millicores/bytes, otherwise the spec's own string. Sidecars are included
    whether or not a policy sizes them: the baseline must exist if an admin opts in later.
    """
    originals = {
        original_key(container["name"], resource, kind): _canonical(resource, value)
        for container in _resizable(pod)
        for resource, kind, value in _spec_values(container)
    }
    originals.update((pod_original_key(resource, kind), _canonical(resource, value))
                     for resource, kind, value in _spec_values(_pod_level(pod)))
    return originals


def missing_pod_level_originals(pod: Mapping[str, Any]) -> dict[str, str]:
    """The pod-level subset of :func:`missing_original_annotations` (keys a pod stamped before
    pod-level sizing lacks)."""
    present = _annotations(pod)
    return {key: value for key, value in originals_from_spec_annotations(pod).items()
            if key in POD_ORIGINAL_KEYS and key not in present}


def missing_original_annotations(pod: Mapping[str, Any]) -> dict[str, str]:
    """The subset of :func:`originals_from_spec_annotations` not yet on the pod."""
    present = _annotations(pod)
    return {key: value for key, value in originals_from_spec_annotations(pod).items() if key not in present}


def sidecars(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod's restartable init containers (``restartPolicy: Always``): sidecars, which the
    kubelet resizes in place like containers (Kubernetes 1.33+). Plain init containers are not."""
    inits = (pod.get("spec") or {}).get("initContainers") or []
    return [init for init in inits if init.get("restartPolicy") == "Always"]


def sidecar_original_keys(pod: Mapping[str, Any]) -> frozenset[str]:
    """Every ``original-*`` key a sidecar of the pod can have (stamped since sidecars can be
    sized: a pod stamped before lacks them)."""
    return frozenset(original_key(sidecar["name"], resource, kind)
                     for sidecar in sidecars(pod) for resource in _RESOURCES for kind in _KINDS)


def _resource_original(
    annotations: Mapping[str, Any], container: Mapping[str, Any], resource: Resource
) -> ResourceOriginal:
    request, limit = (_original_value(annotations, container, resource, kind) for kind in _KINDS)
    return ResourceOriginal(request=request, limit=limit)


def _original_value(
    annotations: Mapping[str, Any], container: Mapping[str, Any], resource: Resource, kind: Kind
) -> Fraction | None:
    key = original_key(container["name"], resource, kind)
    return _value(annotations, key, container, resource, kind, f"container {container['name']!r}")


def _value(annotations: Mapping[str, Any], key: str, holder: Mapping[str, Any], resource: Resource, kind: Kind,
           what: str) -> Fraction | None:
    if key in annotations:
        return _parse_annotation(key, annotations[key])
    spec_value = _spec_resources(holder, kind).get(resource)
    if spec_value is None:
        return None
    try:
        return coerce_quantity(spec_value)
    except QuantityError as error:
        raise OriginalsError(f"{what} has an invalid {resource} {kind}: {error}") from None


def _parse_annotation(key: str, value: object) -> Fraction:
    if not isinstance(value, str):
        raise OriginalsError(f"annotation {key} must be a string quantity, got {value!r}")
    try:
        quantity = coerce_quantity(value)
    except QuantityError as error:
        raise OriginalsError(f"annotation {key} holds an invalid quantity {value!r}: {error}") from None
    if quantity < 0:
        raise OriginalsError(f"annotation {key} holds a negative quantity {value!r}")
    return quantity


def _spec_values(container: Mapping[str, Any]) -> Iterator[tuple[Resource, Kind, Any]]:
    for resource in _RESOURCES:
        for kind in _KINDS:
            value = _spec_resources(container, kind).get(resource)
            if value is not None:
                yield resource, kind, value


def _canonical(resource: Resource, value: Any) -> str:
    units = coerce_quantity(value) * _UNITS_PER_BASE[resource]
    if units.denominator == 1:
        return _FORMATTERS[resource](int(units))
    return str(value)


def _spec_resources(container: Mapping[str, Any], kind: Kind) -> Mapping[str, Any]:
    return (container.get("resources") or {}).get(_SPEC_FIELD[kind]) or {}


def _resizable(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [*((pod.get("spec") or {}).get("containers") or []), *sidecars(pod)]
def _pod_level(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod's ``spec.resources`` shaped like a container (``{"resources": ...}``)."""
    return {"resources": (pod.get("spec") or {}).get("resources") or {}}


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return (pod.get("metadata") or {}).get("annotations") or {}
