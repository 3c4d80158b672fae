"""The pod resizer's writes, in the recovery-safe order.

Per pod, writes happen in this order, and the order is the recovery contract: (1) the missing
original-* annotations, conditional on the resourceVersion read, so they describe the spec we
read; (2) the pods/resize patch, computed from the originals (never from the spec); (3)
applied-instance-type / applied-at / applied-size once the kubelet has actuated the new size
(followed from the pod watch, see reconciler.follow), then the Resized Event. A crash between
any two steps leaves a state from which the next pass reaches the same end state; reordering
them re-introduces compounding resizes. A resize that does not end actuated is recorded in the
resize-state annotation (record) before it is reported, so it is reported once and an infeasible
size is not retried while the node and the plan stay the same (docs/how-it-works.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kube import ApiError
from kube.ratelimit import TokenBucket
from ops.timestamps import rfc3339
from reconciler import metrics
from reconciler.authority import binding
from reconciler.decide import Planned, aligned
from reconciler.holding import Holding
from reconciler.memory import DONE, Context, InFlight, Result, Step
from reconciler.outcome import ResizeState, Stage, allocatable_fingerprint, spec_size
from reconciler.pods import (
    mac_key_known,
    parked_at,
    pod_uid,
    situation,
    size_fingerprint,
    with_annotations,
)
from reconciler.ports import Obj
from reconciler.reasons import EventType, Reason
from reconciler.report import Reporter
from reconciler.revert import sizes_before
from resizer import (
    APPLIED_AT,
    APPLIED_INSTANCE_TYPE,
    APPLIED_SIZE,
    RESIZE_STATE,
    Baseline,
    ResizePlan,
    ResizerError,
    Trust,
    baseline,
    needs_resign,
    original_annotations,
    plan_resize,
    pod_mac,
    resolve_policy,
)

UNSUPPORTED_MESSAGE = "without support for resize"
# In the apiserver's refusal of a pods/resize that changes spec.resources while its
# InPlacePodLevelResourcesVerticalScaling gate is off, and of the NodeDeclaredFeatureValidator's
# on a node that does not declare that feature.
POD_LEVEL_REFUSED = "InPlacePodLevelResourcesVerticalScaling"
GATE_OFF = "feature gate is disabled"
NODE_CAPACITY = "NodeCapacity"  # the cause of the 1.36+ apiserver's (PodResizeValidator) refusal


class Writes:
    """Steps 1-3 of a decided pod, the resize-state record and the re-signing of originals."""

    def __init__(self, context: Context, reporter: Reporter) -> None:
        self._c = context
        self._reporter = reporter
        # The limiter of resizes of pods already sized (--max-resizes-per-second).
        self._realign_limiter = TokenBucket(context.options.max_resizes_per_second, 1)
        self.holding = Holding(context, reporter)

    async def write(self, pod: Obj, planned: Planned) -> Result:
        """Steps 1 to 3 as the decided pod needs them (reconciler.decide: Resize, RecordApplied)."""
        config = self._c.config.config
        assert config is not None
        node, node_type, signature = planned.node, planned.node_type, planned.signature
        plan, context, base, generation = planned.plan, planned.context, planned.base, planned.generation
        if base.stamp is not None and not plan.patch and not base.check.tampered:
            done = await self._originals_and_applied(
                pod, node_type, signature, plan, context, base.stamp, generation, base.check.scope == "sized"
            )
            if done is not None:
                return done
        # Step 1: originals, if the webhook did not stamp them (or they were rejected, or the
        # pod-level ones are missing: stamped before they were recorded).
        if base.stamp is not None:
            try:
                pod, reread = await self._stamp_originals(pod, base.stamp)
            except ApiError as err:
                return await self._originals_not_recorded(pod, signature, plan, err)
            await self._stamped(pod, base)
            # The stamp changed the annotations the signature covers: a terminal decision
            # below must be keyed on the pod as it is now, or the watch event of our own
            # write looks like a new situation and the pod is decided (and reported) again.
            signature = situation(
                pod,
                node_type,
                self._c.config.generation,
                self._c.pod_level(node),
                mac_key_known(pod, self._c.keyring()),
            )
            if reread:  # otherwise the originals are the spec we planned from, written as read: same plan
                generation = self._c.config.generation
                plan = plan_resize(
                    pod,
                    resolve_policy(config, pod),
                    node_type,
                    self._c.options.resize_restart_containers,
                    self._c.pod_level(node),
                )
        if not plan.patch:
            return await self.applied(
                pod, node_type, plan, generation, *aligned(pod, plan, context, base.check.scope == "sized")
            )
        return await self._resize(pod, node, node_type, signature, plan, context, generation)

    async def _originals_and_applied(
        self,
        pod: Obj,
        node_type: str,
        signature: tuple[Any, ...],
        plan: ResizePlan,
        context: str,
        stamp: dict[str, str | None],
        generation: int,
        sized: bool = False,
    ) -> Result | None:
        """Already aligned: no resize will follow, so the originals and the record of what was
        applied go in one write, conditional on the resourceVersion the originals were read
        from (no step between them for a crash to fall into). A conflict (None) takes steps 1 and 3.
        ``sized``: the webhook created the pod at this size (``stamp`` binds its originals)."""
        reason, message = aligned(pod, plan, context, sized)
        try:
            return await self.applied(pod, node_type, plan, generation, reason, message, originals=stamp)
        except ApiError as err:
            if err.status != 409:
                return await self._originals_not_recorded(pod, signature, plan, err)
        return None

    async def _stamped(self, pod: Obj, base: Baseline) -> None:
        """Step 1 is written: say so if it replaced rejected originals."""
        if base.check.tampered:
            await self._reporter.report(
                pod,
                None,
                EventType.WARNING,
                Reason.ORIGINALS_REPLACED,
                f"original-* annotations rejected ({base.check.reason}); re-captured from the pod's unchanged spec",
            )
        self._c.fault(Step.ORIGINALS)

    async def _resize(
        self,
        pod: Obj,
        node: Obj,
        node_type: str,
        signature: tuple[Any, ...],
        plan: ResizePlan,
        context: str,
        generation: int,
    ) -> Result:
        """Step 2: the resize itself. Its outcome arrives through the pod watch (reconciler.follow)."""
        realigned = APPLIED_INSTANCE_TYPE in pod["metadata"]["annotations"]
        if realigned:
            await self._realign_limiter.take()  # --max-resizes-per-second
        async with self.holding.node_lock(pod):
            held = self._c.gate.preflight(pod, node, plan.patch)  # a resize that would be refused
            if held is not None and not self.holding.waited_enough(pod, held):
                return await self.holding.held(pod, plan, held)
            self._c.holds.release(pod_uid(pod))
            try:
                # Conditional on the pod as read: a deposed leader's resize still on the wire, or one
                # planned from a pod that changed meanwhile, is refused (409) instead of landing.
                resized = await self._c.writer.resize(pod, plan.patch, if_generation=pod["metadata"].get("generation"))
            except ApiError as err:
                if err.retryable:  # a 409 included: retried from the cache with backoff
                    raise
                return await self._rejected(pod, node, node_type, signature, plan, context, err)
            self._c.gate.sent(pod, plan.patch, resized["metadata"].get("generation") or 0)
        self._c.fault(Step.RESIZE)
        record = self._c.memory.of(pod_uid(pod))
        previous = record.flight
        record.flight = InFlight(
            node_type,
            resized["metadata"].get("generation") or 0,
            self._c.clock(),
            plan.summary(),
            "re-aligned" if realigned else "resized",
            config_generation=generation,
            originals=original_annotations(pod),
            before=sizes_before(pod, previous.before if previous is not None else ()),
        )
        self._c.memory.wait(pod_uid(pod), Stage.REQUESTED)
        return DONE

    async def _originals_not_recorded(
        self, pod: Obj, signature: tuple[Any, ...], plan: ResizePlan, err: ApiError
    ) -> Result:
        """Step 1's write failed: raised again when a retry may succeed, else reported once."""
        if err.retryable:
            raise err
        return await self._reporter.terminal(
            pod,
            signature,
            plan,
            EventType.WARNING,
            Reason.RESIZE_FAILED,
            f"cannot record the original resources ({err.message}); not resized",
        )

    async def applied(
        self,
        pod: Obj,
        node_type: str,
        plan: ResizePlan,
        generation: int,
        reason: Reason,
        message: str,
        originals: Mapping[str, str | None] | None = None,
    ) -> Result:
        """Step 3: record that the pod has its size for the node type, then report it.

        `generation` is the config version the plan was made with: no re-alignment check
        is due for it (else the watch event of this very write would re-plan the pod).
        With `originals` (step 1's annotations, for a pod that needs no resize) both go in
        one write, conditional on the pod's resourceVersion (409 when it changed)."""
        self._c.memory.of(pod_uid(pod)).realign_checked = generation
        signed = pod if originals is None else with_annotations(pod, originals)
        # The MAC binds the originals to this very pod (a webhook MAC verifies on look-alike siblings too).
        annotations: dict[str, str | None] = {
            **(originals or {}),
            APPLIED_INSTANCE_TYPE: node_type,
            APPLIED_AT: rfc3339(),
            APPLIED_SIZE: spec_size(pod),
            **binding(self._c, signed, node_type),
        }
        if RESIZE_STATE in pod["metadata"]["annotations"]:
            annotations[RESIZE_STATE] = None
        resource_version = pod["metadata"]["resourceVersion"] if originals is not None else None
        await self._record_applied(pod, node_type, annotations, resource_version)
        uid = pod_uid(pod)
        self._c.memory.of(uid).flight = None
        self._c.memory.wait(uid, None)
        self._c.fault(Step.APPLIED)
        await self._reporter.report(pod, plan, EventType.NORMAL, reason, message)
        return DONE

    async def _record_applied(
        self, pod: Obj, node_type: str, annotations: dict[str, str | None], resource_version: str | None
    ) -> None:
        # Finished before the write: the watch event of the write may be observed while we wait
        # for the reply, and observe() forgets the entry once the cache shows it (set after, it
        # would outlive that event and hide a later removal of applied-* from needs_work).
        record = self._c.memory.of(pod_uid(pod))
        before, record.finished = record.finished, node_type
        try:
            await self._c.writer.record(pod, annotations, resource_version=resource_version)
        except BaseException:
            record.finished = before
            raise

    async def record(self, pod: Obj, state: ResizeState, resource_version: str | None = None) -> str:
        """Write the resize-state annotation (with `resource_version`, conditional on it); returns
        the pod's resourceVersion after the write (a revert that follows is conditional on it).

        The state itself vouches for nothing (anyone who can write annotations can forge it): the
        same write binds the originals our resize was planned from to the pod, so that a restarted
        reconciler still trusts them."""
        written = await self._c.writer.annotate(
            pod,
            {RESIZE_STATE: state.encode(), **binding(self._c, pod, state.node_type)},
            resource_version=resource_version,
        )
        if state.state in (Stage.INFEASIBLE, Stage.ERROR):  # parked at this size (see needs_work)
            self._c.memory.of(pod_uid(pod)).parked = parked_at(pod, self._c.config.generation, state.size)
        self._c.fault(Step.STATE)
        return str(written["metadata"]["resourceVersion"])

    async def _stamp_originals(self, pod: Obj, stamp: dict[str, str | None]) -> tuple[Obj, bool]:
        """Merge-patch the originals captured from the spec, conditional on the resourceVersion we
        read (they describe exactly that spec). On a conflict the pod is read again once and the
        originals decided again from it: stamped meanwhile (and trusted) means nothing to write.
        Returns the pod as written and whether it was read again (so its spec may differ from
        the one planned from)."""
        for attempt in range(2):
            try:
                written = await self._c.writer.annotate(pod, stamp, resource_version=pod["metadata"]["resourceVersion"])
                return written, attempt > 0
            except ApiError as err:
                if err.status != 409 or attempt == 1:
                    raise
            pod = await self._c.writer.get(pod)
            again = baseline(pod, self._c.keyring())
            if again.check.trust is Trust.TRUSTED and again.stamp is None:
                return pod, True
            if again.stamp is None:  # refused or trusted only if aligned: decide again from scratch
                raise ApiError(
                    409, {"reason": "Conflict", "message": "the pod changed while its originals were recorded"}
                )
            stamp = again.stamp
        raise AssertionError("unreachable")

    async def resign(self, pod: Obj) -> Result:
        """An aligned pod signed with an older key (rotation): re-sign its verified originals with the newest."""
        keyring = self._c.keyring()
        if self._c.options.dry_run or not needs_resign(pod, keyring):
            return DONE
        try:
            trusted = baseline(pod, keyring).check.trust is Trust.TRUSTED
        except ResizerError:
            return DONE
        if trusted:
            await self._c.writer.record(pod, pod_mac(pod, keyring), resource_version=pod["metadata"]["resourceVersion"])
        return DONE

    async def _rejected(
        self,
        pod: Obj,
        node: Obj,
        node_type: str,
        signature: tuple[Any, ...],
        plan: ResizePlan,
        context: str,
        err: ApiError,
    ) -> Result:
        """The apiserver refused step 2."""
        if err.status == 404:
            return DONE  # deleted meanwhile: nothing to report; the watch's DELETED event cleans up
        if UNSUPPORTED_MESSAGE in err.message:
            # A soft skip: the node's kubelet does not advertise in-place resize.
            # Tried again when the pod's status changes (see status_fingerprint).
            return await self._reporter.terminal(
                pod,
                signature,
                plan,
                EventType.WARNING,
                Reason.RESIZE_UNSUPPORTED,
                f"node {pod['spec']['nodeName']} does not support in-place resize; "
                f"wanted for {context}: {plan.summary()}",
            )
        if plan.patch.get("spec", {}).get("resources") and POD_LEVEL_REFUSED in err.message:
            if GATE_OFF in err.message:
                # The apiserver's gate is off (cluster-wide): learnt once, pods with pod-level
                # resources are left alone for the rest of this process's life.
                self._c.memory.pod_level_refused = err.message
                signature = situation(
                    pod,
                    node_type,
                    self._c.config.generation,
                    self._c.pod_level(node),
                    mac_key_known(pod, self._c.keyring()),
                )
            return await self._reporter.terminal(
                pod,
                signature,
                plan,
                EventType.WARNING,
                Reason.POD_LEVEL_RESOURCES,
                f"not resized for {context}: the apiserver cannot resize pod-level "
                f"resources ({err.message}); pods that set spec.resources are "
                f"left alone",
            )
        if NODE_CAPACITY in err.causes:
            return await self._refused_capacity(pod, node, node_type, plan, context, err)
        return await self._reporter.terminal(
            pod,
            signature,
            plan,
            EventType.WARNING,
            Reason.RESIZE_FAILED,
            f"apiserver rejected the resize for {context}: {err.message}",
        )

    async def _refused_capacity(
        self, pod: Obj, node: Obj, node_type: str, plan: ResizePlan, context: str, err: ApiError
    ) -> Result:
        """The apiserver (1.36+) refuses what the kubelet would mark Infeasible: same policy,
        nothing to set back."""
        self._c.memory.wait(pod_uid(pod), Stage.INFEASIBLE)
        await self.record(
            pod,
            ResizeState(
                Stage.INFEASIBLE,
                node_type,
                pod["metadata"].get("generation"),
                size_fingerprint(plan),
                allocatable_fingerprint(node),
            ),
        )
        metrics.RESIZE_OUTCOMES.labels("infeasible").inc()
        await self._reporter.report(
            pod,
            plan,
            EventType.WARNING,
            Reason.RESIZE_INFEASIBLE,
            f"node {pod['spec']['nodeName']} cannot fit the new size ({err.message}); not "
            f"tried again until the node's type or allocatable or the planned size changes; "
            f"wanted for {context}: {plan.summary()}",
        )
        return DONE
