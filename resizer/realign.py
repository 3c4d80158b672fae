"""Re-alignment: does a pod already sized for its node type need resizing again?

When the config (or a rule that applies to the pod) changes, a pod already sized for
its node's type is planned again from its originals -- never from its current spec, so
re-alignment never compounds. It needs a resize only if that plan changes its spec; a
config change that changes nothing for a pod writes nothing to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from resizer.config import CompiledConfig, resolve_policy
from resizer.errors import ResizerError
from resizer.originals import missing_original_annotations, sidecar_original_keys
from resizer.plan import ResizePlan, plan_resize
from resizer.podstate import read_state


def realignment(
    pod: Mapping[str, Any],
    config: CompiledConfig,
    node_type: str,
    resize_restart_containers: bool = False,
    pod_level: bool = False,
) -> ResizePlan | None:
    """The resize plan of a pod sized for ``node_type`` earlier, if the config now wants
    it different; None when nothing would change, the pod was never sized for this node
    type, its originals are not all recorded, or its plan fails (reported when it was
    first sized). A sidecar without originals (a pod stamped before sidecars had them) was
    never sized: its spec is its baseline (resizer.integrity)."""
    if read_state(pod).applied.instance_type != node_type:
        return None
    try:
        if missing_original_annotations(pod).keys() - sidecar_original_keys(pod):
            return None
        plan = plan_resize(pod, resolve_policy(config, pod), node_type, resize_restart_containers, pod_level)
    except ResizerError:
        return None
    return plan if plan.outcome == "Resize" and plan.patch else None
