"""Resizes that never surprise the apiserver, a node or another controller, on the real apiserver.

- A LimitRange max, a nearly full ResourceQuota, a full quota of one PriorityClass (its
  scopeSelector) and a full (KWOK) node each hold the resize:
  zero pods/resize requests reach the apiserver (counted by the apiserver's own
  apiserver_request_total), one ResizeHeld Event, and the resize goes out once the constraint
  is lifted.
- With the VerticalPodAutoscaler CRD installed (tests/cluster/manifests/vpa-crd.yaml; no VPA
  controller runs), a Deployment targeted by a VPA in InPlaceOrRecreate mode is never resized
  (VPAManaged Event); one whose VPA is Off is.

Every pod here sits on a node of type `slow` (cpuPerf 0.5 in the test config): its 1-cpu
Guaranteed container is planned to grow to 2 cpu.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devkit.kube import deployment, installed_crd, wait_for
from resizer.podstate import SKIP
from tests.cluster.test_reconciler import Harness, applied, guaranteed, resources

VPA_CRD = Path(__file__).parent / "manifests" / "vpa-crd.yaml"


def resizes_served(h: Harness) -> float:
    """pods/resize PATCHes the apiserver answered (any code), since it started."""
    return sum(h.cluster.local.resize_patches_served().values())


def resizes_accepted(h: Harness) -> float:
    """pods/resize PATCHes the apiserver accepted (2xx), since it started."""
    return sum(n for code, n in h.cluster.local.resize_patches_served().items() if code.startswith("2"))


def held_then_lifted(h: Harness, app: str, lift: Any, fragment: str, constraint: str) -> None:
    """The pod of `app` is held (no resize request, one ResizeHeld event naming `fragment`);
    after `lift()` it is resized to 2 cpu."""
    pod = h.wait_running(app)[0]
    name = pod["metadata"]["name"]
    before, accepted = resizes_served(h), resizes_accepted(h)
    reconciler = h.reconciler()
    event = h.wait_event(name, "ResizeHeld")
    assert fragment in event["message"], event["message"]
    # Let it look again (its own events, a resync): still nothing sent, still one event.
    h.kube.patch(f"/api/v1/namespaces/{h.ns}/pods/{name}", {"metadata": {"labels": {"poke": "1"}}})
    wait_for(
        "the reconciler to have seen the poke",
        lambda: (
            reconciler.metric("controller_runtime_reconcile_total", controller="pod-resizer")
            - reconciler.metric("controller_runtime_reconcile_total", controller="pod-resizer", result="error")
            >= 2
        ),
        timeout=30,
    )
    assert resizes_served(h) == before
    assert reconciler.metric("rest_client_requests_total", method="PATCH", resource="pods/resize") == 0
    assert [e["reason"] for e in h.events(name)].count("ResizeHeld") == 1
    assert reconciler.metric("workload_resizer_resizes_held", constraint=constraint) == 1
    lift()
    resized = h.wait_applied(app, "slow")[0]
    assert resources(resized)["requests"]["cpu"] == 2
    # One accepted; the apiserver's admission may refuse one sent before its own cache saw the lift.
    assert resizes_accepted(h) == accepted + 1
    assert "ResizeFailed" not in [e["reason"] for e in h.events(name)]
    assert reconciler.metric("workload_resizer_resizes_held", constraint=constraint) == 0


def test_limit_range_max_holds_the_resize_until_it_is_raised(h: Harness) -> None:
    node = h.node("lr", "slow")
    h.kube.create(
        f"/api/v1/namespaces/{h.ns}/limitranges",
        {"metadata": {"name": "cpu-max"}, "spec": {"limits": [{"type": "Container", "max": {"cpu": "1500m"}}]}},
    )
    h.deploy("web", node, [guaranteed()])

    def lift() -> None:
        h.kube.patch(
            f"/api/v1/namespaces/{h.ns}/limitranges/cpu-max",
            {"spec": {"limits": [{"type": "Container", "max": {"cpu": "4"}}]}},
        )

    held_then_lifted(h, "web", lift, "LimitRange cpu-max", "LimitRange")


def test_nearly_full_quota_holds_the_resize_until_it_is_freed(h: Harness) -> None:
    node = h.node("rq", "slow")
    h.kube.create(
        f"/api/v1/namespaces/{h.ns}/resourcequotas",
        {"metadata": {"name": "compute"}, "spec": {"hard": {"requests.cpu": "1500m", "limits.cpu": "1500m"}}},
    )
    h.deploy("web", node, [guaranteed()])
    wait_for(
        "quota usage counted",
        lambda: (
            h.kube.get(f"/api/v1/namespaces/{h.ns}/resourcequotas/compute")
            .get("status", {})
            .get("used", {})
            .get("requests.cpu")
            == "1"
        ),
        timeout=30,
    )

    def lift() -> None:
        h.kube.patch(
            f"/api/v1/namespaces/{h.ns}/resourcequotas/compute",
            {"spec": {"hard": {"requests.cpu": "4", "limits.cpu": "4"}}},
        )

    held_then_lifted(h, "web", lift, "ResourceQuota compute", "ResourceQuota")


def test_a_full_priority_class_quota_holds_the_resize_until_it_is_raised(h: Harness) -> None:
    """A quota charging only pods of one priority class (scopeSelector), full: the preflight
    matches the pod to it as the apiserver's quota admission does."""
    node = h.node("pcq", "slow")
    priority_class = f"{h.ns}-high"
    h.kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", {"metadata": {"name": priority_class}, "value": 1000})
    try:
        held_by_priority_class_quota(h, node, priority_class)
    finally:
        h.kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{priority_class}")


def held_by_priority_class_quota(h: Harness, node: str, priority_class: str) -> None:
    selector = {"matchExpressions": [{"scopeName": "PriorityClass", "operator": "In", "values": [priority_class]}]}
    h.kube.create(
        f"/api/v1/namespaces/{h.ns}/resourcequotas",
        {
            "metadata": {"name": "high"},
            "spec": {"hard": {"requests.cpu": "1", "limits.cpu": "1"}, "scopeSelector": selector},
        },
    )
    manifest = deployment("web", 1, [guaranteed()], node_selector={"kubernetes.io/hostname": node})
    manifest["spec"]["template"]["spec"]["priorityClassName"] = priority_class
    h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", manifest)
    wait_for(
        "the priority class's pods counted",
        lambda: (
            h.kube.get(f"/api/v1/namespaces/{h.ns}/resourcequotas/high")
            .get("status", {})
            .get("used", {})
            .get("requests.cpu")
            == "1"
        ),
        timeout=30,
    )

    def lift() -> None:
        h.kube.patch(
            f"/api/v1/namespaces/{h.ns}/resourcequotas/high",
            {"spec": {"hard": {"requests.cpu": "4", "limits.cpu": "4"}}},
        )

    held_then_lifted(h, "web", lift, "ResourceQuota high", "ResourceQuota")


def test_full_node_holds_the_resize_until_room_is_freed(h: Harness) -> None:
    node = f"{h.ns}-full"[:63].rstrip("-")
    h.nodes.append(node)
    h.cluster.add_node(node, cpu="4", labels={h.label: "slow"})
    # A neighbour the reconciler never touches takes 2500m of the 4: 500m free, the resize needs 1000m more.
    h.deploy("filler", node, [guaranteed(cpu="2500m")], annotations={SKIP: "true"})
    h.wait_running("filler")
    h.deploy("web", node, [guaranteed()])

    def lift() -> None:
        h.kube.patch(f"/apis/apps/v1/namespaces/{h.ns}/deployments/filler", {"spec": {"replicas": 0}})

    held_then_lifted(h, "web", lift, f"node {node}", "NodeHeadroom")


@pytest.fixture
def vpa_crd(h: Harness) -> Iterator[None]:
    with installed_crd(h.kube, yaml.safe_load(VPA_CRD.read_text())):
        yield


def test_vpa_in_an_updating_mode_is_left_alone_and_off_composes(h: Harness, vpa_crd: None) -> None:
    node = h.node("vpa", "slow")
    for app, mode in (("managed", "InPlaceOrRecreate"), ("advised", "Off")):
        h.kube.create(
            f"/apis/autoscaling.k8s.io/v1/namespaces/{h.ns}/verticalpodautoscalers",
            {
                "apiVersion": "autoscaling.k8s.io/v1",
                "kind": "VerticalPodAutoscaler",
                "metadata": {"name": app},
                "spec": {
                    "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": app},
                    "updatePolicy": {"updateMode": mode},
                },
            },
        )
        h.deploy(app, node, [guaranteed()])
    managed = h.wait_running("managed")[0]
    h.wait_running("advised")
    before = resizes_served(h)
    reconciler = h.reconciler()
    h.wait_applied("advised", "slow")
    event = h.wait_event(managed["metadata"]["name"], "VPAManaged")
    assert "VerticalPodAutoscaler managed (updateMode InPlaceOrRecreate)" in event["message"]
    assert "Deployment managed" in event["message"]
    assert resizes_served(h) == before + 1  # the Off one only
    now = h.pod(managed["metadata"]["name"])
    assert resources(now) == resources(managed) and applied(now) is None
    # Switched to Off, the VPA no longer sizes running pods: ours are resized.
    h.kube.patch(
        f"/apis/autoscaling.k8s.io/v1/namespaces/{h.ns}/verticalpodautoscalers/managed",
        {"spec": {"updatePolicy": {"updateMode": "Off"}}},
    )
    h.wait_applied("managed", "slow")
    assert reconciler.metric("workload_resizer_resizes_held", constraint="VerticalPodAutoscaler") == 0


def test_plan_shows_what_preflight_would_hold(h: Harness) -> None:
    from tests.cluster.test_plan_command import run_plan

    node = h.node("plan", "slow")
    h.kube.create(
        f"/api/v1/namespaces/{h.ns}/limitranges",
        {"metadata": {"name": "cpu-max"}, "spec": {"limits": [{"type": "Container", "max": {"cpu": "1500m"}}]}},
    )
    h.deploy("web", node, [guaranteed()])
    pod = h.wait_running("web")[0]
    done = run_plan(h, "--output=json")
    assert done.returncode == 0, done.stderr
    held = [e for e in json.loads(done.stdout)["held"] if e["namespace"] == h.ns]
    assert held == [
        {
            "namespace": h.ns,
            "name": pod["metadata"]["name"],
            "node": node,
            "reason": "ResizeHeld",
            "constraint": "LimitRange",
            "object": "cpu-max",
            "detail": "container app: cpu limit 2 is above the maximum 1500m",
        }
    ]
    table = run_plan(h)
    assert f"{h.ns}/{pod['metadata']['name']} on {node}: ResizeHeld: LimitRange cpu-max" in table.stdout, table.stdout


def test_pod_level_resources_are_left_alone_where_the_node_cannot_resize_them(h: Harness) -> None:
    """A kubelet without pod-level resize (its gate off) does not declare it: nothing is sent.
    (Where the node declares it, see test_pod_level_resources.py.)"""
    node = h.node("podlevel", "slow")
    declared = h.kube.get(f"/api/v1/nodes/{node}")["status"].get("declaredFeatures") or []
    h.kube.patch(
        f"/api/v1/nodes/{node}/status",
        {"status": {"declaredFeatures": [f for f in declared if f != "InPlacePodLevelResourcesVerticalScaling"]}},
    )
    manifest = deployment("pl", 1, [guaranteed()], node_selector={"kubernetes.io/hostname": node})
    manifest["spec"]["template"]["spec"]["resources"] = {
        "requests": {"cpu": "1", "memory": "256Mi"},
        "limits": {"cpu": "1", "memory": "256Mi"},
    }
    h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", manifest)
    pod = h.wait_running("pl")[0]
    name = pod["metadata"]["name"]
    before = resizes_served(h)
    proc = h.reconciler()
    event = h.wait_event(name, "PodLevelResources")
    assert event["type"] == "Warning" and "spec.resources" in event["message"], event
    assert "declaredFeatures" in event["message"], event
    h.kube.patch(f"/api/v1/namespaces/{h.ns}/pods/{name}", {"metadata": {"labels": {"poke": "1"}}})
    h.sentinel(proc)  # the poke taken up
    assert resizes_served(h) == before and h.reasons(name) == ["PodLevelResources"]
    assert resources(h.pod(name)) == resources(pod) and applied(h.pod(name)) is None
