"""Costly reviews (over 16 KiB, or many values, annotations or new containers) are decided in
worker processes (app.worker), real ones here.

A worker fault (crash, hang, error) answers that review "allowed, no patch" at once,
counts and logs it, and the worker is replaced; the webhook never leaves a worker behind.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import certs
from app.metrics import Metrics
from app.review import INLINE_MAX_BYTES, Answer, encode, handle_review
from app.server import create_app
from app.worker import ReviewWorkers, WorkersBusy
from devkit.metrics import metric_sum
from ops.prometheus import exposition
from resizer import KeyRing
from tests.unit.review_worker_faults import COMMAND, CRASH, HANG, RAISE
from tests.unit.test_webhook_tls import Server, client_context

ROOT = Path(__file__).resolve().parents[2]
REVIEW_2C = (ROOT / "bench" / "data" / "review-2c.json").read_bytes()
KEYRING = KeyRing({"k0001": b"s" * 32})


def large_review(marker: bytes = b"", uid: str = "large-uid-1") -> bytes:
    """The bench review padded past INLINE_MAX_BYTES with an annotation (and a fault marker)."""
    review = json.loads(REVIEW_2C)
    review["request"]["uid"] = uid
    review["request"]["object"]["metadata"].setdefault("annotations", {})["pad"] = marker.decode() + "x" * (
        INLINE_MAX_BYTES + 1000
    )
    return json.dumps(review).encode()


def patch_of(response: httpx.Response) -> list[dict[str, Any]] | None:
    body = response.json()["response"]
    return orjson.loads(base64.b64decode(body["patch"])) if "patch" in body else None


def count(metrics: Metrics, name: str, labels: dict[str, str]) -> float:
    return metric_sum(exposition(metrics.registry).decode(), name, **labels)


def requests_total(metrics: Metrics, result: str) -> float:
    return count(metrics, "workload_resizer_webhook_requests_total", {"result": result})


def restarts(metrics: Metrics, reason: str) -> float:
    return count(metrics, "workload_resizer_webhook_review_worker_restarts_total", {"reason": reason})


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def until(predicate, seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        await asyncio.sleep(0.02)
    return False


async def with_app(scenario, time_box: float = 60.0, command: list[str] | None = COMMAND):
    """Run ``scenario(client, app, metrics, workers)`` against the ASGI app with started workers.

    The default time box is one only a hung worker reaches: on a machine busy compiling, a
    worker's first decision took over 5 s and the review was answered without one."""
    metrics = Metrics(process_metrics=False)
    app = create_app(metrics)
    app.keyring = KEYRING
    workers = ReviewWorkers(
        1, time_box, command=command, restarts=lambda reason: metrics.worker_restarts.labels(reason).inc()
    )
    await workers.start()
    app.review_workers = workers
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://webhook", timeout=60) as client:
            return await scenario(client, app, metrics, workers)
    finally:
        pids = workers.pids
        await workers.stop()
        assert not any(alive(pid) for pid in pids), "a worker outlived stop()"


def test_a_large_review_gets_the_same_answer_from_the_worker_as_on_the_loop():
    body = large_review()

    async def scenario(client, app, metrics, workers):
        r = await client.post("/mutate", content=body)
        return r, workers.pids

    r, pids = asyncio.run(with_app(scenario, command=None))
    answer = handle_review(body, KEYRING)
    status, payload = answer.status, encode(answer)
    assert r.status_code == status == 200 and r.content == payload
    assert patch_of(r) and len(pids) == 1


def test_a_review_of_more_json_objects_than_any_pod_is_refused_by_the_worker_unparsed():
    """Counted by the worker, not on the event loop: the whole body is read, handed over, and
    answered "allowed, no patch" without being parsed, on a connection kept alive (the loop's
    own refusals close it, leaving the rest of a body unread); the worker stays and decides
    the next one."""

    async def scenario(client, app, metrics, workers):
        (pid,) = workers.pids
        review = json.loads(REVIEW_2C)
        review["request"]["uid"] = "junk-uid"
        review["request"]["object"]["spec"]["junk"] = [{}] * 60_000
        junk = await client.post("/mutate", content=json.dumps(review).encode())
        assert junk.status_code == 200 and junk.json()["response"] == {"uid": "junk-uid", "allowed": True}
        assert junk.headers.get("connection") != "close"
        assert requests_total(metrics, "overloaded") == 1
        after = await client.post("/mutate", content=large_review())
        assert patch_of(after) and workers.pids == [pid]

    asyncio.run(with_app(scenario, command=None))


def test_a_crashing_worker_answers_allowed_without_patch_and_is_replaced():
    async def scenario(client, app, metrics, workers):
        (old,) = workers.pids
        r = await client.post("/mutate", content=large_review(CRASH, uid="crash-uid"))
        assert r.status_code == 200 and r.headers["connection"] == "close"
        assert r.json()["response"] == {"uid": "crash-uid", "allowed": True}
        assert requests_total(metrics, "error") == 1 and restarts(metrics, "crash") == 1
        assert await until(lambda: workers.free == 1), "no replacement worker"
        after = await client.post("/mutate", content=large_review())
        assert patch_of(after) and workers.pids != [old] and not alive(old)

    asyncio.run(with_app(scenario))


def test_an_erring_worker_answers_allowed_without_patch_and_is_replaced(caplog):
    async def scenario(client, app, metrics, workers):
        (old,) = workers.pids
        r = await client.post("/mutate", content=large_review(RAISE, uid="raise-uid"))
        assert r.status_code == 200 and r.json()["response"] == {"uid": "raise-uid", "allowed": True}
        assert requests_total(metrics, "error") == 1 and restarts(metrics, "error") == 1
        assert await until(lambda: workers.free == 1), "no replacement worker"
        after = await client.post("/mutate", content=large_review())
        assert patch_of(after) and workers.pids != [old]

    asyncio.run(with_app(scenario))
    errors = [r for r in caplog.records if r.name == "workload_resizer.webhook" and r.levelname == "ERROR"]
    assert any("injected fault" in str(getattr(r, "error", "")) for r in errors)


def test_a_hanging_worker_is_answered_by_the_time_box_then_killed_while_small_reviews_go_on():
    async def scenario(client, app, metrics, workers):
        (old,) = workers.pids
        hung = asyncio.ensure_future(client.post("/mutate", content=large_review(HANG, uid="hang-uid")))
        # Small reviews are decided on the loop while the large one is in the worker.
        while not hung.done():
            small = await client.post("/mutate", content=REVIEW_2C)
            assert patch_of(small)
            await asyncio.sleep(0.05)
        r = hung.result()
        assert r.status_code == 200 and r.json()["response"] == {"uid": "hang-uid", "allowed": True}
        # Answered by the time box (as under overload); the worker is killed when its own
        # time box (started a moment later) runs out.
        assert requests_total(metrics, "overloaded") == 1
        assert await until(lambda: restarts(metrics, "timeout") == 1)
        # Its replacement takes the next large review (once started: on a loaded machine that
        # can take longer than the 1 s time box, and the review would be answered as overloaded).
        assert await until(lambda: workers.free == 1)
        after = await client.post("/mutate", content=large_review())
        assert patch_of(after) and not alive(old)
        return requests_total(metrics, "patched")

    patched = asyncio.run(with_app(scenario, time_box=1.0))
    assert patched >= 2


def test_a_review_finding_every_worker_busy_is_answered_as_overloaded(caplog):
    async def scenario(client, app, metrics, workers):
        hung = asyncio.ensure_future(client.post("/mutate", content=large_review(HANG, uid="hang-uid")))
        # The hung review holds the only worker; the next one arrives within the hung one's time
        # box and waits for a free worker no longer than its own (a fixed sleep lost that race
        # on a loaded machine: the busy review got the worker first and was patched).
        assert await until(lambda: workers.free == 0, 10)
        busy = await client.post("/mutate", content=large_review(uid="busy-uid"))
        assert busy.json()["response"] == {"uid": "busy-uid", "allowed": True}
        await hung
        assert requests_total(metrics, "overloaded") == 2 and requests_total(metrics, "patched") == 0

    asyncio.run(with_app(scenario, time_box=1.0))
    errors = {getattr(r, "error", "") for r in caplog.records if getattr(r, "reason", "") == "Overloaded"}
    assert "no review worker free within 1s" in errors


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux scheduling policies")
def test_a_started_worker_yields_the_cpu_to_the_event_loop():
    async def scenario():
        workers = ReviewWorkers(1, 1.0)
        await workers.start()
        try:
            (pid,) = workers.pids
            assert os.sched_getscheduler(pid) == os.SCHED_IDLE
        finally:
            await workers.stop()

    asyncio.run(scenario())


def test_workers_are_spawned_off_the_event_loop_thread(monkeypatch):
    """Forking on the loop's thread held every review for ~7 ms per worker (re)started; the
    spawn runs on the spawner thread while the loop goes on."""
    import threading

    from app import worker as worker_module

    spawned_on = []
    real_popen = worker_module._popen

    def recording_popen(argv, env):
        spawned_on.append(threading.current_thread())
        return real_popen(argv, env)

    monkeypatch.setattr(worker_module, "_popen", recording_popen)

    async def scenario():
        workers = ReviewWorkers(1, 1.0)
        await workers.start()
        try:
            status = (await workers.decide(large_review(), {}, None, time.monotonic() + 10)).status
            assert status == 200
        finally:
            await workers.stop()

    asyncio.run(scenario())
    assert len(spawned_on) == 1 and spawned_on[0] is not threading.main_thread()


def test_workers_started_and_killed_leave_no_descriptor_behind():
    """Each replacement of a faulty worker must give its pipes back (one descriptor per
    replacement stayed open before: a slow leak under hostile load)."""
    from app.worker import start_worker

    async def scenario():
        worker = await start_worker()  # the first start opens what stays (the spawner thread)
        worker.kill()
        await worker.wait()
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(10):
            worker = await start_worker()
            worker.kill()
            await worker.wait()
        await asyncio.sleep(0.1)
        return before, len(os.listdir("/proc/self/fd"))

    uvloop = pytest.importorskip("uvloop")  # the webhook's loop (app.run), where pipes leaked
    before, after = uvloop.run(scenario())
    assert after <= before, (before, after)


def test_stopped_workers_take_no_review():
    async def scenario():
        workers = ReviewWorkers(1, 1.0)
        await workers.start()
        (pid,) = workers.pids
        await workers.stop()
        assert not alive(pid)
        with pytest.raises(WorkersBusy):
            await workers.decide(large_review(), {}, None, time.monotonic() + 1)

    asyncio.run(scenario())


# ---------------------------------------------------------------- the real webhook process


def children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.append(int(entry))
            except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
                pass
    return found


def wait_for(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def tls_pair(tmp_path: Path):
    ca = certs.generate_ca()
    leaf = certs.issue_serving_cert(ca, ips=["127.0.0.1"])
    paths = certs.write_pair(str(tmp_path), leaf, ca)
    return Path(paths["tls.crt"]), Path(paths["tls.key"]), ca


def post(server: Server, ca, body: bytes) -> httpx.Response:
    with httpx.Client(verify=client_context(ca), timeout=30) as client:
        return client.post(server.url + "/mutate", content=body)


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGKILL])
def test_the_webhook_leaves_no_worker_behind(tls_pair, stop_signal):
    cert, key, ca = tls_pair
    server = Server(cert, key)
    try:
        server.wait_listening()
        assert wait_for(lambda: len(children(server.proc.pid)) == 1), "no review worker started"
        (worker,) = children(server.proc.pid)
        r = post(server, ca, large_review())
        assert r.status_code == 200 and patch_of(r)
        assert children(server.proc.pid) == [worker]
        server.proc.send_signal(stop_signal)
        server.proc.wait(30)
        # SIGTERM: drained and stopped by the webhook; SIGKILL: PR_SET_PDEATHSIG.
        assert wait_for(lambda: not alive(worker)), f"worker {worker} outlived the webhook"
        if stop_signal == signal.SIGTERM:
            assert server.proc.returncode == 0
    finally:
        server.stop()


def test_without_workers_large_reviews_are_decided_in_the_webhook_process(tls_pair):
    cert, key, ca = tls_pair
    server = Server(cert, key, "--large-review-workers", "0")
    try:
        server.wait_listening()
        r = post(server, ca, large_review())
        assert r.status_code == 200 and patch_of(r) and children(server.proc.pid) == []
    finally:
        server.stop()


def test_a_worker_that_cannot_start_fails_startup_and_leaves_nothing_running():
    async def scenario():
        workers = ReviewWorkers(2, 1.0, command=[sys.executable, "-c", "import sys; sys.exit(1)"])
        with pytest.raises(RuntimeError, match="review worker did not start"):
            await workers.start()
        assert workers.pids == []

    asyncio.run(scenario())


def test_a_worker_signs_with_the_key_it_is_sent_when_only_its_content_changed():
    """A key recreated under the same id: the worker's caches never answer with a MAC of the old key."""

    def mac_of(answer: Answer) -> str:
        assert answer.status == 200 and answer.patch is not None
        ops = orjson.loads(base64.b64decode(answer.patch))
        return next(op["value"] for op in ops if op["path"].endswith("originals-mac"))

    async def scenario() -> list[str]:
        workers = ReviewWorkers(1, 5.0)
        await workers.start()
        try:
            macs = []
            for secret in (b"l" * 32, b"r" * 32, b"l" * 32):
                macs.append(
                    mac_of(await workers.decide(large_review(), {"k0001": secret}, None, time.monotonic() + 10))
                )
            return macs
        finally:
            await workers.stop()

    lost, recreated, again = asyncio.run(scenario())
    assert lost != recreated and lost == again and recreated.startswith("v1.a.k0001.")


def test_a_cancellation_that_comes_as_a_worker_answers_is_not_swallowed():
    """The webhook stopping (its review task cancelled) at the moment a worker answers must still
    stop that task: 3.11's wait_for returned the answer instead, and the cancellation was lost."""
    task_box: list[asyncio.Task[Any]] = []

    class AnsweringAsCancelled:
        pid = 1
        returncode = None
        sizing_version = None

        async def decide(self, parts: list[bytes], meta: bytes) -> str:
            task_box[0].cancel()  # the cancellation and the answer land in the same loop turn
            return "answer"

    async def main() -> bool:
        workers = ReviewWorkers(count=1, timeout=5.0)
        worker: Any = AnsweringAsCancelled()
        task_box.append(asyncio.create_task(workers._run(worker, [b"{}"], b"")))
        await asyncio.wait(task_box)
        return task_box[0].cancelled()

    assert asyncio.run(main()), "the answer was returned, the cancellation lost"
