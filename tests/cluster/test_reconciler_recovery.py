"""End-to-end: the reconciler survives crashes, restarts and leader changes.

The crash tests use the test fault hook WORKLOAD_RESIZER_TEST_CRASH_AFTER=<step>,
which SIGKILLs the reconciler right after the named write of the three-step
order (originals -> resize -> applied). With --concurrency=1 exactly one pod is
in flight when it dies, so what the second process must still do is exact.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest

from devkit.kube import wait_for
from tests.cluster.test_reconciler import (
    CRASH_AFTER,
    Harness,
    applied,
    burstable,
    expected_originals,
    guaranteed,
    metric_snapshot,
    originals,
    ours,
    q,
    qos,
    resources,
    status_resources,
)

GUARANTEED_ON_N4 = {
    "requests": {"cpu": q("800m"), "memory": q("256Mi")},
    "limits": {"cpu": q("800m"), "memory": q("256Mi")},
}
BURSTABLE_ON_N4 = {"requests": {"cpu": q("400m"), "memory": q("128Mi")}, "limits": {"cpu": q("1600m")}}
ADMITTED = {"g": guaranteed()["resources"], "b": burstable()["resources"]}
DESIRED = {"g": GUARANTEED_ON_N4, "b": BURSTABLE_ON_N4}


def app_of(pod: dict[str, Any]) -> str:
    return pod["metadata"]["labels"]["app"]


def two_workloads_on_n4(h: Harness) -> list[dict[str, Any]]:
    """Two Guaranteed pods and one Burstable pod on an n4 node, Running, not stamped."""
    node = h.node("n4", "n4")
    h.deploy("g", node, [guaranteed()], replicas=2)
    h.deploy("b", node, [burstable()])
    return h.wait_unstamped("g", 2) + h.wait_unstamped("b", 1)


def assert_converged(h: Harness, names: list[str]) -> None:
    for name in names:
        pod = h.pod(name)
        app = app_of(pod)
        assert resources(pod) == DESIRED[app], f"{name}: resized once, from the originals"
        assert status_resources(pod) == DESIRED[app], f"{name}: the kubelet actuated it"
        assert originals(pod) == expected_originals(ADMITTED[app]), f"{name}: originals are what the author wrote"
        assert applied(pod) == "n4"
        assert qos(pod) == ("Guaranteed" if app == "g" else "Burstable")


# Writes of the restarted process when the first one died after <step> of one pod
# (3 pods; an untouched pod costs PATCH originals + resize + PATCH applied).
AFTER_CRASH = {
    # crashed pod: resize + applied (originals are read back)
    "originals": {"PATCH pods": 1 + 2 * 2, "PATCH pods/resize": 1 + 2},
    # crashed pod: the spec already holds the plan: followed to actuation, only applied
    "resize": {"PATCH pods": 1 + 2 * 2, "PATCH pods/resize": 0 + 2},
}


def generation(pod: dict[str, Any]) -> int:
    return pod["metadata"]["generation"]


@pytest.mark.parametrize("step", ["originals", "resize"])
def test_crash_after_each_write_step_converges_without_compounding(h: Harness, step: str) -> None:
    pods = two_workloads_on_n4(h)
    names = [p["metadata"]["name"] for p in pods]

    first = h.reconciler("--concurrency=1", env={CRASH_AFTER: step}, name=f"reconciler-crash-{step}", wait=False)
    assert first.wait_exit(30) == -signal.SIGKILL, "the fault hook kills the process"

    # Exactly one pod got as far as <step>; the others are untouched.
    state = {name: h.pod(name) for name in names}
    touched = [n for n, p in state.items() if ours(p)]
    assert len(touched) == 1, {n: ours(p) for n, p in state.items()}
    crashed = state[touched[0]]
    app = app_of(crashed)
    assert originals(crashed) == expected_originals(ADMITTED[app])
    assert resources(crashed) == (
        DESIRED[app]
        if step == "resize"
        else {k: {r: q(v) for r, v in vals.items()} for k, vals in ADMITTED[app].items()}
    )
    assert applied(crashed) is None
    for name in names:
        if name != touched[0]:
            assert resources(state[name]) == {
                k: {r: q(v) for r, v in vals.items()} for k, vals in ADMITTED[app_of(state[name])].items()
            }

    second = h.reconciler(name="reconciler-after-crash")
    h.wait_applied("g", "n4", 2)
    h.wait_applied("b", "n4", 1)
    h.wait_status_follows("g", 2)
    h.wait_status_follows("b", 1)
    assert_converged(h, names)
    writes = metric_snapshot(second)
    assert {k: writes[k] for k in ("PATCH pods", "PATCH pods/resize")} == AFTER_CRASH[step], (
        "the restarted reconciler resized no pod twice"
    )
    for name in names:
        assert generation(h.pod(name)) == 2, f"{name}: exactly one resize (metadata.generation)"
        got = h.events(name)
        assert [(e["reason"], e["count"]) for e in got] == [("Resized", 1)], got


def test_crash_after_the_applied_step_neither_repeats_nor_reports_twice(h: Harness) -> None:
    """Step 3 happens once the kubelet actuated; a crash right after it loses that pod's
    Event (never repeats it), and no pod is resized twice."""
    pods = two_workloads_on_n4(h)
    names = [p["metadata"]["name"] for p in pods]
    first = h.reconciler("--concurrency=1", env={CRASH_AFTER: "applied"}, name="reconciler-crash-applied", wait=False)
    assert first.wait_exit(30) == -signal.SIGKILL, "the fault hook kills the process"
    finished = [n for n in names if applied(h.pod(n)) == "n4"]
    assert len(finished) == 1, {n: ours(h.pod(n)) for n in names}

    h.reconciler(name="reconciler-after-crash")
    h.wait_applied("g", "n4", 2)
    h.wait_applied("b", "n4", 1)
    h.wait_status_follows("g", 2)
    h.wait_status_follows("b", 1)
    assert_converged(h, names)
    for name in names:
        assert generation(h.pod(name)) == 2, f"{name}: exactly one resize (metadata.generation)"
        reasons = [e["reason"] for e in h.events(name)]
        assert reasons == ([] if name == finished[0] else ["Resized"]), (name, reasons)


def test_restart_after_everything_is_aligned_writes_nothing(h: Harness) -> None:
    pods = two_workloads_on_n4(h)
    names = [p["metadata"]["name"] for p in pods]
    first = h.reconciler(name="reconciler-1")
    h.wait_applied("g", "n4", 2)
    h.wait_applied("b", "n4", 1)
    h.wait_status_follows("g", 2)
    before = {n: h.pod(n) for n in names}
    events_before = {n: h.events(n) for n in names}
    assert first.terminate() == 0, "SIGTERM is a clean shutdown"

    second = h.reconciler(name="reconciler-2")
    h.wait_idle(second)  # ready: it listed both pods; idle: whatever it queued of them is decided
    assert metric_snapshot(second) == {"PATCH pods": 0, "PATCH pods/resize": 0, "POST events": 0, "PATCH events": 0}
    assert second.metric("workload_resizer_outcomes_total") == 0, "no decision was taken again"
    for name in names:
        pod = h.pod(name)
        assert pod["metadata"]["resourceVersion"] == before[name]["metadata"]["resourceVersion"], name
        assert h.events(name) == events_before[name]
    assert_converged(h, names)


LEADER_FLAGS = (
    "--leader-elect",
    "--leader-election-lease-duration=4s",
    "--leader-election-renew-deadline=3s",
    "--leader-election-retry-period=1s",
)


def lease_holder(h: Harness) -> str | None:
    lease = h.kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{h.ns}/leases/workload-resizer-reconciler")
    return lease["spec"].get("holderIdentity")


def test_only_the_leader_writes_and_a_standby_takes_over_when_it_dies(h: Harness) -> None:
    node = h.node("n4", "n4")
    replicas = {
        identity: h.reconciler(
            *LEADER_FLAGS,
            f"--leader-election-namespace={h.ns}",
            f"--leader-election-identity={identity}",
            name=f"reconciler-{identity}",
        )
        for identity in ("replica-a", "replica-b")
    }
    holder = wait_for("a lease holder", lambda: lease_holder(h), timeout=20)
    leader = replicas[holder]
    standby_id = next(i for i in replicas if i != holder)
    standby = replicas[standby_id]
    wait_for("the leader's metric", lambda: leader.metric("leader_election_master_status") == 1, timeout=10)

    h.deploy("one", node, [guaranteed()])
    pod = h.wait_applied("one", "n4")[0]
    assert resources(pod) == GUARANTEED_ON_N4
    assert leader.metric("rest_client_requests_total", method="PATCH", resource="pods/resize") == 1
    assert metric_snapshot(standby) == {"PATCH pods": 0, "PATCH pods/resize": 0, "POST events": 0, "PATCH events": 0}
    assert standby.metric("leader_election_master_status") == 0
    assert standby.metric("rest_client_requests_total", method="WATCH") == 0, "a standby watches nothing"

    leader.kill()
    wait_for(f"{standby_id} to take the lease", lambda: lease_holder(h) == standby_id, timeout=20)
    wait_for("the new leader's metric", lambda: standby.metric("leader_election_master_status") == 1, timeout=10)

    h.deploy("two", node, [guaranteed()])
    pod = h.wait_applied("two", "n4")[0]
    assert resources(pod) == GUARANTEED_ON_N4
    assert originals(pod) == expected_originals(ADMITTED["g"])
    # Only the new pod: the first one is aligned already and left alone.
    assert standby.metric("rest_client_requests_total", method="PATCH", resource="pods/resize") == 1
    assert resources(h.pods("one")[0]) == GUARANTEED_ON_N4
    assert standby.alive
