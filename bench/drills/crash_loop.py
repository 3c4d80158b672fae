"""Drill 4: crash loop. The reconciler is SIGKILLed at random moments, again and again,
while a burst is being created and aligned; each time a new process takes over.

No webhook here: every pod goes through all three writes (originals -> resize ->
applied). The reconciler's client is throttled (--kube-api-qps=20) so that its
work is spread over the whole crash loop and pods wait between two writes for a
rate-limit token: random kills then land between any two writes (the figures say
how many pods each kill left half-done). The end state must be exact and
never compounded: every pod that needed a resize was resized exactly once and the
others never (metadata.generation, which the apiserver bumps on each effective
resize, is exact whatever the kills), and the apiserver answered 2xx to at most one
pods/resize per pod that needed one. (Request counts cannot be exact under SIGKILL:
a request cut off mid-flight may be resent, and the killed process's last
increments are lost; both are reported.)
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from bench.drills.harness import Burst, Context, Drill, wait_aligned
from bench.drills.workload import TEMPLATE_LABEL, TEMPLATES, list_pods, resource_units
from devkit.cluster import ok_count
from resizer.podstate import APPLIED_INSTANCE_TYPE


@dataclass(frozen=True)
class Params:
    pods: int
    kills: int
    min_life: float = 1.0  # seconds from a process's start to its SIGKILL: uniform(min, max)
    max_life: float = 4.0
    qps: int = 20  # the reconciler's --kube-api-qps and --kube-api-burst
    nodes_per_family: int = 2
    seed: int | None = None  # None: a fresh seed, recorded in the figures
    timeout: float = 600


SIZES = {"full": Params(pods=500, kills=25), "ci": Params(pods=100, kills=5)}


def run(ctx: Context, p: Params) -> None:
    seed = p.seed if p.seed is not None else random.SystemRandom().randrange(1 << 30)
    rng = random.Random(seed)
    ctx.figure("seed", seed)
    ctx.setup()
    ctx.add_nodes({"n2d": p.nodes_per_family, "n4": p.nodes_per_family, "c3": p.nodes_per_family})
    served_before = ctx.cluster.resize_patches_served()
    lives = ctx.reconcilers(f"--kube-api-qps={p.qps}", f"--kube-api-burst={p.qps}")
    timeline = ctx.timeline()
    created = time.monotonic()
    burst = Burst(ctx, p.pods)
    between = {"originals_only": 0, "resized_not_recorded": 0}
    lifetimes = []
    for _ in range(p.kills):
        lives.start(wait_ready=False)
        life = rng.uniform(p.min_life, p.max_life)
        time.sleep(life)
        lives.kill()
        lifetimes.append(round(life, 2))
        for key, count in half_done(ctx).items():
            between[key] += count
    ctx.figure("kills", lives.killed)
    ctx.figure("life_s_min_mean_max", [min(lifetimes), round(sum(lifetimes) / len(lifetimes), 2), max(lifetimes)])
    ctx.figure("aligned_at_last_kill", len(timeline.applied))
    ctx.figure("pods_found_between_writes_after_kills", between)
    lives.start()
    last = wait_aligned(timeline, burst.eligible, p.timeout)
    lives.wait_idle()
    ctx.figure("pods", p.pods)
    ctx.figure("create_to_last_aligned_s", last - created)
    ctx.figure("reconciler_lives", len(lives.lives))
    state = ctx.end_state()
    served = {code: total - served_before.get(code, 0) for code, total in ctx.cluster.resize_patches_served().items()}
    counted = lives.resize_patches()
    ctx.figure("resize_patches_answered_by_apiserver_by_code", served)
    ctx.figure("resize_patches_counted_by_reconcilers", counted)
    ctx.check(
        "pods/resize PATCHes answered 2xx by the apiserver <= pods that needed a resize (no duplicate)",
        ok_count(served) <= state.needed_resize,
        f"{ok_count(served):.0f} answered 2xx, {state.needed_resize} needed",
    )
    ctx.check(
        "reconciler-side count (scraped before each kill: a lower bound) <= needed",
        counted <= state.needed_resize,
        f"{counted:.0f} counted over {len(lives.lives)} lives",
    )
    ctx.check(f"killed at least {p.kills} times", lives.killed >= p.kills, f"{lives.killed} kills")


def half_done(ctx: Context) -> dict[str, int]:
    """Pods a killed process left between two writes of the three-step order."""
    counts = {"originals_only": 0, "resized_not_recorded": 0}
    for pod in list_pods(ctx.kube, ctx.namespace):
        meta = pod["metadata"]
        annotations = meta.get("annotations") or {}
        template = TEMPLATES.get((meta.get("labels") or {}).get(TEMPLATE_LABEL, ""))
        if template is None or not template.eligible or APPLIED_INSTANCE_TYPE in annotations:
            continue
        if resource_units(pod["spec"]["containers"]) != resource_units(list(template.containers)):
            counts["resized_not_recorded"] += 1
        elif any(k.startswith("workload-resizer.io/original-") for k in annotations):
            counts["originals_only"] += 1
    return counts


DRILL = Drill("crash-loop", "reconciler SIGKILLed at random moments (>= 20 times) during a burst", SIZES, run)
