"""reconciler.decide as a table: situation -> action, the crash points of the three-step order
included; and how often a pass plans (once), and the event filter (never)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from reconciler.decide import (
    Action,
    Adopt,
    Follow,
    Hold,
    NotEligible,
    Nothing,
    Parked,
    RecordApplied,
    Report,
    Resign,
    Resize,
    Untyped,
    World,
    decide,
)
from reconciler.gates import VPA, Gate, Held
from reconciler.memory import InFlight, PodMemory
from reconciler.outcome import Stage
from reconciler.reasons import Reason
from reconciler.settings import ControllerSettings
from tests.unit.fake_cluster import FakeCluster
from tests.unit.test_reconciler_reconcile import (
    CONFIG,
    FASTER,
    KEY,
    KEYS,
    LABEL,
    Crash,
    Step,
    cluster,
    crash_after,
    pod,
    reconciler,
    run,
    sized_on_n4,
)

N4 = {"metadata": {"name": "node-1", "labels": {LABEL: "n4"}}, "status": {"allocatable": {"cpu": "8"}}}


class VpaHolds(Gate):
    def admit(self, pod: Any) -> Held | None:
        return Held(Reason.VPA_MANAGED, VPA, "an updating VPA manages it", "VerticalPodAutoscaler/web/Auto")


def world(config: Any = CONFIG, generation: int = 1, gate: Any = None, **options: Any) -> World:
    return World(config, generation, ControllerSettings(node_type_label=LABEL, **options), KEYS, None, gate or Gate())


def crashed(step: str, pod_: dict[str, Any], config: Any = CONFIG) -> FakeCluster:
    """The cluster as a process that died right after `step` left it."""
    fake = cluster(pod_)
    with pytest.raises(Crash):
        run(reconciler(fake, config=config, fault=crash_after(step)).reconcile(KEY))
    return fake


def node_of(fake: FakeCluster) -> Any:
    return run(fake.node("node-1"))


Situation = Callable[[], tuple[dict[str, Any], Any, World, PodMemory]]


def cached(pod_: dict[str, Any]) -> dict[str, Any]:
    """`pod_` as the watch delivers it (created: generation 1, a resourceVersion)."""
    return cluster(pod_).pod(KEY)


def fresh_unstamped() -> tuple[dict[str, Any], Any, World, PodMemory]:
    return cached(pod()), N4, world(), PodMemory()


def stamped() -> tuple[dict[str, Any], Any, World, PodMemory]:
    return cached(pod(stamped=True)), N4, world(), PodMemory()


def after_step_1() -> tuple[dict[str, Any], Any, World, PodMemory]:
    fake = crashed(Step.ORIGINALS, pod())
    return fake.pod(KEY), node_of(fake), world(), PodMemory()


def after_step_2() -> tuple[dict[str, Any], Any, World, PodMemory]:
    fake = crashed(Step.RESIZE, pod())
    return fake.pod(KEY), node_of(fake), world(), PodMemory()


def after_step_2_actuated() -> tuple[dict[str, Any], Any, World, PodMemory]:
    fake = crashed(Step.RESIZE, pod())
    fake.actuate(KEY)
    return fake.pod(KEY), node_of(fake), world(), PodMemory()


def after_step_3() -> tuple[dict[str, Any], Any, World, PodMemory]:
    fake = cluster(pod(stamped=True), auto_actuate=True)
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    with pytest.raises(Crash):
        rec._context.fault = crash_after(Step.APPLIED)
        run(rec.reconcile(KEY))
    return fake.pod(KEY), node_of(fake), world(), PodMemory()


def in_flight_unanswered() -> tuple[dict[str, Any], Any, World, PodMemory]:
    fake = crashed(Step.RESIZE, pod(stamped=True))
    resized = fake.pod(KEY)
    flight = InFlight("n4", resized["metadata"]["generation"], 0.0, "cpu 1 -> 800m", config_generation=1)
    return resized, node_of(fake), world(), PodMemory(flight=flight)


def a_re_alignment_after_step_2() -> tuple[dict[str, Any], Any, World, PodMemory]:
    fake = crashed(Step.RESIZE, sized_on_n4(), config=FASTER)
    return fake.pod(KEY), node_of(fake), world(FASTER), PodMemory()


def after_infeasible_recorded() -> tuple[dict[str, Any], Any, World, PodMemory]:
    fake = cluster(pod(stamped=True))
    run(reconciler(fake).reconcile(KEY))
    fake.mark_infeasible(KEY)
    with pytest.raises(Crash):
        run(reconciler(fake, fault=crash_after(Step.STATE)).reconcile(KEY))
    return fake.pod(KEY), node_of(fake), world(), PodMemory()


def parked_infeasible() -> tuple[dict[str, Any], Any, World, PodMemory]:
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    fake.mark_infeasible(KEY)
    run(rec.reconcile(KEY))
    fake.settle(KEY)
    return fake.pod(KEY), node_of(fake), world(), PodMemory()


def recorded_unsupported() -> tuple[dict[str, Any], Any, World, PodMemory]:
    fake = cluster(pod(stamped=True, running=False))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    fake.start_containers(KEY, report_resources=False)
    run(rec.reconcile(KEY))
    return fake.pod(KEY), node_of(fake), world(), PodMemory()


def on(node_labels: dict[str, str], pod_: dict[str, Any] | None = None, **kwargs: Any) -> Situation:
    node = {"metadata": {"name": "node-1", "labels": node_labels}, "status": {"allocatable": {"cpu": "8"}}}
    return lambda: (cached(pod_ or pod(stamped=True)), node, world(**kwargs), PodMemory())


def unbound() -> tuple[dict[str, Any], Any, World, PodMemory]:
    p = pod(stamped=True)
    del p["spec"]["nodeName"]
    return p, None, world(), PodMemory()


def finished() -> tuple[dict[str, Any], Any, World, PodMemory]:
    p = pod(stamped=True)
    p["status"]["phase"] = "Succeeded"
    return p, N4, world(), PodMemory()


def decided_already() -> tuple[dict[str, Any], Any, World, PodMemory]:
    p, node, w, _ = on({LABEL: "c9"})()
    first = decide(p, node, w, PodMemory())
    assert isinstance(first, Report)
    return p, node, w, PodMemory(decided=first.signature)


def resized(stamp: bool) -> Callable[[Action], bool]:
    return lambda a: (
        isinstance(a, Resize) and (a.planned.base.stamp is not None) == stamp and bool(a.planned.plan.patch)
    )


def following(stage: Stage) -> Callable[[Action], bool]:
    return lambda a: isinstance(a, Follow) and a.observation.stage == stage


def reported(reason: Reason) -> Callable[[Action], bool]:
    return lambda a: isinstance(a, Report) and a.reason == reason


TABLE: list[tuple[str, Situation, Callable[[Action], bool]]] = [
    ("not bound to a node", unbound, lambda a: isinstance(a, NotEligible)),
    ("finished", finished, lambda a: isinstance(a, NotEligible)),
    ("untyped node", on({}), lambda a: isinstance(a, Untyped)),
    ("no config read yet", on({LABEL: "n4"}, config=None), lambda a: a == Nothing(requeue_after=5.0)),
    ("fresh pod, no originals: steps 1 and 2", fresh_unstamped, resized(stamp=True)),
    ("stamped by the webhook: step 2", stamped, resized(stamp=False)),
    ("crash after step 1: step 2, nothing stamped again", after_step_1, resized(stamp=False)),
    ("crash after step 2: follow the kubelet", after_step_2, following(Stage.REQUESTED)),
    ("crash after step 2, actuated since: follow to step 3", after_step_2_actuated, following(Stage.ACTUATED)),
    ("crash after step 3: sized, nothing due", after_step_3, lambda a: isinstance(a, Resign) and a.mac is None),
    ("our resize the kubelet has not answered", in_flight_unanswered, lambda a: a == Nothing()),
    (
        "a re-alignment an earlier process requested",
        a_re_alignment_after_step_2,
        lambda a: isinstance(a, Adopt) and a.flight.verb == "re-aligned" and isinstance(a.then, Follow),
    ),
    (
        "sized, the config re-plans it",
        lambda: (cached(sized_on_n4()), N4, world(FASTER), PodMemory()),
        resized(stamp=False),
    ),
    (
        "aligned, never resized: originals and applied in one write",
        on({LABEL: "n2d"}, pod()),
        lambda a: isinstance(a, RecordApplied) and a.reason == Reason.ALREADY_ALIGNED,
    ),
    ("a node type the config lacks", on({LABEL: "c9"}), reported(Reason.UNKNOWN_NODE_TYPE)),
    ("the same situation decided before", decided_already, lambda a: a == Nothing()),
    ("dry run", on({LABEL: "n4"}, dry_run=True), reported(Reason.WOULD_RESIZE)),
    ("left to an updating VPA", on({LABEL: "n4"}, gate=VpaHolds()), lambda a: isinstance(a, Hold)),
    ("crash after recording infeasible: set back", after_infeasible_recorded, following(Stage.INFEASIBLE)),
    ("infeasible size, same node and plan", parked_infeasible, lambda a: isinstance(a, Parked)),
    ("kubelet without in-place resize recorded", recorded_unsupported, following(Stage.UNSUPPORTED)),
]


@pytest.mark.parametrize(("situation", "expected"), [(s, e) for _, s, e in TABLE], ids=[n for n, _, _ in TABLE])
def test_decide(situation: Situation, expected: Callable[[Action], bool]) -> None:
    pod_, node, world_, memory = situation()
    before = (copy.deepcopy(pod_), copy.deepcopy(memory))
    action = decide(pod_, node, world_, memory)
    assert expected(action), action
    assert (pod_, memory) == before, "the decision changes neither the pod nor the memory"


# ------------------------------------------------------------------ how often a pass plans


@pytest.fixture
def plans(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call of the planner (resizer.plan.plan_resize, wherever it is imported)."""
    import resizer.pinning
    from resizer.plan import plan_resize

    calls: list[str] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[2])
        return plan_resize(*args, **kwargs)

    for module in ("reconciler.decide", "resizer.pinning"):
        monkeypatch.setattr(f"{module}.plan_resize", counted)
    assert resizer.pinning
    return calls


def test_a_full_pass_plans_once_per_reconcile_and_the_filter_never(plans: list[str]) -> None:
    fake = cluster(pod(stamped=True), auto_actuate=True)
    rec = reconciler(fake)
    node = node_of(fake)
    assert rec.needs_work(fake.pod(KEY), node) and plans == []
    run(rec.reconcile(KEY))  # the resize
    assert plans == ["n4"]
    rec.observe(fake.pod(KEY))
    assert rec.needs_work(fake.pod(KEY), node) and len(plans) == 1, "the kubelet's status, the filter plans nothing"
    run(rec.reconcile(KEY))  # actuated: applied, Resized
    assert len(plans) == 2 and [e.reason for e in fake.events] == ["Resized"]
    rec.observe(fake.pod(KEY))
    assert not rec.needs_work(fake.pod(KEY), node) and len(plans) == 2


def test_a_pass_takes_the_baseline_decision_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The decision's baseline is the one the pass acts on: the actuated pass's applied record binds
    the originals without asking the authority again (only a pod re-read after a write is asked again)."""
    from resizer.integrity import baseline

    decided: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        decided.append(1)
        return baseline(*args, **kwargs)

    for module in ("reconciler.decide", "reconciler.act"):
        monkeypatch.setattr(f"{module}.baseline", counted)
    fake = cluster(pod(stamped=True), auto_actuate=True)
    rec = reconciler(fake)
    run(rec.reconcile(KEY))  # the resize
    assert fake.ops() == ["resize"]
    resize_pass = len(decided)
    rec.observe(fake.pod(KEY))
    run(rec.reconcile(KEY))  # actuated: applied, Resized
    assert [e.reason for e in fake.events] == ["Resized"]
    assert (resize_pass, len(decided) - resize_pass) == (1, 1)


def test_a_re_alignment_pass_plans_once(plans: list[str]) -> None:
    fake = cluster(sized_on_n4())
    rec = reconciler(fake, config=FASTER)
    assert rec.needs_work(fake.pod(KEY), node_of(fake)) and plans == []
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize"] and plans == ["n4"]


def test_the_filter_never_plans(plans: list[str]) -> None:
    """Not for a fresh pod, a sized one under a new config, a parked one, nor an unreported re-alignment."""
    situations = [fresh_unstamped, stamped, after_step_2, after_step_3, parked_infeasible, a_re_alignment_after_step_2]
    for situation in situations:
        pod_, node, _, _ = situation()
        plans.clear()
        for config in (CONFIG, FASTER):
            rec = reconciler(cluster(), config=config)
            rec.needs_work(pod_, node)
        assert plans == [], situation.__name__


def test_a_watch_event_and_its_pass_read_the_pods_annotations_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from resizer.podstate import read_state

    reads: list[object] = []

    def counted(pod_: Any) -> Any:
        reads.append(pod_)
        return read_state(pod_)

    for module in ("reconciler.controller", "reconciler.decide", "reconciler.act"):
        monkeypatch.setattr(f"{module}.read_state", counted)
    fake = cluster(pod(stamped=True))
    rec = reconciler(fake)
    cached = fake.pod(KEY)
    rec.observe(cached)
    assert rec.needs_work(cached, node_of(fake))
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize"] and reads == [cached]


def test_the_filter_drops_the_events_of_writes_older_than_our_resize() -> None:
    """The watch events of step 1 (or of anything before our resize) arrive after it: a pass would
    find the cache behind our own write and do nothing, so no pass is queued."""
    fake = cluster(pod())
    fake.lagging_cache = True
    rec = reconciler(fake)
    node = node_of(fake)
    run(rec.reconcile(KEY))
    assert fake.ops() == ["annotate", "resize"]
    assert not rec.needs_work(fake.pod(KEY), node), "the pod as it was before our resize"
    fake.sync()
    assert not rec.needs_work(fake.pod(KEY), node), "our resize, not answered yet"
    fake.actuate(KEY)
    assert rec.needs_work(fake.pod(KEY), node), "the kubelet's answer"


def test_the_kubelets_answer_seen_before_the_reply_to_our_re_alignment_reaches_a_pass() -> None:
    """The kubelet may actuate a resize, and its watch event reach the filter, while the reply to
    pods/resize is still on the way: the event is let through, and the pass it queues (run once
    the resizing pass ends) reports the re-alignment."""
    fake = cluster(sized_on_n4(), auto_actuate=True)
    rec = reconciler(fake, config=FASTER)
    node = node_of(fake)
    rec.observe(fake.pod(KEY))
    assert rec.needs_work(fake.pod(KEY), node)  # a re-alignment is due under the new config
    seen_while_resizing: list[bool] = []
    resize = fake.resize

    async def actuated_before_the_reply(*args: Any, **kwargs: Any) -> Any:
        written = await resize(*args, **kwargs)
        fake.sync()
        rec.observe(fake.pod(KEY))
        seen_while_resizing.append(rec.needs_work(fake.pod(KEY), node))
        return written

    fake.resize = actuated_before_the_reply  # type: ignore[method-assign]
    run(rec.reconcile(KEY))
    assert fake.ops() == ["resize"] and seen_while_resizing == [True]
    run(rec.reconcile(KEY))  # the pass the event queued
    assert [e.reason for e in fake.events] == ["Resized"]
    assert "re-aligned" in fake.events[0].message


def test_our_own_writes_seen_while_the_resize_is_on_the_wire_queue_no_pass() -> None:
    """While the resize is on the wire, the watch events of the originals written before it, and
    of the resize landing before the kubelet answers it, are the resizing pass's own: no pass."""
    fake = cluster(pod())
    rec = reconciler(fake)
    node = node_of(fake)
    seen_while_resizing: list[bool] = []
    resize = fake.resize

    def seen() -> None:
        fake.sync()
        rec.observe(fake.pod(KEY))
        seen_while_resizing.append(rec.needs_work(fake.pod(KEY), node))

    async def landed_not_answered(*args: Any, **kwargs: Any) -> Any:
        seen()  # the originals' write
        written = await resize(*args, **kwargs)
        seen()  # the resize, not answered by the kubelet yet
        return written

    fake.resize = landed_not_answered  # type: ignore[method-assign]
    run(rec.reconcile(KEY))
    assert fake.ops() == ["annotate", "resize"] and seen_while_resizing == [False, False]
    fake.actuate(KEY)
    fake.sync()
    assert rec.needs_work(fake.pod(KEY), node), "the kubelet's answer, after the reply"
