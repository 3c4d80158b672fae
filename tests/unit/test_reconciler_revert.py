"""reconciler.revert: what the containers report is set back to only when the product knows the pod had it."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.outcome import spec_size
from reconciler.revert import decide_revert, describe, size_of, size_of_originals, sizes_before
from resizer import missing_original_annotations
from resizer.podstate import APPLIED_SIZE


def resources(cpu: str, memory: str = "256Mi") -> dict[str, Any]:
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}


def pod(
    spec: str = "800m",
    status: str = "1",
    memory: str = "256Mi",
    sidecar: tuple[str, str] | None = None,
    pod_level: tuple[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pod whose spec holds `spec` cpu, its containers reporting `status` (and `memory`);
    `sidecar` / `pod_level`: (spec cpu, reported cpu) of a sidecar / of spec.resources."""
    full: dict[str, Any] = {
        "metadata": {"name": "web-1", "namespace": "shop", "generation": 2, "annotations": dict(annotations or {})},
        "spec": {"containers": [{"name": "app", "resources": resources(spec)}]},
        "status": {"containerStatuses": [{"name": "app", "resources": resources(status, memory)}]},
    }
    if sidecar is not None:
        full["spec"]["initContainers"] = [
            {"name": "proxy", "restartPolicy": "Always", "resources": resources(sidecar[0])}
        ]
        full["status"]["initContainerStatuses"] = [{"name": "proxy", "resources": resources(sidecar[1])}]
    if pod_level is not None:
        full["spec"]["resources"] = {"limits": {"cpu": pod_level[0]}}
        full["status"]["resources"] = {"limits": {"cpu": pod_level[1]}}
    return full


def before(p: dict[str, Any], cpu: str = "1", sidecar: str | None = None, pod_level: str | None = None):
    """The size of `p`'s spec with `cpu` (and the sidecar's / pod level's cpu) instead."""
    spec = copy.deepcopy(p["spec"])
    spec["containers"][0]["resources"] = resources(cpu)
    if sidecar is not None:
        spec["initContainers"][0]["resources"] = resources(sidecar)
    if pod_level is not None:
        spec["resources"] = {"limits": {"cpu": pod_level}}
    return size_of(spec)


def originals_of(p: dict[str, Any], cpu: str = "1") -> dict[str, str]:
    return missing_original_annotations({**p, "spec": {"containers": [{"name": "app", "resources": resources(cpu)}]}})


# ---------------------------------------------------------------- with the sizes before our resize (memory)


def test_the_size_before_the_resize_is_set_back_to():
    p = pod()
    decision = decide_revert(p, [before(p)], None, False)
    assert (
        decision.patch
        == {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}
        and not decision.refused
    )


def test_a_reported_size_above_the_size_before_and_the_plan_is_refused():
    decision = decide_revert(pod(status="7", memory="16Gi"), [before(pod())], None, False)
    assert decision.patch == {} and decision.refused.startswith("above both")
    assert decision.reported == "app: requests cpu 7, memory 16Gi; limits cpu 7, memory 16Gi"


def test_a_reported_size_within_the_bound_that_the_pod_never_had_is_refused():
    decision = decide_revert(pod(status="900m"), [before(pod())], None, False)
    assert decision.patch == {} and decision.refused == "not the size the pod had before the resize"


def test_values_the_containers_report_at_the_plan_are_not_part_of_the_match():
    """Partly actuated (the kubelet took the memory, not the cpu): only what differs is set back."""
    p = pod(spec="800m", status="1")
    p["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "800m", "memory": "128Mi"},
        "limits": {"cpu": "800m", "memory": "128Mi"},
    }
    p["status"]["containerStatuses"][0]["resources"]["requests"]["memory"] = "128Mi"
    p["status"]["containerStatuses"][0]["resources"]["limits"]["memory"] = "128Mi"
    decision = decide_revert(p, [before(pod())], None, False)
    assert decision.patch["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}


def test_sidecars_and_the_pod_level_are_matched_with_the_containers():
    p = pod(sidecar=("400m", "500m"), pod_level=("2", "3"))
    had = before(p, sidecar="500m", pod_level="3")
    decision = decide_revert(p, [had], None, False)
    assert set(decision.patch["spec"]) == {"containers", "initContainers", "resources"}
    lied = decide_revert(pod(sidecar=("400m", "500m"), pod_level=("2", "8")), [had], None, False)
    assert lied.refused and "pod: limits cpu 8" in lied.reported


def test_any_size_before_an_unanswered_resize_of_ours_is_known():
    p = pod(spec="500m", status="1")
    assert decide_revert(p, [before(p, "800m"), before(p, "1")], None, False).patch


def test_sizes_before_are_newest_first_and_each_once():
    p = pod()
    earlier = (before(p, "1"),)
    assert sizes_before(p, earlier) == (size_of(p["spec"]), before(p, "1"))
    assert sizes_before(pod(spec="1"), earlier) == (before(p, "1"),)


def test_nothing_to_set_back_is_no_refusal():
    assert decide_revert(pod(status="800m"), [], None, False).patch == {}
    assert not decide_revert(pod(status="800m"), [], None, False).refused


# ---------------------------------------------------------------- after a restart (no memory)


def test_after_a_restart_trusted_originals_are_set_back_to():
    p = pod(annotations=originals_of(pod()))
    assert decide_revert(p, [], size_of_originals(p), True).patch


def test_after_a_restart_originals_not_trusted_only_lower_the_spec():
    raising = pod(spec="800m", status="1", annotations=originals_of(pod()))
    assert decide_revert(raising, [], size_of_originals(raising), False).refused.startswith("above both")
    lowering = pod(spec="2", status="1", annotations=originals_of(pod()))
    assert decide_revert(lowering, [], size_of_originals(lowering), False).patch


def test_after_a_restart_the_size_recorded_as_applied_is_set_back_to_within_the_bound():
    recorded = {APPLIED_SIZE: spec_size(pod(spec="900m"))}
    p = pod(spec="800m", status="900m", annotations={**originals_of(pod()), **recorded})
    assert decide_revert(p, [], size_of_originals(p), True).patch
    forged = pod(spec="800m", status="7", annotations={**originals_of(pod()), APPLIED_SIZE: spec_size(pod(spec="7"))})
    assert decide_revert(forged, [], size_of_originals(forged), True).refused.startswith("above both")


def test_after_a_restart_anything_else_is_refused():
    p = pod(status="900m", annotations=originals_of(pod()))
    assert decide_revert(p, [], size_of_originals(p), True).refused == (
        "neither the pod's originals nor the size recorded as applied"
    )


def test_unreadable_reported_quantities_are_refused():
    p = pod()
    p["status"]["containerStatuses"][0]["resources"]["limits"]["cpu"] = "lots"
    decision = decide_revert(p, [before(p)], None, False)
    assert decision.patch == {} and decision.refused == "an unreadable quantity"


def test_describe_names_each_container_and_the_pod_level():
    patch = {
        "spec": {
            "containers": [{"name": "app", "resources": {"limits": {"memory": "1Gi"}}}],
            "resources": {"requests": {"cpu": "2"}},
        }
    }
    assert describe(patch) == "app: limits memory 1Gi; pod: requests cpu 2"


# ---------------------------------------------------------------- the bound, whatever is reported

MILLICORES = st.integers(min_value=1, max_value=64_000)


@settings(max_examples=400, deadline=None)
@given(
    had=MILLICORES, planned=MILLICORES, applied=MILLICORES, restart=st.booleans(), trusted=st.booleans(), data=st.data()
)
def test_a_revert_never_sets_a_value_above_the_size_before_and_the_plan(had, planned, applied, restart, trusted, data):
    """Each reported value is one of the known ones (the size before, the plan, the recorded
    applied size) or anything at all: set back only whole to a known size, never above the bound."""
    p = pod(
        spec=f"{planned}m",
        annotations={**originals_of(pod(), f"{had}m"), APPLIED_SIZE: spec_size(pod(spec=f"{applied}m"))},
    )
    cpu = st.one_of(st.sampled_from([had, planned, applied]), MILLICORES)
    status = p["status"]["containerStatuses"][0]["resources"]
    status["requests"]["cpu"], status["limits"]["cpu"] = f"{data.draw(cpu)}m", f"{data.draw(cpu)}m"
    status["limits"]["memory"] = f"{data.draw(st.sampled_from([256, 16_384]))}Mi"
    known = before(p, f"{had}m")
    decision = decide_revert(p, [] if restart else [known], size_of_originals(p), trusted)
    if not decision.patch:
        return
    target = size_of(decision.patch["spec"])
    ceiling = known if (trusted or not restart) else {}
    for key, value in target.items():
        assert value <= max(size_of(p["spec"])[key], ceiling.get(key, Fraction(0))), (key, value)
    applied_spec = size_of(pod(spec=f"{applied}m")["spec"])
    assert any(
        all(size.get(key) == value for key, value in target.items())
        for size in ([known] if not restart else [known, applied_spec])
    ), "whole, to one known size"
