from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

import pytest

from resizer.config import Bounds, load_config, resolve_policy
from resizer.originals import OriginalsError, originals_from_spec_annotations
from resizer.plan import MAX_UNITS, PlanError, ResizePlan, ResourceChange, desired_limit, desired_quantity, plan_resize
from resizer.qos import pod_qos_class

from .test_resizer_support import (
    SAMPLE_CONFIG,
    GiB,
    MiB,
    apply_resize_patch,
    container,
    guaranteed,
    make_pod,
    policy,
    sample_config,
    with_annotations,
)

MAX = MAX_UNITS["cpu"]

# The sample plus node types for the design's edge cases, inserted before `bounds:`.
EXTRA_NODES_CONFIG = SAMPLE_CONFIG.replace(
    "bounds:",
    "  slow: { cpuPerf: 0.5, memPerf: 1.0 }\n"
    "  huge: { cpuPerf: 100.0, memPerf: 1.0 }\n"
    "  bigmem: { cpuPerf: 1.0, memPerf: 2.0 }\n"
    "  tinymem: { cpuPerf: 1.0, memPerf: 0.01 }\n"
    "bounds:",
)


def plan_on(pod: dict[str, Any], node_type: str, **options: Any) -> ResizePlan:
    config = load_config(EXTRA_NODES_CONFIG)
    return plan_resize(pod, resolve_policy(config, pod), node_type, **options)


def patch_of(*containers: tuple[str, dict[str, str], dict[str, str] | None]) -> dict[str, Any]:
    entries = []
    for name, requests, limits in containers:
        resources: dict[str, Any] = {"requests": requests}
        if limits:
            resources["limits"] = limits
        entries.append({"name": name, "resources": resources})
    return {"spec": {"containers": entries}}


# --- desired_quantity ----------------------------------------------------------------


def test_desired_quantity_scales_exactly() -> None:
    assert desired_quantity(1000, Fraction(4, 5), Bounds(50, 16_000)) == (800, None)


def test_desired_quantity_rounds_half_away_from_zero() -> None:
    assert desired_quantity(5, Fraction(1, 2), Bounds(0, 100)) == (3, None)
    assert desired_quantity(3, Fraction(1, 2), Bounds(0, 100)) == (2, None)


def test_a_shrink_stops_at_the_floor_and_names_it() -> None:
    assert desired_quantity(1000, Fraction(1, 100), Bounds(50, 16_000)) == (50, "min")
    assert desired_quantity(50, Fraction(4, 5), Bounds(50, 16_000)) == (50, "min")


def test_a_growth_stops_at_the_ceiling_and_names_it() -> None:
    assert desired_quantity(10_000, Fraction(2), Bounds(50, 16_000)) == (16_000, "max")


def test_ratio_one_leaves_every_value_alone_even_outside_the_bounds() -> None:
    assert desired_quantity(10, Fraction(1), Bounds(50, 16_000)) == (10, None)
    assert desired_quantity(20_000, Fraction(1), Bounds(50, 16_000)) == (20_000, None)


def test_a_shrink_never_lifts_a_value_below_the_floor() -> None:
    assert desired_quantity(10, Fraction(4, 5), Bounds(50, 16_000)) == (10, "min")


def test_a_growth_never_lowers_a_value_above_the_ceiling() -> None:
    assert desired_quantity(20_000, Fraction(2), Bounds(50, 16_000)) == (20_000, "max")


def test_a_value_outside_the_bounds_still_moves_with_the_ratio_towards_them() -> None:
    assert desired_quantity(10, Fraction(2), Bounds(50, 16_000)) == (20, None)
    assert desired_quantity(20_000, Fraction(4, 5), Bounds(50, 16_000)) == (16_000, None)


def test_the_max_bound_does_not_pull_a_shrink_further_than_the_ratio() -> None:
    assert desired_quantity(64 * GiB, Fraction(4, 5), Bounds(64 * MiB, 32 * GiB)) == (round(51.2 * GiB), None)


def test_a_positive_amount_never_rounds_to_zero() -> None:
    assert desired_quantity(1, Fraction(1, 4), Bounds(0, 16_000)) == (1, "min")


def test_limit_equal_to_request_follows_it_exactly() -> None:
    assert desired_limit(1000, 1000, 769, MAX) == 769


def test_limit_above_request_follows_the_requests_effective_ratio() -> None:
    assert desired_limit(500, 2000, 400, MAX) == 1600
    assert desired_limit(1000, 1200, 50, MAX) == 60


def test_limit_above_request_stays_above_it_after_rounding() -> None:
    assert desired_limit(1000, 1001, 1, MAX) == 2
    assert desired_limit(3, 4, 1, MAX) == 2


def test_a_growing_limit_stops_at_the_largest_quantity_but_never_below_its_original() -> None:
    assert desired_limit(1000, 10**21, 2000, 10**21 + 5) == 10**21 + 5
    assert desired_limit(1000, 10**21, 2000, 1000) == 10**21


# --- the design's examples -----------------------------------------------------------


def test_guaranteed_pod_on_n4_shrinks_cpu_request_and_limit_to_exactly_800m() -> None:
    pod = make_pod(guaranteed())
    plan = plan_on(pod, "n4")
    assert plan.outcome == "Resize"
    assert plan.patch == patch_of(("app", {"cpu": "800m"}, {"cpu": "800m"}))
    cpu = plan.changes[0]
    assert (cpu.original_request, cpu.desired_request, cpu.current_request) == (1000, 800, 1000)
    assert (cpu.original_limit, cpu.desired_limit, cpu.current_limit) == (1000, 800, 1000)
    assert pod_qos_class(apply_resize_patch(pod, plan.patch)["spec"]) == "Guaranteed"


def test_node_half_as_fast_doubles_the_request_to_2_cpus() -> None:
    plan = plan_on(make_pod(container("app", {"cpu": "1000m"})), "slow")
    assert plan.patch == patch_of(("app", {"cpu": "2"}, None))


def test_node_100_times_faster_is_clamped_to_the_minimum() -> None:
    plan = plan_on(make_pod(container("app", {"cpu": "1000m"})), "huge")
    assert plan.patch == patch_of(("app", {"cpu": "50m"}, None))
    assert plan.changes[0].clamped == "min"
    assert plan.clamped


def test_burstable_request_and_limit_scale_independently() -> None:
    pod = make_pod(container("app", {"cpu": "500m", "memory": "1Gi"}, {"cpu": "2"}))
    plan = plan_on(pod, "n4")
    assert plan.patch == patch_of(("app", {"cpu": "400m"}, {"cpu": "1600m"}))
    assert pod_qos_class(apply_resize_patch(pod, plan.patch)["spec"]) == "Burstable"


def test_c3_scales_by_one_over_1_3_and_rounds_to_769m() -> None:
    plan = plan_on(make_pod(guaranteed()), "c3")
    assert plan.patch == patch_of(("app", {"cpu": "769m"}, {"cpu": "769m"}))


def test_baseline_node_is_already_aligned() -> None:
    plan = plan_on(make_pod(guaranteed()), "n2d")
    assert (plan.outcome, plan.patch, plan.changed) == ("AlreadyAligned", {}, ())
    assert len(plan.changes) == 2


def test_plan_records_node_type_baseline_and_rule() -> None:
    plan = plan_on(make_pod(guaranteed()), "n4")
    assert (plan.node_type, plan.baseline_node_type, plan.rule) == ("n4", "n2d", "global")


def test_multi_container_pod_patches_only_containers_that_change_and_never_lifts_a_small_request() -> None:
    pod = make_pod(
        guaranteed("app"),
        container("metrics", {"cpu": "250m", "memory": "128Mi"}),
        container("logs", {"memory": "64Mi"}),
        container("tiny", {"cpu": "40m"}),
    )
    plan = plan_on(pod, "n4")
    assert plan.outcome == "Resize"
    assert plan.patch == patch_of(
        ("app", {"cpu": "800m"}, {"cpu": "800m"}),
        ("metrics", {"cpu": "200m"}, None),
    )
    assert [(c.container, c.resource) for c in plan.changed] == [("app", "cpu"), ("metrics", "cpu")]
    tiny = next(change for change in plan.changes if change.container == "tiny")
    assert (tiny.desired_request, tiny.clamped) == (40, "min")


def test_pod_without_requests_has_nothing_to_size() -> None:
    plan = plan_on(make_pod(container("app"), container("side", {"ephemeral-storage": "1Gi"})), "n4")
    assert (plan.outcome, plan.changes, plan.patch) == ("NothingToSize", (), {})
    assert plan.summary() == "no container has a cpu or memory request to size"


def test_zero_requests_are_left_alone() -> None:
    plan = plan_on(make_pod(container("app", {"cpu": "0", "memory": "1Gi"})), "bigmem")
    assert plan.patch == patch_of(("app", {"memory": "512Mi"}, None))


def test_unknown_node_type() -> None:
    plan = plan_on(make_pod(guaranteed()), "t2a")
    assert (plan.outcome, plan.changes, plan.patch) == ("UnknownNodeType", (), {})
    assert plan.summary() == "node type 't2a' is not in the configuration"


# --- resize policy -------------------------------------------------------------------


def test_restart_container_resources_are_skipped_with_a_reason() -> None:
    pod = make_pod(container("app", {"cpu": "1", "memory": "1Gi"}, restart_on=("cpu",)))
    plan = plan_resize(pod, policy({"n2d": (1, 1), "m4": ("1.25", 2)}), "m4")
    assert plan.patch == patch_of(("app", {"memory": "512Mi"}, None))
    cpu = next(change for change in plan.changes if change.resource == "cpu")
    assert (cpu.skipped, cpu.desired_request, cpu.changed) == ("RestartContainerPolicy", 1000, False)


def test_pod_whose_only_sizable_resource_needs_a_restart_has_nothing_to_size() -> None:
    pod = make_pod(container("app", {"cpu": "1"}, restart_on=("cpu",)))
    plan = plan_on(pod, "n4")
    assert (plan.outcome, plan.patch) == ("NothingToSize", {})
    assert plan.summary() == "app: cpu 1 (skipped: RestartContainerPolicy)"


def test_restart_container_resources_are_resized_when_allowed() -> None:
    pod = make_pod(container("app", {"cpu": "1"}, restart_on=("cpu",)))
    plan = plan_on(pod, "n4", resize_restart_containers=True)
    assert plan.patch == patch_of(("app", {"cpu": "800m"}, None))


# --- QoS preservation ----------------------------------------------------------------


def test_a_burstable_pod_below_the_floor_is_not_lifted_into_guaranteed() -> None:
    # Old rule: the 50m floor lifted request and limit to 50m/50m -> Guaranteed -> refused.
    pod = make_pod(container("app", {"cpu": "3m", "memory": "1Gi"}, {"cpu": "4m", "memory": "1Gi"}))
    plan = plan_on(pod, "n4")
    assert (plan.outcome, plan.patch) == ("AlreadyAligned", {})
    assert (plan.changes[0].desired_request, plan.changes[0].desired_limit) == (3, 4)


def test_rounding_keeps_a_burstable_limit_strictly_above_its_request() -> None:
    pod = make_pod(container("app", {"cpu": "3m", "memory": "1Gi"}, {"cpu": "4m", "memory": "1Gi"}))
    plan = plan_resize(pod, policy({"n2d": (1, 1), "x4": (4, 1)}, cpu_bounds=(1, 16_000)), "x4")
    assert plan.patch == patch_of(("app", {"cpu": "1m"}, {"cpu": "2m"}))
    assert pod_qos_class(apply_resize_patch(pod, plan.patch)["spec"]) == "Burstable"


def test_recorded_qos_class_in_status_is_what_must_be_preserved() -> None:
    pod = make_pod(guaranteed(), qos_class="Burstable")
    assert plan_on(pod, "n4").outcome == "QoSChange"


def test_a_limit_keeps_its_headroom_over_a_request_stopped_at_the_floor() -> None:
    # Old rule: the limit was scaled by the raw ratio and lifted to the request (50m/50m).
    pod = make_pod(container("app", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1200m"}))
    plan = plan_on(pod, "huge")
    assert plan.patch == patch_of(("app", {"cpu": "50m"}, {"cpu": "60m"}))


def test_a_limit_grows_no_further_than_its_request_did() -> None:
    # Old rule: the limit was scaled by the raw ratio (12 -> 24) while the request stopped at 16.
    pod = make_pod(container("app", {"cpu": "10", "memory": "1Gi"}, {"cpu": "12"}))
    plan = plan_on(pod, "slow")
    assert plan.patch == patch_of(("app", {"cpu": "16"}, {"cpu": "19200m"}))
    assert plan.changes[0].clamped == "max"


# --- the examples ------------------------------------------------------------


def test_baseline_family_leaves_a_pod_beyond_the_bounds_alone() -> None:
    pod = make_pod(guaranteed(cpu="20", memory="64Gi"))
    plan = plan_on(pod, "n2d")
    assert (plan.outcome, plan.patch) == ("AlreadyAligned", {})
    assert [(c.desired_request, c.desired_limit) for c in plan.changes] == [(20_000, 20_000), (64 * GiB, 64 * GiB)]


def test_a_small_pod_is_not_grown_on_a_faster_node() -> None:
    pod = make_pod(container("app", {"cpu": "10m", "memory": "32Mi"}))
    plan = plan_on(pod, "n4")
    assert (plan.outcome, plan.patch) == ("AlreadyAligned", {})


def test_memory_under_the_floor_no_longer_blocks_the_cpu_saving() -> None:
    pod = make_pod(container("app", {"cpu": "1", "memory": "32Mi"}, {"cpu": "1", "memory": "48Mi"}))
    plan = plan_on(pod, "n4")
    assert plan.outcome == "Resize"
    assert plan.patch == patch_of(("app", {"cpu": "800m"}, {"cpu": "800m"}))
    assert pod_qos_class(apply_resize_patch(pod, plan.patch)["spec"]) == "Burstable"


def test_a_huge_forged_limit_scaled_up_never_overflows_a_quantity() -> None:
    pod = make_pod(
        container("app", {"cpu": "1", "memory": "1Gi"}, {"cpu": "9e18"}),
        annotations={"workload-resizer.io/original-cpu-limit.app": "9e18"},
    )
    plan = plan_on(pod, "slow")
    assert plan.outcome == "Resize"
    cpu = plan.changes[0]
    assert (cpu.desired_request, cpu.desired_limit) == (2000, MAX)
    assert plan.patch == patch_of(("app", {"cpu": "2"}, {"cpu": "9223372036854775807"}))


def test_a_value_no_quantity_can_hold_is_a_plan_error_not_a_crash() -> None:
    # Unreachable with a loaded config (bounds are valid quantities); a defence in depth.
    pod = make_pod(container("app", {"cpu": "9e18"}))
    with pytest.raises(PlanError, match="cannot express"):
        plan_resize(pod, policy({"n2d": (1, 1), "slow": ("0.5", 1)}, cpu_bounds=(1, MAX * 4)), "slow")


# --- memory --------------------------------------------------------------------------


def test_memory_scales_by_mem_perf_when_limit_decreases_are_allowed() -> None:
    pod = make_pod(guaranteed())
    plan = plan_resize(pod, replace(policy({"n2d": (1, 1), "bigmem": (1, 2)}), memory_limit_decrease="Allow"), "bigmem")
    assert plan.patch == patch_of(("app", {"memory": "512Mi"}, {"memory": "512Mi"}))


def test_by_default_a_guaranteed_containers_memory_is_held_at_its_original() -> None:
    plan = plan_on(make_pod(guaranteed()), "bigmem")
    assert (plan.outcome, plan.patch) == ("AlreadyAligned", {})
    memory = plan.changes[1]
    assert (memory.desired_request, memory.desired_limit, memory.held) == (GiB, GiB, "memoryLimitDecrease=Never")
    assert (
        plan.summary()
        == "app: cpu 1 -> 1 (limit 1 -> 1), memory 1Gi -> 1Gi (limit 1Gi -> 1Gi, held: memoryLimitDecrease=Never)"
    )


def test_by_default_a_burstable_memory_request_shrinks_under_its_held_limit() -> None:
    pod = make_pod(container("app", {"cpu": "1", "memory": "1Gi"}, {"memory": "2Gi"}))
    plan = plan_on(pod, "bigmem")
    assert plan.patch == patch_of(("app", {"memory": "512Mi"}, {"memory": "2Gi"}))
    assert pod_qos_class(apply_resize_patch(pod, plan.patch)["spec"]) == "Burstable"


def test_memory_limits_still_grow() -> None:
    pod = make_pod(guaranteed())
    plan = plan_resize(pod, policy({"n2d": (1, 1), "smallmem": (1, "0.5")}), "smallmem")
    assert plan.patch == patch_of(("app", {"memory": "2Gi"}, {"memory": "2Gi"}))


def test_a_held_memory_limit_is_restored_to_the_original_when_the_spec_is_below_it() -> None:
    resized = make_pod(
        container("app", {"cpu": "1", "memory": "512Mi"}, {"cpu": "1", "memory": "512Mi"}),
        annotations=originals_from_spec_annotations(make_pod(guaranteed())),
    )
    plan = plan_on(resized, "bigmem")
    assert plan.patch == patch_of(("app", {"memory": "1Gi"}, {"memory": "1Gi"}))


def test_memory_is_clamped_to_the_maximum() -> None:
    plan = plan_on(make_pod(container("app", {"memory": "1Gi"})), "tinymem")
    assert plan.patch == patch_of(("app", {"memory": "32Gi"}, None))
    assert plan.changes[0].clamped == "max"
    assert plan.changes[0].desired_request == 32 * GiB


# --- originals and current values ----------------------------------------------------


def test_current_values_are_compared_by_value() -> None:
    pod = make_pod(
        container("app", {"cpu": "0.8", "memory": "1024Mi"}, {"cpu": "800m", "memory": "1Gi"}),
        annotations={
            "workload-resizer.io/original-cpu.app": "1",
            "workload-resizer.io/original-cpu-limit.app": "1000m",
        },
    )
    assert plan_on(pod, "n4").outcome == "AlreadyAligned"


def test_already_resized_pod_is_rescaled_from_its_originals_not_its_spec() -> None:
    original = make_pod(guaranteed())
    resized = apply_resize_patch(original, plan_on(original, "n4").patch)
    moved = with_annotations(resized, originals_from_spec_annotations(original))
    plan = plan_on(moved, "c3")
    assert plan.patch == patch_of(("app", {"cpu": "769m"}, {"cpu": "769m"}))
    assert plan.changes[0].current_request == 800


def test_corrupt_original_annotation_fails_the_plan() -> None:
    pod = make_pod(guaranteed(), annotations={"workload-resizer.io/original-cpu.app": "a lot"})
    with pytest.raises(OriginalsError):
        plan_on(pod, "n4")


def test_init_containers_are_not_resized() -> None:
    pod = make_pod(guaranteed(), init_containers=[guaranteed("init")])
    plan = plan_on(pod, "n4")
    assert [entry["name"] for entry in plan.patch["spec"]["containers"]] == ["app"]


# --- summary -------------------------------------------------------------------------


def test_summary_describes_each_resource() -> None:
    pod = make_pod(container("app", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1"}))
    assert plan_on(pod, "n4").summary() == "app: cpu 1 -> 800m (limit 1 -> 800m), memory 1Gi -> 1Gi"


def test_summary_mentions_clamping_and_separates_containers() -> None:
    pod = make_pod(container("app", {"cpu": "1"}), container("side", {"cpu": "100m"}))
    assert (
        plan_on(pod, "huge").summary() == "app: cpu 1 -> 50m (clamped to min); side: cpu 100m -> 50m (clamped to min)"
    )


def test_resource_change_reports_whether_it_changes_the_spec() -> None:
    unchanged = ResourceChange("app", "cpu", 1000, 800, 800, 1000, 800, 800)
    limit_only = ResourceChange("app", "cpu", 1000, 800, 800, 1000, 800, 1000)
    assert not unchanged.changed
    assert limit_only.changed


def test_sample_config_plans_via_resolve_policy() -> None:
    config = sample_config()
    pod = make_pod(guaranteed())
    assert plan_resize(pod, resolve_policy(config, pod), "n4").outcome == "Resize"
