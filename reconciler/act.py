"""Carrying out a pass's decision (reconciler.decide): the writes in the recovery-safe order, the
kubelet's outcome followed, holds, and the reports (Event, metrics, audit record).

Per pod, writes happen in this order, and the order is the recovery contract: (1) the missing
original-* annotations, conditional on the resourceVersion read, so they describe the spec we
read; (2) the pods/resize patch, computed from the originals (never from the spec); (3)
applied-instance-type / applied-at / applied-size once the kubelet has actuated the new size
(followed from the pod watch: Follow), then the Resized Event. A crash between any two steps
leaves a state from which the next pass reaches the same end state; reordering them
re-introduces compounding resizes. A resize that does not end actuated is recorded in the
resize-state annotation (record) before it is reported, so it is reported once and an
infeasible size is not retried while the node and the plan stay the same (docs/how-it-works.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kube import ApiError
from kube.events import object_reference
from kube.informer import object_key
from kube.ratelimit import TokenBucket
from ops.timestamps import rfc3339
from reconciler import metrics
from reconciler.decide import (
    Action,
    Adopt,
    Follow,
    Hold,
    NotEligible,
    Nothing,
    Parked,
    Planned,
    RecordApplied,
    Report,
    Resign,
    Resize,
    Untyped,
    World,
    aligned,
    vouched,
)
from reconciler.gates import VPA, Held
from reconciler.memory import DONE, Context, InFlight, Result, Step
from reconciler.outcome import Observation, ResizeState, Stage, allocatable_fingerprint, spec_size
from reconciler.pods import (
    duration,
    format_time,
    parked_at,
    parse_time,
    pod_uid,
    recorded_state,
    size_fingerprint,
    summary_from_originals,
    with_annotations,
)
from reconciler.ports import EventSink, Obj
from reconciler.reasons import EventType, Reason
from reconciler.revert import Revert, decide_revert, size_of_originals, sizes_before
from resizer import Baseline, ResizePlan, ResizerError, Trust, baseline, plan_bound_pod, pod_mac, resolve_policy
from resizer.podstate import applied_patch, read_state, resize_state_patch
from resizer.preflight import apply_patch, fits_allocatable

log = logging.getLogger("reconciler.act")
audit = logging.getLogger("reconciler.decision")

UNSUPPORTED_MESSAGE = "without support for resize"
# In the apiserver's refusal of a pods/resize changing spec.resources with its
# InPlacePodLevelResourcesVerticalScaling gate off, and the NodeDeclaredFeatureValidator's on a node without it.
POD_LEVEL_REFUSED = "InPlacePodLevelResourcesVerticalScaling"
GATE_OFF = "feature gate is disabled"
NODE_CAPACITY = "NodeCapacity"  # the cause of the 1.36+ apiserver's (PodResizeValidator) refusal
KEPT = "the spec is kept at the planned size (see RevertRefused)"
# The apiserver's admission caches catch up with ours within seconds: a refusal the preflight let
# through that still comes after this long is a disagreement, reported once (ResizeHeld).
REFUSAL_REPORTED_AFTER = 30.0


class Act:
    """Executes decisions: one instance per process (its node locks and resize limiter are shared)."""

    def __init__(self, context: Context, events: EventSink) -> None:
        self._c = context
        self._events = events
        # The limiter of resizes of pods already sized (--max-resizes-per-second).
        self._realign_limiter = TokenBucket(context.options.max_resizes_per_second, 1)
        # Two increases judged at once on one node would both count the same free room.
        self._node_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    async def __call__(self, pod: Obj, action: Action) -> Result:
        uid = pod_uid(pod)
        if action.past_gate:
            self._c.holds.release(uid, VPA)
        if isinstance(action, Nothing):
            return Result(action.requeue_after)
        if isinstance(action, (Resize, RecordApplied)):
            return await self.write(pod, action.planned)
        if isinstance(action, Follow):
            return await self.follow(pod, action.planned, action.observation)
        if isinstance(action, Report):
            return await self.terminal(pod, action)
        if isinstance(action, Resign):
            self._c.memory.of(uid).realign_checked = action.generation  # the filter skips it until the config changes
            self._c.memory.wait(uid, None)
            self._c.holds.release(uid)
            if action.mac:
                await self._c.writer.record(pod, action.mac, resource_version=pod["metadata"]["resourceVersion"])
            return DONE
        if isinstance(action, Hold):
            return await self._held(pod, None, action.held)
        if isinstance(action, Parked):
            self._c.memory.of(uid).parked = action.at
            return DONE
        if isinstance(action, Adopt):
            log.info(
                "following a re-alignment requested before this reconciler started",
                extra={"pod": object_key(pod), "generation": pod["metadata"].get("generation")},
            )
            self._c.memory.of(uid).flight = action.flight
            return await self(pod, action.then)
        if isinstance(action, NotEligible):
            self._c.memory.wait(uid, None)
            return DONE
        assert isinstance(action, Untyped)
        extra = {"pod": object_key(pod), "node": action.node_name, "nodeExists": action.node_exists}
        log.debug("node has no type label; skipping", extra={**extra, "label": self._c.options.node_type_label})
        return DONE

    # ------------------------------------------------------------------ reports

    async def terminal(self, pod: Obj, decided: Report) -> Result:
        """A decision that writes nothing to the pod: report it once per situation."""
        self._c.memory.of(pod_uid(pod)).decided = decided.signature
        await self.report(pod, decided.plan, decided.event_type, decided.reason, decided.message)
        return DONE

    async def report(
        self, pod: Obj, plan: ResizePlan | None, event_type: EventType, reason: Reason, message: str
    ) -> None:
        metrics.OUTCOMES.labels(reason.value).inc()
        audit.info("decision", extra=decision_record(pod, plan, reason, self._c.options.dry_run))
        await self._events.emit(object_reference(pod, "Pod"), event_type.value, reason.value, message)

    # ------------------------------------------------------------------ holds

    async def _held(self, pod: Obj, plan: ResizePlan | None, held: Held) -> Result:
        """Nothing written: the pod waits for its constraint to change (or `held.requeue_after`);
        each distinct hold is reported once."""
        uid = pod_uid(pod)
        if self._c.holds.hold(uid, held, self._c.clock()):
            event_type = EventType.WARNING if held.constraint in ("LimitRange", "ResourceQuota") else EventType.NORMAL
            await self.report(pod, plan, event_type, held.reason, held.message)
        if held.at_most is not None and held.requeue_after is not None:
            since = self._c.holds.since(uid) or self._c.clock()
            return Result(requeue_after=max(1.0, since + held.at_most - self._c.clock()))
        return Result(requeue_after=held.requeue_after)

    def _waited_enough(self, pod: Obj, held: Held) -> bool:
        """A bounded hold (room on the node) that has lasted its bound: the resize goes out anyway."""
        previous, since = self._c.holds.held.get(pod_uid(pod)), self._c.holds.since(pod_uid(pod))
        if held.at_most is None or previous is None or previous.fingerprint != held.fingerprint or since is None:
            return False
        return self._c.clock() - since >= held.at_most

    # ------------------------------------------------------------------ steps 1-3, the resize-state record

    async def write(self, pod: Obj, planned: Planned) -> Result:
        """Steps 1 to 3 as the decided pod needs them (reconciler.decide: Resize, RecordApplied)."""
        config = self._c.config.config
        assert config is not None
        base = planned.base
        sized = base.check.scope == "sized"  # the webhook created the pod at this size
        if base.stamp is not None and not planned.plan.patch and not base.check.tampered:
            # Already aligned: no resize will follow, so the originals and the record of what was
            # applied go in one write, conditional on the resourceVersion the originals were read
            # from (no step between them for a crash to fall into). A conflict takes steps 1 and 3.
            reason, message = aligned(planned.state, planned.plan, planned.context, sized)
            try:
                return await self.applied(pod, planned, reason, message, originals=base.stamp)
            except ApiError as err:
                if err.status != 409:
                    return await self._originals_not_recorded(pod, planned, err)
        # Step 1: originals, if the webhook did not stamp them (or they were rejected, or the
        # pod-level ones are missing: stamped before they were recorded).
        record = self._c.memory.of(pod_uid(pod))
        if base.stamp is not None and planned.plan.patch:
            record.resizing = pod["metadata"].get("generation") or 0  # this write's watch event is ours (needs_work)
        try:
            if base.stamp is not None:
                try:
                    pod, reread = await self._stamp_originals(pod, base.stamp)
                except ApiError as err:
                    return await self._originals_not_recorded(pod, planned, err)
                if base.check.tampered:
                    why = base.check.reason
                    message = f"original-* annotations rejected ({why}); re-captured from the pod's unchanged spec"
                    await self.report(pod, None, EventType.WARNING, Reason.ORIGINALS_REPLACED, message)
                self._c.fault(Step.ORIGINALS)
                # The stamp changed the annotations the signature covers: a terminal decision
                # below must be keyed on the pod as it is now, or the watch event of our own
                # write looks like a new situation and the pod is decided (and reported) again.
                world, state = World.of(self._c), read_state(pod)
                planned = replace(
                    planned, state=state, signature=world.situation(pod, state, planned.node_type, planned.node)
                )
                if reread:  # otherwise the originals are the spec we planned from, written as read: same plan
                    policy, restart = resolve_policy(config, pod), self._c.options.resize_restart_containers
                    plan = plan_bound_pod(pod, policy, planned.node_type, restart, world.pod_level(planned.node), sized)
                    planned = replace(planned, generation=world.config_generation, plan=plan)
            if not planned.plan.patch:
                return await self.applied(pod, planned, *aligned(planned.state, planned.plan, planned.context, sized))
            return await self._resize(pod, planned)
        finally:
            record.resizing = None

    async def _resize(self, pod: Obj, planned: Planned) -> Result:
        """Step 2: the resize itself. Its outcome arrives through the pod watch (follow)."""
        patch = planned.plan.patch
        realigned = planned.state.applied.recorded
        if realigned:
            await self._realign_limiter.take()  # --max-resizes-per-second
        async with self._node_locks[str(pod["spec"]["nodeName"])]:
            held = self._c.gate.preflight(pod, planned.node, patch)  # a resize that would be refused
            if held is not None and not self._waited_enough(pod, held):
                self._forget_refusals(pod)  # the preflight agrees with the apiserver now
                return await self._held(pod, planned.plan, held)
            self._c.holds.release(pod_uid(pod))
            try:
                resized = await self._send_resize(pod, patch)
            except ApiError as err:
                if err.retryable:  # a 409 included: retried from the cache with backoff
                    raise
                return await self._rejected(pod, planned, err)
            self._c.gate.sent(pod, patch, resized["metadata"].get("generation") or 0)
        self._c.fault(Step.RESIZE)
        self._forget_refusals(pod)
        record = self._c.memory.of(pod_uid(pod))
        previous = record.flight
        record.flight = InFlight(
            planned.node_type,
            resized["metadata"].get("generation") or 0,
            self._c.clock(),
            planned.plan.summary(),
            "re-aligned" if realigned else "resized",
            config_generation=planned.generation,
            originals=dict(planned.state.originals),
            before=sizes_before(pod, previous.before if previous is not None else ()),
        )
        self._c.memory.wait(pod_uid(pod), Stage.REQUESTED)
        return DONE

    async def _send_resize(self, pod: Obj, patch: Obj) -> Obj:
        """The pods/resize request, conditional on the pod as read: a deposed leader's resize, or one
        planned from a pod changed meanwhile, is refused (409). While it is on the wire the kubelet's
        answer to it passes the filter (it may come before the reply); not after, while a refusal is
        recorded."""
        record = self._c.memory.of(pod_uid(pod))
        generation = pod["metadata"].get("generation")
        record.resizing = generation or 0
        try:
            return await self._c.writer.resize(pod, patch, if_generation=generation)
        finally:
            record.resizing = None

    async def _originals_not_recorded(self, pod: Obj, planned: Planned, err: ApiError) -> Result:
        """Step 1's write failed: raised again when a retry may succeed, else reported once."""
        if err.retryable:
            raise err
        message = f"cannot record the original resources ({err.message}); not resized"
        return await self.terminal(pod, planned.refused(Reason.RESIZE_FAILED, message))

    async def applied(
        self,
        pod: Obj,
        planned: Planned,
        reason: Reason,
        message: str,
        originals: Mapping[str, str | None] | None = None,
    ) -> Result:
        """Step 3: record that the pod has its size for the node type, then report it. No re-alignment
        check is due for `planned.generation` (else this write's watch event would re-plan the pod).
        With `originals` (step 1's, for a pod that needs no resize) both go in one write,
        conditional on the pod's resourceVersion (409 when it changed)."""
        node_type = planned.node_type
        self._c.memory.of(pod_uid(pod)).realign_checked = planned.generation
        signed = pod if originals is None else with_annotations(pod, originals)
        # The MAC binds the originals to this very pod (a webhook MAC verifies on look-alike siblings too).
        annotations: dict[str, str | None] = {
            **(originals or {}),
            **applied_patch(node_type, rfc3339(), spec_size(pod), planned.state),
            **binding(self._c, signed, node_type, planned.base),
        }
        resource_version = pod["metadata"]["resourceVersion"] if originals is not None else None
        # Finished, and no longer in flight, before the write: the watch event of the write may be
        # observed while we wait for the reply (with the flight still remembered it would queue the
        # pod again), and observe() forgets the entry once the cache shows it (set after, it would
        # outlive that event and hide a later removal of applied-* from needs_work).
        uid = pod_uid(pod)
        record = self._c.memory.of(uid)
        before, record.finished = record.finished, node_type
        flight, record.flight = record.flight, None
        try:
            await self._c.writer.record(pod, annotations, resource_version=resource_version)
        except BaseException:
            record.finished, record.flight = before, flight
            raise
        self._c.memory.wait(uid, None)
        self._c.fault(Step.APPLIED)
        await self.report(pod, planned.plan, EventType.NORMAL, reason, message)
        return DONE

    async def record(self, pod: Obj, state: ResizeState, resource_version: str | None = None) -> str:
        """Write the resize-state annotation (conditional on `resource_version`, if given); returns the
        pod's resourceVersion after it (a revert that follows is conditional on it). The state vouches
        for nothing (anyone who writes annotations can forge it): the same write binds the originals
        our resize was planned from to the pod, so that a restarted reconciler still trusts them."""
        written = await self._c.writer.annotate(
            pod,
            {**resize_state_patch(state), **binding(self._c, pod, state.node_type)},
            resource_version=resource_version,
        )
        self._c.fault(Step.STATE)
        return str(written["metadata"]["resourceVersion"])

    async def _park(
        self,
        pod: Obj,
        planned: Planned,
        stage: Stage,
        message: str,
        kept: bool = False,
        resource_version: str | None = None,
    ) -> tuple[ResizeState, str]:
        """Record the planned size as `stage` (infeasible or failing) on the node as it is, remember it
        parked (needs_work lets the pod's watch events pass only once something it was judged under
        changes) and report it; returns the state recorded and the resourceVersion after the write."""
        size = size_fingerprint(planned.plan)
        generation, allocatable = pod["metadata"].get("generation"), allocatable_fingerprint(planned.node)
        state = ResizeState(stage, planned.node_type, generation, size, allocatable, kept=kept)
        resource_version = await self.record(pod, state, resource_version=resource_version)
        self._c.memory.of(pod_uid(pod)).parked = parked_at(pod, planned.state, planned.generation, size)
        metrics.RESIZE_OUTCOMES.labels(stage.value).inc()
        reason = Reason.RESIZE_INFEASIBLE if stage == Stage.INFEASIBLE else Reason.RESIZE_ERROR
        await self.report(pod, planned.plan, EventType.WARNING, reason, message)
        return state, resource_version

    async def _stamp_originals(self, pod: Obj, stamp: dict[str, str | None]) -> tuple[Obj, bool]:
        """Merge-patch the originals captured from the spec, conditional on the resourceVersion read
        (they describe exactly that spec). On a conflict the pod is read again once and its originals
        decided again (stamped meanwhile and trusted: nothing to write). Returns the pod as written
        and whether it was read again (its spec may differ from the one planned from)."""
        try:
            return await self._c.writer.annotate(pod, stamp, resource_version=pod["metadata"]["resourceVersion"]), False
        except ApiError as err:
            if err.status != 409:
                raise
        pod = await self._c.writer.get(pod)
        again = baseline(pod, self._c.keyring())
        if again.check.trust is Trust.TRUSTED and again.stamp is None:
            return pod, True
        if again.stamp is None:  # refused or trusted only if aligned: decide again from scratch
            raise ApiError(409, {"reason": "Conflict", "message": "the pod changed while its originals were recorded"})
        written = await self._c.writer.annotate(pod, again.stamp, resource_version=pod["metadata"]["resourceVersion"])
        return written, True

    async def _rejected(self, pod: Obj, planned: Planned, err: ApiError) -> Result:
        plan, context = planned.plan, planned.context
        if err.status == 404:
            return DONE  # deleted meanwhile: nothing to report; the watch's DELETED event cleans up
        if err.status == 403 and self._c.gate.judges(err.message):
            # Our cache let this size through; the apiserver's admission reads caches of its own,
            # which can be behind it (a LimitRange or quota just raised): tried again with backoff.
            await self._refused_anyway(pod, planned, err.message)
            raise err
        if UNSUPPORTED_MESSAGE in err.message:
            # The kubelet does not advertise in-place resize: tried again when the pod's status changes.
            message = (
                f"node {pod['spec']['nodeName']} does not support in-place resize; "
                f"wanted for {context}: {plan.summary()}"
            )
            return await self.terminal(pod, planned.refused(Reason.RESIZE_UNSUPPORTED, message))
        if plan.patch.get("spec", {}).get("resources") and POD_LEVEL_REFUSED in err.message:
            if GATE_OFF in err.message:
                self._c.memory.pod_level_refused = err.message  # its gate is off, cluster-wide
                signature = World.of(self._c).situation(pod, planned.state, planned.node_type, planned.node)
                planned = replace(planned, signature=signature)
            message = (
                f"not resized for {context}: the apiserver cannot resize pod-level "
                f"resources ({err.message}); pods that set spec.resources are left alone"
            )
            return await self.terminal(pod, planned.refused(Reason.POD_LEVEL_RESOURCES, message))
        if NODE_CAPACITY in err.causes:
            if self._node_cache_behind(pod, planned):
                raise err
            # The apiserver (1.36+) refuses what the kubelet would mark Infeasible: same policy, no revert.
            self._forget_refusals(pod)
            self._c.memory.wait(pod_uid(pod), Stage.INFEASIBLE)
            message = (
                f"node {pod['spec']['nodeName']} cannot fit the new size ({err.message}); not "
                f"tried again until the node's type or allocatable or the planned size changes; "
                f"wanted for {context}: {plan.summary()}"
            )
            await self._park(pod, planned, Stage.INFEASIBLE, message)
            return DONE
        message = f"apiserver rejected the resize for {context}: {err.message}"
        return await self.terminal(pod, planned.refused(Reason.RESIZE_FAILED, message))

    def _node_cache_behind(self, pod: Obj, planned: Planned) -> bool:
        """Whether a NodeCapacity refusal of a size that fits the node as our cache shows it comes from
        the apiserver's own cache of the node, still at an allocatable it has since grown from: tried
        again with backoff until the refusal outlasts any cache lag, then parked as infeasible."""
        fits = fits_allocatable(planned.node, apply_patch(pod, planned.plan.patch))
        return fits and self._refused_for(pod) < REFUSAL_REPORTED_AFTER

    def _refused_for(self, pod: Obj) -> float:
        """How long the apiserver has refused this pod's resize (since its first refusal in a row)."""
        record, now = self._c.memory.of(pod_uid(pod)), self._c.clock()
        if record.refused_since is None:
            record.refused_since = now
        return now - record.refused_since

    async def _refused_anyway(self, pod: Obj, planned: Planned, refusal: str) -> None:
        """Report, once, a refusal the preflight let through that has outlasted any cache lag."""
        lasted, record = self._refused_for(pod), self._c.memory.of(pod_uid(pod))
        if lasted < REFUSAL_REPORTED_AFTER or record.refusal_reported:
            return
        record.refusal_reported = True
        message = (
            f"the apiserver has refused the resize for {planned.context} for {lasted:.0f}s although "
            f"the reconciler's cache lets it through: {refusal}; tried again with backoff"
        )
        await self.report(pod, planned.plan, EventType.WARNING, Reason.RESIZE_HELD, message)

    def _forget_refusals(self, pod: Obj) -> None:
        record = self._c.memory.get(pod_uid(pod))
        if record.refused_since is not None:  # (never the shared empty record)
            record.refused_since, record.refusal_reported = None, False

    # ------------------------------------------------------------------ the kubelet's outcome

    async def follow(self, pod: Obj, planned: Planned, observation: Observation) -> Result:
        """The spec holds the plan: act on what the kubelet reports about it (`observation`)."""
        recorded = recorded_state(planned.state, planned.node_type)
        if observation.stage == Stage.ACTUATED:
            return await self._actuated(pod, planned, recorded)
        waiting = None if observation.stage == Stage.UNSUPPORTED else observation.stage
        self._c.memory.wait(pod_uid(pod), waiting)
        if observation.stage == Stage.REQUESTED:
            return DONE
        if observation.stage == Stage.DEFERRED:
            return await self._deferred(pod, planned, recorded, observation)
        try:
            if observation.stage == Stage.INFEASIBLE:
                return await self._infeasible(pod, planned, recorded, observation.message)
            if observation.stage == Stage.ERROR:
                return await self._failing(pod, planned, recorded, observation)
        except ApiError as err:
            # Their writes are conditional on the pod as read (they judge the status in hand):
            # it changed, e.g. the kubelet took the size after all. Its watch event decides again.
            if err.status != 409:
                raise
            return DONE
        return await self._unsupported(pod, planned, recorded)

    async def _actuated(self, pod: Obj, planned: Planned, recorded: ResizeState | None) -> Result:
        flight = self._c.memory.get(pod_uid(pod)).flight
        requested = self._requested(pod, recorded)
        summary = flight.summary if flight is not None else summary_from_originals(planned.plan)
        message = f"{flight.verb if flight is not None else 'resized'} for {planned.context}: {summary}"
        if requested is not None:
            latency = max(0.0, self._c.clock() - requested)
            metrics.RESIZE_ACTUATION.observe(latency)
            message += f"; actuated {latency:.2f}s after the request"
        else:
            message += "; actuated (requested before this reconciler started)"
        metrics.RESIZE_OUTCOMES.labels("actuated").inc()
        reason = Reason.BOUNDS_CLAMPED if planned.plan.clamped else Reason.RESIZED
        return await self.applied(pod, planned, reason, message)

    async def _deferred(
        self, pod: Obj, planned: Planned, state: ResizeState | None, observation: Observation
    ) -> Result:
        generation = pod["metadata"].get("generation")
        if state is None or state.state != Stage.DEFERRED or state.generation != generation:
            requested = self._requested(pod, state)
            stamp = format_time(requested) if requested is not None else ""
            state = ResizeState(Stage.DEFERRED, planned.node_type, generation, requested_at=stamp)
            await self.record(pod, state)
            metrics.RESIZE_OUTCOMES.labels("deferred").inc()
            message = f"the kubelet deferred the resize (it retries by itself): {observation.message}"
            await self.report(pod, None, EventType.NORMAL, Reason.RESIZE_DEFERRED, message)
        since = parse_time(observation.since) or parse_time(state.requested_at) or self._c.clock()
        waited = self._c.clock() - since
        if state.warned:
            return DONE
        if waited < self._c.options.deferred_timeout:
            return Result(requeue_after=self._c.options.deferred_timeout - waited + 1.0)
        await self.record(pod, replace(state, warned=True))
        metrics.RESIZE_OUTCOMES.labels("deferred_too_long").inc()
        message = (
            f"the resize is still deferred after {duration(waited)} (kept: the kubelet "
            f"applies it as soon as the node has room): {observation.message}"
        )
        await self.report(pod, None, EventType.WARNING, Reason.RESIZE_DEFERRED, message)
        return DONE

    async def _infeasible(self, pod: Obj, planned: Planned, state: ResizeState | None, message: str) -> Result:
        """The kubelet will never take this size: record it, then set the spec back to the actual size
        (if the product knows the pod had it; else keep the spec and say so, once). Every write is
        conditional on the pod as read (see follow): the revert is computed from the status in hand,
        and a size the kubelet actuated meanwhile must not be taken back (nor marked infeasible)."""
        revert = self._revert_of(pod, planned.base)
        resource_version = pod["metadata"]["resourceVersion"]
        if (
            state is None
            or state.state != Stage.INFEASIBLE
            or state.size != size_fingerprint(planned.plan)
            or state.allocatable != allocatable_fingerprint(planned.node)
        ):
            # (Recorded again when only the allocatable changed: parked at the node as it is now.)
            outcome = (
                KEPT
                if revert.refused
                else "the spec is set back to what the containers have, and this size is not tried again until the "
                "node's type or allocatable or the planned size changes"
            )
            message = f"node {pod['spec']['nodeName']} cannot take the new size ({message}); {outcome}"
            kept = bool(revert.refused)
            _, resource_version = await self._park(pod, planned, Stage.INFEASIBLE, message, kept, resource_version)
            if revert.refused:
                await self._report_kept(pod, planned.plan, revert)
        elif revert.refused and not state.kept:
            resource_version = await self.record(pod, replace(state, kept=True), resource_version=resource_version)
            await self._report_kept(pod, planned.plan, revert)
        if not revert.refused:
            await self._revert(pod, revert.patch, resource_version)
        return DONE

    async def _failing(self, pod: Obj, planned: Planned, state: ResizeState | None, observation: Observation) -> Result:
        """Actuation failed: the kubelet retries on each pod sync; we re-check with backoff, then give up."""
        now = self._c.clock()
        record = self._c.memory.of(pod_uid(pod))
        if record.flight is None:
            record.flight = InFlight(
                planned.node_type,
                pod["metadata"].get("generation") or 0,
                self._requested(pod, state),
                summary_from_originals(planned.plan),
            )
        flight = record.flight
        resource_version = pod["metadata"]["resourceVersion"]
        if state is None or state.state != Stage.ERROR or state.size != size_fingerprint(planned.plan):
            # Conditional like the revert that may follow (409 otherwise, see follow).
            message = f"the kubelet could not actuate the resize: {observation.message}"
            state, resource_version = await self._park(pod, planned, Stage.ERROR, message, False, resource_version)
        if flight.next_error_check == 0.0:
            flight.next_error_check = now + self._c.options.error_backoff
        if now < flight.next_error_check:
            return Result(requeue_after=flight.next_error_check - now)
        if flight.error_checks + 1 < self._c.options.error_retries:
            flight.error_checks += 1
            flight.next_error_check = now + self._c.options.error_backoff * 2**flight.error_checks
            return Result(requeue_after=flight.next_error_check - now)
        # The last check: set the spec back as _infeasible does.
        revert = self._revert_of(pod, planned.base)
        if revert.refused:
            if state.kept:
                return DONE
            await self.record(pod, replace(state, kept=True), resource_version=resource_version)
        else:
            await self._revert(pod, revert.patch, resource_version)  # a 409 leaves the checks as they are
            metrics.RESIZE_OUTCOMES.labels("error_reverted").inc()
        flight.error_checks += 1
        outcome = KEPT if revert.refused else "the spec is set back to what the containers have"
        message = f"the resize still failed after {flight.error_checks} checks; {outcome}: {observation.message}"
        await self.report(pod, planned.plan, EventType.WARNING, Reason.RESIZE_ERROR, message)
        if revert.refused:
            await self._report_kept(pod, planned.plan, revert)
        return DONE

    async def _unsupported(self, pod: Obj, planned: Planned, recorded: ResizeState | None) -> Result:
        """Resized before its containers ran, on a node whose kubelet turns out not to resize in place."""
        self._c.memory.of(pod_uid(pod)).flight = None
        if recorded is not None and recorded.state == Stage.UNSUPPORTED:
            return DONE
        await self.record(pod, ResizeState(Stage.UNSUPPORTED, planned.node_type, pod["metadata"].get("generation")))
        metrics.RESIZE_OUTCOMES.labels("unsupported").inc()
        message = (
            f"node {pod['spec']['nodeName']} does not support in-place resize: the spec was "
            f"resized before the containers started and the running containers do not "
            f"have the new size (it takes effect when they restart); wanted for {planned.context}"
        )
        await self.report(pod, planned.plan, EventType.WARNING, Reason.RESIZE_UNSUPPORTED, message)
        return DONE

    def _revert_of(self, pod: Obj, base: Baseline) -> Revert:
        """Whether what the containers report is a size to set the spec back to (reconciler.revert):
        the sizes before our resize, or after a restart the originals (trusted ones bound it)."""
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
        message = (
            f"the containers report resources the product never set ({revert.reported}: {revert.refused}); "
            "the spec is not set back to them and stays at the planned size"
        )
        await self.report(pod, plan, EventType.WARNING, Reason.REVERT_REFUSED, message)

    async def _revert(self, pod: Obj, patch: Obj, resource_version: str) -> None:
        """Send `patch` (what the containers of `pod` have), conditional on `resource_version`
        (the pod as read, or as our own write of its state left it): 409 if anything changed since."""
        if not patch:
            return
        try:
            reverted = await self._c.writer.resize(pod, patch, resource_version=resource_version)
        except ApiError as err:
            if err.retryable or err.status != 404:
                raise
            return
        record = self._c.memory.of(pod_uid(pod))
        record.reverted = reverted["metadata"].get("generation") or 0
        record.flight = None
        self._c.fault(Step.REVERT)

    def _requested(self, pod: Obj, recorded: ResizeState | None) -> float | None:
        """When the resize was requested: as remembered, else as recorded (None: not known)."""
        flight = self._c.memory.get(pod_uid(pod)).flight
        if flight is not None and flight.requested_at is not None:
            return flight.requested_at
        return parse_time(recorded.requested_at) if recorded is not None else None


def decision_record(pod: Obj, plan: ResizePlan | None, outcome: str, dry_run: bool) -> dict[str, Any]:
    record: dict[str, Any] = {
        "pod": pod["metadata"]["name"],
        "namespace": pod["metadata"]["namespace"],
        "node": pod["spec"].get("nodeName"),
        "outcome": str(outcome),
        "dryRun": dry_run,
    }
    if plan is not None:
        record.update(nodeType=plan.node_type, baseline=plan.baseline_node_type, rule=plan.rule)
        record["changes"] = [_change_record(c) for c in plan.changes]
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
    optional = {"clamped": change.clamped, "skipped": change.skipped, "sidecar": change.sidecar}
    record.update((key, value) for key, value in optional.items() if value)
    return record


def binding(context: Context, pod: Obj, node_type: str, decided: Baseline | None = None) -> dict[str, str]:
    """A pod MAC over the pod's originals, if the baseline authority lets us bind them to it.
    ``decided``: the pass's decision, taken again unless it was made for this very pod object."""
    keyring = context.keyring()
    try:
        if decided is None or decided.pod is not pod:
            decided = baseline(pod, keyring, vouched=vouched(context.memory.get(pod_uid(pod)), pod, node_type))
        if not decided.may_sign:
            return {}
    except ResizerError:
        return {}
    return pod_mac(pod, keyring)
