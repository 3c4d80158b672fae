"""The chart's PrometheusRule and Grafana dashboard: promtool unit tests for every alert,
and every query names only metrics the product exports.

The rules are the chart's own (helm template with monitoring.prometheusRule.enabled),
checked by `promtool check rules` and run by `promtool test rules`: each alert has a case
in which it fires (with its exact labels and annotations) and a healthy case in which it
stays silent. promtool is Debian's (hack/tools build promtool, cached); helm the pinned
one (hack/tools build helm, minutes the first time).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from devkit.chart import ensure_helm, find, find_all, render
from devkit.tools import ensure_tool

REPO = Path(__file__).resolve().parents[2]
R = 'job="workload-resizer-reconciler"'
W = 'job="workload-resizer-webhook"'
LEASE = "workload-resizer-reconciler"

pytestmark = pytest.mark.timeout(1200)  # the first run builds helm


@pytest.fixture(scope="module")
def helm() -> str:
    return ensure_helm()


@pytest.fixture(scope="module")
def promtool() -> str:
    return ensure_tool("promtool")


def rule_docs(helm: str, **values: Any) -> list[dict[str, Any]]:
    return render(helm, values={"monitoring": {"prometheusRule": {"enabled": True, **values}}})


def rule_groups(helm: str, **values: Any) -> list[dict[str, Any]]:
    return find(rule_docs(helm, **values), "PrometheusRule")["spec"]["groups"]


def alerts_of(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


# ---------------------------------------------------------------- the cases


def series(metric: str, selector: str, values: str, **labels: str) -> dict[str, str]:
    extra = "".join(f',{k}="{v}"' for k, v in labels.items())
    return {"series": f"{metric}{{{selector}{extra}}}", "values": values}


def up(selector: str, instance: str, values: str) -> dict[str, str]:
    return series("up", selector, values, instance=instance)


def leader(instance: str, values: str) -> dict[str, str]:
    return series("leader_election_master_status", R, values, instance=instance, name=LEASE)


def resize_outcome(outcome: str, values: str) -> dict[str, str]:
    return series("workload_resizer_resize_outcomes_total", R, values, outcome=outcome)


def decision(reason: str, values: str) -> dict[str, str]:
    return series("workload_resizer_outcomes_total", R, values, reason=reason)


def requests(result: str, values: str) -> dict[str, str]:
    return series("workload_resizer_webhook_requests_total", W, values, result=result)


def unknown_key_pods(instance: str, values: str) -> dict[str, str]:
    return series("workload_resizer_originals_unknown_key_pods", R, values, instance=instance)


def latency_buckets(counts: dict[str, str]) -> list[dict[str, str]]:
    return [series("workload_resizer_webhook_request_duration_seconds_bucket", W, v, le=le) for le, v in counts.items()]


def config(valid: str, loaded: str) -> list[dict[str, str]]:
    return [series("workload_resizer_config_valid", R, valid), series("workload_resizer_config_loaded", R, loaded)]


# Per alert: (firing cases, healthy cases); a case is (input series, eval time, expected
# labels beyond alertname/severity, the annotations' template expansions).
Case = tuple[list[dict[str, str]], str, dict[str, str], dict[str, str]]
CASES: dict[str, tuple[list[Case], list[tuple[list[dict[str, str]], str]]]] = {
    "WorkloadResizerReconcilerDown": (
        [
            ([up(R, "a", "0x10"), up(R, "b", "0x10")], "10m", {}, {}),
            ([up(W, "w", "1x10")], "10m", {}, {}),
        ],  # never scraped at all
        [
            ([up(R, "a", "0x10"), up(R, "b", "1x10")], "10m"),  # one replica left: the standby leads
            ([up(R, "a", "0 0 0 1x7")], "10m"),
        ],
    ),  # back before the 5 minutes
    "WorkloadResizerReconcilerNoLeader": (
        [([leader("a", "0x10"), leader("b", "0x10")], "10m", {"name": LEASE}, {"{{ $labels.name }}": LEASE})],
        [
            ([leader("a", "0x10"), leader("b", "1x10")], "10m"),
            ([leader("a", "1 1 1 0x7"), leader("b", "0 0 0 0 1x6")], "10m"),
        ],
    ),  # a hand-over takes a minute
    "WorkloadResizerConfigInvalid": (
        [
            (config("0x20", "1x20"), "15m", {}, {}),  # rejected; the last good one kept
            (config("0x20", "0x20"), "15m", {}, {}),
        ],  # none ever loaded
        [(config("1x20", "1x20"), "15m"), (config("0 0 0 1x17", "0 0 0 1x17"), "15m")],
    ),  # fixed within the 10 minutes
    "WorkloadResizerResizesFailing": (
        [
            ([resize_outcome("infeasible", "0 0 0 1x10"), resize_outcome("actuated", "0+5x13")], "10m", {}, {}),
            ([resize_outcome("error_reverted", "0 0 0 1x10")], "10m", {}, {}),
            ([decision("ResizeFailed", "0 0 0 2x10"), resize_outcome("infeasible", "0x13")], "10m", {}, {}),
        ],
        [
            (
                [
                    resize_outcome("actuated", "0+5x60"),
                    resize_outcome("deferred", "0+1x60"),
                    resize_outcome("infeasible", "0x60"),
                    decision("ResizeFailed", "0x60"),
                ],
                "60m",
            ),
            ([resize_outcome("infeasible", "0 0 0 1x60")], "60m"),
        ],
    ),  # over half an hour ago
    "WorkloadResizerResizeDeferredTooLong": (
        [([resize_outcome("deferred_too_long", "0 0 1x20"), resize_outcome("deferred", "0 1x21")], "10m", {}, {})],
        [([resize_outcome("deferred", "0+1x90"), resize_outcome("deferred_too_long", "0x90")], "90m")],
    ),
    "WorkloadResizerOriginalsUnverified": (
        [([decision("OriginalsUnverified", "0 0 2x20")], "10m", {}, {})],
        [([decision("OriginalsUnverified", "0x90"), decision("OriginalsReplaced", "0+1x90")], "90m")],
    ),
    "WorkloadResizerOriginalsKeyMissing": (
        [([unknown_key_pods("a", "0 0 3x20"), unknown_key_pods("b", "0x22")], "15m", {}, {"{{ $value }}": "3"})],
        [([unknown_key_pods("a", "0x20")], "15m"), ([unknown_key_pods("a", "0 2 2 0x20")], "15m")],
    ),  # a rotation reaching the reconciler later
    "WorkloadResizerWebhookDown": (
        [([up(W, "a", "0x10"), up(W, "b", "0x10")], "10m", {}, {}), ([up(R, "r", "1x10")], "10m", {}, {})],
        [([up(W, "a", "0x10"), up(W, "b", "1x10")], "10m")],
    ),
    "WorkloadResizerWebhookErrors": (
        [
            (
                [requests("patched", "0+90x20"), requests("error", "0+10x20")],
                "20m",
                {},
                {"{{ $value | humanizePercentage }}": "10%"},
            ),
            (
                [requests("patched", "0+90x20"), requests("overloaded", "0+10x20")],
                "20m",
                {},
                {"{{ $value | humanizePercentage }}": "10%"},
            ),
        ],
        [
            (
                [
                    requests("patched", "0+100x20"),
                    requests("skipped", "0+100x20"),
                    requests("error", "0x20"),
                    requests("overloaded", "0x20"),
                    requests("rejected", "0+50x20"),
                ],
                "20m",
            ),
            ([requests("patched", "0+1000x20"), requests("error", "0+1x20")], "20m"),
        ],
    ),  # 0.1 %
    "WorkloadResizerWebhookLatencyHigh": (
        [
            (
                latency_buckets({"0.0025": "0x20", "0.5": "0x20", "1": "0+100x20", "+Inf": "0+100x20"}),
                "20m",
                {},
                {"{{ $value | humanizeDuration }}": "995ms"},
            )
        ],
        [
            (latency_buckets({"0.0025": "0+100x20", "0.5": "0+100x20", "1": "0+100x20", "+Inf": "0+100x20"}), "20m"),
            (latency_buckets({"0.0025": "0x20", "0.5": "0x20", "1": "0x20", "+Inf": "0x20"}), "20m"),
        ],
    ),  # idle
    "WorkloadResizerWebhookCertificateExpiring": (
        [
            (
                [series("workload_resizer_webhook_cert_not_after_timestamp_seconds", W, "259200x150")],
                "2h",
                {},
                {"{{ $value | humanizeDuration }}": "2d 22h 0m 0s"},
            )
        ],
        [([series("workload_resizer_webhook_cert_not_after_timestamp_seconds", W, "7776000x150")], "2h")],
    ),
}


def expected_alert(rule: dict[str, Any], labels: dict[str, str], expansions: dict[str, str]) -> dict[str, Any]:
    annotations = {}
    for key, text in rule["annotations"].items():
        for template, value in expansions.items():
            text = text.replace(template, value)
        assert "{{" not in text, f"{rule['alert']}: give the case the expansion of {text!r}"
        annotations[key] = text
    return {
        "exp_labels": {"severity": rule["labels"]["severity"], **rule["labels"], **labels},
        "exp_annotations": annotations,
    }


def promtool_tests(name: str, rule: dict[str, Any]) -> list[dict[str, Any]]:
    firing, healthy = CASES[name]
    tests = [
        {
            "interval": "1m",
            "input_series": inputs,
            "alert_rule_test": [
                {"eval_time": at, "alertname": name, "exp_alerts": [expected_alert(rule, labels, expansions)]}
            ],
        }
        for inputs, at, labels, expansions in firing
    ]
    tests += [
        {
            "interval": "1m",
            "input_series": inputs,
            "alert_rule_test": [{"eval_time": at, "alertname": name, "exp_alerts": []}],
        }
        for inputs, at in healthy
    ]
    return tests


def run_promtool(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def write_rules(directory: Path, groups: list[dict[str, Any]]) -> Path:
    path = directory / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


# ---------------------------------------------------------------- tests


def test_rules_are_valid_and_every_alert_has_cases(helm: str, promtool: str, tmp_path: Path) -> None:
    groups = rule_groups(helm)
    write_rules(tmp_path, groups)
    proc = run_promtool(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(alerts_of(groups)) == sorted(CASES)
    for rule in alerts_of(groups).values():
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]


@pytest.mark.parametrize("alert", sorted(CASES))
def test_alert_fires_in_its_case_and_stays_silent_when_healthy(
    helm: str, promtool: str, tmp_path: Path, alert: str
) -> None:
    groups = rule_groups(helm)
    write_rules(tmp_path, groups)
    tests = promtool_tests(alert, alerts_of(groups)[alert])
    (tmp_path / "test.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}, sort_keys=False)
    )
    proc = run_promtool(promtool, "test", "rules", "test.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_firing_case_fails_without_its_alert(helm: str, promtool: str, tmp_path: Path) -> None:
    """The cases can fail: with an alert disabled in the values, its firing case does."""
    groups = rule_groups(helm, disabled=["WorkloadResizerResizesFailing"])
    assert "WorkloadResizerResizesFailing" not in alerts_of(groups)
    write_rules(tmp_path, groups)
    rule = alerts_of(rule_groups(helm))["WorkloadResizerResizesFailing"]
    (tmp_path / "test.yaml").write_text(
        yaml.safe_dump(
            {
                "rule_files": ["rules.yaml"],
                "evaluation_interval": "1m",
                "tests": promtool_tests("WorkloadResizerResizesFailing", rule)[:1],
            },
            sort_keys=False,
        )
    )
    proc = run_promtool(promtool, "test", "rules", "test.yaml", cwd=tmp_path)
    assert proc.returncode != 0 and "WorkloadResizerResizesFailing" in proc.stdout + proc.stderr


def test_rule_values(helm: str) -> None:
    docs = render(
        helm,
        namespace="ops",
        values={
            "fullnameOverride": "wr",
            "monitoring": {
                "reconcilerSelector": 'job="kube/resizer",cluster="eu"',
                "prometheusRule": {
                    "enabled": True,
                    "labels": {"release": "kps"},
                    "alertLabels": {"team": "platform"},
                    "runbookUrl": "https://example.com/ops",
                    "webhookErrorRatio": 0.05,
                    "webhookLatencyP99Seconds": 0.25,
                    "webhookCertificateDays": 3,
                },
            },
        },
    )
    rule = find(docs, "PrometheusRule")
    assert rule["metadata"]["namespace"] == "ops" and rule["metadata"]["labels"]["release"] == "kps"
    alerts = alerts_of(rule["spec"]["groups"])
    assert alerts["WorkloadResizerReconcilerDown"]["expr"] == 'absent(up{job="kube/resizer",cluster="eu"} == 1)'
    assert alerts["WorkloadResizerWebhookDown"]["expr"] == 'absent(up{job="wr-webhook"} == 1)'
    assert alerts["WorkloadResizerWebhookErrors"]["expr"].endswith("> 0.05")
    assert alerts["WorkloadResizerWebhookLatencyHigh"]["expr"].endswith("> 0.25")
    assert alerts["WorkloadResizerWebhookCertificateExpiring"]["expr"].endswith("< 3 * 86400")
    for name, alert in alerts.items():
        assert alert["labels"]["team"] == "platform"
        assert alert["annotations"]["runbook_url"] == f"https://example.com/ops#{name.lower()}"
    assert not find_all(render(helm), "PrometheusRule")  # opt-in


def test_bad_monitoring_values_are_refused(helm: str) -> None:
    from devkit.chart import template

    for values in (
        {"prometheusRule": {"disabled": ["NoSuchAlert"]}},
        {"prometheusRule": {"webhookErrorRatio": 2}},
        {"reconcilerSelector": '{job="x"}'},
        {"dashboard": {"label": "not a label"}},
        {"prometheusRule": {"enabeld": True}},
    ):
        proc = template(helm, values={"monitoring": values}, check=False)
        assert proc.returncode != 0 and "values don't meet the specifications of the schema" in proc.stderr, values


# ---------------------------------------------------------------- metric names


def exported_metric_names() -> set[str]:
    """Every sample name the reconciler and the webhook expose (their registries, as scraped)."""
    code = (
        "import reconciler.metrics, kube.metrics, sys\n"
        "from ops.prometheus import REGISTRY, exposition\n"
        "from app.metrics import Metrics\n"
        "sys.stdout.write((exposition(REGISTRY) + exposition(Metrics().registry)).decode())\n"
    )
    text = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
    ).stdout
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names |= {name, f"{name}_bucket", f"{name}_sum", f"{name}_count"} if kind == "histogram" else {name}
    return names | {"up"}  # Prometheus' own, per target


def metric_names(expr: str) -> set[str]:
    """The metrics a query reads: every name followed by a label selector (all of ours have one)."""
    return set(re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{", expr))


def dashboard_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (cm,) = [d for d in find_all(docs, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]
    (text,) = cm["data"].values()
    return json.loads(text)


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_every_query_names_exported_metrics(helm: str) -> None:
    exported = exported_metric_names()
    assert {
        "workload_resizer_resize_outcomes_total",
        "workload_resizer_webhook_request_duration_seconds_bucket",
        "process_resident_memory_bytes",
        "leader_election_master_status",
    } <= exported
    docs = render(helm, values={"monitoring": {"prometheusRule": {"enabled": True}, "dashboard": {"enabled": True}}})
    queries = dashboard_queries(dashboard_of(docs))
    queries += [rule["expr"] for rule in alerts_of(find(docs, "PrometheusRule")["spec"]["groups"]).values()]
    assert len(queries) > 30
    for query in queries:
        names = metric_names(query)
        assert names, query
        assert names <= exported, f"{query}: not exported: {names - exported}"


def test_metric_name_check_catches_a_wrong_name() -> None:
    assert metric_names('sum(rate(workload_resizer_resizes_total{job="x"}[5m]))') == {"workload_resizer_resizes_total"}
    assert "workload_resizer_resizes_total" not in exported_metric_names()


def test_dashboard_configmap(helm: str) -> None:
    docs = render(
        helm,
        namespace="ops",
        values={
            "monitoring": {
                "webhookSelector": 'job="hooks",env="prod"',
                "dashboard": {
                    "enabled": True,
                    "label": "grafana.example/dashboard",
                    "labelValue": "yes",
                    "namespace": "monitoring",
                    "annotations": {"grafana_folder": "Platform"},
                },
            }
        },
    )
    (cm,) = [d for d in find_all(docs, "ConfigMap") if d["metadata"]["name"] == "workload-resizer-dashboard"]
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["labels"]["grafana.example/dashboard"] == "yes"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "Platform"}
    dashboard = dashboard_of(docs)
    assert dashboard["uid"] == "workload-resizer"
    queries = dashboard_queries(dashboard)
    assert any('workload_resizer_webhook_requests_total{job="hooks",env="prod"}' in q for q in queries)
    assert any('{job="workload-resizer-reconciler"}' in q for q in queries)
    assert not any("__WEBHOOK__" in q or "__RECONCILER__" in q for q in queries)
    default = render(helm, values={"monitoring": {"dashboard": {"enabled": True}}})
    (cm,) = [d for d in find_all(default, "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert not [d for d in find_all(render(helm), "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")]


def test_dashboard_json_is_what_hack_dashboard_writes() -> None:
    proc = subprocess.run(
        [sys.executable, "hack/dashboard.py", "--check"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr


def test_pod_monitors(helm: str) -> None:
    docs = render(
        helm,
        namespace="ops",
        values={"monitoring": {"podMonitor": {"enabled": True, "labels": {"release": "kps"}, "interval": "15s"}}},
    )
    monitors = {d["metadata"]["name"]: d for d in find_all(docs, "PodMonitor")}
    assert set(monitors) == {"workload-resizer-webhook", "workload-resizer-reconciler"}
    for name, monitor in monitors.items():
        (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
        assert monitor["metadata"]["labels"]["release"] == "kps" and endpoint["interval"] == "15s"
        assert endpoint["relabelings"] == [{"targetLabel": "job", "replacement": name}]
        deployment = find(docs, "Deployment", name)
        assert monitor["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert endpoint["port"] in {p["name"] for p in container["ports"]}
    webhook = monitors["workload-resizer-webhook"]["spec"]["podMetricsEndpoints"][0]
    assert webhook["scheme"] == "https"
    assert webhook["tlsConfig"] == {
        "serverName": "workload-resizer-webhook.ops.svc",
        "ca": {"secret": {"name": "workload-resizer-webhook-tls", "key": "ca.crt"}},
    }
    assert not find_all(render(helm), "PodMonitor")
