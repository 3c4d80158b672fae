"""resizer.preflight: LimitRange, ResourceQuota and node room judged before a resize is sent."""

from __future__ import annotations

from typing import Any

import pytest

from resizer.preflight import (
    Hold,
    apply_patch,
    fits_allocatable,
    limit_range_hold,
    node_hold,
    pod_totals,
    quota_hold,
)


def container(
    name: str, cpu: str, memory: str = "128Mi", cpu_limit: str | None = None, restart: str | None = None
) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu, "memory": memory}}
    if cpu_limit is not None:
        resources["limits"] = {"cpu": cpu_limit}
    out: dict[str, Any] = {"name": name, "resources": resources}
    if restart:
        out["restartPolicy"] = restart
    return out


def pod(
    *containers: dict[str, Any], inits: tuple[dict[str, Any], ...] = (), status_cpu: tuple[str, ...] = ()
) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": list(containers), "initContainers": list(inits)},
        "status": {
            "containerStatuses": [
                {"name": f"c{i}", "resources": {"requests": {"cpu": c}}} for i, c in enumerate(status_cpu)
            ]
        },
    }


def resize(name: str, cpu: str, cpu_limit: str | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu}}
    if cpu_limit is not None:
        resources["limits"] = {"cpu": cpu_limit}
    return {"spec": {"containers": [{"name": name, "resources": resources}]}}


def limit_range(name: str, kind: str = "Container", **item: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"limits": [{"type": kind, **item}]}}


def quota(
    name: str,
    hard: dict[str, str],
    used: dict[str, str],
    scopes: list[str] | None = None,
    selector: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"hard": hard}
    if scopes:
        spec["scopes"] = scopes
    if selector is not None:
        spec["scopeSelector"] = {"matchExpressions": selector}
    return {"metadata": {"name": name}, "spec": spec, "status": {"hard": hard, "used": used}}


# ---------------------------------------------------------------- totals and patch


def test_pod_totals_count_sidecars_and_the_largest_init() -> None:
    spec = pod(container("app", "500m"), inits=(container("side", "100m", restart="Always"), container("setup", "2")))[
        "spec"
    ]
    assert pod_totals(spec)[("requests", "cpu")] == 2100  # setup runs next to the sidecar started before it
    spec = pod(container("app", "3"), inits=(container("side", "100m", restart="Always"),))["spec"]
    assert pod_totals(spec)[("requests", "cpu")] == 3100


def test_pod_level_resources_replace_the_containers() -> None:
    spec = {**pod(container("app", "500m"))["spec"], "resources": {"requests": {"cpu": "4"}}}
    assert pod_totals(spec)[("requests", "cpu")] == 4000
    assert pod_totals(spec)[("requests", "memory")] == 128 * 2**20


def test_apply_patch_changes_only_the_named_container() -> None:
    p = pod(container("app", "500m"), container("log", "100m"))
    spec = apply_patch(p, resize("app", "2", "3"))
    assert spec["containers"][0]["resources"] == {"requests": {"cpu": "2", "memory": "128Mi"}, "limits": {"cpu": "3"}}
    assert spec["containers"][1] == p["spec"]["containers"][1]
    assert p["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "500m"  # not mutated


# ---------------------------------------------------------------- LimitRange


@pytest.mark.parametrize(
    "item, cpu, cpu_limit, fragment",
    [
        ({"max": {"cpu": "1"}}, "2", "2", "cpu limit 2 is above the maximum 1"),
        ({"max": {"cpu": "1"}}, "1500m", None, "cpu request 1500m is above the maximum 1"),
        ({"min": {"cpu": "200m"}}, "100m", None, "cpu request 100m is below the minimum 200m"),
        ({"maxLimitRequestRatio": {"cpu": "2"}}, "500m", "1500m", "ratio 3 is above maxLimitRequestRatio 2"),
    ],
)
def test_limit_range_violations_name_the_object_and_the_rule(
    item: dict[str, Any], cpu: str, cpu_limit: str | None, fragment: str
) -> None:
    p = pod(container("app", "500m"))
    hold = limit_range_hold(apply_patch(p, resize("app", cpu, cpu_limit)), [limit_range("limits", **item)])
    assert hold is not None and hold.constraint == "LimitRange" and hold.name == "limits"
    assert fragment in hold.detail and "container app" in hold.detail
    assert "LimitRange limits" in hold.message()


def test_within_limit_range_is_not_held() -> None:
    p = pod(container("app", "500m"))
    ranges = [limit_range("a", max={"cpu": "2"}, min={"cpu": "100m"}, maxLimitRequestRatio={"cpu": "4"})]
    assert limit_range_hold(apply_patch(p, resize("app", "2", "2")), ranges) is None


def test_pod_type_limit_range_sums_the_containers() -> None:
    p = pod(container("app", "500m"), container("log", "600m"))
    hold = limit_range_hold(apply_patch(p, resize("app", "600m")), [limit_range("pods", "Pod", max={"cpu": "1"})])
    assert hold is not None and "pod: cpu request 1200m" in hold.detail


def test_unreadable_limit_range_leaves_the_judgement_to_the_apiserver() -> None:
    p = pod(container("app", "500m"))
    assert limit_range_hold(apply_patch(p, resize("app", "2")), [limit_range("x", max={"cpu": "lots"})]) is None


# ---------------------------------------------------------------- ResourceQuota


def test_quota_charges_the_increase_only() -> None:
    p = pod(container("app", "500m"))
    nearly_full = quota("q", {"requests.cpu": "2"}, {"requests.cpu": "1800m"})
    hold = quota_hold(p, apply_patch(p, resize("app", "800m")), [nearly_full])
    assert hold == Hold("ResourceQuota", "q", "requests.cpu: used 1800m + 300m would exceed hard 2", "requests.cpu")
    assert hold.fingerprint == "ResourceQuota/q/requests.cpu"
    assert quota_hold(p, apply_patch(p, resize("app", "700m")), [nearly_full]) is None  # exactly fills it
    assert quota_hold(p, apply_patch(p, resize("app", "100m")), [quota("q", {"cpu": "1"}, {"cpu": "5"})]) is None


def test_quota_limits_and_plain_names() -> None:
    p = pod(container("app", "500m", cpu_limit="1"))
    hold = quota_hold(
        p, apply_patch(p, resize("app", "500m", "2")), [quota("l", {"limits.cpu": "1500m"}, {"limits.cpu": "1"})]
    )
    assert hold is not None and hold.detail.startswith("limits.cpu")
    hold = quota_hold(p, apply_patch(p, resize("app", "2", "2")), [quota("c", {"cpu": "2"}, {"cpu": "1"})])
    assert hold is not None and hold.name == "c"


def test_quota_scopes() -> None:
    p = pod(container("app", "500m"))
    grown = apply_patch(p, resize("app", "4"))
    full = {"requests.cpu": "1"}
    assert quota_hold(p, grown, [quota("be", full, full, ["BestEffort"])]) is None
    assert quota_hold(p, grown, [quota("nbe", full, full, ["NotBestEffort"])]) is not None
    assert quota_hold(p, grown, [quota("t", full, full, ["Terminating"])]) is None
    assert quota_hold(p, grown, [quota("nt", full, full, ["NotTerminating"])]) is not None
    p["spec"]["activeDeadlineSeconds"] = 0  # a deadline, even 0, makes a pod Terminating
    assert quota_hold(p, grown, [quota("t", full, full, ["Terminating"])]) is not None
    assert quota_hold(p, grown, [quota("nt", full, full, ["NotTerminating"])]) is None


def priority_class(operator: str, *values: str) -> list[dict[str, Any]]:
    return [{"scopeName": "PriorityClass", "operator": operator, "values": list(values)}]


@pytest.mark.parametrize(
    ("pod_class", "selector", "charged"),
    [
        ("high", priority_class("In", "high", "mid"), True),
        ("low", priority_class("In", "high"), False),
        (None, priority_class("In", "high"), False),
        ("high", priority_class("NotIn", "high"), False),
        ("low", priority_class("NotIn", "high"), True),
        (None, priority_class("NotIn", "high"), True),  # no class: the selector's key is absent
        ("low", priority_class("Exists"), True),
        (None, priority_class("Exists"), False),
        ("low", priority_class("DoesNotExist"), False),
        (None, priority_class("DoesNotExist"), True),
        ("high", priority_class("Near", "high"), False),  # no such operator: the apiserver matches nothing
        ("high", [{"scopeName": "PriorityClass", "operator": "In", "values": "high"}], False),  # forged values
    ],
)
def test_quota_priority_class_scope_selector(pod_class: str | None, selector: list[dict[str, Any]], charged: bool):
    p = pod(container("app", "500m"))
    if pod_class:
        p["spec"]["priorityClassName"] = pod_class
    full = {"requests.cpu": "1"}
    hold = quota_hold(p, apply_patch(p, resize("app", "4")), [quota("pc", full, full, selector=selector)])
    assert (hold is not None) == charged
    assert hold is None or hold == Hold(
        "ResourceQuota", "pc", "requests.cpu: used 1 + 3500m would exceed hard 1", "requests.cpu"
    )


def test_quota_scopes_and_selector_expressions_must_all_match() -> None:
    p = pod(container("app", "500m"))
    p["spec"]["priorityClassName"] = "high"
    grown, full = apply_patch(p, resize("app", "4")), {"requests.cpu": "1"}
    both = quota("q", full, full, ["NotBestEffort"], priority_class("In", "high"))
    assert quota_hold(p, grown, [both]) is not None
    assert quota_hold(p, grown, [quota("q", full, full, ["BestEffort"], priority_class("In", "high"))]) is None
    assert quota_hold(p, grown, [quota("q", full, full, ["NotBestEffort"], priority_class("In", "low"))]) is None
    assert quota_hold(p, grown, [quota("q", full, full, ["SomeFutureScope"])]) is None  # matches no pod upstream


@pytest.mark.parametrize(
    ("affinity", "charged"),
    [
        ({}, False),
        ({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "zone"}]}}, False),
        (
            {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"namespaces": ["other"]}]}},
            True,
        ),
        (
            {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 1, "podAffinityTerm": {"namespaceSelector": {}, "topologyKey": "zone"}}
                    ]
                }
            },
            True,
        ),
        ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}, False),
    ],
)
def test_quota_cross_namespace_pod_affinity_scope(affinity: dict[str, Any], charged: bool) -> None:
    p = pod(container("app", "500m"))
    p["spec"]["affinity"] = affinity
    full = {"requests.cpu": "1"}
    scoped = quota("x", full, full, selector=[{"scopeName": "CrossNamespacePodAffinity", "operator": "Exists"}])
    assert (quota_hold(p, apply_patch(p, resize("app", "4")), [scoped]) is not None) == charged


# ---------------------------------------------------------------- node room

NODE = {"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}}


def test_node_room_counts_the_larger_of_spec_and_actual_of_other_pods() -> None:
    me = pod(container("c0", "1"))
    shrinking = pod(container("c0", "1"), status_cpu=("2",))  # spec shrunk, kubelet not yet
    hold = node_hold(NODE, me, apply_patch(me, resize("c0", "2")), [shrinking, pod(container("c0", "500m"))])
    assert hold is not None and hold.constraint == "NodeHeadroom" and hold.name == "n1"
    assert "cpu: needs 2, 1500m free of 4 allocatable" == hold.detail
    assert (
        node_hold(NODE, me, apply_patch(me, resize("c0", "1500m")), [shrinking, pod(container("c0", "500m"))]) is None
    )


def test_a_decrease_always_fits() -> None:
    me = pod(container("c0", "3"))
    assert node_hold(NODE, me, apply_patch(me, resize("c0", "2")), [pod(container("c0", "4"))]) is None


def test_more_than_the_whole_node_is_named_so() -> None:
    me = pod(container("c0", "3"))
    hold = node_hold(NODE, me, apply_patch(me, resize("c0", "5")), [])
    assert hold is not None and hold.detail == "cpu: needs 5, more than the node's 4 allocatable"


@pytest.mark.parametrize(
    ("cpu", "overhead", "fits"),
    [("4", None, True), ("4001m", None, False), ("3900m", "100m", True), ("3900m", "101m", False)],
)
def test_the_apiservers_own_check_is_the_pod_alone_with_its_overhead_against_the_allocatable(
    cpu: str, overhead: str | None, fits: bool
) -> None:
    me = pod(container("c0", "1"))
    if overhead:
        me["spec"]["overhead"] = {"cpu": overhead}
    assert fits_allocatable(NODE, apply_patch(me, resize("c0", cpu))) == fits


def test_the_apiservers_own_check_counts_a_resource_the_node_does_not_list_as_none_allocatable() -> None:
    me = pod(container("c0", "1"))
    assert not fits_allocatable({"status": {"allocatable": {"cpu": "4"}}}, me["spec"])
    assert not fits_allocatable({"status": {"allocatable": {"cpu": "4", "memory": "x"}}}, me["spec"])


def test_node_room_counts_what_a_pod_level_pod_has_at_pod_level() -> None:
    me = pod(container("c0", "1"))
    other = pod(container("c0", "100m"))
    other["spec"]["resources"] = {"requests": {"cpu": "1"}}  # spec shrunk to 1 cpu ...
    other["status"]["resources"] = {"requests": {"cpu": "2500m"}}  # ... the kubelet still gives it 2500m
    hold = node_hold(NODE, me, apply_patch(me, resize("c0", "2")), [other])
    assert hold is not None and hold.detail == "cpu: needs 2, 1500m free of 4 allocatable"


def test_a_pod_level_resize_is_judged_on_the_pod_level_values() -> None:
    me = pod(container("c0", "500m"))
    me["spec"]["resources"] = {"requests": {"cpu": "1"}}
    grown = apply_patch(
        me,
        {
            "spec": {
                "resources": {"requests": {"cpu": "3500m"}},
                "containers": [{"name": "c0", "resources": {"requests": {"cpu": "1"}}}],
            }
        },
    )
    hold = node_hold(NODE, me, grown, [pod(container("c0", "1"))])
    assert hold is not None and hold.detail == "cpu: needs 3500m, 3 free of 4 allocatable"
    quota_ = quota("q", {"requests.cpu": "4"}, {"requests.cpu": "2"})
    assert (
        quota_hold(me, grown, [quota_]) is not None
        and quota_hold(
            me,
            apply_patch(me, {"spec": {"containers": [{"name": "c0", "resources": {"requests": {"cpu": "1"}}}]}}),
            [quota_],
        )
        is None
    )


# ---------------------------------------------------------------- pod-level resources (plan)


def test_a_pod_with_pod_level_resources_is_not_planned() -> None:
    from resizer import SAMPLE_CONFIG, load_config, plan_resize, resolve_policy

    config = load_config(SAMPLE_CONFIG)
    p = pod(container("app", "1"))
    assert plan_resize(p, resolve_policy(config, p), "n4").outcome == "Resize"
    p["spec"]["resources"] = {"requests": {"cpu": "2"}}
    plan = plan_resize(p, resolve_policy(config, p), "n4")
    assert plan.outcome == "PodLevelResources" and plan.patch == {} and "pod-level resources" in plan.summary()
    p["spec"]["resources"] = {"requests": {"hugepages-2Mi": "2Mi"}}  # no cpu or memory at pod level
    assert plan_resize(p, resolve_policy(config, p), "n4").outcome == "Resize"
