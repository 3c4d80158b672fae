"""Re-alignment after a config change: from the originals, and only when something changes."""

from __future__ import annotations

from resizer import SAMPLE_CONFIG, load_config
from resizer.originals import originals_from_spec_annotations
from resizer.plan import plan_resize
from resizer.realign import realignment

from .test_resizer_support import apply_resize_patch, guaranteed, make_pod, with_annotations

APPLIED = "workload-resizer.io/applied-instance-type"


def sized_on_n4() -> dict:
    config = load_config(SAMPLE_CONFIG)
    pod = with_annotations(make_pod(guaranteed()), originals_from_spec_annotations(make_pod(guaranteed())))
    resized = apply_resize_patch(pod, plan_resize(pod, config.policies.default, "n4").patch)
    return with_annotations(resized, {APPLIED: "n4"})


def test_an_unchanged_config_needs_nothing() -> None:
    assert realignment(sized_on_n4(), load_config(SAMPLE_CONFIG), "n4") is None


def test_a_changed_perf_re_aligns_from_the_originals_never_compounding() -> None:
    faster = load_config(SAMPLE_CONFIG.replace("cpuPerf: 1.25", "cpuPerf: 2.0"))
    plan = realignment(sized_on_n4(), faster, "n4")
    assert plan is not None
    assert plan.patch == {
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}}}]}
    }
    again = with_annotations(apply_resize_patch(sized_on_n4(), plan.patch), {})
    assert realignment(again, faster, "n4") is None


def test_a_change_elsewhere_in_the_config_needs_nothing() -> None:
    other = load_config(SAMPLE_CONFIG.replace("c3:  { cpuPerf: 1.30", "c3:  { cpuPerf: 1.50"))
    assert realignment(sized_on_n4(), other, "n4") is None


def test_a_pod_not_sized_for_this_node_type_is_not_a_realignment() -> None:
    assert realignment(sized_on_n4(), load_config(SAMPLE_CONFIG), "c3") is None
    assert realignment(make_pod(guaranteed()), load_config(SAMPLE_CONFIG), "n4") is None
