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
    ORIGINALS_MAC,
    SAMPLE_CONFIG,
    KeyRing,
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


KEYS = KeyRing({"k0001": b"k" * 32})      # the originals MAC keys, as the chart mounts them


def reconciler(fake: FakeCluster, config: Any = CONFIG, fault=no_fault, **options: Any) -> PodResizeReconciler:
    return PodResizeReconciler(fake, fake, fake, FakeConfig(config), Options(node_type_label=LABEL, **options),
                               fault, keyring=lambda: KEYS)


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
    assert set(stamp.body) == set(missing_original_annotations(pod())) | {ORIGINALS_MAC}, "signed, bound to the pod"
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


def test_a_pod_applied_for_its_node_type_is_left_alone():
    fake = cluster(pod(stamped=True, annotations={APPLIED_INSTANCE_TYPE: "n4"}))
    run(reconciler(fake).reconcile(KEY))
    assert fake.writes == [] and fake.events == []


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


# ------------------------------------------------------------------ whose originals (resizer.integrity)


def test_forged_unsigned_originals_on_an_unchanged_pod_are_replaced_from_the_spec_and_reported():
    forged = pod(cpu="500m", annotations={"workload-resizer.io/original-cpu.app": "16",
                                          "workload-resizer.io/original-cpu-limit.app": "16"})
    fake = cluster(forged)
    run(reconciler(fake).reconcile(KEY))
    assert spec_cpu(fake) == ("400m", "400m"), "500m x 0.8, never 16 x 0.8"
    assert reasons(fake) == ["OriginalsReplaced", "Resized"]


def test_forged_originals_on_a_resized_pod_are_refused_with_a_warning_and_no_write():
    fake = cluster(pod(cpu="1"))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))                        # resized to 800m, originals signed for this pod
    stored = fake.pod_now(KEY)
    stored["metadata"]["annotations"].update({"workload-resizer.io/original-cpu.app": "16",
                                              APPLIED_INSTANCE_TYPE: None})
    stored["metadata"]["annotations"] = {k: v for k, v in stored["metadata"]["annotations"].items() if v is not None}
    before = len(fake.writes)
    run(reconciler(fake).reconcile(KEY))
    assert fake.writes[before:] == []
    assert reasons(fake)[-1] == "OriginalsUnverified"
    assert spec_cpu(fake) == ("800m", "800m")


def test_step_three_does_not_fit_the_annotation_limit_so_nothing_is_resized():
    """The guard counts what steps 1 and 3 write: originals, MAC and applied-*."""
    from resizer import TOTAL_ANNOTATION_SIZE_LIMIT

    big = pod(stamped=True)
    used = sum(len(k) + len(v) for k, v in big["metadata"]["annotations"].items())
    big["metadata"]["annotations"]["filler"] = "x" * (TOTAL_ANNOTATION_SIZE_LIMIT - used - len("filler") - 10)
    fake = cluster(big)
    run(reconciler(fake).reconcile(KEY))
    assert fake.ops() == [] and reasons(fake) == ["ResizeFailed"]
