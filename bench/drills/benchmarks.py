"""The existing benchmarks as rows of the drills' table, run through their own commands.

- webhook-bench: bench/webhook_bench.py (Python webhook vs the Go net/http baseline);
- burst: bench/reconciler_burst.py (1,000 pods, webhook + reconciler) against a fresh
  cluster of its own (WR_CLUSTER_DIR), so never the shared one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.drills.harness import Context, Drill

REPO = Path(__file__).resolve().parents[2]


def _run(ctx: Context, argv: list[str], env: dict[str, str] | None, timeout: float) -> subprocess.CompletedProcess:
    ctx.log(" ".join(argv))
    proc = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    ctx.check(
        f"{Path(argv[1]).name} exited 0", proc.returncode == 0, "" if proc.returncode == 0 else proc.stderr[-1500:]
    )
    return proc


# ----------------------------------------------------------------------------- webhook


@dataclass(frozen=True)
class WebhookParams:
    duration: float
    rounds: int
    connections: int = 16


def run_webhook(ctx: Context, p: WebhookParams) -> None:
    out = ctx.out_dir / f"webhook-bench-{ctx.size}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = _run(
        ctx,
        [
            sys.executable,
            "bench/webhook_bench.py",
            "--duration",
            str(p.duration),
            "--rounds",
            str(p.rounds),
            "--connections",
            str(p.connections),
            "--json",
            str(out),
        ],
        None,
        600 + p.rounds * 4 * p.duration,
    )
    if proc.returncode != 0:
        return
    results = {r["server"]: r for r in json.loads(out.read_text())}
    python = next(r for name, r in results.items() if name.startswith("python"))
    go = next(r for name, r in results.items() if name.startswith("go"))
    for label, r in (("python", python), ("go", go)):
        ctx.figure(f"{label}_reviews_per_s", round(r["rps"]))
        ctx.figure(f"{label}_p50_ms", r["p50_ms"])
        ctx.figure(f"{label}_p99_ms", r["p99_ms"])
        ctx.figure(f"{label}_reviews_per_cpu_s", round(r["reviews_per_cpu_s"]))
        ctx.figure(f"{label}_loadgen_cpu", round(r["loadgen_cpu_util"], 2))
    ctx.figure("python_vs_go_throughput", round(python["rps"] / go["rps"], 2))
    ctx.figure(
        "targets",
        f"throughput {'met' if python['rps'] >= 0.6 * go['rps'] else 'NOT met'}, "
        f"p99 {'met' if python['p99_ms'] <= 5 else 'NOT met'}",
    )
    ctx.check("both servers return the same patch", python["patch"] == go["patch"])


WEBHOOK = Drill(
    "webhook-bench",
    "bench/webhook_bench.py: webhook reviews/s and p99 vs the Go baseline",
    {"full": WebhookParams(duration=10, rounds=3), "ci": WebhookParams(duration=3, rounds=1)},
    run_webhook,
    needs_cluster=False,
)


# ----------------------------------------------------------------------------- burst


@dataclass(frozen=True)
class BurstParams:
    replicas: int


def run_burst(ctx: Context, p: BurstParams) -> None:
    ctx.cluster.up()
    out = ctx.out_dir / f"burst-{p.replicas}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = _run(
        ctx,
        [sys.executable, "bench/reconciler_burst.py", "--replicas", str(p.replicas), "--json", str(out)],
        ctx.cluster.env,
        1800,
    )
    if proc.returncode != 0:
        return
    figures = json.loads(out.read_text())
    for key, value in figures.items():
        ctx.figure(key, value)
    ctx.check(
        "<= 3 writes per webhook-stamped pod",
        figures["writes_per_pod"] <= 3,
        f"{figures['writes_per_pod']} writes per pod",
    )
    ctx.check("no per-pod node GET", figures["node_gets_per_pod"] < 0.01, f"{figures['node_gets_per_pod']}")


BURST = Drill(
    "burst",
    "bench/reconciler_burst.py: 1,000-pod burst, resizes/s, requests per pod, RSS, ceiling",
    {"full": BurstParams(replicas=1000), "ci": BurstParams(replicas=300)},
    run_burst,
)
