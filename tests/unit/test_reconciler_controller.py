"""reconciler.controller helpers: the audit record of a decision and the situation key."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kube.slim import slim_pod
from reconciler.act import decision_record
from reconciler.pods import mac_key_known, situation
from reconciler.ports import pod_path
from resizer import SAMPLE_CONFIG, KeyRing, load_config, plan_resize, resolve_policy
from resizer.eligibility import is_live_and_bound
from resizer.podstate import ORIGINALS_MAC, read_state

CONFIG = load_config(SAMPLE_CONFIG)  # n2d baseline; n4 cpuPerf 1.25; bounds cpu 50m..16, memory 64Mi..32Gi
MiB = 1024**2


def _pod(
    containers: list[dict[str, Any]],
    annotations: dict[str, str] | None = None,
    statuses: list[dict[str, Any]] | None = None,
    phase: str = "Running",
) -> dict[str, Any]:
    full = {
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "uid": "uid-1",
            "resourceVersion": "5",
            "annotations": annotations or {},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "controller": True}],
        },
        "spec": {"nodeName": "node-1", "containers": containers},
        "status": {
            "phase": phase,
            "containerStatuses": statuses
            if statuses is not None
            else [{"name": c["name"], "state": {"running": {}}, "resources": c.get("resources")} for c in containers],
        },
    }
    return slim_pod(full)


def _container(
    name: str, requests: dict[str, str], limits: dict[str, str] | None = None, restart: tuple[str, ...] = ()
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "resources": {"requests": requests}}
    if limits:
        container["resources"]["limits"] = limits
    if restart:
        container["resizePolicy"] = [{"resourceName": r, "restartPolicy": "RestartContainer"} for r in restart]
    return container


def _plan(pod: dict[str, Any], node_type: str = "n4"):
    return plan_resize(pod, resolve_policy(CONFIG, pod), node_type)


# ------------------------------------------------------------------ decision_record


def test_decision_record_without_a_plan_names_pod_node_outcome_and_mode():
    pod = _pod([_container("app", {"cpu": "1"})])
    assert decision_record(pod, None, "ResizeFailed", False) == {
        "pod": "web-1",
        "namespace": "shop",
        "node": "node-1",
        "outcome": "ResizeFailed",
        "dryRun": False,
    }


def test_decision_record_with_a_plan_lists_each_change_in_whole_units():
    pod = _pod([_container("app", {"cpu": "1", "memory": "512Mi"})])
    record = decision_record(pod, _plan(pod), "Resized", True)
    assert (record["nodeType"], record["baseline"], record["rule"], record["dryRun"]) == ("n4", "n2d", "global", True)
    assert record["changes"] == [
        {
            "container": "app",
            "resource": "cpu",
            "original": 1000,
            "desired": 800,
            "current": 1000,
            "unit": "millicores",
        },
        {
            "container": "app",
            "resource": "memory",
            "original": 512 * MiB,
            "desired": 512 * MiB,
            "current": 512 * MiB,
            "unit": "bytes",
        },
    ]


def test_decision_record_includes_limits_only_for_resources_that_have_one():
    pod = _pod([_container("app", {"cpu": "1", "memory": "512Mi"}, limits={"cpu": "2"})])
    cpu, memory = decision_record(pod, _plan(pod), "Resized", False)["changes"]
    assert (cpu["originalLimit"], cpu["desiredLimit"]) == (2000, 1600)
    assert "originalLimit" not in memory and "desiredLimit" not in memory


def test_decision_record_marks_a_clamped_change():
    pod = _pod([_container("app", {"cpu": "60m"})])
    [cpu] = decision_record(pod, _plan(pod), "BoundsClamped", False)["changes"]
    assert cpu["desired"] == 50 and cpu["clamped"] == "min"


def test_decision_record_marks_a_skipped_change_and_omits_unset_flags():
    pod = _pod([_container("app", {"cpu": "1", "memory": "1Gi"}, restart=("memory",))])
    cpu, memory = decision_record(pod, _plan(pod), "Resized", False)["changes"]
    assert memory["skipped"] == "RestartContainerPolicy"
    assert "skipped" not in cpu and "clamped" not in cpu


def test_decision_record_of_an_unknown_node_type_has_no_changes():
    pod = _pod([_container("app", {"cpu": "1"})])
    record = decision_record(pod, _plan(pod, "z9"), "UnknownNodeType", False)
    assert record["nodeType"] == "z9" and record["changes"] == []


# ------------------------------------------------------------------ situation


def test_the_same_pod_in_the_same_circumstances_is_the_same_situation():
    pod = _pod([_container("app", {"cpu": "1"})])
    assert situation(pod, read_state(pod), "n4", 3) == situation(
        copy.deepcopy(pod), read_state(copy.deepcopy(pod)), "n4", 3
    )


def test_another_node_type_is_another_situation():
    pod = _pod([_container("app", {"cpu": "1"})])
    assert situation(pod, read_state(pod), "n4", 3) != situation(pod, read_state(pod), "c3", 3)


def test_a_new_config_generation_is_another_situation():
    pod = _pod([_container("app", {"cpu": "1"})])
    assert situation(pod, read_state(pod), "n4", 3) != situation(pod, read_state(pod), "n4", 4)


def test_the_key_of_the_originals_mac_coming_back_is_another_situation():
    pod = _pod([_container("app", {"cpu": "1"})])
    pod["metadata"].setdefault("annotations", {})[ORIGINALS_MAC] = "v1.p.k0001." + "A" * 43
    missing, back = KeyRing({"k2": b"2" * 32}), KeyRing({"k0001": b"1" * 32, "k2": b"2" * 32})
    assert not mac_key_known(read_state(pod), missing) and mac_key_known(read_state(pod), back)
    assert situation(pod, read_state(pod), "n4", 3, key_known=mac_key_known(read_state(pod), missing)) != situation(
        pod, read_state(pod), "n4", 3, key_known=mac_key_known(read_state(pod), back)
    )


def test_a_container_that_starts_reporting_resources_is_another_situation():
    """A ResizeUnsupported decision is retried once the kubelet reports resources."""
    containers = [_container("app", {"cpu": "1"})]
    silent = _pod(containers, statuses=[{"name": "app", "state": {"running": {}}}])
    reporting = _pod(containers)
    assert situation(silent, read_state(silent), "n4", 1) != situation(reporting, read_state(reporting), "n4", 1)


def test_a_change_to_our_annotations_is_another_situation():
    pod = _pod([_container("app", {"cpu": "1"})])
    stamped = _pod([_container("app", {"cpu": "1"})], annotations={"workload-resizer.io/original-cpu.app": "1"})
    assert situation(pod, read_state(pod), "n4", 1) != situation(stamped, read_state(stamped), "n4", 1)


def test_foreign_annotations_and_spec_churn_are_the_same_situation():
    pod = _pod([_container("app", {"cpu": "1"})])
    other = _pod([_container("app", {"cpu": "1"})], annotations={"deployment.kubernetes.io/revision": "7"})
    other["metadata"]["resourceVersion"] = "99"
    assert situation(pod, read_state(pod), "n4", 1) == situation(other, read_state(other), "n4", 1)


def test_annotation_order_does_not_change_the_situation():
    first = _pod(
        [_container("app", {"cpu": "1"})],
        annotations={"workload-resizer.io/original-cpu.app": "1", "workload-resizer.io/original-memory.app": "1Gi"},
    )
    second = _pod(
        [_container("app", {"cpu": "1"})],
        annotations={"workload-resizer.io/original-memory.app": "1Gi", "workload-resizer.io/original-cpu.app": "1"},
    )
    assert situation(first, read_state(first), "n4", 1) == situation(second, read_state(second), "n4", 1)


def test_a_situation_is_hashable():
    pod = _pod([_container("app", {"cpu": "1"})])
    assert hash(situation(pod, read_state(pod), "n4", 1)) == hash(
        situation(copy.deepcopy(pod), read_state(copy.deepcopy(pod)), "n4", 1)
    )


# ------------------------------------------------------------------ small helpers


@pytest.mark.parametrize(
    ("subresource", "path"),
    [
        (None, "/api/v1/namespaces/shop/pods/web-1"),
        ("resize", "/api/v1/namespaces/shop/pods/web-1/resize"),
    ],
)
def test_pod_path(subresource, path):
    assert pod_path(_pod([]), subresource) == path


def test_a_running_bound_pod_is_live():
    assert is_live_and_bound(_pod([_container("app", {"cpu": "1"})]))


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_is_not_live(phase):
    assert not is_live_and_bound(_pod([_container("app", {"cpu": "1"})], phase=phase))


def test_an_unbound_pod_is_not_live():
    pod = _pod([_container("app", {"cpu": "1"})])
    pod["spec"]["nodeName"] = None
    assert not is_live_and_bound(pod)


# ------------------------------------------------------------------ bookkeeping that must not leak


def _manager():
    import asyncio

    from kube.workqueue import WorkQueue
    from reconciler.manager import Manager
    from reconciler.settings import ControllerSettings

    class NoConfig:
        config = None
        generation = 0

    async def make():
        return Manager(
            object(),
            object(),
            NoConfig(),
            WorkQueue("t"),  # type: ignore[arg-type]
            ControllerSettings(node_type_label="family"),
        )

    return asyncio.run(make())


def _bound(name: str, uid: str, node: str = "node-1") -> dict[str, Any]:
    pod = _pod([_container("app", {"cpu": "1"})])
    pod["metadata"].update(name=name, uid=uid)
    pod["spec"]["nodeName"] = node
    return pod


def test_a_deleted_node_is_forgotten():
    import asyncio

    m = _manager()

    async def body():
        m._on_pod("ADDED", _bound("a", "u1", "node-1"), None)
        m._on_node("DELETED", {"metadata": {"name": "node-1", "labels": {}}}, None)

    asyncio.run(body())
    assert "node-1" not in m._pods_on_node


def test_a_node_without_pods_left_is_forgotten():
    import asyncio

    m = _manager()
    pod = _bound("a", "u1", "node-1")

    async def body():
        m._on_pod("ADDED", pod, None)
        m._on_pod("DELETED", pod, pod)

    asyncio.run(body())
    assert m._pods_on_node == {}


def test_a_relist_replacing_a_same_named_pod_drops_the_old_uids_entries():
    import asyncio

    m = _manager()
    old, new = _bound("a", "uid-old"), _bound("a", "uid-new")
    m.reconciler._memory.of("uid-old").decided = ("n4", 1, (), ())
    m.reconciler._memory.of("uid-old").finished = "n4"

    async def body():
        m._on_pod("MODIFIED", new, old)  # what Informer._list reports for a replaced pod

    asyncio.run(body())
    assert "uid-old" not in m.reconciler._memory
