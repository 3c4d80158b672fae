#!/usr/bin/env python3
"""How soon a gated pod's originals are bound to it, on the real local control plane.

A Deployment of N replicas (default 50) held by a scheduling gate, with the webhook registered
(stamping only) and the reconciler running: the pods stay unbound at generation 1 until the
reconciler binds their originals with a pod MAC (reconciler.gated). A watch of the namespace
sees each pod created (ADDED) and then carrying a pod MAC; it prints the time between the two
(p50, p99, max), the reconciler's writes and CPU per pod over the burst. Then every gate is
removed (one PATCH per pod): every pod must be sized after binding (applied), none refused.

    .venv/bin/python bench/gated_binding.py [--pods 50] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.admission_sizing import percentile  # noqa: E402
from bench.drills.observe import cpu_seconds, requests_by_verb  # noqa: E402
from bench.reconciler_burst import _gone, byte_compile, cluster_up  # noqa: E402
from devkit.configs import config_yaml  # noqa: E402
from devkit.kube import Kube, container, deployment, wait_for  # noqa: E402
from devkit.processes import Reconciler, Webhook, register_webhook, unregister_webhook, wait_webhook_active  # noqa: E402
from resizer.podstate import APPLIED_INSTANCE_TYPE, ORIGINALS_MAC  # noqa: E402

NAMESPACE = "bench-gated"
LABEL = "cloud.google.com/machine-family"
BENCH_LABEL = "workload-resizer.io/bench"
GATE = "example.com/bench-queue"


class Timeline(threading.Thread):
    """Watches the namespace's pods: when each was first seen, bound (a pod MAC) and applied."""

    def __init__(self, kube: Kube) -> None:
        super().__init__(daemon=True)
        self.kube = kube.own_connections()  # closed by this thread only (see Kube.own_connections)
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.bound_at_generation: dict[str, int] = {}
        self.applied: dict[str, float] = {}
        self.stop = threading.Event()
        self.rv = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods", limit="1")["metadata"]["resourceVersion"]

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                params = {"watch": "1", "resourceVersion": self.rv, "timeoutSeconds": "60"}
                try:
                    with self.kube.http.stream(
                        "GET", f"/api/v1/namespaces/{NAMESPACE}/pods", params=params, timeout=httpx.Timeout(30, read=90)
                    ) as resp:
                        for line in resp.iter_lines():
                            if self.stop.is_set():
                                return
                            if line:
                                self.record(orjson.loads(line))
                except (httpx.HTTPError, orjson.JSONDecodeError):
                    time.sleep(0.5)
        finally:
            self.kube.http.close()

    def record(self, event: dict[str, Any]) -> None:
        meta = (event.get("object") or {}).get("metadata") or {}
        if meta.get("resourceVersion"):
            self.rv = meta["resourceVersion"]
        if event.get("type") not in ("ADDED", "MODIFIED"):
            return
        now, name = time.monotonic(), meta["name"]
        annotations = meta.get("annotations") or {}
        self.created.setdefault(name, now)
        if str(annotations.get(ORIGINALS_MAC, "")).startswith("v1.p.") and name not in self.bound:
            self.bound[name] = now
            self.bound_at_generation[name] = meta.get("generation")
        if APPLIED_INSTANCE_TYPE in annotations:
            self.applied.setdefault(name, now)


def setup(kube: Kube) -> str:
    kube.delete(f"/api/v1/namespaces/{NAMESPACE}")
    wait_for("old bench namespace gone", lambda: _gone(kube, f"/api/v1/namespaces/{NAMESPACE}"), timeout=900)
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    kube.create(
        f"/api/v1/namespaces/{NAMESPACE}/configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "workload-resizer-config"},
            "data": {"config.yaml": config_yaml()},
        },
    )
    node = "gated-n4-0"
    subprocess.run(
        [
            str(REPO / "hack" / "cluster"),
            "add-node",
            node,
            "--family",
            "n4",
            "--cpu",
            "256",
            "--memory",
            "1Ti",
            "--pods",
            "1000",
            "--label",
            f"{BENCH_LABEL}=gated",
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wait_for(
        "default service account",
        lambda: kube.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"),
        timeout=30,
    )
    return node


def gated_burst(kube: Kube, kubeconfig: str, pods: int, timeout: float) -> dict[str, Any]:
    node = setup(kube)
    webhook = Webhook("--log-level=warning")
    hook = None
    reconciler = None
    timeline = None
    try:
        webhook.wait_ready()
        hook = register_webhook(
            kube, webhook.url, webhook.certs.ca_bundle, name="workload-resizer-bench-gated", namespaces=[NAMESPACE]
        )
        wait_webhook_active(kube, NAMESPACE)
        byte_compile()
        reconciler = Reconciler(kubeconfig, f"--config-namespace={NAMESPACE}", "--log-level=warning")
        reconciler.wait_ready()
        ready_cpu = cpu_seconds(reconciler.proc.pid)
        timeline = Timeline(kube)
        timeline.start()
        manifest = deployment(
            "gated",
            pods,
            [container("app", requests={"cpu": "1", "memory": "128Mi"}, limits={"cpu": "1", "memory": "128Mi"})],
            node_selector={LABEL: "n4", BENCH_LABEL: "gated"},
        )
        manifest["spec"]["template"]["spec"]["schedulingGates"] = [{"name": GATE}]
        kube.create(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments", manifest)
        wait_for(
            f"{pods} gated pods with their originals bound",
            lambda: len(timeline.bound) >= pods,
            timeout=timeout,
            interval=0.2,
        )
        binding_cpu = cpu_seconds(reconciler.proc.pid) - ready_cpu
        requests = requests_by_verb(reconciler.metrics())
        writes = {
            f"{m} {r}": round(v / pods, 3) for (m, r), v in sorted(requests.items()) if m in ("PATCH", "POST", "PUT")
        }
        to_bound = [timeline.bound[name] - timeline.created[name] for name in timeline.bound]
        for name in list(timeline.bound):
            kube.patch(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", {"spec": {"schedulingGates": None}})
        wait_for(
            f"{pods} pods sized after binding", lambda: len(timeline.applied) >= pods, timeout=timeout, interval=0.5
        )
        refused = [
            e
            for e in kube.get(f"/api/v1/namespaces/{NAMESPACE}/events")["items"]
            if e["reason"] == "OriginalsUnverified"
        ]
        return {
            "pods": pods,
            "bound_at_generation_1": sum(1 for g in timeline.bound_at_generation.values() if g == 1),
            "created_to_bound_s": {
                "p50": round(percentile(to_bound, 50), 3),
                "p99": round(percentile(to_bound, 99), 3),
                "max": round(max(to_bound), 3),
            },
            "reconciler_writes_per_pod_while_gated": writes,
            "reconciler_cpu_ms_per_binding": round(binding_cpu * 1000 / pods, 2),
            "sized_after_their_gate": len(timeline.applied),
            "originals_unverified": len(refused),
        }
    finally:
        if timeline is not None:
            timeline.stop.set()
        if reconciler is not None:
            reconciler.terminate()
        if hook is not None:
            unregister_webhook(kube, hook)
        webhook.terminate()
        kube.delete(f"/api/v1/namespaces/{NAMESPACE}")
        kube.delete(f"/api/v1/nodes/{node}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    kubeconfig = cluster_up()
    kube = Kube(kubeconfig)
    results: dict[str, Any] = {"loadavg_before": os.getloadavg()}
    results["burst"] = gated_burst(kube, kubeconfig, args.pods, args.timeout)
    results["loadavg_after"] = os.getloadavg()
    print(json.dumps(results, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
