"""Reporting a decision: the Event on the pod, the outcome metric and the audit record."""

from __future__ import annotations

import logging
from typing import Any

from kube.events import object_reference
from reconciler import metrics
from reconciler.memory import DONE, Memory, Result
from reconciler.pods import pod_uid
from reconciler.ports import EventSink, Obj
from reconciler.reasons import EventType, Reason
from reconciler.settings import ControllerSettings
from resizer import ResizePlan

audit = logging.getLogger("reconciler.decision")


class Reporter:
    """Reports decisions; a terminal one (that writes nothing to the pod) once per situation."""

    def __init__(self, events: EventSink, memory: Memory, options: ControllerSettings) -> None:
        self._events = events
        self._memory = memory
        self._options = options

    async def terminal(
        self,
        pod: Obj,
        signature: tuple[Any, ...],
        plan: ResizePlan | None,
        event_type: EventType,
        reason: Reason,
        message: str,
    ) -> Result:
        """A decision that writes nothing to the pod: report it once per situation."""
        self._memory.of(pod_uid(pod)).decided = signature
        await self.report(pod, plan, event_type, reason, message)
        return DONE

    async def report(
        self, pod: Obj, plan: ResizePlan | None, event_type: EventType, reason: Reason, message: str
    ) -> None:
        metrics.OUTCOMES.labels(reason.value).inc()
        audit.info("decision", extra=decision_record(pod, plan, reason, self._options.dry_run))
        await self._events.emit(object_reference(pod, "Pod"), event_type.value, reason.value, message)


def decision_record(pod: Obj, plan: ResizePlan | None, outcome: str, dry_run: bool) -> dict[str, Any]:
    record: dict[str, Any] = {
        "pod": pod["metadata"]["name"],
        "namespace": pod["metadata"]["namespace"],
        "node": pod["spec"].get("nodeName"),
        "outcome": str(outcome),
        "dryRun": dry_run,
    }
    if plan is not None:
        record.update(
            {
                "nodeType": plan.node_type,
                "baseline": plan.baseline_node_type,
                "rule": plan.rule,
                "changes": [_change_record(c) for c in plan.changes],
            }
        )
    return record


def _change_record(change: Any) -> dict[str, Any]:
    record = {
        "container": change.container,
        "resource": change.resource,
        "original": change.original_request,
        "desired": change.desired_request,
        "current": change.current_request,
        "unit": "millicores" if change.resource == "cpu" else "bytes",
    }
    if change.original_limit is not None or change.desired_limit is not None:
        record.update({"originalLimit": change.original_limit, "desiredLimit": change.desired_limit})
    if change.clamped:
        record["clamped"] = change.clamped
    if change.skipped:
        record["skipped"] = change.skipped
    if change.sidecar:
        record["sidecar"] = True
    return record
