"""The chart's dashboard and alerts against a real Prometheus scraping the real processes.

The webhook (over HTTPS, verified against its CA) and the reconciler (with leader
election, as the chart runs it) are scraped every second by hack/tools' Prometheus, under
the job names the chart's PodMonitors give them; pods get stamped and resized on a KWOK
node; then every query of every dashboard panel, rendered by the chart, must return data
through the HTTP API, and the chart's alert rules, loaded into the same Prometheus, stay
silent until the reconciler stops (then WorkloadResizerReconcilerDown goes pending).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devkit.chart import ensure_helm, find, find_all, render
from devkit.kube import wait_for
from devkit.processes import Webhook, WebhookCerts, register_webhook, unregister_webhook, wait_webhook_active
from devkit.prometheus import Prometheus, ScrapeJob
from tests.cluster.test_reconciler import Harness, burstable, guaranteed

RECONCILER_JOB = "workload-resizer-reconciler"
WEBHOOK_JOB = "workload-resizer-webhook"
# Grafana's $__rate_interval: at least four scrape intervals; the test's window covers its resizes.
RATE_INTERVAL = "2m"

pytestmark = pytest.mark.timeout(1200)  # the first run may build helm


@pytest.fixture(scope="module")
def chart_docs() -> list[dict[str, Any]]:
    return render(
        ensure_helm(), values={"monitoring": {"prometheusRule": {"enabled": True}, "dashboard": {"enabled": True}}}
    )


def panel_queries(docs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    (cm,) = [d for d in find_all(docs, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]
    dashboard = json.loads(next(iter(cm["data"].values())))
    return [
        (panel["title"], target["expr"].replace("$__rate_interval", RATE_INTERVAL))
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


@pytest.fixture
def webhook(h: Harness) -> Iterator[Webhook]:
    proc = Webhook(certs=WebhookCerts())
    h.processes.append(proc)  # closed, and its log shown on failure, with the harness
    proc.wait_ready()
    name = register_webhook(h.kube, proc.url, proc.certs.ca_bundle, name=f"workload-resizer-{h.ns}", namespaces=[h.ns])
    try:
        wait_webhook_active(h.kube, h.ns)
        yield proc
    finally:
        unregister_webhook(h.kube, name)


def scrape_health(prometheus: Prometheus) -> str:
    """What a failure shows of the scrapes: each target's last error and its scrapes in the window."""
    targets = {t["labels"]["job"]: (t["health"], t.get("lastError")) for t in prometheus.targets()}
    scrapes = prometheus.query(f"count_over_time(up[{RATE_INTERVAL}])")
    failed = prometheus.query(f"count_over_time((up == 0)[{RATE_INTERVAL}:1s])")
    return f"targets {targets}; scrapes {scrapes}; failed scrapes {failed}"


def finite(result: list[dict[str, Any]]) -> bool:
    return bool(result) and all(math.isfinite(float(sample["value"][1])) for sample in result)


def test_every_dashboard_panel_returns_data_and_the_alerts_follow_the_processes(
    h: Harness, webhook: Webhook, chart_docs: list[dict[str, Any]], tmp_path: Path
) -> None:
    reconciler = h.reconciler(
        "--leader-elect", f"--leader-election-namespace={h.ns}", f"--leader-election-id={RECONCILER_JOB}"
    )
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": find(chart_docs, "PrometheusRule")["spec"]["groups"]}))
    prometheus = Prometheus(
        [
            ScrapeJob(RECONCILER_JOB, [f"127.0.0.1:{reconciler.metrics_port}"]),
            ScrapeJob(WEBHOOK_JOB, [f"127.0.0.1:{webhook.port}"], ca_file=webhook.certs.ca_file),
        ],
        rule_files=[rules],
    )
    h.processes.append(prometheus)
    prometheus.wait_ready()
    wait_for(
        "both targets scraped and up",
        lambda: len(targets := prometheus.targets()) == 2 and all(t["health"] == "up" for t in targets),
        timeout=30,
    )

    # Pods stamped by the webhook, resized by the reconciler, on a KWOK node of type n4.
    node = h.node("n4", "n4")
    h.deploy("g", node, [guaranteed()], replicas=2)
    h.deploy("b", node, [burstable()])
    h.wait_applied("g", "n4", 2)
    h.wait_applied("b", "n4", 1)
    h.wait_status_follows("g", 2)
    h.wait_status_follows("b", 1)
    for what, expr in (
        (
            "the three actuated resizes",
            f'sum(workload_resizer_resize_outcomes_total{{job="{RECONCILER_JOB}",outcome="actuated"}}) == 3',
        ),
        (
            "the three pods resized, as managed pods",
            "sum(workload_resizer_managed_requests"
            f'{{job="{RECONCILER_JOB}",resource="cpu",'
            'state="current"}) * 1000 == 2000 and '
            "sum(workload_resizer_managed_pods) == 3",
        ),
    ):
        wait_for(f"Prometheus has scraped {what}", lambda expr=expr: finite(prometheus.query(expr)), timeout=30)
    assert reconciler.metric("workload_resizer_webhook_requests_total") == 0  # (the names do not mix)
    assert webhook.metric("workload_resizer_webhook_requests_total", result="patched") >= 3

    queries = panel_queries(chart_docs)
    assert len(queries) >= 25
    # A rate needs two samples of a series in its window: a panel may wait a scrape or two.
    empty: dict[str, Any] = {}

    def every_panel_has_data() -> bool:
        empty.clear()
        empty.update({f"{title}: {expr}": r for title, expr in queries if not finite(r := prometheus.query(expr))})
        return not empty

    try:
        wait_for("every panel to have data", every_panel_has_data, timeout=30)
    except AssertionError:
        raise AssertionError(
            f"panels without data: {json.dumps(empty, indent=1)}; {scrape_health(prometheus)}"
        ) from None
    # Values the cluster's state pins down, as the stat panels show them.
    stats = {
        title: float(prometheus.query(expr)[0]["value"][1])
        for title, expr in queries
        if title in ("Reconciler replicas up", "Leader", "Config valid", "Webhook replicas up")
    }
    assert stats == {"Reconciler replicas up": 1, "Leader": 1, "Config valid": 1, "Webhook replicas up": 1}
    # What was freed on n4 (cpuPerf 1.25): 2 x (1000m -> 800m) + (500m -> 400m); memory unchanged.
    freed = {
        title: {r["metric"]["node_type"]: float(r["value"][1]) for r in prometheus.query(expr)}
        for title, expr in queries
        if title in ("CPU requests freed", "Memory requests freed", "Managed pods")
    }
    assert freed == {
        "CPU requests freed": {"n4": 0.5},
        "Memory requests freed": {"n4": 0.0},
        "Managed pods": {"n4": 3.0},
    }

    # The alert rules on the same data: nothing pending or firing on a healthy cluster ...
    wait_for(
        "every rule evaluated",
        lambda: all(
            not rule["lastEvaluation"].startswith("0001")
            for group in prometheus.api("rules")["groups"]
            for rule in group["rules"]
        ),
        timeout=30,
    )
    assert prometheus.alerts() == []
    # ... until the reconciler stops: its down alert goes pending (for: 5m keeps it from firing here).
    reconciler.terminate()
    pending = wait_for(
        "WorkloadResizerReconcilerDown pending",
        lambda: [a for a in prometheus.alerts() if a["labels"]["alertname"] == "WorkloadResizerReconcilerDown"],
        timeout=30,
    )
    assert [a["state"] for a in pending] == ["pending"]
    assert {a["labels"]["alertname"] for a in prometheus.alerts()} == {"WorkloadResizerReconcilerDown"}
