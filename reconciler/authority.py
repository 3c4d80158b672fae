"""The pod resizer's use of the baseline authority (resizer.integrity.baseline): what this
process vouches for, and when it may bind a pod's originals to it with a pod MAC."""

from __future__ import annotations

from collections.abc import Mapping

from reconciler.memory import Context, Memory
from reconciler.pods import pod_uid
from reconciler.ports import Obj
from resizer import ResizerError, baseline, pod_mac


def vouched(memory: Memory, pod: Obj, node_type: str) -> Mapping[str, str] | None:
    """The originals this process verified and resized the pod from, while the spec holds that
    resize: in flight for this node type, or for any type with no spec change since (the node may
    have been relabelled before the kubelet actuated it). The baseline authority trusts them
    while the pod still carries exactly those."""
    flight = memory.get(pod_uid(pod)).flight
    if flight is not None and (flight.node_type == node_type or flight.generation == pod["metadata"].get("generation")):
        return flight.originals
    return None


def binding(context: Context, pod: Obj, node_type: str) -> dict[str, str]:
    """A pod MAC over the pod's originals, if the baseline authority lets us bind them to it."""
    keyring = context.keyring()
    try:
        if not baseline(pod, keyring, vouched=vouched(context.memory, pod, node_type)).may_sign:
            return {}
    except ResizerError:
        return {}
    return pod_mac(pod, keyring)
