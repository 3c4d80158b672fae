#!/usr/bin/env python3
"""Writes chart/dashboards/workload-resizer.json, the Grafana dashboard the chart ships.

    python hack/dashboard.py            # rewrite the JSON
    python hack/dashboard.py --check    # exit 1 if the JSON is not what this script writes

The panels are listed here, once, so the JSON stays reviewable as code; the chart
(templates/grafana-dashboard.yaml) replaces __WEBHOOK__ and __RECONCILER__ with the
label matchers of monitoring.webhookSelector / monitoring.reconcilerSelector.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "chart" / "dashboards" / "workload-resizer.json"
R = "__RECONCILER__"
W = "__WEBHOOK__"
RATE = "$__rate_interval"
DS = {"type": "prometheus", "uid": "${datasource}"}


def quantile(q: float, metric: str, selector: str) -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({metric}_bucket{{{selector}}}[{RATE}])))"


def freed(resource: str) -> str:
    def total(state: str) -> str:
        return f'sum by (node_type) (workload_resizer_managed_requests{{{R},resource="{resource}",state="{state}"}})'

    return f"{total('original')} - {total('current')}"


# (title, kind, unit, [(expr, legend)], description)
Panel = tuple[str, str, str, list[tuple[str, str]], str]

ROWS: list[tuple[str, list[Panel]]] = [
    (
        "Overview",
        [
            (
                "Reconciler replicas up",
                "stat",
                "none",
                [(f"sum(up{{{R}}})", "")],
                "Scrape targets of the reconciler that are up (alert: WorkloadResizerReconcilerDown).",
            ),
            (
                "Leader",
                "stat",
                "none",
                [(f"max(leader_election_master_status{{{R}}})", "")],
                "1 if a reconciler replica holds the Lease (alert: WorkloadResizerReconcilerNoLeader).",
            ),
            (
                "Config valid",
                "stat",
                "none",
                [(f"min(workload_resizer_config_valid{{{R}}})", "")],
                "1 if the sizing ConfigMap's latest content is valid (alert: WorkloadResizerConfigInvalid).",
            ),
            (
                "Webhook replicas up",
                "stat",
                "none",
                [(f"sum(up{{{W}}})", "")],
                "Scrape targets of the webhook that are up (alert: WorkloadResizerWebhookDown).",
            ),
            (
                "Webhook certificate expires in",
                "stat",
                "s",
                [(f"min(workload_resizer_webhook_cert_not_after_timestamp_seconds{{{W}}}) - time()", "")],
                "Time left on the serving certificate in use (alert: WorkloadResizerWebhookCertificateExpiring).",
            ),
        ],
    ),
    (
        "What was freed",
        [
            (
                "CPU requests freed",
                "timeseries",
                "none",
                [(freed("cpu"), "{{node_type}}")],
                "Summed CPU requests (cores) of the managed pods as authored minus as now, per node type "
                "(negative: added). `workload-resizer report` lists them per workload.",
            ),
            (
                "Memory requests freed",
                "timeseries",
                "bytes",
                [(freed("memory"), "{{node_type}}")],
                "Summed memory requests of the managed pods as authored minus as now, per node type (negative: added).",
            ),
            (
                "CPU requests, as authored and now",
                "timeseries",
                "none",
                [
                    (
                        f'sum by (node_type, state) (workload_resizer_managed_requests{{{R},resource="cpu"}})',
                        "{{node_type}} {{state}}",
                    )
                ],
                "state original: as authored; current: as the pods run now (cores).",
            ),
            (
                "Managed pods",
                "timeseries",
                "none",
                [(f"sum by (node_type) (workload_resizer_managed_pods{{{R}}})", "{{node_type}}")],
                "Pods the reconciler manages with trusted originals, per node type.",
            ),
        ],
    ),
    (
        "Admission webhook",
        [
            (
                "Admission requests by result",
                "timeseries",
                "reqps",
                [(f"sum by (result) (rate(workload_resizer_webhook_requests_total{{{W}}}[{RATE}]))", "{{result}}")],
                "patched: stamped; skipped: allowed unchanged; error and overloaded: allowed without a decision "
                "(alert: WorkloadResizerWebhookErrors); rejected: malformed requests.",
            ),
            (
                "Admission latency",
                "timeseries",
                "s",
                [
                    (quantile(0.5, "workload_resizer_webhook_request_duration_seconds", W), "p50"),
                    (quantile(0.99, "workload_resizer_webhook_request_duration_seconds", W), "p99"),
                ],
                "From the request reaching the webhook to the response (alert: WorkloadResizerWebhookLatencyHigh).",
            ),
            (
                "Review worker restarts",
                "timeseries",
                "none",
                [
                    (
                        f"sum by (reason) (increase(workload_resizer_webhook_review_worker_restarts_total{{{W}}}[{RATE}]))"
                        " or vector(0)",
                        "{{reason}}",
                    )
                ],
                "Review workers killed and replaced (crash, timeout, error, cancelled); 0 when none.",
            ),
            (
                "Certificate loads",
                "timeseries",
                "none",
                [
                    (
                        f"sum by (result) (increase(workload_resizer_webhook_cert_reloads_total{{{W}}}[{RATE}]))",
                        "{{result}}",
                    )
                ],
                "Serving-certificate loads by result (error: a bad pair kept out).",
            ),
        ],
    ),
    (
        "Resizes",
        [
            (
                "Resize outcomes",
                "timeseries",
                "none",
                [
                    (
                        f"sum by (outcome) (increase(workload_resizer_resize_outcomes_total{{{R}}}[{RATE}]))",
                        "{{outcome}}",
                    )
                ],
                "How resizes ended or stalled (alerts: WorkloadResizerResizesFailing, WorkloadResizerResizeDeferredTooLong).",
            ),
            (
                "Decisions by reason",
                "timeseries",
                "none",
                [(f"sum by (reason) (increase(workload_resizer_outcomes_total{{{R}}}[{RATE}]))", "{{reason}}")],
                "The reconciler's decisions, by Event reason (alert: WorkloadResizerOriginalsUnverified).",
            ),
            (
                "Resizes waiting",
                "timeseries",
                "none",
                [(f"sum by (state) (workload_resizer_resizes_waiting{{{R}}})", "{{state}}")],
                "Pods whose resize the kubelet has not actuated yet, by state.",
            ),
            (
                "Resize actuation time",
                "timeseries",
                "s",
                [
                    (quantile(0.5, "workload_resizer_resize_actuation_seconds", R), "p50"),
                    (quantile(0.99, "workload_resizer_resize_actuation_seconds", R), "p99"),
                ],
                "From the pods/resize request to the kubelet reporting the new size.",
            ),
        ],
    ),
    (
        "Reconciler",
        [
            (
                "Reconciles by result",
                "timeseries",
                "ops",
                [(f"sum by (result) (rate(controller_runtime_reconcile_total{{{R}}}[{RATE}]))", "{{result}}")],
                "",
            ),
            (
                "Reconcile errors",
                "timeseries",
                "ops",
                [(f"sum(rate(controller_runtime_reconcile_errors_total{{{R}}}[{RATE}])) or vector(0)", "errors")],
                "Reconciliations that failed and were retried; 0 when none.",
            ),
            (
                "Reconcile time p99",
                "timeseries",
                "s",
                [(quantile(0.99, "controller_runtime_reconcile_time_seconds", R), "p99")],
                "",
            ),
            (
                "Work queue",
                "timeseries",
                "none",
                [
                    (f"sum(workqueue_depth{{{R}}})", "depth"),
                    (quantile(0.99, "workqueue_queue_duration_seconds", R), "p99 wait (s)"),
                ],
                "",
            ),
            (
                "API requests by code",
                "timeseries",
                "reqps",
                [(f"sum by (code) (rate(rest_client_requests_total{{{R}}}[{RATE}]))", "{{code}}")],
                "",
            ),
            (
                "Watch restarts",
                "timeseries",
                "none",
                [
                    (
                        f"sum by (resource, cause) (increase(workload_resizer_watch_restarts_total{{{R}}}[{RATE}]))"
                        " or vector(0)",
                        "{{resource}} {{cause}}",
                    )
                ],
                "Watch streams restarted; 0 when none.",
            ),
            (
                "Cached objects",
                "timeseries",
                "none",
                [(f"sum by (resource) (workload_resizer_cached_objects{{{R}}})", "{{resource}}")],
                "",
            ),
        ],
    ),
    (
        "Processes",
        [
            (
                "Memory (RSS)",
                "timeseries",
                "bytes",
                [
                    (f"process_resident_memory_bytes{{{R}}}", "reconciler {{instance}}"),
                    (f"process_resident_memory_bytes{{{W}}}", "webhook {{instance}}"),
                ],
                "",
            ),
            (
                "CPU",
                "timeseries",
                "percentunit",
                [
                    (f"rate(process_cpu_seconds_total{{{R}}}[{RATE}])", "reconciler {{instance}}"),
                    (f"rate(process_cpu_seconds_total{{{W}}}[{RATE}])", "webhook {{instance}}"),
                ],
                "",
            ),
        ],
    ),
]


def panel(panel_id: int, spec: Panel, x: int, y: int, width: int, height: int) -> dict[str, Any]:
    title, kind, unit, targets, description = spec
    out: dict[str, Any] = {
        "id": panel_id,
        "type": kind,
        "title": title,
        "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": width, "h": height},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend or "__auto"}
            for i, (expr, legend) in enumerate(targets)
        ],
    }
    if description:
        out["description"] = description
    if kind == "stat":
        out["options"] = {
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "value",
            "graphMode": "none",
        }
    return out


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    next_id = 1
    for row_title, specs in ROWS:
        panels.append(
            {
                "id": next_id,
                "type": "row",
                "title": row_title,
                "collapsed": False,
                "gridPos": {"x": 0, "y": y, "w": 24, "h": 1},
                "panels": [],
            }
        )
        next_id += 1
        y += 1
        stats = all(spec[1] == "stat" for spec in specs)
        per_line = len(specs) if stats else 3
        width, height = 24 // per_line, (4 if stats else 8)
        for i, spec in enumerate(specs):
            panels.append(panel(next_id, spec, (i % per_line) * width, y + (i // per_line) * height, width, height))
            next_id += 1
        y += height * ((len(specs) + per_line - 1) // per_line)
    return {
        "uid": "workload-resizer",
        "title": "workload-resizer",
        "tags": ["workload-resizer", "kubernetes"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                }
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the JSON differs from what this writes")
    args = parser.parse_args(argv)
    if args.check:
        if not OUT.exists() or OUT.read_text() != render():
            print(f"{OUT} is out of date: run python hack/dashboard.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(render())
    return 0


if __name__ == "__main__":
    sys.exit(main())
