"""Drill 2: the apiserver is frozen (SIGSTOP) for longer than the reconciler's watch
idle timeout, then thawed (SIGCONT).

A frozen apiserver keeps its sockets open and says nothing: only the client-side
idle timeout (--watch-idle-timeout=10s here) can tell. (The restart metric's cause
label is "idle" since 231c1de, "timeout" before: both are counted.) The reconciler must notice,
reconnect and catch up. Pods of a first burst are being aligned when the freeze
starts; pods of a second burst are created before the freeze but can only be
bound after it (their pool's nodes are added after the thaw), so they reach the
reconciler only through a watch that works again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench.drills.harness import Burst, Context, Drill, wait, wait_aligned


@dataclass(frozen=True)
class Params:
    pods_before: int
    pods_after: int
    freeze: float = 20.0
    idle_timeout: str = "10s"
    nodes_per_family: int = 2
    timeout: float = 600


SIZES = {"full": Params(pods_before=300, pods_after=200), "ci": Params(pods_before=60, pods_after=40)}


def run(ctx: Context, p: Params) -> None:
    ctx.setup()
    ctx.add_nodes({"n2d": p.nodes_per_family, "n4": p.nodes_per_family, "c3": p.nodes_per_family})
    ctx.webhook()
    lives = ctx.reconcilers(f"--watch-idle-timeout={p.idle_timeout}")
    lives.start()
    timeline = ctx.timeline()
    late = Burst(ctx, p.pods_after, prefix="late", pool="late")  # Pending: no node in pool "late" yet
    wait(f"{late.total} late pods created", lambda: len(timeline.created) >= late.total, 120)
    created = time.monotonic()
    first = Burst(ctx, p.pods_before, prefix="before")
    half = max(1, first.eligible // 2)
    wait(f"{half} pods aligned before the freeze", lambda: len(timeline.applied) >= half, p.timeout, 0.1)

    def restarts() -> dict[str, float]:
        lives.scrape()
        return {
            cause: lives.total("workload_resizer_watch_restarts_total", resource="pods", cause=cause)
            for cause in ("idle", "timeout", "error", "expired")
        }

    ctx.figure("aligned_when_frozen", len(timeline.applied))
    restarts_before = restarts()
    ctx.cluster.signal("kube-apiserver", "STOP")
    frozen = time.monotonic()
    time.sleep(p.freeze)
    restarts_frozen = restarts()  # the reconciler is not frozen: its /metrics answers
    ctx.cluster.signal("kube-apiserver", "CONT")
    thawed = time.monotonic()
    ctx.figure("frozen_s", thawed - frozen)
    ctx.add_nodes({"n2d": p.nodes_per_family, "n4": p.nodes_per_family, "c3": p.nodes_per_family}, pool="late")
    last = wait_aligned(timeline, first.eligible + late.eligible, p.timeout)
    lives.wait_idle()
    late_names = {n for n in timeline.created if n.startswith("late-")}
    late_bound_after = sum(1 for n in late_names if timeline.bound.get(n, 0) > thawed)
    ctx.figure("pods", first.total + late.total)
    ctx.figure("late_pods_bound_after_thaw", late_bound_after)
    ctx.figure("thaw_to_last_aligned_s", last - thawed)
    ctx.figure("create_to_last_aligned_s", last - created)
    during = {k: restarts_frozen[k] - restarts_before[k] for k in restarts_before}
    ctx.figure("pod_watch_restarts_while_frozen", during)
    ctx.figure("pod_watch_restarts_total", restarts())
    ctx.check(
        "late pods were created before the freeze and bound after it",
        late_bound_after == late.total,
        f"{late_bound_after}/{late.total}",
    )
    ctx.check(
        "while frozen, the reconciler gave up the silent pod watch (idle timeout) and retried",
        during["idle"] + during["timeout"] >= 1,
        f"restarts by cause while frozen: {during}",
    )
    ctx.check(
        "reconciler recovered by itself (one process, still running)", len(lives.lives) == 1 and lives.current.alive
    )
    ctx.end_state_resized_once_each(lives)


DRILL = Drill(
    "apiserver-freeze", "kube-apiserver frozen (SIGSTOP) past the watch idle timeout, then thawed", SIZES, run
)
