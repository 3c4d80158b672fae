#!/usr/bin/env python3
"""Burst benchmark of the reconciler against the real local control plane.

A Deployment scaled to N replicas (default 1,000) across n2d/n4/c3 KWOK nodes, with
the webhook registered (so originals are stamped at admission) and the reconciler
running. Prints:

- time from the first binding to the last applied annotation, and resizes/s;
- time the scheduler took to bind them all (a floor we cannot beat);
- API requests per pod by verb and resource, from the reconciler's own metrics
  (target: <= 3 writes per webhook-stamped pod, no per-pod node GET);
- the reconciler's peak RSS;
- the reconciler's CPU: user+system seconds of its process (from /proc/<pid>/stat),
  startup included, up to the last aligned pod, and per aligned pod; the machine's
  load average and the hypervisor's steal over the burst (on a VM whose host is busy,
  steal slows everything, and the same work costs every process more CPU-seconds:
  compare figures from runs with little steal);
- request -> actuation latency p50/p99 (from the Resized Events: Resized waits for the kubelet);
- the ceiling: how long the apiserver takes to accept N bare pods/resize patches
  sent by a minimal async client (same run, same pods).

    .venv/bin/python bench/reconciler_burst.py [--replicas 1000] [--json out.json]
    .venv/bin/python bench/reconciler_burst.py --replicas 500 --no-webhook   # the reconciler stamps originals
    .venv/bin/python bench/reconciler_burst.py --replicas 500 --no-webhook --controller go

`--controller go` runs ``bench/goreconciler`` instead: the design's controller written
with controller-runtime and its defaults (one worker, an uncached Node GET per pod, the
three writes as separate PATCHes, client-go's EventRecorder), built with `go build`. Same
cluster, same burst, same figures, so Python and Go can be compared run by run
(alternate them: the machine's speed moves between runs). `--controller both` runs
Python then Go, `--rounds K` repeats that, and the summary prints Python/Go ratios.

Where the CPU goes: `--profile FILE` runs py-spy (`pip install py-spy`) on the reconciler
from before the Deployment is created until the last pod is aligned, as

    py-spy record -r 200 -f raw -o FILE --pid <reconciler pid>

(`-f raw`: collapsed stacks, one per line with its sample count; `--profile-format
speedscope` for https://www.speedscope.app). Summarise with
`.venv/bin/python bench/profile_top.py FILE`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.drills.observe import PodTimeline, bare_resize_ceiling, cpu_seconds, peak_rss_mb, requests_by_verb  # noqa: E402
from devkit.configs import config_yaml  # noqa: E402
from devkit.kube import ApiError, Kube, container, deployment, wait_for  # noqa: E402
from devkit.metrics import metric_sum, samples  # noqa: E402
from devkit.processes import (  # noqa: E402
    Process,
    Reconciler,
    Webhook,
    free_port,
    register_webhook,
    unregister_webhook,
    wait_webhook_active,
)

NAMESPACE = "bench-burst"
PRODUCT_PACKAGES = ("resizer", "reconciler", "app", "ops", "certs")
BENCH_LABEL = "workload-resizer.io/bench"
CONFIG = config_yaml(cpu=("10m", "16"), memory=("16Mi", "32Gi"))


def machine_cpu_times() -> list[int]:
    """The machine's cumulative CPU times (user nice system idle iowait irq softirq steal), in ticks."""
    with open("/proc/stat") as stat:
        return [int(v) for v in stat.readline().split()[1:9]]


def steal_fraction(before: list[int], after: list[int]) -> float:
    deltas = [b - a for a, b in zip(before, after, strict=True)]
    return deltas[7] / sum(deltas) if sum(deltas) else 0.0


def cluster_up() -> str:
    proc = subprocess.run([str(REPO / "hack" / "cluster"), "up"], stdout=subprocess.PIPE, text=True, check=True)
    return next(line.split("=", 1)[1] for line in proc.stdout.splitlines() if line.startswith("export KUBECONFIG="))


def fresh_namespace(kube: Kube, namespace: str, config: str | None = None, timeout: float = 900) -> None:
    """`namespace` deleted (waited out) and created again, with the product's ConfigMap if `config`."""
    kube.delete(f"/api/v1/namespaces/{namespace}")
    wait_for("old bench namespace gone", lambda: _gone(kube, f"/api/v1/namespaces/{namespace}"), timeout=timeout)
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    if config is not None:
        kube.create(
            f"/api/v1/namespaces/{namespace}/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "workload-resizer-config"},
                "data": {"config.yaml": config},
            },
        )


def setup(kube: Kube, nodes_per_family: int) -> list[str]:
    fresh_namespace(kube, NAMESPACE, CONFIG)
    nodes = []
    for family in ("n2d", "n4", "c3"):
        for i in range(nodes_per_family):
            name = f"burst-{family}-{i}"
            subprocess.run(
                [
                    str(REPO / "hack" / "cluster"),
                    "add-node",
                    name,
                    "--family",
                    family,
                    "--cpu",
                    "64",
                    "--memory",
                    "256Gi",
                    "--pods",
                    "1000",
                    "--label",
                    f"{BENCH_LABEL}=burst",
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            nodes.append(name)
    wait_for(
        "default service account",
        lambda: kube.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"),
        timeout=30,
    )
    return nodes


def _gone(kube: Kube, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError as err:
        return err.status == 404
    return False


GO_DIR = REPO / "bench" / "goreconciler"


class GoReconciler(Reconciler):
    """bench/goreconciler: the design's controller on controller-runtime, for comparison (the
    same metrics and readiness endpoints as ours, so only the command line differs)."""

    def __init__(self, binary: Path, kubeconfig: str, *flags: str) -> None:
        self.metrics_port = free_port()
        self.health_port = free_port()
        Process.__init__(
            self,
            "goreconciler",
            [
                str(binary),
                f"--kubeconfig={kubeconfig}",
                f"--config-namespace={NAMESPACE}",
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
                "--config-refresh-interval=2s",
                *flags,
            ],
        )


def build_go_reconciler() -> Path:
    if not shutil.which("go"):
        sys.exit("--controller go needs the go toolchain")
    target = REPO / "bench" / "out" / "goreconciler"
    target.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["go", "build", "-o", str(target), "."], cwd=GO_DIR, check=True)
    return target


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=1000)
    parser.add_argument("--nodes-per-family", type=int, default=4)
    parser.add_argument(
        "--controller",
        choices=("python", "go", "both"),
        default="python",
        help="our reconciler, the controller-runtime baseline, or both alternately",
    )
    parser.add_argument("--rounds", type=int, default=1, help="repeat the run (or the python/go pair) K times")
    parser.add_argument(
        "--go-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="extra flag of bench/goreconciler (repeatable), e.g. --go-flag=--zap-log-level=info",
    )
    parser.add_argument("--concurrency", type=int, default=16, help="reconciler --concurrency")
    parser.add_argument("--qps", type=float, default=500, help="reconciler --kube-api-qps")
    parser.add_argument("--burst", type=int, default=1000, help="reconciler --kube-api-burst")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument(
        "--no-webhook",
        action="store_true",
        help="no webhook: the reconciler stamps the originals (one more write per pod)",
    )
    parser.add_argument("--no-ceiling", action="store_true", help="skip the bare-resize ceiling")
    parser.add_argument("--profile", help="record a py-spy profile (raw collapsed stacks) of the reconciler here")
    parser.add_argument("--profile-format", default="raw", choices=["raw", "speedscope", "flamegraph"])
    parser.add_argument(
        "--profile-native",
        action="store_true",
        help="py-spy --native: also sample C/Cython frames (uvloop, ssl, orjson)",
    )
    parser.add_argument("--json", help="also write the figures to this file (a list when there are several runs)")
    parser.add_argument("--keep", action="store_true", help="leave the namespace and nodes in place")
    args = parser.parse_args()
    if args.profile and (args.controller != "python" or args.rounds != 1):
        parser.error("--profile profiles one run of the python reconciler")

    kubeconfig = cluster_up()
    kube = Kube(kubeconfig)
    go_binary = build_go_reconciler() if args.controller in ("go", "both") else None
    order = {"python": ["python"], "go": ["go"], "both": ["python", "go"]}[args.controller]
    runs: list[dict] = []
    for _ in range(args.rounds):
        for controller in order:
            figures = run_burst(kube, kubeconfig, args, go_binary if controller == "go" else None)
            _print(figures)
            runs.append(figures)
    if args.controller == "both":
        _print_ratios(runs)
    if args.json:
        Path(args.json).write_text(json.dumps(runs[0] if len(runs) == 1 else runs, indent=2))
    return 0


def run_burst(kube: Kube, kubeconfig: str, args: argparse.Namespace, go_binary: Path | None) -> dict:
    """One burst on a fresh namespace and fresh nodes: our reconciler, or the Go one if `go_binary`."""
    nodes = setup(kube, args.nodes_per_family)
    webhook, hook_name = None, None
    if not args.no_webhook:
        webhook = Webhook("--log-level=warning")
        webhook.wait_ready()
        hook_name = register_webhook(
            kube, webhook.url, webhook.certs.ca_bundle, name="workload-resizer-bench", namespaces=[NAMESPACE]
        )
        wait_webhook_active(kube, NAMESPACE)
    reconciler: Reconciler
    if go_binary is None:
        byte_compile()
        reconciler = Reconciler(
            kubeconfig,
            f"--config-namespace={NAMESPACE}",
            f"--concurrency={args.concurrency}",
            f"--kube-api-qps={args.qps}",
            f"--kube-api-burst={args.burst}",
            "--log-level=warning",
        )
    else:
        reconciler = GoReconciler(go_binary, kubeconfig, *args.go_flag)
    timeline = PodTimeline(kube, NAMESPACE)
    profiler: subprocess.Popen | None = None
    try:
        reconciler.wait_ready()
        ready_cpu = cpu_seconds(reconciler.proc.pid)
        load_before = os.getloadavg()
        cpu_times_before = machine_cpu_times()
        if args.profile:
            profiler = start_profiler(reconciler.proc.pid, args.profile, args.profile_format, args.profile_native)
        timeline.start()
        manifest = deployment(
            "burst",
            args.replicas,
            [container("app", requests={"cpu": "100m", "memory": "128Mi"}, limits={"cpu": "100m", "memory": "128Mi"})],
            node_selector={BENCH_LABEL: "burst"},
        )
        created = time.monotonic()
        kube.create(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments", manifest)
        wait_for(
            f"{args.replicas} aligned pods",
            lambda: len(timeline.applied) >= args.replicas,
            timeout=args.timeout,
            interval=0.5,
        )
        burst_cpu = cpu_seconds(reconciler.proc.pid)
        steal = steal_fraction(cpu_times_before, machine_cpu_times())
        timeline.stop()
        if profiler is not None:
            stop_profiler(profiler)
        first_bound = min(timeline.bound.values())
        last_bound = max(timeline.bound.values())
        last_applied = max(timeline.applied.values())
        align_seconds = last_applied - first_bound
        n = args.replicas
        metrics_text = reconciler.metrics()
        requests = requests_by_verb(
            metrics_text, "rest_client_requests_total" if go_binary is None else "bench_rest_client_requests_total"
        )
        writes = sum(v for (m, _), v in requests.items() if m in ("PATCH", "POST", "PUT", "DELETE"))
        figures = {
            "controller": "python" if go_binary is None else "go (controller-runtime, bench/goreconciler)",
            "replicas": n,
            "nodes": len(nodes),
            "create_to_last_aligned_s": round(last_applied - created, 2),
            "first_bound_to_last_aligned_s": round(align_seconds, 2),
            "first_bound_to_last_bound_s": round(last_bound - first_bound, 2),
            "resizes_per_s": round(n / align_seconds, 1),
            "requests_per_pod": {f"{m} {r}": round(v / n, 3) for (m, r), v in sorted(requests.items())},
            "writes_per_pod": round(writes / n, 3),
            # The webhook (failurePolicy Ignore, 3 s timeout) can time out on a loaded machine: such
            # pods are admitted unstamped and the reconciler writes their originals (one PATCH more).
            "pods_stamped_at_admission": sum(1 for name in timeline.applied if timeline.stamped_at_admission.get(name)),
            "node_gets_per_pod": round(requests.get(("GET", "nodes"), 0) / n, 4),
            # How often the work queue handed a pod out, and how often a watch event put it in.
            "reconciles_per_pod": round(metric_sum(metrics_text, "controller_runtime_reconcile_total") / n, 2),
            "queue_adds_per_pod": round(metric_sum(metrics_text, "workqueue_adds_total") / n, 2),
            # Ours only: which decision each reconcile took (reconciler.decide's actions).
            "actions_per_pod": {
                labels["action"]: round(value / n, 3)
                for labels, value in samples(metrics_text, "workload_resizer_reconcile_actions_total")
                if value
            },
            "reconciler_peak_rss_mb": round(peak_rss_mb(reconciler.proc.pid), 1),
            "reconciler_cpu_s": round(burst_cpu, 2),
            "reconciler_startup_cpu_s": round(ready_cpu, 2),
            "reconciler_cpu_ms_per_aligned_pod": round(burst_cpu * 1000 / n, 2),
            "reconciler_cpu_ms_per_pod_after_startup": round((burst_cpu - ready_cpu) * 1000 / n, 2),
            "webhook": not args.no_webhook,
            "load_average_before": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            # CPU time the hypervisor gave to other guests while this machine wanted it: a VM
            # with steal runs slower and every process's CPU-seconds per operation go up.
            "steal_percent": round(100 * steal, 1),
        }
        figures.update(actuation_latency(kube))
        if not args.no_ceiling:
            pods = kube.pods(NAMESPACE, "app=burst")
            try:
                ceiling = asyncio.run(bare_resize_ceiling(kube, NAMESPACE, pods, 32))
            except Exception as err:  # noqa: BLE001 - the burst's figures stand without it
                figures["bare_resize_ceiling_error"] = repr(err)
            else:
                figures["bare_resize_ceiling_s"] = round(ceiling, 2)
                figures["align_vs_ceiling"] = round(align_seconds / ceiling, 2)
        return figures
    finally:
        timeline.stop()
        if profiler is not None and profiler.poll() is None:
            profiler.kill()
        reconciler.terminate()
        if webhook is not None and hook_name is not None:
            webhook.terminate()
            unregister_webhook(kube, hook_name)
        if not args.keep:
            kube.delete(f"/api/v1/namespaces/{NAMESPACE}")
            for node in nodes:
                kube.delete(f"/api/v1/nodes/{node}")


def _print_ratios(runs: list[dict]) -> None:
    """Python/Go per pair of consecutive runs: the machine's speed moves less within a pair."""
    print("\npython / go, pair by pair (CPU per aligned pod, alignment time, peak RSS):")
    ratios = []
    for py, go in zip(runs[0::2], runs[1::2], strict=True):
        cpu = py["reconciler_cpu_ms_per_aligned_pod"] / go["reconciler_cpu_ms_per_aligned_pod"]
        ratios.append(cpu)
        print(
            f"  cpu {py['reconciler_cpu_ms_per_aligned_pod']:.2f} / {go['reconciler_cpu_ms_per_aligned_pod']:.2f} ms"
            f" = {cpu:.2f}x   align {py['first_bound_to_last_aligned_s']:.1f} / "
            f"{go['first_bound_to_last_aligned_s']:.1f} s   rss {py['reconciler_peak_rss_mb']:.1f} / "
            f"{go['reconciler_peak_rss_mb']:.1f} MiB   writes/pod {py['writes_per_pod']} / {go['writes_per_pod']}"
            f"   steal {py['steal_percent']} / {go['steal_percent']} %"
        )
    if ratios:
        print(f"  median cpu ratio {sorted(ratios)[len(ratios) // 2]:.2f}x over {len(ratios)} pair(s)")


def actuation_latency(kube: Kube) -> dict[str, float]:
    """p50/p99 of request -> actuation, from the Resized Events' "actuated <s>s after the request"."""
    import re

    events = kube.get(f"/api/v1/namespaces/{NAMESPACE}/events", fieldSelector="source=workload-resizer")["items"]
    latencies = sorted(
        float(m.group(1))
        for e in events
        if (m := re.search(r"actuated ([0-9.]+)s after the request", e.get("message") or ""))
    )
    if not latencies:
        return {}
    pick = lambda share: latencies[min(len(latencies) - 1, int(share * len(latencies)))]  # noqa: E731
    return {
        "actuation_latency_p50_s": pick(0.50),
        "actuation_latency_p99_s": pick(0.99),
        "actuation_latency_samples": len(latencies),
    }


def byte_compile() -> None:
    """Compile the product's modules as the image does (pip byte-compiles on install).

    The checkout is an editable install and PYTHONDONTWRITEBYTECODE is often set, so
    without this every start of the reconciler compiles its sources again: ~0.1
    CPU-second of "startup" that a deployed reconciler does not pay.
    """
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", *(str(REPO / p) for p in PRODUCT_PACKAGES)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def start_profiler(pid: int, out: str, fmt: str, native: bool = False) -> subprocess.Popen:
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(py_spy).exists():
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")
    proc = subprocess.Popen(
        [py_spy, "record", "-r", "200", "-f", fmt, "-o", out, "--pid", str(pid), *(["--native"] if native else [])],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(1)  # attached before the burst starts
    return proc


def stop_profiler(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()


def _print(figures: dict) -> None:
    print(
        f"\n{figures['controller']} reconciler burst: {figures['replicas']} pods on {figures['nodes']} KWOK nodes "
        f"(n2d/n4/c3), machine: {os.cpu_count()} cores"
    )
    for key, value in figures.items():
        if key == "controller":
            continue
        if key == "requests_per_pod":
            print("  API requests per pod (reconciler):")
            for name, per_pod in value.items():
                print(f"    {name:28} {per_pod}")
        else:
            print(f"  {key:34} {value}")


if __name__ == "__main__":
    sys.exit(main())
