"""reconcile(key) against the in-memory fake: each write step, each crash point, each rejection."""
from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from reconciler.controller import DONE, Options, PodResizeReconciler, Result, Step
from reconciler.kube import ApiError
from reconciler.ports import no_fault
from resizer import (
    APPLIED_INSTANCE_TYPE,
    SAMPLE_CONFIG,
    load_config,
    missing_original_annotations,
)
from tests.unit.fake_cluster import FakeCluster, FakeConfig

LABEL = "example.com/family"
CONFIG = load_config(SAMPLE_CONFIG)     # n2d baseline; n4 cpuPerf 1.25
KEY = "shop/web-1"


class Crash(Exception):
    """Stands for SIGKILL: the process dies right after a write step."""


def crash_after(step_name: str):
    def hook(step: str) -> None:
        if step == step_name:
            raise Crash(step)
    return hook


def pod(cpu: str = "1", memory: str = "256Mi", stamped: bool = False, node: str = "node-1",
        annotations: dict[str, str] | None = None) -> dict[str, Any]:
    resources = {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}
    full: dict[str, Any] = {
        "metadata": {"name": "web-1", "namespace": "shop", "uid": "uid-1", "annotations": dict(annotations or {}),
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                          "controller": True}]},
        "spec": {"nodeName": node, "containers": [{"name": "app", "resources": resources}]},
        "status": {"phase": "Running", "qosClass": "Guaranteed",
                   "containerStatuses": [{"name": "app", "state": {"running": {}}, "resources": resources}]},
    }
    if stamped:
        full["metadata"]["annotations"].update(missing_original_annotations(full))
    return full


def cluster(*pods: dict[str, Any], family: str | None = "n4") -> FakeCluster:
    fake = FakeCluster()
    fake.add_node("node-1", {LABEL: family} if family else {})
    for p in pods:
        fake.add_pod(p)
    return fake


def reconciler(fake: FakeCluster, config: Any = CONFIG, fault=no_fault, **options: Any) -> PodResizeReconciler:
    return PodResizeReconciler(fake, fake, fake, FakeConfig(config), Options(node_type_label=LABEL, **options),
                               fault)


def run(coro):
    return asyncio.run(coro)


def spec_cpu(fake: FakeCluster) -> tuple[str, str]:
    resources = fake.pod_now(KEY)["spec"]["containers"][0]["resources"]
    return resources["requests"]["cpu"], resources["limits"]["cpu"]


def reasons(fake: FakeCluster) -> list[str]:
    return [e.reason for e in fake.events]


# ------------------------------------------------------------------ the write path


def test_an_unstamped_pod_gets_originals_then_the_resize_then_applied():
    fake = cluster(pod())
    assert run(reconciler(fake).reconcile(KEY)) == DONE
    assert fake.ops() == ["annotate", "resize", "annotate"]
    stamp, resize, applied = fake.writes
    assert stamp.resource_version is not None, "originals are conditional on the spec we read"
    assert set(stamp.body) == set(missing_original_annotations(pod()))
    assert resize.body == {"spec": {"containers": [{"name": "app", "resources": {
        "requests": {"cpu": "800m"}, "limits": {"cpu": "800m"}}}]}}
    assert applied.body[APPLIED_INSTANCE_TYPE] == "n4" and applied.resource_version is None
    assert spec_cpu(fake) == ("800m", "800m")
    assert reasons(fake) == ["Resized"]


def test_a_webhook_stamped_pod_costs_two_writes():
    fake = cluster(pod(stamped=True))
    run(reconciler(fake).reconcile(KEY))
    assert fake.ops() == ["resize", "annotate"]
    assert reasons(fake) == ["Resized"]


def test_a_pod_already_at_its_size_is_only_marked_applied():
    fake = cluster(pod(stamped=True), family="n2d")
    run(reconciler(fake).reconcile(KEY))
    assert fake.ops() == ["annotate"]
    assert reasons(fake) == ["AlreadyAligned"]


def sized_on_n4(cpu: str = "800m") -> dict[str, Any]:
    """A pod the reconciler sized for n4 earlier: originals of 1 CPU, spec at `cpu`."""
    originals = missing_original_annotations(pod())
    return pod(cpu=cpu, annotations={**originals, APPLIED_INSTANCE_TYPE: "n4"})


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
    fake = cluster(sized_on_n4())
    run(reconciler(fake, config=faster).reconcile(KEY))
    assert fake.ops() == ["resize", "annotate"]
    assert spec_cpu(fake) == ("500m", "500m")          # 1 CPU / 2, not 800m / 2
    assert reasons(fake) == ["Resized"] and fake.events[0].message.startswith("re-aligned for node type n4")


def test_needs_work_re_plans_a_sized_pod_once_per_config_version():
    node = {"metadata": {"name": "node-1", "labels": {LABEL: "n4"}}}
    faster = load_config(SAMPLE_CONFIG.replace("cpuPerf: 1.25", "cpuPerf: 2.0"))
    config = FakeConfig(CONFIG)
    rec = PodResizeReconciler(*(cluster(),) * 3, config, Options(node_type_label=LABEL))
    assert not rec.needs_work(sized_on_n4(), node)       # this config changes nothing for it
    config.config, config.generation = faster, 2
    assert rec.needs_work(sized_on_n4(), node)           # the new one does
    assert not rec.needs_work(sized_on_n4(), node)       # asked once per config version
    off = PodResizeReconciler(*(cluster(),) * 3, FakeConfig(faster, 2), Options(node_type_label=LABEL, realign=False))
    assert not off.needs_work(sized_on_n4(), node)


def test_a_lagging_cache_does_not_cause_a_second_pass():
    fake = cluster(pod(stamped=True))
    fake.lagging_cache = True
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))     # the cache still shows the pod before our writes
    assert fake.ops() == ["resize", "annotate"]
    assert reasons(fake) == ["Resized"]


def test_a_conflict_on_the_originals_rereads_the_pod_once():
    fake = cluster(pod())
    fake.fail("annotate", ApiError(409, {"reason": "Conflict", "message": "modified"}))
    run(reconciler(fake).reconcile(KEY))
    assert fake.ops() == ["annotate", "resize", "annotate"]
    assert spec_cpu(fake) == ("800m", "800m")


def test_a_retryable_resize_failure_raises_and_the_retry_finishes_the_pod():
    fake = cluster(pod(stamped=True))
    fake.fail("resize", ApiError(500, {"message": "etcd hiccup"}))
    rec = reconciler(fake)
    with pytest.raises(ApiError):
        run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize", "annotate"] and reasons(fake) == ["Resized"]


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


def test_a_resize_beyond_node_capacity_fails_with_the_apiserver_message():
    fake = cluster(pod(stamped=True))
    fake.fail("resize", ApiError(403, {"message": "exceeds node capacity",
                                       "details": {"causes": [{"type": "NodeCapacity"}]}}))
    run(reconciler(fake).reconcile(KEY))
    assert reasons(fake) == ["ResizeFailed"] and "cannot fit" in fake.events[0].message


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


# ------------------------------------------------------------------ crash after each write step


@pytest.mark.parametrize(("step", "first_ops", "second_ops", "second_reasons"), [
    (Step.ORIGINALS, ["annotate"], ["resize", "annotate"], ["Resized"]),
    (Step.RESIZE, ["annotate", "resize"], ["annotate"], ["AlreadyAligned"]),
    (Step.APPLIED, ["annotate", "resize", "annotate"], [], []),
])
def test_a_crash_after_each_step_converges_without_compounding(step, first_ops, second_ops, second_reasons):
    fake = cluster(pod())
    with pytest.raises(Crash):
        run(reconciler(fake, fault=crash_after(step)).reconcile(KEY))
    assert fake.ops() == first_ops and fake.events == []
    before = len(fake.writes)
    run(reconciler(fake).reconcile(KEY))        # a new process: no memory of the first
    assert [w.op for w in fake.writes[before:]] == second_ops
    assert reasons(fake) == second_reasons
    assert spec_cpu(fake) == ("800m", "800m"), "resized once, from the originals"
    assert fake.pod_now(KEY)["metadata"]["annotations"][APPLIED_INSTANCE_TYPE] == "n4"
    assert fake.ops().count("resize") == 1


def test_the_needs_work_predicate_follows_node_type_and_applied_marker():
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    node = run(fake.node("node-1"))
    cached = fake.pod(KEY)
    assert rec.needs_work(cached, node)
    assert rec.needs_work(cached, None), "a node not cached yet is looked up by reconcile"
    untyped = copy.deepcopy(node)
    untyped["metadata"]["labels"] = {}
    assert not rec.needs_work(cached, untyped)
    run(rec.reconcile(KEY))
    assert not rec.needs_work(fake.pod(KEY), node)
