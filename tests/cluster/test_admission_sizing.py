"""Right-sized from the first second, on the real apiserver with the webhook registered.

The webhook runs with --size-at-admission, watching the test's nodes (its own node-type label)
and ConfigMap. Pods whose node type is known at CREATE are created at their size: generation 1,
no pods/resize request at the apiserver (counted by its own apiserver_request_total), QoS
unchanged, originals signed and then bound to the pod by the reconciler (one SizedAtAdmission
Event). A pod that may land on types of different performance is sized after binding, as
before. A config edit and a node relabel re-align such pods from their originals. The real
kubelet starts a sized pod with the sized cgroup values and never resizes it. A pod an updating
VerticalPodAutoscaler manages is stamped only, whenever its CRD was installed, until it is removed.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from devkit.kube import ApiError, container, deployment, wait_for
from devkit.processes import Webhook, WebhookCerts
from resizer import original_key, pod_original_key
from resizer.podstate import ORIGINALS_MAC, SIZED_AT_ADMISSION
from tests.cluster.test_real_node import (
    START_TIMEOUT,
    app_status,
    cgroup_limits,
    container_id,
    implied_limits,
    real_deployment,
)
from tests.cluster.test_real_node_outcomes import alone_on_the_real_node
from tests.cluster.test_reconciler import CONFIG_YAML, Harness, guaranteed, ours, q, qos, resources
from tests.cluster.test_webhook_cluster import Registration
from tests.conftest import RealNode

AUTHOR = guaranteed(cpu="1")  # n2d baseline; n4 cpuPerf 1.25 -> 800m, c3 1.3 -> 769m


def resizes_served(h: Harness) -> float:
    return sum(h.cluster.local.resize_patches_served().values())


def sizing_webhook(h: Harness, *flags: str) -> Webhook:
    proc = Webhook(
        "--size-at-admission=true",
        f"--kubeconfig={h.cluster.kubeconfig}",
        f"--config-namespace={h.ns}",
        f"--node-type-label={h.label}",
        *flags,
        certs=WebhookCerts(),
        name="webhook-sizing",
    )
    h.processes.append(proc)
    proc.wait_ready()
    return proc


def wait_sizing_active(h: Harness, node_type: str) -> None:
    """Until a dry-run pod pinned to `node_type` comes back sized (the webhook's watches synced)."""
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "sizing-probe-",
            "namespace": h.ns,
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "probe", "uid": "probe-uid", "controller": True}
            ],
        },
        "spec": {
            "nodeSelector": {h.label: node_type},
            "containers": [{**guaranteed(cpu="1"), "name": "probe", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    wait_for(
        "the webhook to size at admission",
        lambda: (
            SIZED_AT_ADMISSION
            in (
                h.kube.request("POST", f"/api/v1/namespaces/{h.ns}/pods", probe, params={"dryRun": "All"})[
                    "metadata"
                ].get("annotations")
                or {}
            )
        ),
        timeout=60,
    )


def pinned_deployment(
    name: str, selector: dict[str, str] | None = None, affinity_types: list[str] | None = None, label: str = ""
) -> dict[str, Any]:
    manifest = deployment(name, 1, [copy.deepcopy(AUTHOR)], node_selector=selector)
    if affinity_types is not None:
        manifest["spec"]["template"]["spec"]["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": label, "operator": "In", "values": affinity_types}]}
                    ]
                }
            }
        }
    return manifest


def daemonset(name: str, label: str) -> dict[str, Any]:
    """Onto every node carrying the harness's label (the DaemonSet controller then pins each pod
    to its node with matchFields metadata.name)."""
    template = pinned_deployment(name)["spec"]["template"]
    template["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": label, "operator": "Exists"}]}]
            }
        }
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": template},
    }


def nodename_job(name: str, node: str) -> dict[str, Any]:
    template = pinned_deployment(name)["spec"]["template"]
    template["spec"].update(nodeName=node, restartPolicy="Never")
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"backoffLimit": 0, "template": template},
    }


def cpu(pod: dict[str, Any]) -> tuple[Any, Any]:
    r = resources(pod)
    return r["requests"]["cpu"], r["limits"]["cpu"]


@pytest.fixture
def sized(h: Harness) -> Iterator[tuple[Harness, dict[str, str]]]:
    nodes = {family: h.node(family, family) for family in ("n2d", "n4", "c3")}
    webhook = sizing_webhook(h)
    with Registration(h.kube, h.ns, webhook):
        wait_sizing_active(h, "n4")
        yield h, nodes


def create_all(h: Harness, nodes: dict[str, str]) -> None:
    ns = h.ns
    h.kube.create(f"/apis/apps/v1/namespaces/{ns}/daemonsets", daemonset("ds", h.label))
    h.kube.create(f"/apis/apps/v1/namespaces/{ns}/deployments", pinned_deployment("selector", {h.label: "n4"}))
    h.kube.create(
        f"/apis/apps/v1/namespaces/{ns}/deployments",
        pinned_deployment("affinity-n4", affinity_types=["n4"], label=h.label),
    )
    h.kube.create(
        f"/apis/apps/v1/namespaces/{ns}/deployments",
        pinned_deployment("affinity-n4-c3", affinity_types=["n4", "c3"], label=h.label),
    )
    h.kube.create(f"/apis/batch/v1/namespaces/{ns}/jobs", nodename_job("nodename", nodes["c3"]))


def by_node_type(h: Harness, nodes: dict[str, str], app: str) -> dict[str, dict[str, Any]]:
    types = {name: family for family, name in nodes.items()}
    return {types[p["spec"]["nodeName"]]: p for p in h.pods(app)}


def test_pinned_pods_are_created_at_their_size_and_the_others_sized_after_binding(
    sized: tuple[Harness, dict[str, str]],
) -> None:
    h, nodes = sized
    before = resizes_served(h)
    create_all(h, nodes)
    h.wait_running("ds", 3)
    for app in ("selector", "affinity-n4", "affinity-n4-c3", "nodename"):
        h.wait_running(app)
    # Created at their size: as stored, before the reconciler runs.
    want = {"n2d": q("1"), "n4": q("800m"), "c3": q("769m")}
    daemon = by_node_type(h, nodes, "ds")
    for family, pod in daemon.items():
        assert cpu(pod) == (want[family], want[family]), (family, resources(pod))
    for app, family in (("selector", "n4"), ("affinity-n4", "n4"), ("nodename", "c3")):
        (pod,) = h.pods(app)
        assert cpu(pod) == (want[family], want[family]), (app, resources(pod))
        assert ours(pod)[SIZED_AT_ADMISSION] == family
    (open_pod,) = h.pods("affinity-n4-c3")
    assert cpu(open_pod) == (q("1"), q("1")), "n4 or c3: not known at admission"
    assert SIZED_AT_ADMISSION not in ours(open_pod)

    h.reconciler()
    sized_pods = [daemon["n4"], daemon["c3"], *h.pods("selector"), *h.pods("affinity-n4"), *h.pods("nodename")]
    for pod in sized_pods:
        name = pod["metadata"]["name"]
        event = h.wait_event(name, "SizedAtAdmission", timeout=60)
        assert event["type"] == "Normal" and "cpu 1 -> " in event["message"], event
    open_family = next(f for f, n in nodes.items() if n == open_pod["spec"]["nodeName"])
    h.wait_applied("affinity-n4-c3", open_family, timeout=60)
    h.wait_event(daemon["n2d"]["metadata"]["name"], "AlreadyAligned", timeout=60)

    assert resizes_served(h) == before + 1, "only the pod whose type was not known at admission"
    for pod in sized_pods:
        now = h.pod(pod["metadata"]["name"])
        assert now["metadata"]["generation"] == 1, "never resized"
        assert cpu(now) == cpu(pod) and qos(now) == "Guaranteed"
        annotations = ours(now)
        assert annotations[original_key("app", "cpu", "request")] == "1", "the author's size, signed"
        assert annotations[ORIGINALS_MAC].startswith("v1.p."), "bound to the pod by the reconciler's one write"
        assert [e["reason"] for e in h.events(now["metadata"]["name"])] == ["SizedAtAdmission"]
    open_now = h.pods("affinity-n4-c3")[0]
    assert open_now["metadata"]["generation"] == 2 and cpu(open_now) == (want[open_family], want[open_family])


def test_a_config_edit_and_a_node_relabel_re_align_them_from_their_originals(
    sized: tuple[Harness, dict[str, str]],
) -> None:
    h, nodes = sized
    h.reconciler()
    h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", pinned_deployment("selector", {h.label: "n4"}))
    h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/daemonsets", daemonset("ds", h.label))
    (pod,) = h.wait_running("selector")
    h.wait_running("ds", 3)
    name = pod["metadata"]["name"]
    h.wait_event(name, "SizedAtAdmission", timeout=60)
    ds_n4 = by_node_type(h, nodes, "ds")["n4"]["metadata"]["name"]
    h.wait_event(ds_n4, "SizedAtAdmission", timeout=60)
    assert cpu(h.pod(name)) == (q("800m"), q("800m"))

    # n4 twice as fast: 1 CPU / 2 = 500m from the originals (compounding from 800m would give 400m).
    h.config(CONFIG_YAML.replace("n4: { cpuPerf: 1.25", "n4: { cpuPerf: 2.0"))
    for pod_name in (name, ds_n4):
        wait_for(
            f"{pod_name} re-aligned to 500m", lambda n=pod_name: cpu(h.pod(n)) == (q("500m"), q("500m")), timeout=60
        )
    # The node becomes a c3: 1 CPU / 1.3 = 769m from the originals (from 500m it would be 385m).
    h.relabel(nodes["n4"], "c3")
    for pod_name in (name, ds_n4):
        wait_for(
            f"{pod_name} re-aligned to 769m", lambda n=pod_name: cpu(h.pod(n)) == (q("769m"), q("769m")), timeout=60
        )
        assert ours(h.pod(pod_name))[original_key("app", "cpu", "request")] == "1"
    h.wait_applied("selector", "c3", timeout=60)


def test_a_pod_with_pod_level_resources_is_created_at_its_size_at_both_levels(
    sized: tuple[Harness, dict[str, str]],
) -> None:
    """spec.resources at CREATE needs only PodLevelResources (on since 1.34), not in-place
    pod-level resize: the pod is created sized at both levels and bound with one write. A config
    edit re-aligns both levels from the originals in one pods/resize where the node resizes pod
    level (1.36 KWOK nodes declare it); on 1.35 that change is left alone (PodLevelResources)."""
    from tests.cluster.test_pod_level_resources import minor, values

    h, _ = sized
    before = resizes_served(h)
    reconciler = h.reconciler()
    manifest = deployment(
        "plr",
        1,
        [container("app", {"cpu": "400m", "memory": "256Mi"}, {"cpu": "800m", "memory": "512Mi"})],
        node_selector={h.label: "n4"},
    )
    manifest["spec"]["template"]["spec"]["resources"] = {
        "requests": {"cpu": "1", "memory": "512Mi"},
        "limits": {"cpu": "2", "memory": "1Gi"},
    }
    h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", manifest)
    (pod,) = h.wait_running("plr")
    name = pod["metadata"]["name"]
    # 1 / 1.25 at both levels, as stored at CREATE (memPerf 1.0: memory unchanged).
    at_n4 = {"requests": {"cpu": q("800m"), "memory": q("512Mi")}, "limits": {"cpu": q("1600m"), "memory": q("1Gi")}}
    assert values(pod["spec"]["resources"]) == at_n4
    assert resources(pod) == {
        "requests": {"cpu": q("320m"), "memory": q("256Mi")},
        "limits": {"cpu": q("640m"), "memory": q("512Mi")},
    }
    assert ours(pod)[SIZED_AT_ADMISSION] == "n4" and pod["metadata"]["generation"] == 1
    event = h.wait_event(name, "SizedAtAdmission", timeout=60)
    assert "pod level: cpu 1 -> 800m" in event["message"], event["message"]
    now = h.pod(name)
    assert now["metadata"]["generation"] == 1 and values(now["spec"]["resources"]) == at_n4
    assert qos(now) == "Burstable" and h.reasons(name) == ["SizedAtAdmission"]
    annotations = ours(now)
    assert annotations[pod_original_key("cpu", "request")] == "1", "the author's pod level, signed"
    assert annotations[ORIGINALS_MAC].startswith("v1.p."), "bound to the pod by the reconciler's one write"
    assert resizes_served(h) == before, "created at its size: no pods/resize"
    # One write (the binding and the applied record together), conditional on the pod as read: a
    # kubelet status update in between makes it conflict (409), and the reconciler then writes the
    # binding and the record one after the other (two writes), never more.
    took = reconciler.metric("rest_client_requests_total", method="PATCH", resource="pods", code="200")
    conflicts = reconciler.metric("rest_client_requests_total", method="PATCH", resource="pods", code="409")
    assert took == 1 or (took == 2 and conflicts >= 1), (took, conflicts)
    assert reconciler.metric("rest_client_requests_total", method="PATCH", resource="pods") == took + conflicts

    # n4 twice as fast: from the originals, 1 CPU / 2 = 500m at pod level (from 800m: 400m).
    h.config(CONFIG_YAML.replace("n4: { cpuPerf: 1.25", "n4: { cpuPerf: 2.0"))
    if minor(h) < 36:
        h.wait_event(name, "PodLevelResources", timeout=60)
        assert values(h.pod(name)["spec"]["resources"]) == at_n4 and resizes_served(h) == before
        return
    realigned = wait_for(
        "both levels re-aligned",
        lambda: (p := h.pod(name)) and values(p["spec"]["resources"])["requests"]["cpu"] == q("500m") and p,
        timeout=60,
    )
    assert values(realigned["spec"]["resources"]) == {
        "requests": {"cpu": q("500m"), "memory": q("512Mi")},
        "limits": {"cpu": q("1"), "memory": q("1Gi")},
    }
    assert resources(realigned) == {
        "requests": {"cpu": q("200m"), "memory": q("256Mi")},
        "limits": {"cpu": q("400m"), "memory": q("512Mi")},
    }
    assert resizes_served(h) == before + 1, "both levels in one pods/resize"
    assert ours(realigned)[pod_original_key("cpu", "limit")] == "2"


def test_dry_run_reports_would_resize_at_admission_and_changes_nothing(h: Harness) -> None:
    h.node("n4", "n4")
    webhook = sizing_webhook(h, "--dry-run")
    with Registration(h.kube, h.ns, webhook) as registration:
        wait_for(
            "the webhook's view to sync",
            lambda: (
                _probe(h)
                and webhook.metric("workload_resizer_webhook_sized_at_admission_total", result="would_resize") > 0
            ),
            timeout=60,
        )
        response = h.kube.request(
            "POST", f"/apis/apps/v1/namespaces/{h.ns}/deployments", pinned_deployment("selector", {h.label: "n4"})
        )
        assert response["metadata"]["name"] == "selector"
        (pod,) = h.wait_running("selector")
        assert cpu(pod) == (q("1"), q("1")) and SIZED_AT_ADMISSION not in ours(pod)
        assert pod["metadata"]["generation"] == 1
        (record,) = registration.decision_for("selector-")
        assert "cpu 1 -> 800m" in record["wouldResize"] and record["sizedFor"] == "n4"
    assert webhook.metric("workload_resizer_webhook_sized_at_admission_total", result="sized") == 0


def _probe(h: Harness) -> bool:
    """A dry-run pinned pod, so the dry-run webhook decides one (and counts it) once synced."""
    probe = pinned_deployment("probe", {h.label: "n4"})["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "sizing-probe-",
            "namespace": h.ns,
            "labels": {"app": "probe"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "probe", "uid": "probe-uid", "controller": True}
            ],
        },
        "spec": probe["spec"],
    }
    h.kube.request("POST", f"/api/v1/namespaces/{h.ns}/pods", pod, params={"dryRun": "All"})
    return True


@pytest.fixture
def on_real_node(cluster: Any, namespace: str, real_node: RealNode) -> Iterator[Harness]:
    yield from alone_on_the_real_node(cluster, namespace, real_node, CONFIG_YAML)


def test_the_real_kubelet_starts_a_pinned_pod_at_its_size(on_real_node: Harness, real_node: RealNode) -> None:
    h = on_real_node
    h.relabel(real_node.name, "n4")
    webhook = sizing_webhook(h)
    with Registration(h.kube, h.ns, webhook):
        wait_sizing_active(h, "n4")
        before = resizes_served(h)
        h.reconciler()
        manifest = real_deployment("fast", real_node, [copy.deepcopy(AUTHOR)])
        manifest["spec"]["template"]["spec"]["nodeSelector"][h.label] = "n4"
        h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", manifest)
        pod = h.wait_pods(
            "fast",
            1,
            lambda p: (
                p["status"].get("phase") == "Running"
                and all(s.get("ready") for s in p["status"].get("containerStatuses") or [{}])
            ),
            "Running on the real node",
            timeout=START_TIMEOUT,
        )[0]
        name = pod["metadata"]["name"]
        h.wait_event(name, "SizedAtAdmission", timeout=START_TIMEOUT)
        now = h.pod(name)
        want = {
            "requests": {"cpu": q("800m"), "memory": q("256Mi")},
            "limits": {"cpu": q("800m"), "memory": q("256Mi")},
        }
        assert resources(now) == want and now["metadata"]["generation"] == 1
        assert qos(now) == "Guaranteed" and app_status(now)["restartCount"] == 0
        assert cgroup_limits(real_node, container_id(now)) == implied_limits(q("800m"), q("256Mi"))
        assert resizes_served(h) == before, "no resize: started at its size"


def test_a_size_a_limit_range_would_refuse_is_not_given_and_never_blocks_the_pod(h: Harness) -> None:
    h.node("n4", "n4")
    webhook = sizing_webhook(h)
    with Registration(h.kube, h.ns, webhook) as registration:
        # (After the registration: its probe pod of 100m would not pass this LimitRange.)
        h.kube.create(
            f"/api/v1/namespaces/{h.ns}/limitranges",
            {
                "apiVersion": "v1",
                "kind": "LimitRange",
                "metadata": {"name": "floor"},
                "spec": {"limits": [{"type": "Container", "min": {"cpu": "900m"}}]},
            },
        )

        def held() -> bool:
            _probe(h)
            return any("LimitRange floor" in str(r.get("sizingHeld")) for r in webhook_records(webhook, h.ns))

        wait_for("the webhook to hold the size for the LimitRange", held, timeout=60)
        h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", pinned_deployment("selector", {h.label: "n4"}))
        (pod,) = h.wait_running("selector")
        assert cpu(pod) == (q("1"), q("1")) and pod["metadata"]["generation"] == 1
        assert SIZED_AT_ADMISSION not in ours(pod)
        (record,) = registration.decision_for("selector-")
        assert "LimitRange floor" in record["sizingHeld"] and record["decision"] == "patched"
        assert webhook.metric("workload_resizer_webhook_sized_at_admission_total", result="held") >= 1
        h.kube.delete(f"/api/v1/namespaces/{h.ns}/limitranges/floor")  # the unregistration probes again


def webhook_records(webhook: Webhook, namespace: str) -> list[dict[str, Any]]:
    from devkit.processes import webhook_decisions

    return webhook_decisions(webhook, namespace)


def test_plan_shows_and_restore_returns_the_pods_sized_at_admission(sized: tuple[Harness, dict[str, str]]) -> None:
    import subprocess
    import sys

    from devkit.processes import REPO, originals_key_dir
    from tests.cluster.test_tenant_matrix import plan

    h, _ = sized
    reconciler = h.reconciler()
    h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", pinned_deployment("selector", {h.label: "n4"}))
    (pod,) = h.wait_running("selector")
    name = pod["metadata"]["name"]
    h.wait_event(name, "SizedAtAdmission", timeout=60)
    entry = plan(h)[name]
    assert entry["sizedAtAdmission"] == "n4" and entry["outcome"] == "AlreadyAligned", entry
    reconciler.terminate()
    restored = subprocess.run(
        [
            sys.executable,
            "-m",
            "commands",
            "restore",
            f"--kubeconfig={h.cluster.kubeconfig}",
            f"--only-namespace={h.ns}",
            f"--originals-key-dir={originals_key_dir()}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert restored.returncode == 0, restored.stdout + restored.stderr
    now = h.pod(name)
    assert cpu(now) == (q("1"), q("1")) and ours(now) == {}, "back to the author's size, nothing of ours left"
    assert now["metadata"]["generation"] == 2, "one resize: the restore"


def vpa_probe_held(h: Harness, deployment: str) -> bool:
    """Whether a dry-run pod of `deployment`'s ReplicaSet (pinned to n4) comes back unsized."""
    probe = pinned_deployment(deployment, {h.label: "n4"})["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "vpa-probe-",
            "namespace": h.ns,
            "labels": {**probe["metadata"]["labels"], "pod-template-hash": "5d8f7"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{deployment}-5d8f7",
                    "uid": "probe-uid",
                    "controller": True,
                }
            ],
        },
        "spec": probe["spec"],
    }
    created = h.kube.request("POST", f"/api/v1/namespaces/{h.ns}/pods", pod, params={"dryRun": "All"})
    return SIZED_AT_ADMISSION not in (created["metadata"].get("annotations") or {})


def test_a_vpa_crd_installed_after_the_webhook_started_holds_its_pods_until_it_is_removed(h: Harness) -> None:
    """The webhook starts without the VerticalPodAutoscaler CRD (pods sized); the CRD installed
    later, a Deployment an InPlaceOrRecreate VPA targets is created at its author's size (the
    decision names the VPA), one whose VPA is Off at its n4 size; the CRD removed, the first
    Deployment's pods are sized again."""
    from devkit.kube import CRDS, install_crd
    from tests.cluster.test_preflight import VPA_CRD

    crd = yaml.safe_load(VPA_CRD.read_text())
    crd_path = f"{CRDS}/{crd['metadata']['name']}"

    def crd_gone() -> bool:
        try:
            h.kube.get(crd_path)
        except ApiError as err:
            return err.status == 404
        return False

    def remove_crd() -> None:
        h.kube.delete(crd_path)
        wait_for("the VPA CRD removed", crd_gone, timeout=60)

    remove_crd()  # (an earlier test of the session may have installed it)
    h.node("n4", "n4")
    webhook = sizing_webhook(h)
    try:
        with Registration(h.kube, h.ns, webhook) as registration:
            wait_sizing_active(h, "n4")
            assert not vpa_probe_held(h, "managed")
            install_crd(h.kube, crd)
            for app, mode in (("managed", "InPlaceOrRecreate"), ("advised", "Off")):
                h.kube.create(
                    f"/apis/autoscaling.k8s.io/v1/namespaces/{h.ns}/verticalpodautoscalers",
                    {
                        "apiVersion": "autoscaling.k8s.io/v1",
                        "kind": "VerticalPodAutoscaler",
                        "metadata": {"name": f"{app}-vpa"},
                        "spec": {
                            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": app},
                            "updatePolicy": {"updateMode": mode},
                        },
                    },
                )
            wait_for(
                "the webhook to find the CRD and hold the managed Deployment's pods",
                lambda: vpa_probe_held(h, "managed"),
                timeout=90,
            )
            assert "VerticalPodAutoscaler CRD found" in webhook.logs()
            assert not vpa_probe_held(h, "advised"), "Off composes"
            for app in ("managed", "advised"):
                h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", pinned_deployment(app, {h.label: "n4"}))
            (managed,) = h.wait_running("managed")
            (advised,) = h.wait_running("advised")
            assert cpu(managed) == (q("1"), q("1")) and SIZED_AT_ADMISSION not in ours(managed)
            assert ours(managed)[ORIGINALS_MAC].startswith("v1.a."), "stamped"
            (record,) = registration.decision_for("managed-")
            assert (
                "VerticalPodAutoscaler managed-vpa (updateMode InPlaceOrRecreate) manages the requests of "
                "Deployment managed" in record["sizingHeld"]
            ), record
            assert cpu(advised) == (q("800m"), q("800m")) and ours(advised)[SIZED_AT_ADMISSION] == "n4"
            assert webhook.metric("workload_resizer_webhook_sized_at_admission_total", result="held") >= 1

            remove_crd()  # (its VPAs go first: their deletion alone lifts the hold)
            wait_for(
                "the webhook to find the CRD gone",
                lambda: "VerticalPodAutoscaler CRD gone" in webhook.logs(),
                timeout=90,
            )
            assert not vpa_probe_held(h, "managed")
            h.kube.delete(f"/api/v1/namespaces/{h.ns}/pods/{managed['metadata']['name']}", gracePeriodSeconds=0)
            (replaced,) = h.wait_pods(
                "managed",
                1,
                lambda p: (
                    p["metadata"]["name"] != managed["metadata"]["name"] and p["status"].get("phase") == "Running"
                ),
                "replaced and Running",
            )
            assert cpu(replaced) == (q("800m"), q("800m")) and ours(replaced)[SIZED_AT_ADMISSION] == "n4"
    finally:
        if not crd_gone():
            remove_crd()  # nothing of it is left for the session's other tests
