"""Event types and reasons the reconciler records: stable strings, one place (`kubectl describe`,
alerts and dashboards key on them: renaming one breaks whoever watches them)."""

from __future__ import annotations

from enum import StrEnum


class EventType(StrEnum):
    NORMAL = "Normal"
    WARNING = "Warning"


class Reason(StrEnum):
    # A pod.
    RESIZED = "Resized"  # resized to the plan, and the kubelet actuated it
    BOUNDS_CLAMPED = "BoundsClamped"  # resized, and a bound limited the plan
    ALREADY_ALIGNED = "AlreadyAligned"  # the spec already matched the plan
    SIZED_AT_ADMISSION = "SizedAtAdmission"  # created at its size by the webhook (node type known at CREATE)
    WOULD_RESIZE = "WouldResize"  # --dry-run: what a resize would have been
    UNKNOWN_NODE_TYPE = "UnknownNodeType"  # the node's type is not in the config
    RESIZE_UNSUPPORTED = "ResizeUnsupported"  # the node's kubelet cannot resize in place
    RESIZE_FAILED = "ResizeFailed"  # anything else that left the pod unresized
    ORIGINALS_UNVERIFIED = "OriginalsUnverified"  # originals cannot be trusted and the spec changed: not resized
    ORIGINALS_REPLACED = "OriginalsReplaced"  # rejected originals re-captured from the unchanged spec
    RESIZE_DEFERRED = "ResizeDeferred"  # the kubelet deferred the resize (Normal; Warning when too long)
    RESIZE_INFEASIBLE = "ResizeInfeasible"  # the node can never take the size; spec set back to the actual
    RESIZE_ERROR = "ResizeError"  # the kubelet failed to actuate (its message)
    REVERT_REFUSED = "RevertRefused"  # the containers report a size we never set: the spec is kept
    RESIZE_HELD = "ResizeHeld"  # not sent: a LimitRange, ResourceQuota or the node's room would refuse it
    POD_LEVEL_RESOURCES = "PodLevelResources"  # left alone: spec.resources set, the node cannot resize it
    VPA_MANAGED = "VPAManaged"  # left alone: an updating VerticalPodAutoscaler sizes the pod
    # The config.
    INVALID_CONFIG = "InvalidConfig"
