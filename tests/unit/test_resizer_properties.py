"""Property tests of the sizing core over random pods, perf ratios and bounds."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from resizer.config import Bounds, NodeProfile, Policy
from resizer.originals import originals_from_spec_annotations
from resizer.plan import MAX_UNITS, desired_limit, desired_quantity, plan_resize
from resizer.qos import pod_qos_class
from resizer.quantity import format_cpu, format_memory, to_bytes

from .test_resizer_support import apply_resize_patch, make_pod, policy, with_annotations

perfs = st.integers(min_value=1, max_value=1000).map(lambda hundredths: Fraction(hundredths, 100))
ratios = st.fractions(min_value=Fraction(1, 1000), max_value=1000)
millicores = st.integers(min_value=1, max_value=64_000)
nbytes = st.integers(min_value=1, max_value=2**37)


@st.composite
def bounds(draw: st.DrawFn, amounts: st.SearchStrategy[int]) -> Bounds:
    low, high = sorted((draw(amounts), draw(amounts)))
    return Bounds(low, high)


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    cpu_bounds = draw(bounds(st.integers(0, 64_000)))
    memory_bounds = draw(bounds(st.integers(0, 2**37)))
    base = (draw(perfs), draw(perfs))
    node = draw(st.one_of(st.just(base), st.tuples(perfs, perfs)))  # the baseline family too
    chosen = policy(
        {"base": base, "node": node},
        baseline="base",
        cpu_bounds=(cpu_bounds.min, cpu_bounds.max),
        memory_bounds=(memory_bounds.min, memory_bounds.max),
    )
    return replace(chosen, memory_limit_decrease=draw(st.sampled_from(["Never", "Allow"])))


@st.composite
def resource(
    draw: st.DrawFn, amounts: st.SearchStrategy[int], shape: str | None = None
) -> tuple[int | None, int | None]:
    """(request, limit) with the limit absent, equal to the request, or above it."""
    shape = shape or draw(st.sampled_from(["absent", "request-only", "equal", "above"]))
    request = draw(amounts)
    if shape == "absent":
        return None, None
    if shape == "request-only":
        return request, None
    if shape == "equal":
        return request, request
    return request, request + draw(amounts)


@st.composite
def pods(draw: st.DrawFn, shape: str | None = None) -> dict[str, Any]:
    containers = []
    for index in range(draw(st.integers(min_value=1, max_value=3))):
        cpu = draw(resource(millicores, shape))
        memory = draw(resource(nbytes, shape))
        requests = {
            name: fmt(value[0])
            for name, value, fmt in (("cpu", cpu, format_cpu), ("memory", memory, format_memory))
            if value[0] is not None
        }
        limits = {
            name: fmt(value[1])
            for name, value, fmt in (("cpu", cpu, format_cpu), ("memory", memory, format_memory))
            if value[1] is not None
        }
        containers.append({"name": f"c{index}", "resources": {"requests": requests, "limits": limits}})
    return make_pod(*containers)


def desired_values(plan: Any) -> list[tuple[str, str, int, int | None]]:
    return [(c.container, c.resource, c.desired_request, c.desired_limit) for c in plan.changes]


def ratio_of(chosen: Policy, resource: str) -> Fraction:
    base, node = chosen.node_types["base"], chosen.node_types["node"]
    return base.cpu_perf / node.cpu_perf if resource == "cpu" else base.mem_perf / node.mem_perf


def on_the_ratio_side(original: int, desired: int, ratio: Fraction) -> bool:
    """A shrink never ends above the original, a growth never below it, ratio 1 stays."""
    if ratio < 1:
        return desired <= original
    if ratio > 1:
        return desired >= original
    return desired == original


@settings(deadline=None)
@given(st.integers(min_value=1, max_value=10**12), ratios, bounds(st.integers(0, 10**12)))
def test_bounds_stop_the_ratio_and_never_push_past_the_original(original: int, ratio: Fraction, limits: Bounds) -> None:
    desired, clamped = desired_quantity(original, ratio, limits)
    scaled = to_bytes(original * ratio)
    assert desired >= 1
    assert on_the_ratio_side(original, desired, ratio)
    if ratio < 1:
        assert scaled <= desired  # the floor only stops the shrink
    elif ratio > 1:
        assert desired <= scaled  # the ceiling only stops the growth
    if limits.min <= original <= limits.max:
        assert limits.min <= desired <= limits.max or desired == scaled
    if clamped is None:
        assert desired == (original if ratio == 1 else scaled)
    else:
        assert desired != scaled


@settings(deadline=None)
@given(
    st.integers(min_value=1, max_value=10**12),
    st.integers(min_value=0, max_value=10**12),
    st.integers(min_value=1, max_value=10**12),
)
def test_a_limit_keeps_its_relation_to_the_request(request: int, headroom: int, desired_request: int) -> None:
    limit = request + headroom
    desired = desired_limit(request, limit, desired_request, MAX_UNITS["cpu"])
    if headroom == 0:
        assert desired == desired_request
    else:
        assert desired > desired_request
    assert on_the_ratio_side(limit, desired, Fraction(desired_request, request))


@settings(deadline=None)
@given(pods(), policies())
def test_a_plan_never_changes_the_qos_class_and_never_crosses_an_original_against_the_ratio(
    pod: dict[str, Any], chosen: Policy
) -> None:
    plan = plan_resize(pod, chosen, "node")
    assert plan.outcome != "QoSChange"
    assert pod_qos_class(apply_resize_patch(pod, plan.patch)["spec"]) == pod_qos_class(pod["spec"])
    for change in plan.changes:
        ratio = ratio_of(chosen, change.resource)
        assert on_the_ratio_side(change.original_request, change.desired_request, ratio)
        if change.original_limit is not None:
            assert change.desired_limit is not None
            assert on_the_ratio_side(change.original_limit, change.desired_limit, ratio)
            if change.resource == "memory" and chosen.memory_limit_decrease == "Never":
                assert change.desired_limit >= change.original_limit


@settings(deadline=None)
@given(pods(), policies())
def test_the_baseline_family_changes_nothing(pod: dict[str, Any], chosen: Policy) -> None:
    baseline = replace(chosen, node_types={**chosen.node_types, "node": chosen.node_types["base"]})
    assert plan_resize(pod, baseline, "node").patch == {}


@settings(deadline=None)
@given(pods(shape="equal"), policies())
def test_guaranteed_pods_keep_limits_equal_to_requests(pod: dict[str, Any], chosen: Policy) -> None:
    assert pod_qos_class(pod["spec"]) == "Guaranteed"
    plan = plan_resize(pod, chosen, "node")
    assert all(change.desired_limit == change.desired_request for change in plan.changes)
    if plan.outcome != "QoSChange":
        assert pod_qos_class(apply_resize_patch(pod, plan.patch)["spec"]) == "Guaranteed"


@settings(deadline=None)
@given(pods(), policies())
def test_qos_class_never_changes_unless_the_plan_says_so(pod: dict[str, Any], chosen: Policy) -> None:
    plan = plan_resize(pod, chosen, "node")
    resized = apply_resize_patch(pod, plan.patch)
    if plan.outcome == "QoSChange":
        assert plan.patch == {}
    else:
        assert pod_qos_class(resized["spec"]) == pod_qos_class(pod["spec"])


@settings(deadline=None)
@given(pods(), policies())
def test_planning_again_after_the_resize_is_already_aligned(pod: dict[str, Any], chosen: Policy) -> None:
    annotated = with_annotations(pod, originals_from_spec_annotations(pod))
    first = plan_resize(annotated, chosen, "node")
    second = plan_resize(apply_resize_patch(annotated, first.patch), chosen, "node")
    assert desired_values(second) == desired_values(first)
    if first.outcome == "Resize":
        assert (second.outcome, second.patch) == ("AlreadyAligned", {})
    else:
        assert second.outcome == first.outcome


@settings(deadline=None)
@given(pods(), policies(), perfs, perfs)
def test_moving_a_resized_pod_sizes_from_the_originals_without_compounding(
    pod: dict[str, Any], chosen: Policy, cpu_perf: Fraction, mem_perf: Fraction
) -> None:
    annotated = with_annotations(pod, originals_from_spec_annotations(pod))
    resized = apply_resize_patch(annotated, plan_resize(annotated, chosen, "node").patch)
    node_types = {**chosen.node_types, "other": NodeProfile("other", cpu_perf, mem_perf)}
    other = Policy(chosen.rule, chosen.baseline_node_type, node_types, chosen.cpu_bounds, chosen.memory_bounds)
    assert desired_values(plan_resize(resized, other, "other")) == desired_values(
        plan_resize(annotated, other, "other")
    )
