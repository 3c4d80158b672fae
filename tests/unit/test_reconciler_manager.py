"""The manager's event-to-key mapping: which watch events queue which pods."""

from __future__ import annotations

import asyncio
from typing import Any

from kube.slim import slim_node, slim_pod
from kube.workqueue import WorkQueue
from reconciler.manager import Manager
from reconciler.settings import ControllerSettings
from tests.unit.fake_cluster import FakeCluster, FakeConfig
from tests.unit.test_reconciler_reconcile import CONFIG, LABEL, pod


def node(name: str, family: str | None) -> dict[str, Any]:
    return slim_node({"metadata": {"name": name, "resourceVersion": "1", "labels": {LABEL: family} if family else {}}})


def queued(queue: WorkQueue) -> list[str]:
    return list(queue._queue)


def manager(**kwargs: Any) -> Manager:
    fake = FakeCluster()
    return Manager(
        None,
        fake,
        FakeConfig(CONFIG),
        WorkQueue("test"),  # type: ignore[arg-type]
        ControllerSettings(node_type_label=LABEL),
        **kwargs,
    )


def test_a_pod_event_queues_its_key_once_its_node_is_typed():
    async def scenario() -> None:
        m = manager()
        m.nodes.store["node-1"] = node("node-1", None)
        m.pods.store["shop/web-1"] = p = slim_pod(pod())
        m._on_pod("ADDED", p, None)
        assert queued(m.queue) == [], "untyped node: nothing to do"
        labelled = node("node-1", "n4")
        m.nodes.store["node-1"] = labelled
        m._on_node("MODIFIED", labelled, node("node-1", None))
        assert queued(m.queue) == ["shop/web-1"], "labelling the node queues the pods on it"

    asyncio.run(scenario())


def test_a_node_event_that_keeps_the_label_queues_nothing():
    async def scenario() -> None:
        m = manager()
        m.nodes.store["node-1"] = node("node-1", "n4")
        p = slim_pod(pod(annotations={"workload-resizer.io/applied-instance-type": "n4"}))
        m.pods.store["shop/web-1"] = p
        m._on_pod("ADDED", p, None)
        m._on_node("MODIFIED", node("node-1", "n4"), node("node-1", "n4"))
        assert queued(m.queue) == []

    asyncio.run(scenario())


def test_a_config_change_queues_every_pod_that_needs_work():
    async def scenario() -> None:
        m = manager()
        m.nodes.store["node-1"] = node("node-1", "n4")
        m.pods.store["shop/web-1"] = slim_pod(pod())
        m.on_config_change()
        assert queued(m.queue) == ["shop/web-1"]

    asyncio.run(scenario())


def test_a_pod_filter_keeps_pods_out_of_the_queue():
    async def scenario() -> None:
        m = manager(pod_filters=(lambda p: p["metadata"]["namespace"] != "shop",))
        m.nodes.store["node-1"] = node("node-1", "n4")
        m._on_pod("ADDED", slim_pod(pod()), None)
        assert queued(m.queue) == []

    asyncio.run(scenario())


def test_a_deleted_pod_is_dropped_from_the_node_index():
    async def scenario() -> None:
        m = manager()
        p = slim_pod(pod())
        m._on_pod("ADDED", p, None)
        m._on_pod("DELETED", p, p)
        assert "node-1" not in m._pods_on_node, "an empty entry is not kept either"

    asyncio.run(scenario())


def test_a_node_allocatable_change_requeues_its_pods():
    async def scenario() -> None:
        m = manager()
        before = node("node-1", "n4")
        m.nodes.store["node-1"] = after = slim_node({**before, "status": {"allocatable": {"cpu": "16"}}})
        m.pods.store["shop/web-1"] = p = slim_pod(pod())
        m._on_pod("ADDED", p, None)
        m.queue._queue.clear()
        m.queue._queued.clear()
        m._on_node("MODIFIED", after, before)
        assert queued(m.queue) == ["shop/web-1"]

    asyncio.run(scenario())


def test_the_reconciler_reads_the_store_a_relist_put_in_place():
    m = manager()
    p = slim_pod(pod())
    m.pods.store = {"shop/web-1": p}  # what Informer._list does
    assert m.reconciler._reader.pod("shop/web-1") is p


def test_only_unbound_pods_held_at_a_gate_with_originals_to_bind_are_queued():
    from kube.slim import slim_unbound_pod
    from tests.unit.test_reconciler_reconcile import KEYS, gated

    async def scenario() -> None:
        m = manager(keyring=lambda: KEYS)
        waiting = gated()
        del waiting["spec"]["schedulingGates"]  # pending for the scheduler only
        m._on_unbound_pod("ADDED", slim_unbound_pod(waiting), None)
        assert queued(m.queue) == []
        m.unbound.store["shop/web-1"] = held = slim_unbound_pod(gated())
        m._on_unbound_pod("ADDED", held, None)
        assert queued(m.queue) == ["shop/web-1"]
        assert m.reconciler._reader.unbound("shop/web-1") is held
        m.queue._queue.clear()
        m.queue._queued.clear()
        m._on_unbound_pod("DELETED", held, held)  # bound (or deleted): the pod watch's
        assert queued(m.queue) == []
        m.on_config_change()  # e.g. its namespace entered the scope
        assert queued(m.queue) == ["shop/web-1"]

    asyncio.run(scenario())


def test_a_pod_filter_keeps_gated_pods_out_of_the_queue_too():
    from kube.slim import slim_unbound_pod
    from tests.unit.test_reconciler_reconcile import KEYS, gated

    async def scenario() -> None:
        m = manager(keyring=lambda: KEYS, pod_filters=(lambda p: p["metadata"]["namespace"] != "shop",))
        m._on_unbound_pod("ADDED", slim_unbound_pod(gated()), None)
        assert queued(m.queue) == []

    asyncio.run(scenario())
