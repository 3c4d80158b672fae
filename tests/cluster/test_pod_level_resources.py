"""Pods with pod-level resources (spec.resources, KEP-2837) on the real apiserver.

1.36 (pod-level in-place resize on by default, KEP-5419; KWOK nodes declare it in
status.declaredFeatures like a 1.36 kubelet): the pod is resized at both levels in ONE
pods/resize (counted at the apiserver), the apiserver accepts the pair (its validation of
pod-level against container values decides), the originals of both levels are recorded and
bound to the pod by a pod MAC, and `restore` puts both levels back.

1.35 (`make test-1.35`): no pod-level resize; the pod is left alone with one
PodLevelResources Event and no resize request reaches the apiserver.

The real kubelet's side (cgroups) is in tests/cluster/test_real_node.py.
"""

from __future__ import annotations

import subprocess
from fractions import Fraction
from typing import Any

import pytest

from devkit.kube import ApiError, container, deployment, wait_for
from devkit.processes import REPO, Webhook, originals_key_dir
from ops.keys import read_key_directory
from resizer import ORIGINALS_MAC, KeyRing, Trust, baseline, parse_quantity, pod_original_key
from tests.cluster.test_preflight import resizes_served
from tests.cluster.test_reconciler import Harness, applied, ours
from tests.cluster.test_restore_command import restore_argv
from tests.cluster.test_webhook_cluster import Registration

POD_LEVEL = {"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
# Burstable containers under the pod-level values; on `slow` (cpuPerf 0.5) every cpu doubles.
CONTAINERS = [
    container("app", {"cpu": "400m", "memory": "256Mi"}, {"cpu": "800m", "memory": "512Mi"}),
    container("side", {"cpu": "100m", "memory": "64Mi"}),
]
DOUBLED = {
    "requests": {"cpu": Fraction(2), "memory": parse_quantity("512Mi")},
    "limits": {"cpu": Fraction(4), "memory": parse_quantity("1Gi")},
}


def minor(h: Harness) -> int:
    return int(h.cluster.version.lstrip("v").split(".")[1])


def deploy_pod_level(h: Harness, node: str) -> dict[str, Any]:
    manifest = deployment("plr", 1, CONTAINERS, node_selector={"kubernetes.io/hostname": node})
    manifest["spec"]["template"]["spec"]["resources"] = POD_LEVEL
    h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", manifest)
    return h.wait_running("plr")[0]


def values(resources: dict[str, Any] | None) -> dict[str, dict[str, Fraction]]:
    return {
        kind: {r: parse_quantity(v) for r, v in ((resources or {}).get(kind) or {}).items()}
        for kind in ("requests", "limits")
    }


def cpu_of(pod: dict[str, Any], name: str) -> tuple[Fraction, Fraction | None]:
    res = values(next(c for c in pod["spec"]["containers"] if c["name"] == name).get("resources"))
    return res["requests"]["cpu"], res["limits"].get("cpu")


def test_pod_level_resources_are_resized_with_the_containers_or_left_alone(h: Harness) -> None:
    node = h.node("plr", "slow")
    pod = deploy_pod_level(h, node)
    name = pod["metadata"]["name"]
    before = resizes_served(h)
    reconciler = h.reconciler()

    if minor(h) < 36:
        event = h.wait_event(name, "PodLevelResources")
        assert "spec.resources" in event["message"] and "left alone" in event["message"], event["message"]
        now = h.pod(name)
        assert values(now["spec"]["resources"]) == values(POD_LEVEL) and applied(now) is None
        assert resizes_served(h) == before, "no resize request on 1.35"
        assert reconciler.metric("rest_client_requests_total", method="PATCH", resource="pods/resize") == 0
        assert h.reasons(name).count("PodLevelResources") == 1
        return

    resized = h.wait_applied("plr", "slow")[0]
    # Both levels in one request, which the apiserver accepted as a whole.
    assert resizes_served(h) == before + 1
    assert reconciler.metric("rest_client_requests_total", method="PATCH", resource="pods/resize") == 1
    assert values(resized["spec"]["resources"]) == DOUBLED
    assert cpu_of(resized, "app") == (Fraction(8, 10), Fraction(16, 10))
    assert cpu_of(resized, "side") == (Fraction(2, 10), None)
    assert resized["status"]["qosClass"] == "Burstable"
    # What the (KWOK) kubelet reports as applied at pod level follows the spec.
    assert values(resized["status"].get("resources")) == DOUBLED
    # Originals of both levels, bound to this pod.
    annotations = resized["metadata"]["annotations"]
    assert {
        k: annotations[pod_original_key(*k2)]
        for k, k2 in (
            ("cpu", ("cpu", "request")),
            ("cpu-limit", ("cpu", "limit")),
            ("memory", ("memory", "request")),
            ("memory-limit", ("memory", "limit")),
        )
    } == {"cpu": "1", "cpu-limit": "2", "memory": "512Mi", "memory-limit": "1Gi"}
    keyring = KeyRing(read_key_directory(originals_key_dir()))
    check = baseline(resized, keyring).check
    assert (check.trust, check.scope) == (Trust.TRUSTED, "pod"), check
    assert "Resized" in h.reasons(name) and "PodLevelResources" not in h.reasons(name)

    # restore: both levels back, in one resize, annotations gone.
    reconciler.terminate()
    result = subprocess.run(
        restore_argv(h, "20") + [f"--only-namespace={h.ns}"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "pod level: requests cpu=1, limits cpu=2" in result.stdout, result.stdout
    back = wait_for("restored", lambda: (p := h.pod(name)) and not ours(p) and p, timeout=30)
    assert values(back["spec"]["resources"]) == values(POD_LEVEL)
    assert cpu_of(back, "app") == (Fraction(4, 10), Fraction(8, 10)) and cpu_of(back, "side") == (Fraction(1, 10), None)
    assert resizes_served(h) == before + 2


def test_the_webhook_stamps_pod_level_originals_and_the_reconciler_binds_them(h: Harness, webhook: Webhook) -> None:
    """At creation the webhook records both levels (admission MAC); the reconciler needs no step-1
    write of its own, resizes from them (1.36) and binds them to the pod."""
    node = h.node("plrw", "slow")
    with Registration(h.kube, h.ns, webhook):
        pod = deploy_pod_level(h, node)
    annotations = pod["metadata"]["annotations"]
    assert {
        annotations.get(pod_original_key("cpu", "request")),
        annotations.get(pod_original_key("cpu", "limit")),
        annotations.get(pod_original_key("memory", "request")),
        annotations.get(pod_original_key("memory", "limit")),
    } == {"1", "2", "512Mi", "1Gi"}
    assert annotations[ORIGINALS_MAC].startswith("v1.a."), "signed at admission"
    stamped = {k: v for k, v in annotations.items() if "/original-" in k}
    reconciler = h.reconciler()
    if minor(h) < 36:
        h.wait_event(pod["metadata"]["name"], "PodLevelResources")
        return
    resized = h.wait_applied("plr", "slow")[0]
    assert values(resized["spec"]["resources"]) == DOUBLED
    assert {k: v for k, v in resized["metadata"]["annotations"].items() if "/original-" in k} == stamped
    assert resized["metadata"]["annotations"][ORIGINALS_MAC].startswith("v1.p.")
    # annotations written: applied-* only (no originals to record), one resize.
    assert reconciler.metric("rest_client_requests_total", method="PATCH", resource="pods") == 1
    assert reconciler.metric("rest_client_requests_total", method="PATCH", resource="pods/resize") == 1


def test_the_apiserver_accepts_the_pod_level_floor_it_demands(h: Harness) -> None:
    """`hyper` (cpuPerf 100) floors both containers at the 50m bound (100m together) while the pod
    level would scale to 50m: the apiserver refuses a pod-level request below the containers'
    aggregate (shown first), and accepts the plan, which raises it to 100m. On 1.35 the apiserver
    refuses any pod-level resize, with the words the reconciler maps to PodLevelResources."""
    from reconciler.act import GATE_OFF, POD_LEVEL_REFUSED

    node = h.node("floor", "hyper")
    manifest = deployment(
        "floor",
        1,
        [container("a", {"cpu": "50m", "memory": "64Mi"}), container("b", {"cpu": "200m", "memory": "64Mi"})],
        node_selector={"kubernetes.io/hostname": node},
    )
    manifest["spec"]["template"]["spec"]["resources"] = {"requests": {"cpu": "250m"}, "limits": {"cpu": "500m"}}
    h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", manifest)
    name = h.wait_running("floor")[0]["metadata"]["name"]
    below = {
        "spec": {
            "resources": {"requests": {"cpu": "50m"}, "limits": {"cpu": "100m"}},
            "containers": [{"name": "b", "resources": {"requests": {"cpu": "50m"}}}],
        }
    }
    with pytest.raises(ApiError) as refused:
        h.kube.resize(h.ns, name, below)
    if minor(h) < 36:
        assert POD_LEVEL_REFUSED in refused.value.body["message"] and GATE_OFF in refused.value.body["message"]
        return
    assert "must be greater than or equal to aggregate container requests" in refused.value.body["message"]
    h.reconciler()
    resized = h.wait_applied("floor", "hyper")[0]
    # (The apiserver defaulted the pod-level memory request to the containers' 128Mi: kept.)
    assert values(resized["spec"]["resources"]) == {
        "requests": {"cpu": Fraction(1, 10), "memory": 128 * 2**20},
        "limits": {"cpu": Fraction(101, 1000)},
    }
    assert [cpu_of(resized, c)[0] for c in ("a", "b")] == [Fraction(5, 100), Fraction(5, 100)]
