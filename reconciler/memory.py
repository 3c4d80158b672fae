"""What the pod resizer's parts share: the per-process memory of pods, their context, the result of a pass."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from reconciler import metrics
from reconciler.gates import Gate, HoldMemory
from reconciler.outcome import Stage
from reconciler.ports import ConfigView, FaultHook, PodWriter
from reconciler.revert import Size
from reconciler.settings import ControllerSettings
from resizer import KeyRing
from resizer.podstate import PodState


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
class PodMemory:
    """What this process remembers of one pod, lost on restart by design: the pod's annotations
    are what a restarted process starts from."""

    # The resize this process requested, until it ends (actuated or recorded).
    flight: InFlight | None = None
    # The generation our pods/resize request on the wire was sent for: the kubelet may answer it
    # before the reply, and that answer's watch events must reach a pass (after this one, with `flight` set).
    resizing: int | None = None
    # Generation our last revert produced: a cached pod older than that is not reverted again.
    reverted: int = 0
    # The waiting state of a pod whose resize has not ended (the RESIZES_WAITING gauge).
    waiting: Stage | None = None
    # The last terminal decision that wrote nothing (UnknownNodeType, ResizeUnsupported, ...):
    # the same situation is not decided (and reported) twice.
    decided: tuple[Any, ...] | None = None
    # The node type we finished the pod for while the watch has not delivered its applied
    # annotation yet: a lagging cache must not cause a second pass.
    finished: str | None = None
    # Re-alignment: the config version the sized pod was last decided again for.
    realign_checked: int | None = None
    # What its parked size (recorded infeasible or failing) was judged under (reconciler.pods.parked_at).
    parked: tuple[Any, ...] | None = None
    # Since when the apiserver has refused the resize for a constraint the preflight let through,
    # and whether that has been reported (reconciler.act.REFUSAL_REPORTED_AFTER).
    refused_since: float | None = None
    refusal_reported: bool = False


NOTHING_REMEMBERED = PodMemory()


class Memory:
    """What this process remembers of pods: one PodMemory per uid, dropped when the pod is deleted."""

    def __init__(self) -> None:
        self._pods: dict[str, PodMemory] = {}
        # The apiserver's refusal of a pod-level resize (its InPlacePodLevelResourcesVerticalScaling
        # gate off): pods with spec.resources are left alone for the rest of this process's life.
        self.pod_level_refused: str | None = None

    def __contains__(self, uid: str) -> bool:
        return uid in self._pods

    def get(self, uid: str) -> PodMemory:
        """What is remembered of the pod (a shared empty record, not to be changed, if nothing)."""
        return self._pods.get(uid, NOTHING_REMEMBERED)

    def of(self, uid: str) -> PodMemory:
        """The pod's record, to change."""
        record = self._pods.get(uid)
        if record is None:
            record = self._pods[uid] = PodMemory()
        return record

    def wait(self, uid: str, stage: Stage | None) -> None:
        """Track the pod's waiting state for the gauge (None: not waiting)."""
        record = self._pods.get(uid) if stage is None else self.of(uid)
        if record is None or record.waiting == stage:
            return
        if record.waiting is not None:
            metrics.RESIZES_WAITING.labels(record.waiting.value).dec()
        if stage is not None:
            metrics.RESIZES_WAITING.labels(stage.value).inc()
        record.waiting = stage

    def observe(self, uid: str, state: PodState) -> None:
        """The pod's annotations as a watch event shows them."""
        record = self._pods.get(uid)
        if record is not None and record.finished is not None and state.applied.instance_type == record.finished:
            record.finished = None
        recorded = state.resize_state
        if recorded is not None and (record is None or record.waiting is None):
            # After a restart: count the stalled resizes recorded on pods (the gauge).
            if recorded.state in (Stage.DEFERRED, Stage.INFEASIBLE, Stage.ERROR):
                self.wait(uid, recorded.state)

    def forget(self, uid: str) -> None:
        self.wait(uid, None)
        self._pods.pop(uid, None)


def cache_behind(record: PodMemory, generation: int, node_type: str) -> bool:
    """A cached pod at `generation` is older than our own last write to its spec."""
    flight = record.flight
    if flight is not None and flight.node_type == node_type and generation < flight.generation:
        return True  # the cache has not caught up with our own resize yet
    # Nor with our own revert (e.g. the event of the state recorded before it).
    return generation < record.reverted


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
    gate: Gate = field(default_factory=Gate)
    holds: HoldMemory = field(default_factory=HoldMemory)
