"""Sidecars (restartable init containers): the opt-in, their originals, their plan, the baseline
authority's rule for pods stamped before they had originals, and the reconciler's pure helpers."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from app import review as review_mod
from kube.slim import slim_pod
from reconciler.act import decision_record
from reconciler.controller import PodResizeReconciler
from reconciler.memory import Step
from reconciler.outcome import Stage, observe, revert_patch, spec_size
from reconciler.pods import has_originals
from reconciler.ports import fenced_resize_patch
from reconciler.settings import ControllerSettings
from resizer import (
    ConfigError,
    KeyRing,
    PodIdentity,
    Trust,
    baseline,
    check_originals,
    load_config,
    original_annotations,
    original_key,
    originals_from_spec_annotations,
    read_originals,
    resolve_policy,
    sign_originals,
)
from resizer.forecast import forecast_pod
from resizer.plan import plan_resize
from resizer.podstate import APPLIED_INSTANCE_TYPE, ORIGINALS_MAC
from resizer.preflight import apply_patch, limit_range_hold, node_hold, pod_totals
from resizer.restore import restore_patch

from .fake_cluster import FakeClock, FakeCluster, FakeConfig
from .test_reconciler_reconcile import run
from .test_resizer_support import SAMPLE_CONFIG, apply_resize_patch, container, guaranteed

RING = KeyRing({"k1": b"k" * 32})
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "rs-uid", "controller": True}
ON = SAMPLE_CONFIG + "sidecars: true\n"


def sidecar(name: str = "proxy", cpu: str = "500m", memory: str = "128Mi", **extra: Any) -> dict[str, Any]:
    return {**guaranteed(name, cpu, memory), "restartPolicy": "Always", **extra}


def pod_with(
    app_cpu: str = "1",
    proxy: dict[str, Any] | None = None,
    generation: int = 1,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "shop",
            "name": "web-7d9f-abcde",
            "generateName": "web-7d9f-",
            "uid": "pod-uid",
            "generation": generation,
            "annotations": dict(annotations or {}),
            "ownerReferences": [OWNER],
        },
        "spec": {
            "containers": [guaranteed("app", app_cpu, "1Gi")],
            "initContainers": [proxy or sidecar(), guaranteed("setup", "200m", "64Mi")],
        },
    }


def init_resources(pod: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in pod["spec"]["initContainers"] if c["name"] == name)["resources"]


def keys_of(name: str) -> set[str]:
    return {original_key(name, r, k) for r in ("cpu", "memory") for k in ("request", "limit")}  # type: ignore[arg-type]


def plan(pod: dict[str, Any], text: str = ON, node_type: str = "n4", **options: Any) -> Any:
    config = load_config(text)
    return plan_resize(pod, resolve_policy(config, pod), node_type, **options)


# ---------------------------------------------------------------- config


def test_sidecars_default_off_globally_on_and_per_block_with_fallback() -> None:
    assert load_config(SAMPLE_CONFIG).policies.default.sidecars is False
    config = load_config(
        SAMPLE_CONFIG + "sidecars: true\n"
        "podLabels:\n  mesh: { plain: { sidecars: false }, other: { bounds: { cpu: { max: '8' } } } }\n"
        "overrides:\n  - { name: mesh, match: { podLabel: { team: a } }, sidecars: true }\n"
    )
    assert config.policies.default.sidecars is True
    by_value = dict(config.policies.pod_labels)["mesh"]
    assert by_value["plain"].sidecars is False
    assert by_value["other"].sidecars is True  # left out: the global value
    assert config.policies.overrides[0][1].sidecars is True
    block_on = load_config(SAMPLE_CONFIG + "computeClasses:\n  perf: { sidecars: true }\n")
    assert block_on.policies.compute_classes["perf"].sidecars is True
    assert block_on.policies.default.sidecars is False


@pytest.mark.parametrize(
    "text, path",
    [
        (SAMPLE_CONFIG + "sidecars: 'yes'\n", "sidecars"),
        (SAMPLE_CONFIG + "sidecars: 1\n", "sidecars"),
        (SAMPLE_CONFIG + "computeClasses:\n  perf: { sidecars: on-please }\n", "computeClasses.perf.sidecars"),
    ],
)
def test_sidecars_must_be_a_boolean(text: str, path: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_config(text)
    assert "boolean" in dict(error.value.errors).get(path, ""), error.value.errors


# ---------------------------------------------------------------- originals


def test_originals_cover_sidecars_not_plain_init_containers() -> None:
    pod = pod_with()
    stamped = originals_from_spec_annotations(pod)
    assert keys_of("proxy") <= stamped.keys() and not keys_of("setup") & stamped.keys()
    assert stamped[original_key("proxy", "cpu", "request")] == "500m"
    assert set(read_originals(pod)) == {"app", "proxy"}


def test_the_webhook_memo_misses_when_a_sidecar_changes_and_stays_exact() -> None:
    review_mod._originals_cache.clear()
    pod = pod_with()
    first, _ = review_mod._originals_and_key(pod)
    grown = pod_with(proxy=sidecar(cpu="700m"))
    second, _ = review_mod._originals_and_key(grown)
    assert second == originals_from_spec_annotations(grown) and second != first
    plain = copy.deepcopy(pod)
    del plain["spec"]["initContainers"][0]["restartPolicy"]  # the same values, no longer a sidecar
    third, _ = review_mod._originals_and_key(plain)
    assert third == originals_from_spec_annotations(plain) and not keys_of("proxy") & third.keys()


# ---------------------------------------------------------------- plan


def test_opted_in_sidecar_is_sized_like_a_container_in_the_same_patch() -> None:
    pod = pod_with()
    result = plan(pod)
    assert result.outcome == "Resize"
    assert result.patch == {
        "spec": {
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "800m"}, "limits": {"cpu": "800m"}}}],
            "initContainers": [
                {"name": "proxy", "resources": {"requests": {"cpu": "400m"}, "limits": {"cpu": "400m"}}}
            ],
        }
    }
    assert "proxy (sidecar): cpu 500m -> 400m" in result.summary() and "setup" not in result.summary()
    resized = apply_resize_patch(pod, {"spec": {"containers": result.patch["spec"]["containers"]}})
    assert plan(resized).outcome == "Resize", "the sidecar alone is still to be sized"


def test_opted_out_sidecar_is_not_in_the_plan() -> None:
    result = plan(pod_with(), SAMPLE_CONFIG)
    assert {c.container for c in result.changes} == {"app"}
    assert "initContainers" not in result.patch["spec"]


def test_opted_out_sidecar_sized_before_is_planned_back_to_its_original() -> None:
    stamped = originals_from_spec_annotations(pod_with())
    pod = pod_with(app_cpu="800m", proxy=sidecar(cpu="400m"), annotations=stamped)
    result = plan(pod, SAMPLE_CONFIG)
    assert result.patch == {
        "spec": {
            "initContainers": [{"name": "proxy", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}}}]
        }
    }
    assert "held: sidecars=false" in result.summary()
    # Without originals (stamped before sidecars had them) the spec is the baseline: nothing to put back.
    unrecorded = {k: v for k, v in stamped.items() if k not in keys_of("proxy")}
    assert (
        plan(pod_with(app_cpu="800m", proxy=sidecar(cpu="400m"), annotations=unrecorded), SAMPLE_CONFIG).outcome
        == "AlreadyAligned"
    )


def test_sidecar_rules_are_the_containers_bounds_restart_policy_memory_limits_and_qos() -> None:
    slow = SAMPLE_CONFIG.replace("bounds:", "  slow: { cpuPerf: 0.5, memPerf: 0.5 }\nbounds:") + "sidecars: true\n"
    burst = {
        **container("proxy", {"cpu": "100m", "memory": "256Mi"}, {"cpu": "200m", "memory": "512Mi"}),
        "restartPolicy": "Always",
    }
    grown = plan(pod_with(proxy=burst), slow, "slow")
    proxy = {c.resource: c for c in grown.changes if c.container == "proxy"}
    assert (proxy["cpu"].desired_request, proxy["cpu"].desired_limit) == (200, 400)
    assert (proxy["memory"].desired_request, proxy["memory"].desired_limit) == (512 * 2**20, 1024 * 2**20)
    fast = SAMPLE_CONFIG.replace("bounds:", "  fast: { cpuPerf: 100.0, memPerf: 2.0 }\nbounds:") + "sidecars: true\n"
    shrunk = {c.resource: c for c in plan(pod_with(proxy=burst), fast, "fast").changes if c.container == "proxy"}
    assert shrunk["cpu"].desired_request == 50 and shrunk["cpu"].clamped == "min"  # the bounds
    assert shrunk["memory"].desired_request == 128 * 2**20
    assert shrunk["memory"].desired_limit == 512 * 2**20 and shrunk["memory"].held  # memoryLimitDecrease: Never
    restart = sidecar(resizePolicy=[{"resourceName": "cpu", "restartPolicy": "RestartContainer"}])
    skipped = {c.resource: c for c in plan(pod_with(proxy=restart)).changes if c.container == "proxy"}
    assert skipped["cpu"].skipped == "RestartContainerPolicy"
    assert {
        c.resource: c
        for c in plan(pod_with(proxy=restart), resize_restart_containers=True).changes
        if c.container == "proxy"
    }["cpu"].skipped is None
    # Originals that no longer describe the spec: the resized sidecar would change the QoS class.
    forged = pod_with(annotations={original_key("proxy", "cpu", "limit"): "900m"})
    forged["status"] = {"qosClass": "Guaranteed"}
    assert plan(forged).outcome == "QoSChange"


# ---------------------------------------------------------------- the baseline authority


def admission_stamped(pod: dict[str, Any], keys: dict[str, str]) -> dict[str, Any]:
    identity = PodIdentity.of({**pod, "metadata": {**pod["metadata"], "name": ""}}, scope="admission")
    stamped = copy.deepcopy(pod)
    stamped["metadata"]["annotations"] = {**keys, ORIGINALS_MAC: sign_originals(RING, keys, identity, "admission")}
    return stamped


def pod_stamped(pod: dict[str, Any], keys: dict[str, str]) -> dict[str, Any]:
    stamped = copy.deepcopy(pod)
    stamped["metadata"]["annotations"] = {**keys, ORIGINALS_MAC: sign_originals(RING, keys, PodIdentity.of(pod), "pod")}
    return stamped


def containers_only(pod: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in originals_from_spec_annotations(pod).items() if k not in keys_of("proxy")}


def merged(pod: dict[str, Any], stamp: dict[str, str | None]) -> dict[str, Any]:
    after = copy.deepcopy(pod)
    after["metadata"]["annotations"].update(stamp)
    return after


def test_admitted_before_sidecar_originals_is_trusted_at_generation_1_and_gets_them_with_a_pod_mac() -> None:
    pod = admission_stamped(pod_with(), containers_only(pod_with()))
    decision = baseline(pod, RING)
    assert decision.check.trust is Trust.TRUSTED and not decision.check.tampered, decision.check
    assert decision.stamp is not None and keys_of("proxy") <= decision.stamp.keys()
    after = merged(pod, decision.stamp)
    assert original_annotations(after) == originals_from_spec_annotations(pod_with())
    verdict = check_originals(after, RING)
    assert (verdict.trust, verdict.scope) == (Trust.TRUSTED, "pod")
    assert baseline(after, RING).stamp is None, "recorded once"


def test_admitted_before_sidecar_originals_keeps_full_equality_after_a_spec_change() -> None:
    pod = admission_stamped(pod_with(), containers_only(pod_with()))
    pod["metadata"]["generation"] = 2
    assert check_originals(pod, RING).trust is Trust.TRUSTED_IF_ALIGNED


def test_a_missing_container_original_is_still_tampering() -> None:
    keys = containers_only(pod_with())
    del keys[original_key("app", "cpu", "limit")]
    verdict = check_originals(admission_stamped(pod_with(), keys), RING)
    assert verdict.trust is Trust.RECAPTURE and verdict.tampered
    wrong = {**containers_only(pod_with()), original_key("app", "cpu", "request"): "2"}
    assert check_originals(admission_stamped(pod_with(), wrong), RING).tampered


def test_unsigned_originals_without_sidecar_keys_on_an_unchanged_pod_are_trusted() -> None:
    pod = pod_with(annotations=containers_only(pod_with()))
    decision = baseline(pod, KeyRing({}))
    assert decision.check.trust is Trust.TRUSTED and not decision.check.tampered
    assert decision.stamp == {k: v for k, v in originals_from_spec_annotations(pod).items() if k in keys_of("proxy")}


def test_under_a_pod_mac_a_sidecar_without_originals_has_its_spec_as_baseline() -> None:
    """Resized by an older version (app 800m, pod MAC over the app's originals): that version
    never sized the sidecar, so its spec is its baseline, recorded before any sidecar resize."""
    resized = pod_with(app_cpu="800m", generation=2)
    pod = pod_stamped(resized, containers_only(pod_with()))
    pod["metadata"]["annotations"][APPLIED_INSTANCE_TYPE] = "n4"
    decision = baseline(pod, RING)
    assert decision.check.trust is Trust.TRUSTED
    assert decision.stamp is not None
    assert {k: v for k, v in decision.stamp.items() if k != ORIGINALS_MAC} == {
        k: v for k, v in originals_from_spec_annotations(pod).items() if k in keys_of("proxy")
    }
    assert check_originals(merged(pod, decision.stamp), RING).scope == "pod"
    # The missing sidecar originals do not keep it from re-alignment; a missing app original does.
    assert has_originals(pod)
    no_app_key = copy.deepcopy(pod)
    del no_app_key["metadata"]["annotations"][original_key("app", "cpu", "request")]
    assert not has_originals(no_app_key)


def test_vouched_originals_are_not_completed_from_the_spec() -> None:
    pod = pod_with(app_cpu="800m", proxy=sidecar(cpu="400m"), generation=2, annotations=containers_only(pod_with()))
    vouched = original_annotations(pod)
    decision = baseline(pod, RING, vouched=vouched)
    assert decision.check.trust is Trust.TRUSTED and decision.stamp is None


# ---------------------------------------------------------------- restore, preflight


def test_restore_puts_sidecars_back_and_leaves_unrecorded_ones() -> None:
    stamped = originals_from_spec_annotations(pod_with())
    pod = pod_with(app_cpu="800m", proxy=sidecar(cpu="400m"), annotations=stamped)
    assert restore_patch(pod) == {
        "spec": {
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}],
            "initContainers": [
                {"name": "proxy", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}}}
            ],
        }
    }
    pod["metadata"]["annotations"] = containers_only(pod_with())
    assert "initContainers" not in restore_patch(pod)["spec"]


def test_a_limit_range_judges_resized_sidecars() -> None:
    limit_range = {"metadata": {"name": "lr"}, "spec": {"limits": [{"type": "Container", "min": {"cpu": "450m"}}]}}
    spec = pod_with()["spec"]
    spec["initContainers"] = spec["initContainers"][:1]
    assert limit_range_hold(spec, [limit_range]) is None
    spec["initContainers"][0]["resources"]["requests"]["cpu"] = "400m"
    hold = limit_range_hold(spec, [limit_range])
    assert hold is not None and "container proxy" in hold.detail


# ---------------------------------------------------------------- the reconciler's pure helpers


def running(pod: dict[str, Any], proxy_cpu: str) -> dict[str, Any]:
    """`pod` as the kubelet reports it: the app at its spec, the proxy at `proxy_cpu`."""
    status = copy.deepcopy(pod)
    app = status["spec"]["containers"][0]
    proxy = {"requests": {"cpu": proxy_cpu, "memory": "128Mi"}, "limits": {"cpu": proxy_cpu, "memory": "128Mi"}}
    status["status"] = {
        "phase": "Running",
        "observedGeneration": pod["metadata"]["generation"],
        "containerStatuses": [{"name": "app", "resources": app["resources"], "state": {"running": {}}}],
        "initContainerStatuses": [
            {"name": "proxy", "resources": proxy, "state": {"running": {}}},
            {"name": "setup", "state": {"terminated": {}}},
        ],
    }
    return slim_pod(status)


def test_a_resize_is_actuated_once_the_sidecar_reports_its_spec() -> None:
    pod = pod_with(proxy=sidecar(cpu="400m"), generation=2)
    assert observe(running(pod, "500m")).stage is Stage.REQUESTED
    assert observe(running(pod, "400m")).stage is Stage.ACTUATED
    assert revert_patch(running(pod, "500m")) == {
        "spec": {
            "initContainers": [{"name": "proxy", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}}}]
        }
    }
    assert [s["name"] for s in running(pod, "500m")["status"]["initContainerStatuses"]] == ["proxy"]


def test_the_applied_size_digest_counts_sidecars_with_originals_only() -> None:
    before = pod_with(annotations=containers_only(pod_with()))
    grown = pod_with(proxy=sidecar(cpu="400m"), annotations=containers_only(pod_with()))
    assert spec_size(before) == spec_size(grown), "a digest recorded before sidecars had originals still holds"
    recorded = originals_from_spec_annotations(pod_with())
    assert spec_size(pod_with(annotations=recorded)) != spec_size(
        pod_with(proxy=sidecar(cpu="400m"), annotations=recorded)
    )


def test_the_fenced_resize_patch_addresses_sidecars_by_position() -> None:
    pod = pod_with()
    pod["spec"]["initContainers"].insert(0, guaranteed("first", "100m", "64Mi"))
    ops = fenced_resize_patch(
        pod,
        {
            "spec": {
                "initContainers": [
                    {"name": "proxy", "resources": {"requests": {"cpu": "400m"}, "limits": {"cpu": "400m"}}}
                ]
            }
        },
        1,
    )
    assert {"op": "test", "path": "/spec/initContainers/1/name", "value": "proxy"} in ops
    assert {"op": "add", "path": "/spec/initContainers/1/resources/requests/cpu", "value": "400m"} in ops
    assert not any(op["path"].startswith("/spec/containers") for op in ops)


def test_plan_and_the_decision_log_show_sidecars() -> None:
    pod = pod_with()
    on = forecast_pod(pod, "node-1", "n4", load_config(ON), False)
    assert (on.current_cpu, on.desired_cpu, on.original_cpu) == (1500, 1200, 1500)
    assert "proxy (sidecar): cpu 500m -> 400m" in on.detail
    off = forecast_pod(pod, "node-1", "n4", load_config(SAMPLE_CONFIG), False)
    assert (off.current_cpu, off.desired_cpu) == (1500, 1300)
    record = decision_record(
        {**pod, "metadata": {**pod["metadata"]}, "spec": {**pod["spec"], "nodeName": "n"}}, on.plan, "Resized", False
    )
    assert [(c["container"], c.get("sidecar", False)) for c in record["changes"] if c["resource"] == "cpu"] == [
        ("app", False),
        ("proxy", True),
    ]


def test_preflight_counts_a_sidecar_resized_by_the_patch() -> None:
    pod = pod_with()
    node = {"metadata": {"name": "node-1"}, "status": {"allocatable": {"cpu": "2", "memory": "8Gi"}}}
    grow = {
        "spec": {
            "initContainers": [
                {"name": "proxy", "resources": {"requests": {"cpu": "1200m"}, "limits": {"cpu": "1200m"}}}
            ]
        }
    }
    resized = apply_patch(pod, grow)
    assert pod_totals(resized)[("requests", "cpu")] == 2200
    hold = node_hold(node, pod, resized, [])
    assert hold is not None and hold.constraint == "NodeHeadroom" and "2200m" in hold.detail
    assert (
        node_hold(
            node,
            pod,
            apply_patch(
                pod,
                {
                    "spec": {
                        "initContainers": [
                            {"name": "proxy", "resources": {"requests": {"cpu": "900m"}, "limits": {"cpu": "900m"}}}
                        ]
                    }
                },
            ),
            [],
        )
        is None
    )


# ---------------------------------------------------------------- reconcile: the write order


def test_a_pod_sized_before_sidecars_had_originals_records_them_before_its_sidecar_is_resized() -> None:
    """Resized by an older version (app 800m, pod MAC over the app's originals); opted in now:
    step 1 records the sidecar's originals (its spec) bound by a pod MAC, then one resize."""
    label, key = "example.com/family", "shop/web-7d9f-abcde"
    resized = pod_with(app_cpu="800m", generation=2)
    old = pod_stamped(resized, containers_only(pod_with()))
    old["metadata"]["annotations"].update(
        {APPLIED_INSTANCE_TYPE: "n4", "workload-resizer.io/applied-size": spec_size(old)}
    )
    old["spec"]["nodeName"] = "node-1"
    status = [
        {"name": c["name"], "state": {"running": {}}, "resources": copy.deepcopy(c["resources"])}
        for c in [*old["spec"]["containers"], old["spec"]["initContainers"][0]]
    ]
    old["status"] = {
        "phase": "Running",
        "qosClass": "Guaranteed",
        "observedGeneration": 2,
        "containerStatuses": status[:1],
        "initContainerStatuses": status[1:],
    }

    def reconciler(fake: FakeCluster, fault: Any = lambda step: None) -> PodResizeReconciler:
        return PodResizeReconciler(
            fake,
            fake,
            fake,
            FakeConfig(load_config(ON)),
            ControllerSettings(node_type_label=label),
            fault,
            FakeClock(),
            keyring=lambda: RING,
        )

    fake = FakeCluster()
    fake.add_node("node-1", {label: "n4"})
    fake.add_pod(old)

    class Crash(Exception):
        """The process dies right after step 1."""

    def crash(step: str) -> None:
        if step == Step.ORIGINALS:
            raise Crash(step)

    with pytest.raises(Crash):
        run(reconciler(fake, crash).reconcile(key))
    assert fake.ops() == ["annotate"]
    stamp = fake.writes[0].body
    assert {k for k in stamp if k != ORIGINALS_MAC} == keys_of("proxy") and stamp[ORIGINALS_MAC].startswith("v1.p.")
    assert fake.writes[0].resource_version is not None
    # A restarted reconciler resizes the sidecar from the originals step 1 recorded.
    rec = reconciler(fake)
    run(rec.reconcile(key))
    assert fake.ops() == ["annotate", "resize"]
    assert fake.writes[1].body == {
        "spec": {
            "initContainers": [{"name": "proxy", "resources": {"requests": {"cpu": "400m"}, "limits": {"cpu": "400m"}}}]
        }
    }
    fake.actuate(key)
    run(rec.reconcile(key))
    assert fake.ops() == ["annotate", "resize", "annotate"]
    final = fake.pod_now(key)
    assert check_originals(final, RING).scope == "pod"
    assert final["metadata"]["annotations"]["workload-resizer.io/applied-size"] == spec_size(final)
    assert [e.type for e in fake.events] == ["Normal"]
