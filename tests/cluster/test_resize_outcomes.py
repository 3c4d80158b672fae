"""End-to-end: resize outcomes followed to actuation, on fake kubelets that say no.

KWOK nodes labelled fake-kubelet.workload-resizer.io/resize-outcome (hack/kwok) defer a
resize (until the pod is annotated fake-kubelet.workload-resizer.io/resize-unblocked:
"capacity freed"), mark it Infeasible like a kubelet with the static CPU manager policy,
or fail to actuate it (PodResizeInProgress Error). Each test checks what `kubectl
describe pod` shows (our Events in order, our annotations), that Resized never comes
before the status shows the new size, and that a stalled resize costs a bounded number
of API writes.
"""
from __future__ import annotations

import json
import signal
import time
from typing import Any

from resizer import RESIZE_STATE
from tests.cluster.test_reconciler import (
    Harness,
    applied,
    guaranteed,
    metric_snapshot,
    q,
    resources,
    status_resources,
)
from devkit.kube import wait_for

# The kubelet's (and the 1.36 apiserver's) own verdict on a size the node cannot take: sent only
# with the NodeHeadroom preflight off (it would hold the resize instead, see test_preflight.py).
WITHOUT_NODE_PREFLIGHT = "--preflight-checks=LimitRange,ResourceQuota"

OUTCOME_LABEL = "fake-kubelet.workload-resizer.io/resize-outcome"
UNBLOCK = "fake-kubelet.workload-resizer.io/resize-unblocked"
ADMITTED = {"requests": {"cpu": q("1"), "memory": q("256Mi")}, "limits": {"cpu": q("1"), "memory": q("256Mi")}}
ON_N4 = {"requests": {"cpu": q("800m"), "memory": q("256Mi")}, "limits": {"cpu": q("800m"), "memory": q("256Mi")}}
# How long a stalled resize is watched for writes (the acceptance window).
STALL_WINDOW = 60


def outcome_node(h: Harness, suffix: str, outcome: str) -> str:
    name = f"{h.ns}-{suffix}"[:63].rstrip("-")
    h.nodes.append(name)
    h.cluster.add_node(name, labels={h.label: "n4", OUTCOME_LABEL: outcome})
    return name


def one_pod(h: Harness, node: str) -> str:
    h.deploy("web", node, [guaranteed()])
    return h.wait_unstamped("web")[0]["metadata"]["name"]


def state(h: Harness, name: str) -> dict[str, Any] | None:
    text = (h.pod(name)["metadata"].get("annotations") or {}).get(RESIZE_STATE)
    return json.loads(text) if text else None


def described(h: Harness, name: str) -> list[tuple[str, str]]:
    """Our Events on the pod as `kubectl describe` lists them: oldest first, (type, reason)."""
    events = sorted(h.events(name), key=lambda e: (e.get("firstTimestamp") or "", e["metadata"]["name"]))
    return [(e["type"], e["reason"]) for e in events]


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == kind), None)


def unblock(h: Harness, name: str) -> None:
    h.kube.patch(f"/api/v1/namespaces/{h.ns}/pods/{name}", {"metadata": {"annotations": {UNBLOCK: "true"}}})


def writes(proc: Any) -> float:
    snapshot = metric_snapshot(proc)
    return sum(snapshot.values())


def assert_quiet_while_stalled(h: Harness, proc: Any, name: str, seconds: float = STALL_WINDOW) -> None:
    """No write at all (pods, resize, events) while the resize stays stalled; no Resized."""
    before = writes(proc)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert "Resized" not in [r for _, r in described(h, name)], "Resized before the new size was actuated"
        time.sleep(5)
    assert writes(proc) == before, f"writes while stalled: {metric_snapshot(proc)}"


def test_deferred_resize_is_reported_once_kept_and_ends_resized_when_capacity_frees(h: Harness) -> None:
    node = outcome_node(h, "deferred", "deferred")
    name = one_pod(h, node)
    proc = h.reconciler()
    h.wait_event(name, "ResizeDeferred")
    pod = h.pod(name)
    assert resources(pod) == ON_N4, "a deferred resize is kept (the kubelet retries it)"
    assert status_resources(pod) == ADMITTED
    assert condition(pod, "PodResizePending")["reason"] == "Deferred"
    assert state(h, name)["state"] == "deferred" and applied(pod) is None
    assert proc.metric("workload_resizer_resizes_waiting", state="deferred") == 1

    assert_quiet_while_stalled(h, proc, name)
    assert described(h, name) == [("Normal", "ResizeDeferred")]

    unblock(h, name)        # capacity freed: the kubelet's next retry succeeds
    event = h.wait_event(name, "Resized")
    pod = h.pod(name)
    assert status_resources(pod) == ON_N4 and applied(pod) == "n4" and state(h, name) is None
    assert pod["metadata"]["generation"] == 2, "one resize"
    assert "actuated" in event["message"]
    assert described(h, name) == [("Normal", "ResizeDeferred"), ("Normal", "Resized")]
    assert proc.metric("workload_resizer_resizes_waiting", state="deferred") == 0
    assert proc.metric("workload_resizer_resize_actuation_seconds_count") == 1


def test_infeasible_resize_is_reported_set_back_and_never_retried(h: Harness) -> None:
    node = outcome_node(h, "static", "cpu-manager-static")
    name = one_pod(h, node)
    proc = h.reconciler()
    event = h.wait_event(name, "ResizeInfeasible")
    assert event["type"] == "Warning" and "CPU Manager static policy" in event["message"]
    pod = wait_for("the spec set back to what runs", lambda: (
        p if resources(p := h.pod(name)) == ADMITTED and condition(p, "PodResizePending") is None else None))
    assert status_resources(pod) == ADMITTED and applied(pod) is None
    assert pod["metadata"]["generation"] == 3, "the resize, then the one revert"
    assert state(h, name)["state"] == "infeasible"
    assert proc.metric("rest_client_requests_total", method="PATCH", resource="pods/resize") == 2

    assert_quiet_while_stalled(h, proc, name)
    assert h.pod(name)["metadata"]["generation"] == 3, "the infeasible size is not tried again"
    assert described(h, name) == [("Warning", "ResizeInfeasible")]
    assert proc.metric("workload_resizer_resizes_waiting", state="infeasible") == 1


def test_actuation_error_is_reported_rechecked_with_backoff_then_set_back(h: Harness) -> None:
    node = outcome_node(h, "error", "error")
    name = one_pod(h, node)
    proc = h.reconciler("--resize-error-backoff=2s", "--resize-error-retries=2")
    first = h.wait_event(name, "ResizeError")
    assert first["type"] == "Warning" and "memory usage is above the new limit" in first["message"]
    wait_for("a second ResizeError (given up)", lambda: len(h.events(name)) == 2, timeout=60)
    pod = wait_for("the spec set back to what runs", lambda: (
        p if resources(p := h.pod(name)) == ADMITTED and condition(p, "PodResizeInProgress") is None else None))
    assert pod["metadata"]["generation"] == 3 and applied(pod) is None
    assert state(h, name)["state"] == "error"
    assert described(h, name) == [("Warning", "ResizeError"), ("Warning", "ResizeError")]
    assert_quiet_while_stalled(h, proc, name, seconds=20)


def test_actuation_error_that_clears_within_the_retries_ends_resized(h: Harness) -> None:
    node = outcome_node(h, "error", "error")
    name = one_pod(h, node)
    h.reconciler("--resize-error-backoff=1m")
    h.wait_event(name, "ResizeError")
    unblock(h, name)        # e.g. the container's memory usage dropped: the kubelet's retry works
    h.wait_event(name, "Resized")
    pod = h.pod(name)
    assert status_resources(pod) == ON_N4 and applied(pod) == "n4" and state(h, name) is None
    assert pod["metadata"]["generation"] == 2
    assert described(h, name) == [("Warning", "ResizeError"), ("Normal", "Resized")]


def test_sigkill_while_a_resize_is_in_flight_then_restart_ends_with_one_resize_and_one_resized(h: Harness) -> None:
    node = outcome_node(h, "inflight", "deferred")
    name = one_pod(h, node)
    first = h.reconciler(name="reconciler-1")
    h.wait_event(name, "ResizeDeferred")
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(10)

    second = h.reconciler(name="reconciler-2")
    time.sleep(5)
    assert metric_snapshot(second)["PATCH pods/resize"] == 0, "nothing resized again"
    unblock(h, name)
    h.wait_event(name, "Resized")
    time.sleep(3)
    pod = h.pod(name)
    assert pod["metadata"]["generation"] == 2, "exactly one resize (metadata.generation)"
    assert resources(pod) == ON_N4 and status_resources(pod) == ON_N4 and applied(pod) == "n4"
    assert described(h, name) == [("Normal", "ResizeDeferred"), ("Normal", "Resized")]
    assert [e["count"] for e in h.events(name)] == [1, 1]
    assert metric_snapshot(second) == {"PATCH pods": 1, "PATCH pods/resize": 0, "POST events": 1,
                                       "PATCH events": 0}


def test_a_size_beyond_the_node_is_infeasible_until_the_node_grows(h: Harness) -> None:
    """1 cpu on a "slow" node plans 2 cpu on a 1500m node: the 1.36 apiserver refuses it
    (403 NodeCapacity), a 1.35 kubelet marks it Infeasible (and the spec is set back).
    Either way: one ResizeInfeasible, the pod keeps what it has, no retry until the
    node's allocatable changes; then the resize goes through on its own. (Without the
    NodeHeadroom preflight, which would hold it unsent: test_preflight.py; this is the path of
    a resize the preflight did not see coming, e.g. the node shrank meanwhile.)"""
    name_of_node = f"{h.ns}-small"[:63]
    h.nodes.append(name_of_node)
    h.cluster.add_node(name_of_node, cpu="1500m", memory="8Gi", labels={h.label: "slow"})
    name = one_pod(h, name_of_node)
    proc = h.reconciler(WITHOUT_NODE_PREFLIGHT)
    event = h.wait_event(name, "ResizeInfeasible")
    assert event["type"] == "Warning"
    pod = wait_for("the pod at what it has, nothing pending", lambda: (
        p if resources(p := h.pod(name)) == ADMITTED and condition(p, "PodResizePending") is None else None))
    assert state(h, name)["state"] == "infeasible" and applied(pod) is None
    generation = pod["metadata"]["generation"]
    assert_quiet_while_stalled(h, proc, name, seconds=20)
    assert h.pod(name)["metadata"]["generation"] == generation, "the infeasible size is not tried again"

    h.cluster.add_node(name_of_node, cpu="4", memory="8Gi", labels={h.label: "slow"})    # the node grows
    h.wait_event(name, "Resized")
    pod = h.pod(name)
    assert resources(pod)["requests"]["cpu"] == q("2") and status_resources(pod) == resources(pod)
    assert applied(pod) == "slow" and state(h, name) is None
    assert described(h, name) == [("Warning", "ResizeInfeasible"), ("Normal", "Resized")]


HOLD_START = "fake-kubelet.workload-resizer.io/start-held"


def test_a_pod_resized_before_its_containers_ran_on_a_node_that_cannot_resize_is_reported_unsupported(
        h: Harness) -> None:
    """An old kubelet (KWOK without resize support: no observedGeneration, no resize conditions,
    no status resources) whose pod is still starting: the apiserver accepts the resize (it cannot
    tell yet), then the containers start at the admitted size. Once they run, the reconciler sees
    that the node did not take the new size: one ResizeUnsupported, the spec kept (such a kubelet
    applies it when the containers restart), nothing retried."""
    node = h.node("old", "n4", no_resize=True)
    h.deploy("web", node, [guaranteed()], annotations={HOLD_START: "true"})
    [pending] = h.wait_pods("web", 1, lambda p: p["spec"].get("nodeName") == node and
                            p["status"].get("phase") == "Pending", "bound and not started")
    name = pending["metadata"]["name"]
    proc = h.reconciler()
    pod = wait_for("the resize accepted before the containers run", lambda: (
        p if (p := h.pod(name))["metadata"]["generation"] == 2 else None))
    assert resources(pod) == ON_N4 and not pod["status"].get("containerStatuses")
    time.sleep(3)
    assert described(h, name) == [] and state(h, name) is None, "nothing to report while the pod starts"

    h.kube.patch(f"/api/v1/namespaces/{h.ns}/pods/{name}", {"metadata": {"annotations": {HOLD_START: None}}})
    event = h.wait_event(name, "ResizeUnsupported")
    assert event["type"] == "Warning" and "does not support in-place resize" in event["message"]
    assert "before the containers started" in event["message"]
    pod = h.pod(name)
    assert pod["status"]["phase"] == "Running"
    assert all(s.get("resources") is None for s in pod["status"]["containerStatuses"]), "an old kubelet"
    assert "observedGeneration" not in pod["status"]
    assert resources(pod) == ON_N4 and applied(pod) is None and state(h, name)["state"] == "unsupported"
    assert pod["metadata"]["generation"] == 2, "resized once, never again"

    assert_quiet_while_stalled(h, proc, name, seconds=20)
    assert described(h, name) == [("Warning", "ResizeUnsupported")]
    assert [e["count"] for e in h.events(name)] == [1]
    # originals, the resize, the state record, one Event: nothing else.
    assert metric_snapshot(proc) == {"PATCH pods": 2, "PATCH pods/resize": 1, "POST events": 1, "PATCH events": 0}
