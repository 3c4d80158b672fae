"""kube.workqueue.WorkQueue: client-go work queue semantics on asyncio."""

from __future__ import annotations

import asyncio
import random
import time

import pytest

from kube.workqueue import WorkQueue

pytestmark = pytest.mark.timeout(10)

NOTHING = 0.05  # how long to wait before concluding that get() is not going to return


def run(coro_fn, *args):
    """Run an async test body in a fresh event loop."""
    return asyncio.run(coro_fn(*args))


async def get_soon(queue: WorkQueue, within: float = 1.0) -> str | None:
    return await asyncio.wait_for(queue.get(), within)


async def gets_nothing(queue: WorkQueue) -> bool:
    try:
        await asyncio.wait_for(queue.get(), NOTHING)
    except TimeoutError:
        return True
    return False


# ------------------------------------------------------------------ dedup and order


def test_adding_a_queued_key_again_does_not_duplicate_it():
    async def body():
        q = WorkQueue("t")
        q.add("ns/a")
        q.add("ns/a")
        q.add("ns/a")
        assert len(q) == 1
        assert await get_soon(q) == "ns/a"
        assert len(q) == 0
        assert await gets_nothing(q)

    run(body)


def test_keys_are_handed_out_in_the_order_they_were_first_added():
    async def body():
        q = WorkQueue("t")
        for key in ("c", "a", "b", "a", "c"):
            q.add(key)
        assert [await get_soon(q) for _ in range(3)] == ["c", "a", "b"]

    run(body)


def test_two_waiting_workers_each_receive_one_of_two_added_keys():
    async def body():
        q = WorkQueue("t")
        first = asyncio.create_task(get_soon(q))
        second = asyncio.create_task(get_soon(q))
        await asyncio.sleep(0)  # both are now waiting on an empty queue
        q.add("a")
        q.add("b")
        assert sorted(await asyncio.gather(first, second)) == ["a", "b"]

    run(body)


# ------------------------------------------------------------------ one worker per key


def test_a_key_being_processed_is_not_handed_to_a_second_worker():
    async def body():
        q = WorkQueue("t")
        q.add("a")
        assert await get_soon(q) == "a"
        q.add("a")
        assert len(q) == 0
        assert await gets_nothing(q)

    run(body)


def test_a_key_added_during_processing_comes_back_after_done():
    async def body():
        q = WorkQueue("t")
        q.add("a")
        assert await get_soon(q) == "a"
        waiting = asyncio.create_task(get_soon(q))
        q.add("a")
        await asyncio.sleep(0.01)
        assert not waiting.done()
        q.done("a")
        assert await waiting == "a"

    run(body)


def test_a_key_added_several_times_during_processing_comes_back_exactly_once():
    async def body():
        q = WorkQueue("t")
        q.add("a")
        assert await get_soon(q) == "a"
        for _ in range(3):
            q.add("a")
        q.done("a")
        assert len(q) == 1
        assert await get_soon(q) == "a"
        q.done("a")
        assert len(q) == 0
        assert await gets_nothing(q)

    run(body)


def test_done_without_a_new_add_does_not_requeue_the_key():
    async def body():
        q = WorkQueue("t")
        q.add("a")
        assert await get_soon(q) == "a"
        q.done("a")
        assert len(q) == 0
        assert q.idle

    run(body)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_concurrent_workers_never_overlap_on_a_key_and_lose_no_add(seed):
    """Random adds while 4 workers process: a key is never processed twice at once,
    and every add is followed by a processing of that key that started after it."""

    async def body():
        rng = random.Random(seed)
        q = WorkQueue("t")
        keys = [f"ns/p{i}" for i in range(5)]
        active: set[str] = set()
        overlaps: list[str] = []
        clock = 0
        last_add: dict[str, int] = {}
        last_start: dict[str, int] = {}

        async def worker():
            nonlocal clock
            while (key := await q.get()) is not None:
                if key in active:
                    overlaps.append(key)
                active.add(key)
                clock += 1
                last_start[key] = clock
                for _ in range(rng.randint(0, 3)):
                    await asyncio.sleep(0)
                active.discard(key)
                q.done(key)

        workers = [asyncio.create_task(worker()) for _ in range(4)]
        for _ in range(300):
            key = rng.choice(keys)
            clock += 1
            last_add[key] = clock
            q.add(key)
            for _ in range(rng.randint(0, 2)):
                await asyncio.sleep(0)
        for _ in range(200):
            if q.idle:
                break
            await asyncio.sleep(0.001)
        assert q.idle
        await q.shutdown()
        await asyncio.wait_for(asyncio.gather(*workers), 1)
        assert overlaps == []
        assert all(last_start[key] > added for key, added in last_add.items())

    run(body)


# ------------------------------------------------------------------ backoff


def test_backoff_doubles_per_failure_and_caps_at_max_delay():
    async def body():
        q = WorkQueue("t", base_delay=1.0, max_delay=10.0)
        delays = [q.add_rate_limited("a") for _ in range(6)]
        assert delays == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
        assert q.num_requeues("a") == 6
        await q.shutdown()

    run(body)


def test_forget_resets_the_backoff_to_the_base_delay():
    async def body():
        q = WorkQueue("t", base_delay=1.0, max_delay=100.0)
        for _ in range(3):
            q.add_rate_limited("a")
        q.forget("a")
        assert q.num_requeues("a") == 0
        assert q.add_rate_limited("a") == 1.0
        await q.shutdown()

    run(body)


def test_backoff_is_tracked_per_key():
    async def body():
        q = WorkQueue("t", base_delay=1.0, max_delay=100.0)
        for _ in range(4):
            q.add_rate_limited("a")
        assert q.add_rate_limited("b") == 1.0
        assert q.num_requeues("a") == 4
        await q.shutdown()

    run(body)


def test_backoff_stays_at_max_delay_after_very_many_failures():
    """A pod that keeps failing for days must not crash the worker computing its delay."""

    async def body():
        q = WorkQueue("t", base_delay=0.5, max_delay=300.0)
        delays = [q.add_rate_limited("a") for _ in range(1100)]
        assert delays[-1] == 300.0
        assert max(delays) == 300.0
        await q.shutdown()

    run(body)


def test_a_rate_limited_key_is_queued_only_after_its_delay():
    async def body():
        q = WorkQueue("t", base_delay=0.05, max_delay=1.0)
        loop = asyncio.get_running_loop()
        start = loop.time()
        q.add_rate_limited("a")
        assert len(q) == 0
        assert not q.idle
        assert await get_soon(q) == "a"
        assert loop.time() - start >= 0.04

    run(body)


# ------------------------------------------------------------------ add_after


def test_add_after_with_a_non_positive_delay_adds_at_once():
    async def body():
        q = WorkQueue("t")
        q.add_after("a", 0)
        assert len(q) == 1

    run(body)


def test_add_after_keeps_the_earlier_deadline_when_a_later_one_is_requested():
    async def body():
        q = WorkQueue("t")
        q.add_after("a", 0.02)
        q.add_after("a", 30)
        assert await get_soon(q, within=1.0) == "a"

    run(body)


def test_add_after_moves_the_deadline_forward_when_an_earlier_one_is_requested():
    async def body():
        q = WorkQueue("t")
        q.add_after("a", 30)
        q.add_after("a", 0.02)
        assert await get_soon(q, within=1.0) == "a"
        q.done("a")
        assert q.idle  # the 30 s timer was replaced, not kept alongside

    run(body)


# ------------------------------------------------------------------ drop


def test_drop_cancels_a_pending_retry_and_resets_the_backoff():
    async def body():
        q = WorkQueue("t", base_delay=0.02, max_delay=1.0)
        q.add_rate_limited("a")
        q.add_rate_limited("a")
        q.drop("a")
        assert q.num_requeues("a") == 0
        assert q.idle
        assert await gets_nothing(q)

    run(body)


# ------------------------------------------------------------------ shutdown


def test_shutdown_makes_a_waiting_get_return_none():
    async def body():
        q = WorkQueue("t")
        waiting = asyncio.create_task(q.get())
        await asyncio.sleep(0.01)
        await q.shutdown()
        assert await asyncio.wait_for(waiting, 1) is None

    run(body)


def test_get_after_shutdown_returns_none_at_once():
    async def body():
        q = WorkQueue("t")
        await q.shutdown()
        assert await get_soon(q, within=0.5) is None

    run(body)


def test_add_after_shutdown_is_ignored():
    async def body():
        q = WorkQueue("t")
        await q.shutdown()
        q.add("a")
        assert len(q) == 0
        assert await get_soon(q, within=0.5) is None

    run(body)


def test_shutdown_cancels_pending_delayed_adds():
    async def body():
        q = WorkQueue("t")
        q.add_after("a", 0.02)
        await q.shutdown()
        await asyncio.sleep(0.05)
        assert len(q) == 0
        assert q.idle

    run(body)


def test_a_dirty_key_is_not_requeued_by_done_after_shutdown():
    async def body():
        q = WorkQueue("t")
        q.add("a")
        assert await get_soon(q) == "a"
        q.add("a")
        await q.shutdown()
        q.done("a")
        assert len(q) == 0
        assert await get_soon(q, within=0.5) is None

    run(body)


# ------------------------------------------------------------------ idle


def test_idle_is_false_while_a_key_is_queued_processing_or_delayed():
    async def body():
        q = WorkQueue("t")
        assert q.idle
        q.add("a")
        assert not q.idle
        assert await get_soon(q) == "a"
        assert not q.idle
        q.done("a")
        assert q.idle
        q.add_after("b", 30)
        assert not q.idle
        await q.shutdown()

    run(body)


def test_queue_wait_is_measured_from_the_first_add():
    """Re-adding a queued key must not reset its queued-at time (latency metric)."""

    async def body():
        q = WorkQueue("t")
        q.add("a")
        first = q._queued["a"]
        time.sleep(0.002)  # noqa: ASYNC251  (the clock must move; nothing else may run meanwhile)
        q.add("a")
        assert q._queued["a"] == first

    run(body)


def test_queued_keys_are_not_handed_out_after_shutdown():
    """After a lost lease nothing new may start: 1,000 queued keys stay queued."""

    async def body():
        q = WorkQueue("t")
        for i in range(1000):
            q.add(f"ns/pod-{i}")
        await q.shutdown()
        handed = [await get_soon(q) for _ in range(3)]
        assert handed == [None, None, None]

    run(body)
