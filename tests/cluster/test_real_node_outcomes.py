"""Each resize outcome on the real kubelet, handled end to end by the reconciler.

test_real_node.py proves what the real kubelet and apiserver do with a resize sent by hand;
here the reconciler (`python -m reconciler`, the usual harness) sends it and must follow it
to a truthful end: the Events and annotations `kubectl describe pod` shows, the container's
cgroup, and how many API writes it cost (a stalled resize must cost none over a minute).

- infeasible: the `slow` family doubles 1 CPU to 2, more than the node's allocatable
  (the machine's CPUs - 100m). 1.36: the apiserver refuses it (403, cause NodeCapacity);
  1.35: stored, and the kubelet marks it PodResizePending/Infeasible; the spec is set back.
- deferred: another pod holds most of the node's CPU, so growing this one fits the node but
  not now; the kubelet defers it, and actuates it by itself once the other pod is gone.
- error: a memory-limit decrease below the container's usage (memoryLimitDecrease: Allow);
  the kubelet fails actuation (PodResizeInProgress/Error), the reconciler re-checks with
  backoff, then sets the spec back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devkit.configs import config_yaml
from devkit.kube import wait_for
from resizer.podstate import APPLIED_INSTANCE_TYPE, RESIZE_STATE, SKIP
from tests.cluster.test_real_node import (
    START_TIMEOUT,
    app_status,
    cgroup_limits,
    container_id,
    deploy,
    implied_limits,
    kubelet_memory_usage,
    real_deployment,
    wait_resized_truthfully,
)
from tests.cluster.test_reconciler import Harness, guaranteed, q, resources, status_resources
from tests.cluster.test_resize_outcomes import (
    WITHOUT_NODE_PREFLIGHT,
    assert_quiet_while_stalled,
    condition,
    described,
    state,
)
from tests.conftest import RealNode

# The harness's families plus one whose memory is twice as fast (256Mi -> 128Mi), with memory
# limits allowed to follow it down (docs/how-it-works.md "Memory-limit decreases").
CONFIG_YAML = (
    config_yaml(extra_node_types={"slow": (0.5, 1.0), "hyper": (100.0, 1.0), "memfast": (1.0, 2.0)})
    + "memoryLimitDecrease: Allow\n"
)
# How long a stalled resize is watched for writes (the acceptance window).
STALL_WINDOW = 60


def alone_on_the_real_node(cluster: Any, namespace: str, node: RealNode, config: str) -> Iterator[Harness]:
    """A harness with `config`, once no other test's pod is left on the real node; the node loses
    the harness's type label afterwards."""
    harness = Harness(cluster, namespace)
    harness.config(config)
    wait_until_alone(harness, node)
    try:
        yield harness
    finally:
        harness.close()
        cluster.kube.patch(f"/api/v1/nodes/{node.name}", {"metadata": {"labels": {harness.label: None}}})


@pytest.fixture
def h(cluster: Any, namespace: str, real_node: RealNode) -> Iterator[Harness]:
    yield from alone_on_the_real_node(cluster, namespace, real_node, CONFIG_YAML)


def wait_until_alone(h: Harness, node: RealNode) -> None:
    """The pods of earlier tests (their namespaces are deleted asynchronously) have left the node:
    the kubelet counts every pod it still runs, and these tests size pods against its allocatable."""
    wait_for(
        f"no other pod on {node.name}",
        lambda: not h.kube.get("/api/v1/pods", fieldSelector=f"spec.nodeName={node.name}")["items"],
        timeout=START_TIMEOUT,
    )


def allocatable_millicores(h: Harness, node: RealNode) -> int:
    return int(q(h.kube.get(f"/api/v1/nodes/{node.name}")["status"]["allocatable"]["cpu"]) * 1000)


def ours(pod: dict[str, Any]) -> dict[str, str]:
    return pod["metadata"].get("annotations") or {}


def show(h: Harness, name: str) -> None:
    """What `kubectl describe pod` lists (all Events, the kubelet's too), for the report of a run (-rP)."""
    for e in sorted(
        h.kube.events_for(h.ns, name), key=lambda e: (e.get("firstTimestamp") or "", e["metadata"]["name"])
    ):
        print(
            f"{e.get('firstTimestamp')} {(e.get('source') or {}).get('component')} {e['type']} {e['reason']} "
            f"x{e.get('count')}: {e.get('message')}"
        )
    print("annotations:", {k: v for k, v in ours(h.pod(name)).items() if k.startswith("workload-resizer.io/")})


def guaranteed_resources(cpu: str, memory: str) -> dict[str, Any]:
    return {"requests": {"cpu": q(cpu), "memory": q(memory)}, "limits": {"cpu": q(cpu), "memory": q(memory)}}


def assert_untouched_container(
    node: RealNode, before: dict[str, Any], now: dict[str, Any], cpu: str, memory: str
) -> None:
    """Same container, never restarted, its cgroup at cpu/memory."""
    assert app_status(now)["restartCount"] == 0 and container_id(now) == container_id(before)
    assert cgroup_limits(node, container_id(now)) == implied_limits(q(cpu), q(memory))


# ---------------------------------------------------------------- infeasible


def test_infeasible_resize_is_reported_once_left_truthful_and_never_retried(h: Harness, real_node: RealNode) -> None:
    allocatable = allocatable_millicores(h, real_node)
    assert allocatable < 2000, "slow plans 2 CPUs, which must not fit the node"
    h.relabel(real_node.name, "slow")
    before = deploy(h, "big", real_node)  # 1 CPU, 256Mi
    name = before["metadata"]["name"]
    proc = h.reconciler(WITHOUT_NODE_PREFLIGHT)
    event = h.wait_event(name, "ResizeInfeasible", timeout=START_TIMEOUT)
    assert event["type"] == "Warning"
    if h.cluster.version >= "v1.36":
        # Refused at admission: nothing was stored, nothing to set back.
        assert (
            f"node didn't have enough allocatable resources: cpu, requested: 2000, allocatable: {allocatable}"
            in event["message"]
        ), event["message"]
        pod = h.pod(name)
        expected_writes = {"PATCH pods": 2, "PATCH pods/resize": 1, "POST events": 1, "PATCH events": 0}
        generation = 1
    else:
        # Stored; the kubelet marks it Infeasible; the reconciler sets the spec back.
        assert f"Node didn't have enough capacity: cpu, requested: 2000, capacity: {allocatable}" in event["message"], (
            event["message"]
        )
        pod = wait_for(
            "the spec set back, nothing pending",
            lambda: (
                p
                if resources(p := h.pod(name))["limits"]["cpu"] == q("1") and condition(p, "PodResizePending") is None
                else None
            ),
            timeout=START_TIMEOUT,
        )
        expected_writes = {"PATCH pods": 2, "PATCH pods/resize": 2, "POST events": 1, "PATCH events": 0}
        generation = 3
    recorded = state(h, name)
    assert recorded["state"] == "infeasible" and recorded["nodeType"] == "slow" and "cpu=" in recorded["allocatable"]
    assert resources(pod) == guaranteed_resources("1", "256Mi") == status_resources(pod)
    assert APPLIED_INSTANCE_TYPE not in ours(pod)
    assert_untouched_container(real_node, before, pod, "1", "256Mi")

    assert_quiet_while_stalled(h, proc, name, seconds=STALL_WINDOW)
    pod = h.pod(name)
    assert pod["metadata"]["generation"] == generation, "the infeasible size is not tried again"
    assert described(h, name) == [("Warning", "ResizeInfeasible")]
    assert h.writes_but_sentinels(proc) == expected_writes
    assert proc.metric("workload_resizer_resizes_waiting", state="infeasible") == 1
    show(h, name)


# ---------------------------------------------------------------- deferred


def test_deferred_resize_is_kept_reported_and_ends_resized_once_capacity_is_freed(
    h: Harness, real_node: RealNode
) -> None:
    allocatable = allocatable_millicores(h, real_node)
    # The holder takes all but 700m; the grower (500m) is planned at 1 CPU on `slow`: it fits the
    # node alone (1 CPU < allocatable), not next to the holder.
    holder_cpu = allocatable - 700
    assert holder_cpu > 300, f"allocatable {allocatable}m is too small for this scenario"
    h.relabel(real_node.name, "slow")
    holder = real_deployment("holder", real_node, [guaranteed(cpu=f"{holder_cpu}m", memory="64Mi")])
    holder["spec"]["template"]["metadata"]["annotations"] = {SKIP: "true"}  # not ours to size
    h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", holder)
    h.wait_pods("holder", 1, lambda p: p["status"].get("phase") == "Running", "Running", timeout=START_TIMEOUT)
    before = deploy(h, "grower", real_node, cpu="500m", memory="64Mi")
    name = before["metadata"]["name"]

    proc = h.reconciler("--resize-deferred-timeout=30s", WITHOUT_NODE_PREFLIGHT)
    event = h.wait_event(name, "ResizeDeferred", timeout=START_TIMEOUT)
    assert event["type"] == "Normal" and "Node didn't have enough resource: cpu" in event["message"], event
    pod = h.pod(name)
    pending = condition(pod, "PodResizePending")
    assert pending is not None and pending["reason"] == "Deferred", pod["status"].get("conditions")
    assert resources(pod) == guaranteed_resources("1", "64Mi"), "a deferred resize is kept: the kubelet retries it"
    assert status_resources(pod) == guaranteed_resources("500m", "64Mi")
    assert state(h, name)["state"] == "deferred" and APPLIED_INSTANCE_TYPE not in ours(pod)
    assert_untouched_container(real_node, before, pod, "500m", "64Mi")

    # Deferred longer than --resize-deferred-timeout: one Warning, then nothing more.
    warning = wait_for(
        "the deferred-too-long Warning",
        lambda: next((e for e in h.events(name) if e["reason"] == "ResizeDeferred" and e["type"] == "Warning"), None),
        timeout=90,
    )
    assert "still deferred after" in warning["message"]
    assert state(h, name)["warned"] is True
    assert_quiet_while_stalled(h, proc, name, seconds=STALL_WINDOW)
    assert described(h, name) == [("Normal", "ResizeDeferred"), ("Warning", "ResizeDeferred")]

    # Capacity freed: the kubelet actuates the kept resize by itself.
    h.kube.patch(f"/apis/apps/v1/namespaces/{h.ns}/deployments/holder", {"spec": {"replicas": 0}})
    resized = wait_resized_truthfully(h, name, guaranteed_resources("1", "64Mi"))
    assert resized["type"] == "Normal" and "actuated" in resized["message"]
    pod = h.pod(name)
    assert pod["metadata"]["generation"] == 2, "one resize"
    assert ours(pod)[APPLIED_INSTANCE_TYPE] == "slow" and RESIZE_STATE not in ours(pod)
    assert_untouched_container(real_node, before, pod, "1", "64Mi")
    assert described(h, name) == [("Normal", "ResizeDeferred"), ("Warning", "ResizeDeferred"), ("Normal", "Resized")]
    # originals, deferred, warned, applied; one resize; three Events.
    assert h.writes_but_sentinels(proc) == {
        "PATCH pods": 4,
        "PATCH pods/resize": 1,
        "POST events": 3,
        "PATCH events": 0,
    }
    assert proc.metric("workload_resizer_resizes_waiting", state="deferred") == 0
    assert proc.metric("workload_resizer_resize_actuation_seconds_count") == 1
    show(h, name)


# ---------------------------------------------------------------- actuation error


def test_actuation_error_is_reported_rechecked_with_backoff_then_set_back(h: Harness, real_node: RealNode) -> None:
    h.relabel(real_node.name, "memfast")
    before = deploy(h, "holder", real_node, args=["-hold-mib", "200"])  # 1 CPU, 256Mi, using 200 MiB
    name = before["metadata"]["name"]
    wait_for(
        "the kubelet's stats to show the 200 MiB",
        lambda: kubelet_memory_usage(h.kube, real_node, before) >= 200 << 20,
        timeout=START_TIMEOUT,
    )
    proc = h.reconciler("--resize-error-backoff=5s", "--resize-error-retries=2")
    first = h.wait_event(name, "ResizeError", timeout=START_TIMEOUT)
    assert first["type"] == "Warning"
    assert "cannot decrease memory limits" in first["message"] and "below current usage" in first["message"], first
    recorded = state(h, name)
    assert recorded["state"] == "error" and recorded["nodeType"] == "memfast"

    gave_up = wait_for(
        "the second ResizeError (given up)",
        lambda: next(
            (
                e
                for e in h.events(name)
                if e["reason"] == "ResizeError" and "still failed after 2 checks" in e["message"]
            ),
            None,
        ),
        timeout=120,
    )
    assert gave_up["type"] == "Warning"
    pod = wait_for(
        "the spec set back, nothing in progress",
        lambda: (
            p
            if resources(p := h.pod(name)) == guaranteed_resources("1", "256Mi")
            and condition(p, "PodResizeInProgress") is None
            else None
        ),
        timeout=START_TIMEOUT,
    )
    assert status_resources(pod) == guaranteed_resources("1", "256Mi")
    assert pod["metadata"]["generation"] == 3, "the resize, then the one revert"
    assert APPLIED_INSTANCE_TYPE not in ours(pod) and state(h, name)["state"] == "error"
    assert_untouched_container(real_node, before, pod, "1", "256Mi")

    assert_quiet_while_stalled(h, proc, name, seconds=STALL_WINDOW)
    assert h.pod(name)["metadata"]["generation"] == 3, "the failing size is not tried again"
    assert described(h, name) == [("Warning", "ResizeError"), ("Warning", "ResizeError")]
    assert h.writes_but_sentinels(proc) == {
        "PATCH pods": 2,
        "PATCH pods/resize": 2,
        "POST events": 2,
        "PATCH events": 0,
    }
    show(h, name)
