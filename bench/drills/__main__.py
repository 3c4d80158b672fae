"""`python -m bench.drills [NAME ...] [--size full|ci]`: run drills, print figures, exit 1 on any failure."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.drills import benchmarks, crash_loop, freeze, hostile, restart, scale, soak, webhook_restart
from bench.drills.harness import Drill, machine, run_drill, say, write_json
from devkit.cluster import cluster_dir_for_demo, cluster_dir_for_tests

REPO = Path(__file__).resolve().parents[2]

# In the order `python -m bench.drills` runs them (the slow ones last).
DRILLS: list[Drill] = [
    hostile.DRILL,
    restart.APISERVER,
    restart.ETCD,
    freeze.DRILL,
    webhook_restart.DRILL,
    crash_loop.DRILL,
    benchmarks.WEBHOOK,
    benchmarks.BURST,
    scale.DRILL,
    soak.DRILL,
]
BY_NAME = {d.name: d for d in DRILLS}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.drills",
        description=__doc__,
        epilog="drills: " + "; ".join(f"{d.name}: {d.about}" for d in DRILLS),
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="drills to run (default: all)")
    parser.add_argument(
        "--size",
        choices=("full", "ci"),
        default="full",
        help="full: the issue's sizes; ci: shrunk to run in CI (default full)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "bench" / "out",
        help="where the JSON results (and the logs of failed drills) go",
    )
    parser.add_argument(
        "--cluster-dir",
        type=Path,
        default=None,
        help="parent of the drills' cluster state dirs (default: a new temp dir)",
    )
    parser.add_argument("--keep-cluster", action="store_true", help="leave each drill's cluster running")
    parser.add_argument(
        "--keep-logs", action="store_true", help="keep the processes' and the control plane's logs of passed drills too"
    )
    parser.add_argument(
        "--scheduler-qps",
        type=int,
        default=None,
        help="kube-scheduler client QPS of the drills' clusters (default: hack/cluster's)",
    )
    parser.add_argument("--list", action="store_true", help="list the drills and exit")
    args = parser.parse_args(argv)
    if args.list:
        for d in DRILLS:
            print(f"{d.name:20} {d.about}")
        return 0
    unknown = [n for n in args.names if n not in BY_NAME]
    if unknown:
        parser.error(f"unknown drill(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
    chosen = [BY_NAME[n] for n in args.names] if args.names else DRILLS
    base = args.cluster_dir or Path(tempfile.mkdtemp(prefix="wr-drills-"))
    for taken in (cluster_dir_for_tests(), cluster_dir_for_demo()):
        if taken.resolve() in (base.resolve(), *base.resolve().parents):
            parser.error(f"--cluster-dir must not be (inside) the tests' or the demo's cluster ({taken})")
    extra = ([f"--scheduler-qps {args.scheduler_qps}"] if args.scheduler_qps else []) + (
        [f"--out {args.out}"] if args.out != REPO / "bench" / "out" else []
    )
    command = " ".join(["python -m bench.drills", *args.names, f"--size {args.size}", *extra])
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    run = {"command": command, "size": args.size, "started": stamp, "machine_at_start": machine(), "results": []}
    try:
        for drill in chosen:
            result = run_drill(drill, args.size, base, args.out, args.keep_cluster, args.scheduler_qps, args.keep_logs)
            payload = {
                "command": " ".join(["python -m bench.drills", drill.name, f"--size {args.size}", *extra]),
                "finished": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "machine": machine(),
                **result.__dict__,
            }
            write_json(args.out / f"drill-{drill.name}-{args.size}.json", payload)
            run["results"].append(payload)
            print_result(result)
    finally:
        if args.cluster_dir is None and not any(base.iterdir()):
            base.rmdir()  # our own temporary base, emptied by the drills (kept clusters stay)
    run["machine_at_end"] = machine()
    write_json(args.out / f"drills-{args.size}-{stamp}.json", run)
    failed = [r["drill"] for r in run["results"] if not r["passed"]]
    print(
        f"\n{len(chosen) - len(failed)}/{len(chosen)} drills passed"
        + (f"; FAILED: {', '.join(failed)}" if failed else "")
        + f" (results in {args.out})"
    )
    print(f"drills: {len(chosen) - len(failed)} passed, {len(failed)} failed")  # the plain closing line CI reads
    return 1 if failed else 0


def print_result(result) -> None:
    print(f"\n{result.drill} ({result.size}): {'PASS' if result.passed else 'FAIL'} in {result.seconds:.0f}s")
    for key, value in result.figures.items():
        if isinstance(value, dict):
            value = json.dumps(value, default=str)
        print(f"  {key:36} {value}")
    for check in result.checks:
        print(
            f"  [{'ok' if check['ok'] else 'FAIL'}] {check['name']}"
            + (f" -- {check['detail']}" if check["detail"] else "")
        )
    if result.error:
        print(f"  ERROR {result.error}")
    sys.stdout.flush()


if __name__ == "__main__":
    started = time.monotonic()
    code = main()
    say(f"done in {time.monotonic() - started:.0f}s")
    sys.exit(code)
