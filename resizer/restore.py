"""Undoing the product on one pod: the `restore` command's pure core.

Write order, the mirror of the reconciler's recovery contract: first the
``pods/resize`` patch back to the ``original-*`` values, then the removal of the
product's annotations. A crash between the two leaves the originals on a pod whose
spec already equals them, so the next run only removes the annotations; removing
them first would lose the only record of the author's sizes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from resizer.annotations import is_controller_owned_key, original_key
from resizer.originals import OriginalsError
from resizer.quantity import QuantityError, coerce_quantity

__all__ = ["managed_annotation_keys", "restore_patch"]

_KINDS = (("requests", "request"), ("limits", "limit"))


def managed_annotation_keys(pod: Mapping[str, Any]) -> list[str]:
    """The product's annotations on the pod (``original-*`` and ``applied-*``), sorted."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return sorted(key for key in annotations if is_controller_owned_key(key))


def restore_patch(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The ``pods/resize`` strategic merge patch that puts every recorded original back
    (only the values that differ from the spec, compared by value); ``{}`` when the spec
    already holds the originals. Raises :class:`OriginalsError` for an unusable annotation."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    containers = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources: dict[str, dict[str, str]] = {}
        for spec_field, kind in _KINDS:
            current = (container.get("resources") or {}).get(spec_field) or {}
            for resource in ("cpu", "memory"):
                key = original_key(container["name"], resource, kind)  # type: ignore[arg-type]
                if key not in annotations:
                    continue
                original = annotations[key]
                if not _same(original, current.get(resource), key):
                    resources.setdefault(spec_field, {})[resource] = original
        if resources:
            containers.append({"name": container["name"], "resources": resources})
    return {"spec": {"containers": containers}} if containers else {}


def _same(original: Any, current: Any, key: str) -> bool:
    try:
        wanted = coerce_quantity(original)
    except QuantityError as error:
        raise OriginalsError(f"annotation {key} holds an invalid quantity {original!r}: {error}") from None
    if current is None:
        return False
    try:
        return coerce_quantity(current) == wanted
    except QuantityError:
        return False
