"""What the controller reads off a pod (and off a plan for it): pure helpers shared by its parts."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from kube.informer import object_key
from kube.slim import status_fingerprint
from reconciler.outcome import ResizeState
from reconciler.ports import Obj
from resizer import KeyRing, ResizePlan, ResizerError, missing_original_annotations
from resizer.originals import sidecar_original_keys
from resizer.podstate import PodState


def has_originals(pod: Obj) -> bool:
    """All the originals a plan is made from are recorded (a pod sized before they were is never re-aligned)."""
    try:
        return not missing_original_annotations(pod).keys() - sidecar_original_keys(pod)
    except ResizerError:
        return False


def situation(
    pod: Obj, state: PodState, node_type: str, config_generation: int, pod_level: bool = False, key_known: bool = False
) -> tuple[Any, ...]:
    """What a terminal decision depended on; the same situation is not decided twice. `pod_level`:
    whether pod-level resources can be resized on the pod's node (a pod that sets them is decided
    again when that changes, e.g. its kubelet starts declaring the feature). `key_known`
    (:func:`mac_key_known`): a pod held for a missing key is decided again once the key is back."""
    sized_at_pod_level = pod_level if pod["spec"].get("resources") else None
    return node_type, config_generation, status_fingerprint(pod), state.owned, sized_at_pod_level, key_known


def mac_key_known(state: PodState, keyring: KeyRing) -> bool:
    """Whether the pod's originals MAC names a key of `keyring` (False without a MAC)."""
    return state.mac is not None and state.mac.key_id in keyring.keys


def recorded_state(state: PodState, node_type: str) -> ResizeState | None:
    """The pod's recorded resize state, if it is about this node type."""
    recorded = state.resize_state
    return recorded if recorded is not None and recorded.node_type == node_type else None


def parked_at(pod: Obj, state: PodState, config_generation: int, size: str | None) -> tuple[Any, ...]:
    """What a parked size (recorded infeasible or failing) was judged under: the config version,
    the size, and what the plan is made from besides the spec (the originals, the labels rules
    match). While they stay, the same plan gives the same size: no need to plan it again."""
    labels = tuple(sorted((pod["metadata"].get("labels") or {}).items()))
    return config_generation, size, tuple(sorted(state.originals.items())), labels


def size_fingerprint(plan: ResizePlan) -> str:
    """The planned size (per container and resource: request and limit), as a short digest."""
    targets = sorted(
        (c.container, c.resource, c.desired_request, c.desired_limit) for c in plan.changes if c.skipped is None
    )
    return hashlib.sha256(repr(targets).encode()).hexdigest()[:16]


def resized_from_originals(plan: ResizePlan) -> bool:
    """Whether the spec differs from the originals, i.e. the pod was resized at some point."""
    return any(
        c.current_request != c.original_request
        or (c.original_limit is not None and c.current_limit != c.original_limit)
        for c in plan.changes
        if c.skipped is None
    )


def summary_from_originals(plan: ResizePlan) -> str:
    """The plan as a change from the originals (when the spec already holds it)."""
    changes = tuple(
        replace(c, current_request=c.original_request, current_limit=c.original_limit) for c in plan.changes
    )
    return replace(plan, changes=changes).summary()


def parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def format_time(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def with_annotations(pod: Obj, changes: Mapping[str, str | None]) -> Obj:
    """`pod` as a merge patch of these annotations leaves it (None removes a key); `pod` is unchanged."""
    merged = {**pod["metadata"]["annotations"], **changes}
    annotations = {key: value for key, value in merged.items() if value is not None}
    return {**pod, "metadata": {**pod["metadata"], "annotations": annotations}}


def pod_uid(pod: Obj) -> str:
    return pod["metadata"].get("uid") or object_key(pod)
