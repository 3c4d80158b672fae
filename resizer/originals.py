"""Baseline (pre-resize) requests and limits, persisted as pod annotations.

The annotations are the recovery contract: once a pod has been resized its spec no
longer shows the baseline, so the baseline must come from the annotations or a
restarted controller would compound resizes.

Which annotation holds a container's original is :func:`original_keys`' answer, for every
reader and writer: the key :func:`resizer.annotations.original_key` gives, or, on a pod stamped
by an earlier version, the legacy key of a long name (:func:`resizer.annotations.legacy_original_key`)
when only that one is present. Dropping a legacy key would make the (resized) spec the baseline:
compounding. Legacy keys stay where they are (the MAC covers them as any ``original-*`` key;
rewriting them would be one more write with nothing to gain), and only today's keys are ever
written. A pod whose resizable containers would share a key (a duplicate name, or long names
whose 32-bit legacy digests collide) is refused with :class:`KeyCollisionError`, never sized
from another container's values.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from resizer.annotations import legacy_original_key, original_key, pod_original_key
from resizer.errors import ResizerError
from resizer.quantity import QuantityError, Resource, coerce_quantity, format_cpu, format_memory

__all__ = [
    "ContainerOriginals",
    "KeyCollisionError",
    "OriginalsError",
    "POD_ORIGINAL_KEYS",
    "ResourceOriginal",
    "missing_original_annotations",
    "missing_pod_level_originals",
    "original_keys",
    "originals_as_recorded",
    "originals_as_written",
    "originals_from_spec_annotations",
    "read_originals",
    "read_pod_originals",
    "sidecar_original_keys",
    "sidecars",
]

Kind = Literal["request", "limit"]
_RESOURCES: tuple[Resource, ...] = ("cpu", "memory")
_KINDS: tuple[Kind, ...] = ("request", "limit")
Slot = tuple[Resource, Kind]
_SLOTS: tuple[Slot, ...] = tuple((resource, kind) for resource in _RESOURCES for kind in _KINDS)
_SPEC_FIELD: Mapping[Kind, str] = {"request": "requests", "limit": "limits"}
_UNITS_PER_BASE: Mapping[Resource, int] = {"cpu": 1000, "memory": 1}
_FORMATTERS = {"cpu": format_cpu, "memory": format_memory}
# The pod-level (spec.resources) keys, which pods stamped before pod-level sizing lack.
POD_ORIGINAL_KEYS: frozenset[str] = frozenset(
    pod_original_key(resource, kind) for resource in _RESOURCES for kind in _KINDS
)


class OriginalsError(ResizerError):
    """An ``original-*`` annotation is present but does not hold a usable quantity."""


class KeyCollisionError(OriginalsError):
    """Two of a pod's resizable containers map to the same ``original-*`` key: whose original it
    holds cannot be known, so the pod is not stamped, sized nor restored."""


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
    annotations = _annotations(pod)
    keys = original_keys(pod)
    return {
        container["name"]: ContainerOriginals(
            name=container["name"],
            cpu=_resource_original(annotations, keys[container["name"]], container, "cpu"),
            memory=_resource_original(annotations, keys[container["name"]], container, "memory"),
        )
        for container in _resizable(pod)
    }


def read_pod_originals(pod: Mapping[str, Any]) -> ContainerOriginals | None:
    """Baselines of the pod-level ``spec.resources`` (KEP-2837), None when the pod sets no
    pod-level cpu or memory. Like :func:`read_originals`: the annotation when present, else the
    spec; a corrupt annotation raises :class:`OriginalsError`, containers sharing a key (the pod
    level is sized with them) :class:`KeyCollisionError`."""
    original_keys(pod)
    level = _pod_level(pod)
    if not any(_spec_resources(level, kind).get(r) is not None for r in _RESOURCES for kind in _KINDS):
        return None
    annotations = _annotations(pod)
    values = {
        (resource, kind): _value(annotations, pod_original_key(resource, kind), level, resource, kind, "pod")
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
    containers = _resizable(pod)
    originals = {
        keys[(resource, kind)]: _canonical(resource, value)
        for container, keys in zip(containers, _written_keys(containers), strict=True)
        for resource, kind, value in _spec_values(container)
    }
    originals.update(
        (pod_original_key(resource, kind), _canonical(resource, value))
        for resource, kind, value in _spec_values(_pod_level(pod))
    )
    return originals


def missing_pod_level_originals(pod: Mapping[str, Any]) -> dict[str, str]:
    """The pod-level subset of :func:`missing_original_annotations` (keys a pod stamped before
    pod-level sizing lacks)."""
    present = _annotations(pod)
    return {
        key: value
        for key, value in originals_from_spec_annotations(pod).items()
        if key in POD_ORIGINAL_KEYS and key not in present
    }


def missing_original_annotations(pod: Mapping[str, Any]) -> dict[str, str]:
    """The subset of :func:`originals_from_spec_annotations` whose originals the pod does not
    hold yet (under any key :func:`original_keys` reads)."""
    present = _annotations(pod)
    held = _held_keys(pod)
    return {
        key: value for key, value in originals_from_spec_annotations(pod).items() if held.get(key, key) not in present
    }


def originals_as_recorded(pod: Mapping[str, Any], originals: Mapping[str, str]) -> dict[str, str]:
    """``originals`` (keyed as :func:`originals_from_spec_annotations` writes them) under the keys
    that hold them on ``pod`` (:func:`original_keys`: a legacy key where the pod has only that):
    what compares with, or was signed with, the pod's own annotations."""
    held = _held_keys(pod)
    return {held.get(key, key): value for key, value in originals.items()}


def originals_as_written(pod: Mapping[str, Any], originals: Mapping[str, str]) -> dict[str, str]:
    """The inverse of :func:`originals_as_recorded`: the pod's ``originals`` under the keys
    written today (a legacy key's value under the key it stands for)."""
    today = {held: written for written, held in _held_keys(pod).items()}
    return {today.get(key, key): value for key, value in originals.items()}


def original_keys(pod: Mapping[str, Any]) -> dict[str, dict[Slot, str]]:
    """The one answer to "which annotation holds this original": for every resizable container
    (``spec.containers`` and sidecars) by name, the key of each (resource, kind) on this pod.

    That is :func:`resizer.annotations.original_key`'s key, or the legacy key of a long name
    (:func:`resizer.annotations.legacy_original_key`) when only the legacy one is present.
    Raises :class:`KeyCollisionError` naming both containers when two would share a key (a
    duplicate name), or when a legacy key read is also the legacy key of another resizable
    container of the pod (whose original it holds cannot be known).
    """
    return {name: held for name, _written, held in _key_map(pod)}


def _key_map(pod: Mapping[str, Any]) -> list[tuple[str, Mapping[Slot, str], dict[Slot, str]]]:
    """Per resizable container: its name, the keys written today and the keys holding its
    originals on the pod (:func:`original_keys`)."""
    containers = _resizable(pod)
    annotations = _annotations(pod)
    legacy_owners: dict[str, list[int]] | None = None
    result = []
    for index, (container, written) in enumerate(zip(containers, _written_keys(containers), strict=True)):
        name = container["name"]
        held = dict(written)
        for (resource, kind), key in written.items():
            if key in annotations:
                continue
            legacy = legacy_original_key(name, resource, kind)
            if legacy == key or legacy not in annotations:
                continue
            legacy_owners = legacy_owners if legacy_owners is not None else _legacy_owners(containers)
            other = next((i for i in legacy_owners[legacy] if i != index), None)
            if other is not None:
                first, second = (containers[i]["name"] for i in sorted((index, other)))
                raise KeyCollisionError(
                    f"containers {first!r} and {second!r} share the annotation {legacy} (the key earlier "
                    f"versions wrote for long names): whose original resources it holds cannot be known"
                )
            held[(resource, kind)] = legacy
        result.append((name, written, held))
    return result


def sidecars(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod's restartable init containers (``restartPolicy: Always``): sidecars, which the
    kubelet resizes in place like containers (Kubernetes 1.33+). Plain init containers are not."""
    inits = (pod.get("spec") or {}).get("initContainers") or []
    return [init for init in inits if init.get("restartPolicy") == "Always"]


def sidecar_original_keys(pod: Mapping[str, Any]) -> frozenset[str]:
    """Every ``original-*`` key a sidecar of the pod can have (stamped since sidecars can be
    sized: a pod stamped before lacks them), as :func:`original_keys` names them."""
    keys = original_keys(pod)
    return frozenset(key for sidecar in sidecars(pod) for key in keys[sidecar["name"]].values())


def _resource_original(
    annotations: Mapping[str, Any], keys: Mapping[Slot, str], container: Mapping[str, Any], resource: Resource
) -> ResourceOriginal:
    request, limit = (
        _value(annotations, keys[(resource, kind)], container, resource, kind, f"container {container['name']!r}")
        for kind in _KINDS
    )
    return ResourceOriginal(request=request, limit=limit)


def _written_keys(containers: list[Mapping[str, Any]]) -> list[Mapping[Slot, str]]:
    """Per container (in order), the keys the product writes its originals under; raises
    :class:`KeyCollisionError` when two containers (or one and the pod level) would share one."""
    owners: dict[str, tuple[int, str]] = {key: (-1, "the pod level") for key in POD_ORIGINAL_KEYS}
    written = []
    for index, container in enumerate(containers):
        name = container["name"]
        keys = _keys_of(name)
        for key in keys.values():
            owner, other = owners.setdefault(key, (index, name))
            if owner != index:
                what = (
                    f"two resizable containers are named {name!r}"
                    if other == name
                    else f"containers {other!r} and {name!r}"
                )
                raise KeyCollisionError(f"{what}: their original resources would share the annotation {key}")
        written.append(keys)
    return written


# Every read and stamp of a pod looks its containers' keys up: memoised per name (pure; bounded,
# since names are tenant input). Callers never mutate the mapping returned.
@functools.lru_cache(maxsize=4096)
def _keys_of(name: str) -> Mapping[Slot, str]:
    return {(resource, kind): original_key(name, resource, kind) for resource, kind in _SLOTS}


def _legacy_owners(containers: list[Mapping[str, Any]]) -> dict[str, list[int]]:
    """Legacy key -> the positions of the containers it is the legacy key of."""
    owners: dict[str, list[int]] = {}
    for index, container in enumerate(containers):
        for resource, kind in _SLOTS:
            owners.setdefault(legacy_original_key(container["name"], resource, kind), []).append(index)
    return owners


def _held_keys(pod: Mapping[str, Any]) -> dict[str, str]:
    """Key written today -> the legacy key holding that original instead (:func:`original_keys`)."""
    return {
        written[slot]: key
        for _name, written, held in _key_map(pod)
        for slot, key in held.items()
        if key != written[slot]
    }


def _value(
    annotations: Mapping[str, Any], key: str, holder: Mapping[str, Any], resource: Resource, kind: Kind, what: str
) -> Fraction | None:
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
