"""Following a requested resize to its end: what the kubelet reports about the spec that holds the plan.

Actuated ends in step 3 (reconciler.writes); deferred, infeasible, failing and unsupported are
recorded in the resize-state annotation before they are reported, and an infeasible or finally
failing size is set back to what the containers have, if that is a size the product knows the pod
had (reconciler.revert; docs/how-it-works.md).
"""

from __future__ import annotations

import logging
from dataclasses import replace

from kube import ApiError
from kube.informer import object_key
from reconciler import metrics
from reconciler.decide import Planned
from reconciler.memory import DONE, Context, InFlight, Result, Step
from reconciler.outcome import Observation, ResizeState, Stage, allocatable_fingerprint
from reconciler.pods import (
    duration,
    format_time,
    parse_time,
    pod_uid,
    recorded_state,
    requested_at,
    size_fingerprint,
    summary_from_originals,
)
from reconciler.ports import Obj
from reconciler.reasons import EventType, Reason
from reconciler.report import Reporter
from reconciler.revert import Revert, decide_revert, size_of_originals
from reconciler.writes import Writes
from resizer import Baseline, ResizePlan, Trust

log = logging.getLogger(__name__)


class Follow:
    """Acts on the kubelet's report about a resize in the spec: records, reports, sets back."""

    def __init__(self, context: Context, reporter: Reporter, writes: Writes) -> None:
        self._c = context
        self._reporter = reporter
        self._writes = writes

    async def follow(self, pod: Obj, planned: Planned, observation: Observation) -> Result:
        """The spec holds the plan (from ``planned.base``, the baseline authority's decision); act
        on what the kubelet reports about it (``observation``)."""
        node, node_type, plan, base = planned.node, planned.node_type, planned.plan, planned.base
        context, generation = planned.context, planned.generation
        if observation.stage == Stage.ACTUATED:
            return await self._actuated(pod, node_type, plan, context, generation)
        if observation.stage == Stage.REQUESTED:
            self._c.memory.wait(pod_uid(pod), Stage.REQUESTED)
            return DONE
        if observation.stage == Stage.DEFERRED:
            return await self._deferred(pod, node_type, observation)
        try:
            if observation.stage == Stage.INFEASIBLE:
                return await self._infeasible(pod, node, node_type, plan, base, observation.message)
            if observation.stage == Stage.ERROR:
                return await self._failing(pod, node, node_type, plan, base, observation)
        except ApiError as err:
            # Their writes are conditional on the pod as read (they judge the status in hand):
            # it changed, e.g. the kubelet took the size after all. Its watch event decides again.
            if err.status != 409:
                raise
            return DONE
        return await self._unsupported(pod, node_type, plan, context)

    async def _actuated(self, pod: Obj, node_type: str, plan: ResizePlan, context: str, generation: int) -> Result:
        flight = self._c.memory.get(pod_uid(pod)).flight
        requested = (
            flight.requested_at
            if flight is not None and flight.requested_at is not None
            else parse_time(requested_at(pod, node_type))
        )
        summary = flight.summary if flight is not None else summary_from_originals(plan)
        message = f"{flight.verb if flight is not None else 'resized'} for {context}: {summary}"
        if requested is not None:
            latency = max(0.0, self._c.clock() - requested)
            metrics.RESIZE_ACTUATION.observe(latency)
            message += f"; actuated {latency:.2f}s after the request"
        else:
            message += "; actuated (requested before this reconciler started)"
        metrics.RESIZE_OUTCOMES.labels("actuated").inc()
        reason = Reason.BOUNDS_CLAMPED if plan.clamped else Reason.RESIZED
        return await self._writes.applied(pod, node_type, plan, generation, reason, message)

    async def _deferred(self, pod: Obj, node_type: str, observation: Observation) -> Result:
        self._c.memory.wait(pod_uid(pod), Stage.DEFERRED)
        generation = pod["metadata"].get("generation")
        state = recorded_state(pod, node_type)
        if state is None or state.state != Stage.DEFERRED or state.generation != generation:
            state = ResizeState(
                Stage.DEFERRED, node_type, generation, requested_at=self._requested_stamp(pod, node_type)
            )
            await self._writes.record(pod, state)
            metrics.RESIZE_OUTCOMES.labels("deferred").inc()
            await self._reporter.report(
                pod,
                None,
                EventType.NORMAL,
                Reason.RESIZE_DEFERRED,
                f"the kubelet deferred the resize (it retries by itself): {observation.message}",
            )
        since = parse_time(observation.since) or parse_time(state.requested_at) or self._c.clock()
        waited = self._c.clock() - since
        if state.warned:
            return DONE
        if waited < self._c.options.deferred_timeout:
            return Result(requeue_after=self._c.options.deferred_timeout - waited + 1.0)
        await self._writes.record(pod, replace(state, warned=True))
        metrics.RESIZE_OUTCOMES.labels("deferred_too_long").inc()
        await self._reporter.report(
            pod,
            None,
            EventType.WARNING,
            Reason.RESIZE_DEFERRED,
            f"the resize is still deferred after {duration(waited)} (kept: the kubelet "
            f"applies it as soon as the node has room): {observation.message}",
        )
        return DONE

    async def _infeasible(
        self, pod: Obj, node: Obj, node_type: str, plan: ResizePlan, base: Baseline, message: str
    ) -> Result:
        """The kubelet will never take this size: record it, then set the spec back to the actual size
        (if the product knows the pod had it; else keep the spec and say so, once).

        All writes are conditional on the pod as read (409 otherwise, see follow): the revert
        is computed from the status in hand, and a kubelet that actuated the size meanwhile
        (e.g. its node grew) must not have it taken back (nor the pod marked infeasible)."""
        self._c.memory.wait(pod_uid(pod), Stage.INFEASIBLE)
        state = recorded_state(pod, node_type)
        size = size_fingerprint(plan)
        allocatable = allocatable_fingerprint(node)
        revert = self._revert_of(pod, base)
        resource_version = pod["metadata"]["resourceVersion"]
        if state is None or state.state != Stage.INFEASIBLE or state.size != size or state.allocatable != allocatable:
            # (Recorded again when only the allocatable changed: parked at the node as it is now.)
            resource_version = await self._writes.record(
                pod,
                ResizeState(
                    Stage.INFEASIBLE,
                    node_type,
                    pod["metadata"].get("generation"),
                    size,
                    allocatable,
                    kept=bool(revert.refused),
                ),
                resource_version=resource_version,
            )
            metrics.RESIZE_OUTCOMES.labels("infeasible").inc()
            outcome = (
                "the spec is kept at the planned size (see RevertRefused)"
                if revert.refused
                else (
                    "the spec is set back to what the containers have, and this size is not tried again until the "
                    "node's type or allocatable or the planned size changes"
                )
            )
            await self._reporter.report(
                pod,
                plan,
                EventType.WARNING,
                Reason.RESIZE_INFEASIBLE,
                f"node {pod['spec']['nodeName']} cannot take the new size ({message}); {outcome}",
            )
            if revert.refused:
                await self._report_kept(pod, plan, revert)
        elif revert.refused and not state.kept:
            resource_version = await self._writes.record(
                pod, replace(state, kept=True), resource_version=resource_version
            )
            await self._report_kept(pod, plan, revert)
        if not revert.refused:
            await self._revert(pod, revert.patch, resource_version)
        return DONE

    async def _failing(
        self, pod: Obj, node: Obj, node_type: str, plan: ResizePlan, base: Baseline, observation: Observation
    ) -> Result:
        """Actuation failed: the kubelet retries on each pod sync; we re-check with backoff, then give up."""
        uid = pod_uid(pod)
        self._c.memory.wait(uid, Stage.ERROR)
        state = recorded_state(pod, node_type)
        size = size_fingerprint(plan)
        now = self._c.clock()
        record = self._c.memory.of(uid)
        if record.flight is None:
            record.flight = InFlight(
                node_type,
                pod["metadata"].get("generation") or 0,
                parse_time(requested_at(pod, node_type)),
                summary_from_originals(plan),
            )
        flight = record.flight
        resource_version = pod["metadata"]["resourceVersion"]
        if state is None or state.state != Stage.ERROR or state.size != size:
            # Conditional like the revert that may follow (409 otherwise, see follow).
            state = ResizeState(
                Stage.ERROR, node_type, pod["metadata"].get("generation"), size, allocatable_fingerprint(node)
            )
            resource_version = await self._writes.record(pod, state, resource_version=resource_version)
            metrics.RESIZE_OUTCOMES.labels("error").inc()
            await self._reporter.report(
                pod,
                plan,
                EventType.WARNING,
                Reason.RESIZE_ERROR,
                f"the kubelet could not actuate the resize: {observation.message}",
            )
        if flight.next_error_check == 0.0:
            flight.next_error_check = now + self._c.options.error_backoff
        if now < flight.next_error_check:
            return Result(requeue_after=flight.next_error_check - now)
        if flight.error_checks + 1 < self._c.options.error_retries:
            flight.error_checks += 1
            flight.next_error_check = now + self._c.options.error_backoff * 2**flight.error_checks
            return Result(requeue_after=flight.next_error_check - now)
        return await self._give_up(pod, plan, base, flight, state, observation, resource_version)

    async def _give_up(
        self,
        pod: Obj,
        plan: ResizePlan,
        base: Baseline,
        flight: InFlight,
        state: ResizeState,
        observation: Observation,
        resource_version: str,
    ) -> Result:
        """The last check of a failing resize: set the spec back to what the containers have (if
        the product knows the pod had it; else keep the spec and say so, once)."""
        revert = self._revert_of(pod, base)
        if revert.refused:
            if not state.kept:
                await self._writes.record(pod, replace(state, kept=True), resource_version=resource_version)
                flight.error_checks += 1
                await self._reporter.report(
                    pod,
                    plan,
                    EventType.WARNING,
                    Reason.RESIZE_ERROR,
                    f"the resize still failed after {flight.error_checks} checks; the spec "
                    f"is kept at the planned size (see RevertRefused): {observation.message}",
                )
                await self._report_kept(pod, plan, revert)
            return DONE
        await self._revert(pod, revert.patch, resource_version)  # a 409 leaves the checks as they are
        flight.error_checks += 1
        metrics.RESIZE_OUTCOMES.labels("error_reverted").inc()
        await self._reporter.report(
            pod,
            plan,
            EventType.WARNING,
            Reason.RESIZE_ERROR,
            f"the resize still failed after {flight.error_checks} checks; the spec is set "
            f"back to what the containers have: {observation.message}",
        )
        return DONE

    async def _unsupported(self, pod: Obj, node_type: str, plan: ResizePlan, context: str) -> Result:
        """Resized before its containers ran, on a node whose kubelet turns out not to resize in place."""
        uid = pod_uid(pod)
        self._c.memory.of(uid).flight = None
        self._c.memory.wait(uid, None)
        state = recorded_state(pod, node_type)
        if state is not None and state.state == Stage.UNSUPPORTED:
            return DONE
        await self._writes.record(pod, ResizeState(Stage.UNSUPPORTED, node_type, pod["metadata"].get("generation")))
        metrics.RESIZE_OUTCOMES.labels("unsupported").inc()
        await self._reporter.report(
            pod,
            plan,
            EventType.WARNING,
            Reason.RESIZE_UNSUPPORTED,
            f"node {pod['spec']['nodeName']} does not support in-place resize: the spec was "
            f"resized before the containers started and the running containers do not "
            f"have the new size (it takes effect when they restart); wanted for {context}",
        )
        return DONE

    def _revert_of(self, pod: Obj, base: Baseline) -> Revert:
        """Whether what the containers of `pod` report is a size to set the spec back to
        (reconciler.revert): the sizes before our resize, from memory, or after a restart the
        originals (bounding the revert only where the baseline authority trusts them)."""
        flight = self._c.memory.get(pod_uid(pod)).flight
        before = flight.before if flight is not None else ()
        return decide_revert(
            pod, before, None if before else size_of_originals(base.pod), base.check.trust is Trust.TRUSTED
        )

    async def _report_kept(self, pod: Obj, plan: ResizePlan, revert: Revert) -> None:
        metrics.RESIZE_OUTCOMES.labels("revert_refused").inc()
        log.warning(
            "the containers report resources the product never set: the spec is not set back to them",
            extra={"pod": object_key(pod), "reported": revert.reported, "why": revert.refused},
        )
        await self._reporter.report(
            pod,
            plan,
            EventType.WARNING,
            Reason.REVERT_REFUSED,
            f"the containers report resources the product never set ({revert.reported}: "
            f"{revert.refused}); the spec is not set back to them and stays at the planned "
            f"size",
        )

    async def _revert(self, pod: Obj, patch: Obj, resource_version: str) -> None:
        """Send `patch` (what the containers of `pod` have), conditional on `resource_version`
        (the pod as read, or as our own write of its state left it): 409 if anything changed since."""
        uid = pod_uid(pod)
        if not patch:
            return
        try:
            reverted = await self._c.writer.resize(pod, patch, resource_version=resource_version)
        except ApiError as err:
            if err.retryable or err.status != 404:
                raise
            return
        record = self._c.memory.of(uid)
        record.reverted = reverted["metadata"].get("generation") or 0
        record.flight = None
        self._c.fault(Step.REVERT)

    def _requested_stamp(self, pod: Obj, node_type: str) -> str:
        flight = self._c.memory.get(pod_uid(pod)).flight
        if flight is not None and flight.requested_at is not None:
            return format_time(flight.requested_at)
        return requested_at(pod, node_type)
