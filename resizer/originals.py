"""Baseline (pre-resize) requests and limits, persisted as pod annotations.

The annotations are the recovery contract: once a pod has been resized its spec no
longer shows the baseline, so the baseline must come from the annotations or a
restarted controller would compound resizes.

Which annotation holds a container's original is :meth:`resizer.podstate.PodState.original_keys`' answer, for every
reader and writer: the key :func:`resizer.podstate.original_key` gives, or, on a pod stamped
by an earlier version, the legacy key of a long name (:func:`resizer.podstate.legacy_original_key`)
when only that one is present. Dropping a legacy key would make the (resized) spec the baseline:
compounding. Legacy keys stay where they are (the MAC covers them as any ``original-*`` key;
rewriting them would be one more write with nothing to gain), and only today's keys are ever
written. A pod whose resizable containers would share a key (a duplicate name, or long names
whose 32-bit legacy digests collide) is refused with :class:`KeyCollisionError`, never sized
from another container's values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from resizer.podstate import (
    KeyCollisionError,
    Kind,
    Original,
    OriginalsError,
    Slot,
    pod_original_key,
    read_state,
    resizable_containers,
    sidecars,
    written_keys,
)
from resizer.quantity import QuantityError, Resource, coerce_quantity, format_cpu, format_memory

__all__ = [
    "ContainerOriginals",
    "KeyCollisionError",
    "OriginalsError",
    "ResourceOriginal",
    "missing_original_annotations",
    "only_container_values",
    "original_keys",
    "originals_from_spec_annotations",
    "read_originals",
    "read_pod_originals",
    "sidecar_original_keys",
    "sidecars",
]

_RESOURCES: tuple[Resource, ...] = ("cpu", "memory")
_KINDS: tuple[Kind, ...] = ("request", "limit")
_SPEC_FIELD: Mapping[Kind, str] = {"request": "requests", "limit": "limits"}
_UNITS_PER_BASE: Mapping[Resource, int] = {"cpu": 1000, "memory": 1}
_FORMATTERS = {"cpu": format_cpu, "memory": format_memory}


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
    present (under the key :func:`original_keys` names), otherwise from the spec. A corrupt
    annotation raises :class:`OriginalsError`: falling back to the (possibly already resized) spec
    would compound resizes; containers sharing a key raise :class:`KeyCollisionError`.
    """
    held = read_state(pod).container_originals()
    return {
        container["name"]: ContainerOriginals(
            name=container["name"],
            cpu=_resource_original(held[container["name"]], container, "cpu"),
            memory=_resource_original(held[container["name"]], container, "memory"),
        )
        for container in resizable_containers(pod)
    }


def read_pod_originals(pod: Mapping[str, Any]) -> ContainerOriginals | None:
    """Baselines of the pod-level ``spec.resources`` (KEP-2837), None when the pod sets no
    pod-level cpu or memory. Like :func:`read_originals`: the annotation when present, else the
    spec; a corrupt annotation raises :class:`OriginalsError`, containers sharing a key (the pod
    level is sized with them) :class:`KeyCollisionError`."""
    state = read_state(pod)
    state.container_originals()
    level = _pod_level(pod)
    if not any(_spec_resources(level, kind).get(r) is not None for r in _RESOURCES for kind in _KINDS):
        return None
    values = {
        (resource, kind): _value(state.pod_level[(resource, kind)], level, resource, kind, "pod")
        for resource in _RESOURCES
        for kind in _KINDS
    }
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
    Raises :class:`KeyCollisionError` when two resizable containers would share a key (e.g. a
    name twice in a review: the apiserver validates names only after admission).
    """
    containers = resizable_containers(pod)
    originals = {
        keys[(resource, kind)]: _canonical(resource, value)
        for container, keys in zip(containers, written_keys(containers), strict=True)
        for resource, kind, value in _spec_values(container)
    }
    originals.update(
        (pod_original_key(resource, kind), _canonical(resource, value))
        for resource, kind, value in _spec_values(_pod_level(pod))
    )
    return originals


def missing_original_annotations(pod: Mapping[str, Any]) -> dict[str, str]:
    """The subset of :func:`originals_from_spec_annotations` whose originals the pod does not
    hold yet (under any key :func:`original_keys` reads)."""
    state = read_state(pod)
    state.container_originals()
    return {key: value for key, value in originals_from_spec_annotations(pod).items() if not state.holds(key)}


def only_container_values(pod: Mapping[str, Any]) -> bool:
    """Whether the spec's values are all its plain containers': no pod level (``spec.resources``)
    and no sidecar, so none of its originals is one older versions did not stamp."""
    return not sidecars(pod) and next(_spec_values(_pod_level(pod)), None) is None


def original_keys(pod: Mapping[str, Any]) -> dict[str, dict[Slot, str]]:
    """The one answer to "which annotation holds this original" (:meth:`PodState.original_keys`):
    for every resizable container by name, the key of each (resource, kind) on this pod. Raises
    :class:`KeyCollisionError` when two containers would share a key."""
    return read_state(pod).original_keys()


def sidecar_original_keys(pod: Mapping[str, Any]) -> frozenset[str]:
    """Every ``original-*`` key a sidecar of the pod can have (stamped since sidecars can be
    sized: a pod stamped before lacks them), as :func:`original_keys` names them."""
    keys = original_keys(pod)
    return frozenset(key for sidecar in sidecars(pod) for key in keys[sidecar["name"]].values())


def _resource_original(
    held: Mapping[Slot, Original], container: Mapping[str, Any], resource: Resource
) -> ResourceOriginal:
    request, limit = (
        _value(held[(resource, kind)], container, resource, kind, f"container {container['name']!r}") for kind in _KINDS
    )
    return ResourceOriginal(request=request, limit=limit)


def _value(original: Original, holder: Mapping[str, Any], resource: Resource, kind: Kind, what: str) -> Fraction | None:
    if original.recorded:
        return _parse_annotation(original.key, original.value)
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


def _pod_level(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod's ``spec.resources`` shaped like a container (``{"resources": ...}``)."""
    return {"resources": (pod.get("spec") or {}).get("resources") or {}}
