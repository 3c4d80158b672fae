"""Sizing at admission, pure: the pinned node type, the size, and the sized-scope authority rule."""

from __future__ import annotations

import copy
from typing import Any

import pytest

import resizer
from devkit.jsonpatch import apply_patch
from resizer import (
    KeyRing,
    Trust,
    admission_hold,
    admission_sizing,
    admission_stamp,
    baseline,
    load_config,
    originals_from_spec_annotations,
    pinned_node_type,
    plan_bound_pod,
    plan_resize,
    resolve_policy,
    sized_stamp,
)
from resizer.podstate import ORIGINALS_MAC, SIZED_AT_ADMISSION
from resizer.preflight import apply_patch as resize_patched

LABEL = "cloud.google.com/machine-family"
CONFIG_TEXT = """\
baselineNodeType: n2d
nodeTypes:
  n2d: { cpuPerf: 1.0, memPerf: 1.0 }
  n4:  { cpuPerf: 1.25, memPerf: 1.0 }
  n4x: { cpuPerf: 1.25, memPerf: 1.0 }
  c3:  { cpuPerf: 1.30, memPerf: 1.0 }
  odd: { cpuPerf: 1.25, memPerf: 2.0 }
bounds:
  cpu:    { min: "50m",  max: "16" }
  memory: { min: "64Mi", max: "32Gi" }
podLabels:
  tier:
    special: { nodeTypes: { n4x: { cpuPerf: 2.0, memPerf: 1.0 } } }
"""
CONFIG = load_config(CONFIG_TEXT)
NODES: dict[str, str | None] = {
    "node-n4": "n4",
    "node-n4x": "n4x",
    "node-c3": "c3",
    "node-n2d": "n2d",
    "node-bare": None,
    "node-unknown-type": "m9",
}
KEYS = KeyRing({"k1": b"k" * 32})


def pod(
    spec: dict[str, Any] | None = None, labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    resources = {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}
    meta: dict[str, Any] = {
        "namespace": "shop",
        "generateName": "web-",
        "labels": labels or {},
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "rs-uid", "controller": True}
        ],
    }
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"containers": [{"name": "app", "resources": resources}], **(spec or {})}}


def affinity(*terms: list[dict[str, Any]], fields: bool = False) -> dict[str, Any]:
    key = "matchFields" if fields else "matchExpressions"
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{key: term} for term in terms]}
            }
        }
    }


def on_label(*values: str, operator: str = "In") -> list[dict[str, Any]]:
    return [{"key": LABEL, "operator": operator, "values": list(values)}]


def on_nodes(*names: str) -> list[dict[str, Any]]:
    return [{"key": "metadata.name", "operator": "In", "values": list(names)}]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"nodeName": "node-n4"}, "n4"),
        ({"nodeSelector": {LABEL: "n4"}}, "n4"),
        (affinity(on_label("n4")), "n4"),
        (affinity(on_label("n4", "n4x")), "n4"),  # equal performance: either sizes alike
        (affinity(on_label("n4"), on_label("n4x")), "n4"),  # terms ORed
        (affinity(on_nodes("node-c3"), fields=True), "c3"),  # a DaemonSet pod
        (affinity(on_nodes("node-n4", "node-n4x"), fields=True), "n4"),
        ({"nodeSelector": {LABEL: "n4"}, **affinity(on_label("n4", "c3"))}, "n4"),  # both hold: intersected
    ],
)
def test_pinned_pods_have_their_node_type(spec: dict[str, Any], expected: str) -> None:
    assert pinned_node_type(pod(spec), NODES, CONFIG, LABEL) == expected


@pytest.mark.parametrize(
    "spec",
    [
        {},  # no pin
        {"nodeSelector": {"other": "x"}},
        affinity(on_label("n4", "c3")),  # different cpu performance
        affinity(on_label("n4", "odd")),  # same cpu, different memory performance
        affinity(on_label("n4"), on_label("c3")),
        affinity(on_label("n4"), [{"key": "zone", "operator": "In", "values": ["a"]}]),  # a term without a pin
        affinity(on_label("n4", operator="NotIn")),
        affinity(on_nodes("node-missing"), fields=True),  # a node not (yet) known
        affinity(on_nodes("node-bare"), fields=True),  # a node without the label
        {"nodeName": "node-unknown-type"},  # a type not in the config
        {"nodeName": "node-missing", "nodeSelector": {LABEL: "n4"}},
        {"nodeSelector": {LABEL: "n4"}, **affinity(on_label("c3"))},  # contradictory: never schedulable
    ],
)
def test_pods_whose_type_is_not_determined_are_not_pinned(spec: dict[str, Any]) -> None:
    assert pinned_node_type(pod(spec), NODES, CONFIG, LABEL) is None


def test_equal_performance_is_judged_in_the_rule_block_that_applies() -> None:
    spec = affinity(on_label("n4", "n4x"))
    assert pinned_node_type(pod(spec), NODES, CONFIG, LABEL) == "n4"
    assert pinned_node_type(pod(spec, labels={"tier": "special"}), NODES, CONFIG, LABEL) is None


def test_sizing_is_the_reconcilers_plan_from_the_spec_as_sent() -> None:
    # Forged originals on the pod as sent are not the baseline: the spec is.
    sent = pod({"nodeSelector": {LABEL: "n4"}}, annotations={"workload-resizer.io/original-cpu.app": "64"})
    sizing = admission_sizing(sent, CONFIG, "n4")
    assert sizing is not None
    sized = apply_patch(copy.deepcopy(sent), list(sizing.ops))
    resources = sized["spec"]["containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "800m", "memory": "256Mi"}, "limits": {"cpu": "800m", "memory": "256Mi"}}
    assert resizer.pod_qos_class(sized["spec"]) == resizer.pod_qos_class(sent["spec"]) == "Guaranteed"
    assert dict(sizing.sized) == originals_from_spec_annotations(sized)
    assert sizing.plan.outcome == "Resize"


def test_opted_in_sidecars_are_sized_at_admission_under_init_containers() -> None:
    config = load_config(CONFIG_TEXT + "sidecars: true\n")
    sidecar = {
        "name": "proxy",
        "restartPolicy": "Always",
        "resources": {"requests": {"cpu": "500m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "64Mi"}},
    }
    plain = {"name": "setup", "resources": {"requests": {"cpu": "1"}}}
    sent = pod({"nodeSelector": {LABEL: "n4"}, "initContainers": [plain, sidecar]})
    sizing = admission_sizing(sent, config, "n4")
    assert sizing is not None
    sized = apply_patch(copy.deepcopy(sent), list(sizing.ops))
    assert sized["spec"]["initContainers"][1]["resources"]["requests"]["cpu"] == "400m"
    assert sized["spec"]["initContainers"][0] == plain  # a plain init container: never
    assert sized["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "800m"
    assert dict(sizing.sized) == originals_from_spec_annotations(sized)
    unsized = admission_sizing(sent, CONFIG, "n4")  # opted out: containers only
    assert unsized is not None
    assert apply_patch(copy.deepcopy(sent), list(unsized.ops))["spec"]["initContainers"] == [plain, sidecar]


def test_nothing_to_size_on_the_baseline_type_or_without_a_sizable_request() -> None:
    assert admission_sizing(pod({"nodeName": "node-n2d"}), CONFIG, "n2d") is None
    bare = pod()
    bare["spec"]["containers"][0]["resources"] = {}
    assert admission_sizing(bare, CONFIG, "n4") is None


def created(sent: dict[str, Any], node_type: str = "n4", name: str = "web-abcde") -> dict[str, Any]:
    """The pod as the apiserver stores it after the webhook sized it (generation 1)."""
    sizing = admission_sizing(sent, CONFIG, node_type)
    assert sizing is not None
    originals = originals_from_spec_annotations(sent)
    stamp = sized_stamp(sent, "shop", KEYS, originals, node_type, sizing.sized)
    stored = apply_patch(copy.deepcopy(sent), list(sizing.ops))
    stored["metadata"].update(name=name, uid="pod-uid", generation=1, annotations=stamp)
    return stored


def test_a_pod_sized_at_admission_is_trusted_and_aligned_for_its_type() -> None:
    stored = created(pod({"nodeSelector": {LABEL: "n4"}}))
    decision = baseline(stored, KEYS)
    assert decision.check.trust is Trust.TRUSTED and decision.check.scope == "sized"
    # Baseline: the originals (1 cpu), not the spec (800m); bound to this pod before anything else.
    assert decision.stamp is not None and decision.stamp[ORIGINALS_MAC].startswith("v1.p.")
    policy = resolve_policy(CONFIG, stored)
    assert plan_resize(decision.pod, policy, "n4").outcome == "AlreadyAligned"
    on_c3 = plan_resize(decision.pod, policy, "c3")
    assert on_c3.patch == {
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "769m"}, "limits": {"cpu": "769m"}}}]}
    }  # 1 x 1/1.3 from the originals


def test_existing_mac_formats_are_unchanged() -> None:
    """Admission and pod MACs signed before sized ones existed still verify (their bytes are fixed)."""
    sent = pod()
    stamp = admission_stamp(sent, "shop", KEYS)
    assert stamp[ORIGINALS_MAC] == "v1.a.k1." + resizer.integrity._mac(
        KEYS.keys["k1"],
        originals_from_spec_annotations(sent),
        resizer.PodIdentity.of(sent, "shop", "admission"),
        "admission",
    )
    message = resizer.integrity._message({"k": "v"}, resizer.PodIdentity("n", "p", "", "u", "", "", "", ""), "pod")
    assert (
        message == b'["v1","pod",{"generate_name":"","name":"p","namespace":"n","owner_api_version":"",'
        b'"owner_kind":"","owner_name":"","owner_uid":"","uid":"u"},[["k","v"]]]'
    )


def test_sized_macs_already_on_pods_keep_verifying() -> None:
    """Sized MACs signed by an earlier version (cover: every sized value) keep their bytes: the
    cover is the sized values restricted to the originals' keys, which on a pod the webhook sized
    are the same keys."""
    originals = {
        "workload-resizer.io/original-cpu.app": "1",
        "workload-resizer.io/original-cpu-limit.app": "1",
        "workload-resizer.io/original-memory.app": "256Mi",
    }
    sized = {
        **originals,
        "workload-resizer.io/original-cpu.app": "800m",
        "workload-resizer.io/original-cpu-limit.app": "800m",
    }
    stamp = sized_stamp(pod(), "shop", KEYS, originals, "n4", sized)
    assert stamp[ORIGINALS_MAC] == "v1.s.k1.6BBnP07ri8vogOlF7M3CmBJao5WPffUh6uYW64mCY-c"


def injected(stored: dict[str, Any]) -> dict[str, Any]:
    """``stored`` with a container a later webhook added after the webhook's last call."""
    later = copy.deepcopy(stored)
    later["spec"]["containers"].append(
        {
            "name": "proxy",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "100m", "memory": "64Mi"}},
        }
    )
    return later


def test_a_container_injected_after_the_webhooks_last_call_gets_its_spec_as_originals() -> None:
    """The sized MAC covers the spec values of the containers it has originals for: a container
    another webhook added later does not void it, and the binding write records its originals
    from the spec (generation 1: as created), so no container is left without a baseline."""
    later = injected(created(pod({"nodeSelector": {LABEL: "n4"}})))
    decision = baseline(later, KEYS)
    assert decision.check.trust is Trust.TRUSTED and decision.check.scope == "sized"
    assert decision.stamp is not None
    recorded = {k: v for k, v in decision.stamp.items() if k != ORIGINALS_MAC}
    assert recorded == {
        "workload-resizer.io/original-cpu.proxy": "100m",
        "workload-resizer.io/original-cpu-limit.proxy": "100m",
        "workload-resizer.io/original-memory.proxy": "64Mi",
        "workload-resizer.io/original-memory-limit.proxy": "64Mi",
    }
    bound = copy.deepcopy(later)
    bound["metadata"]["annotations"].update(decision.stamp)
    bound["metadata"]["generation"] = 2
    after = baseline(bound, KEYS)
    assert after.check.trust is Trust.TRUSTED and after.check.scope == "pod" and after.stamp is None
    assert plan_resize(after.pod, resolve_policy(CONFIG, bound), "n4").outcome == "Resize", "the proxy: 80m"


def test_an_injected_container_does_not_make_a_changed_sized_pod_trusted() -> None:
    later = injected(created(pod({"nodeSelector": {LABEL: "n4"}})))
    later["metadata"]["generation"] = 2
    assert baseline(later, KEYS).check.trust is not Trust.TRUSTED


def test_a_changed_spec_voids_the_sized_mac() -> None:
    stored = created(pod({"nodeSelector": {LABEL: "n4"}}))
    edited = copy.deepcopy(stored)
    edited["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "700m"
    edited["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "700m"
    edited["metadata"]["generation"] = 2
    assert baseline(edited, KEYS).check.trust is Trust.REFUSE


@pytest.mark.parametrize("tamper", ["originals", "record", "spec", "other-pod"])
def test_tampered_records_are_not_trusted(tamper: str) -> None:
    stored = created(pod({"nodeSelector": {LABEL: "n4"}}))
    annotations = stored["metadata"]["annotations"]
    if tamper == "originals":  # a tenant raises its own baseline after creation (no generation bump)
        annotations["workload-resizer.io/original-cpu.app"] = "8"
        annotations["workload-resizer.io/original-cpu-limit.app"] = "8"
    elif tamper == "record":
        annotations[SIZED_AT_ADMISSION] = "c3"
    elif tamper == "spec":  # the sized values do not match the spec (e.g. a spec written at CREATE)
        stored["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "900m"
    else:  # copied onto a pod of another owner
        stored["metadata"]["ownerReferences"][0]["uid"] = "other-rs"
    decision = baseline(stored, KEYS)
    assert decision.check.trust is Trust.RECAPTURE and decision.check.tampered
    assert (
        decision.stamp is not None
        and dict(originals_from_spec_annotations(stored)).items()
        <= {k: v for k, v in decision.stamp.items() if v is not None}.items()
    )


def test_a_minted_record_gives_exactly_an_honest_authors_pod() -> None:
    """A made-up review mints a sized MAC for any originals; put on a never-changed pod with the
    sized spec, it is trusted: the same pod, same baseline as an author who wrote those originals
    with that pin, whatever node the pod really runs on."""
    honest_spec = pod({"nodeSelector": {LABEL: "n4"}})
    honest_spec["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "4", "memory": "1Gi"},
        "limits": {"cpu": "4", "memory": "1Gi"},
    }
    minted = created(honest_spec)  # what the webhook answers to the made-up review
    honest = created(copy.deepcopy(honest_spec))
    # The tenant's real pod: not pinned, so the webhook only stamped it; it then copies the minted
    # annotations and its spec matches the minted sized values (it could have created that pod).
    real = copy.deepcopy(minted)
    real["spec"].pop("nodeSelector")
    for stored in (real, honest):
        decision = baseline(stored, KEYS)
        assert decision.check.trust is Trust.TRUSTED
    for node_type in ("n2d", "n4", "c3"):
        plans = [plan_resize(baseline(s, KEYS).pod, resolve_policy(CONFIG, s), node_type) for s in (real, honest)]
        assert plans[0].changes == plans[1].changes


def test_without_keys_nothing_is_sized() -> None:
    sent = pod({"nodeSelector": {LABEL: "n4"}})
    sizing = admission_sizing(sent, CONFIG, "n4")
    assert sizing is not None
    assert (
        sized_stamp(sent, "shop", resizer.EMPTY_KEYRING, originals_from_spec_annotations(sent), "n4", sizing.sized)
        == {}
    )


def test_restore_puts_a_pod_sized_at_admission_back_to_its_originals() -> None:
    from resizer.restore import restore_decision

    stored = created(pod({"nodeSelector": {LABEL: "n4"}}))
    stored["status"] = {"phase": "Running"}
    decision = restore_decision(stored, KEYS)
    assert decision.held is None
    assert decision.patch == {
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}
    }


def test_plan_shows_which_pods_were_sized_at_admission() -> None:
    from resizer.forecast import forecast_fleet
    from resizer.scope import namespace_scope

    stored = created(pod({"nodeSelector": {LABEL: "n4"}}))
    stored["spec"]["nodeName"] = "node-n4"
    stored["status"] = {"phase": "Running"}
    other = created(pod({"nodeSelector": {LABEL: "n4"}}), name="web-other")
    other["metadata"]["annotations"] = {}
    other["spec"]["nodeName"] = "node-n4"
    other["status"] = {"phase": "Running"}
    forecast = forecast_fleet([stored, other], NODES, CONFIG, namespace_scope(None, [], ""), keyring=KEYS)
    by_name = {p.name: p for g in forecast.workloads for p in g.pods}
    assert by_name["web-abcde"].sized_at_admission == "n4" and by_name["web-abcde"].outcome == "AlreadyAligned"
    assert by_name["web-other"].sized_at_admission == ""


def test_the_plan_table_names_the_pods_sized_at_admission() -> None:
    from commands.plan import forecast_json, forecast_table
    from resizer.forecast import forecast_fleet
    from resizer.scope import namespace_scope

    stored = created(pod({"nodeSelector": {LABEL: "n4"}}))
    stored["spec"]["nodeName"] = "node-n4"
    stored["status"] = {"phase": "Running"}
    forecast = forecast_fleet([stored], NODES, CONFIG, namespace_scope(None, [], ""), keyring=KEYS)
    info = {"config": "test", "pods": 1, "nodes": 1, "listSeconds": 0, "planSeconds": 0}
    assert "Sized at admission (created at their size by the webhook): 1 pods: shop/web-abcde (n4)." in forecast_table(
        forecast, info
    )
    (entry,) = forecast_json(forecast, info)["workloads"][0]["podPlans"]
    assert entry["sizedAtAdmission"] == "n4"


# Pod-level resources (spec.resources): sized at both levels at CREATE.
POD_LEVEL = {"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
BURSTABLE = {"requests": {"cpu": "400m", "memory": "256Mi"}, "limits": {"cpu": "800m", "memory": "512Mi"}}


def pod_level(
    level: dict[str, Any] | None = None, containers: dict[str, Any] | None = None, spec: dict[str, Any] | None = None
) -> dict[str, Any]:
    sent = pod({"nodeSelector": {LABEL: "n4"}, "resources": copy.deepcopy(level or POD_LEVEL), **(spec or {})})
    sent["spec"]["containers"][0]["resources"] = copy.deepcopy(containers or BURSTABLE)
    return sent


def test_pod_level_resources_are_sized_at_admission_at_both_levels() -> None:
    sent = pod_level()
    sizing = admission_sizing(sent, CONFIG, "n4")
    assert sizing is not None
    sized = apply_patch(copy.deepcopy(sent), list(sizing.ops))
    # 1 / 1.25 at both levels; memory (memPerf 1.0) unchanged.
    assert sized["spec"]["resources"] == {
        "requests": {"cpu": "800m", "memory": "512Mi"},
        "limits": {"cpu": "1600m", "memory": "1Gi"},
    }
    assert sized["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "320m", "memory": "256Mi"},
        "limits": {"cpu": "640m", "memory": "512Mi"},
    }
    assert resizer.pod_qos_class(sized["spec"]) == resizer.pod_qos_class(sent["spec"]) == "Burstable"
    assert dict(sizing.sized) == originals_from_spec_annotations(sized)
    assert sizing.sized[resizer.pod_original_key("cpu", "request")] == "800m"
    # What the webhook sizes is the reconciler's plan with pod level on: the same values.
    planned = plan_resize(sent, resolve_policy(CONFIG, sent), "n4", pod_level=True)
    assert sized["spec"] == resize_patched(sent, planned.patch)


def test_pod_level_values_are_raised_to_what_the_apiserver_validates() -> None:
    """Two containers clamped at the 50m floor sum to 100m: the pod-level request (120m x 0.8 =
    96m) is raised to it, as the apiserver requires pod level >= the containers' aggregate."""
    sent = pod_level({"requests": {"cpu": "120m"}}, {"requests": {"cpu": "60m"}})
    sent["spec"]["containers"].append({"name": "side", "resources": {"requests": {"cpu": "60m"}}})
    sizing = admission_sizing(sent, CONFIG, "n4")
    assert sizing is not None
    sized = apply_patch(copy.deepcopy(sent), list(sizing.ops))
    assert [c["resources"]["requests"]["cpu"] for c in sized["spec"]["containers"]] == ["50m", "50m"]
    assert sized["spec"]["resources"] == {"requests": {"cpu": "100m"}}


def test_a_pod_with_pod_level_resources_sized_at_admission_is_aligned_for_the_reconciler() -> None:
    stored = created(pod_level())
    decision = baseline(stored, KEYS)
    assert decision.check.trust is Trust.TRUSTED and decision.check.scope == "sized"
    assert decision.pod["metadata"]["annotations"][resizer.pod_original_key("cpu", "limit")] == "2"
    policy = resolve_policy(CONFIG, stored)
    assert plan_resize(decision.pod, policy, "n4", pod_level=True).outcome == "AlreadyAligned"
    # A node that cannot resize pod level in place: created at its size, nothing to resize, still aligned.
    assert plan_bound_pod(decision.pod, policy, "n4", False, False, True).outcome == "AlreadyAligned"
    assert plan_bound_pod(decision.pod, policy, "n4", False, False, False).outcome == "PodLevelResources"
    # A config edit re-aligns both levels from the originals (1 CPU / 2.0), not from 800m.
    faster = load_config(CONFIG_TEXT.replace("n4:  { cpuPerf: 1.25", "n4:  { cpuPerf: 2.0"))
    edited = resolve_policy(faster, stored)
    plan = plan_bound_pod(decision.pod, edited, "n4", False, True, True)
    assert plan.patch == {
        "spec": {
            "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}},
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "200m"}, "limits": {"cpu": "400m"}}}],
        }
    }
    # ... where the node can resize pod level; elsewhere the change is left alone.
    assert plan_bound_pod(decision.pod, edited, "n4", False, False, True).outcome == "PodLevelResources"


def test_a_changed_pod_level_value_voids_the_sized_record() -> None:
    stored = created(pod_level())
    stored["spec"]["resources"]["requests"]["cpu"] = "900m"
    decision = baseline(stored, KEYS)
    assert decision.check.trust is Trust.RECAPTURE and decision.check.tampered


def test_admission_hold_judges_the_pod_level_values() -> None:
    config = load_config(CONFIG_TEXT.replace("bounds:", "  slow: { cpuPerf: 0.5, memPerf: 1.0 }\nbounds:"))
    # Only the pod level has a cpu request: on a slower type it would grow.
    sent = pod_level({"requests": {"cpu": "1"}}, {"requests": {"memory": "256Mi"}})
    growing = admission_sizing(sent, config, "slow")
    assert growing is not None
    assert admission_hold(sent, growing, ()) == "the size grows the pod level cpu (a ResourceQuota is judged at CREATE)"
    # A Pod LimitRange is judged on the pod-level values (what the apiserver counts): 800m < 900m.
    shrinking = admission_sizing(pod_level(), CONFIG, "n4")
    assert shrinking is not None
    floor = {"metadata": {"name": "floor"}, "spec": {"limits": [{"type": "Pod", "min": {"cpu": "900m"}}]}}
    held = admission_hold(pod_level(), shrinking, [floor])
    assert held is not None and "LimitRange floor" in held and "800m" in held, held
    assert admission_hold(pod_level(), shrinking, ()) is None


def test_plan_shows_a_pod_sized_at_both_levels_aligned_on_any_node() -> None:
    from resizer.forecast import forecast_fleet
    from resizer.scope import namespace_scope

    stored = created(pod_level())
    stored["spec"]["nodeName"] = "node-n4"
    stored["status"] = {"phase": "Running"}
    for pod_level_nodes in (frozenset(), frozenset({"node-n4"})):
        forecast = forecast_fleet(
            [stored], NODES, CONFIG, namespace_scope(None, [], ""), keyring=KEYS, pod_level_nodes=pod_level_nodes
        )
        (entry,) = [p for g in forecast.workloads for p in g.pods]
        assert entry.outcome == "AlreadyAligned" and entry.sized_at_admission == "n4"


def test_values_patch_sets_what_differs_by_quantity_and_removes_what_has_no_value() -> None:
    from resizer import values_patch

    sent = {
        "spec": {
            "containers": [
                {"name": "app", "resources": {"requests": {"cpu": "1000m", "memory": "256Mi"}, "limits": {"cpu": "1"}}},
                {"name": "bare"},
            ],
            "initContainers": [
                {"name": "init", "resources": {"requests": {"cpu": "1"}}},
                {"name": "side", "restartPolicy": "Always", "resources": {}},
            ],
        }
    }
    key = resizer.original_key
    values = {
        key("app", "cpu", "request"): "1",
        key("app", "memory", "request"): "256Mi",
        key("bare", "cpu", "request"): "100m",
        key("side", "memory", "limit"): "64Mi",
        resizer.pod_original_key("cpu", "request"): "2",
    }
    ops = values_patch(sent, values)
    assert ops == [
        {"op": "remove", "path": "/spec/containers/0/resources/limits/cpu"},
        {"op": "add", "path": "/spec/containers/1/resources", "value": {"requests": {"cpu": "100m"}}},
        {"op": "add", "path": "/spec/initContainers/1/resources/limits", "value": {"memory": "64Mi"}},
        {"op": "add", "path": "/spec/resources", "value": {"requests": {"cpu": "2"}}},
    ], "1000m is 1; a plain init container is not ours"
    assert values_patch(apply_patch(sent, ops), values) == []


def test_as_authored_puts_the_recorded_values_back_and_keeps_the_others() -> None:
    from resizer import as_authored

    stored = injected(created(pod({"nodeSelector": {LABEL: "n4"}})))
    originals = resizer.original_annotations(stored)
    authored = as_authored(stored, originals)
    assert authored["spec"]["containers"][0]["resources"] == pod()["spec"]["containers"][0]["resources"]
    assert authored["spec"]["containers"][1] == stored["spec"]["containers"][1], "no originals: as sent"
    assert authored["metadata"]["annotations"] == {} and stored["metadata"]["annotations"], "input untouched"
    assert stored["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "800m"
