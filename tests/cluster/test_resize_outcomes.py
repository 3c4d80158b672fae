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

import copy
import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from devkit.chart import ensure_helm
from devkit.kube import ApiError, Kube, wait_for
from devkit.processes import Reconciler
from devkit.rbac import chart_names, install_rbac, kubeconfig_for_token, uninstall_rbac
from resizer.podstate import RESIZE_STATE
from tests.cluster.test_reconciler import (
    Harness,
    applied,
    guaranteed,
    metric_snapshot,
    q,
    resources,
    status_resources,
)

# The kubelet's (and the 1.36 apiserver's) own verdict on a size the node cannot take: sent only
# with the NodeHeadroom preflight off (it would hold the resize instead, see test_preflight.py).
WITHOUT_NODE_PREFLIGHT = "--preflight-checks=LimitRange,ResourceQuota"

OUTCOME_LABEL = "fake-kubelet.workload-resizer.io/resize-outcome"
UNBLOCK = "fake-kubelet.workload-resizer.io/resize-unblocked"
ADMITTED = {"requests": {"cpu": q("1"), "memory": q("256Mi")}, "limits": {"cpu": q("1"), "memory": q("256Mi")}}
ON_N4 = {"requests": {"cpu": q("800m"), "memory": q("256Mi")}, "limits": {"cpu": q("800m"), "memory": q("256Mi")}}
# How long a stalled resize is watched for writes (the issue's acceptance window).
STALL_WINDOW = 60
POKE = "e2e.workload-resizer.io/poke"


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


def assert_quiet_while_stalled(h: Harness, proc: Any, name: str, seconds: float = STALL_WINDOW) -> None:
    """No write at all (pods, resize, events) while the resize stays stalled; no Resized. Checked
    each time the reconciler has taken up a change of the pod (a label poked, then a sentinel),
    over `seconds` (and at least twice), so whatever the kubelet does meanwhile is taken up too."""
    before = h.writes_but_sentinels(proc)
    started, rounds = time.monotonic(), 0
    while rounds < 2 or time.monotonic() - started < seconds:
        rounds += 1
        h.kube.patch(f"/api/v1/namespaces/{h.ns}/pods/{name}", {"metadata": {"labels": {POKE: str(rounds)}}})
        h.sentinel(proc)
        assert "Resized" not in [r for _, r in described(h, name)], "Resized before the new size was actuated"
        assert h.writes_but_sentinels(proc) == before, f"writes while stalled: {metric_snapshot(proc)}"


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

    unblock(h, name)  # capacity freed: the kubelet's next retry succeeds
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
    pod = wait_for(
        "the spec set back to what runs",
        lambda: p if resources(p := h.pod(name)) == ADMITTED and condition(p, "PodResizePending") is None else None,
    )
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
    pod = wait_for(
        "the spec set back to what runs",
        lambda: p if resources(p := h.pod(name)) == ADMITTED and condition(p, "PodResizeInProgress") is None else None,
    )
    assert pod["metadata"]["generation"] == 3 and applied(pod) is None
    assert state(h, name)["state"] == "error"
    assert described(h, name) == [("Warning", "ResizeError"), ("Warning", "ResizeError")]
    assert_quiet_while_stalled(h, proc, name, seconds=20)


def test_actuation_error_that_clears_within_the_retries_ends_resized(h: Harness) -> None:
    node = outcome_node(h, "error", "error")
    name = one_pod(h, node)
    h.reconciler("--resize-error-backoff=1m")
    h.wait_event(name, "ResizeError")
    unblock(h, name)  # e.g. the container's memory usage dropped: the kubelet's retry works
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
    h.wait_idle(second)  # ready: it listed the pod; idle: decided
    assert metric_snapshot(second)["PATCH pods/resize"] == 0, "nothing resized again"
    unblock(h, name)
    h.wait_event(name, "Resized")
    h.sentinel(second)  # the echo of its applied-* write taken up too
    pod = h.pod(name)
    assert pod["metadata"]["generation"] == 2, "exactly one resize (metadata.generation)"
    assert resources(pod) == ON_N4 and status_resources(pod) == ON_N4 and applied(pod) == "n4"
    assert described(h, name) == [("Normal", "ResizeDeferred"), ("Normal", "Resized")]
    assert [e["count"] for e in h.events(name)] == [1, 1]
    assert h.writes_but_sentinels(second) == {
        "PATCH pods": 1,
        "PATCH pods/resize": 0,
        "POST events": 1,
        "PATCH events": 0,
    }


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
    pod = wait_for(
        "the pod at what it has, nothing pending",
        lambda: p if resources(p := h.pod(name)) == ADMITTED and condition(p, "PodResizePending") is None else None,
    )
    assert state(h, name)["state"] == "infeasible" and applied(pod) is None
    generation = pod["metadata"]["generation"]
    assert_quiet_while_stalled(h, proc, name, seconds=20)
    assert h.pod(name)["metadata"]["generation"] == generation, "the infeasible size is not tried again"

    h.cluster.add_node(name_of_node, cpu="4", memory="8Gi", labels={h.label: "slow"})  # the node grows
    h.wait_event(name, "Resized")
    pod = h.pod(name)
    assert resources(pod)["requests"]["cpu"] == q("2") and status_resources(pod) == resources(pod)
    assert applied(pod) == "slow" and state(h, name) is None
    assert described(h, name) == [("Warning", "ResizeInfeasible"), ("Normal", "Resized")]


HOLD_START = "fake-kubelet.workload-resizer.io/start-held"


def test_a_pod_resized_before_its_containers_ran_on_a_node_that_cannot_resize_is_reported_unsupported(
    h: Harness,
) -> None:
    """An old kubelet (KWOK without resize support: no observedGeneration, no resize conditions,
    no status resources) whose pod is still starting: the apiserver accepts the resize (it cannot
    tell yet), then the containers start at the admitted size. Once they run, the reconciler sees
    that the node did not take the new size: one ResizeUnsupported, the spec kept (such a kubelet
    applies it when the containers restart), nothing retried."""
    node = h.node("old", "n4", no_resize=True)
    h.deploy("web", node, [guaranteed()], annotations={HOLD_START: "true"})
    [pending] = h.wait_pods(
        "web",
        1,
        lambda p: p["spec"].get("nodeName") == node and p["status"].get("phase") == "Pending",
        "bound and not started",
    )
    name = pending["metadata"]["name"]
    proc = h.reconciler()
    pod = wait_for(
        "the resize accepted before the containers run",
        lambda: p if (p := h.pod(name))["metadata"]["generation"] == 2 else None,
    )
    assert resources(pod) == ON_N4 and not pod["status"].get("containerStatuses")
    h.sentinel(proc)  # the echo of its resize taken up
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
    assert h.writes_but_sentinels(proc) == {
        "PATCH pods": 2,
        "PATCH pods/resize": 1,
        "POST events": 1,
        "PATCH events": 0,
    }


# ---------------------------------------------------------------- a forged status never steers a revert

SEVEN = {"requests": {"cpu": "7", "memory": "16Gi"}, "limits": {"cpu": "7", "memory": "16Gi"}}


@pytest.fixture
def chart_world(h: Harness) -> Iterator[tuple[Harness, dict[str, str], str, Kube]]:
    """The chart's RBAC, config and admission policies in the test's namespace; (harness, chart
    names, the reconciler's kubeconfig as the chart's ServiceAccount, a tenant allowed to edit
    the namespace's pods and to update their status)."""
    kube, ns = h.kube, h.ns
    tokens = install_rbac(kube, ensure_helm(), ns)
    kube.create(
        f"/api/v1/namespaces/{ns}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant"}},
    )
    kube.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "status-writer"},
            "rules": [{"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]}],
        },
    )
    for role, kind in (("edit", "ClusterRole"), ("status-writer", "Role")):
        kube.create(
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"tenant-{role}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}],
            },
        )
    token = kube.create(
        f"/api/v1/namespaces/{ns}/serviceaccounts/tenant/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )
    try:
        yield (
            h,
            chart_names(ns),
            kubeconfig_for_token(h.cluster, tokens["reconciler"]),
            Kube(kubeconfig_for_token(h.cluster, token["status"]["token"])),
        )
    finally:
        uninstall_rbac(kube, ns)


def chart_reconciler(h: Harness, names: dict[str, str], kubeconfig: str, name: str) -> Reconciler:
    """The reconciler as the chart's ServiceAccount, with the chart's config; a failing resize is
    re-checked only after 10 minutes (this test never lets it give up on its own)."""
    proc = Reconciler(
        kubeconfig,
        f"--config-namespace={h.ns}",
        f"--config-name={names['config']}",
        f"--node-type-label={h.label}",
        "--resize-error-backoff=10m",
        name=name,
    )
    h.processes.append(proc)
    proc.wait_ready()
    return proc


def forge_infeasible(tenant: Kube, h: Harness, name: str, reported: dict[str, Any]) -> None:
    """The tenant's pods/status update: the resize is Infeasible and the containers have `reported`
    (read-modify-write, again on a conflict with the fake kubelet)."""
    path = f"/api/v1/namespaces/{h.ns}/pods/{name}/status"
    for _ in range(10):
        pod = tenant.get(f"/api/v1/namespaces/{h.ns}/pods/{name}")
        forged = copy.deepcopy(pod)
        forged["status"]["conditions"] = [
            c for c in pod["status"].get("conditions") or [] if c["type"] != "PodResizePending"
        ] + [
            {
                "type": "PodResizePending",
                "status": "True",
                "reason": "Infeasible",
                "message": "Node didn't have enough capacity (written by the tenant)",
                "observedGeneration": pod["metadata"]["generation"],
                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
        ]
        for status in forged["status"]["containerStatuses"]:
            status["resources"] = copy.deepcopy(reported)
        try:
            tenant.request("PUT", path, forged)
            return
        except ApiError as err:
            if err.status != 409:
                raise
    raise AssertionError("the status kept changing under the tenant's update")


@pytest.mark.parametrize("restart", [False, True], ids=["in-flight", "after-a-restart"])
def test_a_forged_status_never_steers_a_revert(chart_world, restart: bool) -> None:
    """While the product's resize (1 CPU/256Mi -> 800m on n4, the chart's config) waits on a
    kubelet that fails to actuate it, a tenant allowed to update pods/status (the chart's admission
    policies in force; they guard annotations, not conditions) reports Infeasible with containers
    at 7 CPU/16Gi. The spec never goes above the admitted 1 CPU x 0.8: nothing is set back, the
    infeasible state is recorded, one RevertRefused Warning names the forged values. After a
    restart (no memory of the resize) the same, decided from the pod's originals."""
    h, names, kubeconfig, tenant = chart_world
    node = outcome_node(h, "forged", "error")
    name = one_pod(h, node)
    proc = chart_reconciler(h, names, kubeconfig, "reconciler-1")
    h.wait_event(name, "ResizeError")  # the resize is in flight: the kubelet fails to actuate it
    assert resources(h.pod(name)) == ON_N4 and status_resources(h.pod(name)) == ADMITTED
    if restart:
        proc.proc.send_signal(signal.SIGKILL)
        proc.proc.wait(10)
    forge_infeasible(tenant, h, name, SEVEN)
    if restart:
        proc = chart_reconciler(h, names, kubeconfig, "reconciler-2")

    pod = wait_for(
        "the reconciler's decision on the forged status",
        lambda: p if (p := h.pod(name))["metadata"]["generation"] > 2 or "RevertRefused" in h.reasons(name) else None,
    )
    assert resources(pod) == ON_N4, "the spec stays at admitted x ratio"
    assert pod["metadata"]["generation"] == 2, "the one resize, no revert"
    refused = h.wait_event(name, "RevertRefused")
    assert refused["type"] == "Warning" and "never set" in refused["message"]
    assert "cpu 7" in refused["message"] and "memory 16Gi" in refused["message"]
    recorded = state(h, name)
    assert recorded is not None and recorded["state"] == "infeasible" and recorded["kept"] is True
    assert described(h, name) == [
        ("Warning", "ResizeError"),
        ("Warning", "ResizeInfeasible"),
        ("Warning", "RevertRefused"),
    ]
    assert "the spec is kept" in h.wait_event(name, "ResizeInfeasible")["message"]
    assert any("never set" in line for line in proc.log_lines())

    # Another watch event of the pod (the tenant's own annotation): decided again, still nothing set back.
    reconciled = proc.metric("controller_runtime_reconcile_total")
    tenant.patch(f"/api/v1/namespaces/{h.ns}/pods/{name}", {"metadata": {"annotations": {"note": "again"}}})
    wait_for("another reconcile of the pod", lambda: proc.metric("controller_runtime_reconcile_total") > reconciled)
    assert proc.metric("rest_client_requests_total", method="PATCH", resource="pods/resize") == (0 if restart else 1)
    assert resources(h.pod(name)) == ON_N4 and h.pod(name)["metadata"]["generation"] == 2
    assert [e["count"] for e in h.events(name)] == [1, 1, 1]
