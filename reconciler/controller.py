"""The pod resizer's reconcile(key): decide from the pure core what a pod needs, then have it
written (reconciler.writes, in the recovery-safe order its docstring gives) or followed to its
end (reconciler.follow). Reads and writes go only through the interfaces of reconciler.ports.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from kube.informer import object_key
from reconciler import gated
from reconciler.authority import vouched
from reconciler.follow import Follow
from reconciler.gates import VPA, Gate, OpenGate
from reconciler.memory import DONE, Context, InFlight, Memory, Result, Step, cache_behind
from reconciler.outcome import ResizeState, Stage, allocatable_fingerprint, observe, spec_size
from reconciler.pods import (
    live_and_bound,
    mac_key_known,
    pod_uid,
    recorded_state,
    resized_from_originals,
    situation,
    size_fingerprint,
    summary_from_originals,
)
from reconciler.ports import ConfigView, EventSink, FaultHook, Obj, PodReader, PodWriter, no_fault
from reconciler.reasons import EventType, Reason
from reconciler.report import Reporter, decision_record
from reconciler.settings import ControllerSettings
from reconciler.writes import Writes
from resizer import (
    APPLIED_INSTANCE_TYPE,
    APPLIED_SIZE,
    EMPTY_KEYRING,
    RESIZE_STATE,
    Baseline,
    KeyRing,
    OriginalsError,
    PlanError,
    QuantityError,
    ResizePlan,
    ResizerError,
    Trust,
    baseline,
    eligibility,
    original_annotations,
    plan_bound_pod,
    plan_resize,
    resolve_policy,
)
from resizer.realign import realignment

__all__ = [
    "DONE",
    "InFlight",
    "PodResizeReconciler",
    "Result",
    "Step",
    "decision_record",
    "live_and_bound",
    "situation",
]

log = logging.getLogger("reconciler.controller")


class PodResizeReconciler:
    """reconcile(namespace/name) of one pod, plus the predicate the manager filters events with."""

    def __init__(
        self,
        reader: PodReader,
        writer: PodWriter,
        events: EventSink,
        config: ConfigView,
        options: ControllerSettings,
        fault: FaultHook = no_fault,
        clock: Callable[[], float] = time.time,
        keyring: Callable[[], KeyRing] = lambda: EMPTY_KEYRING,
        gate: Gate | None = None,
    ) -> None:
        self._reader = reader
        self._config = config
        self._options = options
        self._memory = Memory()
        self._context = Context(writer, config, options, fault, clock, keyring, self._memory, gate or OpenGate())
        self._reporter = Reporter(events, self._memory, options)
        self._writes = Writes(self._context, self._reporter)
        self._follow = Follow(self._context, self._reporter, self._writes)

    @property
    def _fault(self) -> FaultHook:
        return self._context.fault

    @_fault.setter
    def _fault(self, fault: FaultHook) -> None:  # tests crash a pass after a given write step
        self._context.fault = fault

    # ------------------------------------------------------------------ what the manager asks

    def needs_binding(self, pod: Obj) -> bool:
        """Whether a watch event of an unbound `pod` is worth a pass: held by scheduling gates at
        generation 1, its originals not bound yet (reconciler.gated)."""
        return not self._options.dry_run and gated.wants_binding(pod, self._context.keyring())

    def needs_work(self, pod: Obj, node: Obj | None) -> bool:
        """Whether a watch event of `pod` (on `node`, None if not cached) is worth a reconcile."""
        if not live_and_bound(pod) or not eligibility(pod).eligible:
            return False
        if node is None:
            return True  # a node we have not seen yet: reconcile looks it up
        node_type = node["metadata"]["labels"].get(self._options.node_type_label)
        if node_type is None:
            return False  # untyped node: nothing to do until it is labelled
        flight = self._memory.get(pod_uid(pod)).flight
        if flight is not None and self._awaiting_kubelet(pod, node_type, flight):
            return False
        done = (pod["metadata"]["annotations"].get(APPLIED_INSTANCE_TYPE), self._memory.get(pod_uid(pod)).finished)
        if node_type in done:  # sized for this type: follow a re-alignment in flight, or check for one
            return (
                self._memory.get(pod_uid(pod)).flight is not None
                or self._needs_realignment(pod, node_type)
                or self._unreported_realignment(pod, node_type) is not None
            )
        return not self._parked(pod, node, node_type)

    def _awaiting_kubelet(self, pod: Obj, node_type: str, flight: InFlight) -> bool:
        """Our resize of this very spec, planned with the config in use, that the kubelet has
        not reported on yet: a reconcile would re-plan the same size and only wait. (Most
        watch events of a pod in flight are of this kind: our own writes, the start.)"""
        return (
            flight.node_type == node_type
            and flight.config_generation == self._config.generation
            and pod["metadata"].get("generation") == flight.generation
            and observe(pod).stage == Stage.REQUESTED
        )

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
                plan = plan_resize(
                    pod,
                    resolve_policy(config, pod),
                    node_type,
                    self._options.resize_restart_containers,
                    self._context.pod_level(node),
                )
            except ResizerError:
                return False
        return state.size == size_fingerprint(plan) and bool(plan.patch)

    def _needs_realignment(self, pod: Obj, node_type: str) -> bool:
        """A pod already sized is re-planned once per config version; queued only if that changes it."""
        config, generation = self._config.config, self._config.generation
        uid = pod_uid(pod)
        if not self._options.realign or config is None or self._memory.get(uid).realign_checked == generation:
            return False
        self._memory.of(uid).realign_checked = generation
        return (
            realignment(pod, config, node_type, self._options.resize_restart_containers, self._context.pod_level(None))
            is not None
        )

    def _unreported_realignment(self, pod: Obj, node_type: str) -> ResizePlan | None:
        """The plan, if the spec holds a re-alignment (the spec equals the plan) whose size is not
        the one recorded as applied: requested by an earlier process that died before it ended."""
        annotations = pod["metadata"]["annotations"]
        recorded = annotations.get(APPLIED_SIZE)
        config = self._config.config
        if (
            recorded is None
            or not self._options.realign
            or config is None
            or self._memory.get(pod_uid(pod)).finished is not None
            or annotations.get(APPLIED_INSTANCE_TYPE) != node_type
            or recorded == spec_size(pod)
        ):
            return None
        try:
            # Only originals bound to this pod (resizer.integrity): adopting the spec as our
            # re-alignment would otherwise sign originals nobody verified at step 3.
            if baseline(pod, self._context.keyring()).check.trust is not Trust.TRUSTED:
                return None
            plan = plan_resize(
                pod,
                resolve_policy(config, pod),
                node_type,
                self._options.resize_restart_containers,
                self._context.pod_level(None),
            )
        except ResizerError:
            return None
        return plan if plan.outcome == "AlreadyAligned" else None

    def _adopt(self, pod: Obj, plan: ResizePlan) -> None:
        """Follow an unreported re-alignment found on the pod as if this process had requested it."""
        log.info(
            "following a re-alignment requested before this reconciler started",
            extra={"pod": object_key(pod), "generation": pod["metadata"].get("generation")},
        )
        self._memory.of(pod_uid(pod)).flight = InFlight(
            plan.node_type,
            pod["metadata"].get("generation") or 0,
            None,
            summary_from_originals(plan),
            "re-aligned",
            originals=original_annotations(pod),
        )

    def observe(self, pod: Obj) -> None:
        """A watch event of `pod` arrived (before needs_work)."""
        self._memory.observe(pod_uid(pod), pod["metadata"]["annotations"])

    def forget(self, pod: Obj) -> None:
        """`pod` was deleted."""
        self._memory.forget(pod_uid(pod))
        self._context.holds.release(pod_uid(pod))

    async def reconcile(self, key: str) -> Result:
        pod = self._reader.pod(key)
        if pod is None or not pod["spec"].get("nodeName"):
            unbound = self._reader.unbound(key)
            if unbound is not None and self.needs_binding(unbound):
                return await gated.bind(self._context, unbound)
        if pod is None or not live_and_bound(pod) or not eligibility(pod).eligible:
            if pod is not None:
                self._memory.wait(pod_uid(pod), None)
            return DONE
        node, node_type = await self._node_type(key, pod)
        if not node_type:
            return DONE
        flight = self._memory.get(pod_uid(pod)).flight
        if flight is not None and self._awaiting_kubelet(pod, node_type, flight):
            return DONE  # queued before our resize (e.g. dirty while we wrote it): nothing to do yet
        if self._memory.get(pod_uid(pod)).flight is None:
            unreported = self._unreported_realignment(pod, node_type)
            if unreported is not None:
                self._adopt(pod, unreported)
        if self._sized(pod, node_type):
            self._memory.wait(pod_uid(pod), None)
            self._context.holds.release(pod_uid(pod))
            return await self._writes.resign(pod)
        if self._config.config is None:
            return Result(requeue_after=5.0)
        assert node is not None
        signature = situation(
            pod,
            node_type,
            self._config.generation,
            self._context.pod_level(node),
            mac_key_known(pod, self._context.keyring()),
        )
        if self._memory.get(pod_uid(pod)).decided == signature:
            return DONE
        return await self._decide(pod, node, node_type, signature)

    async def _node_type(self, key: str, pod: Obj) -> tuple[Obj | None, str | None]:
        """The pod's node and its type label (None: not labelled, or no such node)."""
        node_name = pod["spec"]["nodeName"]
        node = await self._reader.node(node_name)
        label = self._options.node_type_label
        node_type = node["metadata"]["labels"].get(label) if node is not None else None
        if not node_type:
            log.debug(
                "node has no type label; skipping",
                extra={"pod": key, "node": node_name, "nodeExists": node is not None, "label": label},
            )
        return node, node_type

    def _sized(self, pod: Obj, node_type: str) -> bool:
        """Sized for this node type, with no re-alignment in flight nor due under the config in use."""
        uid, config = pod_uid(pod), self._config.config
        if node_type not in (pod["metadata"]["annotations"].get(APPLIED_INSTANCE_TYPE), self._memory.get(uid).finished):
            return False
        if self._memory.get(uid).flight is not None:  # a re-alignment being followed to actuation
            return False
        return (
            not self._options.realign
            or config is None
            or realignment(
                pod, config, node_type, self._options.resize_restart_containers, self._context.pod_level(None)
            )
            is None
        )

    async def _decide(self, pod: Obj, node: Obj, node_type: str, signature: tuple[Any, ...]) -> Result:
        flight = self._memory.get(pod_uid(pod)).flight
        if cache_behind(self._memory.get(pod_uid(pod)), pod["metadata"].get("generation") or 0, node_type):
            return DONE
        held = self._context.gate.admit(pod)  # left to another controller (an updating VPA)
        if held is not None:
            return await self._writes.holding.held(pod, None, held)
        self._context.holds.release(pod_uid(pod), VPA)
        generation = self._config.generation  # the config version the plan below is made with
        planned = await self._plan(pod, node, node_type, signature)
        if isinstance(planned, Result):
            return planned
        base, plan = planned
        context = f"node type {node_type} (baseline {plan.baseline_node_type}, rule {plan.rule})"
        refused = await self._refused(pod, node, node_type, signature, base, plan, context)
        if refused is not None:
            return refused
        if plan.patch:
            if self._parked(pod, node, node_type, plan):
                return DONE
            return await self._writes.write(pod, node, node_type, signature, plan, context, base, generation)
        if base.check.scope == "sized" and base.stamp is not None and not plan.patch:
            # Created at its size by the webhook: bind its originals, record it applied, report it (one write).
            return await self._writes.write(pod, node, node_type, signature, plan, context, base, generation)
        if flight is None and not resized_from_originals(plan) and recorded_state(pod, node_type) is None:
            # Aligned and never resized: only the originals and the record of what was applied to write.
            return await self._writes.write(pod, node, node_type, signature, plan, context, base, generation)
        return await self._follow.follow(pod, node, node_type, plan, context, generation, base)

    async def _plan(
        self, pod: Obj, node: Obj, node_type: str, signature: tuple[Any, ...]
    ) -> tuple[Baseline, ResizePlan] | Result:
        """The pod's verified baseline and its plan for the node type, or the terminal decision
        (reported once) when there is none."""
        config = self._config.config
        assert config is not None
        try:
            # Whose originals these are (resizer.integrity): trusted, re-captured from the spec, or refused.
            base = baseline(pod, self._context.keyring(), vouched=vouched(self._memory, pod, node_type))
            if base.check.trust is Trust.REFUSE:
                return await self._reporter.terminal(
                    pod,
                    signature,
                    None,
                    EventType.WARNING,
                    Reason.ORIGINALS_UNVERIFIED,
                    f"not resized: {base.check.reason}",
                )
            return base, plan_bound_pod(
                base.pod,
                resolve_policy(config, pod),
                node_type,
                self._options.resize_restart_containers,
                self._context.pod_level(node),
                base.check.scope == "sized",
            )
        except (OriginalsError, QuantityError) as err:
            return await self._reporter.terminal(
                pod,
                signature,
                None,
                EventType.WARNING,
                Reason.RESIZE_FAILED,
                f"cannot read the pod's original resources: {err}",
            )
        except PlanError as err:  # reported once, like a corrupt original: a retry cannot help
            return await self._reporter.terminal(
                pod, signature, None, EventType.WARNING, Reason.RESIZE_FAILED, f"cannot size the pod: {err}"
            )

    async def _refused(
        self,
        pod: Obj,
        node: Obj,
        node_type: str,
        signature: tuple[Any, ...],
        base: Baseline,
        plan: ResizePlan,
        context: str,
    ) -> Result | None:
        """The terminal decision (reported once) for a plan that is not to be written, else None."""
        terminal = self._reporter.terminal
        if base.check.trust is Trust.TRUSTED_IF_ALIGNED and plan.patch:
            return await terminal(
                pod,
                signature,
                plan,
                EventType.WARNING,
                Reason.ORIGINALS_UNVERIFIED,
                f"not resized: {base.check.reason}, and the pod is not aligned with them: {plan.summary()}",
            )
        if plan.outcome == "UnknownNodeType":
            return await terminal(
                pod,
                signature,
                plan,
                EventType.WARNING,
                Reason.UNKNOWN_NODE_TYPE,
                f"node type {node_type!r} of node {pod['spec']['nodeName']} is not in "
                f"the config's nodeTypes (rule {plan.rule}); pod left unchanged",
            )
        if plan.outcome == "PodLevelResources":
            refused = self._memory.pod_level_refused
            why = f" (the apiserver refused such a resize: {refused})" if refused is not None else ""
            return await terminal(
                pod,
                signature,
                plan,
                EventType.WARNING,
                Reason.POD_LEVEL_RESOURCES,
                f"not resized for {context}: {plan.summary()}{why}",
            )
        if plan.outcome == "QoSChange":
            return await terminal(
                pod,
                signature,
                plan,
                EventType.WARNING,
                Reason.RESIZE_FAILED,
                f"not resized for {context}: {plan.summary()}",
            )
        if self._options.dry_run:
            reason = Reason.WOULD_RESIZE if plan.patch else Reason.ALREADY_ALIGNED
            hold = self._context.gate.would_hold(pod, node, plan.patch) if plan.patch else None
            held = f"; it would be held ({hold})" if hold is not None else ""
            return await terminal(
                pod, signature, plan, EventType.NORMAL, reason, f"dry run, {context}: {plan.summary()}{held}"
            )
        return None
