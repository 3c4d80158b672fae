"""Scheduler preemption for deferred resizes (KEP-5836, alpha in Kubernetes 1.37; hack/cluster
turns its gate InPlacePodVerticalScalingSchedulerPreemption on there): once a kubelet keeps a
resize Deferred, the scheduler may preempt lower-priority pods on that node to make room.

A resize the reconciler holds for node room (the NodeHeadroom preflight) is never sent, so the
pod is never Deferred and the scheduler never preempts for it. Shown on two KWOK nodes whose fake
kubelet defers every resize (hack/kwok: resize-outcome=deferred), each with a low-priority
neighbour taking 2500m of 4 cpu next to a high-priority pod that is to grow from 1 to 2 cpu:

- `held`: the reconciler holds the resize (ResizeHeld, no pods/resize sent);
- `sent`: the same upsize sent as a pods/resize (what the reconciler does after
  --node-room-wait, or for a critical pod with --upsize-critical-pods) is Deferred, and the
  scheduler preempts the neighbour there (a Preempted Event; the pod is deleted). This is both
  the proof that the gate is on and the signal that the scheduler has looked at deferred pods
  since the hold, before the held node's neighbour is checked.

1.37 and later only (the gate is alpha in 1.37; `make test-1.37` runs this file).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devkit.kube import ApiError, deployment, wait_for
from resizer.podstate import SKIP
from tests.cluster.test_control_plane import hack_cluster
from tests.cluster.test_reconciler import Harness, guaranteed, resources

OUTCOME_LABEL = "fake-kubelet.workload-resizer.io/resize-outcome"
SCHEDULER = "default-scheduler"

HACK_CLUSTER = hack_cluster()
# The version the session's cluster runs: hack/cluster brings up K8S_VERSION's (and refuses to
# reuse a running cluster of another version).
pytestmark = pytest.mark.skipif(
    HACK_CLUSTER.minor_of(HACK_CLUSTER.k8s_version()) < 37,
    reason="KEP-5836 (scheduler preemption for deferred resizes) is a 1.37 feature gate",
)


@pytest.fixture
def priorities(h: Harness) -> Iterator[dict[str, str]]:
    """Two PriorityClasses of this test's own: {"low": name, "high": name}."""
    suffix = uuid.uuid4().hex[:6]
    names = {"low": f"wr-e2e-low-{suffix}", "high": f"wr-e2e-high-{suffix}"}
    for level, value in (("low", 10), ("high", 1000)):
        h.kube.create(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": names[level]},
                "value": value,
            },
        )
    try:
        yield names
    finally:
        for name in names.values():
            try:
                h.kube.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}")
            except ApiError as err:  # best effort: never hide the test's own failure
                print(f"could not delete PriorityClass {name}: {err}")


def deferring_node(h: Harness, suffix: str) -> str:
    """A 4-cpu KWOK node of the `slow` family whose fake kubelet keeps every resize Deferred."""
    name = f"{h.ns}-{suffix}"[:63].rstrip("-")
    h.nodes.append(name)
    h.cluster.add_node(name, cpu="4", labels={h.label: "slow", OUTCOME_LABEL: "deferred"})
    return name


def deploy(h: Harness, app: str, node: str, cpu: str, priority: str, skip: bool) -> dict[str, Any]:
    manifest = deployment(
        app,
        1,
        [guaranteed(cpu=cpu)],
        node_selector={"kubernetes.io/hostname": node},
        annotations={SKIP: "true"} if skip else None,
    )
    manifest["spec"]["template"]["spec"]["priorityClassName"] = priority
    h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", manifest)
    return h.wait_running(app)[0]


def scheduler_events(h: Harness, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in h.kube.events_for(h.ns, name)
        if e["reason"] == reason
        and SCHEDULER in ((e.get("source") or {}).get("component"), e.get("reportingComponent"))
    ]


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == kind), None)


def test_a_resize_held_for_node_room_never_makes_the_scheduler_preempt(h: Harness, priorities: dict[str, str]) -> None:
    held_node, sent_node = deferring_node(h, "held"), deferring_node(h, "sent")
    # The neighbours: never resized (skip), low priority, 500m of the node left free.
    held_filler = deploy(h, "held-filler", held_node, "2500m", priorities["low"], skip=True)
    sent_filler = deploy(h, "sent-filler", sent_node, "2500m", priorities["low"], skip=True)
    # `held` is the reconciler's (planned 1 -> 2 cpu on `slow`); `sent` is resized by the test.
    held = deploy(h, "held", held_node, "1000m", priorities["high"], skip=False)
    sent = deploy(h, "sent", sent_node, "1000m", priorities["high"], skip=True)

    reconciler = h.reconciler()
    event = h.wait_event(held["metadata"]["name"], "ResizeHeld")
    assert f"node {held_node}" in event["message"], event["message"]
    assert reconciler.metric("workload_resizer_resizes_held", constraint="NodeHeadroom") == 1

    sent_name = sent["metadata"]["name"]
    h.kube.resize(
        h.ns,
        sent_name,
        {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}}]}},
    )
    wait_for(
        f"{sent_name}'s resize Deferred",
        lambda: (condition(h.pod(sent_name), "PodResizePending") or {}).get("reason") == "Deferred",
        timeout=30,
    )
    preempted = wait_for(
        "the scheduler to preempt the low-priority neighbour of the deferred resize",
        lambda: scheduler_events(h, sent_filler["metadata"]["name"], "Preempted"),
        timeout=60,
    )
    assert f"{sent['metadata']['uid']} on node {sent_node}" in preempted[0]["message"], preempted
    wait_for(
        "the preempted neighbour deleted",
        lambda: sent_filler["metadata"]["uid"] not in {p["metadata"]["uid"] for p in h.pods("sent-filler")},
        timeout=30,
    )

    # Meanwhile on the held node: nothing sent, never Deferred, the neighbour untouched.
    held_now = h.pod(held["metadata"]["name"])
    assert resources(held_now)["requests"]["cpu"] == 1
    assert condition(held_now, "PodResizePending") is None
    assert reconciler.metric("rest_client_requests_total", method="PATCH", resource="pods/resize") == 0
    neighbour = h.pod(held_filler["metadata"]["name"])
    assert neighbour["metadata"]["uid"] == held_filler["metadata"]["uid"]
    assert "deletionTimestamp" not in neighbour["metadata"]
    assert condition(neighbour, "DisruptionTarget") is None
    assert scheduler_events(h, held_filler["metadata"]["name"], "Preempted") == []
    assert reconciler.metric("workload_resizer_resizes_held", constraint="NodeHeadroom") == 1
