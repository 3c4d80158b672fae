"""The chart's value sets the tests render and check: each turns on objects or branches of the
templates the defaults leave out. tests/cluster/test_chart.py lints and dry-runs every one on the
real apiserver; devkit.schemas checks them (and a few more) against each minor's OpenAPI.

docs = render(helm, values=values_for("provided"))
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "workload-resizer-system"


def provided_certs(namespace: str = NAMESPACE, service: str = "workload-resizer-webhook") -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="chart-certs-") as tmp:
        out = Path(tmp)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "certs",
                "--out-dir",
                str(out),
                "--service",
                service,
                "--namespace",
                namespace,
                "--ca-bundle-file",
                str(out / "ca.b64"),
            ],
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        return {
            "caBundle": (out / "ca.crt").read_text(),
            "cert": (out / "tls.crt").read_text(),
            "key": (out / "tls.key").read_text(),
        }


CUSTOM = {
    "fullnameOverride": "resizer",
    "image": {"repository": "registry.example/workload-resizer", "tag": "1.2.3", "pullPolicy": "Always"},
    "config": {
        "name": "sizing",
        "baselineNodeType": "n4",
        "nodeTypes": {"n4": {"cpuPerf": 1.25, "memPerf": 1}, "e2": {"cpuPerf": "0.8", "memPerf": "0.9"}},
        "bounds": {"cpu": {"min": "100m", "max": "8"}, "memory": {"min": "128Mi", "max": "16Gi"}},
        "overrides": [{"name": "batch", "match": {"podLabel": {"tier": "batch"}}, "bounds": {"cpu": {"min": "10m"}}}],
        "computeClasses": {"Performance": {"baselineNodeType": "e2"}},
    },
    "tls": {"mode": "helm", "helm": {"validityDays": 30}},
    "scope": {
        "excludeNamespaces": ["batch"],
        "namespaceSelector": {
            "matchLabels": {"resize": "yes"},
            "matchExpressions": [
                {"key": "workload-resizer.io/exclude", "operator": "DoesNotExist"},
                {"key": "env", "operator": "NotIn", "values": ["dev", "qa"]},
            ],
        },
    },
    "webhook": {
        "replicas": 3,
        "port": 9443,
        "tlsMinVersion": "1.3",
        "certReloadInterval": "1m",
        "maxRequestBytes": "8MiB",
        "httpKeepAliveTimeout": "100s",
        "shutdownTimeout": "5s",
        "logLevel": "debug",
        "logFormat": "text",
        "logFlushInterval": "0",
        "largeReviewWorkers": 0,
        "largeReviewTimeout": "1500ms",
        "httpReadTimeout": "750ms",
        "maxConnections": 300,
        "extraArgs": ["--log-level=warning"],
        "failurePolicy": "Fail",
        "timeoutSeconds": 5,
        "excludeNamespaces": ["monitoring"],
        "priorityClassName": "system-cluster-critical",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}],
        "podDisruptionBudget": {"enabled": True, "minAvailable": "50%"},
        "podAnnotations": {"prometheus.io/scrape": "true"},
    },
    "reconciler": {
        "replicas": 1,
        "dryRun": True,
        "resizeRestartContainers": True,
        "nodeTypeLabel": "node.kubernetes.io/instance-type",
        "configRefreshInterval": "1m30s",
        "concurrency": 16,
        "kubeApiQps": 50.5,
        "kubeApiBurst": 1000000,
        "watchIdleTimeout": "2m",
        "metricsPort": 9090,
        "probePort": 9091,
        "logLevel": "warning",
        "logFormat": "text",
        "shutdownTimeout": "30s",
        "leaderElection": {
            "enabled": True,
            "id": "resizer-lock",
            "leaseDuration": "30s",
            "renewDeadline": "20s",
            "retryPeriod": "5s",
        },
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}
                    ]
                }
            }
        },
        "podDisruptionBudget": {"enabled": False},
        "extraArgs": ["--kubeconfig=/etc/kube/config"],
    },
}


VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "provided": {"tls": {"mode": "provided"}},  # certificates made per namespace: values_for()
    "helm": {"tls": {"mode": "helm"}},
    "custom": CUSTOM,
    "dry-run": {"reconciler": {"dryRun": True}},
    "no-leader-election": {"reconciler": {"leaderElection": {"enabled": False}, "replicas": 1}},
    "existing-issuer": {"tls": {"certManager": {"issuerRef": {"kind": "ClusterIssuer", "name": "corp-ca"}}}},
    "webhook-from-apiserver": {
        "networkPolicy": {
            "apiserverCIDRs": ["10.0.0.10/32", "fd00::/64"],
            "webhookExtraIngressFrom": [
                {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
            ],
        }
    },
}


def values_for(variant: str, namespace: str = NAMESPACE) -> dict[str, Any]:
    values = dict(VARIANTS[variant])
    if variant == "provided":
        values["tls"] = {"mode": "provided", "provided": provided_certs(namespace)}
    return values
