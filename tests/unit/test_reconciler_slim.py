"""kube.slim: the cached projections keep what the core reads and drop the rest."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from devkit.configs import DESIGN_NODE_TYPES, config_yaml
from kube.slim import slim_node, slim_pod, slim_unbound_pod, status_fingerprint
from resizer import (
    OriginalsError,
    eligibility,
    load_config,
    missing_original_annotations,
    plan_resize,
    read_originals,
    resolve_policy,
)
from resizer.eligibility import is_live_and_bound
from resizer.preflight import apply_patch, quota_hold
from resizer.qos import pod_qos_class

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"

CONFIG = load_config(
    config_yaml(node_types={**DESIGN_NODE_TYPES, "c3": (1.30, 1.1)})
    + """\
overrides:
  - name: batch-on-c3
    match: { podLabel: { team: batch }, computeClass: performance }
    bounds: { cpu: { min: "200m" } }
podAnnotations:
  example.com/tier:
    gold: { nodeTypes: { c3: { cpuPerf: 2.0, memPerf: 1.0 } } }
podLabels:
  app.kubernetes.io/part-of:
    shop: { bounds: { memory: { max: "1Gi" } } }
computeClasses:
  performance: { baselineNodeType: n4 }
"""
)

NODE_TYPES = ("n2d", "n4", "c3", "m1-unknown")


# ------------------------------------------------------------------ realistic pods


def _container(
    name: str, requests: dict[str, str] | None, limits: dict[str, str] | None = None, restart_memory: bool = False
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    container: dict[str, Any] = {
        "name": name,
        "image": f"registry.example/{name}:1.4.2",
        "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/server", "--port=8080"],
        "env": [{"name": f"VAR_{i}", "value": "x" * 40} for i in range(20)],
        "ports": [{"containerPort": 8080, "protocol": "TCP"}],
        "resources": resources,
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/app"},
            {"name": "kube-api-access-abcde", "mountPath": "/var/run/secrets/kubernetes.io", "readOnly": True},
        ],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10},
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8080}},
        "terminationMessagePath": "/dev/termination-log",
    }
    if restart_memory:
        container["resizePolicy"] = [
            {"resourceName": "cpu", "restartPolicy": "NotRequired"},
            {"resourceName": "memory", "restartPolicy": "RestartContainer"},
        ]
    return container


def _pod(
    name: str,
    containers: list[dict[str, Any]],
    *,
    owner: tuple[str, str] | None = ("apps/v1", "ReplicaSet"),
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    qos_class: str | None = "Burstable",
    phase: str = "Running",
    node: str = "node-1",
    report_resources: bool = True,
) -> dict[str, Any]:
    owners = [{"apiVersion": "v1", "kind": "ConfigMap", "name": "unrelated", "uid": "u0"}]
    if owner is not None:
        owners.append(
            {
                "apiVersion": owner[0],
                "kind": owner[1],
                "name": f"{name}-owner",
                "uid": "u1",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        )
    spec: dict[str, Any] = {
        "nodeName": node,
        "containers": containers,
        "volumes": [
            {"name": "config", "configMap": {"name": "app-config"}},
            {
                "name": "kube-api-access-abcde",
                "projected": {"sources": [{"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}}]},
            },
        ],
        "serviceAccountName": "default",
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
        "schedulerName": "default-scheduler",
    }
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if init_containers is not None:
        spec["initContainers"] = init_containers
    status: dict[str, Any] = {
        "phase": phase,
        "podIP": "10.0.0.12",
        "hostIP": "192.168.1.4",
        "startTime": "2025-01-01T00:00:00Z",
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "PodScheduled", "status": "True"},
            {"type": "PodResizePending", "status": "True", "reason": "Deferred"},
        ],
        "containerStatuses": [
            {
                "name": c["name"],
                "ready": True,
                "restartCount": 0,
                "image": c["image"],
                "imageID": "sha256:" + "0" * 64,
                "containerID": "containerd://" + "1" * 64,
                "state": {"running": {"startedAt": "2025-01-01T00:00:01Z"}},
                **({"resources": c["resources"]} if report_resources else {}),
            }
            for c in containers
        ],
    }
    if qos_class is not None:
        status["qosClass"] = qos_class
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "shop",
        "uid": f"uid-{name}",
        "resourceVersion": "4711",
        "generateName": f"{name}-",
        "creationTimestamp": "2025-01-01T00:00:00Z",
        "labels": {"app": name, "pod-template-hash": "5d8f7", **(labels or {})},
        "annotations": {LAST_APPLIED: json.dumps({"spec": {"containers": containers}}), **(annotations or {})},
        "ownerReferences": owners,
        "managedFields": [
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "apiVersion": "v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {}}},
            }
        ]
        * 5,
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def _pods() -> dict[str, dict[str, Any]]:
    return {
        "deployment-burstable": _pod(
            "web",
            [
                _container("app", {"cpu": "500m", "memory": "512Mi"}, {"cpu": "1", "memory": "1Gi"}),
                _container("proxy", {"cpu": "100m", "memory": "128Mi"}),
            ],
            labels={"app.kubernetes.io/part-of": "shop"},
        ),
        "statefulset-guaranteed-restart-memory": _pod(
            "db-0",
            [_container("db", {"cpu": "2", "memory": "4Gi"}, {"cpu": "2", "memory": "4Gi"}, restart_memory=True)],
            owner=("apps/v1", "StatefulSet"),
            qos_class="Guaranteed",
            node_selector={"cloud.google.com/compute-class": "performance"},
        ),
        "already-resized-with-originals": _pod(
            "web-2",
            [_container("app", {"cpu": "400m", "memory": "512Mi"}, {"cpu": "800m", "memory": "1Gi"})],
            annotations={
                "workload-resizer.io/original-cpu.app": "500m",
                "workload-resizer.io/original-cpu-limit.app": "1",
                "workload-resizer.io/original-memory.app": "512Mi",
                "workload-resizer.io/original-memory-limit.app": "1Gi",
                "workload-resizer.io/applied-instance-type": "n4",
                "example.com/tier": "gold",
            },
        ),
        "job-with-sidecar-no-qos-recorded": _pod(
            "etl-x7",
            [_container("worker", {"cpu": "1", "memory": "2Gi"})],
            owner=("batch/v1", "Job"),
            labels={"team": "batch"},
            qos_class=None,
            node_selector={"cloud.google.com/compute-class": "performance"},
            init_containers=[
                {**_container("log-shipper", {"cpu": "50m", "memory": "64Mi"}), "restartPolicy": "Always"}
            ],
        ),
        "skip-annotation": _pod(
            "skipped", [_container("app", {"cpu": "1"})], annotations={"workload-resizer.io/skip": "TRUE"}
        ),
        "mirror-pod": _pod(
            "kube-proxy-node-1",
            [_container("kube-proxy", {"cpu": "100m"})],
            owner=("v1", "Node"),
            annotations={"kubernetes.io/config.mirror": "abc"},
        ),
        "orphan": _pod("bare", [_container("app", {"cpu": "1"})], owner=None),
        "custom-job-kind": _pod(
            "vc-job", [_container("app", {"cpu": "1"})], owner=("batch.volcano.sh/v1alpha1", "Job")
        ),
        "corrupt-original": _pod(
            "broken", [_container("app", {"cpu": "1"})], annotations={"workload-resizer.io/original-cpu.app": "lots"}
        ),
        "best-effort": _pod("be", [_container("app", None)], qos_class="BestEffort"),
        "not-running-yet": _pod(
            "pending", [_container("app", {"cpu": "300m", "memory": "256Mi"})], phase="Pending", report_resources=False
        ),
        # The core trusts the recorded QoS class (immutable after creation) over the spec.
        "qos-recorded-differs-from-spec": _pod(
            "legacy",
            [
                _container("app", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"}),
                _container("helper", {"cpu": "100m"}, {"cpu": "100m"}),
            ],
            qos_class="Guaranteed",
        ),
        "terminated": _pod("done", [_container("app", {"cpu": "300m"})], owner=("batch/v1", "Job"), phase="Succeeded"),
    }


POD_NAMES = sorted(_pods())


def _outcome(fn, *args):
    """A function's result, or the type and text of the core error it raised."""
    try:
        return fn(*args)
    except OriginalsError as err:
        return ("OriginalsError", str(err))


# ------------------------------------------------------------------ the core sees the same pod


@pytest.mark.parametrize("name", POD_NAMES)
def test_eligibility_is_the_same_on_the_slim_pod(name):
    pod = _pods()[name]
    assert eligibility(slim_pod(pod)) == eligibility(pod)


@pytest.mark.parametrize("name", POD_NAMES)
def test_read_originals_is_the_same_on_the_slim_pod(name):
    pod = _pods()[name]
    assert _outcome(read_originals, slim_pod(pod)) == _outcome(read_originals, pod)


@pytest.mark.parametrize("name", POD_NAMES)
def test_missing_original_annotations_are_the_same_on_the_slim_pod(name):
    pod = _pods()[name]
    assert _outcome(missing_original_annotations, slim_pod(pod)) == _outcome(missing_original_annotations, pod)


@pytest.mark.parametrize("name", POD_NAMES)
def test_resolve_policy_is_the_same_on_the_slim_pod(name):
    pod = _pods()[name]
    assert resolve_policy(CONFIG, slim_pod(pod)) == resolve_policy(CONFIG, pod)


@pytest.mark.parametrize("restart", [False, True], ids=["keep-restart-policy", "resize-restart-containers"])
@pytest.mark.parametrize("node_type", NODE_TYPES)
@pytest.mark.parametrize("name", POD_NAMES)
def test_plan_resize_is_the_same_on_the_slim_pod(name, node_type, restart):
    pod = _pods()[name]
    slim = slim_pod(pod)
    full_plan = _outcome(plan_resize, pod, resolve_policy(CONFIG, pod), node_type, restart)
    slim_plan = _outcome(plan_resize, slim, resolve_policy(CONFIG, slim), node_type, restart)
    assert slim_plan == full_plan


@pytest.mark.parametrize("name", POD_NAMES)
def test_qos_class_of_the_slim_spec_is_the_same(name):
    pod = _pods()[name]
    assert pod_qos_class(slim_pod(pod)["spec"]) == pod_qos_class(pod["spec"])


@pytest.mark.parametrize("name", POD_NAMES)
def test_live_and_bound_is_the_same_on_the_slim_pod(name):
    pod = _pods()[name]
    assert is_live_and_bound(slim_pod(pod)) == is_live_and_bound(pod)


def test_the_realistic_pods_exercise_every_outcome_the_comparison_relies_on():
    """Guards the comparisons above against comparing two equally empty answers."""
    pods = _pods()
    outcomes = {
        (name, node_type): _outcome(plan_resize, slim_pod(pod), resolve_policy(CONFIG, pod), node_type).outcome
        for name, pod in pods.items()
        if name != "corrupt-original"
        for node_type in NODE_TYPES
    }
    assert {"Resize", "AlreadyAligned", "UnknownNodeType", "NothingToSize", "QoSChange"} <= set(outcomes.values())
    assert outcomes[("already-resized-with-originals", "n4")] == "AlreadyAligned"
    assert {eligibility(slim_pod(p)).reason for p in pods.values()} == {
        "Eligible",
        "SkipAnnotation",
        "MirrorPod",
        "NoController",
        "UnsupportedOwnerKind",
    }
    assert {resolve_policy(CONFIG, slim_pod(p)).rule for p in pods.values()} >= {
        "global",
        "override:batch-on-c3",
        "podAnnotation:example.com/tier=gold",
        "podLabel:app.kubernetes.io/part-of=shop",
        "computeClass:performance",
    }
    assert _outcome(read_originals, slim_pod(pods["corrupt-original"]))[0] == "OriginalsError"


def test_a_restart_container_memory_policy_survives_slimming():
    pod = _pods()["statefulset-guaranteed-restart-memory"]
    plan = plan_resize(slim_pod(pod), resolve_policy(CONFIG, pod), "c3")
    assert [c.skipped for c in plan.changes if c.resource == "memory"] == ["RestartContainerPolicy"]


def test_a_sidecar_restart_policy_survives_slimming():
    pod = _pods()["job-with-sidecar-no-qos-recorded"]
    assert slim_pod(pod)["spec"]["initContainers"][0]["restartPolicy"] == "Always"


def test_what_a_quota_scope_matches_survives_slimming():
    pod = copy.deepcopy(_pods()["deployment-burstable"])
    cross = {"weight": 1, "podAffinityTerm": {"namespaceSelector": {}, "topologyKey": "zone"}}
    pod["spec"] |= {
        "priorityClassName": "high",
        "activeDeadlineSeconds": 60,
        "affinity": {
            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [cross]},
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}},
        },
    }
    full, grown = (
        {"requests.cpu": "1"},
        {
            "spec": {
                "containers": [
                    {"name": c["name"], "resources": {"requests": {"cpu": "64"}}} for c in pod["spec"]["containers"]
                ]
            }
        },
    )
    for scope in ("PriorityClass", "Terminating", "CrossNamespacePodAffinity"):
        expression = {"scopeName": scope, "operator": "In" if scope == "PriorityClass" else "Exists"}
        if scope == "PriorityClass":
            expression["values"] = ["high"]
        scoped = {
            "metadata": {"name": "q"},
            "spec": {"hard": full, "scopeSelector": {"matchExpressions": [expression]}},
            "status": {"hard": full, "used": full},
        }
        slim = slim_pod(pod)
        on_full = quota_hold(pod, apply_patch(pod, grown), [scoped])
        assert on_full is not None, scope
        assert quota_hold(slim, apply_patch(slim, grown), [scoped]) == on_full, scope
    assert set(slim_pod(pod)["spec"]["affinity"]) == {"podAntiAffinity"}


# ------------------------------------------------------------------ what is dropped


def test_last_applied_configuration_is_dropped_and_other_annotations_kept():
    pod = _pods()["already-resized-with-originals"]
    annotations = slim_pod(pod)["metadata"]["annotations"]
    assert LAST_APPLIED not in annotations
    assert annotations == {k: v for k, v in pod["metadata"]["annotations"].items() if k != LAST_APPLIED}


def test_slimming_does_not_modify_the_full_pod():
    pod = _pods()["deployment-burstable"]
    before = copy.deepcopy(pod)
    slim_pod(pod)
    assert pod == before


def test_values_pods_of_a_workload_share_are_one_string_in_the_cache():
    # Two pods decoded separately, as the watch decodes them: each has its own copies.
    text = json.dumps(_pods()["already-resized-with-originals"])
    first, second = slim_pod(json.loads(text)), slim_pod(json.loads(text))

    def same(path):
        a, b = first, second
        for key in path:
            a, b = a[key], b[key]
        assert a == b and a is b, path

    same(("metadata", "namespace"))
    same(("metadata", "generateName"))
    for key in first["metadata"]["labels"]:
        same(("metadata", "labels", key))
    for key in first["metadata"]["annotations"]:
        same(("metadata", "annotations", key))
    same(("metadata", "ownerReferences", 0, "uid"))
    same(("spec", "nodeName"))
    for kind, quantities in first["spec"]["containers"][0]["resources"].items():
        for name in quantities:
            same(("spec", "containers", 0, "resources", kind, name))
    same(("status", "qosClass"))


def test_managed_fields_and_bookkeeping_metadata_are_dropped():
    meta = slim_pod(_pods()["deployment-burstable"])["metadata"]
    assert "managedFields" not in meta
    assert "creationTimestamp" not in meta
    assert meta["generateName"] == "web-"  # kept: the webhook's originals MAC binds it


def test_env_probes_mounts_and_image_are_dropped_from_containers():
    slim = slim_pod(_pods()["job-with-sidecar-no-qos-recorded"])
    for container in slim["spec"]["containers"] + slim["spec"]["initContainers"]:
        assert set(container) <= {"name", "resources", "resizePolicy", "restartPolicy"}


def test_volumes_and_scheduling_details_are_dropped_from_the_spec():
    spec = slim_pod(_pods()["deployment-burstable"])["spec"]
    assert set(spec) <= {"nodeName", "containers", "initContainers", "nodeSelector", "resources"}
    assert "volumes" not in spec


def test_only_the_controller_owner_reference_is_kept():
    refs = slim_pod(_pods()["deployment-burstable"])["metadata"]["ownerReferences"]
    assert [(r["kind"], r["name"]) for r in refs] == [("ReplicaSet", "web-owner")]


def test_only_resize_conditions_are_kept_in_the_status():
    status = slim_pod(_pods()["deployment-burstable"])["status"]
    assert [c["type"] for c in status["conditions"]] == ["PodResizePending"]
    assert "podIP" not in status and "startTime" not in status


def test_container_statuses_keep_name_resources_and_running_only():
    pod = _pods()["deployment-burstable"]
    statuses = slim_pod(pod)["status"]["containerStatuses"]
    assert statuses == [
        {"name": "app", "resources": pod["spec"]["containers"][0]["resources"], "running": True},
        {"name": "proxy", "resources": pod["spec"]["containers"][1]["resources"], "running": True},
    ]


def test_the_slim_pod_is_a_small_fraction_of_the_full_pod():
    pod = _pods()["deployment-burstable"]
    assert len(json.dumps(slim_pod(pod))) * 4 < len(json.dumps(pod))


def test_deletion_timestamp_is_kept_so_terminating_pods_are_skipped():
    pod = _pods()["deployment-burstable"]
    pod["metadata"]["deletionTimestamp"] = "2025-01-01T01:00:00Z"
    slim = slim_pod(pod)
    assert slim["metadata"]["deletionTimestamp"] == "2025-01-01T01:00:00Z"
    assert not is_live_and_bound(slim)


def test_pod_level_resources_are_kept():
    pod = _pods()["deployment-burstable"]
    pod["spec"]["resources"] = {"requests": {"cpu": "1"}, "limits": {"cpu": "1", "memory": "1Gi"}}
    assert slim_pod(pod)["spec"]["resources"] == pod["spec"]["resources"]


def test_a_minimal_pod_without_optional_sections_can_be_slimmed():
    slim = slim_pod({"metadata": {"name": "p", "namespace": "ns"}})
    assert slim["metadata"]["annotations"] == {} and slim["metadata"]["labels"] == {}
    assert slim["spec"]["containers"] == [] and slim["status"]["containerStatuses"] == []


def test_slim_node_keeps_name_resource_version_labels_and_allocatable_cpu_memory_only():
    node = {
        "metadata": {
            "name": "n1",
            "resourceVersion": "9",
            "uid": "x",
            "labels": {"cloud.google.com/machine-family": "n4"},
            "annotations": {"big": "x" * 1000},
            "managedFields": [{}],
        },
        "spec": {"podCIDR": "10.0.0.0/24"},
        "status": {
            "images": [{"names": ["a"]}] * 50,
            "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "1Ti"},
        },
    }
    assert slim_node(node) == {
        "metadata": {"name": "n1", "resourceVersion": "9", "labels": {"cloud.google.com/machine-family": "n4"}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}},
    }


def test_slim_pod_keeps_the_observed_generation_and_what_a_resize_condition_says():
    pod = slim_pod(
        {
            "metadata": {"name": "p", "namespace": "ns", "generation": 3},
            "status": {
                "observedGeneration": 2,
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {
                        "type": "PodResizePending",
                        "status": "True",
                        "reason": "Deferred",
                        "message": "full",
                        "observedGeneration": 3,
                        "lastProbeTime": None,
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                    },
                ],
            },
        }
    )
    assert pod["metadata"]["generation"] == 3 and pod["status"]["observedGeneration"] == 2
    assert pod["status"]["conditions"] == [
        {
            "type": "PodResizePending",
            "reason": "Deferred",
            "message": "full",
            "observedGeneration": 3,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }
    ]


# ------------------------------------------------------------------ status_fingerprint


def _with_status(pod: dict[str, Any], **changes: Any) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    for status in pod["status"]["containerStatuses"]:
        status.update(changes)
    return pod


def test_fingerprint_changes_when_a_running_container_starts_reporting_resources():
    pod = _pods()["deployment-burstable"]
    silent = _with_status(pod)
    for status in silent["status"]["containerStatuses"]:
        status.pop("resources")
    assert status_fingerprint(slim_pod(silent)) != status_fingerprint(slim_pod(pod))


def test_fingerprint_changes_when_a_waiting_container_starts_running():
    pod = _pods()["deployment-burstable"]
    waiting = _with_status(pod, state={"waiting": {"reason": "ContainerCreating"}})
    assert status_fingerprint(slim_pod(waiting)) != status_fingerprint(slim_pod(pod))


def test_fingerprint_changes_with_the_phase():
    pod = _pods()["deployment-burstable"]
    pending = copy.deepcopy(pod)
    pending["status"]["phase"] = "Pending"
    assert status_fingerprint(slim_pod(pending)) != status_fingerprint(slim_pod(pod))


def test_fingerprint_ignores_status_changes_that_do_not_affect_resize_support():
    pod = _pods()["deployment-burstable"]
    later = _with_status(pod, restartCount=3, ready=False)
    later["status"]["podIP"] = "10.0.0.99"
    later["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    later["metadata"]["resourceVersion"] = "4712"
    assert status_fingerprint(slim_pod(later)) == status_fingerprint(slim_pod(pod))


def test_fingerprint_ignores_the_reported_amounts():
    """Only whether resources are reported matters, not their values (a resize in
    progress changes them without making a failed attempt worth repeating)."""
    pod = _pods()["deployment-burstable"]
    resized = copy.deepcopy(pod)
    resized["status"]["containerStatuses"][0]["resources"] = {"requests": {"cpu": "400m"}}
    assert status_fingerprint(slim_pod(resized)) == status_fingerprint(slim_pod(pod))


def test_fingerprint_of_a_pod_without_status_is_defined():
    assert status_fingerprint({"metadata": {}, "spec": {}}) == (None, ())


# ------------------------------------------------------------------ pods not bound yet (reconciler.gated)


def _unbound(name: str, gated: bool) -> dict[str, Any]:
    pod = _pods()[name]
    del pod["spec"]["nodeName"]
    pod["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
    pod["metadata"]["generation"] = 1
    if gated:
        pod["spec"]["schedulingGates"] = [{"name": "example.com/quota"}, {"name": "example.com/review"}]
    return pod


@pytest.mark.parametrize("name", POD_NAMES)
def test_a_gated_pod_s_binding_is_the_same_on_the_slim_unbound_pod(name):
    from reconciler.gated import wants_binding
    from resizer import KeyRing, early_binding

    keys = KeyRing({"k0001": b"k" * 32})
    pod = _unbound(name, gated=True)
    slim = slim_unbound_pod(pod)
    assert wants_binding(slim, keys) == (eligibility(pod).eligible and wants_binding(pod, keys))
    assert _outcome(early_binding, slim, keys) == _outcome(early_binding, pod, keys)
    assert slim["spec"]["schedulingGates"] == ["example.com/quota", "example.com/review"]
    assert "status" not in slim and "labels" not in slim["metadata"]


def test_an_unbound_pod_without_gates_is_cached_as_its_name_only():
    pod = _unbound("deployment-burstable", gated=False)
    slim = slim_unbound_pod(pod)
    assert slim == {
        "metadata": {"name": "web", "namespace": "shop", "resourceVersion": "4711", "annotations": {}},
        "spec": {},
    }
    assert len(json.dumps(slim)) * 50 < len(json.dumps(pod))


def test_scheduling_gates_are_kept_on_the_slim_pod():
    assert slim_pod(_unbound("orphan", gated=True))["spec"]["schedulingGates"] == [
        "example.com/quota",
        "example.com/review",
    ]
    assert "schedulingGates" not in slim_pod(_pods()["orphan"])["spec"]
