"""One pass's decision for a pod: `decide(pod, node, world, memory) -> Action`.

Pure: it writes nothing and changes no memory; it reads the pod as observed, its node, the
config in use, what the process remembers of the pod (reconciler.memory.PodMemory) and the
gate's read-only verdicts. The baseline (resizer.integrity.baseline) and the plan are computed
once and carried in the action, which reconciler.act executes in the recovery-safe order.
The actions are a closed set: Nothing, NotEligible, Untyped, Adopt, Resign, Hold, Report,
Parked, Resize, RecordApplied, Follow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar

from ops.timestamps import rfc3339
from reconciler.gates import Gate, Held
from reconciler.memory import Context, InFlight, PodMemory, cache_behind
from reconciler.outcome import (
    SPEC_SIZE_CHARS,
    Observation,
    ResizeState,
    Stage,
    allocatable_fingerprint,
    observe,
    spec_size,
)
from reconciler.pods import (
    has_originals,
    mac_key_known,
    parked_at,
    recorded_state,
    resized_from_originals,
    situation,
    size_fingerprint,
    summary_from_originals,
)
from reconciler.ports import Obj
from reconciler.reasons import EventType, Reason
from reconciler.settings import ControllerSettings
from resizer import (
    Baseline,
    CompiledConfig,
    KeyRing,
    OriginalsError,
    PlanError,
    Policy,
    QuantityError,
    ResizePlan,
    ResizerError,
    Trust,
    baseline,
    eligibility,
    fits_annotation_limit,
    needs_resign,
    node_resizes_pod_level,
    plan_bound_pod,
    plan_resize,
    pod_mac,
    pod_mac_stand_in,
    resolve_policy,
)
from resizer.eligibility import is_live_and_bound
from resizer.podstate import PodState, applied_patch, read_state

CONFIG_RETRY = 5.0  # seconds: no valid config read yet


@dataclass(frozen=True)
class World:
    """What a decision reads besides the pod, its node and its memory."""

    config: CompiledConfig | None
    config_generation: int  # bumped on each config change
    options: ControllerSettings
    keyring: KeyRing  # the originals MAC keys in force
    pod_level_refused: str | None  # the apiserver's refusal of a pod-level resize, once learnt
    gate: Gate  # asked only what it would hold (admit, would_hold), never told anything

    @classmethod
    def of(cls, context: Context) -> World:
        config, memory = context.config, context.memory
        return cls(
            config.config, config.generation, context.options, context.keyring(), memory.pod_level_refused, context.gate
        )

    def pod_level(self, node: Obj | None) -> bool:
        """Whether pods with pod-level resources are resized on `node` (None: a node that resized
        them before): the node declares the feature and the apiserver has not refused it."""
        return self.pod_level_refused is None and (node is None or node_resizes_pod_level(node))

    def situation(self, pod: Obj, state: PodState, node_type: str, node: Obj) -> tuple[Any, ...]:
        key_known = mac_key_known(state, self.keyring)
        return situation(pod, state, node_type, self.config_generation, self.pod_level(node), key_known)


@dataclass(frozen=True)
class Planned:
    """What every decision past the gate knows about the pass."""

    node: Obj
    node_type: str
    state: PodState  # the pod's annotations, read once
    signature: tuple[Any, ...]  # the situation a terminal decision is not taken twice in
    generation: int  # the config version the plan was made with
    base: Baseline
    plan: ResizePlan

    @property
    def context(self) -> str:
        plan = self.plan
        return f"node type {self.node_type} (baseline {plan.baseline_node_type}, rule {plan.rule})"

    def refused(self, reason: Reason, message: str) -> Report:
        """The plan is not written: a Warning, reported once in this situation."""
        return Report(self.signature, self.plan, EventType.WARNING, reason, message)


class Action:
    """A decision; `past_gate`: the pod passed the gate (a VPA hold is released)."""

    past_gate: ClassVar[bool] = False


@dataclass(frozen=True)
class Nothing(Action):
    """Nothing to do in this pass (come back after `requeue_after`, if given)."""

    requeue_after: float | None = None


@dataclass(frozen=True)
class NotEligible(Action):
    """Not a pod to size (gone, unbound, finished, out of scope): it waits for nothing."""


@dataclass(frozen=True)
class Untyped(Action):
    """Its node has no type label (or does not exist): nothing to do until it does."""

    node_name: str
    node_exists: bool


@dataclass(frozen=True)
class Adopt(Action):
    """Follow a re-alignment an earlier process requested as if this one had (`flight`), then `then`."""

    flight: InFlight
    then: Action


@dataclass(frozen=True)
class Resign(Action):
    """Sized for its node type, nothing due under config version `generation`: re-sign its
    originals with `mac` (a key rotated), if given."""

    generation: int
    mac: Mapping[str, str] | None = None


@dataclass(frozen=True)
class Hold(Action):
    """Left to another controller (an updating VPA) before it is planned: reported once per hold."""

    held: Held


@dataclass(frozen=True)
class Report(Action):
    """A terminal decision that writes nothing to the pod: reported once per situation."""

    past_gate: ClassVar[bool] = True
    signature: tuple[Any, ...]
    plan: ResizePlan | None
    event_type: EventType
    reason: Reason
    message: str


@dataclass(frozen=True)
class Parked(Action):
    """A size recorded infeasible or failing, not tried again while node and plan stay the same;
    `at` is what it was judged under (reconciler.pods.parked_at)."""

    past_gate: ClassVar[bool] = True
    at: tuple[Any, ...]


@dataclass(frozen=True)
class Resize(Action):
    """Step 1 (the originals in `planned.base.stamp`, if any), then step 2: the pods/resize patch."""

    past_gate: ClassVar[bool] = True
    planned: Planned


@dataclass(frozen=True)
class RecordApplied(Action):
    """No resize to send: record the originals (if any) and what is applied in one write, then report."""

    past_gate: ClassVar[bool] = True
    planned: Planned
    reason: Reason
    message: str


@dataclass(frozen=True)
class Follow(Action):
    """The spec holds the plan: act on what the kubelet reports about it (`observation`)."""

    past_gate: ClassVar[bool] = True
    planned: Planned
    observation: Observation


NOTHING = Nothing()


def decide(pod: Obj, node: Obj | None, world: World, memory: PodMemory, state: PodState | None = None) -> Action:
    """The one decision of a pass for `pod` as observed on `node` (None: no such node); `state`:
    its annotations as read_state(pod) reads them, if the caller has read them already."""
    if not is_live_and_bound(pod):
        return NotEligible()
    state = state or read_state(pod)
    if not eligibility(pod, state).eligible:
        return NotEligible()
    node_type = node_type_of(node, world.options)
    if node is None or not node_type:
        return Untyped(pod["spec"]["nodeName"], node is not None)
    flight = memory.flight
    if flight is not None and awaiting_kubelet(pod, node_type, flight, world.config_generation):
        return NOTHING  # queued before our resize (e.g. dirty while we wrote it): nothing to do yet
    planner = Planner(pod, state, node_type, world)
    if flight is None:
        unreported = _unreported_realignment(pod, state, node_type, world, memory, planner)
        if unreported is not None:  # followed as if this process had requested it
            generation = pod["metadata"].get("generation") or 0
            summary, originals = summary_from_originals(unreported), dict(state.originals)
            adopted = InFlight(unreported.node_type, generation, None, summary, "re-aligned", originals=originals)
            return Adopt(adopted, _decide(pod, state, node, node_type, world, replace(memory, flight=adopted), planner))
    return _decide(pod, state, node, node_type, world, memory, planner)


def node_type_of(node: Obj | None, options: ControllerSettings) -> str | None:
    return node["metadata"]["labels"].get(options.node_type_label) if node is not None else None


def awaiting_kubelet(pod: Obj, node_type: str, flight: InFlight, config_generation: int) -> bool:
    """Our resize of this very spec, planned with the config in use, that the kubelet has not reported
    on yet: a pass would re-plan the same size and only wait (most watch events of a pod in flight)."""
    return (
        flight.node_type == node_type
        and flight.config_generation == config_generation
        and pod["metadata"].get("generation") == flight.generation
        and observe(pod).stage == Stage.REQUESTED
    )


class Planner:
    """The plans of one decision: each pod to plan from, at each pod level, planned at most once."""

    def __init__(self, pod: Obj, state: PodState, node_type: str, world: World) -> None:
        self._pod = pod
        self._state = state
        self._node_type = node_type
        self._world = world
        self._plans: dict[tuple[int, bool], ResizePlan] = {}

    def plan(self, planned_from: Mapping[str, Any], pod_level: bool) -> ResizePlan:
        """plan_resize of `planned_from` (the pod, or the baseline authority's view of it); raises ResizerError."""
        # Only a pod with pod-level resources is planned differently at each pod level.
        key = (id(planned_from), pod_level and bool(planned_from["spec"].get("resources")))
        plan = self._plans.get(key)
        if plan is None:
            policy, restart = self._policy()
            plan = self._plans[key] = plan_resize(planned_from, policy, self._node_type, restart, pod_level)
        return plan

    def planned(self, node: Obj, signature: tuple[Any, ...], memory: PodMemory) -> Planned | Report:
        """The pod's verified baseline and its plan for the node type on `node` (for a pod sized at
        admission, resizer.pinning.plan_bound_pod), or the terminal decision when there is none."""
        pod, world = self._pod, self._world
        try:
            # Whose originals these are (resizer.integrity): trusted, re-captured from the spec, or refused.
            base = baseline(pod, world.keyring, vouched=vouched(memory, pod, self._node_type))
            if base.check.trust is Trust.REFUSE:
                return _unplanned(signature, Reason.ORIGINALS_UNVERIFIED, f"not resized: {base.check.reason}")
            if base.check.scope == "sized":
                policy, restart = self._policy()
                plan = plan_bound_pod(base.pod, policy, self._node_type, restart, world.pod_level(node), True)
            else:
                plan = self.plan(base.pod, world.pod_level(node))
        except (OriginalsError, QuantityError) as err:
            return _unplanned(signature, Reason.RESIZE_FAILED, f"cannot read the pod's original resources: {err}")
        except PlanError as err:  # reported once, like a corrupt original: a retry cannot help
            return _unplanned(signature, Reason.RESIZE_FAILED, f"cannot size the pod: {err}")
        return Planned(node, self._node_type, self._state, signature, world.config_generation, base, plan)

    def _policy(self) -> tuple[Policy, bool]:
        config = self._world.config
        assert config is not None
        return resolve_policy(config, self._pod), self._world.options.resize_restart_containers

    def realignment(self) -> ResizePlan | None:
        """The pod's plan if the config now wants it different, planned again from its originals
        (never from its spec, so re-alignment never compounds); None when nothing would change."""
        if self._state.applied.instance_type != self._node_type or not has_originals(self._pod):
            return None
        try:
            plan = self.plan(self._pod, self._world.pod_level(None))
        except ResizerError:
            return None
        return plan if plan.outcome == "Resize" and plan.patch else None


def _unreported_realignment(
    pod: Obj, state: PodState, node_type: str, world: World, memory: PodMemory, planner: Planner
) -> ResizePlan | None:
    """The plan, if the spec holds a re-alignment (the spec equals the plan) whose size is not
    the one recorded as applied: requested by an earlier process that died before it ended."""
    recorded = state.applied.size
    if (
        recorded is None
        or not world.options.realign
        or world.config is None
        or memory.finished is not None
        or state.applied.instance_type != node_type
        or recorded == spec_size(pod)
    ):
        return None
    try:
        # Only originals bound to this pod (resizer.integrity): adopting the spec as our
        # re-alignment would otherwise sign originals nobody verified at step 3.
        if baseline(pod, world.keyring).check.trust is not Trust.TRUSTED:
            return None
        plan = planner.plan(pod, world.pod_level(None))
    except ResizerError:
        return None
    return plan if plan.outcome == "AlreadyAligned" else None


def _decide(
    pod: Obj, state: PodState, node: Obj, node_type: str, world: World, memory: PodMemory, planner: Planner
) -> Action:
    if _sized(state, node_type, world, memory, planner):
        return Resign(world.config_generation, _resigned(pod, world))
    if world.config is None:
        return Nothing(requeue_after=CONFIG_RETRY)
    signature = world.situation(pod, state, node_type, node)
    if memory.decided == signature or cache_behind(memory, pod["metadata"].get("generation") or 0, node_type):
        return NOTHING
    held = world.gate.admit(pod)  # left to another controller (an updating VPA)
    if held is not None:
        return Hold(held)
    planned = planner.planned(node, signature, memory)
    if isinstance(planned, Report):
        return planned
    refused = _refused(pod, planned, world)
    if refused is not None:
        return refused
    base, plan = planned.base, planned.plan
    if plan.patch:
        recorded = recorded_state(state, node_type)
        if _parked(recorded, node, plan):
            return Parked(parked_at(pod, state, planned.generation, recorded.size if recorded is not None else None))
        return _fitting(pod, planned, world) or Resize(planned)
    sized = base.check.scope == "sized"
    if (sized and base.stamp is not None) or (
        # Aligned and never resized: only the originals and the record of what was applied to write.
        memory.flight is None and not resized_from_originals(plan) and recorded_state(state, node_type) is None
    ):
        reason, message = aligned(state, plan, planned.context, sized)
        return _fitting(pod, planned, world) or RecordApplied(planned, reason, message)
    return Follow(planned, observe(pod))


def _sized(state: PodState, node_type: str, world: World, memory: PodMemory, planner: Planner) -> bool:
    """Sized for this node type, with no re-alignment in flight nor due under the config in use."""
    if node_type not in (state.applied.instance_type, memory.finished) or memory.flight is not None:
        return False  # (a flight: a re-alignment being followed to actuation)
    return not world.options.realign or world.config is None or planner.realignment() is None


def _resigned(pod: Obj, world: World) -> Mapping[str, str] | None:
    """An aligned pod signed with an older key (rotation): its verified originals signed with the newest."""
    if world.options.dry_run or not needs_resign(pod, world.keyring):
        return None
    try:
        trusted = baseline(pod, world.keyring).check.trust is Trust.TRUSTED
    except ResizerError:
        return None
    return pod_mac(pod, world.keyring) if trusted else None


def vouched(memory: PodMemory, pod: Obj, node_type: str) -> Mapping[str, str] | None:
    """The originals this process verified and resized the pod from, while the spec holds that resize:
    in flight for this node type, or for any with no spec change since (the node may have been
    relabelled before the kubelet actuated it). Trusted while the pod carries exactly those."""
    flight = memory.flight
    if flight is not None and (flight.node_type == node_type or flight.generation == pod["metadata"].get("generation")):
        return flight.originals
    return None


def _unplanned(signature: tuple[Any, ...], reason: Reason, message: str) -> Report:
    return Report(signature, None, EventType.WARNING, reason, message)


def _refused(pod: Obj, planned: Planned, world: World) -> Report | None:
    """The terminal decision for a plan that is not to be written, else None."""
    base, plan, context = planned.base, planned.plan, planned.context
    if base.check.trust is Trust.TRUSTED_IF_ALIGNED and plan.patch:
        return planned.refused(
            Reason.ORIGINALS_UNVERIFIED,
            f"not resized: {base.check.reason}, and the pod is not aligned with them: {plan.summary()}",
        )
    if plan.outcome == "UnknownNodeType":
        return planned.refused(
            Reason.UNKNOWN_NODE_TYPE,
            f"node type {planned.node_type!r} of node {pod['spec']['nodeName']} is not in "
            f"the config's nodeTypes (rule {plan.rule}); pod left unchanged",
        )
    if plan.outcome == "PodLevelResources":
        refused = world.pod_level_refused
        why = f" (the apiserver refused such a resize: {refused})" if refused is not None else ""
        return planned.refused(Reason.POD_LEVEL_RESOURCES, f"not resized for {context}: {plan.summary()}{why}")
    if plan.outcome == "QoSChange":
        return planned.refused(Reason.RESIZE_FAILED, f"not resized for {context}: {plan.summary()}")
    if world.options.dry_run:
        reason = Reason.WOULD_RESIZE if plan.patch else Reason.ALREADY_ALIGNED
        hold = world.gate.would_hold(pod, planned.node, plan.patch) if plan.patch else None
        held = f"; it would be held ({hold})" if hold is not None else ""
        message = f"dry run, {context}: {plan.summary()}{held}"
        return Report(planned.signature, plan, EventType.NORMAL, reason, message)
    return None


def _parked(state: ResizeState | None, node: Obj, plan: ResizePlan) -> bool:
    """A recorded infeasible/failed size not to be tried again on this node, or a node unable to resize."""
    if state is None:
        return False
    if state.state == Stage.UNSUPPORTED:
        return True
    if state.state not in (Stage.INFEASIBLE, Stage.ERROR) or state.allocatable != allocatable_fingerprint(node):
        return False
    return state.size == size_fingerprint(plan) and bool(plan.patch)


def _fitting(pod: Obj, planned: Planned, world: World) -> Report | None:
    """Everything steps 1 and 3 leave on the pod must fit, or the resize would never be recorded
    (reported once, not resized). The MAC and the size digest are stand-ins: only their length counts."""
    final = {
        **planned.state.originals,
        **(planned.base.stamp or {}),
        **pod_mac_stand_in(world.keyring),
        **applied_patch(planned.node_type, rfc3339(), "-" * SPEC_SIZE_CHARS),
    }
    if fits_annotation_limit(pod["metadata"]["annotations"], {k: v for k, v in final.items() if v is not None}):
        return None
    return planned.refused(
        Reason.RESIZE_FAILED,
        "the original resources and what was applied do not fit in the pod's annotations (256 KiB limit), "
        "so they cannot be recorded; not resized",
    )


def aligned(state: PodState, plan: ResizePlan, context: str, sized: bool) -> tuple[Reason, str]:
    """The report of a pod that needs no resize; `sized`: the webhook created it at this size."""
    if not sized:
        return Reason.ALREADY_ALIGNED, f"already aligned for {context}" + (
            f": {plan.summary()}" if plan.changes else ""
        )
    return Reason.SIZED_AT_ADMISSION, (
        f"created at its size for {context} (the webhook knew the node type "
        f"{state.sized_at_admission!r} at admission): {summary_from_originals(plan)}"
    )
