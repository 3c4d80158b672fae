"""`plan`'s preflight verdicts: the resizes the reconciler would hold, from listed objects."""

from __future__ import annotations

from typing import Any

from commands.plan import forecast_table, preflight_verdicts
from kube.slim import slim_pod
from resizer.forecast import forecast_fleet
from resizer.scope import NamespaceScope
from resizer.vpa import NO_OWNER, Owner
from tests.unit.test_reconciler_preflight import GROW_CONFIG
from tests.unit.test_reconciler_reconcile import pod


def fleet(*pods: dict[str, Any]) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    for p in pods:
        p["metadata"]["generation"] = 1  # never changed since creation: the spec is the baseline
    slim = [slim_pod(p) for p in pods]
    nodes = [{"metadata": {"name": "node-1"}, "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}}}]
    return forecast_fleet(slim, {"node-1": "slow"}, GROW_CONFIG, NamespaceScope()), slim, nodes


def constraints(**found: Any) -> dict[str, Any]:
    return {"limitranges": [], "resourcequotas": [], "vpas": [], "owners": {}, "notJudged": [], **found}


def test_nothing_held_without_constraints() -> None:
    forecast, pods, nodes = fleet(pod())
    assert forecast.resized == 1
    assert preflight_verdicts(forecast, pods, nodes, constraints()) == []


def test_limit_range_quota_and_vpa_verdicts() -> None:
    forecast, pods, nodes = fleet(pod())
    limit = {
        "metadata": {"name": "cpu-max", "namespace": "shop"},
        "spec": {"limits": [{"type": "Container", "max": {"cpu": "1500m"}}]},
    }
    [held] = preflight_verdicts(forecast, pods, nodes, constraints(limitranges=[limit]))
    assert held == {
        "namespace": "shop",
        "name": "web-1",
        "node": "node-1",
        "reason": "ResizeHeld",
        "constraint": "LimitRange",
        "object": "cpu-max",
        "detail": "container app: cpu limit 2 is above the maximum 1500m",
    }
    quota = {
        "metadata": {"name": "q", "namespace": "shop"},
        "spec": {"hard": {"requests.cpu": "1"}},
        "status": {"hard": {"requests.cpu": "1"}, "used": {"requests.cpu": "1"}},
    }
    [held] = preflight_verdicts(forecast, pods, nodes, constraints(resourcequotas=[quota]))
    assert held["constraint"] == "ResourceQuota" and held["object"] == "q"
    vpa = {
        "metadata": {"name": "v", "namespace": "shop"},
        "spec": {"targetRef": {"kind": "Deployment", "name": "web-deploy"}, "updatePolicy": {"updateMode": "Auto"}},
    }
    owners = {("shop", Owner("ReplicaSet", "web")): Owner("Deployment", "web-deploy")}
    [held] = preflight_verdicts(forecast, pods, nodes, constraints(vpas=[vpa], owners=owners))
    assert held["reason"] == "VPAManaged" and held["object"] == "v"
    owners = {("shop", Owner("ReplicaSet", "web")): NO_OWNER}
    assert preflight_verdicts(forecast, pods, nodes, constraints(vpas=[vpa], owners=owners)) == []


def test_the_table_lists_what_would_be_held() -> None:
    forecast, pods, nodes = fleet(pod())
    held = [
        {
            "namespace": "shop",
            "name": "web-1",
            "node": "node-1",
            "reason": "ResizeHeld",
            "constraint": "NodeHeadroom",
            "object": "node-1",
            "detail": "cpu: needs 2, 1 free of 8 allocatable",
        }
    ]
    table = forecast_table(
        forecast,
        {
            "config": "c",
            "pods": 1,
            "nodes": 1,
            "listSeconds": 0,
            "planSeconds": 0,
            "held": held,
            "preflightNotJudged": ["ResourceQuota: forbidden"],
        },
    )
    assert "shop/web-1 on node-1: ResizeHeld: NodeHeadroom node-1: cpu: needs 2, 1 free of 8 allocatable" in table
    assert "Preflight not judged (cannot read): ResourceQuota: forbidden" in table
