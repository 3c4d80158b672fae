"""Baseline (pre-resize) requests and limits, persisted as pod annotations.

The annotations are the recovery contract: a resized pod's spec no longer shows the baseline, so
it must come from them or a restarted controller would compound resizes. Which annotation holds an
original is :meth:`resizer.podstate.PodState.original_keys`' answer for every reader and writer:
today's key, or on a pod stamped by an earlier version a long name's legacy key when only that is
present (dropping it would make the resized spec the baseline). Legacy keys stay (the MAC covers
them); only today's are written. A pod whose resizable containers would share a key is refused
with :class:`KeyCollisionError`, never sized from another container's values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from resizer.podstate import (
    SPEC_FIELD,
    Kind,
    Original,
    Slot,
    pod_original_key,
    read_state,
    resizable_containers,
    sidecars,
    written_keys,
)

# The errors this module raises, defined with the pod model: re-exported.
from resizer.podstate import KeyCollisionError as KeyCollisionError
from resizer.podstate import OriginalsError as OriginalsError
from resizer.quantity import RESOURCES, QuantityError, Resource, coerce_quantity, format_cpu, format_memory

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
    """Baselines of every container and sidecar by name: each value from its annotation when present,
    else from the spec. A corrupt annotation raises :class:`OriginalsError` (falling back to the
    possibly resized spec would compound resizes), containers sharing a key :class:`KeyCollisionError`."""
    held = read_state(pod).container_originals()
    named = ((container["name"], container) for container in resizable_containers(pod))
    return {name: _originals(name, held[name], container, f"container {name!r}") for name, container in named}


def read_pod_originals(pod: Mapping[str, Any]) -> ContainerOriginals | None:
    """:func:`read_originals` of the pod-level ``spec.resources`` (KEP-2837), None when the pod
    sets no pod-level cpu or memory; raises like it (the pod level is sized with the containers)."""
    state = read_state(pod)
    state.container_originals()
    level = _pod_level(pod)
    if next(_spec_values(level), None) is None:
        return None
    return _originals("", state.pod_level, level, "pod")


def originals_from_spec_annotations(pod: Mapping[str, Any]) -> dict[str, str]:
    """Every ``original-*`` annotation describing the spec as it is now: the containers', the
    sidecars' (sized or not: the baseline must exist if an admin opts in later) and the pod level's,
    canonical when whole millicores/bytes, else the spec's string. :class:`KeyCollisionError` for two
    containers on one key (a name twice in a review: the apiserver validates names after admission)."""
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
    """:func:`originals_from_spec_annotations` the pod does not hold yet (under any key it reads)."""
    state = read_state(pod)
    state.container_originals()
    return {key: value for key, value in originals_from_spec_annotations(pod).items() if not state.holds(key)}


def only_container_values(pod: Mapping[str, Any]) -> bool:
    """Whether the spec's values are all its plain containers': no pod level (``spec.resources``)
    and no sidecar, so none of its originals is one older versions did not stamp."""
    return not sidecars(pod) and next(_spec_values(_pod_level(pod)), None) is None


def original_keys(pod: Mapping[str, Any]) -> dict[str, dict[Slot, str]]:
    return read_state(pod).original_keys()


def sidecar_original_keys(pod: Mapping[str, Any]) -> frozenset[str]:
    """Every ``original-*`` key of the pod's sidecars (a pod stamped before sidecars were sized lacks them)."""
    keys = original_keys(pod)
    return frozenset(key for sidecar in sidecars(pod) for key in keys[sidecar["name"]].values())


def _originals(name: str, held: Mapping[Slot, Original], holder: Mapping[str, Any], what: str) -> ContainerOriginals:
    cpu, memory = (
        ResourceOriginal(*(_value(held[(resource, kind)], holder, resource, kind, what) for kind in SPEC_FIELD))
        for resource in RESOURCES
    )
    return ContainerOriginals(name, cpu, memory)


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
    for resource in RESOURCES:
        for kind in SPEC_FIELD:
            value = _spec_resources(container, kind).get(resource)
            if value is not None:
                yield resource, kind, value


def _canonical(resource: Resource, value: Any) -> str:
    units = coerce_quantity(value) * _UNITS_PER_BASE[resource]
    if units.denominator == 1:
        return _FORMATTERS[resource](int(units))
    return str(value)


def _spec_resources(container: Mapping[str, Any], kind: Kind) -> Mapping[str, Any]:
    return (container.get("resources") or {}).get(SPEC_FIELD[kind]) or {}


def _pod_level(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod's ``spec.resources`` shaped like a container (``{"resources": ...}``)."""
    return {"resources": (pod.get("spec") or {}).get("resources") or {}}
