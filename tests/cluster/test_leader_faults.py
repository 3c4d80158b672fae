"""Leader election under faults, on the real apiserver: no split brain.

The old leader talks to the apiserver through devkit/faultproxy.py, which records
every write it sends (what arrives at the apiserver's door, with its time); the new
leader talks directly. After a fault on the old leader's lease renewals (a hung request,
HTML 503 pages from a "proxy") or the lease being taken by another identity, the old
leader must make zero writes after its renew deadline (counted from the start of its last
successful renewal), exit non-zero, and the new leader must take over and do the work.
A resize the old leader sent before the fault but that reaches the apiserver only after the
hand-over must be refused: it is conditional on the resourceVersion it was planned from.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from devkit.chart import ensure_helm
from devkit.configs import DESIGN_NODE_TYPES, config_yaml
from devkit.faultproxy import FaultProxy
from devkit.kube import ApiError, wait_for
from devkit.processes import Reconciler
from devkit.rbac import chart_names, install_rbac, kubeconfig_for_token, uninstall_rbac
from tests.cluster.test_reconciler import Harness, applied, guaranteed, q, resources

LEASE_DURATION, RENEW_DEADLINE, RETRY = 6, 4, 1


@pytest.fixture
def world(cluster: Any, namespace: str) -> Iterator[dict[str, Any]]:
    harness = Harness(cluster, namespace)
    tokens = install_rbac(cluster.kube, ensure_helm(), namespace)
    proxy = FaultProxy(cluster.kube)
    try:
        yield {
            "harness": harness,
            "names": chart_names(namespace),
            "proxy": proxy,
            "old": proxy.kubeconfig(tokens["reconciler"]),
            "new": kubeconfig_for_token(cluster, tokens["reconciler"]),
        }
    finally:
        harness.close(print_logs=True)
        proxy.close()
        uninstall_rbac(cluster.kube, namespace)


def start(world: dict[str, Any], identity: str) -> Reconciler:
    harness: Harness = world["harness"]
    names = world["names"]
    proc = Reconciler(
        world[identity],
        f"--config-namespace={harness.ns}",
        f"--config-name={names['config']}",
        "--leader-elect",
        f"--leader-election-namespace={harness.ns}",
        f"--leader-election-id={names['lease']}",
        f"--leader-election-identity={identity}",
        f"--leader-election-lease-duration={LEASE_DURATION}s",
        f"--leader-election-renew-deadline={RENEW_DEADLINE}s",
        f"--leader-election-retry-period={RETRY}s",
        f"--node-type-label={harness.label}",
        name=f"reconciler-{identity}",
    )
    harness.processes.append(proc)
    proc.wait_ready()
    return proc


def holder(harness: Harness, names: dict[str, str]) -> str | None:
    lease = harness.kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{harness.ns}/leases/{names['lease']}")
    return lease["spec"].get("holderIdentity")


@pytest.mark.parametrize("fault", ["hang", "html503", "taken"])
def test_old_leader_makes_no_write_after_its_renew_deadline_and_the_new_one_takes_over(world, fault) -> None:
    harness: Harness = world["harness"]
    names, proxy = world["names"], world["proxy"]
    node = harness.node("n4", "n4")
    old = start(world, "old")
    wait_for("old to lead", lambda: holder(harness, names) == "old")
    harness.deploy("before", node, [guaranteed()], replicas=5)
    harness.wait_applied("before", "n4", 5, timeout=60)
    new = start(world, "new")

    if fault == "taken":
        path = f"/apis/coordination.k8s.io/v1/namespaces/{harness.ns}/leases/{names['lease']}"

        def take() -> bool:
            """The lease written as the intruder's, or False when the leader renewed it meanwhile (409)."""
            lease = harness.kube.get(path)
            lease["spec"].update(
                holderIdentity="intruder", renewTime=time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
            )
            try:
                harness.kube.request("PUT", path, lease)
            except ApiError as err:
                if err.status != 409:
                    raise
                return False
            return True

        wait_for("the lease taken by an intruder", take, timeout=30)
    else:
        proxy.fault = fault
    harness.deploy("during", node, [guaranteed()], replicas=10)  # work the old leader must not finish

    assert old.wait_exit(LEASE_DURATION * 4) != 0, "leadership lost is an exit, not a silent stop"
    renewed = [start_time for start_time, status in proxy.lease_renewals if status < 300]
    fence = renewed[-1] + RENEW_DEADLINE
    late = [w for w in proxy.writes if "/leases" not in w[2] and w[0] > fence]
    assert late == [], f"writes by the old leader after its renew deadline: {late[:5]}"
    assert "leadership lost" in old.logs()

    wait_for("new to lead", lambda: holder(harness, names) == "new", timeout=LEASE_DURATION * 5)
    harness.wait_applied("during", "n4", 10, timeout=90)
    assert new.metric("rest_client_requests_total", code="403") == 0


def test_a_deposed_leaders_resize_still_on_the_wire_is_refused_and_the_new_leaders_size_stays(world) -> None:
    """The fence stops new writes, not one already sent: the old leader's pods/resize PATCH is
    held at the proxy while it loses the lease and the new leader re-sizes the pod for a newer
    config; released, the apiserver refuses it (422: the JSON patch's test of the generation it
    was planned from fails) and the pod keeps the new leader's size."""
    harness: Harness = world["harness"]
    names, proxy = world["names"], world["proxy"]
    node = harness.node("n4", "n4")
    proxy.hold_resizes = True
    old = start(world, "old")
    wait_for("old to lead", lambda: holder(harness, names) == "old")
    harness.deploy("web", node, [guaranteed(cpu="1000m")])
    wait_for("the old leader's resize to be on the wire", lambda: proxy.held, timeout=60)
    pod_name = proxy.held[0].split("/")[-2]
    assert resources(harness.pod(pod_name))["limits"]["cpu"] == q("1000m"), "held: not applied yet"

    # A newer config (n4 twice the baseline: 500m instead of the held 800m), then the hand-over.
    harness.kube.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": names["config"], "namespace": harness.ns},
            "data": {"config.yaml": config_yaml(node_types={**DESIGN_NODE_TYPES, "n4": (2.0, 1.0)})},
        },
        harness.ns,
    )
    proxy.fault = "hang"
    new = start(world, "new")
    assert old.wait_exit(LEASE_DURATION * 4) != 0
    wait_for("new to lead", lambda: holder(harness, names) == "new", timeout=LEASE_DURATION * 5)
    wait_for(
        "the new leader's size",
        lambda: (
            resources(harness.pod(pod_name))["limits"]["cpu"] == q("500m") and applied(harness.pod(pod_name)) == "n4"
        ),
        timeout=60,
    )

    proxy.release()
    held = [path for path in proxy.held if path.endswith(f"/pods/{pod_name}/resize")]

    def all_answered() -> list[tuple[float, str, str, int]] | None:
        answered = [w for w in proxy.writes if w[1] == "PATCH" and w[2].endswith(f"/pods/{pod_name}/resize")]
        return answered if len(answered) == len(held) else None

    late = wait_for("every held resize answered by the apiserver", all_answered, timeout=30)
    # (A retry the old leader made before the fence, if any, was held too: every one is refused.)
    assert late and all(w[3] in (409, 422) for w in late), f"the deposed leader's resize must be refused: {late}"
    # Every late write has its answer and the old leader has exited: the pod shows whatever landed.
    pod = harness.pod(pod_name)
    assert resources(pod)["limits"]["cpu"] == q("500m") == resources(pod)["requests"]["cpu"]
    assert new.metric("rest_client_requests_total", code="403") == 0
