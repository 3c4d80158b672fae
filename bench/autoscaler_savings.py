#!/usr/bin/env python3
"""Do freed requests become fewer nodes? The same workload under a real node autoscaler.

Karpenter (hack/karpenter: its KWOK provider, one NodePool per family n2d/n4/c3 of 8-CPU
nodes, consolidation WhenEmptyOrUnderutilized) scales the local cluster up from zero nodes
for one workload, twice: once without the product and once with it (the webhook with
--size-at-admission, registered for the bench namespace, and the reconciler). The workload,
a few hundred CPUs of requests (--scale multiplies the replicas):

| Deployment | replicas | requests per pod | pinned (nodeSelector on the family label) |
|---|---|---|---|
| web | 48 | 1 CPU, 512Mi | no |
| api | 64 | 1 CPU, 512Mi | n4 |
| batch | 32 | 2 CPU, 1Gi | c3 |
| cache | 32 | 1 CPU, 1Gi | n2d |
| worker | 48 | 500m, 256Mi | n4 |

Pinned pods are created at their size by the webhook, so Karpenter provisions for the sized
requests; an unpinned pod is sized after binding (a resize in place frees room on its node),
which only consolidation can turn into fewer nodes. Per run it prints:

- nodes provisioned per family, and requested vs allocatable CPU, when every pod is first
  Running, and the time from creating the Deployments to that moment;
- with the product, the time until every pod is recorded applied by the reconciler;
- over the settle window that follows (--settle, default 600 s): the node adds and removes
  Karpenter made (a loop would show as adds and removes that do not stop), the node count
  every 30 s, and at its end nodes per family, requested vs allocatable CPU, pods not Running;
- whether Karpenter consolidated: fewer nodes at the end of the window than at all-Running.

    .venv/bin/python bench/autoscaler_savings.py [--scale 1] [--settle 600] [--consolidate-after 30s]
        [--runs without,with] [--json out.json]

Uses the hack/cluster of this checkout (`hack/cluster up`; left running) and starts Karpenter
on it (`hack/karpenter up`; stopped with `hack/karpenter down` at the end).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.reconciler_burst import byte_compile, cluster_up, fresh_namespace  # noqa: E402
from devkit.configs import config_yaml  # noqa: E402
from devkit.kube import Kube, container, deployment, wait_for  # noqa: E402
from devkit.processes import Reconciler, Webhook, register_webhook, unregister_webhook, wait_webhook_active  # noqa: E402
from resizer import parse_quantity  # noqa: E402
from resizer.podstate import APPLIED_INSTANCE_TYPE, SIZED_AT_ADMISSION  # noqa: E402

NAMESPACE = "bench-autoscaler"
FAMILY_LABEL = "cloud.google.com/machine-family"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
HACK_KARPENTER = REPO / "hack" / "karpenter"
CONFIG = config_yaml()
SAMPLE_EVERY = 30.0


@dataclass(frozen=True)
class Workload:
    name: str
    replicas: int
    cpu: str
    memory: str
    family: str | None  # the nodeSelector's family; None: unpinned


WORKLOADS = (
    Workload("web", 48, "1", "512Mi", None),
    Workload("api", 64, "1", "512Mi", "n4"),
    Workload("batch", 32, "2", "1Gi", "c3"),
    Workload("cache", 32, "1", "1Gi", "n2d"),
    Workload("worker", 48, "500m", "256Mi", "n4"),
)


# ------------------------------------------------------------------ pure: what the cluster holds


def pod_cpu(pod: dict[str, Any]) -> Fraction:
    """The pod's CPU request as the scheduler counts it (its containers' sum)."""
    return sum(
        (
            parse_quantity(((c.get("resources") or {}).get("requests") or {}).get("cpu", "0"))
            for c in pod["spec"]["containers"]
        ),
        Fraction(0),
    )


def cpu_by_family(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per family of the autoscaler's nodes: node count, allocatable CPU and the CPU the bound
    pods request (cores, rounded to 0.01); nodes without the family label count as "-"."""
    family_of = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(FAMILY_LABEL, "-") for n in nodes}
    figures: dict[str, dict[str, Any]] = {}
    for node in nodes:
        row = figures.setdefault(
            family_of[node["metadata"]["name"]], {"nodes": 0, "allocatable": Fraction(0), "requested": Fraction(0)}
        )
        row["nodes"] += 1
        row["allocatable"] += parse_quantity(node["status"].get("allocatable", {}).get("cpu", "0"))
    for pod in pods:
        family = family_of.get(pod["spec"].get("nodeName") or "")
        if family is not None:
            figures[family]["requested"] += pod_cpu(pod)
    return {
        family: {
            "nodes": row["nodes"],
            "allocatable_cpu": round(float(row["allocatable"]), 2),
            "requested_cpu": round(float(row["requested"]), 2),
        }
        for family, row in sorted(figures.items())
    }


def totals(by_family: dict[str, dict[str, Any]]) -> dict[str, Any]:
    nodes = sum(row["nodes"] for row in by_family.values())
    allocatable = sum(row["allocatable_cpu"] for row in by_family.values())
    requested = sum(row["requested_cpu"] for row in by_family.values())
    return {
        "nodes": nodes,
        "allocatable_cpu": round(allocatable, 2),
        "requested_cpu": round(requested, 2),
        "requested_of_allocatable": round(requested / allocatable, 3) if allocatable else 0.0,
    }


def saving(without: dict[str, Any], with_product: dict[str, Any]) -> dict[str, Any]:
    """Nodes and allocatable CPU of the two runs, at all-Running and at the window's end, and
    the fraction of nodes the product saved at the end."""
    figures: dict[str, Any] = {}
    for moment in ("at_all_running", "at_window_end"):
        for what in ("nodes", "allocatable_cpu"):
            figures[f"{what}_{moment}"] = {
                "without": without[moment]["total"][what],
                "with": with_product[moment]["total"][what],
            }
    before, after = without["at_window_end"]["total"]["nodes"], with_product["at_window_end"]["total"]["nodes"]
    figures["nodes_saved_at_window_end"] = round(1 - after / before, 3) if before else 0.0
    return figures


def churn(samples: list[set[str]]) -> tuple[int, int]:
    """(adds, removes) between consecutive samples of the set of node names."""
    adds = sum(len(after - before) for before, after in zip(samples, samples[1:], strict=False))
    removes = sum(len(before - after) for before, after in zip(samples, samples[1:], strict=False))
    return adds, removes


# ------------------------------------------------------------------ the cluster


def karpenter(*args: str) -> None:
    subprocess.run([str(HACK_KARPENTER), *args], check=True, stdout=subprocess.DEVNULL)


def autoscaled_nodes(kube: Kube) -> list[dict[str, Any]]:
    return kube.get("/api/v1/nodes", labelSelector=NODEPOOL_LABEL)["items"]


def bench_pods(kube: Kube) -> list[dict[str, Any]]:
    return kube.pods(NAMESPACE)


def manifests(scale: float) -> list[dict[str, Any]]:
    return [
        deployment(
            w.name,
            max(1, round(w.replicas * scale)),
            [container("app", requests={"cpu": w.cpu, "memory": w.memory}, limits={"cpu": w.cpu, "memory": w.memory})],
            node_selector={FAMILY_LABEL: w.family} if w.family else None,
        )
        for w in WORKLOADS
    ]


def reset(kube: Kube) -> None:
    """No bench namespace and no autoscaled node: every run starts from zero nodes."""
    kube.delete("/apis/karpenter.sh/v1/nodeclaims")
    fresh_namespace(kube, NAMESPACE, CONFIG, timeout=600)
    wait_for("the autoscaler's nodes gone", lambda: not autoscaled_nodes(kube), timeout=600, interval=1)
    wait_for(
        "default service account",
        lambda: kube.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"),
        timeout=30,
    )


def all_running(pods: list[dict[str, Any]], replicas: int) -> bool:
    running = [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]
    return len(running) >= replicas


def all_applied(pods: list[dict[str, Any]], replicas: int) -> bool:
    return sum(1 for p in pods if APPLIED_INSTANCE_TYPE in (p["metadata"].get("annotations") or {})) >= replicas


def snapshot(kube: Kube) -> dict[str, Any]:
    by_family = cpu_by_family(autoscaled_nodes(kube), bench_pods(kube))
    return {"by_family": by_family, "total": totals(by_family)}


def start_product(kube: Kube, kubeconfig: str) -> tuple[Webhook, str, Reconciler]:
    webhook = Webhook(
        "--log-level=warning",
        "--size-at-admission=true",
        f"--kubeconfig={kubeconfig}",
        f"--config-namespace={NAMESPACE}",
    )
    webhook.wait_ready()
    hook = register_webhook(
        kube, webhook.url, webhook.certs.ca_bundle, name="workload-resizer-bench-autoscaler", namespaces=[NAMESPACE]
    )
    wait_webhook_active(kube, NAMESPACE)
    byte_compile()
    reconciler = Reconciler(kubeconfig, f"--config-namespace={NAMESPACE}", "--log-level=warning")
    reconciler.wait_ready()
    return webhook, hook, reconciler


def run(kube: Kube, kubeconfig: str, with_product: bool, scale: float, settle: float, timeout: float) -> dict[str, Any]:
    reset(kube)
    product = start_product(kube, kubeconfig) if with_product else None
    try:
        deployments = manifests(scale)
        replicas = sum(d["spec"]["replicas"] for d in deployments)
        created = time.monotonic()
        for manifest in deployments:
            kube.create(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments", manifest)
        wait_for(
            f"{replicas} pods Running", lambda: all_running(bench_pods(kube), replicas), timeout=timeout, interval=1
        )
        to_running = time.monotonic() - created
        at_running = snapshot(kube)
        pods = bench_pods(kube)
        figures: dict[str, Any] = {
            "run": "with the product" if with_product else "without the product",
            "replicas": replicas,
            "sized_at_admission": sum(
                1 for p in pods if SIZED_AT_ADMISSION in (p["metadata"].get("annotations") or {})
            ),
            "create_to_all_running_s": round(to_running, 1),
            "at_all_running": at_running,
        }
        window_start = time.monotonic()
        if with_product:
            wait_for(
                f"{replicas} pods recorded applied",
                lambda: all_applied(bench_pods(kube), replicas),
                timeout=timeout,
                interval=1,
            )
            figures["create_to_all_applied_s"] = round(time.monotonic() - created, 1)
        figures["settle_window"] = settle_window(kube, window_start, settle)
        end = snapshot(kube)
        pods = bench_pods(kube)
        figures["at_window_end"] = end
        figures["pods_not_running_at_end"] = sum(1 for p in pods if (p.get("status") or {}).get("phase") != "Running")
        figures["consolidated"] = end["total"]["nodes"] < at_running["total"]["nodes"]
        return figures
    finally:
        if product is not None:
            webhook, hook, reconciler = product
            reconciler.terminate()
            unregister_webhook(kube, hook)
            webhook.terminate()


def settle_window(kube: Kube, start: float, seconds: float) -> dict[str, Any]:
    """Node names sampled every second from `start` for `seconds`: adds, removes, count every 30 s."""
    samples: list[set[str]] = []
    counts: list[int] = []
    while True:
        elapsed = time.monotonic() - start
        samples.append({n["metadata"]["name"] for n in autoscaled_nodes(kube)})
        if elapsed >= len(counts) * SAMPLE_EVERY:
            counts.append(len(samples[-1]))
        if elapsed >= seconds:
            break
        time.sleep(1)
    adds, removes = churn(samples)
    families = Counter(n["metadata"]["labels"].get(FAMILY_LABEL, "-") for n in autoscaled_nodes(kube))
    return {
        "seconds": seconds,
        "node_adds": adds,
        "node_removes": removes,
        f"nodes_every_{SAMPLE_EVERY:.0f}s": counts,
        "nodes_by_family_at_end": dict(sorted(families.items())),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every Deployment's replicas")
    parser.add_argument("--settle", type=float, default=600, help="settle window after all pods Running, in seconds")
    parser.add_argument("--consolidate-after", default="30s", help="the NodePools' disruption.consolidateAfter")
    parser.add_argument("--runs", default="without,with", help="which runs, in order: without, with")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    if not runs or set(runs) - {"without", "with"}:
        parser.error("--runs takes without and/or with")
    kubeconfig = cluster_up()
    kube = Kube(kubeconfig)
    karpenter("up", f"--consolidate-after={args.consolidate_after}")
    results = []
    try:
        for name in runs:
            figures = run(kube, kubeconfig, name == "with", args.scale, args.settle, args.timeout)
            print(json.dumps(figures, indent=2), flush=True)
            results.append(figures)
    finally:
        kube.delete(f"/api/v1/namespaces/{NAMESPACE}")
        karpenter("down")
    if runs == ["without", "with"]:
        summary = saving(*results)
        print(json.dumps({"saving": summary}, indent=2))
        results.append({"saving": summary})
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
