"""A Kubernetes object's controller: the one owner reference marked ``controller: true``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["controller_reference"]


def controller_reference(metadata: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The owner reference of ``metadata`` whose ``controller`` is true (the apiserver allows one at
    most), None if there is none; references that are not objects are passed over."""
    references = metadata.get("ownerReferences")
    if not isinstance(references, list):
        return None
    return next((r for r in references if isinstance(r, Mapping) and r.get("controller") is True), None)
