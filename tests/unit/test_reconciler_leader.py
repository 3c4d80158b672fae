"""kube.leader.LeaderElector against an in-memory Lease store with optimistic concurrency."""

from __future__ import annotations

import asyncio
import copy
import random
from typing import Any

import pytest

from kube import leader
from kube.client import ApiError
from kube.leader import LeaderElector, LeadershipLost

pytestmark = pytest.mark.timeout(10)

NS, NAME = "workload-resizer-system", "workload-resizer-reconciler"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
LEASE = f"{LEASES}/{NAME}"


class FakeLeaseApi:
    """get/create/update of one Lease, with resourceVersion preconditions like the apiserver.

    Every call yields to the event loop first, so concurrent candidates interleave."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.version = 0
        self.fail: ApiError | OSError | None = None
        self.updates = 0

    async def get(self, path: str, **_: Any) -> dict[str, Any]:
        await asyncio.sleep(0)
        self._maybe_fail()
        assert path == LEASE
        if self.lease is None:
            raise ApiError(404, {"reason": "NotFound", "message": "not found"})
        return copy.deepcopy(self.lease)

    async def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        self._maybe_fail()
        assert path == LEASES
        if self.lease is not None:
            raise ApiError(409, {"reason": "AlreadyExists", "message": "already exists"})
        self._store(obj)
        return copy.deepcopy(self.lease)

    async def update(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        self._maybe_fail()
        assert path == LEASE and self.lease is not None
        if obj["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
            raise ApiError(409, {"reason": "Conflict", "message": "the object has been modified"})
        self._store(obj)
        self.updates += 1
        return copy.deepcopy(self.lease)

    def _store(self, obj: dict[str, Any]) -> None:
        self.version += 1
        self.lease = copy.deepcopy(obj)
        self.lease["metadata"]["resourceVersion"] = str(self.version)

    def _maybe_fail(self) -> None:
        if self.fail is not None:
            raise self.fail

    def put_holder(
        self,
        holder: str | None,
        renew_time: str = "2001-01-01T00:00:00.000000Z",
        duration: int = 15,
        transitions: int = 3,
    ) -> None:
        """Another party writes the lease (e.g. the current leader renewing)."""
        self._store(
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": NAME, "namespace": NS},
                "spec": {
                    "holderIdentity": holder,
                    "leaseDurationSeconds": duration,
                    "acquireTime": renew_time,
                    "renewTime": renew_time,
                    "leaseTransitions": transitions,
                },
            }
        )

    @property
    def holder(self) -> str | None:
        return None if self.lease is None else self.lease["spec"].get("holderIdentity")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(leader, "time", fake)
    return fake


def _elector(api: FakeLeaseApi, identity: str, **kwargs: float) -> LeaderElector:
    return LeaderElector(api, NS, NAME, identity, **kwargs)  # type: ignore[arg-type]


def attempt(*electors: LeaderElector) -> list[bool]:
    """Concurrent acquire-or-renew attempts of the given candidates."""

    async def body() -> list[bool]:
        return list(await asyncio.gather(*(e._try_acquire_or_renew() for e in electors)))

    return asyncio.run(body())


# ------------------------------------------------------------------ acquiring


def test_the_first_candidate_creates_the_lease_and_leads(clock):
    api = FakeLeaseApi()
    assert attempt(_elector(api, "a", lease_duration=15)) == [True]
    spec = api.lease["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"]) == ("a", 15, 0)
    assert spec["acquireTime"] == spec["renewTime"]


def test_a_second_candidate_does_not_take_a_freshly_held_lease(clock):
    api = FakeLeaseApi()
    a, b = _elector(api, "a"), _elector(api, "b")
    assert attempt(a) == [True]
    assert attempt(b) == [False]
    assert api.holder == "a"


def test_two_candidates_racing_for_a_missing_lease_never_both_win(clock):
    api = FakeLeaseApi()
    a, b = _elector(api, "a"), _elector(api, "b")
    results = attempt(a, b)
    assert sorted(results) == [False, True]
    assert api.holder == ("a" if results[0] else "b")


def test_two_candidates_racing_for_an_expired_lease_never_both_win(clock):
    api = FakeLeaseApi()
    api.put_holder("old")
    a, b = _elector(api, "a"), _elector(api, "b")
    assert attempt(a, b) == [False, False]  # both first observe the record now
    clock.now += 16
    results = attempt(a, b)
    assert sorted(results) == [False, True]
    assert api.holder == ("a" if results[0] else "b")
    assert api.updates == 1


def test_the_holder_renews_without_counting_a_transition(clock):
    api = FakeLeaseApi()
    a = _elector(api, "a")
    attempt(a)
    version = api.version
    clock.now += 5
    assert attempt(a) == [True]
    assert api.version > version
    assert api.lease["spec"]["leaseTransitions"] == 0 and api.holder == "a"


def test_a_conflicting_update_is_a_failed_attempt_not_an_error(clock):
    api = FakeLeaseApi()
    a = _elector(api, "a")
    attempt(a)
    api.fail = ApiError(409, {"reason": "Conflict"})
    assert attempt(a) == [False]


@pytest.mark.parametrize(
    "error",
    [ApiError(500, {"message": "etcd"}), ConnectionRefusedError("down")],
    ids=["server-error", "connection-error"],
)
def test_an_unreachable_apiserver_is_a_failed_attempt_not_an_error(clock, error):
    api = FakeLeaseApi()
    api.fail = error
    assert attempt(_elector(api, "a")) == [False]


# ------------------------------------------------------------------ expiry by observed time


def test_a_lease_with_an_ancient_renew_time_is_not_taken_before_we_saw_it_unchanged_for_its_duration(clock):
    """The holder's clock may be skewed: its renewTime says nothing about expiry."""
    api = FakeLeaseApi()
    api.put_holder("b", renew_time="1999-01-01T00:00:00.000000Z", duration=15)
    a = _elector(api, "a", lease_duration=15)
    assert attempt(a) == [False]
    clock.now += 14.9
    assert attempt(a) == [False]
    clock.now += 0.2
    assert attempt(a) == [True]
    assert api.holder == "a"


def test_taking_over_an_expired_lease_counts_a_transition_and_sets_acquire_time(clock):
    api = FakeLeaseApi()
    api.put_holder("b", renew_time="1999-01-01T00:00:00.000000Z", transitions=3)
    a = _elector(api, "a")
    attempt(a)
    clock.now += 16
    attempt(a)
    spec = api.lease["spec"]
    assert spec["leaseTransitions"] == 4
    assert spec["acquireTime"] != "1999-01-01T00:00:00.000000Z" and spec["acquireTime"] == spec["renewTime"]


def test_a_holder_that_keeps_renewing_keeps_the_lease(clock):
    api = FakeLeaseApi()
    api.put_holder("b", renew_time="2025-01-01T00:00:00.000000Z")
    a = _elector(api, "a", lease_duration=15)
    assert attempt(a) == [False]
    for second in range(1, 5):
        clock.now += 10
        api.put_holder("b", renew_time=f"2025-01-01T00:00:{second * 10:02d}.000000Z")
        assert attempt(a) == [False]
    assert api.holder == "b"


def test_the_duration_written_by_the_holder_decides_expiry(clock):
    api = FakeLeaseApi()
    api.put_holder("b", duration=60)
    a = _elector(api, "a", lease_duration=15)
    attempt(a)
    clock.now += 30
    assert attempt(a) == [False]
    clock.now += 31
    assert attempt(a) == [True]


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_random_schedules_never_hand_the_lease_to_a_second_holder_while_the_first_renews(clock, seed):
    """Three candidates, random concurrent attempts on a shared clock. A takeover happens
    only after the previous holder failed to renew for a full lease duration, and no
    round is won by two candidates."""
    rng = random.Random(seed)
    api = FakeLeaseApi()
    electors = [_elector(api, name, lease_duration=15) for name in "abc"]
    last_renewal: dict[str, float] = {}
    holder: str | None = None
    takeovers = 0
    for _ in range(200):
        clock.now += rng.choice([0.5, 2, 5, 9])
        candidates = rng.sample(electors, rng.randint(1, 3))
        if rng.random() < 0.3:  # the holder is partitioned away this round
            candidates = [e for e in candidates if e.identity != holder] or candidates
        results = attempt(*candidates)
        winners = [e.identity for e, ok in zip(candidates, results, strict=True) if ok]
        assert len(winners) <= 1
        if winners:
            winner = winners[0]
            if holder is not None and winner != holder:
                assert clock.now - last_renewal[holder] >= 15
                takeovers += 1
            holder = winner
            last_renewal[winner] = clock.now
            assert api.holder == winner
    assert takeovers > 0  # the schedule did exercise takeovers


# ------------------------------------------------------------------ acquire, hold, release (real time)


def test_acquire_returns_once_the_lease_is_held():
    api = FakeLeaseApi()
    a = _elector(api, "a", retry_period=0.01)
    asyncio.run(asyncio.wait_for(a.acquire(), 1))
    assert a.is_leader and api.holder == "a"


def test_release_lets_a_standby_take_over_at_once(clock):
    api = FakeLeaseApi()
    a, b = _elector(api, "a", retry_period=0.01), _elector(api, "b")
    asyncio.run(asyncio.wait_for(a.acquire(), 1))
    assert attempt(b) == [False]
    asyncio.run(a.release())
    assert not a.is_leader
    assert api.holder is None and api.lease["spec"]["leaseDurationSeconds"] == 1
    assert attempt(b) == [True]  # no clock advance needed


def test_release_leaves_a_lease_held_by_someone_else_alone(clock):
    api = FakeLeaseApi()
    a = _elector(api, "a", retry_period=0.01)
    asyncio.run(asyncio.wait_for(a.acquire(), 1))
    api.put_holder("b")
    version = api.version
    asyncio.run(a.release())
    assert api.holder == "b" and api.version == version


def test_release_without_leading_writes_nothing(clock):
    api = FakeLeaseApi()
    api.put_holder("b")
    version = api.version
    asyncio.run(_elector(api, "a").release())
    assert api.version == version


def test_hold_raises_leadership_lost_when_renewals_fail_past_the_deadline():
    api = FakeLeaseApi()
    a = _elector(api, "a", lease_duration=1, renew_deadline=0.05, retry_period=0.01)

    async def body() -> None:
        await asyncio.wait_for(a.acquire(), 1)
        api.fail = ApiError(500, {"message": "etcd"})
        await asyncio.wait_for(a.hold(), 2)

    with pytest.raises(LeadershipLost):
        asyncio.run(body())
    assert not a.is_leader


def test_hold_keeps_leading_while_renewals_succeed():
    api = FakeLeaseApi()
    a = _elector(api, "a", lease_duration=1, renew_deadline=0.05, retry_period=0.01)

    async def body() -> None:
        await asyncio.wait_for(a.acquire(), 1)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(a.hold(), 0.2)

    asyncio.run(body())
    assert a.is_leader and api.updates >= 5


# ------------------------------------------------------------------ faults while leading (real time)


class HangingLeaseApi(FakeLeaseApi):
    """Lease API whose calls can be made to hang (a dead connection) or fail with any exception."""

    def __init__(self) -> None:
        super().__init__()
        self.hang = False
        self.raise_any: BaseException | None = None

    def _maybe_fail(self) -> None:
        super()._maybe_fail()
        if self.raise_any is not None:
            raise self.raise_any

    async def get(self, path: str, **kw: Any) -> dict[str, Any]:
        if self.hang:
            await asyncio.Event().wait()  # a dead connection: only a timeout ends it
        return await super().get(path, **kw)


def _lead_then(api: HangingLeaseApi, fault: Any, renew_deadline: float = 0.2) -> tuple[float, LeaderElector]:
    """Acquire, inject `fault`, hold; (seconds from the last successful renewal start to LeadershipLost, elector)."""
    a = _elector(api, "a", lease_duration=1, renew_deadline=renew_deadline, retry_period=0.02)

    async def body() -> float:
        await asyncio.wait_for(a.acquire(), 1)
        holding = asyncio.create_task(a.hold())
        await asyncio.sleep(0.1)  # a few good renewals
        fault()
        t0 = asyncio.get_running_loop().time()
        with pytest.raises(LeadershipLost):
            await asyncio.wait_for(holding, 3)
        return asyncio.get_running_loop().time() - t0

    return asyncio.run(body()), a


def test_a_hung_renewal_is_cut_off_at_the_renew_deadline():
    api = HangingLeaseApi()
    elapsed, a = _lead_then(api, lambda: setattr(api, "hang", True))
    assert elapsed < 0.2 + 0.1, "LeadershipLost is raised by the deadline, not after the request"
    assert not a.is_leader and not a.may_write()


@pytest.mark.parametrize(
    "error",
    [ApiError(503, {"message": "<html>503</html>"}), ValueError("not JSON"), KeyError("spec"), TypeError("odd lease")],
)
def test_unexpected_replies_are_failed_attempts_until_the_deadline(error):
    api = HangingLeaseApi()
    elapsed, a = _lead_then(api, lambda: setattr(api, "raise_any", error))
    assert elapsed < 0.3 and not a.may_write()


def test_a_lease_taken_by_another_identity_is_lost_at_once():
    api = HangingLeaseApi()
    elapsed, a = _lead_then(api, lambda: api.put_holder("b", duration=15), renew_deadline=0.5)
    assert elapsed < 0.2, "no waiting for the renew deadline once another holder is seen"
    assert api.holder == "b" and not a.may_write()


def test_acquire_survives_garbage_replies_and_waits_for_the_lease():
    api = HangingLeaseApi()
    api.raise_any = ValueError("<html>")
    a = _elector(api, "a", retry_period=0.01)

    async def body() -> None:
        acquiring = asyncio.create_task(a.acquire())
        await asyncio.sleep(0.05)
        assert not acquiring.done() and not a.is_leader and not a.may_write()
        api.raise_any = None
        await asyncio.wait_for(acquiring, 1)

    asyncio.run(body())
    assert a.is_leader and a.may_write()


def test_the_fenced_client_refuses_writes_but_not_reads_once_leadership_may_be_lost():
    from kube.leader import FencedClient, NotLeader

    class Recorder:
        def __init__(self) -> None:
            self.calls: list[str] = []

        async def request(self, method: str, path: str, *args: Any, **kw: Any) -> dict[str, Any]:
            self.calls.append(method)
            return {}

        async def get(self, path: str, **params: Any) -> dict[str, Any]:
            self.calls.append("GET")
            return {}

    allowed = {"write": True}
    inner = Recorder()
    client = FencedClient(inner, lambda: allowed["write"])  # type: ignore[arg-type]

    async def body() -> None:
        await client.patch("/p", {})
        allowed["write"] = False
        await client.get("/p")
        writes = (
            client.patch("/p", {}),
            client.create("/p", {}),
            client.update("/p", {}),
            client.write("PATCH", "/p", {}),
        )
        for call in writes:
            with pytest.raises(NotLeader) as exc:
                await call
            assert not exc.value.retryable

    asyncio.run(body())
    assert inner.calls == ["PATCH", "GET"]
