"""The pod resizer's reconcile(key): read the pod and its node, decide (reconciler.decide, pure),
act (reconciler.act: the writes in the recovery-safe order its docstring gives, then the reports),
reading and writing only through the interfaces of reconciler.ports."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from reconciler import gated, metrics
from reconciler.act import Act
from reconciler.decide import World, awaiting_kubelet, decide, node_type_of
from reconciler.gates import Gate
from reconciler.memory import DONE, Context, Memory, PodMemory, Result, cache_behind
from reconciler.outcome import Stage, allocatable_fingerprint, observe
from reconciler.pods import has_originals, parked_at, pod_uid, recorded_state
from reconciler.ports import ConfigView, EventSink, FaultHook, Obj, PodReader, PodWriter, no_fault
from reconciler.settings import ControllerSettings
from resizer import EMPTY_KEYRING, KeyRing, eligibility
from resizer.eligibility import is_live_and_bound
from resizer.podstate import PodState, read_state

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
        self._context = Context(writer, config, options, fault, clock, keyring, self._memory, gate or Gate())
        self._act = Act(self._context, events)
        self._last_read: tuple[Obj, PodState] | None = None

    # ------------------------------------------------------------------ what the manager asks

    def needs_binding(self, pod: Obj) -> bool:
        """Whether a watch event of an unbound `pod` is worth a pass (reconciler.gated.wants_binding)."""
        return not self._options.dry_run and gated.wants_binding(pod, self._context.keyring())

    def needs_work(self, pod: Obj, node: Obj | None) -> bool:
        """Whether a watch event of `pod` (on `node`, None if not cached) is worth a reconcile.
        Never plans: what only a plan can tell is left to the pass (reconciler.decide)."""
        if not is_live_and_bound(pod):
            return False
        state = self._read(pod)
        if not eligibility(pod, state).eligible:
            return False
        if node is None:
            return True  # a node we have not seen yet: reconcile looks it up
        node_type = node_type_of(node, self._options)
        if node_type is None:
            return False  # untyped node: nothing to do until it is labelled
        uid = pod_uid(pod)
        memory = self._memory.get(uid)
        if memory.resizing is not None:
            # Our resize on the wire: only the kubelet's answer to it (it may come before the
            # reply) is for a pass; our own writes and older news are the resizing pass's.
            generation = pod["metadata"].get("generation") or 0
            return generation > memory.resizing and observe(pod).stage != Stage.REQUESTED
        flight = memory.flight
        if flight is not None and (
            awaiting_kubelet(pod, node_type, flight, self._config.generation)
            or cache_behind(memory, pod["metadata"].get("generation") or 0, node_type)
        ):
            return False  # our resize not answered yet, or the event of a write before it
        if node_type in (state.applied.instance_type, memory.finished):
            # Sized for this type: follow a re-alignment in flight, or decide it again once per
            # config version (a re-alignment due, or one an earlier process left unreported).
            return flight is not None or (self._realign_due(uid) and has_originals(pod))
        # Our resize in flight is followed to its end: a size parked as failing may still be
        # actuated by the kubelet's retry (only a size set back, or learnt after a restart, waits).
        return flight is not None or not self._parked(pod, state, node, node_type, memory)

    def _realign_due(self, uid: str) -> bool:
        generation = self._config.generation
        if (
            not self._options.realign
            or self._config.config is None
            or self._memory.get(uid).realign_checked == generation
        ):
            return False
        self._memory.of(uid).realign_checked = generation
        return True

    def _parked(self, pod: Obj, state: PodState, node: Obj, node_type: str, memory: PodMemory) -> bool:
        """A node recorded as unable to resize, or a size recorded infeasible/failed on this node as
        it is that a pass of this process judged under the same config, originals and labels."""
        recorded = recorded_state(state, node_type)
        if recorded is None:
            return False
        if recorded.state == Stage.UNSUPPORTED:
            return True
        if (
            recorded.state not in (Stage.INFEASIBLE, Stage.ERROR)
            or recorded.kept  # the spec kept at the planned size, not set back: decided again
            or recorded.allocatable != allocatable_fingerprint(node)
        ):
            return False
        return memory.parked == parked_at(pod, state, self._config.generation, recorded.size)

    def observe(self, pod: Obj) -> None:
        """A watch event of `pod` arrived (before needs_work)."""
        self._memory.observe(pod_uid(pod), self._read(pod))

    def _read(self, pod: Obj) -> PodState:
        """read_state(pod), once per version of the pod: the watch event's observe, needs_work and
        the pass that follows it read the same cached object (kept, so its identity is not reused)."""
        if self._last_read is None or self._last_read[0] is not pod:
            self._last_read = (pod, read_state(pod))
        return self._last_read[1]

    def forget(self, pod: Obj) -> None:
        self._memory.forget(pod_uid(pod))
        self._context.holds.release(pod_uid(pod))

    # ------------------------------------------------------------------ the pass

    async def reconcile(self, key: str) -> Result:
        pod = self._reader.pod(key)
        if pod is None or not pod["spec"].get("nodeName"):
            unbound = self._reader.unbound(key)
            if unbound is not None and self.needs_binding(unbound):
                return await gated.bind(self._context, unbound)
        if pod is None:
            return DONE
        node = await self._reader.node(pod["spec"]["nodeName"]) if is_live_and_bound(pod) else None
        action = decide(pod, node, World.of(self._context), self._memory.get(pod_uid(pod)), self._read(pod))
        metrics.ACTIONS.labels(type(action).__name__).inc()
        return await self._act(pod, action)
