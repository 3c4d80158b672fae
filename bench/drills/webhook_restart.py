"""Drill 3: the webhook is killed (SIGKILL) and restarted during a burst of pod creations.

The ReplicaSets are scaled up in steps while the webhook dies and comes back
(same port, same certificate) several times. The webhook's failurePolicy is
Ignore: no pod creation may fail (no FailedCreate event, no ReplicaFailure
condition, every replica exists), and pods admitted while it was down are
stamped by the reconciler from their spec, so they still end exactly sized.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass

from bench.drills.harness import Burst, Context, Drill, wait, wait_aligned
from bench.drills.workload import list_pods


@dataclass(frozen=True)
class Params:
    pods: int
    steps: int
    step_interval: float = 1.0
    kills: int = 3
    down: float = 3.0  # seconds the webhook stays dead
    up: float = 3.0  # seconds it serves between kills
    nodes_per_family: int = 2
    timeout: float = 600


SIZES = {"full": Params(pods=500, steps=25, kills=4), "ci": Params(pods=100, steps=10, kills=2)}


def run(ctx: Context, p: Params) -> None:
    ctx.setup()
    ctx.add_nodes({"n2d": p.nodes_per_family, "n4": p.nodes_per_family, "c3": p.nodes_per_family})
    hook = ctx.webhook()
    lives = ctx.reconcilers()
    lives.start()
    timeline = ctx.timeline()
    burst = Burst(ctx, 0)
    outages: list[tuple[float, float]] = []
    stop = threading.Event()

    def faults() -> None:
        nonlocal hook
        for _ in range(p.kills):
            if stop.wait(p.up):
                return
            hook.proc.send_signal(signal.SIGKILL)
            hook.proc.wait(10)
            died = time.monotonic()
            time.sleep(p.down)
            hook = ctx.webhook(certs=hook.certs, port=hook.port, register=False)
            outages.append((died, time.monotonic()))

    killer = threading.Thread(target=faults, name="webhook-killer", daemon=True)
    created = time.monotonic()
    killer.start()
    for step in range(1, p.steps + 1):
        burst.scale_to(p.pods * step // p.steps)
        time.sleep(p.step_interval)
    killer.join(p.kills * (p.up + p.down + 90))
    stop.set()
    wait(f"{p.pods} pods created", lambda: len(list_pods(ctx.kube, ctx.namespace)) >= p.pods, p.timeout, 1)
    last = wait_aligned(timeline, burst.eligible, p.timeout)
    lives.wait_idle()
    ctx.figure("pods", p.pods)
    ctx.figure("webhook_kills", len(outages))
    ctx.figure("webhook_down_s", [round(b - a, 1) for a, b in outages])
    ctx.figure("create_to_last_aligned_s", last - created)

    failed_events = [
        e
        for e in ctx.kube.get(f"/api/v1/namespaces/{ctx.namespace}/events")["items"]
        if e.get("reason") == "FailedCreate"
    ]
    failure_conditions = [
        (rs["metadata"]["name"], c.get("message"))
        for rs in ctx.kube.get(f"/apis/apps/v1/namespaces/{ctx.namespace}/replicasets")["items"]
        for c in rs.get("status", {}).get("conditions") or []
        if c.get("type") == "ReplicaFailure"
    ]
    pods = [q for q in list_pods(ctx.kube, ctx.namespace) if not q["metadata"].get("deletionTimestamp")]
    ctx.figure("failed_pod_creations", len(failed_events))
    ctx.check(
        "no pod creation failed (no FailedCreate event, no ReplicaFailure condition)",
        not failed_events and not failure_conditions,
        f"{len(failed_events)} FailedCreate events, conditions {failure_conditions[:3]}"
        + (f"; e.g. {failed_events[0].get('message')}" if failed_events else ""),
    )
    ctx.check("every replica exists", len(pods) == p.pods, f"{len(pods)}/{p.pods} pods")
    unstamped = [
        n
        for n, stamped in timeline.stamped_at_admission.items()
        if not stamped and not n.startswith(burst.names["skipped"])
    ]
    ctx.figure("eligible_pods_admitted_without_webhook", len(unstamped))
    ctx.check(
        "some eligible pods were admitted while the webhook was down (the fault hit creations)",
        len(unstamped) > 0,
        f"{len(unstamped)} of {burst.eligible}",
    )
    ctx.figure("requests_per_pod", lives.requests_per_pod(p.pods))
    ctx.check("webhook is serving again", hook.alive and hook.ready())
    ctx.end_state_resized_once_each(lives)


DRILL = Drill("webhook-restart", "webhook SIGKILLed and restarted during a burst of pod creations", SIZES, run)
