"""Per-node order on the real kubelet: on a node that only fits its new sizes in order, the
decreases go first and each increase waits (ResizeHeld, NodeHeadroom) until room is free, so
the kubelet never defers one.

The node (type n2d) runs 4 pods planned down (300m -> 150m, baseline `slow`) and 4 planned up
(150m -> 300m, baseline `double`): 1800m before and after, on an allocatable of the machine's
CPUs - 100m. Only 100m is free at the start, and every increase needs 150m: sent at once, the
kubelet would defer increases until decreases were actuated.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devkit.configs import config_yaml
from tests.cluster.test_real_node import START_TIMEOUT, real_deployment
from tests.cluster.test_real_node_outcomes import allocatable_millicores, alone_on_the_real_node, show
from tests.cluster.test_reconciler import Harness, applied, guaranteed, q, resources, status_resources
from tests.conftest import RealNode

DIRECTION = "e2e.workload-resizer.io/direction"
CONFIG_YAML = (
    config_yaml(extra_node_types={"slow": (0.5, 1.0), "double": (2.0, 1.0)})
    + f"""\
podLabels:
  {DIRECTION}:
    down: {{ baselineNodeType: slow }}
    up: {{ baselineNodeType: double }}
"""
)
PODS = 4


@pytest.fixture
def h(cluster: Any, namespace: str, real_node: RealNode) -> Iterator[Harness]:
    yield from alone_on_the_real_node(cluster, namespace, real_node, CONFIG_YAML)


def deploy_direction(h: Harness, node: RealNode, direction: str, cpu: str) -> None:
    manifest = real_deployment(direction, node, [guaranteed(cpu=cpu, memory="48Mi")])
    manifest["spec"]["replicas"] = PODS
    manifest["spec"]["template"]["metadata"]["labels"][DIRECTION] = direction
    h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", manifest)


def test_decreases_go_first_and_no_increase_is_deferred(h: Harness, real_node: RealNode) -> None:
    allocatable = allocatable_millicores(h, real_node)
    free = allocatable - PODS * (300 + 150)
    assert 0 <= free < 150, f"allocatable {allocatable}m: the scenario needs 0-149m free (2 CPUs - 100m reserved)"
    h.relabel(real_node.name, "n2d")
    deploy_direction(h, real_node, "down", "300m")
    deploy_direction(h, real_node, "up", "150m")
    for app in ("down", "up"):
        h.wait_pods(app, PODS, lambda p: p["status"].get("phase") == "Running", "Running", timeout=START_TIMEOUT)
    served = sum(h.cluster.local.resize_patches_served().values())

    proc = h.reconciler()
    for app, cpu in (("down", "150m"), ("up", "300m")):
        pods = h.wait_applied(app, "n2d", count=PODS, timeout=START_TIMEOUT)
        for pod in pods:
            assert resources(pod)["requests"]["cpu"] == q(cpu) == status_resources(pod)["requests"]["cpu"]
    for outcome in ("deferred", "infeasible", "error"):
        assert proc.metric("workload_resizer_resize_outcomes_total", outcome=outcome) == 0, outcome
    assert proc.metric("workload_resizer_resize_outcomes_total", outcome="actuated") == 2 * PODS
    assert sum(h.cluster.local.resize_patches_served().values()) == served + 2 * PODS
    deferred = [
        e
        for e in h.kube.get(f"/api/v1/namespaces/{h.ns}/events")["items"]
        if e["reason"] in ("ResizeDeferred", "ResizeInfeasible")
    ]
    assert deferred == [], [(e["involvedObject"]["name"], e["message"]) for e in deferred]
    held = [e for e in h.kube.get(f"/api/v1/namespaces/{h.ns}/events")["items"] if e["reason"] == "ResizeHeld"]
    assert held and all(e["involvedObject"]["name"].startswith("up-") for e in held)
    assert all(f"node {real_node.name}" in e["message"] for e in held)
    for pod in h.pods("up"):
        assert applied(pod) == "n2d"
    show(h, h.pods("up")[0]["metadata"]["name"])
