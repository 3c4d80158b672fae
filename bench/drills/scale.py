"""Drill 5: scale. 10,000 pods on 200 KWOK nodes (ci: 1,000 on 20), webhook and reconciler running.

Figures: time to align every pod, the scheduler's binding time (a floor), resizes/s,
API requests per pod, the reconciler's peak RSS (target <= 250 MB) and RSS per
cached pod, compared with what a full deserialised pod costs in memory: the
reconciler's caches hold slimmed pods (reconciler/slim.py), so its RSS per pod
must be a fraction of a full pod's.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from dataclasses import dataclass
from typing import Any

import orjson

from bench.drills.harness import Burst, Context, Drill, wait_aligned
from bench.drills.observe import ProcessSampler, cpu_seconds, peak_rss_mb, rss_mb
from bench.drills.workload import list_pods
from kube.slim import slim_pod


@dataclass(frozen=True)
class Params:
    pods: int
    nodes: int
    rss_target_mb: float = 250
    timeout: float = 3600
    settle: float = 900  # for KWOK to actuate the last resizes (it lags far behind at 10k pods)


SIZES = {"full": Params(pods=10_000, nodes=200), "ci": Params(pods=1_000, nodes=20, settle=300)}


def run(ctx: Context, p: Params) -> None:
    ctx.setup()
    per_family = {"n2d": p.nodes // 3, "n4": p.nodes // 3}
    per_family["c3"] = p.nodes - sum(per_family.values())
    ctx.add_nodes(per_family, cpu="64", memory="256Gi", pods=max(110, 4 * p.pods // p.nodes))
    hook = ctx.webhook()
    lives = ctx.reconcilers()
    rec = lives.start()
    time.sleep(2)
    baseline_rss = ctx.figure("reconciler_rss_before_pods_mb", rss_mb(rec.proc.pid))
    sampler = ProcessSampler(lambda: {"reconciler": rec.proc.pid, "webhook": hook.proc.pid}, interval=2).start()
    pids = {
        "reconciler": rec.proc.pid,
        "webhook": hook.proc.pid,
        **{
            c: ctx.cluster.pid(c)
            for c in ("kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager", "kwok-capable")
        },
    }
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    timeline = ctx.timeline()
    created = time.monotonic()
    burst = Burst(ctx, p.pods)
    try:
        last = wait_aligned(timeline, burst.eligible, p.timeout)
    finally:
        sampler.stop()
    lives.wait_idle(300)
    ctx.figure(
        "cpu_s_during_burst", {name: round(cpu_seconds(pid) - cpu_before[name], 1) for name, pid in pids.items()}
    )
    first_bound, last_bound = min(timeline.bound.values()), max(timeline.bound.values())
    ctx.figure("pods", p.pods)
    ctx.figure("nodes", p.nodes)
    ctx.figure("create_to_last_aligned_s", last - created)
    ctx.figure("first_bound_to_last_aligned_s", last - first_bound)
    ctx.figure("scheduler_first_to_last_bound_s", last_bound - first_bound)
    ctx.figure("last_bound_to_last_aligned_s", last - last_bound)
    ctx.figure("aligned_per_s", burst.eligible / (last - first_bound))
    requests = lives.requests()
    ctx.figure("requests_per_pod", lives.requests_per_pod(p.pods))
    ctx.figure("requests_per_pod_total", round(sum(requests.values()) / p.pods, 3))
    ctx.figure("node_gets_per_pod", round(requests.get(("GET", "nodes"), 0) / p.pods, 4))
    peak = ctx.figure("reconciler_peak_rss_mb", peak_rss_mb(rec.proc.pid))
    end_rss = ctx.figure("reconciler_rss_end_mb", rss_mb(rec.proc.pid))
    ctx.figure("webhook_peak_rss_mb", peak_rss_mb(hook.proc.pid))
    per_pod_kib = ctx.figure("reconciler_rss_per_cached_pod_kib", (end_rss - baseline_rss) * 1024 / p.pods)
    full_kib, slim_kib = pod_footprints(ctx)
    ctx.figure("full_pod_deserialised_kib", full_kib)
    ctx.figure("slim_pod_kib", slim_kib)
    ctx.figure("rss_samples", {name: len(s) for name, s in sampler.samples.items()})
    ctx.figure("apiserver_rejections", ctx.cluster.apiserver_rejections())
    ctx.check(f"reconciler peak RSS <= {p.rss_target_mb:.0f} MB", peak <= p.rss_target_mb, f"{peak:.1f} MiB")
    ctx.check(
        "cache holds slim pods: RSS per cached pod < a full deserialised pod",
        per_pod_kib < full_kib,
        f"{per_pod_kib:.2f} KiB per pod vs {full_kib:.2f} KiB full, {slim_kib:.2f} KiB slim",
    )
    ctx.end_state_resized_once_each(lives, settle=p.settle)


def pod_footprints(ctx: Context, sample: int = 500) -> tuple[float, float]:
    """KiB of Python heap per pod: a full pod as orjson parses it, and the same pod slimmed."""
    raw = [orjson.dumps(pod) for pod in list_pods(ctx.kube, ctx.namespace)[:sample]]

    def measure(build) -> float:
        gc.collect()
        tracemalloc.start()
        kept: list[Any] = [build(b) for b in raw]
        size, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        del kept
        return size / len(raw) / 1024

    return round(measure(orjson.loads), 2), round(measure(lambda b: slim_pod(orjson.loads(b))), 2)


DRILL = Drill("scale", "10,000 pods on 200 KWOK nodes: time to align, requests per pod, peak RSS", SIZES, run)
