#!/usr/bin/env python3
"""Admission latency as the apiserver sees it: ours against a minimal Go webhook, interleaved.

On the local control plane (hack/cluster), per round and per server (the order alternates each
round): the server is started, registered for one namespace (the repo's webhook configuration:
pods CREATE, failurePolicy Ignore, 3 s timeout), and a Deployment of N replicas (default 300) is
created; its ReplicaSet controller creates the pods in the kube-controller-manager's slow-start
batches, each pod reviewed by the server. The apiserver's own histogram
``apiserver_admission_webhook_admission_duration_seconds`` is read before and after: what it
counted for the burst, by bucket, gives how many reviews took more than 100 ms (and 25 ms) as
the apiserver measured them (its HTTP client, the TLS handshakes on its new connections, the
server). Also: the burst time (Deployment created -> N pods stored), the server's CPU seconds
over the burst, and the apiserver's and the kube-controller-manager's (the load generator).

The Go server is ``bench/gowebhook/server`` (the baseline of bench/webhook_bench.py: same
decisions and patch, one JSON log line per decision, no metrics), built with ``go build``.

    .venv/bin/python bench/apiserver_admission_latency.py [--replicas 300] [--rounds 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.drills.observe import cpu_seconds  # noqa: E402
from bench.reconciler_burst import cluster_up, fresh_namespace  # noqa: E402
from bench.webhook_bench import build_go  # noqa: E402
from devkit.kube import Kube, container, deployment, wait_for  # noqa: E402
from devkit.metrics import samples  # noqa: E402
from devkit.processes import (  # noqa: E402
    Process,
    Webhook,
    WebhookCerts,
    free_port,
    register_webhook,
    unregister_webhook,
    wait_webhook_active,
)

NAMESPACE = "bench-admission-latency"
HISTOGRAM = "apiserver_admission_webhook_admission_duration_seconds_bucket"
PY_NAME = "python (uvicorn, one process)"
GO_NAME = "go (net/http)"


def log(msg: str) -> None:
    print(f"[latency] {msg}", file=sys.stderr, flush=True)


def buckets(metrics: str, webhook: str) -> dict[float, float]:
    """The apiserver's admission-duration histogram of `webhook` (CREATE, admit), by upper bound."""
    counts: dict[float, float] = {}
    for labels, value in samples(metrics, HISTOGRAM):
        if labels.get("name") == webhook and labels.get("type") == "admit" and labels.get("operation") == "CREATE":
            le = float(labels["le"])
            counts[le] = counts.get(le, 0.0) + value
    return counts


def apiserver_metrics(kube: Kube) -> str:
    return str(kube.http.get("/metrics", timeout=30).text)


def component_pid(name: str) -> int | None:
    found = subprocess.run(["pgrep", "-f", f"{name} "], capture_output=True, text=True).stdout.split()
    return int(found[0]) if found else None


class GoWebhook(Process):
    """bench/gowebhook/server on 127.0.0.1:<free port>."""

    def __init__(self, binary: Path, certs: WebhookCerts) -> None:
        self.certs = certs
        self.port = free_port()
        argv = [str(binary), f"-addr=127.0.0.1:{self.port}", f"-cert={certs.cert_file}", f"-key={certs.key_file}"]
        super().__init__("go-webhook", argv, None, None)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/mutate"

    def ready(self) -> bool:
        import socket

        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", self.port)) == 0


def burst(kube: Kube, server: Any, name: str, replicas: int) -> dict[str, Any]:
    fresh_namespace(kube, NAMESPACE, timeout=600)
    registration = register_webhook(
        kube, server.url, server.certs.ca_bundle, name=f"bench-{name}", namespaces=[NAMESPACE]
    )
    config = kube.get(f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{registration}")
    (hook,) = [w["name"] for w in config["webhooks"]]
    try:
        wait_webhook_active(kube, NAMESPACE)
        time.sleep(1)  # the probes' reviews are counted in the histogram before `before` is read
        before = buckets(apiserver_metrics(kube), hook)
        pids = {
            "server": server.proc.pid,
            "apiserver": component_pid("kube-apiserver"),
            "kcm": component_pid("kube-controller-manager"),
        }
        cpu0 = {k: cpu_seconds(pid) if pid else 0.0 for k, pid in pids.items()}
        app = deployment("burst", replicas, [container("app", {"cpu": "1", "memory": "256Mi"}, {"cpu": "2"})])
        started = time.monotonic()
        kube.create(f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments", app)
        wait_for(
            f"{replicas} pods stored",
            lambda: len(kube.pods(NAMESPACE, "app=burst")) >= replicas,
            timeout=600,
            interval=0.1,
        )
        burst_s = time.monotonic() - started
        cpu = {k: (cpu_seconds(pid) if pid else 0.0) - cpu0[k] for k, pid in pids.items()}
        after = buckets(apiserver_metrics(kube), hook)
    finally:
        unregister_webhook(kube, registration)
    diff = {le: after.get(le, 0.0) - before.get(le, 0.0) for le in after}
    total = diff.get(float("inf"), 0.0)
    stamped = sum(
        1
        for pod in kube.pods(NAMESPACE, "app=burst")
        if "workload-resizer.io/original-cpu.app" in (pod["metadata"].get("annotations") or {})
    )
    return {
        "server": name,
        "reviews": total,
        "stamped": stamped,
        "over_25ms": total - diff.get(0.025, 0.0),
        "over_100ms": total - diff.get(0.1, 0.0),
        "over_500ms": total - diff.get(0.5, 0.0),
        "burst_s": round(burst_s, 2),
        "cpu_s": {k: round(v, 2) for k, v in cpu.items()},
        "load1": round(os.getloadavg()[0], 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()

    go_server, _ = build_go(REPO / "bench" / "out" / "gowebhook")
    kube = Kube(cluster_up())
    certs = WebhookCerts()
    results: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        order = [PY_NAME, GO_NAME] if round_ % 2 == 0 else [GO_NAME, PY_NAME]
        for name in order:
            server: Any = Webhook(certs=certs) if name == PY_NAME else GoWebhook(go_server, certs)
            try:
                server.wait_ready()
                result = burst(kube, server, "python" if name == PY_NAME else "go", args.replicas)
            finally:
                server.close()
            result["round"] = round_ + 1
            log(json.dumps(result))
            results.append(result)
    kube.delete(f"/api/v1/namespaces/{NAMESPACE}")

    print(
        "| round | server | reviews | stamped | > 25 ms | > 100 ms | > 500 ms | burst s | CPU s: server / apiserver / KCM | load |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        cpu = r["cpu_s"]
        print(
            f"| {r['round']} | {r['server']} | {r['reviews']:.0f} | {r['stamped']} | {r['over_25ms']:.0f} | "
            f"{r['over_100ms']:.0f} | {r['over_500ms']:.0f} | {r['burst_s']} | "
            f"{cpu['server']} / {cpu['apiserver']} / {cpu['kcm']} | {r['load1']} |"
        )
    for server in ("python", "go"):
        mine = [r for r in results if r["server"] == server]
        share = statistics.median(r["over_100ms"] / r["reviews"] for r in mine if r["reviews"])
        print(f"{server}: median share of reviews over 100 ms {share:.1%}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
