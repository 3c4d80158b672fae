"""Property tests of the sizing core over random pods, perf ratios and bounds."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from resizer.config import Bounds, NodeProfile, Policy
from resizer.originals import originals_from_spec_annotations
from resizer.plan import desired_quantity, plan_resize
from resizer.qos import pod_qos_class
from resizer.quantity import format_cpu, format_memory, round_half_away

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
    return policy(
        {"base": (draw(perfs), draw(perfs)), "node": (draw(perfs), draw(perfs))},
        baseline="base",
        cpu_bounds=(cpu_bounds.min, cpu_bounds.max),
        memory_bounds=(memory_bounds.min, memory_bounds.max),
    )


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


@settings(deadline=None)
@given(st.integers(min_value=0, max_value=10**12), ratios, bounds(st.integers(0, 10**12)))
def test_desired_quantity_is_always_within_bounds(original: int, ratio: Fraction, limits: Bounds) -> None:
    desired, clamped = desired_quantity(original, ratio, limits)
    assert limits.min <= desired <= limits.max
    if clamped is None:
        assert desired == round_half_away(original * ratio)


@settings(deadline=None)
@given(pods(), policies())
def test_desired_requests_are_within_bounds_and_limits_never_below_requests(
    pod: dict[str, Any], chosen: Policy
) -> None:
    plan = plan_resize(pod, chosen, "node")
    for change in plan.changes:
        bound = chosen.cpu_bounds if change.resource == "cpu" else chosen.memory_bounds
        assert bound.min <= change.desired_request <= bound.max
        assert change.desired_limit is None or change.desired_limit >= change.desired_request


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
