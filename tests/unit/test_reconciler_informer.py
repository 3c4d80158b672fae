"""kube.informer.Informer: paged list, relist diff and watch events into the cache (fake client)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kube.client import WatchExpired
from kube.informer import Informer, object_key
from kube.slim import slim_pod
from ops.prometheus import REGISTRY

pytestmark = pytest.mark.timeout(10)


def _pod(name: str, rv: str, namespace: str = "ns", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "app", "env": [{"name": "A"}]}], **spec},
        "status": {"phase": "Running"},
    }


class FakeListWatch:
    """`get` serves list pages in order; `watch` replays scripted streams."""

    def __init__(self) -> None:
        self.lists: list[list[dict[str, Any]]] = []  # each list: its pages
        self.streams: list[list[dict[str, Any]]] = []
        self.end_with: BaseException | None = None
        self.get_calls: list[dict[str, Any]] = []
        self.watch_calls: list[tuple[str, dict[str, Any]]] = []

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        self.get_calls.append(params)
        pages = self.lists[0]
        page = pages.pop(0)
        if not pages:
            self.lists.pop(0)
        return page

    async def watch(
        self, path: str, resource_version: str, params: dict[str, Any], server_timeout: int, idle_timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        self.watch_calls.append((resource_version, params))
        for event in self.streams.pop(0):
            yield event
        if self.end_with is not None:
            raise self.end_with


def _page(items: list[dict[str, Any]], rv: str = "", cont: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"resourceVersion": rv} if rv else {}
    if cont:
        meta["continue"] = cont
    return {"kind": "PodList", "metadata": meta, "items": items}


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str | None]] = []  # kind, key@rv, old rv

    def __call__(self, kind: str, new: dict[str, Any], old: dict[str, Any] | None) -> None:
        self.events.append(
            (
                kind,
                f"{object_key(new)}@{new['metadata']['resourceVersion']}",
                None if old is None else old["metadata"]["resourceVersion"],
            )
        )


def _informer(client: FakeListWatch, handler: Recorder, **kwargs: Any) -> Informer:
    return Informer(
        client,
        "pods",
        "/api/v1/pods",
        slim_pod,
        handler,  # type: ignore[arg-type]
        params={"fieldSelector": "spec.nodeName!="},
        **kwargs,
    )


def _list(informer: Informer) -> None:
    asyncio.run(informer._list())


def _watch(informer: Informer) -> BaseException | None:
    try:
        asyncio.run(informer._watch())
    except (WatchExpired, ValueError) as err:
        return err
    return None


# ------------------------------------------------------------------ object_key


def test_object_key_is_namespace_slash_name_for_namespaced_objects():
    assert object_key({"metadata": {"name": "p", "namespace": "ns"}}) == "ns/p"


def test_object_key_is_the_name_for_cluster_scoped_objects():
    assert object_key({"metadata": {"name": "node-1"}}) == "node-1"


# ------------------------------------------------------------------ list


def test_the_first_list_reports_every_object_as_added_and_marks_the_cache_synced():
    client, handler = FakeListWatch(), Recorder()
    client.lists = [[_page([_pod("a", "1"), _pod("b", "2")], rv="10")]]
    informer = _informer(client, handler)
    _list(informer)
    assert handler.events == [("ADDED", "ns/a@1", None), ("ADDED", "ns/b@2", None)]
    assert set(informer.store) == {"ns/a", "ns/b"}
    assert informer.synced.is_set()
    assert informer._resource_version == "10"


def test_listed_objects_are_slimmed_before_they_are_cached():
    client, handler = FakeListWatch(), Recorder()
    client.lists = [[_page([_pod("a", "1")], rv="10")]]
    informer = _informer(client, handler)
    _list(informer)
    assert informer.store["ns/a"] == slim_pod(_pod("a", "1"))
    assert "managedFields" not in informer.store["ns/a"]["metadata"]


def test_a_paged_list_follows_continue_tokens_and_resumes_from_the_last_page_version():
    client, handler = FakeListWatch(), Recorder()
    client.lists = [
        [_page([_pod("a", "1")], cont="t1"), _page([_pod("b", "2")], cont="t2"), _page([_pod("c", "3")], rv="30")]
    ]
    informer = _informer(client, handler, page_size=1)
    _list(informer)
    assert set(informer.store) == {"ns/a", "ns/b", "ns/c"}
    assert informer._resource_version == "30"
    assert [call.get("continue") for call in client.get_calls] == [None, "t1", "t2"]
    assert all(call["limit"] == "1" and call["fieldSelector"] == "spec.nodeName!=" for call in client.get_calls)


def test_a_relist_reports_changed_new_and_vanished_objects_only():
    client, handler = FakeListWatch(), Recorder()
    client.lists = [
        [_page([_pod("same", "1"), _pod("changed", "2"), _pod("gone", "3")], rv="10")],
        [_page([_pod("same", "1"), _pod("changed", "5"), _pod("new", "6")], rv="20")],
    ]
    informer = _informer(client, handler)
    _list(informer)
    handler.events.clear()
    _list(informer)
    assert sorted(handler.events) == [
        ("ADDED", "ns/new@6", None),
        ("DELETED", "ns/gone@3", "3"),
        ("MODIFIED", "ns/changed@5", "2"),
    ]
    assert set(informer.store) == {"ns/same", "ns/changed", "ns/new"}
    assert informer._resource_version == "20"


def test_an_empty_relist_deletes_everything_cached():
    client, handler = FakeListWatch(), Recorder()
    client.lists = [[_page([_pod("a", "1"), _pod("b", "2")], rv="10")], [_page([], rv="20")]]
    informer = _informer(client, handler)
    _list(informer)
    handler.events.clear()
    _list(informer)
    assert sorted(handler.events) == [("DELETED", "ns/a@1", "1"), ("DELETED", "ns/b@2", "2")]
    assert informer.store == {}


def test_same_name_in_two_namespaces_are_two_objects():
    client, handler = FakeListWatch(), Recorder()
    client.lists = [[_page([_pod("a", "1", namespace="x"), _pod("a", "2", namespace="y")], rv="10")]]
    informer = _informer(client, handler)
    _list(informer)
    assert set(informer.store) == {"x/a", "y/a"}


# ------------------------------------------------------------------ watch


def _listed(items: list[dict[str, Any]], rv: str = "10") -> tuple[FakeListWatch, Recorder, Informer]:
    client, handler = FakeListWatch(), Recorder()
    client.lists = [[_page(items, rv=rv)]]
    informer = _informer(client, handler)
    _list(informer)
    handler.events.clear()
    return client, handler, informer


def test_the_watch_starts_from_the_list_resource_version_with_the_same_selector():
    client, _, informer = _listed([], rv="77")
    client.streams = [[]]
    _watch(informer)
    assert client.watch_calls == [("77", {"fieldSelector": "spec.nodeName!="})]


def test_watch_events_update_the_cache_and_the_resume_version():
    client, handler, informer = _listed([_pod("a", "1")])
    client.streams = [
        [
            {"type": "MODIFIED", "object": _pod("a", "11")},
            {"type": "ADDED", "object": _pod("b", "12")},
            {"type": "DELETED", "object": _pod("a", "13")},
        ]
    ]
    assert _watch(informer) is None
    assert handler.events == [("MODIFIED", "ns/a@11", "1"), ("ADDED", "ns/b@12", None), ("DELETED", "ns/a@13", "11")]
    assert set(informer.store) == {"ns/b"}
    assert informer._resource_version == "13"


def test_the_cached_objects_gauge_follows_the_store_through_watch_events():
    client, handler, informer = _listed([_pod("a", "1")])
    sizes: list[int] = []
    client.streams = [
        [
            {"type": "ADDED", "object": _pod("b", "11")},
            {"type": "MODIFIED", "object": _pod("b", "12")},
            {"type": "ADDED", "object": _pod("c", "13")},
            {"type": "DELETED", "object": _pod("a", "14")},
            {"type": "DELETED", "object": _pod("gone", "15")},
        ]
    ]
    informer._handler = lambda kind, new, old: sizes.append(int(_cached(informer)))
    _watch(informer)
    assert sizes == [2, 2, 3, 2, 2]
    assert _cached(informer) == len(informer.store) == 2


def _cached(informer: Informer) -> float:
    value = REGISTRY.get_sample_value("workload_resizer_cached_objects", {"resource": informer.resource})
    assert value is not None
    return value


def test_a_watch_added_event_for_a_cached_object_is_reported_as_modified():
    client, handler, informer = _listed([_pod("a", "1")])
    client.streams = [[{"type": "ADDED", "object": _pod("a", "11")}]]
    _watch(informer)
    assert handler.events == [("MODIFIED", "ns/a@11", "1")]


def test_a_bookmark_moves_the_resume_version_without_touching_the_cache():
    client, handler, informer = _listed([_pod("a", "1")])
    client.streams = [[{"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "99"}}}]]
    _watch(informer)
    assert handler.events == []
    assert set(informer.store) == {"ns/a"}
    assert informer._resource_version == "99"


def test_a_resumed_watch_starts_from_the_last_event_seen():
    client, _, informer = _listed([])
    client.streams = [[{"type": "ADDED", "object": _pod("a", "11")}], []]
    _watch(informer)
    _watch(informer)
    assert [rv for rv, _ in client.watch_calls] == ["10", "11"]


def test_watched_objects_are_slimmed_before_they_are_cached():
    client, _, informer = _listed([])
    client.streams = [[{"type": "ADDED", "object": _pod("a", "11")}]]
    _watch(informer)
    assert informer.store["ns/a"] == slim_pod(_pod("a", "11"))


def test_an_expired_watch_propagates_after_applying_earlier_events():
    client, handler, informer = _listed([])
    client.streams = [[{"type": "ADDED", "object": _pod("a", "11")}]]
    client.end_with = WatchExpired("/api/v1/pods")
    assert isinstance(_watch(informer), WatchExpired)
    assert set(informer.store) == {"ns/a"}


# ------------------------------------------------------------------ run: re-list on 410


def test_run_relists_after_the_watch_expires_and_reports_what_changed_meanwhile():
    client, handler = FakeListWatch(), Recorder()
    client.lists = [
        [_page([_pod("a", "1"), _pod("b", "2")], rv="10")],
        [_page([_pod("a", "1"), _pod("c", "30")], rv="40")],
    ]

    streams = iter([WatchExpired("/api/v1/pods"), None])
    relisted = asyncio.Event()

    async def watch(path, resource_version, params, server_timeout, idle_timeout):
        client.watch_calls.append((resource_version, params))
        outcome = next(streams, None)
        if isinstance(outcome, BaseException):
            raise outcome
        relisted.set()
        await asyncio.sleep(30)
        yield {}

    client.watch = watch  # type: ignore[method-assign]
    informer = _informer(client, handler)

    async def body() -> None:
        task = asyncio.create_task(informer.run())
        await asyncio.wait_for(relisted.wait(), 2)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(body())
    assert [rv for rv, _ in client.watch_calls] == ["10", "40"]
    assert handler.events[2:] == [("ADDED", "ns/c@30", None), ("DELETED", "ns/b@2", "2")]


def test_a_watch_that_closes_at_once_is_retried_with_backoff_not_in_a_tight_loop(monkeypatch):
    """200 watches that close at once with nothing (HTTP 200, empty body) must not mean 200
    reconnects in a row: each is a failure with growing, jittered backoff."""
    client, handler = FakeListWatch(), Recorder()
    client.lists = [[_page([_pod("a", "1")], rv="10")]]
    client.streams = [[] for _ in range(200)]
    sleeps: list[float] = []
    real_sleep = asyncio.sleep

    this_thread = threading.get_ident()

    async def fake_sleep(delay: float) -> None:
        # The patch is process-wide (asyncio.sleep itself): a loop another test left running in a
        # thread (e.g. uvicorn's 0.1 s tick) must not be counted as the informer's backoff.
        if threading.get_ident() == this_thread:
            sleeps.append(delay)
        await real_sleep(0)

    monkeypatch.setattr("kube.informer.asyncio.sleep", fake_sleep)
    informer = _informer(client, handler)

    async def body() -> None:
        task = asyncio.create_task(informer.run())
        while len(client.watch_calls) < 8:
            await real_sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(body())
    assert len(sleeps) >= 7, "a sleep after every empty watch"
    assert sleeps[0] >= 0.5 and sleeps[5] >= 16 and all(b >= a / 2 for a, b in zip(sleeps, sleeps[1:], strict=False)), (
        sleeps
    )


def test_a_watch_that_delivered_events_resets_the_backoff():
    client, handler = FakeListWatch(), Recorder()
    client.lists = [[_page([], rv="10")]]
    client.streams = [[{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "11"}}}]]
    informer = _informer(client, handler)
    assert asyncio.run(informer._watch()) == 1
