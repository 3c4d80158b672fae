"""The gates in reconcile(key): a pod an updating VPA sizes is left alone, a resize a LimitRange,
ResourceQuota or the node's room would refuse is not sent; each hold is reported once and
decided again when its constraint changes."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from kube import ApiError
from kube.informer import Informer
from kube.slim import slim_limit_range, slim_quota
from ops.prometheus import REGISTRY
from reconciler import act, metrics
from reconciler.controller import PodResizeReconciler
from reconciler.preflight import Preflight
from reconciler.settings import ControllerSettings, PreflightSettings
from reconciler.vpa import VpaWatch, slim_owned
from resizer import SAMPLE_CONFIG, load_config
from resizer.vpa import Unresolved, slim_vpa
from tests.unit.fake_cluster import FakeClock, FakeCluster, FakeConfig
from tests.unit.test_reconciler_reconcile import CONFIG, KEY, KEYS, LABEL, cluster, pod, reasons, spec_cpu


def informer(resource: str, slim: Any, *objects: dict[str, Any]) -> Informer:
    cache = Informer(None, resource, "/", slim, lambda *_: None)  # type: ignore[arg-type]
    for obj in objects:
        meta = slim(obj)["metadata"]
        cache.store[f"{meta['namespace']}/{meta['name']}"] = slim(obj)
    cache.synced.set()
    return cache


def deliver(cache: Informer, obj: dict[str, Any]) -> None:
    """What the informer does with a watch event: store the object, then call its handler."""
    key = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
    old = cache.store.get(key)
    cache.store[key] = obj
    cache._handler("MODIFIED" if old is not None else "ADDED", obj, old)


def held_gauge(constraint: str) -> float:
    metrics.RESIZES_HELD.labels(constraint)
    return REGISTRY.get_sample_value("workload_resizer_resizes_held", {"constraint": constraint}) or 0.0


def limit_range(max_cpu: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "limits", "namespace": "shop"},
        "spec": {"limits": [{"type": "Container", "max": {"cpu": max_cpu}}]},
    }


class World:
    """The fake apiserver, a reconciler with a Preflight gate over hand-filled caches."""

    def __init__(
        self,
        fake: FakeCluster,
        checks: tuple[str, ...] = ("LimitRange", "ResourceQuota", "NodeHeadroom"),
        vpa: VpaWatch | None = None,
        config: Any = CONFIG,
        dry_run: bool = False,
        **settings: Any,
    ) -> None:
        self.fake = fake
        self.requeued: list[str] = []
        self.clock = FakeClock()
        self.preflight = Preflight(
            None,
            PreflightSettings(
                checks=checks,
                skip_vpa_managed=vpa is not None,  # type: ignore[arg-type]
                **settings,
            ),
            self.node_pods,
            self.requeued.extend,
            vpa,
        )
        for cache in self.preflight.informers:
            cache.synced.set()
        self.reconciler = PodResizeReconciler(
            fake,
            fake,
            fake,
            FakeConfig(config),
            ControllerSettings(node_type_label=LABEL, dry_run=dry_run),
            clock=self.clock,
            keyring=lambda: KEYS,
            gate=self.preflight,
        )

    def node_pods(self, node: str) -> list[dict[str, Any]]:
        return [p for p in self.fake.cache.values() if p["spec"].get("nodeName") == node]

    def reconcile(self, key: str = KEY) -> Any:
        return asyncio.run(self.reconciler.reconcile(key))


# The sample config plus a node type half as fast as the baseline: a 1-cpu pod grows to 2 cpu there.
GROW_CONFIG = load_config(SAMPLE_CONFIG.replace("nodeTypes:", "nodeTypes:\n  slow: {cpuPerf: 0.5, memPerf: 1.0}", 1))


def world_growing(**kwargs: Any) -> World:
    """A stamped 1-cpu pod on a `slow` node (8 cpu allocatable), planned to grow to 2 cpu."""
    return World(cluster(pod(stamped=True), family="slow"), config=GROW_CONFIG, **kwargs)


# ---------------------------------------------------------------- LimitRange


def test_a_resize_beyond_the_limit_range_is_not_sent_and_reported_once() -> None:
    w = world_growing()
    assert w.preflight.limit_ranges is not None
    deliver(w.preflight.limit_ranges, slim_limit_range(limit_range("1500m")))
    before = held_gauge("LimitRange")
    result = w.reconcile()
    assert "resize" not in w.fake.ops()
    assert reasons(w.fake) == ["ResizeHeld"]
    assert "LimitRange limits" in w.fake.events[0].message and "above the maximum 1500m" in w.fake.events[0].message
    assert w.fake.events[0].type == "Warning"
    assert result.requeue_after is None  # decided again when the LimitRange changes, not in a loop
    assert held_gauge("LimitRange") == before + 1
    w.reconcile()
    assert reasons(w.fake) == ["ResizeHeld"] and "resize" not in w.fake.ops()
    # The LimitRange is edited: the held pod is queued again, and its resize goes out.
    deliver(w.preflight.limit_ranges, slim_limit_range(limit_range("4")))
    assert w.requeued == [KEY]
    w.fake.sync()
    w.reconcile()
    assert w.fake.ops().count("resize") == 1 and spec_cpu(w.fake) == ("2", "2")
    assert held_gauge("LimitRange") == before


def refusal(message: str) -> ApiError:
    return ApiError(403, {"reason": "Forbidden", "message": f'pods "web" is forbidden: {message}'})


BEHIND = {
    "LimitRange": refusal("maximum cpu usage per Container is 1500m, but limit is 2"),
    "ResourceQuota": refusal("exceeded quota: compute, requested: requests.cpu=1, used: requests.cpu=2500m"),
}


@pytest.mark.parametrize("constraint", sorted(BEHIND))
def test_a_refusal_by_a_constraint_the_cache_lets_through_is_tried_again_not_reported(constraint: str) -> None:
    """Just after a LimitRange or quota is raised, the apiserver's admission (which reads caches
    of its own) can still refuse the size our cache lets through: the error goes back to the
    queue, retried with backoff, instead of a ResizeFailed that nothing would decide again."""
    w = world_growing()
    w.fake.fail("resize", BEHIND[constraint])
    with pytest.raises(ApiError):
        w.reconcile()
    assert reasons(w.fake) == [] and "resize" not in w.fake.ops()
    w.reconcile()
    assert w.fake.ops().count("resize") == 1 and spec_cpu(w.fake) == ("2", "2") and reasons(w.fake) == []


def test_a_refusal_that_outlasts_any_cache_lag_is_reported_once_and_still_tried_again() -> None:
    """The preflight and the apiserver disagree for good (a rule the preflight does not know):
    tried again with backoff as ever, and once it has lasted REFUSAL_REPORTED_AFTER, one
    ResizeHeld Warning says so."""
    w = world_growing()
    w.fake.fail("resize", *[BEHIND["ResourceQuota"]] * 5)
    for wait in (0.0, 10.0, act.REFUSAL_REPORTED_AFTER - 10.5):
        w.clock.advance(wait)
        with pytest.raises(ApiError):
            w.reconcile()
        assert reasons(w.fake) == []
    for _ in range(2):
        w.clock.advance(1.0)
        with pytest.raises(ApiError):
            w.reconcile()
    assert reasons(w.fake) == ["ResizeHeld"]
    (event,) = w.fake.events
    assert (
        event.type == "Warning" and "refused the resize" in event.message and "exceeded quota: compute" in event.message
    )
    assert "for 30s" in event.message
    w.reconcile()
    assert w.fake.ops().count("resize") == 1 and spec_cpu(w.fake) == ("2", "2")
    assert reasons(w.fake) == ["ResizeHeld"]


def test_without_the_check_a_constraint_s_refusal_is_reported_once() -> None:
    w = world_growing(checks=())
    w.fake.fail("resize", BEHIND["LimitRange"])
    w.reconcile()
    assert reasons(w.fake) == ["ResizeFailed"] and "maximum cpu usage per Container" in w.fake.events[0].message


def test_a_nearly_full_quota_holds_an_increase() -> None:
    w = world_growing()
    assert w.preflight.quotas is not None
    quota = {
        "metadata": {"name": "compute", "namespace": "shop"},
        "spec": {"hard": {"requests.cpu": "3"}},
        "status": {"hard": {"requests.cpu": "3"}, "used": {"requests.cpu": "2500m"}},
    }
    deliver(w.preflight.quotas, slim_quota(quota))
    w.reconcile()
    assert "resize" not in w.fake.ops() and reasons(w.fake) == ["ResizeHeld"]
    assert "ResourceQuota compute" in w.fake.events[0].message
    freed = copy.deepcopy(quota)
    freed["status"]["used"]["requests.cpu"] = "1"
    deliver(w.preflight.quotas, slim_quota(freed))
    assert w.requeued == [KEY]
    w.fake.sync()
    w.reconcile()
    assert w.fake.ops().count("resize") == 1


def test_a_dry_run_reports_what_would_hold_the_resize_and_holds_nothing() -> None:
    w = world_growing(dry_run=True)
    assert w.preflight.limit_ranges is not None
    before = held_gauge("LimitRange")
    deliver(w.preflight.limit_ranges, slim_limit_range(limit_range("1500m")))
    w.reconcile()
    assert w.fake.ops() == [] and reasons(w.fake) == ["WouldResize"]
    assert "it would be held (LimitRange: " in w.fake.events[0].message
    assert "above the maximum 1500m" in w.fake.events[0].message
    assert held_gauge("LimitRange") == before and w.requeued == []


def test_without_checks_the_same_resize_is_sent() -> None:
    w = world_growing(checks=())
    w.reconcile()
    assert w.fake.ops().count("resize") == 1 and reasons(w.fake) == []


# ---------------------------------------------------------------- node room


def test_an_increase_waits_for_the_room_a_pending_decrease_frees() -> None:
    w = world_growing()
    w.fake.nodes["node-1"]["status"]["allocatable"]["cpu"] = "4"
    other = pod(cpu="1")  # spec already shrunk to 1 cpu, the kubelet has not actuated it: it has 2
    other["metadata"].update(name="db-1", uid="uid-2")
    other["status"]["containerStatuses"][0]["resources"]["requests"]["cpu"] = "2"
    w.fake.add_pod(other)
    w.reconcile()  # needs 2 cpu; 4 - 2 (the other's actual) = 2 free... exactly fits
    assert w.fake.ops().count("resize") == 1
    w2 = world_growing()
    w2.fake.nodes["node-1"]["status"]["allocatable"]["cpu"] = "3500m"
    w2.fake.add_pod(other)
    w2.reconcile()
    assert "resize" not in w2.fake.ops() and reasons(w2.fake) == ["ResizeHeld"]
    assert w2.fake.events[0].type == "Normal" and "node node-1" in w2.fake.events[0].message
    # The decrease is actuated: a pod event on the node queues the held pod again.
    w2.fake.cache["shop/db-1"]["status"]["containerStatuses"][0]["resources"]["requests"]["cpu"] = "1"
    w2.preflight.pod_changed("node-1")
    assert w2.requeued == [KEY]
    w2.reconcile()
    assert w2.fake.ops().count("resize") == 1


def crowded(w: World) -> None:
    """Another pod on the node holds 6 of its 8 cpu: 2 - 1 free, the pod's growth (+1 cpu) needs 2 in all."""
    other = pod(cpu="6500m")
    other["metadata"].update(name="db-1", uid="uid-2")
    w.fake.add_pod(other)


def test_an_increase_waits_for_room_at_most_node_room_wait_then_is_sent() -> None:
    w = world_growing(node_room_wait=300.0)
    crowded(w)
    result = w.reconcile()
    assert "resize" not in w.fake.ops() and result.requeue_after == 300.0
    w.clock.advance(200)
    assert w.reconcile().requeue_after == 100.0 and reasons(w.fake) == ["ResizeHeld"]
    w.clock.advance(100)
    w.reconcile()
    assert w.fake.ops().count("resize") == 1 and reasons(w.fake) == ["ResizeHeld"]  # the kubelet takes it from here


def test_more_than_the_whole_node_is_held_without_a_bound() -> None:
    w = world_growing(node_room_wait=1.0)
    w.fake.nodes["node-1"]["status"]["allocatable"]["cpu"] = "1500m"
    assert w.reconcile().requeue_after is None
    w.clock.advance(10)
    w.reconcile()
    assert "resize" not in w.fake.ops() and "more than the node's 1500m allocatable" in w.fake.events[0].message


def test_critical_pods_are_not_grown_unless_allowed() -> None:
    for allowed in (False, True):
        fake = cluster(pod(stamped=True), family="slow")
        for key in fake.pods:
            fake.pods[key]["spec"]["priority"] = 2_000_001_000  # system-node-critical
        fake.sync()
        w = World(fake, config=GROW_CONFIG, upsize_critical_pods=allowed)
        w.reconcile()
        if allowed:
            assert w.fake.ops().count("resize") == 1
        else:
            assert "resize" not in w.fake.ops() and reasons(w.fake) == ["ResizeHeld"]
            assert "system-critical" in w.fake.events[0].message


def test_a_resize_just_sent_counts_on_its_node_until_the_cache_shows_it() -> None:
    w = world_growing()
    node = w.fake.nodes["node-1"]
    w.preflight.sent(
        w.fake.cache[KEY],
        {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "7"}}}]}},
        generation=5,
    )
    other = pod(cpu="1")
    other["metadata"].update(name="db-1", uid="uid-2")
    held = w.preflight.judge(
        other, node, {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "2"}}}]}}
    )
    assert held is not None and held.constraint == "NodeHeadroom"  # 8 - 7 (sent, not yet cached) < 2


def test_a_sent_resize_stops_standing_in_once_the_pods_event_shows_it() -> None:
    """What a sent resize leaves behind is dropped as its pod's event brings the new generation,
    whether or not another pod on the node is judged (one entry per resized pod otherwise)."""
    w = world_growing()
    cached = w.fake.cache[KEY]
    w.preflight.sent(cached, {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "7"}}}]}}, 5)
    w.preflight.pod_changed("node-1", {**cached, "metadata": {**cached["metadata"], "generation": 4}})
    assert w.preflight._sent["node-1"]  # an older event: still standing in
    w.preflight.pod_changed("node-1", {**cached, "metadata": {**cached["metadata"], "generation": 5}})
    assert not w.preflight._sent["node-1"]


def test_a_shrink_never_walks_the_nodes_pods() -> None:
    """The node's room matters only to a request that grows: a shrink (most resizes) is judged
    without reading the node's other pods."""
    w = World(cluster(pod(stamped=True)))  # 1 cpu on n4: shrinks to 800m
    crowded(w)
    walked: list[str] = []
    w.preflight._node_pods = lambda node: walked.append(node) or w.node_pods(node)  # type: ignore[method-assign]
    w.reconcile()
    assert w.fake.ops().count("resize") == 1 and walked == []
    grower = world_growing()
    crowded(grower)
    grower.preflight._node_pods = lambda node: walked.append(node) or grower.node_pods(node)  # type: ignore[method-assign]
    grower.reconcile()
    assert walked == ["node-1"]  # the growth is judged against them


# ---------------------------------------------------------------- VPA


def vpa_watch(mode: str) -> VpaWatch:
    watch = VpaWatch(None, lambda _: None)  # type: ignore[arg-type]
    vpas = informer(
        "verticalpodautoscalers",
        slim_vpa,
        {
            "metadata": {"name": "web-vpa", "namespace": "shop"},
            "spec": {
                "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web-deploy"},
                "updatePolicy": {"updateMode": mode},
            },
        },
    )
    watch.owners = {
        "ReplicaSet": informer(
            "replicasets",
            slim_owned,
            {
                "metadata": {
                    "name": "web",
                    "namespace": "shop",
                    "ownerReferences": [{"kind": "Deployment", "name": "web-deploy", "controller": True}],
                }
            },
        ),
        "Job": informer("jobs", slim_owned),
    }
    return served(watch, vpas)


def served(watch: VpaWatch, vpas: Informer) -> VpaWatch:
    """What discovery finding the CRD does, over hand-filled caches (the VPAs', the watch's owners)."""
    watch.served = True
    watch.answered.set()
    watch.informers = [vpas, *watch.owners.values()]
    watch._on_vpa("ADDED", next(iter(vpas.store.values())), None)
    return watch


def test_a_pod_under_an_updating_vpa_is_left_alone_with_one_event() -> None:
    w = World(cluster(pod(stamped=False)), vpa=vpa_watch("InPlaceOrRecreate"))
    w.reconcile()
    w.reconcile()
    assert w.fake.writes == []  # not even the originals
    assert reasons(w.fake) == ["VPAManaged"]
    assert "VerticalPodAutoscaler web-vpa (updateMode InPlaceOrRecreate)" in w.fake.events[0].message
    assert "Deployment web-deploy" in w.fake.events[0].message


def test_a_vpa_in_off_mode_composes() -> None:
    w = World(cluster(pod(stamped=True)), vpa=vpa_watch("Off"))
    w.reconcile()
    assert "resize" in w.fake.ops() and "VPAManaged" not in reasons(w.fake)


def test_an_owner_not_cached_yet_is_waited_for_quietly() -> None:
    watch = vpa_watch("Auto")
    watch.owners["ReplicaSet"].store.clear()
    w = World(cluster(pod(stamped=True)), vpa=watch)
    result = w.reconcile()
    assert w.fake.writes == [] and reasons(w.fake) == [] and result.requeue_after is not None


def test_a_pod_with_pod_level_resources_is_left_alone_once() -> None:
    fake = cluster(pod(stamped=True))
    for key in fake.pods:
        fake.pods[key]["spec"]["resources"] = {"requests": {"cpu": "2", "memory": "512Mi"}}
    fake.sync()
    w = World(fake)
    w.reconcile()
    w.reconcile()
    assert w.fake.writes == [] and reasons(w.fake) == ["PodLevelResources"]
    assert w.fake.events[0].type == "Warning" and "spec.resources" in w.fake.events[0].message


def test_an_owner_that_never_appears_ends_the_chain_after_a_grace() -> None:
    from reconciler.vpa import OWNER_GRACE

    now = [0.0]
    watch = VpaWatch(None, lambda _: None, clock=lambda: now[0])  # type: ignore[arg-type]
    watch.owners = {"ReplicaSet": informer("replicasets", slim_owned), "Job": informer("jobs", slim_owned)}
    served(watch, vpa_watch("Auto").informers[0])
    orphan = pod()
    assert isinstance(watch.verdict(orphan), Unresolved)
    now[0] = OWNER_GRACE - 1
    assert isinstance(watch.verdict(orphan), Unresolved)
    now[0] = OWNER_GRACE
    assert watch.verdict(orphan) is None  # no such ReplicaSet: no VPA targets the pod


def test_slim_vpa_survives_a_malformed_object() -> None:
    slim = slim_vpa({"metadata": {"name": "v", "namespace": "shop"}, "spec": {"targetRef": "web", "updatePolicy": 1}})
    assert slim["spec"] == {
        "targetRef": {"apiVersion": None, "kind": None, "name": None},
        "updatePolicy": {"updateMode": "Auto"},
    }
    assert slim_vpa({"metadata": {}, "spec": "x"})["spec"]["targetRef"]["kind"] is None


# ---------------------------------------------------------------- the namespace index


def test_a_resize_sees_only_its_namespaces_constraints_and_deleted_ones_are_gone() -> None:
    w = world_growing()
    assert w.preflight.limit_ranges is not None
    other = slim_limit_range({**limit_range("100m"), "metadata": {"name": "limits", "namespace": "other"}})
    deliver(w.preflight.limit_ranges, other)
    w.reconcile()
    assert w.fake.ops().count("resize") == 1, "another namespace's LimitRange must not hold this pod"
    here = slim_limit_range(limit_range("100m"))
    deliver(w.preflight.limit_ranges, here)
    assert w.preflight.judge(*_growing_args(w)) is not None
    w.preflight.limit_ranges.store.pop("shop/limits")
    w.preflight.limit_ranges._handler("DELETED", here, here)
    assert w.preflight.judge(*_growing_args(w)) is None


def _growing_args(w: World) -> tuple[Any, Any, Any]:
    pod = copy.deepcopy(w.fake.cache[KEY])
    patch = {
        "spec": {
            "containers": [
                {"name": c["name"], "resources": {"requests": {"cpu": "4"}}} for c in pod["spec"]["containers"]
            ]
        }
    }
    return pod, None, patch
