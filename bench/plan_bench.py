"""`plan` on a big cluster: its runtime on 10,000 bound pods.

A fresh local cluster (its own state dir, like the drills), 60 KWOK nodes of the three
sample families, 10,000 pods from ReplicaSets (bench/drills' Burst: Guaranteed,
Burstable and skip-annotated), no product installed (plan is what an admin runs before
installing). Once every pod is bound, `python -m commands plan` runs `--rounds` times
(table and JSON) as a separate process; printed: wall time, the command's own CPU time,
its list and plan phases, peak RSS, and the pods it planned.

    .venv/bin/python bench/plan_bench.py [--pods 10000] [--nodes 60] [--rounds 3] [--keep-cluster]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.drills.harness import Burst, Context, say, wait  # noqa: E402
from bench.drills.workload import list_pods  # noqa: E402
from devkit.cluster import LocalCluster  # noqa: E402
from devkit.processes import originals_key_dir  # noqa: E402


def run_plan(kubeconfig: str, namespace: str, output: str) -> dict[str, float | int | str]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "commands",
            "plan",
            f"--kubeconfig={kubeconfig}",
            f"--config-namespace={namespace}",
            "-o",
            output,
            "--kube-api-qps=50",
            f"--originals-key-dir={originals_key_dir()}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"plan failed: {proc.stderr}")
    figures: dict[str, float | int | str] = {
        "output": output,
        "wall_s": round(wall, 2),
        "cpu_s": round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 2),
        "peak_rss_mib": round(after.ru_maxrss / 1024, 1),
    }
    if output == "json":
        plan = json.loads(proc.stdout)
        figures.update(
            pods_read=plan["pods"],
            list_s=plan["listSeconds"],
            plan_s=plan["planSeconds"],
            pods_planned=plan["total"]["pods"],
            pods_resized=plan["total"]["resized"],
            cpu_delta=plan["total"]["requests"]["cpu"]["deltaMillicores"],
        )
    else:
        figures["last_line"] = proc.stdout.strip().splitlines()[-1]
    return figures


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pods", type=int, default=10_000)
    p.add_argument("--nodes", type=int, default=60)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--state-dir", type=Path, default=REPO / ".cluster-plan-bench")
    p.add_argument("--keep-cluster", action="store_true")
    args = p.parse_args()
    cluster = LocalCluster(args.state_dir)
    ctx = Context("plan-bench", "full", cluster, REPO / "bench" / "out")
    try:
        ctx.setup()
        third = args.nodes // 3
        per_pod = max(110, 2 * args.pods // args.nodes)
        ctx.add_nodes({"n2d": third, "n4": third, "c3": args.nodes - 2 * third}, cpu="256", memory="1Ti", pods=per_pod)
        created = time.monotonic()
        Burst(ctx, args.pods)
        wait(
            f"{args.pods} pods bound",
            lambda: (
                sum(1 for pod in list_pods(ctx.kube, ctx.namespace) if pod["spec"].get("nodeName")) >= args.pods or None
            ),
            timeout=1800,
            interval=10,
        )
        say(f"{args.pods} pods created and bound in {time.monotonic() - created:.0f}s")
        rounds = [
            run_plan(cluster.kubeconfig, ctx.namespace, output)
            for _ in range(args.rounds)
            for output in ("json", "table")
        ]
        for figures in rounds:
            print(json.dumps(figures))
        walls = sorted(float(r["wall_s"]) for r in rounds if r["output"] == "json")
        print(
            json.dumps(
                {
                    "pods": args.pods,
                    "nodes": args.nodes,
                    "plan_wall_s_median": walls[len(walls) // 2],
                    "plan_wall_s_min": walls[0],
                }
            )
        )
    finally:
        ctx.close(keep_logs=False)
        if not args.keep_cluster:
            cluster.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
