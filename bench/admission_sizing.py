#!/usr/bin/env python3
"""Sizing at admission vs the path of today, on the real local control plane.

Part 1, a burst: a Deployment of N replicas (default 500) pinned to n4 by a nodeSelector on the
node-type label, across KWOK n4 nodes, with the webhook registered and the reconciler running;
once with the webhook stamping only (today: sized after binding) and once with
--size-at-admission. Per mode it prints:

- API writes per pod: the reconciler's own (PATCH pods, PATCH pods/resize, POST/PATCH events,
  from its rest_client_requests_total) and the pods/resize requests the apiserver served;
- time from the Deployment's CREATE to each pod Running at its final size (spec 800m, the n4
  size of 1 CPU): p50, p99, last;
- the reconciler's CPU seconds from its readiness to the last pod recorded applied, and the
  webhook's CPU seconds over the burst (its main process: these reviews are decided inline).

Part 2, the webhook alone: M reviews (default 2,000) of an n4-pinned pod sent one after another
over one keep-alive TLS connection to a webhook with --size-at-admission (node lookups, sizing)
and to one without (stamp only): client-side latency p50/p99 per review, the webhook's CPU per
review, and the load generator's own CPU (it shares the machine).

    .venv/bin/python bench/admission_sizing.py [--replicas 500] [--reviews 2000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.drills.observe import cpu_seconds, requests_by_verb  # noqa: E402
from bench.reconciler_burst import byte_compile, cluster_up, fresh_namespace  # noqa: E402
from devkit.configs import config_yaml  # noqa: E402
from devkit.kube import Kube, container, deployment, wait_for  # noqa: E402
from devkit.processes import Reconciler, Webhook, register_webhook, unregister_webhook, wait_webhook_active  # noqa: E402
from resizer import parse_quantity  # noqa: E402
from resizer.podstate import APPLIED_INSTANCE_TYPE, SIZED_AT_ADMISSION  # noqa: E402

NAMESPACE = "bench-admission"
LABEL = "cloud.google.com/machine-family"
BENCH_LABEL = "workload-resizer.io/bench"
CONFIG = config_yaml()
FINAL_CPU = parse_quantity("800m")


class Timeline(threading.Thread):
    """Watches the namespace's pods: when each is first Running with its final cpu, and applied."""

    def __init__(self, kube: Kube) -> None:
        super().__init__(daemon=True)
        self.kube = kube.own_connections()  # closed by this thread only (see Kube.own_connections)
        self.final: dict[str, float] = {}
        self.applied: dict[str, float] = {}
        self.sized_at_admission: set[str] = set()
        self.stop = threading.Event()
        self.rv = kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods", limit="1")["metadata"]["resourceVersion"]

    def run(self) -> None:
        try:
            self.watch()
        finally:
            self.kube.http.close()

    def watch(self) -> None:
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

    def record(self, event: dict[str, Any]) -> None:
        pod = event.get("object") or {}
        meta = pod.get("metadata") or {}
        if meta.get("resourceVersion"):
            self.rv = meta["resourceVersion"]
        if event.get("type") not in ("ADDED", "MODIFIED"):
            return
        now, name = time.monotonic(), meta["name"]
        annotations = meta.get("annotations") or {}
        if SIZED_AT_ADMISSION in annotations:
            self.sized_at_admission.add(name)
        cpu = (
            (((pod.get("spec") or {}).get("containers") or [{}])[0].get("resources") or {})
            .get("requests", {})
            .get("cpu")
        )
        if (pod.get("status") or {}).get("phase") == "Running" and cpu and parse_quantity(cpu) == FINAL_CPU:
            self.final.setdefault(name, now)
        if APPLIED_INSTANCE_TYPE in annotations:
            self.applied.setdefault(name, now)


def setup(kube: Kube, nodes: int) -> list[str]:
    fresh_namespace(kube, NAMESPACE, CONFIG)
    names = []
    for i in range(nodes):
        name = f"admission-n4-{i}"
        subprocess.run(
            [
                str(REPO / "hack" / "cluster"),
                "add-node",
                name,
                "--family",
                "n4",
                "--cpu",
                "256",
                "--memory",
                "1Ti",
                "--pods",
                "1000",
                "--label",
                f"{BENCH_LABEL}=admission",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        names.append(name)
    wait_for(
        "default service account",
        lambda: kube.get(f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"),
        timeout=30,
    )
    return names


def sizing_flags(kubeconfig: str) -> list[str]:
    return ["--size-at-admission=true", f"--kubeconfig={kubeconfig}", f"--config-namespace={NAMESPACE}"]


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))]


def resizes_served(kube: Kube) -> float:
    text = kube.http.get("/metrics").text
    total = 0.0
    for line in text.splitlines():
        if (
            line.startswith("apiserver_request_total{")
            and 'resource="pods"' in line
            and 'subresource="resize"' in line
            and 'verb="PATCH"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def burst(kube: Kube, kubeconfig: str, replicas: int, sized: bool, timeout: float) -> dict[str, Any]:
    nodes = setup(kube, max(1, replicas // 400 + 1))
    webhook = Webhook("--log-level=warning", *(sizing_flags(kubeconfig) if sized else []))
    hook = None
    reconciler = None
    timeline = None
    try:
        webhook.wait_ready()
        hook = register_webhook(
            kube, webhook.url, webhook.certs.ca_bundle, name="workload-resizer-bench-admission", namespaces=[NAMESPACE]
        )
        wait_webhook_active(kube, NAMESPACE)
        if sized:  # the webhook's watches have synced once a pinned probe comes back sized
            probe = deployment("probe", 1, [container("app", {"cpu": "1"}, {"cpu": "1"})], node_selector={LABEL: "n4"})[
                "spec"
            ]["template"]
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "generateName": "probe-",
                    "ownerReferences": [
                        {
                            "apiVersion": "apps/v1",
                            "kind": "ReplicaSet",
                            "name": "probe",
                            "uid": str(uuid.uuid4()),
                            "controller": True,
                        }
                    ],
                },
                "spec": probe["spec"],
            }
            wait_for(
                "the webhook sizing",
                lambda: (
                    SIZED_AT_ADMISSION
                    in (
                        kube.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod, params={"dryRun": "All"})[
                            "metadata"
                        ].get("annotations")
                        or {}
                    )
                ),
                timeout=60,
            )
        byte_compile()
        reconciler = Reconciler(kubeconfig, f"--config-namespace={NAMESPACE}", "--log-level=warning")
        reconciler.wait_ready()
        ready_cpu = cpu_seconds(reconciler.proc.pid)
        webhook_cpu = cpu_seconds(webhook.proc.pid)
        resizes_before = resizes_served(kube)
        timeline = Timeline(kube)
        timeline.start()
        manifest = deployment(
            "pinned",
            replicas,
            [container("app", requests={"cpu": "1", "memory": "128Mi"}, limits={"cpu": "1", "memory": "128Mi"})],
            node_selector={LABEL: "n4", BENCH_LABEL: "admission"},
        )
        created = time.monotonic()
        kube.create(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments", manifest)
        wait_for(
            f"{replicas} pods at their final size and recorded applied",
            lambda: len(timeline.final) >= replicas and len(timeline.applied) >= replicas,
            timeout=timeout,
            interval=0.5,
        )
        reconciler_cpu = cpu_seconds(reconciler.proc.pid) - ready_cpu
        webhook_cpu = cpu_seconds(webhook.proc.pid) - webhook_cpu
        requests = requests_by_verb(reconciler.metrics())
        writes = {
            f"{m} {r}": round(v / replicas, 3)
            for (m, r), v in sorted(requests.items())
            if m in ("PATCH", "POST", "PUT")
        }
        to_final = [t - created for t in timeline.final.values()]
        return {
            "mode": "sized at admission" if sized else "today (sized after binding)",
            "replicas": replicas,
            "pods_sized_at_admission": len(timeline.sized_at_admission),
            "reconciler_writes_per_pod": writes,
            "reconciler_writes_per_pod_total": round(sum(writes.values()), 3),
            "apiserver_pod_resizes_per_pod": round((resizes_served(kube) - resizes_before) / replicas, 3),
            "create_to_running_at_final_size_s": {
                "p50": round(percentile(to_final, 50), 2),
                "p99": round(percentile(to_final, 99), 2),
                "last": round(max(to_final), 2),
            },
            "create_to_last_applied_s": round(max(timeline.applied.values()) - created, 2),
            "reconciler_cpu_s": round(reconciler_cpu, 2),
            "reconciler_cpu_ms_per_pod": round(reconciler_cpu * 1000 / replicas, 2),
            "webhook_cpu_s": round(webhook_cpu, 2),
            "webhook_cpu_ms_per_pod": round(webhook_cpu * 1000 / replicas, 3),
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
        for node in nodes:
            kube.delete(f"/api/v1/nodes/{node}")


def review(i: int, pinned: bool, distinct: bool = False) -> bytes:
    """A review of an n4-pinned replica; `distinct`: each of another size (nothing memoised)."""
    cpu = f"{1000 + i}m" if distinct else "1"
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "app",
                "image": "example.com/app:1",
                "resources": {"requests": {"cpu": cpu, "memory": "128Mi"}, "limits": {"cpu": cpu, "memory": "128Mi"}},
            }
        ]
    }
    if pinned:
        spec["nodeSelector"] = {LABEL: "n4"}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "web-7d9f-",
            "namespace": NAMESPACE,
            "labels": {"app": "web"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "rs-uid", "controller": True}
            ],
        },
        "spec": spec,
    }
    return orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": f"uid-{i}",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": NAMESPACE,
                "operation": "CREATE",
                "object": pod,
            },
        }
    )


def latency(kube: Kube, kubeconfig: str, reviews: int, sized: bool, distinct: bool) -> dict[str, Any]:
    nodes = setup(kube, 3)
    webhook = Webhook("--log-level=warning", *(sizing_flags(kubeconfig) if sized else []))
    try:
        webhook.wait_ready()
        context = ssl.create_default_context(cafile=webhook.certs.ca_file)
        with httpx.Client(verify=context, timeout=10) as client:
            if sized:
                wait_for(
                    "the webhook sizing",
                    lambda: (
                        "spec"
                        in str(
                            orjson.loads(
                                __import__("base64").b64decode(
                                    client.post(webhook.url, content=review(0, True)).json()["response"]["patch"]
                                )
                            )
                        )
                    ),
                    timeout=60,
                )
            for i in range(200):  # warm up: connection, code paths
                client.post(webhook.url, content=review(reviews + 1 + i, True, distinct))
            bodies = [review(i, True, distinct) for i in range(reviews)]
            times = []
            client_cpu, server_cpu = time.process_time(), cpu_seconds(webhook.proc.pid)
            for body in bodies:
                start = time.perf_counter()
                answer = client.post(webhook.url, content=body)
                times.append(time.perf_counter() - start)
                assert answer.status_code == 200
            client_cpu, server_cpu = time.process_time() - client_cpu, cpu_seconds(webhook.proc.pid) - server_cpu
            patched = orjson.loads(__import__("base64").b64decode(answer.json()["response"]["patch"]))
        return {
            "mode": ("--size-at-admission (node lookup + sizing)" if sized else "stamp only")
            + (", every pod of another size" if distinct else ", replicas of one workload"),
            "reviews": reviews,
            "sized": any(op["path"].startswith("/spec/") for op in patched),
            "p50_ms": round(statistics.median(times) * 1000, 3),
            "p99_ms": round(percentile(times, 99) * 1000, 3),
            "webhook_cpu_ms_per_review": round(server_cpu * 1000 / reviews, 3),
            "load_generator_cpu_ms_per_review": round(client_cpu * 1000 / reviews, 3),
        }
    finally:
        webhook.terminate()
        kube.delete(f"/api/v1/namespaces/{NAMESPACE}")
        for node in nodes:
            kube.delete(f"/api/v1/nodes/{node}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--replicas", type=int, default=500)
    parser.add_argument("--reviews", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--skip-burst", action="store_true")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    kubeconfig = cluster_up()
    kube = Kube(kubeconfig)
    results: dict[str, Any] = {"loadavg_before": os.getloadavg()}
    if not args.skip_burst:
        results["burst"] = [burst(kube, kubeconfig, args.replicas, sized, args.timeout) for sized in (False, True)]
        for figures in results["burst"]:
            print(json.dumps(figures, indent=2))
    results["latency"] = [
        latency(kube, kubeconfig, args.reviews, sized, distinct)
        for distinct in (False, True)
        for sized in (False, True)
    ]
    for figures in results["latency"]:
        print(json.dumps(figures, indent=2))
    results["loadavg_after"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
