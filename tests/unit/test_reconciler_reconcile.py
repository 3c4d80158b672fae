"""reconcile(key) against the in-memory fake: each write step, each crash point, each kubelet outcome."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from kube.client import ApiError
from kube.slim import slim_pod
from ops.prometheus import REGISTRY
from reconciler import metrics
from reconciler.controller import PodResizeReconciler
from reconciler.memory import DONE, Result, Step
from reconciler.outcome import ResizeState, Stage, spec_size
from reconciler.ports import no_fault
from reconciler.settings import ControllerSettings
from resizer import (
    SAMPLE_CONFIG,
    KeyRing,
    PodIdentity,
    Trust,
    baseline,
    load_config,
    missing_original_annotations,
    pod_mac,
    sign_originals,
)
from resizer.podstate import APPLIED_INSTANCE_TYPE, APPLIED_SIZE, ORIGINALS_MAC, RESIZE_STATE
from tests.unit.fake_cluster import FakeClock, FakeCluster, FakeConfig

LABEL = "example.com/family"
CONFIG = load_config(SAMPLE_CONFIG)  # n2d baseline; n4 cpuPerf 1.25
KEY = "shop/web-1"
RESIZE_TO_800M = {
    "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "800m"}, "limits": {"cpu": "800m"}}}]}
}
BACK_TO_1 = {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}


class Crash(Exception):
    """Stands for SIGKILL: the process dies right after a write step."""


def crash_after(step_name: str):
    def hook(step: str) -> None:
        if step == step_name:
            raise Crash(step)

    return hook


def pod(
    cpu: str = "1",
    memory: str = "256Mi",
    stamped: bool = False,
    node: str = "node-1",
    annotations: dict[str, str] | None = None,
    running: bool = True,
) -> dict[str, Any]:
    resources = {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}
    status = (
        {"name": "app", "state": {"running": {}}, "resources": copy.deepcopy(resources)}
        if running
        else {"name": "app", "state": {"waiting": {"reason": "ContainerCreating"}}}
    )
    full: dict[str, Any] = {
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "uid": "uid-1",
            "annotations": dict(annotations or {}),
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "controller": True}],
        },
        "spec": {"nodeName": node, "containers": [{"name": "app", "resources": resources}]},
        "status": {
            "phase": "Running" if running else "Pending",
            "qosClass": "Guaranteed",
            "observedGeneration": 1,
            "containerStatuses": [status],
        },
    }
    if stamped:  # as the webhook stamps them with the chart's keys: signed for admission
        originals = missing_original_annotations(full)
        identity = PodIdentity.of(full, "shop", "admission")
        full["metadata"]["annotations"].update(
            {**originals, ORIGINALS_MAC: sign_originals(KEYS, originals, identity, "admission")}
        )
    return full


def cluster(*pods: dict[str, Any], family: str | None = "n4", auto_actuate: bool = False) -> FakeCluster:
    fake = FakeCluster(auto_actuate=auto_actuate)
    fake.add_node("node-1", {LABEL: family} if family else {})
    for p in pods:
        fake.add_pod(p)
    return fake


KEYS = KeyRing({"k0001": b"k" * 32})  # the originals MAC keys, as the chart mounts them


def reconciler(
    fake: FakeCluster, config: Any = CONFIG, fault=no_fault, clock: FakeClock | None = None, **options: Any
) -> PodResizeReconciler:
    return PodResizeReconciler(
        fake,
        fake,
        fake,
        FakeConfig(config),
        ControllerSettings(node_type_label=LABEL, **options),
        fault,
        clock or FakeClock(),
        keyring=lambda: KEYS,
    )


def run(coro):
    return asyncio.run(coro)


def spec_cpu(fake: FakeCluster) -> tuple[str, str]:
    resources = fake.pod_now(KEY)["spec"]["containers"][0]["resources"]
    return resources["requests"]["cpu"], resources["limits"]["cpu"]


def reasons(fake: FakeCluster) -> list[str]:
    return [e.reason for e in fake.events]


def events(fake: FakeCluster) -> list[tuple[str, str]]:
    return [(e.type, e.reason) for e in fake.events]


def annotations(fake: FakeCluster) -> dict[str, str]:
    return fake.pod_now(KEY)["metadata"]["annotations"]


def recorded_state(fake: FakeCluster) -> ResizeState | None:
    return ResizeState.decode(annotations(fake).get(RESIZE_STATE))


def generation(fake: FakeCluster) -> int:
    return fake.pod_now(KEY)["metadata"]["generation"]


# ------------------------------------------------------------------ the write path, to actuation


def test_an_unstamped_pod_gets_originals_then_the_resize_then_applied_once_actuated():
    fake = cluster(pod())
    clock = FakeClock()
    rec = reconciler(fake, clock=clock)
    assert run(rec.reconcile(KEY)) == DONE
    assert fake.ops() == ["annotate", "resize"]
    stamp, resize = fake.writes
    assert stamp.resource_version is not None, "originals are conditional on the spec we read"
    assert set(stamp.body) == set(missing_original_annotations(pod())) | {ORIGINALS_MAC}, "signed, bound to the pod"
    assert resize.body == RESIZE_TO_800M
    assert fake.events == [], "no Resized before the kubelet has actuated the new size"

    clock.advance(2.5)
    fake.actuate(KEY)
    run(rec.reconcile(KEY))
    assert fake.ops() == ["annotate", "resize", "annotate"]
    assert fake.writes[-1].body[APPLIED_INSTANCE_TYPE] == "n4" and fake.writes[-1].resource_version is None
    assert spec_cpu(fake) == ("800m", "800m")
    assert reasons(fake) == ["Resized"]
    assert "cpu 1 -> 800m" in fake.events[0].message and "actuated 2.50s after the request" in fake.events[0].message


def test_a_webhook_stamped_pod_costs_two_pod_writes_and_one_event():
    fake = cluster(pod(stamped=True), auto_actuate=True)
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))  # the watch delivers the kubelet's status
    assert fake.ops() == ["resize", "annotate"]
    assert reasons(fake) == ["Resized"]


@pytest.mark.parametrize("kubelet_step", ["nothing yet", "observed but not actuated", "in progress"])
def test_resized_is_never_reported_before_the_status_shows_the_new_size(kubelet_step):
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    stored = fake.pod_now(KEY)
    if kubelet_step == "observed but not actuated":
        stored["status"]["observedGeneration"] = stored["metadata"]["generation"]
    elif kubelet_step == "in progress":
        stored["status"]["observedGeneration"] = stored["metadata"]["generation"]
        stored["status"]["conditions"] = [
            {"type": "PodResizeInProgress", "status": "True", "observedGeneration": stored["metadata"]["generation"]}
        ]
        stored["status"]["containerStatuses"][0]["resources"] = copy.deepcopy(
            stored["spec"]["containers"][0]["resources"]
        )
    fake.sync()
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize"] and fake.events == []


def test_actuation_is_judged_by_value_not_by_spelling():
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    stored = fake.pod_now(KEY)
    stored["status"]["observedGeneration"] = stored["metadata"]["generation"]
    stored["status"]["containerStatuses"][0]["resources"] = {
        "requests": {"cpu": "0.8", "memory": "268435456"},
        "limits": {"cpu": "800000000n", "memory": "256Mi"},
    }
    fake.sync()
    run(rec.reconcile(KEY))
    assert reasons(fake) == ["Resized"]


def test_a_pod_already_at_its_size_is_only_marked_applied():
    fake = cluster(pod(stamped=True), family="n2d")
    run(reconciler(fake).reconcile(KEY))
    assert fake.ops() == ["annotate"]
    assert reasons(fake) == ["AlreadyAligned"]


def sized_on_n4(cpu: str = "800m", recorded_size: bool = True) -> dict[str, Any]:
    """A pod the reconciler sized for n4 earlier: originals of 1 CPU, spec at `cpu` (and, unless
    sized by a version before applied-size, the digest of that spec)."""
    originals = missing_original_annotations(pod())
    sized = pod(cpu=cpu, annotations={**originals, APPLIED_INSTANCE_TYPE: "n4"})
    if recorded_size:
        sized["metadata"]["annotations"][APPLIED_SIZE] = spec_size(sized)
    sized["metadata"]["generation"] = 2  # resized once
    sized["metadata"]["annotations"].update(pod_mac(sized, KEYS))  # step 3 bound the originals to it
    return sized


def test_an_unstamped_pod_already_at_its_size_gets_its_originals_and_applied_in_one_conditional_write():
    fake = cluster(pod(), family="n2d")
    read = fake.cache[KEY]["metadata"]["resourceVersion"]
    run(reconciler(fake).reconcile(KEY))
    assert fake.ops() == ["annotate"]
    write = fake.writes[0]
    assert set(write.body) == set(missing_original_annotations(pod())) | {
        ORIGINALS_MAC,
        APPLIED_INSTANCE_TYPE,
        APPLIED_SIZE,
        "workload-resizer.io/applied-at",
    }
    assert write.resource_version == read
    assert reasons(fake) == ["AlreadyAligned"]
    stored = fake.pod_now(KEY)
    assert baseline(stored, KEYS).check.trust is Trust.TRUSTED, "the MAC covers the originals written with it"
    assert annotations(fake)[APPLIED_SIZE] == spec_size(stored)
    run(reconciler(fake).reconcile(KEY))
    assert fake.ops() == ["annotate"], "recorded as aligned: nothing more to do"


def test_a_conflict_on_the_one_write_of_an_aligned_pod_takes_the_two_steps():
    fake = cluster(pod(), family="n2d")
    fake.fail("annotate", ApiError(409, {"reason": "Conflict", "message": "modified"}))
    run(reconciler(fake).reconcile(KEY))
    assert fake.ops() == ["annotate", "annotate"]
    assert set(fake.writes[0].body) == set(missing_original_annotations(pod())) | {ORIGINALS_MAC}
    assert APPLIED_INSTANCE_TYPE in fake.writes[1].body and reasons(fake) == ["AlreadyAligned"]
    assert baseline(fake.pod_now(KEY), KEYS).check.trust is Trust.TRUSTED


def test_a_rejected_one_write_of_an_aligned_pod_is_reported_and_writes_nothing_else():
    fake = cluster(pod(), family="n2d")
    fake.fail("annotate", ApiError(422, {"reason": "Invalid", "message": "metadata.annotations: Too long"}))
    run(reconciler(fake).reconcile(KEY))
    assert fake.writes == [] and reasons(fake) == ["ResizeFailed"]
    assert "cannot record the original resources" in fake.events[0].message


def test_a_pod_applied_for_its_node_type_is_left_alone():
    fake = cluster(sized_on_n4())
    run(reconciler(fake).reconcile(KEY))
    assert fake.writes == [] and fake.events == []


def test_without_realignment_an_applied_pod_is_left_alone_whatever_its_size():
    fake = cluster(pod(stamped=True, annotations={APPLIED_INSTANCE_TYPE: "n4"}))
    run(reconciler(fake, realign=False).reconcile(KEY))
    assert fake.writes == [] and fake.events == []


def test_a_config_change_re_aligns_a_sized_pod_from_its_originals():
    faster = load_config(SAMPLE_CONFIG.replace("cpuPerf: 1.25", "cpuPerf: 2.0"))
    fake = cluster(sized_on_n4(), auto_actuate=True)
    rec = reconciler(fake, config=faster)
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))  # the kubelet's status: actuated
    assert fake.ops() == ["resize", "annotate"]
    assert spec_cpu(fake) == ("500m", "500m")  # 1 CPU / 2, not 800m / 2
    assert reasons(fake) == ["Resized"] and fake.events[0].message.startswith("re-aligned for node type n4")


def test_a_re_alignment_in_flight_is_followed_to_actuation_through_the_watch():
    faster = load_config(SAMPLE_CONFIG.replace("cpuPerf: 1.25", "cpuPerf: 2.0"))
    fake = cluster(sized_on_n4(), auto_actuate=True)
    rec = reconciler(fake, config=faster)
    node = run(fake.node("node-1"))
    assert rec.needs_work(fake.pod(KEY), node)
    run(rec.reconcile(KEY))  # the resize
    # The kubelet's status update arrives after the config version was already checked:
    # the pod is still queued, because its re-alignment is in flight.
    assert rec.needs_work(fake.pod(KEY), node)
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize", "annotate"] and reasons(fake) == ["Resized"]
    assert not rec.needs_work(fake.pod(KEY), node)  # done: nothing more to follow


def test_a_resize_the_kubelet_has_not_reported_on_is_not_reconciled_again_until_it_does():
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    node = run(fake.node("node-1"))
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize"]
    rec.observe(fake.pod(KEY))
    assert not rec.needs_work(fake.pod(KEY), node), "the event of our own write: nothing to do until the kubelet speaks"
    fake.actuate(KEY)
    assert rec.needs_work(fake.pod(KEY), node), "the kubelet's status: followed"
    run(rec.reconcile(KEY))
    assert reasons(fake) == ["Resized"]


def test_a_config_change_while_the_kubelet_is_silent_resizes_again_for_the_new_config():
    faster = load_config(SAMPLE_CONFIG.replace("cpuPerf: 1.25", "cpuPerf: 2.0"))
    fake = cluster(pod(stamped=True))
    config = FakeConfig(CONFIG)
    rec = PodResizeReconciler(
        fake, fake, fake, config, ControllerSettings(node_type_label=LABEL), no_fault, FakeClock()
    )
    node = run(fake.node("node-1"))
    run(rec.reconcile(KEY))
    config.config, config.generation = faster, 2
    assert rec.needs_work(fake.pod(KEY), node)
    run(rec.reconcile(KEY))
    assert fake.ops()[-2:] == ["resize", "resize"] and fake.ops().count("resize") == 2
    assert spec_cpu(fake) == ("500m", "500m")


def test_the_watch_event_of_the_applied_annotation_does_not_re_plan_the_pod(monkeypatch):
    fake = cluster(pod(stamped=True), auto_actuate=True)
    rec = reconciler(fake)
    node = run(fake.node("node-1"))
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))
    assert reasons(fake) == ["Resized"]

    def no_plan(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("re-planned a pod sized a moment ago with the same config")

    monkeypatch.setattr("reconciler.decide.plan_bound_pod", no_plan)
    monkeypatch.setattr("reconciler.decide.plan_resize", no_plan)
    rec.observe(fake.pod(KEY))
    assert not rec.needs_work(fake.pod(KEY), node)


FASTER = load_config(SAMPLE_CONFIG.replace("cpuPerf: 1.25", "cpuPerf: 2.0"))


def test_applied_records_the_size_it_reports():
    fake = cluster(pod(stamped=True), auto_actuate=True)
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))
    assert annotations(fake)[APPLIED_SIZE] == spec_size(fake.pod_now(KEY))
    assert spec_size(fake.pod_now(KEY)) != spec_size(pod()), "the digest is of the resized spec"


def test_the_recorded_size_is_by_value():
    assert spec_size(pod(cpu="1")) == spec_size(pod(cpu="1000m"))
    assert spec_size(pod(cpu="1")) != spec_size(pod(cpu="999m"))


def test_a_re_alignment_interrupted_by_a_restart_is_followed_to_one_resized():
    fake = cluster(sized_on_n4())
    with pytest.raises(Crash):
        run(reconciler(fake, config=FASTER, fault=crash_after(Step.RESIZE)).reconcile(KEY))
    assert spec_cpu(fake) == ("500m", "500m") and fake.events == []
    second = reconciler(fake, config=FASTER)  # a new process: applied says n4, the spec holds 500m
    node = run(fake.node("node-1"))
    assert second.needs_work(fake.pod(KEY), node), "the unreported re-alignment is worth a reconcile"
    run(second.reconcile(KEY))
    assert fake.ops() == ["resize"] and fake.events == [], "not actuated yet: nothing to report, nothing to resize"
    fake.actuate(KEY)
    assert second.needs_work(fake.pod(KEY), node)
    run(second.reconcile(KEY))
    assert fake.ops() == ["resize", "annotate"] and generation(fake) == 3, "one resize (sized_on_n4 is at 2)"
    assert reasons(fake) == ["Resized"]
    assert fake.events[0].message.startswith("re-aligned for node type n4")
    assert "requested before this reconciler started" in fake.events[0].message
    assert annotations(fake)[APPLIED_SIZE] == spec_size(fake.pod_now(KEY))
    third = reconciler(fake, config=FASTER)
    assert third.needs_work(fake.pod(KEY), node), "a new process decides a sized pod once (the filter never plans)"
    run(third.reconcile(KEY))
    assert reasons(fake) == ["Resized"] and len(fake.writes) == 2
    assert not third.needs_work(fake.pod(KEY), node)


def test_a_re_alignment_deferred_across_a_restart_is_reported_once_then_followed():
    fake = cluster(sized_on_n4())
    with pytest.raises(Crash):
        run(reconciler(fake, config=FASTER, fault=crash_after(Step.RESIZE)).reconcile(KEY))
    fake.defer(KEY)
    second = reconciler(fake, config=FASTER)
    run(second.reconcile(KEY))
    run(second.reconcile(KEY))  # the watch event of its own state record
    assert events(fake) == [("Normal", "ResizeDeferred")] and recorded_state(fake).state == Stage.DEFERRED
    third = reconciler(fake, config=FASTER)  # and another restart while deferred
    run(third.reconcile(KEY))
    assert reasons(fake) == ["ResizeDeferred"] and fake.ops() == ["resize", "annotate"]
    fake.actuate(KEY)
    run(third.reconcile(KEY))
    assert reasons(fake) == ["ResizeDeferred", "Resized"] and generation(fake) == 3
    assert RESIZE_STATE not in annotations(fake)


def test_a_pod_sized_before_applied_size_existed_is_not_followed_after_a_restart():
    """Without the recorded size nothing tells our re-alignment from anybody's resize: left alone (as before)."""
    fake = cluster(sized_on_n4(cpu="500m", recorded_size=False))
    rec = reconciler(fake, config=FASTER)
    run(rec.reconcile(KEY))
    assert fake.writes == [] and fake.events == []
    assert not rec.needs_work(fake.pod(KEY), run(fake.node("node-1")))


def test_an_unreported_size_with_unreadable_originals_is_not_followed_and_raises_nothing():
    sized = sized_on_n4()
    for key in missing_original_annotations(pod()):
        sized["metadata"]["annotations"][key] = "lots"
    sized["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "500m"
    sized["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "500m"
    fake = cluster(sized)
    rec = reconciler(fake, config=FASTER)
    run(rec.reconcile(KEY))
    assert fake.writes == []
    assert not rec.needs_work(fake.pod(KEY), run(fake.node("node-1")))


def test_a_lagging_cache_after_a_re_alignment_is_not_mistaken_for_an_unreported_one():
    fake = cluster(sized_on_n4(), auto_actuate=True)
    rec = reconciler(fake, config=FASTER)
    run(rec.reconcile(KEY))
    fake.lagging_cache = True
    fake.sync()  # the kubelet's status arrives; then applied is written, not yet seen
    run(rec.reconcile(KEY))
    assert rec.needs_work(fake.pod(KEY), run(fake.node("node-1"))) is False
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize", "annotate"] and reasons(fake) == ["Resized"]


def test_a_spec_someone_else_changed_is_not_reported_as_our_re_alignment():
    """The recorded size differs, but the spec is not the plan: that is not our resize."""
    fake = cluster(sized_on_n4())
    fake.pods[KEY]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "700m"
    fake.pods[KEY]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "700m"
    fake.sync()
    fake.actuate(KEY)
    rec = reconciler(fake, realign=False)
    assert not rec.needs_work(fake.pod(KEY), run(fake.node("node-1")))
    run(rec.reconcile(KEY))
    assert fake.events == [] and fake.writes == []


def test_needs_work_passes_a_sized_pod_once_per_config_version():
    """The filter never plans: a sized pod is decided again once per config version, by the pass."""
    node = {"metadata": {"name": "node-1", "labels": {LABEL: "n4"}}}
    faster = load_config(SAMPLE_CONFIG.replace("cpuPerf: 1.25", "cpuPerf: 2.0"))
    config = FakeConfig(CONFIG)
    fake = cluster(sized_on_n4())
    rec = PodResizeReconciler(fake, fake, fake, config, ControllerSettings(node_type_label=LABEL))
    assert rec.needs_work(sized_on_n4(), node)  # not decided under this config version yet
    run(rec.reconcile(KEY))
    assert fake.writes == [], "this config changes nothing for it"
    assert not rec.needs_work(sized_on_n4(), node)  # asked once per config version
    config.config, config.generation = faster, 2
    assert rec.needs_work(sized_on_n4(), node)  # the new one is decided
    assert not rec.needs_work(sized_on_n4(), node)  # asked once per config version
    off = PodResizeReconciler(
        *(cluster(),) * 3, FakeConfig(faster, 2), ControllerSettings(node_type_label=LABEL, realign=False)
    )
    assert not off.needs_work(sized_on_n4(), node)


def test_a_lagging_cache_does_not_cause_a_second_resize():
    fake = cluster(pod(stamped=True))
    fake.lagging_cache = True
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))  # the cache still shows the pod before our resize
    assert fake.ops() == ["resize"]


def test_a_lagging_cache_after_applied_does_not_cause_a_second_pass():
    fake = cluster(pod(stamped=True), auto_actuate=True)
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    fake.lagging_cache = True
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))  # applied written, the cache does not show it yet
    assert fake.ops() == ["resize", "annotate"] and reasons(fake) == ["Resized"]


def test_a_conflict_on_the_originals_rereads_the_pod_once():
    fake = cluster(pod())
    fake.fail("annotate", ApiError(409, {"reason": "Conflict", "message": "modified"}))
    run(reconciler(fake).reconcile(KEY))
    assert fake.ops() == ["annotate", "resize"]
    assert spec_cpu(fake) == ("800m", "800m")


def test_a_retryable_resize_failure_raises_and_the_retry_resizes_once():
    fake = cluster(pod(stamped=True))
    fake.fail("resize", ApiError(500, {"message": "etcd hiccup"}))
    rec = reconciler(fake)
    with pytest.raises(ApiError):
        run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize"]


def test_missing_config_requeues_without_writing():
    fake = cluster(pod())
    assert run(reconciler(fake, config=None).reconcile(KEY)) == Result(requeue_after=5.0)
    assert fake.writes == []


def test_an_untyped_node_is_skipped_silently():
    fake = cluster(pod(), family=None)
    run(reconciler(fake).reconcile(KEY))
    assert fake.writes == [] and fake.events == []


def test_dry_run_reports_what_it_would_do_and_writes_nothing():
    fake = cluster(pod())
    run(reconciler(fake, dry_run=True).reconcile(KEY))
    assert fake.writes == [] and reasons(fake) == ["WouldResize"]


# ------------------------------------------------------------------ terminal decisions, once each


def test_an_unknown_node_type_is_reported_once_per_situation():
    fake = cluster(pod(stamped=True), family="z9")
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))
    assert fake.writes == [] and reasons(fake) == ["UnknownNodeType"]


def test_a_node_without_resize_support_is_reported_once():
    fake = cluster(pod(stamped=True))
    fake.fail("resize", ApiError(400, {"message": "Pod running on node without support for resize"}))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))
    assert reasons(fake) == ["ResizeUnsupported"] and fake.writes == []


def test_a_pod_deleted_during_its_resize_ends_silently():
    fake = cluster(pod(stamped=True))
    fake.fail("resize", ApiError(404, {"message": "not found"}))
    assert run(reconciler(fake).reconcile(KEY)) == DONE
    assert fake.events == []


def test_forgetting_a_deleted_pod_drops_its_decisions():
    fake = cluster(pod(stamped=True), family="z9")
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    rec.forget(fake.pod_now(KEY))
    run(rec.reconcile(KEY))
    assert reasons(fake) == ["UnknownNodeType", "UnknownNodeType"]


def test_a_pod_deleted_while_its_size_is_recorded_leaves_no_memory():
    fake = cluster(pod(stamped=True), auto_actuate=True)
    rec = reconciler(fake)
    record = fake.record

    async def deleted_meanwhile(pod: Any, annotations: Any, resource_version: str | None = None) -> None:
        await record(pod, annotations, resource_version)
        if APPLIED_INSTANCE_TYPE in annotations:
            rec.forget(pod)  # the pod's delete event, handled while the write's reply is awaited

    fake.record = deleted_meanwhile  # type: ignore[method-assign]
    for _ in range(3):
        run(rec.reconcile(KEY))
        if APPLIED_INSTANCE_TYPE in fake.pod_now(KEY)["metadata"]["annotations"]:
            break
    assert reasons(fake) == ["Resized"]
    assert fake.pod_now(KEY)["metadata"]["uid"] not in rec._memory


# ------------------------------------------------------------------ crash after each write step


@pytest.mark.parametrize(
    ("step", "first_ops", "second_ops", "second_reasons"),
    [
        (Step.ORIGINALS, ["annotate"], ["resize", "annotate"], ["Resized"]),
        (Step.RESIZE, ["annotate", "resize"], ["annotate"], ["Resized"]),
        (Step.APPLIED, ["annotate", "resize", "annotate"], [], []),
    ],
)
def test_a_crash_after_each_step_converges_without_compounding(step, first_ops, second_ops, second_reasons):
    fake = cluster(pod(), auto_actuate=True)
    first = reconciler(fake, fault=crash_after(step))
    with pytest.raises(Crash):
        run(first.reconcile(KEY))
        run(first.reconcile(KEY))  # the watch event of the kubelet's status
    assert fake.ops() == first_ops and fake.events == []
    before = len(fake.writes)
    second = reconciler(fake)  # a new process: no memory of the first
    run(second.reconcile(KEY))
    run(second.reconcile(KEY))
    assert [w.op for w in fake.writes[before:]] == second_ops
    assert reasons(fake) == second_reasons
    assert spec_cpu(fake) == ("800m", "800m"), "resized once, from the originals"
    assert annotations(fake)[APPLIED_INSTANCE_TYPE] == "n4"
    assert fake.ops().count("resize") == 1 and generation(fake) == 2


def test_a_restart_while_the_resize_is_in_flight_follows_it_to_one_resized():
    fake = cluster(pod(stamped=True))
    with pytest.raises(Crash):
        run(reconciler(fake, fault=crash_after(Step.RESIZE)).reconcile(KEY))
    second = reconciler(fake)
    run(second.reconcile(KEY))
    assert fake.ops() == ["resize"], "the spec holds the plan: nothing to resize again"
    fake.actuate(KEY)
    run(second.reconcile(KEY))
    run(second.reconcile(KEY))
    assert reasons(fake) == ["Resized"] and generation(fake) == 2
    assert "requested before this reconciler started" in fake.events[0].message


# ------------------------------------------------------------------ Deferred


def deferred_pod(clock: FakeClock | None = None, **options: Any) -> tuple[FakeCluster, PodResizeReconciler]:
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake, clock=clock, **options)
    run(rec.reconcile(KEY))
    fake.defer(KEY, "Node didn't have enough resource: cpu, requested: 800, used: 7500, capacity: 8000")
    return fake, rec


def test_a_deferred_resize_is_recorded_and_reported_once_then_waited_for():
    fake, rec = deferred_pod()
    result = run(rec.reconcile(KEY))
    assert result.requeue_after is not None, "a timer for the too-long warning, not a poll of the API"
    for _ in range(3):
        run(rec.reconcile(KEY))  # more watch events while deferred
    assert events(fake) == [("Normal", "ResizeDeferred")]
    assert "requested: 800" in fake.events[0].message
    assert fake.ops() == ["resize", "annotate"]
    assert recorded_state(fake).state == Stage.DEFERRED
    assert spec_cpu(fake) == ("800m", "800m"), "deferred resizes are kept: the kubelet retries them"


def test_a_deferred_resize_that_becomes_possible_ends_resized_and_clears_the_state():
    fake, rec = deferred_pod()
    run(rec.reconcile(KEY))
    fake.actuate(KEY)
    run(rec.reconcile(KEY))
    assert reasons(fake) == ["ResizeDeferred", "Resized"]
    assert RESIZE_STATE not in annotations(fake) and annotations(fake)[APPLIED_INSTANCE_TYPE] == "n4"


def test_a_restarted_reconciler_does_not_report_the_same_deferral_again():
    fake, rec = deferred_pod()
    run(rec.reconcile(KEY))
    run(reconciler(fake).reconcile(KEY))
    assert reasons(fake) == ["ResizeDeferred"] and fake.ops() == ["resize", "annotate"]


def test_a_resize_deferred_too_long_gets_one_warning():
    clock = FakeClock(now=1_767_225_600.0)  # 2026-01-01T00:00:00Z, when the fake kubelet deferred it
    fake, rec = deferred_pod(clock=clock, deferred_timeout=600.0)
    assert run(rec.reconcile(KEY)).requeue_after == pytest.approx(601.0)
    clock.advance(601)
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))
    assert events(fake) == [("Normal", "ResizeDeferred"), ("Warning", "ResizeDeferred")]
    assert "still deferred after 10m1s" in fake.events[1].message
    assert recorded_state(fake).warned
    assert spec_cpu(fake) == ("800m", "800m")


# ------------------------------------------------------------------ Infeasible


def test_an_infeasible_resize_is_reported_and_the_spec_set_back_to_what_runs():
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    fake.mark_infeasible(KEY, "Resize is infeasible for Guaranteed Pods alongside CPU Manager static policy")
    run(rec.reconcile(KEY))
    assert events(fake) == [("Warning", "ResizeInfeasible")]
    assert "CPU Manager static policy" in fake.events[0].message
    assert fake.ops() == ["resize", "annotate", "resize"]
    assert fake.writes[-1].body == BACK_TO_1
    assert spec_cpu(fake) == ("1", "1"), "the spec does not lie about what the pod has"
    state = recorded_state(fake)
    assert (state.state, state.node_type, state.allocatable) == (Stage.INFEASIBLE, "n4", "cpu=8,memory=32Gi")


def test_the_event_of_recording_infeasible_does_not_revert_a_second_time():
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    fake.mark_infeasible(KEY)
    fake.lagging_cache = True
    run(rec.reconcile(KEY))  # record, report, revert
    # The watch now delivers the pod as our record left it: state recorded, spec not yet set back.
    between = copy.deepcopy(fake.pod_now(KEY))
    between["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "800m", "memory": "256Mi"},
        "limits": {"cpu": "800m", "memory": "256Mi"},
    }
    between["metadata"]["generation"] -= 1
    fake.cache[KEY] = slim_pod(between)
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize", "annotate", "resize"] and reasons(fake) == ["ResizeInfeasible"]


def set_back_as_infeasible() -> tuple[FakeCluster, PodResizeReconciler]:
    """A pod resized, marked Infeasible by the kubelet, then set back and settled."""
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    fake.mark_infeasible(KEY)
    run(rec.reconcile(KEY))
    fake.settle(KEY)
    return fake, rec


def test_an_infeasible_size_is_not_retried_while_node_and_plan_stay_the_same():
    fake, rec = set_back_as_infeasible()
    for reconciler_ in (rec, reconciler(fake)):  # this process, and a restarted one
        for _ in range(3):
            run(reconciler_.reconcile(KEY))
        assert not reconciler_.needs_work(fake.pod(KEY), run(fake.node("node-1")))
    assert fake.ops() == ["resize", "annotate", "resize"] and reasons(fake) == ["ResizeInfeasible"]


def test_an_infeasible_size_is_retried_when_the_node_allocatable_changes():
    fake, rec = set_back_as_infeasible()
    fake.add_node("node-1", {LABEL: "n4"}, cpu="16")
    assert rec.needs_work(fake.pod(KEY), run(fake.node("node-1")))
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize", "annotate", "resize", "resize"]
    assert fake.writes[-1].body == RESIZE_TO_800M


def test_a_size_the_kubelet_actuates_while_its_infeasible_mark_is_being_read_is_not_set_back():
    """The node grew: the kubelet took the size it had marked Infeasible, but the cache still
    shows the mark. Nothing is recorded or set back (both writes are conditional on the pod
    as read); the newer pod, once delivered, is reported Resized."""
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    fake.mark_infeasible(KEY)
    stale = copy.deepcopy(fake.cache[KEY])
    fake.actuate(KEY)
    fake.cache[KEY] = stale
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize"] and reasons(fake) == []
    assert spec_cpu(fake) == ("800m", "800m")
    fake.sync()
    run(rec.reconcile(KEY))
    assert reasons(fake) == ["Resized"] and spec_cpu(fake) == ("800m", "800m")
    assert annotations(fake)[APPLIED_INSTANCE_TYPE] == "n4" and RESIZE_STATE not in annotations(fake)


def test_the_revert_of_a_recorded_infeasible_size_is_conditional_on_the_pod_as_read():
    """After a crash between recording Infeasible and the revert, the kubelet actuated the size
    meanwhile and the cache lags: the revert is refused by the precondition, not sent blind."""
    fake = cluster(pod(stamped=True))
    run(reconciler(fake).reconcile(KEY))
    fake.mark_infeasible(KEY)
    with pytest.raises(Crash):
        run(reconciler(fake, fault=crash_after(Step.STATE)).reconcile(KEY))
    fake.sync()
    stale = copy.deepcopy(fake.cache[KEY])
    fake.actuate(KEY)
    fake.cache[KEY] = stale
    run(reconciler(fake).reconcile(KEY))
    assert fake.ops() == ["resize", "annotate"] and spec_cpu(fake) == ("800m", "800m"), "no revert sent"


def test_an_infeasible_size_still_infeasible_after_the_node_changed_is_parked_at_the_new_allocatable():
    """Retried because the allocatable changed, and still refused: recorded again (with the new
    allocatable) and reported again, then left alone until the node changes once more."""
    fake, rec = set_back_as_infeasible()
    fake.add_node("node-1", {LABEL: "n4"}, cpu="6")
    run(rec.reconcile(KEY))
    fake.mark_infeasible(KEY)
    run(rec.reconcile(KEY))
    fake.settle(KEY)
    assert recorded_state(fake).allocatable == "cpu=6,memory=32Gi"
    assert reasons(fake) == ["ResizeInfeasible", "ResizeInfeasible"] and spec_cpu(fake) == ("1", "1")
    assert not rec.needs_work(fake.pod(KEY), run(fake.node("node-1")))
    assert fake.ops() == ["resize", "annotate", "resize", "resize", "annotate", "resize"]


def test_an_infeasible_size_is_retried_when_the_config_plans_another_size():
    fake, rec = set_back_as_infeasible()
    faster = load_config(SAMPLE_CONFIG.replace("cpuPerf: 1.25", "cpuPerf: 2.0"))
    rec2 = reconciler(fake, config=faster)
    assert rec2.needs_work(fake.pod(KEY), run(fake.node("node-1")))
    run(rec2.reconcile(KEY))
    assert fake.writes[-1].op == "resize" and spec_cpu(fake) == ("500m", "500m")


def test_a_crash_between_recording_infeasible_and_the_revert_still_reverts_without_a_second_report():
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    fake.mark_infeasible(KEY)
    rec._context.fault = crash_after(Step.STATE)  # the record bound the originals it resized from to the pod
    with pytest.raises(Crash):
        run(rec.reconcile(KEY))
    run(reconciler(fake).reconcile(KEY))
    assert spec_cpu(fake) == ("1", "1") and fake.ops() == ["resize", "annotate", "resize"]
    assert len(fake.events) <= 1


def test_a_crash_right_after_the_revert_leaves_the_pod_parked_and_reported_once():
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    fake.mark_infeasible(KEY)
    rec._context.fault = crash_after(Step.REVERT)
    with pytest.raises(Crash):
        run(rec.reconcile(KEY))
    fake.settle(KEY)
    restarted = reconciler(fake)
    run(restarted.reconcile(KEY))
    assert spec_cpu(fake) == ("1", "1") and fake.ops() == ["resize", "annotate", "resize"]
    assert reasons(fake) == ["ResizeInfeasible"], "reported before the revert, not again after the restart"
    assert not restarted.needs_work(fake.pod(KEY), run(fake.node("node-1")))


def test_a_crash_after_recording_a_deferral_does_not_report_it_again():
    fake, _ = deferred_pod()
    with pytest.raises(Crash):
        run(reconciler(fake, fault=crash_after(Step.STATE)).reconcile(KEY))
    run(reconciler(fake).reconcile(KEY))
    assert fake.ops() == ["resize", "annotate"] and reasons(fake) == []
    fake.actuate(KEY)
    run(reconciler(fake).reconcile(KEY))
    assert reasons(fake) == ["Resized"] and generation(fake) == 2


def node_capacity_refusal() -> ApiError:
    """The 1.36+ apiserver's PodResizeValidator refusal."""
    return ApiError(
        403,
        {
            "message": "node didn't have enough allocatable resources: cpu, requested: 800, allocatable: 500",
            "details": {"causes": [{"reason": "NodeCapacity"}]},
        },
    )


def on_a_node_too_small(*pods: dict[str, Any]) -> FakeCluster:
    """A node whose allocatable (as the cache shows it) is below even the planned 800m."""
    fake = cluster(*pods)
    fake.add_node("node-1", {LABEL: "n4"}, cpu="500m")
    return fake


def test_the_apiservers_node_capacity_refusal_is_infeasible_and_not_retried():
    fake = on_a_node_too_small(pod(stamped=True))
    fake.fail("resize", node_capacity_refusal())
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))
    run(reconciler(fake).reconcile(KEY))
    assert events(fake) == [("Warning", "ResizeInfeasible")] and "cannot fit" in fake.events[0].message
    assert fake.ops() == ["annotate"] and recorded_state(fake).state == Stage.INFEASIBLE


def test_a_node_capacity_refusal_of_a_size_the_cached_node_fits_is_retried_as_a_lagging_cache():
    """The node just grew: our watch shows it, the apiserver's admission still judges by its own
    cache of the node. The resize is tried again with backoff, not parked at the new allocatable
    (where nothing would ever try it again), and goes through once that cache catches up."""
    fake = cluster(pod(stamped=True))  # 8 CPU allocatable: 800m fits
    fake.fail("resize", node_capacity_refusal())
    rec = reconciler(fake, clock=FakeClock())
    with pytest.raises(ApiError):
        run(rec.reconcile(KEY))
    assert fake.ops() == [] and fake.events == [] and RESIZE_STATE not in annotations(fake)
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize"] and fake.writes[-1].body == RESIZE_TO_800M


def test_a_node_capacity_refusal_the_cached_node_fits_is_parked_once_it_outlasts_any_cache_lag():
    fake = cluster(pod(stamped=True))
    clock = FakeClock()
    rec = reconciler(fake, clock=clock)
    for _ in range(3):
        fake.fail("resize", node_capacity_refusal())
        with pytest.raises(ApiError):
            run(rec.reconcile(KEY))
        clock.advance(10)
    fake.fail("resize", node_capacity_refusal())
    run(rec.reconcile(KEY))
    assert events(fake) == [("Warning", "ResizeInfeasible")] and recorded_state(fake).state == Stage.INFEASIBLE
    assert not rec.needs_work(fake.pod(KEY), run(fake.node("node-1")))


# ------------------------------------------------------------------ actuation errors


def failing_pod(clock: FakeClock) -> tuple[FakeCluster, PodResizeReconciler]:
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake, clock=clock, error_retries=3, error_backoff=30.0)
    run(rec.reconcile(KEY))
    fake.fail_actuation(KEY, "attempting to set container memory limit below current usage")
    return fake, rec


def test_an_actuation_error_is_reported_once_with_the_kubelets_message():
    clock = FakeClock()
    fake, rec = failing_pod(clock)
    assert run(rec.reconcile(KEY)).requeue_after == pytest.approx(30.0)
    run(rec.reconcile(KEY))
    assert events(fake) == [("Warning", "ResizeError")]
    assert "below current usage" in fake.events[0].message
    assert recorded_state(fake).state == Stage.ERROR


def test_an_actuation_error_is_rechecked_with_backoff_then_the_spec_is_set_back():
    clock = FakeClock()
    fake, rec = failing_pod(clock)
    delays = []
    for _ in range(10):
        result = run(rec.reconcile(KEY))
        if result.requeue_after is None:
            break
        delays.append(round(result.requeue_after))
        clock.advance(result.requeue_after)
    assert delays == [30, 60, 120]
    assert events(fake) == [("Warning", "ResizeError"), ("Warning", "ResizeError")]
    assert "after 3 checks" in fake.events[1].message
    assert spec_cpu(fake) == ("1", "1") and fake.writes[-1].body == BACK_TO_1
    fake.settle(KEY)
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize", "annotate", "resize"], "the failing size is not retried"


def test_an_actuation_error_that_clears_ends_resized():
    clock = FakeClock()
    fake, rec = failing_pod(clock)
    run(rec.reconcile(KEY))
    fake.actuate(KEY)
    run(rec.reconcile(KEY))
    assert reasons(fake) == ["ResizeError", "Resized"] and RESIZE_STATE not in annotations(fake)


def test_the_watch_event_of_a_failing_resize_the_kubelet_then_actuates_is_not_filtered_out():
    """The failing size is parked, but our resize is still in flight: the filter lets the event of
    the kubelet's successful retry through, so the pass reports Resized."""
    clock = FakeClock()
    fake, rec = failing_pod(clock)
    run(rec.reconcile(KEY))  # ResizeError recorded
    fake.actuate(KEY)
    assert rec.needs_work(fake.pod(KEY), run(fake.node("node-1")))
    run(rec.reconcile(KEY))
    assert reasons(fake) == ["ResizeError", "Resized"]


def test_a_failing_resize_the_kubelet_actuates_as_we_give_up_is_not_set_back():
    """The give-up revert is conditional on the pod as read: the kubelet got it right meanwhile
    (the cache has not shown it yet), so nothing is set back and the newer pod ends Resized."""
    clock = FakeClock()
    fake, rec = failing_pod(clock)
    for _ in range(3):  # reported, rechecked after 30 s and 60 s; the check after 120 s gives up
        clock.advance(run(rec.reconcile(KEY)).requeue_after)
    stale = copy.deepcopy(fake.cache[KEY])
    fake.actuate(KEY)
    fake.cache[KEY] = stale
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize", "annotate"] and reasons(fake) == ["ResizeError"], "no revert, no give-up"
    fake.sync()
    run(rec.reconcile(KEY))
    assert reasons(fake) == ["ResizeError", "Resized"] and spec_cpu(fake) == ("800m", "800m")


def test_a_crash_after_recording_an_actuation_error_reports_it_once_and_still_gives_up_in_bounds():
    clock = FakeClock()
    fake, rec = failing_pod(clock)
    rec._context.fault = crash_after(Step.STATE)  # the record bound the originals it resized from to the pod
    with pytest.raises(Crash):
        run(rec.reconcile(KEY))
    restarted = reconciler(fake, clock=clock, error_retries=3, error_backoff=30.0)
    checks = 0
    while (result := run(restarted.reconcile(KEY))).requeue_after is not None:
        checks += 1
        assert checks < 10, "bounded"
        clock.advance(result.requeue_after)
    assert fake.ops() == ["resize", "annotate", "resize"], "recorded once, set back once"
    assert reasons(fake) == ["ResizeError"], "the first report died with the process; only the give-up is sent"
    assert spec_cpu(fake) == ("1", "1")


def test_a_crash_right_after_giving_up_on_an_actuation_error_leaves_the_pod_parked():
    clock = FakeClock()
    fake, rec = failing_pod(clock)
    rec._context.fault = crash_after(Step.REVERT)
    with pytest.raises(Crash):
        while (result := run(rec.reconcile(KEY))).requeue_after is not None:
            clock.advance(result.requeue_after)
    assert reasons(fake) == ["ResizeError"] and spec_cpu(fake) == ("1", "1")
    fake.settle(KEY)
    restarted = reconciler(fake, clock=clock)
    for _ in range(3):
        run(restarted.reconcile(KEY))
    assert not restarted.needs_work(fake.pod(KEY), run(fake.node("node-1")))
    assert fake.ops() == ["resize", "annotate", "resize"], "the failing size is not tried again"
    assert reasons(fake) == ["ResizeError"], "the give-up Event died with the process, never repeated"


def test_a_crash_after_recording_the_apiservers_refusal_does_not_retry_the_size():
    fake = on_a_node_too_small(pod(stamped=True))
    fake.fail("resize", node_capacity_refusal())
    with pytest.raises(Crash):
        run(reconciler(fake, fault=crash_after(Step.STATE)).reconcile(KEY))
    restarted = reconciler(fake)
    run(restarted.reconcile(KEY))
    assert fake.ops() == ["annotate"] and fake.events == [] and generation(fake) == 1
    assert not restarted.needs_work(fake.pod(KEY), run(fake.node("node-1")))


def test_a_resize_refused_by_an_admission_plugin_still_starting_is_retried_not_reported():
    """Right after an apiserver starts, PodResizeValidator answers 403 until its node informer syncs."""
    fake = cluster(pod(stamped=True))
    fake.fail("resize", ApiError(403, {"message": 'pods "web-1" is forbidden: not yet ready to handle request'}))
    rec = reconciler(fake)
    with pytest.raises(ApiError):
        run(rec.reconcile(KEY))
    assert fake.events == [] and RESIZE_STATE not in annotations(fake)
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize"] and fake.writes[-1].body == RESIZE_TO_800M


def test_a_node_capacity_cause_sent_under_type_is_not_taken_for_one():
    """Only the Status's real shape (causes[].reason) means NodeCapacity; anything else is a plain refusal."""
    fake = cluster(pod(stamped=True))
    fake.fail("resize", ApiError(403, {"message": "forbidden", "details": {"causes": [{"type": "NodeCapacity"}]}}))
    run(reconciler(fake).reconcile(KEY))
    assert reasons(fake) == ["ResizeFailed"] and fake.writes == []


# ------------------------------------------------------------------ a forged status never steers a revert
#
# status.containerStatuses[].resources is written by the kubelet, and by anyone else who may
# update pods/status: a revert sets the spec back only to a size the product knows the pod had,
# never above what it had before our resize or the plan.

SEVEN = {"requests": {"cpu": "7", "memory": "16Gi"}, "limits": {"cpu": "7", "memory": "16Gi"}}
AT_800M = {"requests": {"cpu": "800m", "memory": "256Mi"}, "limits": {"cpu": "800m", "memory": "256Mi"}}
SLOWER = load_config(SAMPLE_CONFIG.replace("cpuPerf: 1.25", "cpuPerf: 0.5"))  # n4 grows 1 CPU to 2


def containers_report(fake: FakeCluster, resources: dict[str, Any]) -> None:
    """What the containers "have", as a status writer puts it (delivered with the next status write)."""
    fake.pod_now(KEY)["status"]["containerStatuses"][0]["resources"] = copy.deepcopy(resources)


def spec_resources(fake: FakeCluster) -> dict[str, Any]:
    return fake.pod_now(KEY)["spec"]["containers"][0]["resources"]


def resized_then_restarted(pod_: dict[str, Any], config: Any = CONFIG) -> FakeCluster:
    """The process that resized the pod died before the kubelet answered."""
    fake = cluster(pod_)
    with pytest.raises(Crash):
        run(reconciler(fake, config=config, fault=crash_after(Step.RESIZE)).reconcile(KEY))
    return fake


def test_a_forged_infeasible_status_never_sets_the_spec_to_what_it_reports(caplog):
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))  # 1 CPU -> 800m, in flight
    containers_report(fake, SEVEN)
    fake.mark_infeasible(KEY)
    for _ in range(3):  # and the watch events that follow
        run(rec.reconcile(KEY))
    assert fake.ops() == ["resize", "annotate"], "the state is recorded, nothing is set back"
    assert spec_resources(fake) == AT_800M
    assert events(fake) == [("Warning", "ResizeInfeasible"), ("Warning", "RevertRefused")]
    assert "the spec is kept" in fake.events[0].message
    assert "never set" in fake.events[1].message and "cpu 7" in fake.events[1].message
    assert any(r.levelname == "WARNING" and "never set" in r.getMessage() for r in caplog.records)
    state = recorded_state(fake)
    assert state.state == Stage.INFEASIBLE and state.kept
    run(reconciler(fake).reconcile(KEY))  # a restarted process: nothing twice
    assert fake.ops() == ["resize", "annotate"] and len(fake.events) == 2


@pytest.mark.parametrize("restart", [False, True], ids=["in-flight", "after-a-restart"])
def test_a_kept_infeasible_size_is_decided_again_on_the_pods_next_event(restart: bool) -> None:
    """The spec kept at the planned size (a forged status refused while the resize failed) is not
    set back, so it is not parked: the pod's next watch event gets a pass, also in a process that
    learnt of the resize only after a restart."""
    clock = FakeClock()
    fake, rec = failing_pod(clock)
    run(rec.reconcile(KEY))  # ResizeError recorded
    containers_report(fake, SEVEN)
    fake.mark_infeasible(KEY)
    process = reconciler(fake, clock=clock) if restart else rec
    run(process.reconcile(KEY))
    assert recorded_state(fake).kept and "RevertRefused" in reasons(fake)
    assert process.needs_work(fake.pod(KEY), run(fake.node("node-1")))
    run(process.reconcile(KEY))
    assert fake.ops() == ["resize", "annotate", "annotate"], "decided again, nothing set back"


def test_a_status_with_the_size_before_for_some_values_only_is_not_set_back():
    """Whole-pod: cpu as before, memory made up, is not a size the pod had."""
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    containers_report(fake, {"requests": {"cpu": "1", "memory": "16Gi"}, "limits": {"cpu": "1", "memory": "16Gi"}})
    fake.mark_infeasible(KEY)
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize", "annotate"] and spec_resources(fake) == AT_800M
    assert reasons(fake) == ["ResizeInfeasible", "RevertRefused"]


def test_during_a_re_alignment_the_originals_are_not_a_size_the_containers_had():
    """In flight from 800m to 500m: 1 CPU (the originals) is above what the pod had and the plan."""
    fake = cluster(sized_on_n4())
    rec = reconciler(fake, config=FASTER)
    run(rec.reconcile(KEY))
    containers_report(fake, {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}})
    fake.mark_infeasible(KEY)
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize", "annotate"] and spec_cpu(fake) == ("500m", "500m")
    assert reasons(fake) == ["ResizeInfeasible", "RevertRefused"]


def test_a_resize_replaced_before_the_kubelet_answered_still_sets_back_to_what_runs():
    """Resized to 800m, re-planned to 500m (config change) before the kubelet answered: the
    containers still have 1 CPU, the size before the first resize."""
    fake = cluster(pod(stamped=True))
    config = FakeConfig(CONFIG)
    rec = PodResizeReconciler(
        fake, fake, fake, config, ControllerSettings(node_type_label=LABEL), no_fault, FakeClock(), keyring=lambda: KEYS
    )
    run(rec.reconcile(KEY))
    config.config, config.generation = FASTER, 2
    run(rec.reconcile(KEY))
    fake.mark_infeasible(KEY)
    run(rec.reconcile(KEY))
    assert spec_cpu(fake) == ("1", "1") and fake.ops() == ["resize", "resize", "annotate", "resize"]
    assert reasons(fake) == ["ResizeInfeasible"]


def test_after_a_restart_a_forged_status_is_not_set_back_either():
    fake = resized_then_restarted(pod())  # step 1 bound the originals to the pod
    containers_report(fake, SEVEN)
    fake.mark_infeasible(KEY)
    run(reconciler(fake).reconcile(KEY))
    assert fake.ops() == ["annotate", "resize", "annotate"] and spec_resources(fake) == AT_800M
    assert reasons(fake) == ["ResizeInfeasible", "RevertRefused"]


def test_after_a_restart_the_pods_verified_originals_are_a_size_to_set_back_to():
    fake = resized_then_restarted(pod())
    fake.mark_infeasible(KEY)  # the containers still have 1 CPU
    run(reconciler(fake).reconcile(KEY))
    assert spec_cpu(fake) == ("1", "1") and fake.ops() == ["annotate", "resize", "annotate", "resize"]
    assert reasons(fake) == ["ResizeInfeasible"]


def test_after_a_restart_the_size_recorded_as_applied_is_a_size_to_set_back_to():
    fake = resized_then_restarted(sized_on_n4(), config=FASTER)  # a re-alignment 800m -> 500m
    fake.mark_infeasible(KEY)  # the containers still have 800m
    run(reconciler(fake, config=FASTER).reconcile(KEY))
    assert spec_cpu(fake) == ("800m", "800m") and reasons(fake) == ["ResizeInfeasible"]


def test_a_recorded_applied_size_never_lifts_a_revert_above_the_originals_and_the_plan():
    """applied-size is a record, not a credential: a pod created while the webhook was down may
    carry any digest, e.g. that of the very size its status writer then reports."""
    forged = pod()
    forged["metadata"]["annotations"][APPLIED_SIZE] = spec_size(pod(cpu="7", memory="16Gi"))
    fake = resized_then_restarted(forged)
    containers_report(fake, SEVEN)
    fake.mark_infeasible(KEY)
    run(reconciler(fake).reconcile(KEY))
    assert spec_resources(fake) == AT_800M and reasons(fake) == ["ResizeInfeasible", "RevertRefused"]


def test_after_a_restart_originals_signed_at_admission_only_never_lift_a_revert_above_the_plan():
    """Nothing tells originals only the webhook signed from ones minted for this pod
    (resizer.integrity): after a restart they are set back to only where that lowers the spec."""
    fake = resized_then_restarted(pod(stamped=True))
    fake.mark_infeasible(KEY)  # the containers have 1 CPU, above the plan
    run(reconciler(fake).reconcile(KEY))
    assert spec_cpu(fake) == ("800m", "800m") and reasons(fake) == ["ResizeInfeasible", "RevertRefused"]


def test_after_a_restart_originals_signed_at_admission_only_still_set_a_grown_spec_back_down():
    fake = resized_then_restarted(pod(stamped=True), config=SLOWER)  # 1 CPU -> 2
    fake.mark_infeasible(KEY)
    run(reconciler(fake, config=SLOWER).reconcile(KEY))
    assert spec_cpu(fake) == ("1", "1") and reasons(fake) == ["ResizeInfeasible"]


def test_a_failing_resize_with_a_forged_status_is_kept_at_the_plan_when_given_up():
    clock = FakeClock()
    fake, rec = failing_pod(clock)
    assert run(rec.reconcile(KEY)).requeue_after is not None  # reported, re-checked later
    containers_report(fake, SEVEN)
    fake.fail_actuation(KEY)
    while (result := run(rec.reconcile(KEY))).requeue_after is not None:
        clock.advance(result.requeue_after)
    assert fake.ops() == ["resize", "annotate", "annotate"], "the kept state recorded, nothing set back"
    assert events(fake) == [("Warning", "ResizeError"), ("Warning", "ResizeError"), ("Warning", "RevertRefused")]
    assert "the spec is kept" in fake.events[1].message
    assert spec_resources(fake) == AT_800M and recorded_state(fake).kept
    restarted = reconciler(fake, clock=clock, error_retries=3, error_backoff=30.0)
    for process in (rec, restarted):
        for _ in range(5):
            clock.advance(run(process.reconcile(KEY)).requeue_after or 0.0)
    assert fake.ops() == ["resize", "annotate", "annotate"] and len(fake.events) == 3, "nothing twice"


# ------------------------------------------------------------------ resized before the containers ran


def test_a_pod_resized_before_its_containers_ran_on_a_node_that_cannot_resize_is_reported_unsupported():
    fake = cluster(pod(stamped=True, running=False))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize"], "the apiserver accepts a resize before the containers run"
    run(rec.reconcile(KEY))
    assert fake.events == [], "containers not running yet: waiting"
    fake.start_containers(KEY, report_resources=False)
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))
    run(reconciler(fake).reconcile(KEY))
    assert events(fake) == [("Warning", "ResizeUnsupported")]
    assert recorded_state(fake).state == Stage.UNSUPPORTED
    assert not rec.needs_work(fake.pod(KEY), run(fake.node("node-1")))


def test_a_crash_after_recording_unsupported_reports_nothing_twice_and_writes_nothing_more():
    fake = cluster(pod(stamped=True, running=False))
    run(reconciler(fake).reconcile(KEY))
    fake.start_containers(KEY, report_resources=False)
    with pytest.raises(Crash):
        run(reconciler(fake, fault=crash_after(Step.STATE)).reconcile(KEY))
    restarted = reconciler(fake)
    assert not restarted.needs_work(fake.pod(KEY), run(fake.node("node-1")))
    run(restarted.reconcile(KEY))
    assert fake.ops() == ["resize", "annotate"] and fake.events == []


def test_a_pod_resized_before_its_containers_ran_on_a_capable_node_ends_resized():
    fake = cluster(pod(stamped=True, running=False))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    fake.start_containers(KEY)
    run(rec.reconcile(KEY))
    assert reasons(fake) == ["Resized"]


# ------------------------------------------------------------------ the manager's predicate and the gauge


def test_the_needs_work_predicate_follows_node_type_and_applied_marker():
    fake = cluster(pod(stamped=True), auto_actuate=True)
    rec = reconciler(fake)
    node = run(fake.node("node-1"))
    cached = fake.pod(KEY)
    assert rec.needs_work(cached, node)
    assert rec.needs_work(cached, None), "a node not cached yet is looked up by reconcile"
    untyped = copy.deepcopy(node)
    untyped["metadata"]["labels"] = {}
    assert not rec.needs_work(cached, untyped)
    run(rec.reconcile(KEY))
    assert rec.needs_work(fake.pod(KEY), node), "in flight: the kubelet's status updates are followed"
    run(rec.reconcile(KEY))
    assert not rec.needs_work(fake.pod(KEY), node)


# ------------------------------------------------------------------ whose originals (resizer.integrity)


def test_forged_unsigned_originals_on_an_unchanged_pod_are_replaced_from_the_spec_and_reported():
    forged = pod(
        cpu="500m",
        annotations={"workload-resizer.io/original-cpu.app": "16", "workload-resizer.io/original-cpu-limit.app": "16"},
    )
    fake = cluster(forged, auto_actuate=True)
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))  # the watch delivers the kubelet's status
    assert spec_cpu(fake) == ("400m", "400m"), "500m x 0.8, never 16 x 0.8"
    assert reasons(fake) == ["OriginalsReplaced", "Resized"]


def test_forged_originals_on_a_resized_pod_are_refused_with_a_warning_and_no_write():
    fake = cluster(pod(cpu="1"), auto_actuate=True)
    rec = reconciler(fake)
    run(rec.reconcile(KEY))  # resized to 800m
    run(rec.reconcile(KEY))  # actuated: applied, originals signed for this pod
    assert annotations(fake)[APPLIED_INSTANCE_TYPE] == "n4"
    stored = fake.pod_now(KEY)
    stored["metadata"]["annotations"].update(
        {"workload-resizer.io/original-cpu.app": "16", APPLIED_INSTANCE_TYPE: None}
    )
    stored["metadata"]["annotations"] = {k: v for k, v in stored["metadata"]["annotations"].items() if v is not None}
    fake.sync()
    before = len(fake.writes)
    run(reconciler(fake).reconcile(KEY))
    assert fake.writes[before:] == []
    assert reasons(fake)[-1] == "OriginalsUnverified"
    assert spec_cpu(fake) == ("800m", "800m")


def test_a_node_relabelled_before_the_kubelet_actuated_our_resize_gets_the_pod_resized_for_its_new_type():
    # Signed at admission only until step 3; the spec changed because of our own resize (soak drill).
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    assert spec_cpu(fake) == ("800m", "800m") and fake.events == []
    fake.add_node("node-1", {LABEL: "c3"})
    fake.sync()
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize", "resize"], "re-planned from the originals for c3, nothing refused"
    assert spec_cpu(fake) == ("769m", "769m")
    fake.actuate(KEY)
    run(rec.reconcile(KEY))
    assert reasons(fake) == ["Resized"] and annotations(fake)[APPLIED_INSTANCE_TYPE] == "c3"


def test_a_node_relabelled_after_someone_else_changed_our_resize_is_still_refused():
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    stored = fake.pod_now(KEY)
    stored["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "900m"
    stored["metadata"]["generation"] += 1
    fake.add_node("node-1", {LABEL: "c3"})
    fake.sync()
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize"] and reasons(fake) == ["OriginalsUnverified"]


def test_step_three_does_not_fit_the_annotation_limit_so_nothing_is_resized():
    """The guard counts what steps 1 and 3 write: originals, MAC and applied-*."""
    from resizer import TOTAL_ANNOTATION_SIZE_LIMIT

    big = pod(stamped=True)
    used = sum(len(k) + len(v) for k, v in big["metadata"]["annotations"].items())
    big["metadata"]["annotations"]["filler"] = "x" * (TOTAL_ANNOTATION_SIZE_LIMIT - used - len("filler") - 10)
    fake = cluster(big)
    run(reconciler(fake).reconcile(KEY))
    assert fake.ops() == [] and reasons(fake) == ["ResizeFailed"]


@pytest.mark.parametrize("over", [0, 1])
def test_the_size_guard_counts_every_key_step_three_writes_to_the_byte(over):
    from resizer import TOTAL_ANNOTATION_SIZE_LIMIT, is_controller_owned_key

    done = cluster(pod(stamped=True), auto_actuate=True)
    rec = reconciler(done)
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))
    ours = sum(len(k) + len(v) for k, v in annotations(done).items() if is_controller_owned_key(k))
    assert APPLIED_SIZE in annotations(done)
    big = pod(stamped=True)
    room = TOTAL_ANNOTATION_SIZE_LIMIT - ours - len("filler") + over  # the total, when done: limit + over
    big["metadata"]["annotations"]["filler"] = "x" * room
    fake = cluster(big, auto_actuate=True)
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))
    if over == 0:
        assert fake.ops() == ["resize", "annotate"] and reasons(fake) == ["Resized"]
    else:
        assert fake.ops() == [] and reasons(fake) == ["ResizeFailed"]


def gauge(state: str) -> float:
    metrics.RESIZES_WAITING.labels(state)  # the series exists once used; 0 until then
    return REGISTRY.get_sample_value("workload_resizer_resizes_waiting", {"state": state}) or 0.0


def test_the_waiting_gauge_follows_the_pod_through_its_states():
    base = {s: gauge(s) for s in ("requested", "deferred")}
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    assert gauge("requested") == base["requested"] + 1
    fake.defer(KEY)
    run(rec.reconcile(KEY))
    assert (gauge("requested"), gauge("deferred")) == (base["requested"], base["deferred"] + 1)
    fake.actuate(KEY)
    run(rec.reconcile(KEY))
    assert (gauge("requested"), gauge("deferred")) == (base["requested"], base["deferred"])


def test_applied_removed_after_a_resize_whose_record_was_observed_during_the_write_is_decided_again():
    """The watch event of step 3 can arrive while the annotate call is still waiting for its reply:
    the 'finished' bookkeeping must not outlive it, or a later removal of applied-* (with forged
    originals) is never looked at again and no Event says why nothing happens."""
    fake = cluster(pod(stamped=True), auto_actuate=True)
    rec = reconciler(fake)
    write = fake.annotate

    async def annotate_then_observe(target, annotations, resource_version=None):
        stored = await write(target, annotations, resource_version)
        rec.observe(slim_pod(fake.pod_now(KEY)))  # our own write's event, before the reply is back
        return stored

    fake.annotate = annotate_then_observe  # type: ignore[method-assign]
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))  # actuated: step 3
    assert reasons(fake) == ["Resized"]
    fake.annotate = write  # type: ignore[method-assign]
    # A tenant drops the record and the MAC and forges the originals.
    edited = fake.pod_now(KEY)
    for key in (APPLIED_INSTANCE_TYPE, "workload-resizer.io/applied-at", ORIGINALS_MAC):
        edited["metadata"]["annotations"].pop(key, None)
    edited["metadata"]["annotations"]["workload-resizer.io/original-cpu.app"] = "16"
    fake.cache[KEY] = slim_pod(edited)
    cached = fake.cache[KEY]
    rec.observe(cached)
    assert rec.needs_work(cached, fake.nodes["node-1"]), "the edited pod is never reconciled"
    run(rec.reconcile(KEY))
    assert reasons(fake) == ["Resized", "OriginalsUnverified"] and spec_cpu(fake) == ("800m", "800m")


def test_an_unreported_size_on_a_pod_whose_originals_are_not_bound_to_it_is_not_adopted():
    """A spec that differs from applied-size and equals the plan looks like our interrupted
    re-alignment; with originals nobody can verify it is not followed (and not signed)."""
    sized = sized_on_n4()  # applied-size records 800m
    for kind in ("requests", "limits"):
        sized["spec"]["containers"][0]["resources"][kind]["cpu"] = "500m"  # what FASTER plans
    sized["metadata"]["generation"] = 3
    del sized["metadata"]["annotations"][ORIGINALS_MAC]
    fake = cluster(sized)
    rec = reconciler(fake, config=FASTER)
    run(rec.reconcile(KEY))
    assert fake.writes == [] and "Resized" not in reasons(fake)
    assert not rec.needs_work(fake.pod(KEY), run(fake.node("node-1")))
    assert rec._memory.get("uid-1").flight is None, "not adopted"
    assert ORIGINALS_MAC not in annotations(fake)


# ------------------------------------------------------------------ a tenant's forgeries (issue: one baseline authority)


def _admission_signed(full: dict[str, Any], originals: dict[str, str]) -> None:
    """What a made-up AdmissionReview obtains from the webhook: an admission MAC over any values."""
    identity = PodIdentity.of(full, "shop", "admission")
    full["metadata"]["annotations"].update(
        {**originals, ORIGINALS_MAC: sign_originals(KEYS, originals, identity, "admission")}
    )


EIGHT_CPUS = {
    "workload-resizer.io/original-cpu.app": "8",
    "workload-resizer.io/original-cpu-limit.app": "8",
    "workload-resizer.io/original-memory.app": "256Mi",
    "workload-resizer.io/original-memory-limit.app": "256Mi",
}


@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "admission-mac-from-the-oracle"])
def test_a_forged_resize_state_does_not_vouch_for_forged_originals(signed: bool):
    forged = pod(cpu="100m")
    forged["metadata"]["generation"] = 2  # a scheduling gate removed after creation
    if signed:
        _admission_signed(forged, EIGHT_CPUS)
    else:
        forged["metadata"]["annotations"].update(EIGHT_CPUS)
    forged["metadata"]["annotations"][RESIZE_STATE] = ResizeState(Stage.DEFERRED, "n4", 1).encode()
    fake = cluster(forged, auto_actuate=True)
    run(reconciler(fake).reconcile(KEY))
    assert fake.ops() == [] and spec_cpu(fake) == ("100m", "100m"), "never 8 x 0.8 = 6400m"
    assert reasons(fake) == ["OriginalsUnverified"]


def test_admission_signed_originals_explain_an_aligned_spec_but_are_never_bound_to_the_pod():
    # Oracle-minted originals of 1.25 CPU on a 1-CPU pod (generation 2): "aligned" for n4 (x 0.8).
    forged = pod(cpu="1")
    forged["metadata"]["generation"] = forged["status"]["observedGeneration"] = 2
    _admission_signed(
        forged,
        {
            "workload-resizer.io/original-cpu.app": "1250m",
            "workload-resizer.io/original-cpu-limit.app": "1250m",
            "workload-resizer.io/original-memory.app": "256Mi",
            "workload-resizer.io/original-memory-limit.app": "256Mi",
        },
    )
    fake = cluster(forged, auto_actuate=True)
    run(reconciler(fake).reconcile(KEY))
    assert annotations(fake)[APPLIED_INSTANCE_TYPE] == "n4", "recorded as aligned"
    mac = annotations(fake)[ORIGINALS_MAC]
    assert mac.split(".")[1] == "a", "still only signed at admission: no pod MAC for unverified originals"
    fake.add_node("node-1", {LABEL: "n2d"})  # relabelled: 1250m x 1.0 would raise the pod
    fake.sync()
    run(reconciler(fake).reconcile(KEY))
    assert "resize" not in fake.ops() and spec_cpu(fake) == ("1", "1")
    assert reasons(fake)[-1] == "OriginalsUnverified"


def test_a_deferral_binds_the_verified_originals_to_the_pod_so_a_restart_still_trusts_them():
    fake, rec = deferred_pod()
    run(rec.reconcile(KEY))  # the process that resized records the deferral
    assert annotations(fake)[ORIGINALS_MAC].split(".")[1] == "p", "bound to this pod in the same write"
    fake.add_node("node-1", {LABEL: "c3"})  # relabelled while deferred, after a restart
    fake.sync()
    run(reconciler(fake).reconcile(KEY))
    assert spec_cpu(fake) == ("769m", "769m"), "re-planned from the bound originals, nothing refused"


def test_a_deferral_first_seen_after_a_restart_binds_nothing():
    fake, _ = deferred_pod()
    run(reconciler(fake).reconcile(KEY))  # no memory of the resize: nothing vouches for it
    assert annotations(fake)[ORIGINALS_MAC].split(".")[1] == "a"
    assert recorded_state(fake).state == Stage.DEFERRED


def test_the_resize_is_conditional_on_the_pod_as_read_and_a_conflict_reports_nothing():
    fake = cluster(pod())
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    (resize,) = [w for w in fake.writes if w.op == "resize"]
    assert resize.if_generation == 1, "a deposed leader's late resize must not land on a newer spec"
    fake2 = cluster(pod(stamped=True))
    fake2.fail("resize", ApiError(409, {"reason": "Conflict", "message": "the object has been modified"}))
    with pytest.raises(ApiError) as conflict:
        run(reconciler(fake2).reconcile(KEY))
    assert conflict.value.retryable, "the manager retries it from the cache, with backoff"
    assert fake2.events == [] and spec_cpu(fake2) == ("1", "1")


# ------------------------------------------------------------------ pods sized at admission


def sized_at_admission(node_type: str = "n4") -> dict[str, Any]:
    """A pod the webhook created at its n4 size (800m from the author's 1 CPU), generation 1."""
    from resizer import admission_sizing, originals_from_spec_annotations, sized_stamp

    sent = pod()
    sizing = admission_sizing(sent, CONFIG, node_type)
    assert sizing is not None
    created = pod(cpu="800m")
    created["metadata"]["annotations"] = sized_stamp(
        sent, "shop", KEYS, originals_from_spec_annotations(sent), node_type, sizing.sized
    )
    created["metadata"]["generation"] = 1
    return created


def test_a_pod_sized_at_admission_costs_one_audit_write_and_one_event_and_no_resize():
    fake = cluster(sized_at_admission())
    read = fake.cache[KEY]["metadata"]["resourceVersion"]
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    assert fake.ops() == ["annotate"], "no resize: created at its size"
    write = fake.writes[0]
    assert write.resource_version == read, "conditional on the spec the sized MAC verified"
    assert write.body[ORIGINALS_MAC].startswith("v1.p.") and write.body[APPLIED_INSTANCE_TYPE] == "n4"
    assert reasons(fake) == ["SizedAtAdmission"]
    assert "cpu 1 -> 800m" in fake.events[0].message
    stored = fake.pod_now(KEY)
    check = baseline(stored, KEYS).check
    assert check.trust is Trust.TRUSTED and check.scope == "pod", "bound to the pod: no longer needs generation 1"
    run(rec.reconcile(KEY))
    assert fake.ops() == ["annotate"] and reasons(fake) == ["SizedAtAdmission"]


def test_a_pod_sized_at_admission_on_a_relabelled_node_is_bound_then_resized_from_its_originals():
    fake = cluster(sized_at_admission(), family="c3")
    run(reconciler(fake).reconcile(KEY))
    assert fake.ops() == ["annotate", "resize"], "the originals are bound before the spec changes"
    assert fake.writes[0].body[ORIGINALS_MAC].startswith("v1.p.")
    assert fake.writes[1].body == {
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "769m"}, "limits": {"cpu": "769m"}}}]}
    }, "1 CPU x 1/1.3, not 800m x 1/1.3"


def test_a_later_config_edit_re_aligns_a_pod_sized_at_admission_from_its_originals():
    fake = cluster(sized_at_admission())
    config = FakeConfig(CONFIG)
    rec = PodResizeReconciler(
        fake, fake, fake, config, ControllerSettings(node_type_label=LABEL), no_fault, FakeClock(), keyring=lambda: KEYS
    )
    run(rec.reconcile(KEY))
    config.config = load_config(SAMPLE_CONFIG.replace("n4:  { cpuPerf: 1.25", "n4:  { cpuPerf: 2.0"))
    config.generation += 1
    run(rec.reconcile(KEY))
    assert fake.ops() == ["annotate", "resize"]
    assert fake.writes[1].body == {
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "500m"}}}]}
    }, "1 CPU / 2, not 800m / 2"


def test_a_sized_record_copied_onto_a_pod_of_another_size_is_re_captured_from_its_spec():
    forged = sized_at_admission()
    forged["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "2", "memory": "256Mi"},
        "limits": {"cpu": "2", "memory": "256Mi"},
    }
    forged["status"]["containerStatuses"][0]["resources"] = copy.deepcopy(forged["spec"]["containers"][0]["resources"])
    fake = cluster(forged)
    run(reconciler(fake).reconcile(KEY))
    assert "OriginalsReplaced" in reasons(fake)
    assert fake.writes[0].body["workload-resizer.io/original-cpu.app"] == "2", "the spec, not the forged 1 CPU"


def test_a_conflict_on_the_one_write_of_a_pod_sized_at_admission_still_reports_it_once():
    fake = cluster(sized_at_admission())
    fake.fail("annotate", ApiError(409, {"reason": "Conflict", "message": "modified"}))
    run(reconciler(fake).reconcile(KEY))
    assert "resize" not in fake.ops()
    assert reasons(fake) == ["SizedAtAdmission"]
    check = baseline(fake.pod_now(KEY), KEYS).check
    assert check.trust is Trust.TRUSTED and check.scope == "pod"


def pod_level_sized_at_admission() -> dict[str, Any]:
    """A pod with pod-level resources the webhook created at its n4 size at both levels."""
    from resizer import admission_sizing, originals_from_spec_annotations, sized_stamp

    sent = pod()
    sent["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "400m", "memory": "256Mi"},
        "limits": {"cpu": "800m", "memory": "512Mi"},
    }
    sent["spec"]["resources"] = {"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}}
    sent["status"]["qosClass"] = "Burstable"
    sizing = admission_sizing(sent, CONFIG, "n4")
    assert sizing is not None
    created = copy.deepcopy(sent)
    created["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "320m", "memory": "256Mi"},
        "limits": {"cpu": "640m", "memory": "512Mi"},
    }
    created["spec"]["resources"] = {
        "requests": {"cpu": "800m", "memory": "512Mi"},
        "limits": {"cpu": "1600m", "memory": "1Gi"},
    }
    created["status"]["containerStatuses"][0]["resources"] = copy.deepcopy(
        created["spec"]["containers"][0]["resources"]
    )
    created["metadata"]["annotations"] = sized_stamp(
        sent, "shop", KEYS, originals_from_spec_annotations(sent), "n4", sizing.sized
    )
    created["metadata"]["generation"] = 1
    return created


@pytest.mark.parametrize("conflict", [False, True], ids=["one write", "conflict"])
def test_a_pod_level_pod_sized_at_admission_on_a_node_without_pod_level_resize_reports_its_size(conflict):
    """Created at its size at both levels: aligned even where the node cannot resize pod level,
    whichever path writes the record (one write, or after a conflict the originals re-read and
    planned again: the same plan, never 'left alone')."""
    fake = cluster(pod_level_sized_at_admission())
    if conflict:  # a kubelet status update after the cache was read: both conditional writes conflict
        stored = fake.pod_now(KEY)["metadata"]
        stored["resourceVersion"] = str(int(stored["resourceVersion"]) + 1)
    run(reconciler(fake).reconcile(KEY))
    assert "resize" not in fake.ops()
    assert reasons(fake) == ["SizedAtAdmission"]
    assert fake.ops() == (["annotate", "annotate"] if conflict else ["annotate"])
    assert "pod level: cpu 1 -> 800m" in fake.events[0].message, fake.events[0].message


def test_a_pod_held_for_a_lost_key_keeps_its_originals_and_is_sized_from_them_once_the_key_is_back():
    """Authored at 1 CPU, created at 800m for an n4 and bound with a key since lost, its node now
    an n2d: held (never re-captured at 800m); with the key back it is decided again, from 1 CPU."""
    sized = pod(cpu="800m")
    sized["metadata"]["annotations"].update(missing_original_annotations(pod(cpu="1")))
    sized["metadata"]["generation"] = 1
    sized["metadata"]["annotations"].update(pod_mac(sized, KEYS))
    fake = cluster(sized, family="n2d")
    ring = {"now": KeyRing({"k20261127000214-abcdef": b"n" * 32})}
    rec = PodResizeReconciler(
        fake,
        fake,
        fake,
        FakeConfig(CONFIG),
        ControllerSettings(node_type_label=LABEL),
        no_fault,
        FakeClock(),
        keyring=lambda: ring["now"],
    )
    assert run(rec.reconcile(KEY)) == DONE
    assert fake.ops() == [] and reasons(fake) == ["OriginalsUnverified"]
    assert "unknown key 'k0001'" in fake.events[0].message and "put the key back" in fake.events[0].message
    assert run(rec.reconcile(KEY)) == DONE and len(fake.events) == 1, "the same situation is decided once"
    assert annotations(fake)["workload-resizer.io/original-cpu.app"] == "1" and spec_cpu(fake) == ("800m", "800m")

    ring["now"] = KeyRing({**ring["now"].keys, **KEYS.keys})  # the key put back
    assert run(rec.reconcile(KEY)) == DONE
    assert "resize" in fake.ops() and fake.writes[-1].body == BACK_TO_1


# ------------------------------------------------------------------ gated pods: originals bound at generation 1


def gated(stamped: bool = True, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    """A pod held by a scheduling gate (Pending, not bound), as created: generation 1."""
    held = pod(stamped=stamped, running=False, annotations=annotations)
    del held["spec"]["nodeName"]
    held["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    held["status"] = {"phase": "Pending", "qosClass": "Guaranteed"}
    held["metadata"]["generation"] = 1
    return held


def bound_and_running(fake: FakeCluster) -> None:
    """The gate removed (generation 2), the pod scheduled and its container started."""
    fake.ungate(KEY)
    fake.schedule(KEY)
    fake.pods[KEY]["status"] = {
        "phase": "Pending",
        "qosClass": "Guaranteed",
        "containerStatuses": [{"name": "app", "state": {"waiting": {}}}],
    }
    fake.start_containers(KEY)


def test_a_gated_pod_gets_its_admission_originals_bound_at_generation_1_then_is_sized_after_its_gate():
    fake = cluster(gated(), auto_actuate=True)
    read = fake.cache[KEY]["metadata"]["resourceVersion"]
    rec = reconciler(fake)
    assert rec.needs_binding(fake.pod(KEY))
    assert run(rec.reconcile(KEY)) == DONE
    (write,) = fake.writes
    assert write.op == "annotate" and write.resource_version == read, "conditional on the pod as read"
    assert set(write.body) == {ORIGINALS_MAC} and write.body[ORIGINALS_MAC].startswith("v1.p.")
    assert fake.events == [], "no Event for a binding"
    assert not rec.needs_binding(fake.pod(KEY)), "bound: it leaves this path"

    bound_and_running(fake)
    assert generation(fake) == 2
    run(rec.reconcile(KEY))
    assert fake.writes[-1].op == "resize" and fake.writes[-1].body == RESIZE_TO_800M, "1 CPU x 0.8, trusted"
    run(rec.reconcile(KEY))
    assert reasons(fake) == ["Resized"]


def test_a_gated_pod_whose_gate_went_before_it_was_bound_is_not_resized():
    """The race (the reconciler down, or a gate remover faster): admission-signed originals on a
    changed spec vouch for nothing, so the pod is held, never raised nor resized."""
    fake = cluster(gated(), auto_actuate=True)
    rec = reconciler(fake)
    bound_and_running(fake)
    assert not rec.needs_binding(fake.pod(KEY))
    run(rec.reconcile(KEY))
    assert fake.ops() == [] and reasons(fake) == ["OriginalsUnverified"]
    assert "signed at admission only" in fake.events[0].message
    assert spec_cpu(fake) == ("1", "1")


@pytest.mark.parametrize("kind", ["unsigned", "none"])
def test_a_gated_pod_without_admission_originals_gets_them_recorded_from_its_spec(kind: str):
    """Unsigned originals equal to the spec (a webhook without keys), or none (the webhook down):
    at generation 1 the spec is the author's, recorded with a pod MAC before the gate goes."""
    unsigned = missing_original_annotations(pod()) if kind == "unsigned" else {}
    fake = cluster(gated(stamped=False, annotations=unsigned))
    run(reconciler(fake).reconcile(KEY))
    (write,) = fake.writes
    assert write.body[ORIGINALS_MAC].startswith("v1.p.")
    assert {k: v for k, v in write.body.items() if k != ORIGINALS_MAC} == (
        {} if kind == "unsigned" else missing_original_annotations(pod())
    )
    assert baseline(fake.pod_now(KEY), KEYS).check.scope == "pod" and fake.events == []


def test_forged_originals_on_a_gated_pod_are_not_bound():
    """Step 1 of the bound pod replaces them from its spec (and reports it); binding them would not."""
    fake = cluster(gated(stamped=False, annotations=EIGHT_CPUS))
    run(reconciler(fake).reconcile(KEY))
    assert fake.writes == [] and fake.events == []


def test_only_eligible_gated_pods_at_generation_1_not_bound_yet_want_a_binding():
    rec = reconciler(cluster())
    assert rec.needs_binding(slim_pod(gated()))
    assert not rec.needs_binding(slim_pod(gated(annotations={"workload-resizer.io/skip": "true"})))
    changed = gated()
    changed["metadata"]["generation"] = 2
    assert not rec.needs_binding(slim_pod(changed))
    ungated = gated()
    del ungated["spec"]["schedulingGates"]
    assert not rec.needs_binding(slim_pod(ungated)), "pending for the scheduler only: nothing to do"
    deleting = gated()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not rec.needs_binding(slim_pod(deleting))
    bound = gated()
    bound["metadata"]["annotations"].update(pod_mac(bound, KEYS))
    assert not rec.needs_binding(slim_pod(bound))
    fake = cluster()
    dry = reconciler(fake, dry_run=True)
    assert not dry.needs_binding(slim_pod(gated())), "a dry run writes nothing"
    keyless = PodResizeReconciler(fake, fake, fake, FakeConfig(CONFIG), ControllerSettings(node_type_label=LABEL))
    assert not keyless.needs_binding(slim_pod(gated())), "no key to sign with"


def test_a_binding_that_conflicts_is_retried_from_the_cache_and_one_refused_is_dropped():
    fake = cluster(gated())
    fake.fail("annotate", ApiError(409, {"reason": "Conflict", "message": "modified"}))
    with pytest.raises(ApiError) as conflict:
        run(reconciler(fake).reconcile(KEY))
    assert conflict.value.retryable
    fake.fail("annotate", ApiError(422, {"reason": "Invalid", "message": "metadata.annotations: Too long"}))
    assert run(reconciler(fake).reconcile(KEY)) == DONE
    assert fake.writes == [] and fake.events == []


def test_a_binding_is_counted():
    fake = cluster(gated())
    before = REGISTRY.get_sample_value("workload_resizer_originals_bound_total", {"when": "gated"}) or 0.0
    run(reconciler(fake).reconcile(KEY))
    assert REGISTRY.get_sample_value("workload_resizer_originals_bound_total", {"when": "gated"}) == before + 1


def test_each_pass_counts_the_action_it_decided():
    from reconciler.decide import Action

    assert set(metrics.ACTION_NAMES) == {cls.__name__ for cls in Action.__subclasses__()}

    def count(action: str) -> float:
        return REGISTRY.get_sample_value("workload_resizer_reconcile_actions_total", {"action": action}) or 0.0

    before = {name: count(name) for name in metrics.ACTION_NAMES}
    fake = cluster(pod(stamped=True), auto_actuate=True)
    rec = reconciler(fake)
    run(rec.reconcile(KEY))  # resized
    run(rec.reconcile(KEY))  # the kubelet's answer followed: applied-* written
    run(rec.reconcile(KEY))  # sized for its node type: nothing to do
    counted = {name: count(name) - before[name] for name in metrics.ACTION_NAMES}
    assert {name: n for name, n in counted.items() if n} == {"Resize": 1, "Follow": 1, "Resign": 1}


class WatchDuringWrites(FakeCluster):
    """The watch event of each pod write, delivered while the write's reply is awaited: what
    the manager's filter says of it then."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.filter: Any = None
        self.wanted: list[tuple[str, bool]] = []

    async def annotate(self, pod, annotations, resource_version=None):  # type: ignore[no-untyped-def]
        written = await super().annotate(pod, annotations, resource_version)
        if self.filter is not None:
            event = self.cache[f"{written['metadata']['namespace']}/{written['metadata']['name']}"]
            self.wanted.append((",".join(sorted(k.rsplit("/", 1)[-1] for k in annotations)), self.filter(event)))
        return written


def test_the_watch_events_of_a_passs_own_writes_queue_no_second_pass():
    """Step 1's originals before the resize, and step 3's record of what was applied: each write's
    watch event may arrive before its reply. The filter lets neither through (either would queue
    the pod for a pass that decides nothing: Nothing after step 1, Resign after step 3)."""
    fake = WatchDuringWrites(auto_actuate=True)
    fake.add_node("node-1", {LABEL: "n4"})
    fake.add_pod(pod())
    rec = reconciler(fake)
    fake.filter = lambda event: rec.needs_work(event, fake.nodes["node-1"])
    run(rec.reconcile(KEY))  # step 1 (originals) and step 2 (the resize)
    run(rec.reconcile(KEY))  # the kubelet's answer: step 3
    assert fake.ops() == ["annotate", "resize", "annotate"]
    assert [wanted for _, wanted in fake.wanted] == [False, False], fake.wanted
    assert not rec.needs_work(fake.cache[KEY], fake.nodes["node-1"])
