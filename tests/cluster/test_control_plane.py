"""Acceptance of the local control plane (hack/cluster) and its fake kubelets.

One scenario per test, against whatever `hack/cluster up` provides (K8S_VERSION,
WR_CLUSTER_DIR): where 1.35 and 1.36 differ, the test asserts what the server of
the running version really does.

The cluster may be shared. Our nodes (shared between runs through ensure_node)
are tainted, so that other tests' unpinned pods do not land on them (a node
without resize support or with little room would break their resizes), and carry
no machine-family label; our pods tolerate the taint and are annotated
workload-resizer.io/skip, so that a reconciler running against the cluster (a
demo, say) leaves them alone.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import time
from fractions import Fraction
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from devkit.kube import ApiError, Kube, container, deployment, wait_for
from resizer import parse_quantity
from resizer.podstate import SKIP
from tests.conftest import HACK_CLUSTER, Cluster

TAINT = {"key": "workload-resizer.io/test-node", "value": "control-plane", "effect": "NoSchedule"}
TOLERATION = {"key": TAINT["key"], "operator": "Equal", "value": TAINT["value"], "effect": TAINT["effect"]}

CAPABLE = "cp-capable"
UNSUPPORTED = "cp-no-resize"
SMALL = "cp-small"  # cpu 2, memory 4Gi: room for the "above allocatable" scenario

# A Burstable container, and a resize of it that a capable kubelet accepts. The
# quantities are not canonical on purpose: the status must follow the spec by value.
APP = container("app", {"cpu": "250m", "memory": "64Mi"}, {"cpu": "500m", "memory": "128Mi"})
RESIZE = {
    "spec": {
        "containers": [
            {
                "name": "app",
                "resources": {
                    "requests": {"cpu": "0.4", "memory": "100Mi"},
                    "limits": {"cpu": "0.8", "memory": "200Mi"},
                },
            }
        ]
    }
}


# --------------------------------------------------------------------------- helpers


@cache
def hack_cluster() -> ModuleType:
    """hack/cluster as a module, for its pinned versions and cache layout."""
    loader = importlib.machinery.SourceFileLoader("hack_cluster", str(HACK_CLUSTER))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("hack_cluster", loader))
    sys.modules["hack_cluster"] = module
    loader.exec_module(module)
    return module


def minor(cluster: Cluster) -> int:
    return int(cluster.version.lstrip("v").split(".")[1])


def tainted_node(cluster: Cluster, name: str, **kwargs: Any) -> str:
    cluster.ensure_node(name, **kwargs)
    node = cluster.kube.get(f"/api/v1/nodes/{name}")
    if TAINT not in (node.get("spec", {}).get("taints") or []):
        cluster.kube.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": [TAINT]}})
    return name


def deploy(
    kube: Kube, namespace: str, name: str, node: str, containers: list[dict[str, Any]], replicas: int = 1
) -> list[dict[str, Any]]:
    """A Deployment pinned to node; returns its pods once all are Running."""
    manifest = deployment(
        name, replicas, containers, node_selector={"kubernetes.io/hostname": node}, annotations={SKIP: "true"}
    )
    manifest["spec"]["template"]["spec"]["tolerations"] = [TOLERATION]
    kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", manifest)

    def running() -> list[dict[str, Any]] | None:
        pods = kube.pods(namespace, f"app={name}")
        ready = [p for p in pods if p["status"].get("phase") == "Running" and p["status"].get("containerStatuses")]
        return ready if len(ready) == replicas == len(pods) else None

    return wait_for(f"{replicas} running pod(s) of deployment {name}", running, timeout=30)


def by_value(resources: dict[str, Any] | None) -> dict[str, dict[str, Fraction]]:
    """requests/limits with every quantity parsed, so "0.4" equals "400m"."""
    return {
        kind: {name: parse_quantity(q) for name, q in values.items()}
        for kind, values in (resources or {}).items()
        if kind in ("requests", "limits") and values
    }


def status_follows_spec(pod: dict[str, Any]) -> bool:
    """Every container's status resources and allocatedResources equal its spec, by value."""
    statuses = {s["name"]: s for s in pod["status"].get("containerStatuses") or []}
    for c in pod["spec"]["containers"]:
        status = statuses.get(c["name"])
        if status is None or by_value(status.get("resources")) != by_value(c.get("resources")):
            return False
        allocated = by_value({"requests": status.get("allocatedResources")})
        if allocated != by_value({"requests": c.get("resources", {}).get("requests")}):
            return False
    return True


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in pod["status"].get("conditions") or [] if c["type"] == kind), None)


def resize_patch(**requests_by_container: dict[str, str]) -> dict[str, Any]:
    return {
        "spec": {
            "containers": [
                {"name": name, "resources": {"requests": requests}} for name, requests in requests_by_container.items()
            ]
        }
    }


def run_hack(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(HACK_CLUSTER), *args], capture_output=True, text=True, timeout=timeout, env=env or dict(os.environ)
    )


# --------------------------------------------------------------------------- scenarios


def test_deployment_pods_are_bound_by_the_scheduler_and_run_with_status_resources(
    cluster: Cluster, namespace: str
) -> None:
    node = tainted_node(cluster, CAPABLE)
    pods = deploy(cluster.kube, namespace, "web", node, [APP], replicas=2)

    for pod in pods:
        assert pod["spec"]["nodeName"] == node
        assert condition(pod, "PodScheduled")["status"] == "True"
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        assert pod["status"]["qosClass"] == "Burstable"
        assert status_follows_spec(pod), pod["status"]["containerStatuses"]
        scheduled = wait_for(
            "Scheduled event",
            lambda pod=pod: [
                e for e in cluster.kube.events_for(namespace, pod["metadata"]["name"]) if e["reason"] == "Scheduled"
            ],
        )
        reporter = scheduled[0].get("reportingComponent") or scheduled[0].get("source", {}).get("component")
        assert reporter == "default-scheduler"
        assert f"to {node}" in scheduled[0]["message"]


def test_resize_on_a_capable_node_is_accepted_and_status_follows_the_spec(cluster: Cluster, namespace: str) -> None:
    node = tainted_node(cluster, CAPABLE)
    [pod] = deploy(cluster.kube, namespace, "web", node, [APP])
    name = pod["metadata"]["name"]

    resized = cluster.kube.resize(namespace, name, RESIZE)

    assert resized["metadata"]["generation"] == pod["metadata"]["generation"] + 1
    sent = RESIZE["spec"]["containers"][0]["resources"]
    assert by_value(resized["spec"]["containers"][0]["resources"]) == by_value(sent)
    done = wait_for(
        "status to follow the resized spec",
        lambda: (
            (p := cluster.kube.pod(namespace, name))["status"].get("observedGeneration")
            == resized["metadata"]["generation"]
            and status_follows_spec(p)
            and p
        ),
        timeout=20,
    )
    assert by_value(done["status"]["containerStatuses"][0]["resources"]) == by_value(
        {"requests": {"cpu": "400m", "memory": "100Mi"}, "limits": {"cpu": "800m", "memory": "200Mi"}}
    )
    assert condition(done, "PodResizePending") is None
    assert done["status"]["qosClass"] == "Burstable"


def test_resize_on_a_node_without_resize_support_is_rejected(cluster: Cluster, namespace: str) -> None:
    node = tainted_node(cluster, UNSUPPORTED, no_resize=True)
    [pod] = deploy(cluster.kube, namespace, "web", node, [APP])
    status = pod["status"]["containerStatuses"][0]
    assert "running" in status["state"]
    assert "resources" not in status and "allocatedResources" not in status

    with pytest.raises(ApiError) as rejected:
        cluster.kube.resize(namespace, pod["metadata"]["name"], RESIZE)

    assert rejected.value.status == 422
    assert "Pod running on node without support for resize" in rejected.value.body["message"]
    after = cluster.kube.pod(namespace, pod["metadata"]["name"])
    assert after["metadata"]["generation"] == pod["metadata"]["generation"]
    assert after["spec"]["containers"][0]["resources"] == pod["spec"]["containers"][0]["resources"]


def test_resize_that_would_make_a_guaranteed_pod_burstable_is_rejected(cluster: Cluster, namespace: str) -> None:
    node = tainted_node(cluster, CAPABLE)
    app = container("app", {"cpu": "500m", "memory": "128Mi"}, {"cpu": "500m", "memory": "128Mi"})
    [pod] = deploy(cluster.kube, namespace, "web", node, [app])
    assert pod["status"]["qosClass"] == "Guaranteed"

    with pytest.raises(ApiError) as rejected:  # request below the limit: Burstable
        cluster.kube.resize(namespace, pod["metadata"]["name"], resize_patch(app={"cpu": "250m"}))

    assert rejected.value.status == 422
    assert "Pod QOS Class may not change as a result of resizing" in rejected.value.body["message"]
    after = cluster.kube.pod(namespace, pod["metadata"]["name"])
    assert after["metadata"]["generation"] == pod["metadata"]["generation"]
    assert after["status"]["qosClass"] == "Guaranteed"
    assert status_follows_spec(after)


def test_resize_above_the_node_allocatable_is_infeasible(cluster: Cluster, namespace: str) -> None:
    """Each container would fit the 2-cpu node; together they would not (2 x 1200m).

    1.36+: rejected at admission by PodResizeValidator (403, cause NodeCapacity).
    1.35 (no such plugin): accepted, and the kubelet leaves it pending as Infeasible.
    """
    node = tainted_node(cluster, SMALL, cpu="2", memory="4Gi")
    containers = [container(n, {"cpu": "500m", "memory": "256Mi"}) for n in ("a", "b")]
    [pod] = deploy(cluster.kube, namespace, "web", node, containers)
    name, before = pod["metadata"]["name"], pod["status"]["containerStatuses"]
    too_big = resize_patch(a={"cpu": "1200m"}, b={"cpu": "1200m"})

    if minor(cluster) >= 36:
        with pytest.raises(ApiError) as rejected:
            cluster.kube.resize(namespace, name, too_big)
        assert rejected.value.status == 403
        assert "node didn't have enough allocatable resources" in rejected.value.body["message"]
        assert {"reason": "NodeCapacity"} in rejected.value.body["details"]["causes"]
        assert cluster.kube.pod(namespace, name)["metadata"]["generation"] == pod["metadata"]["generation"]
        return

    generation = cluster.kube.resize(namespace, name, too_big)["metadata"]["generation"]
    pending = wait_for(
        "PodResizePending condition",
        lambda: (
            (c := condition(p := cluster.kube.pod(namespace, name), "PodResizePending"))
            and c.get("observedGeneration") == generation
            and p
        ),
        timeout=20,
    )
    assert condition(pending, "PodResizePending")["reason"] == "Infeasible"
    assert condition(pending, "PodResizePending")["status"] == "True"
    # The fake kubelet's verdict on this very generation (observedGeneration above): nothing actuated.
    after = pending
    assert [c["resources"]["requests"]["cpu"] for c in after["spec"]["containers"]] == ["1200m", "1200m"]
    assert after["status"]["containerStatuses"] == before
    assert condition(after, "PodResizePending")["reason"] == "Infeasible"

    # A feasible resize afterwards is actuated and clears the condition.
    generation = cluster.kube.resize(namespace, name, resize_patch(a={"cpu": "700m"}, b={"cpu": "700m"}))["metadata"][
        "generation"
    ]
    done = wait_for(
        "feasible resize actuated",
        lambda: (
            (p := cluster.kube.pod(namespace, name))["status"].get("observedGeneration") == generation
            and status_follows_spec(p)
            and p
        ),
        timeout=20,
    )
    assert condition(done, "PodResizePending") is None


def test_binaries_and_api_report_the_pinned_versions(cluster: Cluster) -> None:
    hc = hack_cluster()
    expected = hc.k8s_version()  # honours K8S_VERSION like the fixture's `up`
    assert expected == hc.K8S_PATCHES[expected.rsplit(".", 1)[0]]
    assert cluster.version == f"v{expected}"
    served = cluster.kube.get("/version")
    assert (served["gitVersion"], served["major"], served["minor"]) == (f"v{expected}", "1", expected.split(".")[1])

    for binary in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        out = subprocess.run([f"{cluster.bin_dir}/{binary}", "--version"], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == f"Kubernetes v{expected}", binary
    kubectl = subprocess.run(
        [f"{cluster.bin_dir}/kubectl", "version", "--client", "-o", "json"], capture_output=True, text=True, check=True
    )
    assert json.loads(kubectl.stdout)["clientVersion"]["gitVersion"] == f"v{expected}"
    etcd = subprocess.run(
        [str(hc.bin_dir(f"etcd-v{hc.ETCD_VERSION}") / "etcd"), "--version"], capture_output=True, text=True, check=True
    )
    assert f"etcd Version: {hc.ETCD_VERSION}\n" in etcd.stdout
    kwok = subprocess.run(
        [str(hc.bin_dir(f"kwok-v{hc.KWOK_VERSION}") / "kwok"), "--version"], capture_output=True, text=True, check=True
    )
    assert kwok.stdout.startswith(f"kwok version v{hc.KWOK_VERSION} ")
    status = run_hack("status", timeout=30)
    assert status.stdout.splitlines()[0] == f"Kubernetes v{expected}, etcd v{hc.ETCD_VERSION}, kwok v{hc.KWOK_VERSION}"


def test_cluster_up_is_idempotent(cluster: Cluster) -> None:
    before = run_hack("status", timeout=30).stdout
    started = time.monotonic()
    again = run_hack("up", timeout=60)
    elapsed = time.monotonic() - started

    assert again.returncode == 0, again.stderr
    assert elapsed < 10, f"second `up` took {elapsed:.1f}s"
    assert "already running" in again.stderr
    exports = dict(line.removeprefix("export ").split("=", 1) for line in again.stdout.splitlines())
    assert exports["KUBECONFIG"] == cluster.kubeconfig
    assert exports["PATH"].split(":", 1)[0] == cluster.bin_dir
    assert run_hack("status", timeout=30).stdout == before  # same processes, nothing restarted


@pytest.mark.parametrize("command", ["up", "build"])
@pytest.mark.parametrize("bad", ["1.99", "banana", "1.36.4.1", "2.0.0"])
def test_a_bad_k8s_version_fails_with_a_clear_message(command: str, bad: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "K8S_VERSION": bad,
        "WR_CLUSTER_DIR": str(tmp_path / "state"),
        "WR_CACHE_DIR": str(tmp_path / "cache"),
    }
    result = run_hack(command, env=env, timeout=30)

    assert result.returncode == 1
    assert f"error: K8S_VERSION={bad}" in result.stderr
    assert all(minor in result.stderr for minor in ("1.35", "1.36", "1.37"))  # says what is accepted
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert not (tmp_path / "state").exists() and not (tmp_path / "cache").exists()
