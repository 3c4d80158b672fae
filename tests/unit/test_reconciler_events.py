"""kube.events.EventRecorder: aggregation, spam filter, truncation (fake API client)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kube.client import ApiError
from kube.events import MAX_MESSAGE, EventRecorder, object_reference

pytestmark = pytest.mark.timeout(10)


class FakeEventsApi:
    """The write part of KubeClient (POST/PATCH) over an in-memory store of Events."""

    def __init__(self) -> None:
        self.events: dict[str, dict[str, Any]] = {}  # path of the event -> event
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        self.fail_next: ApiError | OSError | None = None

    async def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.calls.append(("create", path, obj))
        self._maybe_fail()
        self.events[f"{path}/{obj['metadata']['name']}"] = dict(obj)
        return obj

    async def patch(self, path: str, patch: dict[str, Any], content_type: str = "") -> dict[str, Any]:
        self.calls.append(("patch", path, patch))
        self._maybe_fail()
        if path not in self.events:
            raise ApiError(404, {"reason": "NotFound", "message": f"{path} not found"})
        self.events[path].update(patch)
        return self.events[path]

    async def write(self, method: str, path: str, body: dict[str, Any], content_type: str = "") -> None:
        """KubeClient.write: the recorder sends a Merge Patch and never reads a reply."""
        if method == "POST":
            await self.create(path, body)
        else:
            assert (method, content_type) == ("PATCH", "application/merge-patch+json")
            await self.patch(path, body, content_type)

    def _maybe_fail(self) -> None:
        if self.fail_next is not None:
            err, self.fail_next = self.fail_next, None
            raise err

    def expire_all(self) -> None:
        """The apiserver's event TTL ran out."""
        self.events.clear()

    @property
    def kinds(self) -> list[str]:
        return [kind for kind, _, _ in self.calls]


def _pod(name: str = "web-1", uid: str = "uid-1", namespace: str = "shop") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": "7"}}


def _ref(**kwargs: str) -> dict[str, Any]:
    return object_reference(_pod(**kwargs), "Pod")


def _emit_all(recorder: EventRecorder, *emits: tuple[dict[str, Any], str, str, str]) -> None:
    async def body() -> None:
        for emit in emits:
            await recorder.emit(*emit)

    asyncio.run(body())


def _recorder(api: FakeEventsApi, **kwargs: Any) -> EventRecorder:
    return EventRecorder(api, **kwargs)  # type: ignore[arg-type]


# ------------------------------------------------------------------ the created Event


def test_object_reference_names_the_pod_and_its_version():
    assert _ref() == {
        "kind": "Pod",
        "apiVersion": "v1",
        "namespace": "shop",
        "name": "web-1",
        "uid": "uid-1",
        "resourceVersion": "7",
    }


def test_first_emit_creates_an_event_with_count_one_in_the_object_namespace():
    api = FakeEventsApi()
    _emit_all(_recorder(api), (_ref(), "Normal", "Resized", "resized for node type n4"))
    [(kind, path, event)] = api.calls
    assert (kind, path) == ("create", "/api/v1/namespaces/shop/events")
    assert event["count"] == 1
    assert (event["type"], event["reason"], event["message"]) == ("Normal", "Resized", "resized for node type n4")
    assert event["involvedObject"]["uid"] == "uid-1" and event["involvedObject"]["kind"] == "Pod"
    assert event["metadata"]["namespace"] == "shop" and event["metadata"]["name"].startswith("web-1.")
    assert event["source"]["component"] == "workload-resizer"
    assert event["firstTimestamp"] == event["lastTimestamp"]


def test_involved_object_leaves_out_unset_fields():
    api = FakeEventsApi()
    ref = object_reference({"metadata": {"name": "n1", "namespace": "shop"}}, "ConfigMap")
    _emit_all(_recorder(api), (ref, "Warning", "InvalidConfig", "bad"))
    assert api.calls[0][2]["involvedObject"] == {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "namespace": "shop",
        "name": "n1",
    }


def test_event_names_are_unique_per_create():
    api = FakeEventsApi()
    _emit_all(_recorder(api), *[(_ref(), "Normal", "Resized", f"message {i}") for i in range(5)])
    names = [obj["metadata"]["name"] for _, _, obj in api.calls]
    assert len(set(names)) == 5


# ------------------------------------------------------------------ truncation


def test_a_long_message_is_truncated_to_the_maximum_with_an_ellipsis():
    api = FakeEventsApi()
    _emit_all(_recorder(api), (_ref(), "Warning", "ResizeFailed", "x" * 5000))
    message = api.calls[0][2]["message"]
    assert len(message) == MAX_MESSAGE
    assert message.endswith("...") and message[:-3] == "x" * (MAX_MESSAGE - 3)


def test_a_message_of_exactly_the_maximum_is_kept_whole():
    api = FakeEventsApi()
    _emit_all(_recorder(api), (_ref(), "Warning", "ResizeFailed", "y" * MAX_MESSAGE))
    assert api.calls[0][2]["message"] == "y" * MAX_MESSAGE


# ------------------------------------------------------------------ aggregation


def test_a_repeat_bumps_the_count_of_the_existing_event():
    api = FakeEventsApi()
    emit = (_ref(), "Warning", "ResizeUnsupported", "node n1 does not support in-place resize")
    _emit_all(_recorder(api), emit, emit, emit)
    assert api.kinds == ["create", "patch", "patch"]
    created = api.calls[0][2]
    event_path = f"/api/v1/namespaces/shop/events/{created['metadata']['name']}"
    assert [(path, body["count"]) for _, path, body in api.calls[1:]] == [(event_path, 2), (event_path, 3)]
    assert api.events[event_path]["count"] == 3


def test_a_different_message_creates_a_new_event():
    api = FakeEventsApi()
    _emit_all(_recorder(api), (_ref(), "Normal", "Resized", "to 800m"), (_ref(), "Normal", "Resized", "to 900m"))
    assert api.kinds == ["create", "create"]


def test_a_different_reason_creates_a_new_event():
    api = FakeEventsApi()
    _emit_all(_recorder(api), (_ref(), "Warning", "ResizeFailed", "m"), (_ref(), "Warning", "ResizeUnsupported", "m"))
    assert api.kinds == ["create", "create"]


def test_the_same_message_about_another_object_creates_a_new_event():
    api = FakeEventsApi()
    _emit_all(
        _recorder(api),
        (_ref(name="a", uid="ua"), "Normal", "Resized", "m"),
        (_ref(name="b", uid="ub"), "Normal", "Resized", "m"),
    )
    assert api.kinds == ["create", "create"]


def test_a_repeat_after_the_aggregation_window_creates_a_new_event():
    api = FakeEventsApi()
    emit = (_ref(), "Normal", "Resized", "m")
    _emit_all(_recorder(api, aggregate_window=0.0), emit, emit)
    assert api.kinds == ["create", "create"]


def test_a_repeat_of_an_event_the_apiserver_expired_recreates_it():
    api = FakeEventsApi()
    recorder = _recorder(api)
    emit = (_ref(), "Normal", "Resized", "m")
    _emit_all(recorder, emit)
    api.expire_all()
    _emit_all(recorder, emit, emit)
    assert api.kinds == ["create", "patch", "create", "patch"]
    recreated = api.calls[2][2]
    assert recreated["count"] == 1
    assert api.calls[3][1].endswith("/" + recreated["metadata"]["name"])
    assert api.calls[3][2]["count"] == 2


def test_evicted_repeats_are_created_anew_when_the_cache_is_full():
    api = FakeEventsApi()
    emits = [(_ref(), "Normal", "Resized", f"m{i}") for i in range(3)]
    _emit_all(_recorder(api, cache_size=2), *emits, emits[0], emits[2])
    assert api.kinds == ["create", "create", "create", "create", "patch"]


# ------------------------------------------------------------------ spam filter


def test_a_storm_of_distinct_events_on_one_object_is_cut_after_the_burst():
    api = FakeEventsApi()
    _emit_all(_recorder(api, burst=25), *[(_ref(), "Warning", "ResizeFailed", f"m{i}") for i in range(40)])
    assert api.kinds == ["create"] * 25
    assert [obj["message"] for _, _, obj in api.calls] == [f"m{i}" for i in range(25)]


def test_the_spam_filter_is_per_object():
    api = FakeEventsApi()
    storm = [(_ref(name="a", uid="ua"), "Warning", "ResizeFailed", f"m{i}") for i in range(5)]
    _emit_all(_recorder(api, burst=3), *storm, (_ref(name="b", uid="ub"), "Warning", "ResizeFailed", "m0"))
    assert [obj["involvedObject"]["name"] for _, _, obj in api.calls] == ["a", "a", "a", "b"]


def test_repeats_are_still_counted_when_the_object_budget_is_spent():
    api = FakeEventsApi()
    first = (_ref(), "Warning", "ResizeFailed", "m0")
    _emit_all(
        _recorder(api, burst=2),
        first,
        (_ref(), "Warning", "ResizeFailed", "m1"),
        (_ref(), "Warning", "ResizeFailed", "m2"),
        first,
    )
    assert api.kinds == ["create", "create", "patch"]
    assert api.calls[2][2]["count"] == 2


def test_the_spam_budget_refills_over_time():
    api = FakeEventsApi()
    recorder = _recorder(api, burst=1, refill_seconds=0.02)

    async def body() -> None:
        await recorder.emit(_ref(), "Warning", "ResizeFailed", "m0")
        await recorder.emit(_ref(), "Warning", "ResizeFailed", "m1")  # dropped
        await asyncio.sleep(0.05)
        await recorder.emit(_ref(), "Warning", "ResizeFailed", "m2")

    asyncio.run(body())
    assert [obj["message"] for _, _, obj in api.calls] == ["m0", "m2"]


# ------------------------------------------------------------------ best effort


def test_a_failed_create_is_not_raised():
    api = FakeEventsApi()
    api.fail_next = ApiError(403, {"reason": "Forbidden", "message": "events is forbidden"})
    _emit_all(_recorder(api), (_ref(), "Normal", "Resized", "m"))
    assert api.events == {}


def test_a_connection_error_is_not_raised():
    api = FakeEventsApi()
    api.fail_next = ConnectionResetError("reset")
    _emit_all(_recorder(api), (_ref(), "Normal", "Resized", "m"))
    assert api.events == {}


def test_a_failed_create_is_not_remembered_for_aggregation():
    api = FakeEventsApi()
    api.fail_next = ApiError(500, {"message": "boom"})
    emit = (_ref(), "Normal", "Resized", "m")
    _emit_all(_recorder(api), emit, emit)
    assert api.kinds == ["create", "create"]
    assert len(api.events) == 1


def test_a_failed_bump_other_than_not_found_is_not_raised_and_keeps_the_count():
    api = FakeEventsApi()
    recorder = _recorder(api)
    emit = (_ref(), "Normal", "Resized", "m")
    _emit_all(recorder, emit)
    api.fail_next = ApiError(500, {"message": "boom"})
    _emit_all(recorder, emit, emit)
    assert api.kinds == ["create", "patch", "patch"]
    assert api.calls[2][2]["count"] == 2
