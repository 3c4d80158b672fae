"""Only cheap reviews are decided on the webhook's event loop; large bodies are read in turn.

Every other review waits while the loop decides one, so a review that is large (over
INLINE_MAX_BYTES), has many JSON values, many annotations or many containers whose
originals are not memoised goes to the review workers instead, whatever its size. Large
bodies are read one chunk at a time, one body at a time: however many are in flight, a
small review waits for at most one chunk.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from app.metrics import Metrics
from app.review import (
    INLINE_MAX_ANNOTATIONS,
    INLINE_MAX_BYTES,
    INLINE_MAX_CONTAINERS,
    INLINE_MAX_VALUES,
    Answer,
    encode,
    handle_review,
    handle_review_inline,
)
from app.server import create_app
from resizer import KeyRing

REVIEW_2C = (Path(__file__).resolve().parents[2] / "bench" / "data" / "review-2c.json").read_bytes()
KEYRING = KeyRing({"k0001": b"s" * 32})


def review(
    containers: int = 2, annotations: int = 0, junk_values: int = 0, pad: int = 0, cpu: str = "250m", uid: str = "uid-1"
) -> bytes:
    doc = json.loads(REVIEW_2C)
    doc["request"]["uid"] = uid
    pod = doc["request"]["object"]
    template = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [
        {**template, "name": f"c{i}", "resources": {"requests": {"cpu": cpu, "memory": f"{64 + i}Mi"}}}
        for i in range(containers)
    ]
    notes = pod["metadata"].setdefault("annotations", {})
    notes.update({f"example.com/note-{i}": "x" for i in range(annotations - len(notes))})  # in all
    if pad:
        notes["pad"] = "p" * pad
    if junk_values:
        pod["spec"]["junk"] = list(range(junk_values))
    return json.dumps(doc, separators=(",", ":")).encode()


class RecordingWorkers:
    """Stands in for app.worker.ReviewWorkers: decides in-process, records what it was given."""

    timeout = 2.0

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def decide(self, body: Any, keys: Any, scope: Any, deadline: float, sizing: Any = None) -> Answer:
        joined = body if isinstance(body, bytes) else b"".join(body)
        self.bodies.append(joined)
        return handle_review(joined, KeyRing(keys), scope, sizing)


def wire(answer: Answer) -> tuple[int, bytes]:
    """What goes out for ``answer``: the status and the body."""
    return answer.status, encode(answer)


def make_app():
    app = create_app(Metrics(process_metrics=False))
    app.keyring = KEYRING
    workers = RecordingWorkers()
    app.review_workers = workers  # type: ignore[assignment]
    return app, workers


async def call(app, chunks: list[bytes], receive_hook=None) -> tuple[int, bytes]:
    """POST /mutate straight through the ASGI interface, the body in ``chunks``."""
    pending = list(chunks)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if receive_hook is not None:
            await receive_hook(len(chunks) - len(pending), sum(map(len, chunks[: len(chunks) - len(pending)])))
        chunk = pending.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(pending)}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    size = str(sum(map(len, chunks))).encode()
    scope = {"type": "http", "method": "POST", "path": "/mutate", "headers": [(b"content-length", size)]}
    await app(scope, receive, send)
    return sent[0]["status"], sent[1]["body"]


def test_the_bench_review_is_decided_on_the_event_loop():
    app, workers = make_app()
    status, body = asyncio.run(call(app, [REVIEW_2C]))
    assert (status, body) == wire(handle_review(REVIEW_2C, KEYRING))
    assert workers.bodies == []


@pytest.mark.parametrize(
    "costly",
    [
        pytest.param(review(containers=INLINE_MAX_CONTAINERS + 1, cpu="251m"), id="containers, originals not memoised"),
        pytest.param(review(annotations=INLINE_MAX_ANNOTATIONS + 1), id="annotations"),
        pytest.param(review(junk_values=INLINE_MAX_VALUES), id="JSON values"),
        pytest.param(review(pad=INLINE_MAX_BYTES), id="bytes"),
    ],
)
def test_a_costly_review_is_decided_by_a_review_worker_with_the_same_answer(costly):
    app, workers = make_app()
    status, body = asyncio.run(call(app, [costly]))
    assert workers.bodies == [costly]
    assert (status, body) == wire(handle_review(costly, KEYRING)) and status == 200


def test_a_small_review_of_many_containers_costs_no_more_on_the_loop_once_its_workload_is_memoised():
    app, workers = make_app()
    first = review(containers=INLINE_MAX_CONTAINERS + 3, cpu="252m", uid="replica-1")
    second = review(containers=INLINE_MAX_CONTAINERS + 3, cpu="252m", uid="replica-2")
    assert handle_review_inline(first, KEYRING) is None
    handle_review(first, KEYRING)  # what a first replica decided here leaves memoised
    asyncio.run(call(app, [second]))
    assert workers.bodies == []
    assert handle_review_inline(second, KEYRING) == handle_review(second, KEYRING)


@pytest.mark.parametrize(
    "cheap",
    [
        REVIEW_2C,
        review(containers=INLINE_MAX_CONTAINERS, cpu="253m"),
        review(annotations=INLINE_MAX_ANNOTATIONS),
        b"[1, 2]",
        b"{not json",
    ],
)
def test_handle_review_inline_answers_as_handle_review_when_the_review_is_cheap(cheap):
    assert handle_review_inline(cheap, KEYRING) == handle_review(cheap, KEYRING)


def test_large_bodies_are_read_one_at_a_time_a_chunk_per_turn():
    app, workers = make_app()
    bodies = [review(pad=300_000, uid=f"large-{i}") for i in range(3)]
    reading: dict[str, Any] = {"now": 0, "peak": 0, "turns": []}

    def hook(uid: int):
        async def receive_hook(index: int, received: int) -> None:
            if received <= INLINE_MAX_BYTES:  # the start of every body is read as it comes
                return
            reading["now"] += 1
            reading["peak"] = max(reading["peak"], reading["now"])
            reading["turns"].append(uid)
            await asyncio.sleep(0.002)  # the chunk is on its way
            reading["now"] -= 1

        return receive_hook

    async def scenario():
        return await asyncio.gather(
            *(call(app, [b[i : i + 8192] for i in range(0, len(b), 8192)], hook(n)) for n, b in enumerate(bodies))
        )

    answers = asyncio.run(scenario())
    assert reading["peak"] == 1
    assert [answer for answer in answers] == [wire(handle_review(b, KEYRING)) for b in bodies]
    turns = reading["turns"]
    assert {turns[i] for i in range(3, 9)} == {0, 1, 2}, "turns go round, not one whole body after the other"
    assert sorted(workers.bodies) == sorted(bodies)


def test_a_slow_sender_gives_its_turn_away():
    app, _ = make_app()
    slow_body, fast_body = review(pad=100_000, uid="slow"), review(pad=100_000, uid="fast")
    stalled = asyncio.Event()

    async def slow_hook(index: int, received: int) -> None:
        if received > INLINE_MAX_BYTES:
            await stalled.wait()  # never sends the rest until the end

    async def scenario():
        slow = asyncio.create_task(
            call(app, [slow_body[i : i + 20_000] for i in range(0, len(slow_body), 20_000)], slow_hook)
        )
        await asyncio.sleep(0.01)
        fast = await asyncio.wait_for(
            call(app, [fast_body[i : i + 20_000] for i in range(0, len(fast_body), 20_000)]), 2
        )
        stalled.set()
        return await slow, fast

    slow, fast = asyncio.run(scenario())
    assert fast == wire(handle_review(fast_body, KEYRING))
    assert slow == wire(handle_review(slow_body, KEYRING))
