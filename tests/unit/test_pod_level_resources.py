"""Pods with pod-level resources (spec.resources, KEP-2837/KEP-5419): planned at both levels in
one patch, originals of both levels recorded and signed, the baseline authority's rule for pods
stamped before pod-level originals existed, restore, the outcome, and the reconciler's choice of
leaving them alone where the node or the apiserver cannot resize them."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from kube import ApiError
from kube.slim import slim_node, slim_pod
from reconciler.controller import PodResizeReconciler
from reconciler.outcome import Stage, observe, revert_patch, spec_size
from reconciler.ports import fenced_resize_patch
from reconciler.settings import ControllerSettings
from resizer import (
    SAMPLE_CONFIG,
    KeyRing,
    PodIdentity,
    Trust,
    baseline,
    load_config,
    node_resizes_pod_level,
    originals_from_spec_annotations,
    pod_mac,
    pod_original_key,
    resolve_policy,
    sign_originals,
)
from resizer.integrity import original_annotations
from resizer.plan import POD_LEVEL_RESIZE_FEATURE, ResizePlan, plan_resize
from resizer.podstate import ORIGINALS_MAC
from resizer.preflight import apply_patch
from resizer.qos import pod_qos_class
from resizer.restore import restore_decision, restore_patch
from resizer.scope import namespace_scope
from tests.unit.fake_cluster import FakeClock, FakeCluster, FakeConfig
from tests.unit.test_reconciler_reconcile import KEY, KEYS, LABEL, reasons

CONFIG = load_config(SAMPLE_CONFIG)  # n2d baseline; n4 cpuPerf 1.25 (cpu x 0.8)
# A node type half as fast: every cpu value doubles.
GROW = load_config(SAMPLE_CONFIG.replace("nodeTypes:", "nodeTypes:\n  slow: {cpuPerf: 0.5, memPerf: 1.0}", 1))
RING = KeyRing({"k0001": b"k" * 32})
POD_CPU, POD_CPU_LIMIT = pod_original_key("cpu", "request"), pod_original_key("cpu", "limit")
POD_MEMORY, POD_MEMORY_LIMIT = pod_original_key("memory", "request"), pod_original_key("memory", "limit")


def pod_with_pod_level(
    pod_level: dict[str, Any] | None = None, *containers: dict[str, Any], generation: int = 1
) -> dict[str, Any]:
    """A Burstable pod: two containers, pod-level cpu 1 (limit 2) and memory 1Gi (limit 2Gi)."""
    containers = containers or (
        {
            "name": "app",
            "resources": {"requests": {"cpu": "300m", "memory": "256Mi"}, "limits": {"cpu": "600m", "memory": "512Mi"}},
        },
        {"name": "side", "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}},
    )
    return {
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "uid": "uid-1",
            "generateName": "web-",
            "generation": generation,
            "annotations": {},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-1", "controller": True}
            ],
        },
        "spec": {
            "nodeName": "node-1",
            "containers": copy.deepcopy(list(containers)),
            "resources": pod_level
            or {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}},
        },
        "status": {"phase": "Running", "qosClass": "Burstable"},
    }


def plan(pod: dict[str, Any], node_type: str = "n4", config: Any = CONFIG, pod_level: bool = True) -> ResizePlan:
    return plan_resize(pod, resolve_policy(config, pod), node_type, pod_level=pod_level)


# ---------------------------------------------------------------- planning at both levels


def test_both_levels_are_scaled_by_the_same_ratio_in_one_patch() -> None:
    result = plan(pod_with_pod_level())
    assert result.outcome == "Resize"
    assert result.patch == {
        "spec": {
            "resources": {"requests": {"cpu": "800m"}, "limits": {"cpu": "1600m"}},
            "containers": [
                {"name": "app", "resources": {"requests": {"cpu": "240m"}, "limits": {"cpu": "480m"}}},
                {"name": "side", "resources": {"requests": {"cpu": "80m"}}},
            ],
        }
    }
    assert "pod level: cpu 1 -> 800m (limit 2 -> 1600m)" in result.summary()


def test_without_pod_level_resize_the_pod_is_left_alone() -> None:
    result = plan(pod_with_pod_level(), pod_level=False)
    assert result.outcome == "PodLevelResources" and result.patch == {}
    assert "declaredFeatures" in result.summary()


def test_the_pod_level_request_never_ends_below_the_containers_aggregate() -> None:
    # cpu x 0.4: container a stops at the bounds' 50m floor, b goes to 80m, the pod level to 100m,
    # below the containers' 130m: raised to it (the apiserver refuses less).
    pod = pod_with_pod_level(
        {"requests": {"cpu": "250m"}},
        {"name": "a", "resources": {"requests": {"cpu": "50m"}}},
        {"name": "b", "resources": {"requests": {"cpu": "200m"}}},
    )
    config = load_config(SAMPLE_CONFIG.replace("nodeTypes:", "nodeTypes:\n  fast: {cpuPerf: 2.5, memPerf: 1.0}", 1))
    resized = apply_patch(pod, plan(pod, "fast", config=config).patch)
    assert [c["resources"]["requests"]["cpu"] for c in resized["containers"]] == ["50m", "80m"]
    assert resized["resources"]["requests"]["cpu"] == "130m"


def test_the_pod_level_limit_never_ends_below_a_container_limit() -> None:
    # The pod-level limit equals the container's: both grow, and rounding may not part them.
    pod = pod_with_pod_level(
        {"requests": {"cpu": "333m"}, "limits": {"cpu": "667m"}},
        {"name": "app", "resources": {"requests": {"cpu": "333m"}, "limits": {"cpu": "667m"}}},
    )
    resized = apply_patch(pod, plan(pod, "slow", config=GROW).patch)
    assert resized["resources"]["limits"]["cpu"] == resized["containers"][0]["resources"]["limits"]["cpu"] == "1334m"
    assert resized["resources"]["requests"]["cpu"] == "666m"


def test_a_guaranteed_pod_level_stays_guaranteed() -> None:
    level = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
    pod = pod_with_pod_level(level, {"name": "app", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}})
    pod["status"]["qosClass"] = "Guaranteed"
    result = plan(pod)
    resized = apply_patch(pod, result.patch)
    assert resized["resources"] == {
        "requests": {"cpu": "800m", "memory": "1Gi"},
        "limits": {"cpu": "800m", "memory": "1Gi"},
    }
    assert pod_qos_class(resized) == "Guaranteed"


def test_the_pod_level_memory_limit_is_never_lowered_by_default() -> None:
    config = load_config(SAMPLE_CONFIG.replace("nodeTypes:", "nodeTypes:\n  bigmem: {cpuPerf: 1.0, memPerf: 2.0}", 1))
    pod = pod_with_pod_level()
    resized = apply_patch(pod, plan(pod, "bigmem", config=config).patch)
    assert resized["resources"]["requests"]["memory"] == "512Mi"
    assert resized["resources"]["limits"]["memory"] == "2Gi", "held at the original"


def test_pod_level_values_are_planned_from_their_originals_not_the_spec() -> None:
    pod = pod_with_pod_level()
    pod["metadata"]["annotations"] = {POD_CPU: "2", POD_CPU_LIMIT: "4"}
    result = plan(pod)
    assert result.patch["spec"]["resources"]["requests"]["cpu"] == "1600m"
    assert result.patch["spec"]["resources"]["limits"]["cpu"] == "3200m"


def test_only_the_pod_level_is_set_when_containers_have_nothing_to_size() -> None:
    pod = pod_with_pod_level({"requests": {"cpu": "1"}}, {"name": "app", "resources": {}})
    result = plan(pod)
    assert result.patch == {"spec": {"resources": {"requests": {"cpu": "800m"}}}}


def test_the_node_says_whether_it_resizes_pod_level_resources() -> None:
    assert node_resizes_pod_level({"status": {"declaredFeatures": ["X", POD_LEVEL_RESIZE_FEATURE]}})
    assert not node_resizes_pod_level({"status": {"declaredFeatures": ["X"]}})
    assert not node_resizes_pod_level({"status": {}}) and not node_resizes_pod_level(None)
    node = {"metadata": {"name": "n"}, "status": {"declaredFeatures": [POD_LEVEL_RESIZE_FEATURE]}}
    assert node_resizes_pod_level(slim_node(node)), "the cache keeps what decides it"


def test_the_cache_keeps_what_the_pod_level_has() -> None:
    pod = pod_with_pod_level()
    pod["status"]["resources"] = {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}
    assert slim_pod(pod)["status"]["resources"] == pod["status"]["resources"]
    assert "resources" not in slim_pod(pod_with_pod_level())["status"]


# ---------------------------------------------------------------- originals of the pod level


def test_the_webhook_stamps_pod_level_originals_too() -> None:
    originals = originals_from_spec_annotations(pod_with_pod_level())
    assert {k: originals[k] for k in (POD_CPU, POD_CPU_LIMIT, POD_MEMORY, POD_MEMORY_LIMIT)} == {
        POD_CPU: "1",
        POD_CPU_LIMIT: "2",
        POD_MEMORY: "1Gi",
        POD_MEMORY_LIMIT: "2Gi",
    }
    assert POD_CPU == "workload-resizer.io/original-pod-cpu"
    assert POD_MEMORY_LIMIT == "workload-resizer.io/original-pod-memory-limit"


def admission_stamp_of_an_old_version(pod: dict[str, Any]) -> None:
    """What a webhook from before pod-level originals stamped: the containers' keys only."""
    originals = {k: v for k, v in originals_from_spec_annotations(pod).items() if "original-pod-" not in k}
    at_admission = copy.deepcopy(pod)
    at_admission["metadata"]["name"] = ""
    mac = sign_originals(RING, originals, PodIdentity.of(at_admission, scope="admission"), "admission")
    pod["metadata"]["annotations"].update({**originals, ORIGINALS_MAC: mac})


def test_an_unchanged_pod_stamped_before_pod_level_originals_is_trusted_and_completed() -> None:
    pod = pod_with_pod_level()
    admission_stamp_of_an_old_version(pod)
    decision = baseline(pod, RING)
    assert decision.check.trust is Trust.TRUSTED and not decision.check.tampered
    assert decision.stamp is not None
    assert {k: decision.stamp[k] for k in (POD_CPU, POD_CPU_LIMIT, POD_MEMORY, POD_MEMORY_LIMIT)} == {
        POD_CPU: "1",
        POD_CPU_LIMIT: "2",
        POD_MEMORY: "1Gi",
        POD_MEMORY_LIMIT: "2Gi",
    }
    stamped = copy.deepcopy(pod)
    stamped["metadata"]["annotations"].update(decision.stamp)
    after = baseline(stamped, RING)
    assert after.check.trust is Trust.TRUSTED and after.check.scope == "pod" and after.stamp is None, (
        "the pod MAC of step 1 binds every key"
    )


def test_a_changed_pod_stamped_before_pod_level_originals_needs_full_equality() -> None:
    pod = pod_with_pod_level(generation=2)
    admission_stamp_of_an_old_version(pod)
    decision = baseline(pod, RING)
    assert decision.check.trust is Trust.TRUSTED_IF_ALIGNED and decision.stamp is None


def test_recorded_keys_that_differ_from_the_spec_are_not_an_upgrade() -> None:
    pod = pod_with_pod_level()
    admission_stamp_of_an_old_version(pod)
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "200m"  # a sibling's originals
    decision = baseline(pod, RING)
    assert decision.check.trust is Trust.RECAPTURE and decision.check.tampered


def test_a_pod_mac_without_pod_level_keys_takes_the_pod_level_from_the_spec() -> None:
    pod = pod_with_pod_level(generation=3)
    originals = {k: v for k, v in originals_from_spec_annotations(pod).items() if "original-pod-" not in k}
    pod["metadata"]["annotations"].update(originals)
    pod["metadata"]["annotations"].update(pod_mac(pod, RING))
    decision = baseline(pod, RING)
    assert decision.check.trust is Trust.TRUSTED and decision.stamp is not None
    assert decision.stamp[POD_CPU] == "1" and ORIGINALS_MAC in decision.stamp
    complete = {**original_annotations(pod), **{k: v for k, v in decision.stamp.items() if k != ORIGINALS_MAC}}
    assert decision.stamp[ORIGINALS_MAC] == sign_originals(RING, complete, PodIdentity.of(pod), "pod")


def test_a_pod_level_key_changed_under_a_pod_mac_is_rejected() -> None:
    pod = pod_with_pod_level(generation=3)
    pod["metadata"]["annotations"].update(originals_from_spec_annotations(pod))
    pod["metadata"]["annotations"].update(pod_mac(pod, RING))
    pod["metadata"]["annotations"][POD_CPU] = "64"
    assert baseline(pod, RING).check.trust is Trust.REFUSE


# ---------------------------------------------------------------- restore, outcome, wire format


def resized_pod() -> dict[str, Any]:
    """Sized for n4 by the product: originals of both levels bound to the pod."""
    pod = pod_with_pod_level()
    pod["metadata"]["annotations"].update(originals_from_spec_annotations(pod))
    result = plan(pod)
    pod["spec"] = apply_patch(pod, result.patch)
    pod["metadata"]["generation"] = 2
    pod["metadata"]["annotations"].update(pod_mac(pod, RING))
    return pod


def test_restore_puts_both_levels_back_in_one_patch() -> None:
    decision = restore_decision(resized_pod(), RING)
    assert decision.held is None
    assert decision.patch["spec"]["resources"] == {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}
    assert [c["name"] for c in decision.patch["spec"]["containers"]] == ["app", "side"]
    original = pod_with_pod_level()
    assert apply_patch(resized_pod(), decision.patch) == original["spec"]
    assert restore_patch(original | {"metadata": resized_pod()["metadata"]}) == {}


def test_actuated_needs_the_pod_level_status_to_follow_the_spec() -> None:
    pod = slim_pod(resized_pod())
    pod["status"]["containerStatuses"] = [
        {"name": c["name"], "running": True, "resources": c["resources"]} for c in pod["spec"]["containers"]
    ]
    pod["status"]["observedGeneration"] = 2
    pod["status"]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "2Gi"}}
    assert observe(pod).stage is Stage.REQUESTED
    assert revert_patch(pod)["spec"]["resources"] == {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}
    pod["status"]["resources"] = copy.deepcopy(pod["spec"]["resources"])
    assert observe(pod).stage is Stage.ACTUATED
    del pod["status"]["resources"]
    assert observe(pod).stage is Stage.ACTUATED, "a kubelet that reports no pod level says nothing about it"


def test_the_applied_size_covers_the_pod_level_only_when_set() -> None:
    pod = slim_pod(resized_pod())
    other = copy.deepcopy(pod)
    other["spec"]["resources"]["requests"]["cpu"] = "900m"
    assert spec_size(pod) != spec_size(other)
    del other["spec"]["resources"]
    without = copy.deepcopy(other)
    without["spec"].pop("resources", None)
    assert spec_size(other) == spec_size(without)


def test_the_fenced_resize_sets_the_pod_level_in_the_same_json_patch() -> None:
    pod = pod_with_pod_level()
    ops = fenced_resize_patch(pod, plan(pod).patch, 1)
    assert {"op": "add", "path": "/spec/resources/requests/cpu", "value": "800m"} in ops
    assert {"op": "add", "path": "/spec/resources/limits/cpu", "value": "1600m"} in ops
    assert ops[0]["op"] == ops[1]["op"] == "test"


# ---------------------------------------------------------------- the reconciler


def world(declared: list[str] | None) -> tuple[FakeCluster, PodResizeReconciler]:
    fake = FakeCluster(auto_actuate=True)
    fake.add_node("node-1", {LABEL: "n4"}, declared_features=declared)
    pod = pod_with_pod_level()
    pod["status"] = {
        "phase": "Running",
        "qosClass": "Burstable",
        "observedGeneration": 1,
        "containerStatuses": [
            {"name": c["name"], "state": {"running": {}}, "resources": copy.deepcopy(c["resources"])}
            for c in pod["spec"]["containers"]
        ],
        "resources": copy.deepcopy(pod["spec"]["resources"]),
    }
    admission_stamp_of_an_old_version(pod)  # signed with RING == KEYS
    fake.add_pod(pod)
    return fake, PodResizeReconciler(
        fake,
        fake,
        fake,
        FakeConfig(CONFIG),
        ControllerSettings(node_type_label=LABEL),
        clock=FakeClock(),
        keyring=lambda: KEYS,
    )


def reconcile(reconciler: PodResizeReconciler, times: int = 1) -> None:
    for _ in range(times):
        asyncio.run(reconciler.reconcile(KEY))


def test_on_a_node_that_declares_it_both_levels_are_resized_after_their_originals_are_recorded() -> None:
    assert KEYS.keys == RING.keys
    fake, reconciler = world(["InPlacePodVerticalScaling", POD_LEVEL_RESIZE_FEATURE])
    reconcile(reconciler, 3)
    ops = [w.op for w in fake.writes]
    assert ops[:2] == ["annotate", "resize"], ops
    assert {POD_CPU, POD_CPU_LIMIT, POD_MEMORY, POD_MEMORY_LIMIT, ORIGINALS_MAC} <= set(fake.writes[0].body)
    assert fake.writes[1].body["spec"]["resources"] == {"requests": {"cpu": "800m"}, "limits": {"cpu": "1600m"}}
    now = fake.pod_now(KEY)
    assert now["spec"]["resources"]["requests"]["cpu"] == "800m"
    assert baseline(now, KEYS).check.trust is Trust.TRUSTED and baseline(now, KEYS).check.scope == "pod"
    assert "Resized" in reasons(fake) and "OriginalsReplaced" not in reasons(fake)


def test_on_a_node_that_does_not_declare_it_nothing_is_sent_and_one_event_says_why() -> None:
    fake, reconciler = world(["InPlacePodVerticalScaling"])
    reconcile(reconciler, 2)
    assert fake.writes == [] and reasons(fake) == ["PodLevelResources"]


def test_the_apiservers_refusal_is_learnt_once() -> None:
    fake, reconciler = world([POD_LEVEL_RESIZE_FEATURE])

    def refusal() -> ApiError:
        return ApiError(
            422,
            {
                "reason": "Invalid",
                "message": (
                    'Pod "web-1" is invalid: : Forbidden: resize of pods with pod-level resources is forbidden when '
                    "InPlacePodLevelResourcesVerticalScalingEnabled feature gate is disabled"
                ),
            },
        )

    fake.fail("resize", refusal(), refusal())
    reconcile(reconciler, 3)
    assert len(fake.failures["resize"]) == 1, "one resize sent (and refused)"
    assert reasons(fake) == ["PodLevelResources"] and "feature gate is disabled" in fake.events[0].message
    second = pod_with_pod_level()
    second["metadata"].update(name="web-2", uid="uid-2")
    fake.add_pod(second)
    asyncio.run(reconciler.reconcile("shop/web-2"))
    assert len(fake.failures["resize"]) == 1, "no other pod-level resize sent by this process"
    assert reasons(fake) == ["PodLevelResources", "PodLevelResources"]


def test_plan_forecasts_the_pod_level_request_where_the_node_resizes_it() -> None:
    from resizer.forecast import forecast_fleet

    pod = pod_with_pod_level()
    forecast = forecast_fleet([pod], {"node-1": "n4"}, CONFIG, namespace_scope(None), pod_level_nodes={"node-1"})
    [group] = forecast.workloads
    [planned] = group.pods
    assert planned.outcome == "Resize"
    assert (planned.current_cpu, planned.desired_cpu) == (1000, 800), "the pod level, not the containers' sum"
    left = forecast_fleet([pod], {"node-1": "n4"}, CONFIG, namespace_scope(None))
    assert [p.outcome for p in left.not_resized] == ["PodLevelResources"]


def test_a_node_that_starts_declaring_it_gets_the_pod_resized() -> None:
    fake, reconciler = world(["InPlacePodVerticalScaling"])
    reconcile(reconciler, 2)
    assert fake.writes == [] and reasons(fake) == ["PodLevelResources"]
    fake.add_node("node-1", {LABEL: "n4"}, declared_features=[POD_LEVEL_RESIZE_FEATURE])  # kubelet upgraded
    reconcile(reconciler, 3)
    assert [w.op for w in fake.writes][:2] == ["annotate", "resize"] and "Resized" in reasons(fake)
