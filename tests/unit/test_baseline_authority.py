"""The baseline authority (resizer.integrity.baseline) against everything a tenant can do.

A tenant can create pods (through the webhook or past it), forge or copy any of our annotations
(legacy-keyed ones of colliding container names included), mint admission MACs and sized records
for any values (a made-up AdmissionReview), bump metadata.generation without changing resources
(e.g. removing a scheduling gate), create a pod from another's content (the webhook called again on
its own answer is one) and write a pod's status; keys get lost and nodes relabelled. Whatever the
sequence, every program of the product (the webhook, the reconciler, plan, restore) scales from,
binds, or puts back only the values the author's pod was admitted with, or (a sized record minted
through a made-up review, docs/security.md) those of an honest author whose pod, pinned to that
node type, would have been created exactly as this one is. The programs run on their real
decisions in tests/unit/tenant_world.py.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import event, example, given, settings
from hypothesis import strategies as st

from resizer import (
    KeyRing,
    PodIdentity,
    Trust,
    admission_sizing,
    baseline,
    load_config,
    original_key,
    originals_from_spec_annotations,
    pod_mac,
    read_originals,
    sign_originals,
    sized_stamp,
)
from resizer.forecast import forecast_fleet
from resizer.podstate import ORIGINALS_MAC, RESIZE_STATE, legacy_original_key
from resizer.restore import restore_decision
from resizer.scope import namespace_scope

from .tenant_world import (
    COLLIDING,
    INJECTED,
    LABEL,
    RECREATED,
    SKIP,
    World,
    authored,
    controller_owned,
    first_cpu,
    legacy_stamp,
    made_up_review,
    resources,
)

RING = KeyRing({"k0001": b"k" * 32})
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "rs-uid", "controller": True}
PREFIX = "workload-resizer.io/"
SCOPE = namespace_scope("workload-resizer-system")
CONFIG = load_config("""
baselineNodeType: n2d
nodeTypes:
  n2d: {cpuPerf: 1.0, memPerf: 1.0}
  n4: {cpuPerf: 1.25, memPerf: 1.0}
bounds:
  cpu: {min: "1m", max: "64"}
  memory: {min: "1Mi", max: "64Gi"}
""")


def admitted(
    cpu_milli: int, memory_mi: int, name: str = "web-7d9f-abcde", uid: str = "pod-uid", stamped: bool = True
) -> dict[str, Any]:
    """A pod as the apiserver stores it after creation (generation 1), stamped by the webhook."""
    resources = {
        "requests": {"cpu": f"{cpu_milli}m", "memory": f"{memory_mi}Mi"},
        "limits": {"cpu": f"{cpu_milli}m", "memory": f"{memory_mi}Mi"},
    }
    pod: dict[str, Any] = {
        "metadata": {
            "namespace": "shop",
            "name": name,
            "generateName": "web-7d9f-",
            "uid": uid,
            "generation": 1,
            "annotations": {},
            "ownerReferences": [dict(OWNER)],
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "app", "resources": resources}]},
        "status": {"phase": "Running", "qosClass": "Guaranteed"},
    }
    if stamped:
        mint_admission_mac(pod, originals_from_spec_annotations(pod))
    return pod


def mint_admission_mac(pod: dict[str, Any], originals: dict[str, str]) -> None:
    """What the webhook signs for any review, made-up ones included (name unknown at admission)."""
    at_admission = copy.deepcopy(pod)
    at_admission["metadata"]["name"] = ""
    mac = sign_originals(RING, originals, PodIdentity.of(at_admission, scope="admission"), "admission")
    annotations = {k: v for k, v in pod["metadata"]["annotations"].items() if not k.startswith(PREFIX + "original-")}
    pod["metadata"]["annotations"] = {**annotations, **originals, ORIGINALS_MAC: mac}


def authored_pinned(cpu_milli: int, memory: str) -> dict[str, Any]:
    """The review an author sends for a pod of `cpu_milli` pinned to n4 (identity as at admission)."""
    return {
        "metadata": {"namespace": "shop", "name": "", "generateName": "web-7d9f-", "ownerReferences": [dict(OWNER)]},
        "spec": {
            "nodeSelector": {"type": "n4"},
            "containers": [
                {
                    "name": "app",
                    "resources": {
                        "requests": {"cpu": f"{cpu_milli}m", "memory": memory},
                        "limits": {"cpu": f"{cpu_milli}m", "memory": memory},
                    },
                }
            ],
        },
    }


def resized_by_the_product(pod: dict[str, Any], factor_percent: int) -> None:
    """Steps 2 and 3 of the reconciler: the spec at the plan, the originals bound to the pod."""
    container = pod["spec"]["containers"][0]
    cpu = int(container["resources"]["requests"]["cpu"][:-1]) * factor_percent // 100 or 1
    container["resources"] = {
        "requests": {**container["resources"]["requests"], "cpu": f"{cpu}m"},
        "limits": {**container["resources"]["limits"], "cpu": f"{cpu}m"},
    }
    pod["metadata"]["generation"] += 1
    pod["metadata"]["annotations"].update(pod_mac(pod, RING))


def values(originals: dict[str, Any]) -> dict[tuple[str, str], Any]:
    return {
        (name, resource): (o.of(resource).request, o.of(resource).limit)
        for name, o in originals.items()
        for resource in ("cpu", "memory")
    }


quantities = st.integers(min_value=1, max_value=64_000)
TYPES = ["n2d", "n4", "e2"]  # tenant_world.CONFIG: ratios 1, 0.8 and 2
# What a later webhook changed before ours is called again (or the tenant, creating a pod from this one's content).
REVIEW_CHANGES = ["again", "label", "inject", "gate", "pin-n4", "pin-n2d", "pin-e2", "unpin"]
# The tenant's moves on its pod (the admission policies off: any workload-resizer.io annotation at
# any generation, a Binding's included; tests/unit/tenant_world.py).
tenant_moves = st.one_of(
    st.tuples(st.just("forge"), quantities),  # original-cpu* of the first container = N, unsigned
    st.tuples(st.just("forge-legacy"), st.tuples(st.sampled_from(COLLIDING), quantities)),  # the 8-hex key both share
    st.tuples(st.just("legacy-stamp"), st.sampled_from(COLLIDING)),  # an earlier webhook's stamp, that one last
    st.tuples(st.just("mint"), quantities),  # an admission MAC from a made-up review, first container at N
    st.tuples(st.just("mint-spec"), st.just(0)),  # ... of the pod's spec as it is now
    st.tuples(st.just("mint-sized"), quantities | st.just(0)),  # a sized record pinned to n4 (0: of the spec x 5/4)
    st.tuples(st.just("copy"), quantities),  # a sibling's annotations (admitted at N, bound by the reconciler)
    st.tuples(st.just("copy-sized"), quantities),  # a sibling's sized record (authored at N, pinned to n4)
    st.tuples(st.just("state"), st.sampled_from(["deferred", "infeasible", "error", "unsupported"])),
    st.tuples(st.just("applied"), st.sampled_from(TYPES)),
    st.tuples(st.just("skip"), st.just(0)),
    st.tuples(st.just("strip"), st.just(0)),  # every annotation of ours removed
)
bumps = st.tuples(st.just("bump"), st.just(0))  # a gate removed (honest) or an image changed: generation + 1
statuses = st.tuples(
    st.just("status"),
    st.tuples(
        st.none() | quantities,  # the containers report N (None:
        st.sampled_from(["infeasible", "error"]),
    ),
)  # the size before)
world_events = st.one_of(
    st.tuples(st.just("wait"), st.just(0)),  # nothing but the reconciler's turns
    st.tuples(st.just("restart"), st.just(0)),  # the reconciler forgets its resizes in flight
    st.tuples(st.just("relabel"), st.sampled_from(TYPES)),  # the pod's node gets another type
    st.tuples(st.just("lose-key"), st.just(0)),  # the keys Secret recreated: a new key, a new id
    st.tuples(st.just("key-back"), st.just(0)),  # the old key put back next to it
)
reviews = st.tuples(st.just("review"), st.sampled_from(REVIEW_CHANGES))  # the pod's content through the webhook
# Each move, then the reconciler acting on the pod's events 0-2 times (step 1, 2, or 3 each).
steps = st.lists(
    st.tuples(st.one_of(tenant_moves, world_events, reviews, bumps, statuses), st.integers(min_value=0, max_value=2)),
    max_size=8,
)


def story(
    cpu: int = 1000,
    pair: tuple[int, int] | None = None,
    pin: str | None = None,
    gated: bool = False,
    runs_on: str = "n2d",
    reinvoked: str | None = None,
    *steps: tuple[tuple[str, Any], int],
) -> Any:
    """One route of issue 34 always played (every run), whatever the random stories reach."""
    return example(
        cpu=cpu,
        pair=pair,
        memory=64,
        pin=pin,
        gated=gated,
        webhook=True,
        runs_on=runs_on,
        reinvoked=reinvoked,
        steps=list(steps),
    )


@settings(deadline=None, max_examples=1000)
@story(1000, (100, 5000), None, False, "n2d", None, (("legacy-stamp", COLLIDING[1]), 1))  # colliding names
@story(1000, None, "n4", False, "n2d", "label")  # the webhook called again
@story(1000, None, None, False, "n4", None, (("relabel", "n4"), 1), (("status", (8000, "infeasible")), 0))
@story(
    1000,
    None,
    None,
    False,
    "e2",
    None,
    (("relabel", "e2"), 1),
    (("restart", 0), 0),  # forged statuses
    (("status", (8000, "error")), 0),
)
@story(1000, None, "n4", False, "n2d", None, (("copy-sized", 8000), 1), (("state", "infeasible"), 1))  # generation 1
@story(8000, None, "n4", False, "n2d", None, (("lose-key", 0), 1), (("key-back", 0), 1))  # a lost key, put back
@story(1000, None, "n4", True, "n2d", None, (("wait", 0), 1), (("bump", 0), 1))  # a gated pod
@story(1000, None, "n4", True, "n2d", None, (("bump", 0), 1))  # its gate removed before it was bound
@story(1000, None, None, False, "e2", None, (("relabel", "e2"), 2), (("mint-spec", 0), 1))  # minted for a resize
@given(
    cpu=st.sampled_from([250, 1000, 8000]) | quantities,
    pair=st.none() | st.tuples(quantities, quantities),
    memory=st.integers(min_value=1, max_value=4096),
    pin=st.sampled_from([None, None, "n4", "n4", "n2d", "e2"]),
    gated=st.booleans(),
    webhook=st.sampled_from([True, True, True, False]),
    runs_on=st.sampled_from(TYPES),
    reinvoked=st.none() | st.sampled_from(REVIEW_CHANGES),
    steps=steps,
)
def test_no_sequence_of_tenant_actions_moves_the_baseline_off_the_admitted_values(
    cpu: int,
    pair: tuple[int, int] | None,
    memory: int,
    pin: str | None,
    gated: bool,
    webhook: bool,
    runs_on: str,
    reinvoked: str | None,
    steps: list[tuple[tuple[str, Any], int]],
) -> None:
    """After every step, no program (the webhook, the reconciler's resize and revert, plan,
    restore) sets a container above its own admitted value x the ratio of its node type (a revert
    or restore: above the admitted value), the authority trusts nothing above it, and an honest pod
    (no tenant move since admission) whose key is known is trusted at exactly its admitted values
    (unless its scheduling gate went before the reconciler bound its originals: then it may only be
    explained as aligned, docs/how-it-works.md).

    ``pair``: the first container's siblings, two valid names whose legacy keys collide; ``pin``:
    the node type the pod's nodeSelector pins; ``reinvoked``: the webhook called again on its own
    answer (reinvocationPolicy IfNeeded) after a later webhook's change."""
    containers = {"app": cpu, **(dict(zip(COLLIDING, pair, strict=True)) if pair else {})}
    first = [(("review", reinvoked), 0)] if reinvoked is not None and webhook else []
    play(authored(containers, memory, pin, gated), webhook, runs_on, first + steps, note=event)


def play(
    obj: dict[str, Any],
    webhook: bool,
    runs_on: str,
    steps: list[tuple[tuple[str, Any], int]],
    note: Callable[[str], None] = print,
) -> World:
    """The story: ``obj`` created (through the webhook or, down, past it), then each move and the
    reconciler's turns after it, every program checked after every step."""
    world = World(pod={}, node_type=runs_on, admitted={})
    world.create(obj, through_webhook=webhook)
    world.check()
    for move, reconciles in steps:
        world.story.append(f"{move[0]} {move[1]}")
        note(move[0])
        tenant(world, move)
        if move[0] in ("mint-sized", "copy-sized"):
            world.adopt_an_honest_author()
        world.check()
        for _ in range(reconciles):
            world.story.append("reconcile")
            world.reconcile()
            world.check()
    return world


def tenant(world: World, move: tuple[str, Any]) -> None:
    kind, arg = move
    pod = world.pod
    first = pod["spec"]["containers"][0]["name"]
    ours = pod["metadata"]["annotations"]
    if kind not in ("wait", "bump", "review", "status", "restart", "relabel", "lose-key", "key-back"):
        world.honest = False
    if kind == "forge":
        ours.update({original_key(first, "cpu", "request"): f"{arg}m", original_key(first, "cpu", "limit"): f"{arg}m"})
    elif kind == "forge-legacy":
        name, cpu = arg
        ours.update({legacy_original_key(name, "cpu", k): f"{cpu}m" for k in ("request", "limit")})
    elif kind == "legacy-stamp":
        replace_ours(pod, legacy_stamp(pod, last=arg))
    elif kind in ("mint", "mint-spec", "mint-sized"):
        if kind == "mint-sized" and not arg:
            cpus = {c["name"]: first_cpu({"spec": {"containers": [c]}}) * 5 // 4 for c in pod["spec"]["containers"]}
        else:
            cpus = {first: arg} if arg else {}
        minted = world.webhook(made_up_review(pod, cpus, "n4" if kind == "mint-sized" else None))
        replace_ours(pod, {k: v for k, v in minted["metadata"]["annotations"].items() if k.startswith(PREFIX)})
    elif kind in ("copy", "copy-sized"):
        sibling = World(
            pod={}, node_type=world.node_type, admitted={}, ring=world.ring, ledger=world.ledger, uids=world.uids
        )
        cpus = {c["name"]: first_cpu({"spec": {"containers": [c]}}) for c in pod["spec"]["containers"]}
        sibling.create(made_up_review(pod, {**cpus, first: arg}, "n4" if kind == "copy-sized" else None))
        sibling.reconcile()
        replace_ours(pod, {k: v for k, v in sibling.pod["metadata"]["annotations"].items() if k.startswith(PREFIX)})
    elif kind == "state":
        ours[RESIZE_STATE] = f'{{"state":"{arg}","nodeType":"{world.node_type}","generation":1}}'
    elif kind == "applied":
        ours.update({PREFIX + "applied-instance-type": arg, PREFIX + "applied-size": "0" * 16})
    elif kind == "skip":
        ours[SKIP] = "true"
    elif kind == "strip":
        pod["metadata"]["annotations"] = {k: v for k, v in ours.items() if not k.startswith(PREFIX)}
    elif kind == "bump":
        if pod["spec"].get("schedulingGates"):
            world.ungate()
        else:
            world.honest = False  # an image changed
            pod["metadata"]["generation"] += 1
    elif kind == "review":
        world.create(changed(pod, arg))
    elif kind == "status":
        world.stalled(*arg)
    elif kind == "restart":
        world.restart()
    elif kind == "relabel":
        world.relabel(arg)
    elif kind == "lose-key":
        world.ring = RECREATED
    elif kind == "key-back":
        world.ring = KeyRing({**RECREATED.keys, **RING.keys})


def replace_ours(pod: dict[str, Any], new: dict[str, str]) -> None:
    """The pod's controller-owned annotations replaced by ``new`` (skip and others kept)."""
    kept = {k: v for k, v in pod["metadata"]["annotations"].items() if k not in controller_owned(pod)}
    pod["metadata"]["annotations"] = {**kept, **new}


def changed(pod: dict[str, Any], change: str) -> dict[str, Any]:
    """The pod as a later webhook (or the tenant, copying it into a new pod) changed it."""
    obj = copy.deepcopy(pod)
    if change == "label":
        obj["metadata"].setdefault("labels", {})["team"] = "shop"
    elif change == "inject" and all(c["name"] != INJECTED for c in obj["spec"]["containers"]):
        obj["spec"]["containers"].append(
            {"name": INJECTED, "image": "example.com/proxy:1", "resources": resources(100, 64)}
        )
    elif change == "gate":
        obj["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    elif change == "unpin":
        obj["spec"].pop("nodeSelector", None)
    elif change.startswith("pin-"):
        obj["spec"]["nodeSelector"] = {LABEL: change.removeprefix("pin-")}
    return obj


def _milli(text: str) -> int:
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


# ------------------------------------------------------------------ the open route (issue 34)


def test_admission_originals_minted_for_a_resized_spec_do_not_raise_it() -> None:
    """Authored at 1 CPU on an e2 node (ratio 2), the pod is resized to 2 CPU. With the admission
    policies off, its tenant replaces the originals with those a made-up review of its spec obtains
    (2 CPU, signed at admission). Trusted, they would make the next resize compound (4 CPU, then 8,
    ...): on a changed pod admission-signed originals only explain a spec already at their plan."""
    world = World(pod={}, node_type="e2", admitted={})
    world.create(authored({"app": 1000}, 64))
    world.reconcile()
    world.reconcile()  # resized, then recorded with a pod MAC
    assert first_cpu(world.pod) == 2000 and world.pod["metadata"]["generation"] == 2
    tenant(world, ("mint-spec", 0))
    decision = baseline(world.pod, world.ring)
    assert decision.check.trust is Trust.TRUSTED_IF_ALIGNED and not decision.may_resize
    world.reconcile()
    assert first_cpu(world.pod) == 2000 and world.pod["metadata"]["generation"] == 2, "admitted 1 CPU x 2"


# ------------------------------------------------------------------ restore and plan, one route each


def act(pod: dict[str, Any], action: tuple[str, int]) -> None:
    """One tenant move on a pod of :func:`admitted`: forge or mint (an admission MAC from a made-up
    review) the container's cpu originals at N millicores, or bump the generation (a gate removed)."""
    kind, cpu = action
    forged = {PREFIX + "original-cpu.app": f"{cpu}m", PREFIX + "original-cpu-limit.app": f"{cpu}m"}
    if kind == "forge":
        pod["metadata"]["annotations"].update(forged)
    elif kind == "mint":
        mint_admission_mac(
            pod,
            {
                **{k: v for k, v in pod["metadata"]["annotations"].items() if k.startswith(PREFIX + "original-")},
                **forged,
            },
        )
    elif kind == "gate":
        pod["metadata"]["generation"] += 1


def forged_after_a_resize() -> dict[str, Any]:
    pod = admitted(100, 64)
    resized_by_the_product(pod, 100)  # generation 2, bound to the pod
    act(pod, ("forge", 8000))  # the tenant raises the originals
    return pod


def test_restore_never_raises_a_pod_from_originals_it_cannot_verify() -> None:
    decision = restore_decision(forged_after_a_resize(), RING, SCOPE)
    assert decision.patch == {} and "not verified" in (decision.held or "")


def test_restore_puts_back_verified_originals() -> None:
    pod = admitted(1000, 64)
    resized_by_the_product(pod, 80)
    decision = restore_decision(pod, RING, SCOPE)
    assert decision.held is None
    assert decision.patch["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "1"


def test_restore_leaves_forged_originals_on_a_never_changed_pod_at_its_spec() -> None:
    pod = admitted(100, 64, stamped=False)
    act(pod, ("forge", 8000))
    assert restore_decision(pod, RING, SCOPE).patch == {}


def test_restore_leaves_pods_outside_the_scope_and_skipped_pods_alone() -> None:
    system = admitted(1000, 64)
    resized_by_the_product(system, 80)
    system["metadata"]["namespace"] = "kube-system"
    assert "scope" in (restore_decision(system, RING, SCOPE).held or "")
    skipped = admitted(1000, 64)
    resized_by_the_product(skipped, 80)
    skipped["metadata"]["annotations"][PREFIX + "skip"] = "true"
    assert restore_decision(skipped, RING, SCOPE).held is not None


def test_restore_without_keys_cannot_verify_a_resized_pod() -> None:
    pod = admitted(1000, 64)
    resized_by_the_product(pod, 80)
    assert restore_decision(pod, KeyRing({}), SCOPE).held is not None


def test_plan_holds_what_the_reconciler_refuses() -> None:
    plan = forecast_fleet([forged_after_a_resize()], {"node-1": "n4"}, CONFIG, SCOPE, keyring=RING)
    assert plan.resized == 0
    (held,) = plan.not_resized
    assert held.outcome == "OriginalsUnverified"
    assert (held.desired_cpu, held.desired_memory) == (held.current_cpu, held.current_memory), "left as it is"


def test_plan_holds_minted_originals_on_a_gated_pod() -> None:
    pod = admitted(100, 64)
    act(pod, ("gate", 0))
    act(pod, ("mint", 8000))
    plan = forecast_fleet([pod], {"node-1": "n4"}, CONFIG, SCOPE, keyring=RING)
    assert plan.resized == 0 and [p.outcome for p in plan.not_resized] == ["OriginalsUnverified"]


def test_at_admission_the_spec_is_the_baseline_whatever_the_pod_carries() -> None:
    from resizer import admission_stamp

    sent = admitted(500, 64, stamped=False)
    act(sent, ("forge", 8000))
    sent["metadata"]["name"] = ""  # a generated pod has no name at admission
    stamp = admission_stamp(sent, "shop", RING)
    assert stamp[PREFIX + "original-cpu.app"] == "500m" and stamp[ORIGINALS_MAC].startswith("v1.a.")
    stored = admitted(500, 64, stamped=False)  # as the apiserver stores it, with the stamp
    stored["metadata"]["annotations"] = stamp
    decision = baseline(stored, RING)
    assert decision.may_resize and decision.check.scope == "admission"
    assert values(read_originals(decision.pod)) == values(read_originals(admitted(500, 64)))


# ---------------------------------------------------------------- a lost key

REPLACEMENT = KeyRing({"k20261127000214-abcdef": b"r" * 32})  # what a recreated keys Secret holds


def sized_at_admission(bound: bool) -> dict[str, Any]:
    """8 CPU pinned to n4, created at 6400m (generation 1), signed with RING's key; `bound`: also
    bound to the pod by the reconciler's first write (a pod MAC)."""
    review = authored_pinned(8000, "64Mi")
    sizing = admission_sizing(review, CONFIG, "n4")
    assert sizing is not None
    pod = admitted(6400, 64, stamped=False)
    pod["metadata"]["annotations"] = sized_stamp(
        review, "shop", RING, originals_from_spec_annotations(review), "n4", sizing.sized
    )
    if bound:
        pod["metadata"]["annotations"].update(pod_mac(pod, RING))
    decision = baseline(pod, RING)
    assert decision.check.trust is Trust.TRUSTED and decision.check.scope == ("pod" if bound else "sized")
    return pod


@pytest.mark.parametrize("bound", [False, True], ids=["sized MAC", "pod MAC"])
@pytest.mark.parametrize("ring", [REPLACEMENT, KeyRing({})], ids=["another key", "no key"])
def test_originals_signed_with_a_lost_key_are_held_not_recaptured_from_the_spec(bound: bool, ring: KeyRing) -> None:
    """The spec of a pod sized at admission is not its baseline: re-capturing it would make the
    sized values its originals for good (8 CPU authored, 6400m forever after)."""
    pod = sized_at_admission(bound)
    decision = baseline(pod, ring)
    assert decision.refused and not decision.may_resize and decision.stamp is None
    assert "unknown key 'k0001'" in decision.check.reason and "put the key back" in decision.check.reason
    assert not decision.check.tampered, "a lost key, not a forgery"
    held = restore_decision(pod, ring, SCOPE)
    assert held.patch == {} and "unknown key" in (held.held or "")
    plan = forecast_fleet([pod], {"node-1": "n2d"}, CONFIG, SCOPE, keyring=ring)
    assert plan.resized == 0 and [p.outcome for p in plan.not_resized] == ["OriginalsUnverified"]

    back = baseline(pod, KeyRing({**ring.keys, **RING.keys}))  # the key put back
    assert back.may_resize and values(read_originals(back.pod))[("app", "cpu")] == (8, 8)


def test_a_lost_key_on_originals_equal_to_the_unchanged_spec_is_recaptured_as_before() -> None:
    pod = admitted(500, 64)
    decision = baseline(pod, REPLACEMENT)
    assert decision.check.trust is Trust.RECAPTURE and decision.may_resize
    assert values(read_originals(decision.pod)) == values(read_originals(admitted(500, 64)))
    assert decision.stamp is not None and decision.stamp[ORIGINALS_MAC].startswith("v1.p.k20261127000214-abcdef.")
