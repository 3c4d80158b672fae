"""Undoing the product on one pod: the `restore` command's pure core.

Write order, the mirror of the reconciler's recovery contract: first the
``pods/resize`` patch back to the ``original-*`` values, then the removal of the
product's annotations. A crash between the two leaves the originals on a pod whose
spec already equals them, so the next run only removes the annotations; removing
them first would lose the only record of the author's sizes.

What to put back is the baseline authority's decision (:func:`resizer.integrity.baseline`):
restore never raises a pod from values it cannot verify, and never touches a pod outside
the product's scope or one it would not size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from resizer.eligibility import TERMINAL_PHASES, eligibility
from resizer.integrity import KeyRing, Trust, baseline
from resizer.podstate import SPEC_FIELD, Original, OriginalsError, Slot, read_state, sidecars
from resizer.quantity import QuantityError, coerce_quantity
from resizer.scope import NamespaceScope


@dataclass(frozen=True)
class RestoreDecision:
    """What restore does to one pod: ``patch`` (pods/resize back to verified originals, ``{}``
    for none), then remove the product's annotations -- unless ``held`` says why the pod is
    left as it is (its annotations kept, so nothing is lost)."""

    patch: dict[str, Any]
    held: str | None = None


def restore_decision(
    pod: Mapping[str, Any],
    keyring: KeyRing,
    scope: NamespaceScope | None = None,
    namespace_labels: Mapping[str, str] | None = None,
) -> RestoreDecision:
    """Decide one pod. Raises :class:`OriginalsError` for an unusable annotation."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    if scope is not None:
        excluded = scope.exclusion(namespace, namespace_labels)
        if excluded is not None:
            return RestoreDecision({}, f"out of the product's scope ({excluded})")
    verdict = eligibility(pod)
    if not verdict.eligible:
        return RestoreDecision({}, f"not a pod the product sizes ({verdict.reason})")
    if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
        return RestoreDecision({})
    try:
        decision = baseline(pod, keyring)
    except QuantityError as error:
        raise OriginalsError(f"the pod's spec has an unreadable quantity: {error}") from None
    if decision.check.trust in (Trust.REFUSE, Trust.TRUSTED_IF_ALIGNED):
        return RestoreDecision({}, f"original resources not verified: {decision.check.reason}")
    # Trusted: put them back. Re-captured (forged originals on a never-changed spec): the spec
    # is the baseline, so there is nothing to resize.
    return RestoreDecision(restore_patch(decision.pod))


def restore_patch(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The ``pods/resize`` strategic merge patch that puts back every recorded original that
    differs by value from the spec (sidecars under ``initContainers``); ``{}`` when none does.
    Raises :class:`OriginalsError` for an unusable annotation."""
    state = read_state(pod)
    spec = pod.get("spec") or {}
    held = state.container_originals()
    patch: dict[str, Any] = {}
    for field, containers in (("containers", spec.get("containers") or []), ("initContainers", sidecars(pod))):
        entries = []
        for container in containers:  # a sidecar without originals was never sized: nothing to put back
            resources = _put_back(container.get("resources"), held[container["name"]])
            if resources:
                entries.append({"name": container["name"], "resources": resources})
        if entries:
            patch[field] = entries
    # The pod level (spec.resources) goes back in the same patch: the apiserver validates the
    # two levels against each other.
    pod_level = _put_back(spec.get("resources"), state.pod_level)
    if pod_level:
        patch["resources"] = pod_level
    return {"spec": patch} if patch else {}


def _put_back(current: Mapping[str, Any] | None, originals: Mapping[Slot, Original]) -> dict[str, dict[str, str]]:
    resources: dict[str, dict[str, str]] = {}
    for (resource, kind), original in originals.items():
        if not original.recorded:
            continue
        spec_field = SPEC_FIELD[kind]
        if not _same(original.value, ((current or {}).get(spec_field) or {}).get(resource), original.key):
            resources.setdefault(spec_field, {})[resource] = original.value
    return resources


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
