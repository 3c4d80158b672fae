"""The pod resizer's reconcile(key): decide from the pure core, write in the recovery-safe order.

Per pod, writes happen in this order, and the order is the recovery contract: (1) the missing
original-* annotations, conditional on the resourceVersion read, so they describe the spec we
read; (2) the pods/resize patch, computed from the originals (never from the spec); (3)
applied-instance-type / applied-at / applied-size once the kubelet has actuated the new size
(followed from the pod watch, see reconciler.outcome), then the Resized Event. A crash between
any two steps leaves a state from which the next pass reaches the same end state; reordering
them re-introduces compounding resizes. A resize that does not end actuated is recorded in the
resize-state annotation before it is reported, so it is reported once and an infeasible size
is not retried while the node and the plan stay the same (docs/how-it-works.md). Reads and
writes go only through the interfaces of reconciler.ports.
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any

from ops.timestamps import rfc3339
from reconciler import metrics
from reconciler.kube.events import object_reference
from reconciler.kube.informer import object_key
from reconciler.kube import ApiError
from reconciler.outcome import (
    SPEC_SIZE_CHARS,
    Observation,
    ResizeState,
    Stage,
    allocatable_fingerprint,
    observe,
    revert_patch,
    spec_size,
)
from reconciler.kube.ratelimit import TokenBucket
from reconciler.ports import ConfigView, EventSink, FaultHook, Obj, PodReader, PodWriter, no_fault, pod_path
from reconciler.reasons import EventType, Reason
from reconciler.settings import ControllerSettings
from reconciler.kube.slim import status_fingerprint
from resizer import (
    APPLIED_AT,
    APPLIED_INSTANCE_TYPE,
    APPLIED_SIZE,
    EMPTY_KEYRING,
    PREFIX,
    RESIZE_STATE,
    Baseline,
    KeyRing,
    OriginalsError,
    PlanError,
    QuantityError,
    ResizePlan,
    Trust,
    baseline,
    eligibility,
    fits_annotation_limit,
    needs_resign,
    original_annotations,
    plan_resize,
    pod_mac,
    pod_mac_stand_in,
    resolve_policy,
)
from resizer.realign import realignment

log = logging.getLogger("reconciler.controller")
audit = logging.getLogger("reconciler.decision")

UNSUPPORTED_MESSAGE = "without support for resize"
NODE_CAPACITY = "NodeCapacity"      # the cause of the 1.36+ apiserver's (PodResizeValidator) refusal
TERMINAL_PHASES = ("Succeeded", "Failed")


class Step:
    """Names of the write steps, as passed to the fault hook."""
    ORIGINALS = "originals"
    RESIZE = "resize"
    APPLIED = "applied"
    STATE = "state"         # the resize-state annotation of a stalled resize
    REVERT = "revert"       # the spec set back to what the containers actually have


@dataclass
class InFlight:
    """A resize this process requested and has not seen end yet (memory only)."""
    node_type: str
    generation: int
    requested_at: float | None      # wall clock; None: requested by an earlier process, time unknown
    summary: str
    verb: str = "resized"           # "re-aligned" for a pod sized before, under another config
    error_checks: int = 0
    next_error_check: float = 0.0
    config_generation: int | None = None     # the config version it was planned with (None: unknown)
    # The original-* annotations verified and resized from (None: not known to be verified, e.g. a
    # failing resize first seen after a restart): the baseline authority trusts them while unchanged.
    originals: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Result:
    requeue_after: float | None = None


DONE = Result()


class PodResizeReconciler:
    """reconcile(namespace/name) of one pod, plus the predicate the manager filters events with."""

    def __init__(self, reader: PodReader, writer: PodWriter, events: EventSink, config: ConfigView,
                 options: ControllerSettings, fault: FaultHook = no_fault, clock: Callable[[], float] = time.time,
                 keyring: Callable[[], KeyRing] = lambda: EMPTY_KEYRING) -> None:
        self._reader = reader
        self._keyring = keyring     # the originals MAC keys in force (they rotate)
        self._writer = writer
        self._events = events
        self._config = config
        self._options = options
        self._fault = fault
        self._clock = clock
        # Resizes this process requested, by pod uid, until they end (actuated or recorded).
        self._in_flight: dict[str, InFlight] = {}
        # Generation our last revert produced, by pod uid: a cached pod older than that is not reverted again.
        self._reverted: dict[str, int] = {}
        # The waiting state of each pod whose resize has not ended (the RESIZES_WAITING gauge).
        self._waiting: dict[str, Stage] = {}
        # Terminal decisions that wrote nothing (UnknownNodeType, ResizeUnsupported,
        # ...), by pod uid: the same situation is not decided (and reported) twice.
        self._decided: dict[str, tuple[Any, ...]] = {}
        # Pods we finished (uid -> node type) whose applied annotation the watch has
        # not delivered yet: a lagging cache must not cause a second pass.
        self._finished: dict[str, str] = {}
        # Re-alignment: the config version each sized pod was last re-planned for (uid ->
        # generation), and the limiter of resizes of pods already sized.
        self._realign_checked: dict[str, int] = {}
        self._realign_limiter = TokenBucket(options.max_resizes_per_second, 1)

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
        flight = self._in_flight.get(_uid(pod))
        if flight is not None and self._awaiting_kubelet(pod, node_type, flight):
            return False
        done = (pod["metadata"]["annotations"].get(APPLIED_INSTANCE_TYPE), self._finished.get(_uid(pod)))
        if node_type in done:       # sized for this type: follow a re-alignment in flight, or check for one
            return _uid(pod) in self._in_flight or self._needs_realignment(pod, node_type) \
                or self._unreported_realignment(pod, node_type) is not None
        return not self._parked(pod, node, node_type)

    def _awaiting_kubelet(self, pod: Obj, node_type: str, flight: InFlight) -> bool:
        """Our resize of this very spec, planned with the config in use, that the kubelet has
        not reported on yet: a reconcile would re-plan the same size and only wait. (Most
        watch events of a pod in flight are of this kind: our own writes, the start.)"""
        return flight.node_type == node_type and flight.config_generation == self._config.generation \
            and pod["metadata"].get("generation") == flight.generation and observe(pod).stage == Stage.REQUESTED

    def _parked(self, pod: Obj, node: Obj | None, node_type: str, plan: ResizePlan | None = None) -> bool:
        """A recorded infeasible/failed size that is not to be tried again on this node,
        or a node recorded as unable to resize."""
        state = ResizeState.decode(pod["metadata"]["annotations"].get(RESIZE_STATE))
        if state is None or state.node_type != node_type:
            return False
        if state.state == Stage.UNSUPPORTED:
            return True
        if state.state not in (Stage.INFEASIBLE, Stage.ERROR) or node is None:
            return False
        config = self._config.config
        if config is None or state.allocatable != allocatable_fingerprint(node):
            return False
        if plan is None:
            try:
                plan = plan_resize(pod, resolve_policy(config, pod), node_type,
                                   self._options.resize_restart_containers)
            except (OriginalsError, PlanError):
                return False
        return state.size == size_fingerprint(plan) and bool(plan.patch)

    def _needs_realignment(self, pod: Obj, node_type: str) -> bool:
        """A pod already sized is re-planned once per config version; queued only if that changes it."""
        config, generation = self._config.config, self._config.generation
        uid = _uid(pod)
        if not self._options.realign or config is None or self._realign_checked.get(uid) == generation:
            return False
        self._realign_checked[uid] = generation
        return realignment(pod, config, node_type, self._options.resize_restart_containers) is not None

    def _unreported_realignment(self, pod: Obj, node_type: str) -> ResizePlan | None:
        """The plan, if the spec holds a re-alignment (the spec equals the plan) whose size is not
        the one recorded as applied: requested by an earlier process that died before it ended."""
        annotations = pod["metadata"]["annotations"]
        recorded = annotations.get(APPLIED_SIZE)
        config = self._config.config
        if recorded is None or not self._options.realign or config is None or _uid(pod) in self._finished \
                or annotations.get(APPLIED_INSTANCE_TYPE) != node_type or recorded == spec_size(pod):
            return None
        try:
            # Only originals bound to this pod (resizer.integrity): adopting the spec as our
            # re-alignment would otherwise sign originals nobody verified at step 3.
            if baseline(pod, self._keyring()).check.trust is not Trust.TRUSTED:
                return None
            plan = plan_resize(pod, resolve_policy(config, pod), node_type, self._options.resize_restart_containers)
        except (OriginalsError, PlanError, QuantityError):
            return None
        return plan if plan.outcome == "AlreadyAligned" else None

    def _adopt(self, pod: Obj, plan: ResizePlan) -> None:
        """Follow an unreported re-alignment found on the pod as if this process had requested it."""
        log.info("following a re-alignment requested before this reconciler started",
                 extra={"pod": object_key(pod), "generation": pod["metadata"].get("generation")})
        self._in_flight[_uid(pod)] = InFlight(plan.node_type, pod["metadata"].get("generation") or 0, None,
                                              _summary_from_originals(plan), "re-aligned",
                                              originals=original_annotations(pod))

    def observe(self, pod: Obj) -> None:
        """A watch event of `pod` arrived (before needs_work)."""
        uid = _uid(pod)
        annotations = pod["metadata"]["annotations"]
        if uid in self._finished and annotations.get(APPLIED_INSTANCE_TYPE) == self._finished[uid]:
            del self._finished[uid]
        if RESIZE_STATE in annotations and uid not in self._waiting:
            # After a restart: count the stalled resizes recorded on pods (the gauge).
            state = ResizeState.decode(annotations[RESIZE_STATE])
            if state is not None and state.state in (Stage.DEFERRED, Stage.INFEASIBLE, Stage.ERROR):
                self._wait(uid, state.state)

    def forget(self, pod: Obj) -> None:
        """`pod` was deleted."""
        uid = _uid(pod)
        self._decided.pop(uid, None)
        self._finished.pop(uid, None)
        self._realign_checked.pop(uid, None)
        self._in_flight.pop(uid, None)
        self._reverted.pop(uid, None)
        self._wait(uid, None)

    def _wait(self, uid: str, stage: Stage | None) -> None:
        """Track the pod's waiting state for the gauge (None: not waiting)."""
        old = self._waiting.pop(uid, None) if stage is None else self._waiting.get(uid)
        if stage is not None:
            self._waiting[uid] = stage
        if old != stage:
            if old is not None:
                metrics.RESIZES_WAITING.labels(old.value).dec()
            if stage is not None:
                metrics.RESIZES_WAITING.labels(stage.value).inc()

    # ------------------------------------------------------------------ reconcile

    async def reconcile(self, key: str) -> Result:
        pod = self._reader.pod(key)
        if pod is None or not live_and_bound(pod) or not eligibility(pod).eligible:
            if pod is not None:
                self._wait(_uid(pod), None)
            return DONE
        node_name = pod["spec"]["nodeName"]
        node = await self._reader.node(node_name)
        node_type = node["metadata"]["labels"].get(self._options.node_type_label) if node is not None else None
        if not node_type:
            log.debug("node has no type label; skipping", extra={
                "pod": key, "node": node_name, "nodeExists": node is not None, "label": self._options.node_type_label})
            return DONE
        flight = self._in_flight.get(_uid(pod))
        if flight is not None and self._awaiting_kubelet(pod, node_type, flight):
            return DONE     # queued before our resize (e.g. dirty while we wrote it): nothing to do yet
        config = self._config.config
        unreported = self._unreported_realignment(pod, node_type) if _uid(pod) not in self._in_flight else None
        if unreported is not None:
            self._adopt(pod, unreported)
        in_flight = _uid(pod) in self._in_flight        # a re-alignment being followed to actuation
        if node_type in (pod["metadata"]["annotations"].get(APPLIED_INSTANCE_TYPE), self._finished.get(_uid(pod))) \
                and not in_flight and (not self._options.realign or config is None
                                       or realignment(pod, config, node_type,
                                                      self._options.resize_restart_containers) is None):
            self._wait(_uid(pod), None)
            return await self._resign(pod)
        if config is None:
            return Result(requeue_after=5.0)
        signature = situation(pod, node_type, self._config.generation)
        if self._decided.get(_uid(pod)) == signature:
            return DONE
        assert node is not None
        return await self._decide(pod, node, node_type, signature)

    async def _decide(self, pod: Obj, node: Obj, node_type: str, signature: tuple[Any, ...]) -> Result:
        config = self._config.config
        assert config is not None
        flight = self._in_flight.get(_uid(pod))
        if flight is not None and flight.node_type == node_type and (pod["metadata"].get("generation") or 0) < \
                flight.generation:
            return DONE     # the cache has not caught up with our own resize yet
        if (pod["metadata"].get("generation") or 0) < self._reverted.get(_uid(pod), 0):
            return DONE     # nor with our own revert (e.g. the event of the state recorded before it)
        generation = self._config.generation      # the config version the plan below is made with
        try:
            # Whose originals these are (resizer.integrity): trusted, re-captured from the spec, or refused.
            base = baseline(pod, self._keyring(), vouched=self._vouched(pod, node_type))
            if base.check.trust is Trust.REFUSE:
                return await self._terminal(pod, signature, None, EventType.WARNING, Reason.ORIGINALS_UNVERIFIED,
                                            f"not resized: {base.check.reason}")
            plan = plan_resize(base.pod, resolve_policy(config, pod), node_type,
                               self._options.resize_restart_containers)
        except (OriginalsError, QuantityError) as err:
            return await self._terminal(pod, signature, None, EventType.WARNING, Reason.RESIZE_FAILED,
                                        f"cannot read the pod's original resources: {err}")
        except PlanError as err:        # reported once, like a corrupt original: a retry cannot help
            return await self._terminal(pod, signature, None, EventType.WARNING, Reason.RESIZE_FAILED,
                                        f"cannot size the pod: {err}")
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
        if plan.patch:
            if self._parked(pod, node, node_type, plan):
                return DONE
            return await self._write(pod, node, node_type, signature, plan, context, base, generation)
        if flight is None and not _resized_from_originals(plan) and _state(pod, node_type) is None:
            return await self._write(pod, node, node_type, signature, plan, context, base,    # originals, applied
                                     generation)
        return await self._follow(pod, node, node_type, plan, context, generation)

    async def _write(self, pod: Obj, node: Obj, node_type: str, signature: tuple[Any, ...],
                     plan: ResizePlan, context: str, base: Baseline, generation: int) -> Result:
        config = self._config.config
        assert config is not None
        # Everything steps 1 and 3 leave on the pod must fit, or the resize would never be recorded.
        # (Stand-ins of the right size for the MAC and the size digest: only their length counts here.)
        final = {**(base.stamp or original_annotations(pod)), **pod_mac_stand_in(self._keyring()),
                 APPLIED_INSTANCE_TYPE: node_type, APPLIED_AT: rfc3339(), APPLIED_SIZE: "-" * SPEC_SIZE_CHARS}
        if not fits_annotation_limit(pod["metadata"]["annotations"], {k: v for k, v in final.items() if v is not None}):
            return await self._terminal(pod, signature, plan, EventType.WARNING, Reason.RESIZE_FAILED,
                                        "the original resources and what was applied do not fit in the pod's "
                                        "annotations (256 KiB limit), so they cannot be recorded; not resized")
        if base.stamp is not None and not plan.patch and not base.check.tampered:
            # Already aligned: no resize will follow, so the originals and the record of what was
            # applied go in one write, conditional on the resourceVersion the originals were read
            # from (no step between them for a crash to fall into). A conflict takes steps 1 and 3.
            try:
                return await self._applied(pod, node_type, plan, generation, Reason.ALREADY_ALIGNED,
                                           _aligned_message(plan, context), originals=base.stamp)
            except ApiError as err:
                if err.status != 409:
                    return await self._originals_not_recorded(pod, signature, plan, err)
        # Step 1: originals, if the webhook did not stamp them (or they were rejected).
        if base.stamp is not None:
            try:
                pod, reread = await self._stamp_originals(pod, base.stamp)
            except ApiError as err:
                return await self._originals_not_recorded(pod, signature, plan, err)
            if base.check.tampered:
                await self._report(pod, None, EventType.WARNING, Reason.ORIGINALS_REPLACED,
                                   f"original-* annotations rejected ({base.check.reason}); re-captured from "
                                   "the pod's unchanged spec")
            self._fault(Step.ORIGINALS)
            # The stamp changed the annotations the signature covers: a terminal decision
            # below must be keyed on the pod as it is now, or the watch event of our own
            # write looks like a new situation and the pod is decided (and reported) again.
            signature = situation(pod, node_type, self._config.generation)
            if reread:  # otherwise the originals are the spec we planned from, written as read: same plan
                generation = self._config.generation
                plan = plan_resize(pod, resolve_policy(config, pod), node_type,
                                   self._options.resize_restart_containers)
        if not plan.patch:
            return await self._applied(pod, node_type, plan, generation, Reason.ALREADY_ALIGNED,
                                       _aligned_message(plan, context))
        # Step 2: the resize itself. Its outcome arrives through the pod watch (_follow).
        realigned = APPLIED_INSTANCE_TYPE in pod["metadata"]["annotations"]
        if realigned:
            await self._realign_limiter.take()      # --max-resizes-per-second
        try:
            # Conditional on the pod as read: a deposed leader's resize still on the wire, or one
            # planned from a pod that changed meanwhile, is refused (409) instead of landing.
            resized = await self._writer.resize(pod, plan.patch, resource_version=pod["metadata"]["resourceVersion"])
        except ApiError as err:
            if err.retryable:       # a 409 included: retried from the cache with backoff
                raise
            return await self._rejected(pod, node, node_type, signature, plan, context, err)
        self._fault(Step.RESIZE)
        self._in_flight[_uid(pod)] = InFlight(node_type, resized["metadata"].get("generation") or 0,
                                              self._clock(), plan.summary(),
                                              "re-aligned" if realigned else "resized",
                                              config_generation=generation, originals=original_annotations(pod))
        self._wait(_uid(pod), Stage.REQUESTED)
        return DONE

    async def _originals_not_recorded(self, pod: Obj, signature: tuple[Any, ...], plan: ResizePlan,
                                      err: ApiError) -> Result:
        """Step 1's write failed: raised again when a retry may succeed, else reported once."""
        if err.retryable:
            raise err
        return await self._terminal(pod, signature, plan, EventType.WARNING, Reason.RESIZE_FAILED,
                                    f"cannot record the original resources ({err.message}); not resized")

    async def _applied(self, pod: Obj, node_type: str, plan: ResizePlan, generation: int, reason: Reason,
                       message: str, originals: Mapping[str, str | None] | None = None) -> Result:
        """Step 3: record that the pod has its size for the node type, then report it.

        `generation` is the config version the plan was made with: no re-alignment check
        is due for it (else the watch event of this very write would re-plan the pod).
        With `originals` (step 1's annotations, for a pod that needs no resize) both go in
        one write, conditional on the pod's resourceVersion (409 when it changed)."""
        self._realign_checked[_uid(pod)] = generation
        signed = pod if originals is None else _with_annotations(pod, originals)
        # The MAC binds the originals to this very pod (a webhook MAC verifies on look-alike siblings too).
        annotations: dict[str, str | None] = {**(originals or {}), APPLIED_INSTANCE_TYPE: node_type,
                                              APPLIED_AT: rfc3339(), APPLIED_SIZE: spec_size(pod),
                                              **self._binding(signed, node_type)}
        if RESIZE_STATE in pod["metadata"]["annotations"]:
            annotations[RESIZE_STATE] = None
        resource_version = pod["metadata"]["resourceVersion"] if originals is not None else None
        uid = _uid(pod)
        # Recorded before the write: the watch event of the write may be observed while we wait
        # for the reply, and observe() forgets the entry once the cache shows it (set after, it
        # would outlive that event and hide a later removal of applied-* from needs_work).
        before = self._finished.get(uid)
        self._finished[uid] = node_type
        try:
            await self._writer.record(pod, annotations, resource_version=resource_version)
        except BaseException:
            if before is None:
                self._finished.pop(uid, None)
            else:
                self._finished[uid] = before
            raise
        self._in_flight.pop(uid, None)
        self._wait(uid, None)
        self._fault(Step.APPLIED)
        await self._report(pod, plan, EventType.NORMAL, reason, message)
        return DONE

    # ------------------------------------------------------------------ following a resize

    async def _follow(self, pod: Obj, node: Obj, node_type: str, plan: ResizePlan, context: str,
                      generation: int) -> Result:
        """The spec holds the plan; act on what the kubelet reports about it."""
        observation = observe(pod)
        uid = _uid(pod)
        if observation.stage == Stage.ACTUATED:
            return await self._actuated(pod, node_type, plan, context, generation)
        if observation.stage == Stage.REQUESTED:
            self._wait(uid, Stage.REQUESTED)
            return DONE
        if observation.stage == Stage.DEFERRED:
            return await self._deferred(pod, node_type, observation)
        try:
            if observation.stage == Stage.INFEASIBLE:
                return await self._infeasible(pod, node, node_type, plan, observation.message)
            if observation.stage == Stage.ERROR:
                return await self._failing(pod, node, node_type, plan, observation)
        except ApiError as err:
            # Their writes are conditional on the pod as read (they judge the status in hand):
            # it changed, e.g. the kubelet took the size after all. Its watch event decides again.
            if err.status != 409:
                raise
            return DONE
        return await self._unsupported(pod, node_type, plan, context)

    async def _actuated(self, pod: Obj, node_type: str, plan: ResizePlan, context: str, generation: int) -> Result:
        flight = self._in_flight.get(_uid(pod))
        requested_at = flight.requested_at if flight is not None and flight.requested_at is not None \
            else _parse_time(_requested_at(pod, node_type))
        summary = flight.summary if flight is not None else _summary_from_originals(plan)
        message = f"{flight.verb if flight is not None else 'resized'} for {context}: {summary}"
        if requested_at is not None:
            latency = max(0.0, self._clock() - requested_at)
            metrics.RESIZE_ACTUATION.observe(latency)
            message += f"; actuated {latency:.2f}s after the request"
        else:
            message += "; actuated (requested before this reconciler started)"
        metrics.RESIZE_OUTCOMES.labels("actuated").inc()
        reason = Reason.BOUNDS_CLAMPED if plan.clamped else Reason.RESIZED
        return await self._applied(pod, node_type, plan, generation, reason, message)

    async def _deferred(self, pod: Obj, node_type: str, observation: Observation) -> Result:
        uid = _uid(pod)
        self._wait(uid, Stage.DEFERRED)
        generation = pod["metadata"].get("generation")
        state = _state(pod, node_type)
        if state is None or state.state != Stage.DEFERRED or state.generation != generation:
            state = ResizeState(Stage.DEFERRED, node_type, generation, requested_at=self._requested_stamp(pod, node_type))
            await self._record(pod, state)
            metrics.RESIZE_OUTCOMES.labels("deferred").inc()
            await self._report(pod, None, EventType.NORMAL, Reason.RESIZE_DEFERRED,
                               f"the kubelet deferred the resize (it retries by itself): {observation.message}")
        since = _parse_time(observation.since) or _parse_time(state.requested_at) or self._clock()
        waited = self._clock() - since
        if state.warned:
            return DONE
        if waited < self._options.deferred_timeout:
            return Result(requeue_after=self._options.deferred_timeout - waited + 1.0)
        await self._record(pod, replace(state, warned=True))
        metrics.RESIZE_OUTCOMES.labels("deferred_too_long").inc()
        await self._report(pod, None, EventType.WARNING, Reason.RESIZE_DEFERRED,
                           f"the resize is still deferred after {_duration(waited)} (kept: the kubelet applies it "
                           f"as soon as the node has room): {observation.message}")
        return DONE

    async def _infeasible(self, pod: Obj, node: Obj, node_type: str, plan: ResizePlan, message: str) -> Result:
        """The kubelet will never take this size: record it, then set the spec back to the actual size.

        Both writes are conditional on the pod as read (409 otherwise, see _follow): the revert
        is computed from the status in hand, and a kubelet that actuated the size meanwhile
        (e.g. its node grew) must not have it taken back (nor the pod marked infeasible)."""
        self._wait(_uid(pod), Stage.INFEASIBLE)
        state = _state(pod, node_type)
        size = size_fingerprint(plan)
        allocatable = allocatable_fingerprint(node)
        resource_version = pod["metadata"]["resourceVersion"]
        if state is None or state.state != Stage.INFEASIBLE or state.size != size or state.allocatable != allocatable:
            # (Recorded again when only the allocatable changed: parked at the node as it is now.)
            resource_version = await self._record(pod, ResizeState(
                Stage.INFEASIBLE, node_type, pod["metadata"].get("generation"), size, allocatable),
                resource_version=resource_version)
            metrics.RESIZE_OUTCOMES.labels("infeasible").inc()
            await self._report(pod, plan, EventType.WARNING, Reason.RESIZE_INFEASIBLE,
                               f"node {pod['spec']['nodeName']} cannot take the new size ({message}); the spec is "
                               f"set back to what the containers have, and this size is not tried again until the "
                               f"node's type or allocatable or the planned size changes")
        await self._revert(pod, resource_version)
        return DONE

    async def _failing(self, pod: Obj, node: Obj, node_type: str, plan: ResizePlan,
                       observation: Observation) -> Result:
        """Actuation failed: the kubelet retries on each pod sync; we re-check with backoff, then give up."""
        uid = _uid(pod)
        self._wait(uid, Stage.ERROR)
        state = _state(pod, node_type)
        size = size_fingerprint(plan)
        now = self._clock()
        flight = self._in_flight.setdefault(uid, InFlight(node_type, pod["metadata"].get("generation") or 0,
                                                          _parse_time(_requested_at(pod, node_type)),
                                                          _summary_from_originals(plan)))
        resource_version = pod["metadata"]["resourceVersion"]
        if state is None or state.state != Stage.ERROR or state.size != size:
            # Conditional like the revert that may follow (409 otherwise, see _follow).
            resource_version = await self._record(pod, ResizeState(
                Stage.ERROR, node_type, pod["metadata"].get("generation"), size, allocatable_fingerprint(node)),
                resource_version=resource_version)
            metrics.RESIZE_OUTCOMES.labels("error").inc()
            await self._report(pod, plan, EventType.WARNING, Reason.RESIZE_ERROR,
                               f"the kubelet could not actuate the resize: {observation.message}")
        if flight.next_error_check == 0.0:
            flight.next_error_check = now + self._options.error_backoff
        if now < flight.next_error_check:
            return Result(requeue_after=flight.next_error_check - now)
        if flight.error_checks + 1 < self._options.error_retries:
            flight.error_checks += 1
            flight.next_error_check = now + self._options.error_backoff * 2 ** flight.error_checks
            return Result(requeue_after=flight.next_error_check - now)
        await self._revert(pod, resource_version)       # a 409 leaves the checks as they are
        flight.error_checks += 1
        metrics.RESIZE_OUTCOMES.labels("error_reverted").inc()
        await self._report(pod, plan, EventType.WARNING, Reason.RESIZE_ERROR,
                           f"the resize still failed after {flight.error_checks} checks; the spec is set back to "
                           f"what the containers have: {observation.message}")
        return DONE

    async def _unsupported(self, pod: Obj, node_type: str, plan: ResizePlan, context: str) -> Result:
        """Resized before its containers ran, on a node whose kubelet turns out not to resize in place."""
        uid = _uid(pod)
        self._in_flight.pop(uid, None)
        self._wait(uid, None)
        state = _state(pod, node_type)
        if state is not None and state.state == Stage.UNSUPPORTED:
            return DONE
        await self._record(pod, ResizeState(Stage.UNSUPPORTED, node_type, pod["metadata"].get("generation")))
        metrics.RESIZE_OUTCOMES.labels("unsupported").inc()
        await self._report(pod, plan, EventType.WARNING, Reason.RESIZE_UNSUPPORTED,
                           f"node {pod['spec']['nodeName']} does not support in-place resize: the spec was resized "
                           f"before the containers started and the running containers do not have the new size "
                           f"(it takes effect when they restart); wanted for {context}")
        return DONE

    async def _record(self, pod: Obj, state: ResizeState, resource_version: str | None = None) -> str:
        """Write the resize-state annotation (with `resource_version`, conditional on it); returns
        the pod's resourceVersion after the write (a revert that follows is conditional on it).

        The state itself vouches for nothing (anyone who can write annotations can forge it): the
        same write binds the originals our resize was planned from to the pod, so that a restarted
        reconciler still trusts them."""
        written = await self._writer.annotate(pod, {RESIZE_STATE: state.encode(), **self._binding(pod, state.node_type)},
                                              resource_version=resource_version)
        self._fault(Step.STATE)
        return str(written["metadata"]["resourceVersion"])

    async def _revert(self, pod: Obj, resource_version: str) -> None:
        """Set the spec back to what the containers of `pod` have, conditional on `resource_version`
        (the pod as read, or as our own write of its state left it): 409 if anything changed since."""
        uid = _uid(pod)
        patch = revert_patch(pod)
        if not patch:
            return
        try:
            reverted = await self._writer.resize(pod, patch, resource_version=resource_version)
        except ApiError as err:
            if err.retryable or err.status != 404:
                raise
            return
        self._reverted[uid] = reverted["metadata"].get("generation") or 0
        self._in_flight.pop(uid, None)
        self._fault(Step.REVERT)

    def _requested_stamp(self, pod: Obj, node_type: str) -> str:
        flight = self._in_flight.get(_uid(pod))
        if flight is not None and flight.requested_at is not None:
            return _rfc3339(flight.requested_at)
        return _requested_at(pod, node_type)

    async def _stamp_originals(self, pod: Obj, stamp: dict[str, str | None]) -> tuple[Obj, bool]:
        """Merge-patch the originals captured from the spec, conditional on the resourceVersion we
        read (they describe exactly that spec). On a conflict the pod is read again once and the
        originals decided again from it: stamped meanwhile (and trusted) means nothing to write.
        Returns the pod as written and whether it was read again (so its spec may differ from
        the one planned from)."""
        for attempt in range(2):
            try:
                written = await self._writer.annotate(pod, stamp, resource_version=pod["metadata"]["resourceVersion"])
                return written, attempt > 0
            except ApiError as err:
                if err.status != 409 or attempt == 1:
                    raise
            pod = await self._writer.get(pod)
            again = baseline(pod, self._keyring())
            if again.check.trust is Trust.TRUSTED:
                return pod, True
            if again.stamp is None:     # refused or trusted only if aligned: decide again from scratch
                raise ApiError(409, {"reason": "Conflict", "message": "the pod changed while its originals "
                                                                      "were recorded"})
            stamp = again.stamp
        raise AssertionError("unreachable")

    def _vouched(self, pod: Obj, node_type: str) -> Mapping[str, str] | None:
        """The originals this process verified and resized the pod from, while the spec holds that
        resize: in flight for this node type, or for any type with no spec change since (the node may
        have been relabelled before the kubelet actuated it). The baseline authority trusts them
        while the pod still carries exactly those."""
        flight = self._in_flight.get(_uid(pod))
        if flight is not None and (flight.node_type == node_type
                                   or flight.generation == pod["metadata"].get("generation")):
            return flight.originals
        return None

    def _binding(self, pod: Obj, node_type: str) -> dict[str, str]:
        """A pod MAC over the pod's originals, if the baseline authority lets us bind them to it."""
        keyring = self._keyring()
        try:
            if not baseline(pod, keyring, vouched=self._vouched(pod, node_type)).may_sign:
                return {}
        except (OriginalsError, QuantityError):
            return {}
        return pod_mac(pod, keyring)

    async def _resign(self, pod: Obj) -> Result:
        """An aligned pod signed with an older key (rotation): re-sign its verified originals with the newest."""
        keyring = self._keyring()
        if self._options.dry_run or not needs_resign(pod, keyring):
            return DONE
        try:
            trusted = baseline(pod, keyring).check.trust is Trust.TRUSTED
        except (OriginalsError, QuantityError):
            return DONE
        if trusted:
            await self._writer.record(pod, pod_mac(pod, keyring), resource_version=pod["metadata"]["resourceVersion"])
        return DONE

    async def _rejected(self, pod: Obj, node: Obj, node_type: str, signature: tuple[Any, ...], plan: ResizePlan,
                        context: str, err: ApiError) -> Result:
        if err.status == 404:
            return DONE     # deleted meanwhile: nothing to report; the watch's DELETED event cleans up
        if UNSUPPORTED_MESSAGE in err.message:
            # A soft skip: the node's kubelet does not advertise in-place resize.
            # Tried again when the pod's status changes (see status_fingerprint).
            return await self._terminal(pod, signature, plan, EventType.WARNING, Reason.RESIZE_UNSUPPORTED,
                                        f"node {pod['spec']['nodeName']} does not support in-place resize; "
                                        f"wanted for {context}: {plan.summary()}")
        if NODE_CAPACITY in err.causes:
            # The apiserver (1.36+) refuses what the kubelet would mark Infeasible: same policy,
            # nothing to set back.
            self._wait(_uid(pod), Stage.INFEASIBLE)
            await self._record(pod, ResizeState(Stage.INFEASIBLE, node_type, pod["metadata"].get("generation"),
                                                size_fingerprint(plan), allocatable_fingerprint(node)))
            metrics.RESIZE_OUTCOMES.labels("infeasible").inc()
            await self._report(pod, plan, EventType.WARNING, Reason.RESIZE_INFEASIBLE,
                               f"node {pod['spec']['nodeName']} cannot fit the new size ({err.message}); not tried "
                               f"again until the node's type or allocatable or the planned size changes; wanted for "
                               f"{context}: {plan.summary()}")
            return DONE
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


def _state(pod: Obj, node_type: str) -> ResizeState | None:
    """The pod's recorded resize state, if it is about this node type."""
    state = ResizeState.decode(pod["metadata"]["annotations"].get(RESIZE_STATE))
    return state if state is not None and state.node_type == node_type else None


def _requested_at(pod: Obj, node_type: str) -> str:
    state = _state(pod, node_type)
    return state.requested_at if state is not None else ""


def size_fingerprint(plan: ResizePlan) -> str:
    """The planned size (per container and resource: request and limit), as a short digest."""
    targets = sorted((c.container, c.resource, c.desired_request, c.desired_limit)
                     for c in plan.changes if c.skipped is None)
    return hashlib.sha256(repr(targets).encode()).hexdigest()[:16]


def _resized_from_originals(plan: ResizePlan) -> bool:
    """Whether the spec differs from the originals, i.e. the pod was resized at some point."""
    return any(c.current_request != c.original_request or
               (c.original_limit is not None and c.current_limit != c.original_limit)
               for c in plan.changes if c.skipped is None)


def _summary_from_originals(plan: ResizePlan) -> str:
    """The plan as a change from the originals (when the spec already holds it)."""
    from_originals = replace(plan, changes=tuple(
        replace(c, current_request=c.original_request, current_limit=c.original_limit) for c in plan.changes))
    return from_originals.summary()


def _aligned_message(plan: ResizePlan, context: str) -> str:
    return f"already aligned for {context}" + (f": {plan.summary()}" if plan.changes else "")


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return None


def _rfc3339(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def _with_annotations(pod: Obj, changes: Mapping[str, str | None]) -> Obj:
    """`pod` as a merge patch of these annotations leaves it (None removes a key); `pod` is unchanged."""
    merged = {**pod["metadata"]["annotations"], **changes}
    annotations = {key: value for key, value in merged.items() if value is not None}
    return {**pod, "metadata": {**pod["metadata"], "annotations": annotations}}


def _uid(pod: Obj) -> str:
    return pod["metadata"].get("uid") or object_key(pod)




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
