"""Drill 6: soak. Thirty minutes of churn (ci: two) with both processes sampled.

Churn: Deployments scaled up and down at random, nodes relabelled to another
machine family (their pods must follow), and the ConfigMap edited (a node type
added and removed, an unused override toggled). RSS and open descriptors of the
reconciler and the webhook are sampled all along and must stay flat; at the end
the work queue must drain to 0 and every live pod must be exactly aligned with the
final config and its node's final type. (Pods legitimately resize more than once
here, so resizes are not counted.)
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from bench.drills.harness import Context, Drill, wait
from bench.drills.observe import ProcessSampler, trend
from bench.drills.workload import (
    BURSTABLE,
    CONFIG,
    GUARANTEED,
    SKIPPED,
    TEMPLATE_LABEL,
    Expectations,
    deployment,
    drill_config,
)
from devkit.cluster import FAMILY_LABEL
from devkit.metrics import metric_sum

# A fourth family only some configs know: pods on an x9 node are UnknownNodeType
# until the config lists it, then resized. Its perf never changes, so the final
# size of every pod is determined by the final config and its node's final type.
UNUSED_OVERRIDE = """\
overrides:
  - name: never-matches
    match: { podLabel: { drill.workload-resizer.io/no-such-label: "x" } }
    nodeTypes: { n4: { cpuPerf: 5.0, memPerf: 1.0 } }
"""
FINAL_CONFIG = drill_config({"x9": (2.0, 1.0)})
FAMILIES = ("n2d", "n4", "c3", "x9")


def config_variant(with_x9: bool, with_override: bool) -> str:
    text = FINAL_CONFIG if with_x9 else CONFIG
    return text + (UNUSED_OVERRIDE if with_override else "")


@dataclass(frozen=True)
class Params:
    duration: float
    sample_interval: float
    max_replicas: int  # per Deployment
    tick: float = 3.0  # one scale action per tick
    relabel_every: float = 20.0
    config_every: float = 45.0
    nodes_per_family: int = 2
    rss_slack_mb: float = 8.0  # flat: see the checks at the end of run()
    fd_slack: int = 8
    seed: int | None = None


SIZES = {
    "full": Params(duration=1800, sample_interval=10, max_replicas=120),
    "ci": Params(duration=120, sample_interval=2, max_replicas=40, relabel_every=10, config_every=20),
}


def run(ctx: Context, p: Params) -> None:
    seed = p.seed if p.seed is not None else random.SystemRandom().randrange(1 << 30)
    rng = random.Random(seed)
    ctx.figure("seed", seed)
    ctx.setup()
    nodes = [
        n.name for n in ctx.add_nodes({"n2d": p.nodes_per_family, "n4": p.nodes_per_family, "c3": p.nodes_per_family})
    ]
    hook = ctx.webhook()
    lives = ctx.reconcilers()
    rec = lives.start()
    deployments = {t.name: f"soak-{t.name}" for t in (GUARANTEED, BURSTABLE, SKIPPED)}
    for template in (GUARANTEED, BURSTABLE, SKIPPED):
        ctx.kube.create(
            f"/apis/apps/v1/namespaces/{ctx.namespace}/deployments",
            deployment(deployments[template.name], template, p.max_replicas // 2, ctx.node_selector()),
        )
    sampler = ProcessSampler(
        lambda: {"reconciler": rec.proc.pid, "webhook": hook.proc.pid}, interval=p.sample_interval
    ).start()
    counts = {"scale": 0, "relabel": 0, "config_edit": 0}
    started = time.monotonic()
    next_relabel, next_config = started + p.relabel_every, started + p.config_every
    with_x9 = with_override = False
    try:
        while time.monotonic() - started < p.duration:
            name = rng.choice(list(deployments.values()))
            ctx.scale("deployments", name, rng.randint(0, p.max_replicas))
            counts["scale"] += 1
            now = time.monotonic()
            if now >= next_relabel:
                ctx.kube.patch(
                    f"/api/v1/nodes/{rng.choice(nodes)}", {"metadata": {"labels": {FAMILY_LABEL: rng.choice(FAMILIES)}}}
                )
                counts["relabel"] += 1
                next_relabel = now + p.relabel_every
            if now >= next_config:
                if rng.random() < 0.5:
                    with_x9 = not with_x9
                else:
                    with_override = not with_override
                set_config(ctx, config_variant(with_x9, with_override))
                counts["config_edit"] += 1
                next_config = now + p.config_every
            time.sleep(p.tick)
        ctx.figure("churn_actions", counts)
        # Settle: the final config, every Deployment at a fixed size, rollouts done.
        set_config(ctx, FINAL_CONFIG)
        final = {name: rng.randint(p.max_replicas // 4, p.max_replicas) for name in deployments.values()}
        for name, replicas in final.items():
            ctx.scale("deployments", name, replicas)
        wait(
            "Deployments at their final size with no terminating pod", lambda: settled(ctx, sum(final.values())), 300, 1
        )
        lives.wait_idle(300)
        # One last relabel, of the node with the most pods, to a family that sizes them
        # differently: its pods must be resized again, from their originals.
        moved, generations = final_relabel(ctx)
        wait(
            f"{len(generations)} pods on the relabelled node resized again",
            lambda: resized_again(ctx, generations),
            120,
            1,
        )
        lives.wait_idle(300)
        ctx.figure("final_relabel", moved)
    finally:
        sampler.stop()
    ctx.figure("soak_s", time.monotonic() - started)
    text = lives.scrape() or ""
    ctx.figure("final_replicas", sum(final.values()))
    ctx.check(
        "work queue drained (workqueue_depth 0, no active worker)",
        metric_sum(text, "workqueue_depth") == 0 and metric_sum(text, "controller_runtime_active_workers") == 0,
    )
    ctx.figure(
        "reconcile_total",
        {
            r: metric_sum(text, "controller_runtime_reconcile_total", result=r)
            for r in ("success", "error", "requeue_after")
        },
    )
    for name, series in sampler.samples.items():
        times = [s.t for s in series]
        rss = trend(times, [s.rss_mb for s in series])
        fds = trend(times, [float(s.fds) for s in series])
        ctx.figure(f"{name}_rss_mb", rss.as_dict())
        ctx.figure(f"{name}_open_fds", fds.as_dict())
        ctx.check(
            f"{name} RSS flat (second half never above the first half's peak + 10% + {p.rss_slack_mb:.0f} MiB)",
            rss.second_half_max <= rss.first_half_max * 1.10 + p.rss_slack_mb,
            f"peak {rss.first_half_max:.1f} -> {rss.second_half_max:.1f} MiB, median {rss.first:.1f} -> "
            f"{rss.last:.1f} MiB, slope {rss.slope_per_hour:+.1f} MiB/h over {len(series)} samples",
        )
        # Medians, not peaks: a burst of apiserver connections (idle 27 -> 37 for seconds) is no
        # leak, and failed the check whenever it fell in the second half; a leak moves the median.
        ctx.check(
            f"{name} open descriptors flat (last quarter's median at most the first quarter's + {p.fd_slack})",
            fds.last <= fds.first + p.fd_slack,
            f"peak {fds.first_half_max:.0f} -> {fds.second_half_max:.0f}, median {fds.first:.0f} -> {fds.last:.0f}",
        )
    ctx.check("reconciler and webhook still the first processes", len(lives.lives) == 1 and rec.alive and hook.alive)
    ctx.end_state(Expectations(FINAL_CONFIG), count_resizes=False, settle=120)


def set_config(ctx: Context, text: str) -> None:
    ctx.kube.patch(
        f"/api/v1/namespaces/{ctx.namespace}/configmaps/workload-resizer-config", {"data": {"config.yaml": text}}
    )


def final_relabel(ctx: Context) -> tuple[str, dict[str, int]]:
    """Relabel the node with the most eligible pods (n2d <-> x9, n4 <-> c3); {pod: generation} of its pods."""
    pods = [
        p
        for p in ctx.kube.get(f"/api/v1/namespaces/{ctx.namespace}/pods")["items"]
        if p["spec"].get("nodeName") and (p["metadata"].get("labels") or {}).get(TEMPLATE_LABEL) != SKIPPED.name
    ]
    by_node: dict[str, list[dict]] = {}
    for pod in pods:
        by_node.setdefault(pod["spec"]["nodeName"], []).append(pod)
    node = max(by_node, key=lambda n: len(by_node[n]))
    old = ctx.cluster.node_types()[node]
    new = {"n2d": "x9", "x9": "n2d", "n4": "c3", "c3": "n4"}[old or "n2d"]
    ctx.kube.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {FAMILY_LABEL: new}}})
    return f"{node}: {old} -> {new}, {len(by_node[node])} eligible pods", {
        p["metadata"]["name"]: int(p["metadata"]["generation"]) for p in by_node[node]
    }


def resized_again(ctx: Context, generations: dict[str, int]) -> bool:
    pods = {p["metadata"]["name"]: p for p in ctx.kube.get(f"/api/v1/namespaces/{ctx.namespace}/pods")["items"]}
    return all(int(pods[n]["metadata"]["generation"]) > g for n, g in generations.items() if n in pods)


def settled(ctx: Context, replicas: int) -> bool:
    pods = ctx.kube.get(f"/api/v1/namespaces/{ctx.namespace}/pods")["items"]
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    return len(pods) == len(live) == replicas and all(p["spec"].get("nodeName") for p in live)


DRILL = Drill(
    "soak", "30 minutes of churn (scaling, node relabels, config edits): RSS/fds flat, queue drains", SIZES, run
)
