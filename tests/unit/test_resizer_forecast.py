"""The `plan` command's pure core: the reconciler's decisions, grouped and added up."""

from __future__ import annotations

import json
from typing import Any

from commands.plan import forecast_json, forecast_table, planned_hints
from resizer.forecast import forecast_fleet, workload_of
from resizer.runtime_hints import pod_runtimes
from resizer.scope import namespace_scope

from .test_resizer_support import container, guaranteed, make_pod, sample_config


def bound(
    pod: dict[str, Any], node: str, namespace: str = "shop", name: str = "web-1", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    pod["metadata"].update(namespace=namespace, name=name)
    pod["metadata"].setdefault("generation", 1)  # as the apiserver sets it at creation
    if labels:
        pod["metadata"]["labels"] = labels
    pod["spec"]["nodeName"] = node
    pod["status"] = {"phase": "Running"}
    return pod


NODES = {"a": "n4", "b": "n2d", "c": "t2a", "d": None}


def test_a_deployments_replicaset_counts_as_the_deployment() -> None:
    pod = bound(make_pod(guaranteed()), "a", labels={"pod-template-hash": "5d8f7"})
    pod["metadata"]["ownerReferences"][0]["name"] = "web-5d8f7"
    assert workload_of(pod) == "Deployment/web"
    other = bound(make_pod(guaranteed(), owner_kind="StatefulSet"), "a")
    assert workload_of(other) == "StatefulSet/web"


def test_forecast_groups_per_workload_and_node_type_and_adds_up_the_requests() -> None:
    pods = [
        bound(make_pod(guaranteed()), "a", name="web-1"),
        bound(make_pod(guaranteed()), "a", name="web-2"),
        bound(make_pod(guaranteed()), "b", name="web-3"),
        bound(make_pod(container("app", {"cpu": "10m", "memory": "32Mi"})), "a", name="tiny"),
        bound(make_pod(guaranteed()), "c", name="odd"),
        bound(make_pod(guaranteed()), "d", name="untyped"),
        bound(make_pod(guaranteed(), annotations={"workload-resizer.io/skip": "true"}), "a", name="optout"),
        bound(make_pod(guaranteed()), "a", namespace="kube-system", name="dns"),
        bound(make_pod(guaranteed(), owner_kind=None), "a", name="bare"),
    ]
    forecast = forecast_fleet(pods, NODES, sample_config(), namespace_scope("wr"))
    groups = {(g.workload, g.node_type): g for g in forecast.workloads}
    n4 = groups[("ReplicaSet/web", "n4")]
    assert (len(n4.pods), n4.resized, n4.total("current_cpu"), n4.total("desired_cpu")) == (3, 2, 2010, 1610)
    assert groups[("ReplicaSet/web", "n2d")].resized == 0
    assert [p.name for p in forecast.not_resized] == ["odd"]
    assert forecast.not_resized[0].outcome == "UnknownNodeType"
    assert forecast.skipped == {"NoController": 1, "NodeWithoutType": 1, "OutOfScope": 1, "SkipAnnotation": 1}
    assert (forecast.pods, forecast.resized) == (4, 2)
    assert forecast.total("desired_cpu") - forecast.total("current_cpu") == -400

    document = forecast_json(forecast, {"config": "test", "pods": 9, "nodes": 4, "listSeconds": 0, "planSeconds": 0})
    assert document["total"]["requests"]["cpu"] == {
        "currentMillicores": 3010,
        "desiredMillicores": 2610,
        "deltaMillicores": -400,
        "current": "3010m",
        "desired": "2610m",
    }
    table = forecast_table(forecast, {"config": "test", "pods": 9, "nodes": 4, "listSeconds": 0, "planSeconds": 0})
    assert "shop       ReplicaSet/web  n4         2/3   2010m -> 1610m  2080Mi -> 2080Mi  -400m  0" in table
    assert "Total: 2 of 4 pods in scope resized; CPU requests 3010m -> 2610m (-400m)" in table
    assert "odd on c (t2a): UnknownNodeType" in table


def test_with_realignment_off_pods_already_sized_for_their_node_type_are_left_alone() -> None:
    pod = bound(make_pod(guaranteed(), annotations={"workload-resizer.io/applied-instance-type": "n4"}), "a")
    forecast = forecast_fleet([pod], NODES, sample_config(), namespace_scope("wr"), skip_applied=True)
    assert forecast.skipped == {"AlreadyApplied": 1} and forecast.pods == 0
    assert forecast_fleet([pod], NODES, sample_config(), namespace_scope("wr")).resized == 1


def test_a_label_scope_uses_the_namespace_labels() -> None:
    pod = bound(make_pod(guaranteed()), "a")
    scope = namespace_scope("wr", selector="!skip")
    assert forecast_fleet([pod], NODES, sample_config(), scope, {"shop": {"skip": ""}}).skipped == {"OutOfScope": 1}
    assert forecast_fleet([pod], NODES, sample_config(), scope, {"shop": {}}).resized == 1


def test_plan_shows_the_runtime_hints_of_the_pods_it_would_resize() -> None:
    java = guaranteed()
    java["command"] = ["java", "-jar", "/app.jar"]
    pods = [
        bound(make_pod(java), "a", name="api-1"),
        bound(make_pod(java), "a", name="api-2"),
        bound(make_pod(guaranteed()), "a", name="web-1"),
    ]
    pods[2]["metadata"]["ownerReferences"][0]["name"] = "plain"
    runtimes = {("shop", p["metadata"]["name"]): r for p in pods if (r := pod_runtimes(p)) is not None}
    assert set(runtimes) == {("shop", "api-1"), ("shop", "api-2")}
    forecast = forecast_fleet(pods, NODES, sample_config(), namespace_scope("wr"))
    hints = planned_hints(forecast, runtimes)
    info = {"config": "test", "pods": 3, "nodes": 4, "listSeconds": 0, "planSeconds": 0}
    table = forecast_table(forecast, info, hints=hints)
    assert "shop       ReplicaSet/web    n4         2     2 -> 1600m" in table  # the table's columns as before
    block = table[table.index("Runtime hints") :].splitlines()
    assert block[1] == (
        "  shop/ReplicaSet/web (2 pods), container app: JvmCpuCountAtStart: the JVM (command) sizes its GC and JIT "
        "compiler threads and common ForkJoinPool from the CPU limit when it starts: they stay sized for 1 after the "
        "CPU limit 1 -> 800m, until it restarts"
    )
    assert not block[2].startswith("  ")  # one line for the workload's two pods; the plain one has none
    document = forecast_json(forecast, info, hints)
    entries = {p["name"]: p for w in document["workloads"] for p in w["podPlans"]}
    assert entries["web-1"]["runtimeHints"] == []
    assert entries["api-1"]["runtimeHints"] == [
        {
            "container": "app",
            "runtime": "jvm",
            "reason": "JvmCpuCountAtStart",
            "message": hints[("shop", "api-1")][0].message,
        }
    ]
    plans = {p["name"]: p for w in json.loads(json.dumps(document))["workloads"] for p in w["podPlans"]}
    assert plans["api-2"]["runtimeHints"][0]["reason"] == "JvmCpuCountAtStart"


def test_plan_prints_no_runtime_hints_block_without_hints() -> None:
    forecast = forecast_fleet([bound(make_pod(guaranteed()), "a")], NODES, sample_config(), namespace_scope("wr"))
    info = {"config": "test", "pods": 1, "nodes": 4, "listSeconds": 0, "planSeconds": 0}
    assert "Runtime hints" not in forecast_table(forecast, info, hints=planned_hints(forecast, {}))
    assert forecast_json(forecast, info)["workloads"][0]["podPlans"][0]["runtimeHints"] == []
