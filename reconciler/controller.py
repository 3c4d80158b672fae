"""The pod resizer's reconcile(key): decide from the pure core, write in the recovery-safe order.

Per pod, writes happen in this order, and the order is the recovery contract:

1. original-* annotations (only the missing keys, with a resourceVersion
   precondition so they describe the spec we read);
2. the pods/resize patch, computed from the originals (never from the spec);
3. applied-instance-type / applied-at.

A crash between any two steps leaves a state from which the next pass reaches
the same end state: after 1 the originals are read back, after 2 the plan finds
the spec already aligned and only step 3 runs, after 3 the pod is filtered out.
Reordering these steps re-introduces compounding resizes.

The reconciler reads and writes only through the interfaces of reconciler.ports;
the informers, the event-to-key mapping and the workers are the manager's
(reconciler.manager).
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from reconciler import metrics
from reconciler.events import object_reference
from reconciler.informer import object_key
from reconciler.kube import ApiError
from reconciler.ports import ConfigView, EventSink, FaultHook, Obj, PodReader, PodWriter, no_fault, pod_path
from reconciler.reasons import EventType, Reason
from reconciler.slim import status_fingerprint
from resizer import (
    APPLIED_AT,
    APPLIED_INSTANCE_TYPE,
    EMPTY_KEYRING,
    PREFIX,
    Baseline,
    KeyRing,
    OriginalsError,
    QuantityError,
    ResizePlan,
    Trust,
    baseline,
    eligibility,
    fits_annotation_limit,
    needs_resign,
    original_annotations,
    originals_from_spec_annotations,
    plan_resize,
    pod_mac,
    resolve_policy,
)

log = logging.getLogger("reconciler.controller")
audit = logging.getLogger("reconciler.decision")

UNSUPPORTED_MESSAGE = "without support for resize"
TERMINAL_PHASES = ("Succeeded", "Failed")


class Step:
    """Names of the write steps, as passed to the fault hook."""
    ORIGINALS = "originals"
    RESIZE = "resize"
    APPLIED = "applied"


@dataclass(frozen=True)
class Options:
    node_type_label: str
    dry_run: bool = False
    resize_restart_containers: bool = False


@dataclass(frozen=True)
class Result:
    requeue_after: float | None = None


DONE = Result()


class PodResizeReconciler:
    """reconcile(namespace/name) of one pod, plus the predicate the manager filters events with."""

    def __init__(self, reader: PodReader, writer: PodWriter, events: EventSink, config: ConfigView,
                 options: Options, fault: FaultHook = no_fault,
                 keyring: Callable[[], KeyRing] = lambda: EMPTY_KEYRING) -> None:
        self._reader = reader
        self._keyring = keyring     # the originals MAC keys in force (they rotate)
        self._writer = writer
        self._events = events
        self._config = config
        self._options = options
        self._fault = fault
        # Terminal decisions that wrote nothing (UnknownNodeType, ResizeUnsupported,
        # ...), by pod uid: the same situation is not decided (and reported) twice.
        self._decided: dict[str, tuple[Any, ...]] = {}
        # Pods we finished (uid -> node type) whose applied annotation the watch has
        # not delivered yet: a lagging cache must not cause a second pass.
        self._finished: dict[str, str] = {}

    # ------------------------------------------------------------------ what the manager asks

    def needs_work(self, pod: Obj, node: Obj | None) -> bool:
        """Whether a watch event of `pod` (on `node`, None if not cached) is worth a reconcile."""
        if not live_and_bound(pod) or not eligibility(pod).eligible:
            return False
        if node is None:
            return True     # a node we have not seen yet: reconcile looks it up
        node_type = node["metadata"]["labels"].get(self._options.node_type_label)
        if node_type is None:
            return False    # untyped node: nothing to do until it is labelled
        done = (pod["metadata"]["annotations"].get(APPLIED_INSTANCE_TYPE), self._finished.get(_uid(pod)))
        return node_type not in done

    def observe(self, pod: Obj) -> None:
        """A watch event of `pod` arrived (before needs_work)."""
        uid = _uid(pod)
        if uid in self._finished and \
                pod["metadata"]["annotations"].get(APPLIED_INSTANCE_TYPE) == self._finished[uid]:
            del self._finished[uid]

    def forget(self, pod: Obj) -> None:
        """`pod` was deleted."""
        uid = _uid(pod)
        self._decided.pop(uid, None)
        self._finished.pop(uid, None)

    # ------------------------------------------------------------------ reconcile

    async def reconcile(self, key: str) -> Result:
        pod = self._reader.pod(key)
        if pod is None or not live_and_bound(pod) or not eligibility(pod).eligible:
            return DONE
        node_name = pod["spec"]["nodeName"]
        node = await self._reader.node(node_name)
        node_type = node["metadata"]["labels"].get(self._options.node_type_label) if node is not None else None
        if not node_type:
            log.debug("node has no type label; skipping", extra={
                "pod": key, "node": node_name, "nodeExists": node is not None, "label": self._options.node_type_label})
            return DONE
        if node_type in (pod["metadata"]["annotations"].get(APPLIED_INSTANCE_TYPE), self._finished.get(_uid(pod))):
            return await self._resign(pod)
        if self._config.config is None:
            return Result(requeue_after=5.0)
        signature = situation(pod, node_type, self._config.generation)
        if self._decided.get(_uid(pod)) == signature:
            return DONE
        return await self._decide(pod, node_type, signature)

    async def _decide(self, pod: Obj, node_type: str, signature: tuple[Any, ...]) -> Result:
        config = self._config.config
        assert config is not None
        try:
            # Whose originals these are (resizer.integrity): trusted, re-captured from the spec, or refused.
            base = baseline(pod, self._keyring(), originals_from_spec_annotations(pod))
            if base.check.trust is Trust.REFUSE:
                return await self._terminal(pod, signature, None, EventType.WARNING, Reason.ORIGINALS_UNVERIFIED,
                                            f"not resized: {base.check.reason}")
            plan = plan_resize(base.pod, resolve_policy(config, pod), node_type,
                               self._options.resize_restart_containers)
        except (OriginalsError, QuantityError) as err:
            return await self._terminal(pod, signature, None, EventType.WARNING, Reason.RESIZE_FAILED,
                                        f"cannot read the pod's original resources: {err}")
        if base.check.trust is Trust.TRUSTED_IF_ALIGNED and plan.patch:
            return await self._terminal(pod, signature, plan, EventType.WARNING, Reason.ORIGINALS_UNVERIFIED,
                                        f"not resized: {base.check.reason}, and the pod is not aligned with "
                                        f"them: {plan.summary()}")
        context = f"node type {node_type} (baseline {plan.baseline_node_type}, rule {plan.rule})"
        if plan.outcome == "UnknownNodeType":
            return await self._terminal(pod, signature, plan, EventType.WARNING, Reason.UNKNOWN_NODE_TYPE,
                                        f"node type {node_type!r} of node {pod['spec']['nodeName']} is not in "
                                        f"the config's nodeTypes (rule {plan.rule}); pod left unchanged")
        if plan.outcome == "QoSChange":
            return await self._terminal(pod, signature, plan, EventType.WARNING, Reason.RESIZE_FAILED,
                                        f"not resized for {context}: {plan.summary()}")
        if self._options.dry_run:
            reason = Reason.WOULD_RESIZE if plan.patch else Reason.ALREADY_ALIGNED
            return await self._terminal(pod, signature, plan, EventType.NORMAL, reason,
                                        f"dry run, {context}: {plan.summary()}")
        return await self._write(pod, node_type, signature, plan, context, base)

    async def _write(self, pod: Obj, node_type: str, signature: tuple[Any, ...],
                     plan: ResizePlan, context: str, base: Baseline) -> Result:
        config = self._config.config
        assert config is not None
        # Everything steps 1 and 3 leave on the pod must fit, or the resize would never be recorded.
        final = {**(base.stamp or original_annotations(pod)), **pod_mac(base.pod, self._keyring()),
                 APPLIED_INSTANCE_TYPE: node_type, APPLIED_AT: _now()}
        if not fits_annotation_limit(pod["metadata"]["annotations"], {k: v for k, v in final.items() if v is not None}):
            return await self._terminal(pod, signature, plan, EventType.WARNING, Reason.RESIZE_FAILED,
                                        "the original resources and what was applied do not fit in the pod's "
                                        "annotations (256 KiB limit), so they cannot be recorded; not resized")
        # Step 1: originals, if the webhook did not stamp them (or they were rejected).
        if base.stamp is not None:
            try:
                pod = await self._stamp_originals(pod, base.stamp)
            except ApiError as err:
                if err.retryable:
                    raise
                return await self._terminal(pod, signature, plan, EventType.WARNING, Reason.RESIZE_FAILED,
                                            f"cannot record the original resources ({err.message}); not resized")
            if base.check.tampered:
                await self._report(pod, None, EventType.WARNING, Reason.ORIGINALS_REPLACED,
                                   f"original-* annotations rejected ({base.check.reason}); re-captured from "
                                   "the pod's unchanged spec")
            self._fault(Step.ORIGINALS)
            # The stamp changed the annotations the signature covers: a terminal decision
            # below must be keyed on the pod as it is now, or the watch event of our own
            # write looks like a new situation and the pod is decided (and reported) again.
            signature = situation(pod, node_type, self._config.generation)
            plan = plan_resize(pod, resolve_policy(config, pod), node_type, self._options.resize_restart_containers)
        # Step 2: the resize itself, only if something changes.
        if plan.patch:
            try:
                await self._writer.resize(pod, plan.patch)
            except ApiError as err:
                if err.retryable:
                    raise
                return await self._rejected(pod, signature, plan, context, err)
            self._fault(Step.RESIZE)
        # Step 3: record what was done (and bind the originals to this very pod).
        await self._writer.annotate(pod, {APPLIED_INSTANCE_TYPE: node_type, APPLIED_AT: _now(),
                                          **pod_mac(pod, self._keyring())})
        cached = self._reader.pod(object_key(pod))
        if cached is None or cached["metadata"]["annotations"].get(APPLIED_INSTANCE_TYPE) != node_type:
            # The watch has not delivered our write yet (had it, this entry would never be cleared).
            self._finished[_uid(pod)] = node_type
        self._fault(Step.APPLIED)
        if plan.patch:
            reason = Reason.BOUNDS_CLAMPED if plan.clamped else Reason.RESIZED
            message = f"resized for {context}: {plan.summary()}"
        else:
            reason = Reason.ALREADY_ALIGNED
            message = f"already aligned for {context}" + (f": {plan.summary()}" if plan.changes else "")
        await self._report(pod, plan, EventType.NORMAL, reason, message)
        return DONE

    async def _stamp_originals(self, pod: Obj, stamp: dict[str, str | None]) -> Obj:
        """Merge-patch the originals captured from the spec, conditional on the resourceVersion we
        read (they describe exactly that spec). On a conflict the pod is read again once and the
        originals decided again from it: stamped meanwhile (and trusted) means nothing to write."""
        for attempt in range(2):
            try:
                return await self._writer.annotate(pod, stamp, resource_version=pod["metadata"]["resourceVersion"])
            except ApiError as err:
                if err.status != 409 or attempt == 1:
                    raise
            pod = await self._writer.get(pod)
            again = baseline(pod, self._keyring(), originals_from_spec_annotations(pod))
            if again.check.trust is Trust.TRUSTED:
                return pod
            if again.stamp is None:     # refused or trusted only if aligned: decide again from scratch
                raise ApiError(409, {"reason": "Conflict", "message": "the pod changed while its originals "
                                                                      "were recorded"})
            stamp = again.stamp
        raise AssertionError("unreachable")

    async def _resign(self, pod: Obj) -> Result:
        """An aligned pod signed with an older key (rotation): re-sign its verified originals with the newest."""
        keyring = self._keyring()
        if self._options.dry_run or not needs_resign(pod, keyring):
            return DONE
        try:
            trusted = baseline(pod, keyring, originals_from_spec_annotations(pod)).check.trust is Trust.TRUSTED
        except (OriginalsError, QuantityError):
            return DONE
        if trusted:
            await self._writer.annotate(pod, pod_mac(pod, keyring), resource_version=pod["metadata"]["resourceVersion"])
        return DONE

    async def _rejected(self, pod: Obj, signature: tuple[Any, ...], plan: ResizePlan,
                        context: str, err: ApiError) -> Result:
        if err.status == 404:
            return DONE     # deleted meanwhile: nothing to report; the watch's DELETED event cleans up
        if UNSUPPORTED_MESSAGE in err.message:
            # A soft skip: the node's kubelet does not advertise in-place resize.
            # Tried again when the pod's status changes (see status_fingerprint).
            return await self._terminal(pod, signature, plan, EventType.WARNING, Reason.RESIZE_UNSUPPORTED,
                                        f"node {pod['spec']['nodeName']} does not support in-place resize; "
                                        f"wanted for {context}: {plan.summary()}")
        if "NodeCapacity" in err.causes:
            return await self._terminal(pod, signature, plan, EventType.WARNING, Reason.RESIZE_FAILED,
                                        f"node {pod['spec']['nodeName']} cannot fit the new size "
                                        f"({err.message}); wanted for {context}: {plan.summary()}")
        return await self._terminal(pod, signature, plan, EventType.WARNING, Reason.RESIZE_FAILED,
                                    f"apiserver rejected the resize for {context}: {err.message}")

    async def _terminal(self, pod: Obj, signature: tuple[Any, ...], plan: ResizePlan | None,
                        event_type: EventType, reason: Reason, message: str) -> Result:
        """A decision that writes nothing to the pod: report it once per situation."""
        self._decided[_uid(pod)] = signature
        await self._report(pod, plan, event_type, reason, message)
        return DONE

    async def _report(self, pod: Obj, plan: ResizePlan | None, event_type: EventType, reason: Reason,
                      message: str) -> None:
        metrics.OUTCOMES.labels(reason.value).inc()
        audit.info("decision", extra=decision_record(pod, plan, reason, self._options.dry_run))
        await self._events.emit(object_reference(pod, "Pod"), event_type.value, reason.value, message)


def live_and_bound(pod: Obj) -> bool:
    return bool(pod["spec"].get("nodeName")) and "deletionTimestamp" not in pod["metadata"] \
        and pod["status"].get("phase") not in TERMINAL_PHASES


def situation(pod: Obj, node_type: str, config_generation: int) -> tuple[Any, ...]:
    """What a terminal decision depended on; the same situation is not decided twice."""
    ours = tuple(sorted((k, v) for k, v in pod["metadata"]["annotations"].items() if k.startswith(PREFIX)))
    return node_type, config_generation, status_fingerprint(pod), ours


def _uid(pod: Obj) -> str:
    return pod["metadata"].get("uid") or object_key(pod)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def decision_record(pod: Obj, plan: ResizePlan | None, outcome: str, dry_run: bool) -> dict[str, Any]:
    record: dict[str, Any] = {
        "pod": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"],
        "node": pod["spec"].get("nodeName"), "outcome": str(outcome), "dryRun": dry_run,
    }
    if plan is not None:
        record.update({"nodeType": plan.node_type, "baseline": plan.baseline_node_type, "rule": plan.rule,
                       "changes": [_change_record(c) for c in plan.changes]})
    return record


def _change_record(change: Any) -> dict[str, Any]:
    record = {"container": change.container, "resource": change.resource,
              "original": change.original_request, "desired": change.desired_request,
              "current": change.current_request, "unit": "millicores" if change.resource == "cpu" else "bytes"}
    if change.original_limit is not None or change.desired_limit is not None:
        record.update({"originalLimit": change.original_limit, "desiredLimit": change.desired_limit})
    if change.clamped:
        record["clamped"] = change.clamped
    if change.skipped:
        record["skipped"] = change.skipped
    return record


# Old private names, kept for callers that imported them.
_live_and_bound = live_and_bound
_situation = situation
_decision_record = decision_record
_pod_path = pod_path
