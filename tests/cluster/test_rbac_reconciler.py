"""RBAC proof: the reconciler does its whole job as the chart's ServiceAccount.

The chart's RBAC objects are installed for real (devkit/rbac.py), the
reconciler runs with a token from the TokenRequest API (the real RBAC authorizer
judges every request), and the end-to-end scenarios must pass with no request
forbidden: originals, pods/resize, applied annotations, Events on pods and on the
ConfigMap, the ConfigMap watched by name, the leader-election Lease, the originals of a pod
held by a scheduling gate bound to it (unbound pods watched). (The webhook
needs no API access at all: its ServiceAccount has no roles, checked in
test_chart.py.)
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devkit.chart import ensure_helm
from devkit.kube import deployment, wait_for
from devkit.processes import Reconciler
from devkit.rbac import chart_names, install_rbac, kubeconfig_for_token, uninstall_rbac
from resizer.podstate import ORIGINALS_MAC
from tests.cluster.test_reconciler import PATCH_RESIZE, Harness, guaranteed, ours, q, resources

FORBIDDEN = {"code": "403"}


@pytest.fixture
def as_service_account(cluster: Any, namespace: str) -> Iterator[tuple[Harness, dict[str, str], str]]:
    """(harness, chart names, reconciler kubeconfig authenticated as the chart's ServiceAccount)."""
    harness = Harness(cluster, namespace)
    tokens = install_rbac(cluster.kube, ensure_helm(), namespace)
    try:
        yield harness, chart_names(namespace), kubeconfig_for_token(cluster, tokens["reconciler"])
    finally:
        harness.close(print_logs=True)
        uninstall_rbac(cluster.kube, namespace)


def start(harness: Harness, names: dict[str, str], kubeconfig: str) -> Reconciler:
    proc = Reconciler(
        kubeconfig,
        f"--config-namespace={harness.ns}",
        f"--config-name={names['config']}",
        "--leader-elect",
        f"--leader-election-namespace={harness.ns}",
        f"--leader-election-id={names['lease']}",
        f"--node-type-label={harness.label}",
    )
    harness.processes.append(proc)
    proc.wait_ready()
    return proc


def test_reconciler_as_its_service_account_resizes_records_and_leads(as_service_account) -> None:
    harness, names, kubeconfig = as_service_account
    node = harness.node("n4", "n4")
    unknown = harness.node("xx", "unknown-family")
    reconciler = start(harness, names, kubeconfig)

    harness.deploy("web", node, [guaranteed()])
    harness.deploy("odd", unknown, [guaranteed()])
    gated = deployment("gated", 1, [guaranteed()], node_selector={"kubernetes.io/hostname": node})
    gated["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    harness.kube.create(f"/apis/apps/v1/namespaces/{harness.ns}/deployments", gated)
    pod = harness.wait_applied("web", "n4")[0]
    assert resources(pod)["requests"]["cpu"] == q("800m")
    assert resources(pod)["limits"]["cpu"] == q("800m")
    assert harness.wait_event(pod["metadata"]["name"], "Resized")
    odd = harness.wait_running("odd")[0]
    assert harness.wait_event(odd["metadata"]["name"], "UnknownNodeType")
    # (A pod still held by its scheduling gate: its originals bound to it, the unbound pods watched.)
    harness.wait_pods(
        "gated",
        1,
        lambda p: ours(p).get(ORIGINALS_MAC, "").startswith("v1.p."),
        "with their originals bound while gated",
        timeout=60,
    )

    lease = harness.kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{harness.ns}/leases/{names['lease']}")
    assert lease["spec"]["holderIdentity"], "the reconciler holds the chart's Lease"
    assert reconciler.metric("rest_client_requests_total", **PATCH_RESIZE) >= 1
    assert reconciler.metric("rest_client_requests_total", **FORBIDDEN) == 0, reconciler.logs()[-3000:]


def test_invalid_config_is_reported_on_the_configmap_as_the_service_account(as_service_account) -> None:
    harness, names, kubeconfig = as_service_account
    reconciler = start(harness, names, kubeconfig)
    # /readyz is already 200 as a standby: wait until it leads with the chart's config loaded.
    wait_for("the chart's config in force", lambda: reconciler.metric("workload_resizer_config_loaded") == 1)
    harness.kube.patch(
        f"/api/v1/namespaces/{harness.ns}/configmaps/{names['config']}",
        {"data": {"config.yaml": "baselineNodeType: nope\nnodeTypes: {}\n"}},
    )
    event = harness.wait_event(names["config"], "InvalidConfig", kind="ConfigMap")
    assert event["type"] == "Warning"
    wait_for("config_valid 0", lambda: reconciler.metric("workload_resizer_config_valid") == 0)
    assert reconciler.ready(), "the last good config (the chart's default) stays in force"
    assert reconciler.metric("rest_client_requests_total", **FORBIDDEN) == 0, reconciler.logs()[-3000:]
