"""`workload-resizer report`'s pure part: totals, held-back reasons, and the three renderings."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from commands.cli import parse
from commands.report import applied_hints, build_report, report_html, report_json, report_table
from reconciler.settings import ReportSettings
from resizer.forecast import forecast_fleet
from resizer.runtime_hints import pod_runtimes

from .test_baseline_authority import CONFIG, RING, SCOPE
from .test_freed import NODES, fleet, pod

INFO = {
    "config": "ConfigMap wr/workload-resizer-config",
    "pods": 9,
    "nodes": 3,
    "keys": "verified",
    "listSeconds": 0.01,
    "planSeconds": 0.01,
}


def deferred(p: dict[str, Any]) -> dict[str, Any]:
    p["status"]["conditions"] = [
        {
            "type": "PodResizePending",
            "status": "True",
            "reason": "Deferred",
            "message": "Node didn't have enough capacity: cpu",
        }
    ]
    return p


def report_of(pods: list[dict[str, Any]]):
    forecast = forecast_fleet(pods, NODES, CONFIG, SCOPE, keyring=RING)
    return build_report(forecast, pods, INFO)


def test_totals_and_held_back_reasons() -> None:
    pods = [*fleet(), deferred(pod("h", 1000, 256))]
    report = report_of(pods)
    assert {t: (v.pods, v.freed_cpu) for t, v in report.by_node_type.items()} == {"n4": (4, 300), "n2d": (1, 0)}
    assert report.total.freed_cpu == sum(v.freed_cpu for v in report.by_workload.values()) == 300
    assert [(h.name, h.reason) for h in report.held_back] == [
        ("c", "NotResizedYet"),
        ("e", "OriginalsUnverified"),
        ("f", "UnknownNodeType"),
        ("h", "ResizeDeferred"),
    ]
    assert next(h for h in report.held_back if h.name == "h").detail == "Node didn't have enough capacity: cpu"
    assert report.left_alone == {"OutOfScope": 1}


def test_table_and_json() -> None:
    report = report_of(fleet())
    table = report_table(report)
    assert re.search(r"^n4\s+3\s+2500m -> 2200m\s+300m freed\s+896Mi -> 896Mi\s+0$", table, re.M), table
    assert "Total: 4 managed pods; CPU requests 4500m as authored -> 4200m now (300m freed)" in table
    assert "Held back (3; those without a plan are not in the totals):" in table
    assert "shop/e on node-1 (n4): OriginalsUnverified:" in table
    document = json.loads(json.dumps(report_json(report)))
    assert document["kind"] == "Report"
    assert [(n["nodeType"], n["cpu"]["freedMillicores"]) for n in document["nodeTypes"]] == [("n2d", 0), ("n4", 300)]
    assert document["total"]["cpu"] == {
        "originalMillicores": 4500,
        "currentMillicores": 4200,
        "freedMillicores": 300,
        "original": "4500m",
        "current": "4200m",
    }
    assert sum(w["cpu"]["freedMillicores"] for w in document["workloads"]) == 300
    assert {h["reason"] for h in document["heldBack"]} == {"NotResizedYet", "OriginalsUnverified", "UnknownNodeType"}


def test_html_is_one_self_contained_page_with_a_chart_per_node_type() -> None:
    page = report_html(report_of(fleet()))
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert page.count("<svg") == 2 and page.count("</svg>") == 2
    assert not re.search(r"https?:|<script|<link|<img|<iframe|@import|url\(", page)
    assert "300m freed" in page and "OriginalsUnverified" in page


def test_html_escapes_what_comes_from_the_cluster() -> None:
    p = pod("x", 1000, 256, node="node-3")
    p["metadata"]["namespace"] = "shop"
    forecast = forecast_fleet([p], {"node-3": "<b>evil</b>"}, CONFIG, SCOPE, keyring=RING)
    page = report_html(build_report(forecast, [p], INFO))
    assert "<b>evil</b>" not in page and "&lt;b&gt;evil&lt;/b&gt;" in page


def test_report_flags_are_plans() -> None:
    settings = parse(["report", "-o", "html", "--namespace=wr", "--node-type-label=family"])
    assert isinstance(settings, ReportSettings)
    assert (settings.output, settings.node_type_label) == ("html", "family")
    assert settings.scope.excluded == {"kube-system", "wr"}


def with_jvm(p: dict[str, Any]) -> dict[str, Any]:
    p["spec"]["containers"][0]["env"] = [{"name": "JAVA_TOOL_OPTIONS", "value": "-XX:MaxRAMPercentage=75"}]
    return p


def hinted_report(pods: list[dict[str, Any]]):
    runtimes = {(p["metadata"]["namespace"], p["metadata"]["name"]): r for p in pods if (r := pod_runtimes(p))}
    forecast = forecast_fleet(pods, NODES, CONFIG, SCOPE, keyring=RING)
    return build_report(forecast, pods, INFO, runtimes)


def test_report_shows_the_runtime_hints_of_containers_resized_in_place() -> None:
    resized, not_yet = with_jvm(pod("a", 1000, 256, resized_percent=80)), with_jvm(pod("c", 1000, 512))
    plain = pod("b", 500, 128, resized_percent=80)
    report = hinted_report([resized, not_yet, plain])
    assert [(p.name, h.container, h.reason) for p, h in report.runtime_hints] == [
        ("a", "app", "JvmCpuCountAtStart")
    ]  # c is not resized yet, b has no runtime that reads its limits
    table = report_table(report)
    assert re.search(r"^n4\s+3\s+2500m -> 2200m\s+300m freed", table, re.M), table  # the tables as before
    assert re.search(
        r"^Runtime hints .*\n  shop/ReplicaSet/web-7d9f \(1 pod\), container app: JvmCpuCountAtStart: the JVM "
        r"\(JAVA_TOOL_OPTIONS\) sizes .* they stay sized for 1 after the CPU limit 1 -> 800m, until it restarts$",
        table,
        re.M,
    ), table
    document = json.loads(json.dumps(report_json(report)))
    assert document["runtimeHints"] == [
        {
            "namespace": "shop",
            "name": "a",
            "workload": "ReplicaSet/web-7d9f",
            "nodeType": "n4",
            "container": "app",
            "runtime": "jvm",
            "reason": "JvmCpuCountAtStart",
            "message": report.runtime_hints[0][1].message,
        }
    ]
    page = report_html(report)
    assert "<h2>Runtime hints (1)</h2>" in page and "JvmCpuCountAtStart" in page


def test_no_runtime_hints_section_without_hints() -> None:
    report = hinted_report(fleet())
    assert report.runtime_hints == ()
    assert "Runtime hints" not in report_table(report) and "Runtime hints" not in report_html(report)
    assert report_json(report)["runtimeHints"] == []


def test_a_pod_sized_at_admission_started_at_its_size() -> None:
    sized = with_jvm(pod("a", 1000, 256, resized_percent=80))
    report = hinted_report([sized])
    assert len(report.runtime_hints) == 1
    forecast = forecast_fleet([sized], NODES, CONFIG, SCOPE, keyring=RING)
    as_sized = replace(forecast.workloads[0].pods[0], sized_at_admission="n4")
    forecast.workloads[0].pods[0] = as_sized
    assert applied_hints(forecast, {("shop", "a"): pod_runtimes(sized)}) == ()  # type: ignore[dict-item]
