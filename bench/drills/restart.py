"""Drill 1: the apiserver (or etcd) is stopped and started again in the middle of a burst.

Same argv, same ports, same etcd data (hack/cluster stop/start). The burst is
created in steps and the component is stopped halfway, so pods are being created,
bound and aligned on both sides of the outage. The component gets SIGTERM and a
short grace before SIGKILL (3 s for the apiserver, 2 s for etcd): left alone, the
apiserver drains for ~60 s over its open connections and etcd takes ~7 s, long
enough for the pods in flight to be finished before the component is gone. The reconciler is not touched: it must notice the broken
watches and failed requests, re-list / re-watch by itself, and finish the burst
with no pod resized twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bench.drills.harness import Burst, Context, Drill, wait, wait_aligned


@dataclass(frozen=True)
class Params:
    pods: int
    steps: int  # the burst is created in this many steps, one per second
    nodes_per_family: int = 2
    outage: float = 5.0  # seconds between "stopped" and "start"
    timeout: float = 600


SIZES = {"full": Params(pods=500, steps=20), "ci": Params(pods=100, steps=10)}


def restart_drill(component: str, grace: float):
    def run(ctx: Context, p: Params) -> None:
        ctx.setup()
        ctx.add_nodes({"n2d": p.nodes_per_family, "n4": p.nodes_per_family, "c3": p.nodes_per_family})
        ctx.webhook()
        lives = ctx.reconcilers()
        lives.start()
        timeline = ctx.timeline()
        created = time.monotonic()
        burst = Burst(ctx, 0)
        for step in range(1, p.steps + 1):
            wait(f"step {step}: scale", lambda step=step: burst.scale_to(p.pods * step // p.steps) or True, 60)
            if step == p.steps // 2:
                # Halfway, the moment this step's pods are bound and not yet aligned.
                skipped = burst.names["skipped"]

                def in_flight(skipped: str = skipped) -> set[str]:
                    return {n for n in timeline.bound if not n.startswith(skipped)} - set(timeline.applied)

                wait("eligible pods bound, not yet aligned", in_flight, 60, 0.01)
                ctx.figure("aligned_when_stopped", len(timeline.applied))
                ctx.figure("in_flight_when_stopped", len(in_flight()))
                stopping = time.monotonic()
                ctx.figure(f"{component}_stop_s", ctx.cluster.stop(component, timeout=grace))
                time.sleep(p.outage)
                ctx.figure(f"{component}_start_s", ctx.cluster.start(component))
                back = time.monotonic()
                ctx.figure("outage_s", back - stopping)
            time.sleep(1)
        last = wait_aligned(timeline, burst.eligible, p.timeout)
        lives.wait_idle()
        ctx.figure("pods", p.pods)
        ctx.figure("create_to_last_aligned_s", last - created)
        ctx.figure("back_to_last_aligned_s", max(0.0, last - back))
        restarts = {
            cause: lives.total("workload_resizer_watch_restarts_total", resource="pods", cause=cause)
            for cause in ("expired", "idle", "timeout", "error")
        }
        ctx.figure("pod_watch_restarts", restarts)
        ctx.figure("reconcile_errors", lives.total("controller_runtime_reconcile_errors_total"))
        ctx.check(
            "reconciler recovered by itself (one process, still running)", len(lives.lives) == 1 and lives.current.alive
        )
        ctx.end_state_resized_once_each(lives)

    return run


APISERVER = Drill(
    "apiserver-restart",
    "kube-apiserver stopped (SIGTERM, SIGKILL after 3 s) and started again mid-burst",
    SIZES,
    restart_drill("kube-apiserver", grace=3),
)
ETCD = Drill(
    "etcd-restart",
    "etcd stopped (SIGTERM, SIGKILL after 2 s) and started again mid-burst, same data",
    SIZES,
    restart_drill("etcd", grace=2),
)
