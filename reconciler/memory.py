"""What the pod resizer's parts share: the per-process memory of pods, their context, the result of a pass."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler import metrics
from reconciler.gates import Gate, HoldMemory, OpenGate
from reconciler.outcome import ResizeState, Stage
from reconciler.ports import ConfigView, FaultHook, Obj, PodWriter
from reconciler.revert import Size
from reconciler.settings import ControllerSettings
from resizer import APPLIED_INSTANCE_TYPE, RESIZE_STATE, KeyRing, node_resizes_pod_level


class Step:
    """Names of the write steps, as passed to the fault hook."""

    ORIGINALS = "originals"
    RESIZE = "resize"
    APPLIED = "applied"
    STATE = "state"  # the resize-state annotation of a stalled resize
    REVERT = "revert"  # the spec set back to what the containers actually have


@dataclass(frozen=True)
class Result:
    requeue_after: float | None = None


DONE = Result()


@dataclass
class InFlight:
    """A resize this process requested and has not seen end yet (memory only)."""

    node_type: str
    generation: int
    requested_at: float | None  # wall clock; None: requested by an earlier process, time unknown
    summary: str
    verb: str = "resized"  # "re-aligned" for a pod sized before, under another config
    error_checks: int = 0
    next_error_check: float = 0.0
    config_generation: int | None = None  # the config version it was planned with (None: unknown)
    # The original-* annotations verified and resized from (None: not known to be verified, e.g. a
    # failing resize first seen after a restart): the baseline authority trusts them while unchanged.
    originals: Mapping[str, str] | None = None
    # The sizes the spec held right before this resize and before any earlier one of ours the
    # kubelet never answered, newest first (empty: unknown, e.g. requested by an earlier process):
    # what a revert may set the spec back to (reconciler.revert).
    before: tuple[Size, ...] = ()


@dataclass
class Memory:
    """What this process remembers of pods (by uid), lost on restart by design: the pods'
    annotations are what a restarted process starts from."""

    # Resizes this process requested, until they end (actuated or recorded).
    in_flight: dict[str, InFlight] = field(default_factory=dict)
    # Generation our last revert produced: a cached pod older than that is not reverted again.
    reverted: dict[str, int] = field(default_factory=dict)
    # The waiting state of each pod whose resize has not ended (the RESIZES_WAITING gauge).
    waiting: dict[str, Stage] = field(default_factory=dict)
    # Terminal decisions that wrote nothing (UnknownNodeType, ResizeUnsupported,
    # ...): the same situation is not decided (and reported) twice.
    decided: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    # Pods we finished (uid -> node type) whose applied annotation the watch has
    # not delivered yet: a lagging cache must not cause a second pass.
    finished: dict[str, str] = field(default_factory=dict)
    # Re-alignment: the config version each sized pod was last re-planned for.
    realign_checked: dict[str, int] = field(default_factory=dict)
    # The apiserver's refusal of a pod-level resize (its InPlacePodLevelResourcesVerticalScaling
    # gate off): pods with spec.resources are left alone for the rest of this process's life.
    pod_level_refused: str | None = None

    def cache_behind(self, uid: str, generation: int, node_type: str, flight: InFlight | None) -> bool:
        """A cached pod at `generation` is older than our own last write to its spec."""
        if flight is not None and flight.node_type == node_type and generation < flight.generation:
            return True  # the cache has not caught up with our own resize yet
        # Nor with our own revert (e.g. the event of the state recorded before it).
        return generation < self.reverted.get(uid, 0)

    def wait(self, uid: str, stage: Stage | None) -> None:
        """Track the pod's waiting state for the gauge (None: not waiting)."""
        old = self.waiting.pop(uid, None) if stage is None else self.waiting.get(uid)
        if stage is not None:
            self.waiting[uid] = stage
        if old != stage:
            if old is not None:
                metrics.RESIZES_WAITING.labels(old.value).dec()
            if stage is not None:
                metrics.RESIZES_WAITING.labels(stage.value).inc()

    def observe(self, uid: str, annotations: Mapping[str, str]) -> None:
        """The pod's annotations as a watch event shows them."""
        if uid in self.finished and annotations.get(APPLIED_INSTANCE_TYPE) == self.finished[uid]:
            del self.finished[uid]
        if RESIZE_STATE in annotations and uid not in self.waiting:
            # After a restart: count the stalled resizes recorded on pods (the gauge).
            state = ResizeState.decode(annotations[RESIZE_STATE])
            if state is not None and state.state in (Stage.DEFERRED, Stage.INFEASIBLE, Stage.ERROR):
                self.wait(uid, state.state)

    def forget(self, uid: str) -> None:
        """The pod was deleted."""
        self.decided.pop(uid, None)
        self.finished.pop(uid, None)
        self.realign_checked.pop(uid, None)
        self.in_flight.pop(uid, None)
        self.reverted.pop(uid, None)
        self.wait(uid, None)


@dataclass
class Context:
    """What the parts of the pod resizer (decide, write, follow) work with. One instance, shared:
    the fault hook may be replaced while they run (tests crash a pass after a given step)."""

    writer: PodWriter
    config: ConfigView
    options: ControllerSettings
    fault: FaultHook
    clock: Callable[[], float]
    keyring: Callable[[], KeyRing]  # the originals MAC keys in force (they rotate)
    memory: Memory
    # What a pod passes before it is planned and before its resize is sent (reconciler.gates).
    gate: Gate = field(default_factory=OpenGate)
    holds: HoldMemory = field(default_factory=HoldMemory)

    def pod_level(self, node: Obj | None) -> bool:
        """Whether pods with pod-level resources are resized (at both levels) on `node` (None: a
        node that resized them before): the node declares the feature and the apiserver has not
        refused such a resize to this process."""
        return self.memory.pod_level_refused is None and (node is None or node_resizes_pod_level(node))
