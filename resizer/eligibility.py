"""Which pods workload-resizer may touch at all."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from resizer.podstate import PodState, mirror_and_skip

# Controller kind -> API group. The group is checked too, so a custom resource that
# happens to be called "Job" (e.g. batch.volcano.sh) is not mistaken for a batch/v1 Job.
SUPPORTED_CONTROLLERS: Mapping[str, str] = {
    "ReplicaSet": "apps",
    "StatefulSet": "apps",
    "DaemonSet": "apps",
    "Job": "batch",
}
TERMINAL_PHASES = ("Succeeded", "Failed")


def is_live_and_bound(pod: Mapping[str, Any]) -> bool:
    """Bound to a node, not being deleted, not finished: the pods the reconciler looks at."""
    return (
        bool((pod.get("spec") or {}).get("nodeName"))
        and "deletionTimestamp" not in (pod.get("metadata") or {})
        and (pod.get("status") or {}).get("phase") not in TERMINAL_PHASES
    )


@dataclass(frozen=True)
class Eligibility:
    """Whether a pod may be resized, and a stable machine-readable reason."""

    eligible: bool
    reason: str
    owner_kind: str | None = None
    owner_name: str | None = None


def eligibility(pod: Mapping[str, Any], state: PodState | None = None) -> Eligibility:
    """Classify a pod, checking in this order: ``MirrorPod`` (a static pod: the kubelet's mirror
    annotation or a Node controller), ``SkipAnnotation`` (the skip annotation says ``"true"``, any
    case), ``NoController`` (no ownerReference with ``controller: true``), ``UnsupportedOwnerKind``
    (not an apps ReplicaSet/StatefulSet/DaemonSet or a batch Job), else ``Eligible``.
    ``state``: ``read_state(pod)``, if the caller has it."""
    metadata = pod.get("metadata") or {}
    # The two records eligibility needs, without parsing the rest when the caller has no state.
    mirror, skip = (state.mirror, state.skip) if state is not None else mirror_and_skip(pod)
    owner = controller_reference(metadata)
    owner_kind = owner.get("kind") if owner else None
    owner_name = owner.get("name") if owner else None

    def verdict(reason: str) -> Eligibility:
        return Eligibility(reason == "Eligible", reason, owner_kind, owner_name)

    if mirror or owner_kind == "Node":
        return verdict("MirrorPod")
    if skip:
        return verdict("SkipAnnotation")
    if owner is None:
        return verdict("NoController")
    group, api_version = SUPPORTED_CONTROLLERS.get(owner_kind or ""), owner.get("apiVersion")
    if group is None or not isinstance(api_version, str) or api_version.rpartition("/")[0] != group:
        return verdict("UnsupportedOwnerKind")
    return verdict("Eligible")


def controller_reference(metadata: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The owner reference of ``metadata`` whose ``controller`` is true (the apiserver allows one at
    most), None if there is none; references that are not objects are passed over."""
    references = metadata.get("ownerReferences")
    if not isinstance(references, list):
        return None
    return next((r for r in references if isinstance(r, Mapping) and r.get("controller") is True), None)
