"""Resizes held by a gate (reconciler.gates): reported once per distinct hold, retried when the
constraint changes or a bounded wait ends, and one preflight-and-resize at a time per node."""

from __future__ import annotations

import asyncio
from collections import defaultdict

from reconciler.gates import Held
from reconciler.memory import Context, Result
from reconciler.pods import pod_uid
from reconciler.ports import Obj
from reconciler.reasons import EventType
from reconciler.report import Reporter
from resizer import ResizePlan


class Holding:
    def __init__(self, context: Context, reporter: Reporter) -> None:
        self._c = context
        self._reporter = reporter
        # Two increases judged at once on one node would both count the same free room.
        self._node_locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)

    def node_lock(self, pod: Obj) -> asyncio.Lock:
        return self._node_locks[str(pod["spec"]["nodeName"])]

    async def held(self, pod: Obj, plan: ResizePlan | None, held: Held) -> Result:
        """Nothing written: the pod waits for its constraint to change (or `held.requeue_after`);
        each distinct hold is reported once."""
        uid = pod_uid(pod)
        if self._c.holds.hold(uid, held, self._c.clock()):
            event_type = EventType.WARNING if held.constraint in ("LimitRange", "ResourceQuota") else EventType.NORMAL
            await self._reporter.report(pod, plan, event_type, held.reason, held.message)
        if held.at_most is not None and held.requeue_after is not None:
            since = self._c.holds.since(uid) or self._c.clock()
            return Result(requeue_after=max(1.0, since + held.at_most - self._c.clock()))
        return Result(requeue_after=held.requeue_after)

    def waited_enough(self, pod: Obj, held: Held) -> bool:
        """A bounded hold (room on the node) that has lasted its bound: the resize goes out anyway."""
        if held.at_most is None:
            return False
        previous = self._c.holds.held.get(pod_uid(pod))
        since = self._c.holds.since(pod_uid(pod))
        if previous is None or previous.fingerprint != held.fingerprint or since is None:
            return False
        return self._c.clock() - since >= held.at_most
