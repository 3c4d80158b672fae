"""The baseline authority (resizer.integrity.baseline) against everything a tenant can do.

A tenant can create pods (through the webhook or past it), forge or copy any of our
annotations, mint admission-scope MACs for any values (a made-up AdmissionReview), and
bump metadata.generation without changing resources (e.g. removing a scheduling gate).
Whatever the sequence, every program of the product (reconciler, plan, restore) scales
from, binds, or puts back only the values the author's pod was admitted with, or (a sized
record minted through a made-up review, docs/security.md) those of an honest author whose
pod, pinned to that node type, would have been created exactly as this one is.
"""
from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resizer import (
    ORIGINALS_MAC,
    RESIZE_STATE,
    SIZED_AT_ADMISSION,
    KeyRing,
    Trust,
    admission_sizing,
    PodIdentity,
    baseline,
    load_config,
    originals_from_spec_annotations,
    pod_mac,
    read_originals,
    sign_originals,
    sized_stamp,
)
from resizer.forecast import forecast_fleet
from resizer.restore import restore_decision
from resizer.scope import namespace_scope

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


def admitted(cpu_milli: int, memory_mi: int, name: str = "web-7d9f-abcde", uid: str = "pod-uid",
             stamped: bool = True) -> dict[str, Any]:
    """A pod as the apiserver stores it after creation (generation 1), stamped by the webhook."""
    resources = {"requests": {"cpu": f"{cpu_milli}m", "memory": f"{memory_mi}Mi"},
                 "limits": {"cpu": f"{cpu_milli}m", "memory": f"{memory_mi}Mi"}}
    pod: dict[str, Any] = {
        "metadata": {"namespace": "shop", "name": name, "generateName": "web-7d9f-", "uid": uid, "generation": 1,
                     "annotations": {}, "ownerReferences": [dict(OWNER)]},
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
    return {"metadata": {"namespace": "shop", "name": "", "generateName": "web-7d9f-", "ownerReferences": [dict(OWNER)]},
            "spec": {"nodeSelector": {"type": "n4"}, "containers": [{"name": "app", "resources": {
                "requests": {"cpu": f"{cpu_milli}m", "memory": memory},
                "limits": {"cpu": f"{cpu_milli}m", "memory": memory}}}]}}


def mint_sized_record(pod: dict[str, Any], cpu_milli: int) -> None:
    """What the webhook answers a made-up review of an n4-pinned pod authored at `cpu_milli`."""
    memory = pod["spec"]["containers"][0]["resources"]["requests"]["memory"]
    review = authored_pinned(cpu_milli, memory)
    sizing = admission_sizing(review, CONFIG, "n4")
    if sizing is None:
        return
    stamp = sized_stamp(review, "shop", RING, originals_from_spec_annotations(review), "n4", sizing.sized)
    annotations = {k: v for k, v in pod["metadata"]["annotations"].items() if not k.startswith(PREFIX + "original-")}
    pod["metadata"]["annotations"] = {**annotations, **stamp}


def honest_author_of(pod: dict[str, Any], originals: dict[tuple[str, str], Any]) -> bool:
    """Whether an author who wrote `originals` pinned to the pod's recorded type would have had
    exactly this pod created (never changed since)."""
    (cpu, _), (memory, _) = originals[("app", "cpu")], originals[("app", "memory")]
    review = authored_pinned(int(cpu * 1000), f"{int(memory)}")
    sizing = admission_sizing(review, CONFIG, pod["metadata"]["annotations"].get(SIZED_AT_ADMISSION, ""))
    return sizing is not None and pod["metadata"]["generation"] == 1 \
        and dict(sizing.sized) == originals_from_spec_annotations(pod)


def resized_by_the_product(pod: dict[str, Any], factor_percent: int) -> None:
    """Steps 2 and 3 of the reconciler: the spec at the plan, the originals bound to the pod."""
    container = pod["spec"]["containers"][0]
    cpu = int(container["resources"]["requests"]["cpu"][:-1]) * factor_percent // 100 or 1
    container["resources"] = {"requests": {**container["resources"]["requests"], "cpu": f"{cpu}m"},
                              "limits": {**container["resources"]["limits"], "cpu": f"{cpu}m"}}
    pod["metadata"]["generation"] += 1
    pod["metadata"]["annotations"].update(pod_mac(pod, RING))


def values(originals: dict[str, Any]) -> dict[tuple[str, str], Any]:
    return {(name, resource): (o.of(resource).request, o.of(resource).limit)
            for name, o in originals.items() for resource in ("cpu", "memory")}


quantities = st.integers(min_value=1, max_value=64_000)
tenant_actions = st.lists(st.one_of(
    st.tuples(st.just("forge"), quantities),            # original-cpu* = N millicores, unsigned
    st.tuples(st.just("mint"), quantities),             # original-cpu* = N, MAC from a made-up review
    st.tuples(st.just("mint-sized"), quantities),       # a sized record for originals N pinned to n4
    st.tuples(st.just("mint-sized"), st.just(0)),       # ... for the N whose n4 size is the spec now
    st.tuples(st.just("copy"), quantities),             # MAC and originals of a sibling admitted at N
    st.tuples(st.just("state"), st.sampled_from(["deferred", "infeasible", "error", "unsupported"])),
    st.tuples(st.just("applied"), st.sampled_from(["n2d", "n4"])),
    st.tuples(st.just("gate"), st.just(0)),             # generation bumped, resources unchanged
    st.tuples(st.just("strip"), st.just(0)),            # every annotation of ours removed
), max_size=6)


def act(pod: dict[str, Any], action: tuple[str, Any]) -> None:
    kind, arg = action
    annotations = pod["metadata"]["annotations"]
    forged = {PREFIX + "original-cpu.app": f"{arg}m", PREFIX + "original-cpu-limit.app": f"{arg}m"} \
        if isinstance(arg, int) else {}
    if kind == "forge":
        annotations.update(forged)
    elif kind == "mint":
        mint_admission_mac(pod, {**{k: v for k, v in annotations.items() if k.startswith(PREFIX + "original-")},
                                 **forged})
    elif kind == "mint-sized":
        mint_sized_record(pod, arg or _milli(pod["spec"]["containers"][0]["resources"]["requests"]["cpu"]) * 5 // 4)
    elif kind == "copy":
        sibling = admitted(arg, 64, name="web-7d9f-zzzzz", uid="other-uid")
        annotations.update({k: v for k, v in sibling["metadata"]["annotations"].items()})
    elif kind == "state":
        annotations[RESIZE_STATE] = f'{{"state":"{arg}","nodeType":"n4","generation":1}}'
    elif kind == "applied":
        annotations.update({PREFIX + "applied-instance-type": arg, PREFIX + "applied-size": "0" * 16})
    elif kind == "gate":
        pod["metadata"]["generation"] += 1
    elif kind == "strip":
        pod["metadata"]["annotations"] = {k: v for k, v in annotations.items() if not k.startswith(PREFIX)}


@settings(deadline=None, max_examples=400)
@given(cpu=quantities, memory=st.integers(min_value=1, max_value=4096), stamped=st.booleans(),
       resized=st.sampled_from([None, 80, 125]), before=tenant_actions, after=tenant_actions)
def test_no_sequence_of_tenant_actions_moves_the_baseline_off_the_admitted_values(
        cpu: int, memory: int, stamped: bool, resized: int | None, before: list[Any], after: list[Any]) -> None:
    pod = admitted(cpu, memory, stamped=stamped)
    author = values(read_originals(pod))        # the spec as admitted: what the author wrote
    for action in before:
        act(pod, action)
    genuine = None
    if resized is not None:
        # The product resizes only from what the authority lets it (as the reconciler does).
        decision = baseline(pod, RING)
        minted = values(read_originals(decision.pod))
        if decision.check.scope == "sized" and minted != author and honest_author_of(pod, minted):
            author = minted         # exactly the pod of an author of these values: from now on, theirs
        if decision.may_resize:
            if decision.stamp is not None:       # step 1: re-captured originals, bound to the pod
                pod["metadata"]["annotations"] = {k: v for k, v in {**pod["metadata"]["annotations"],
                                                                      **decision.stamp}.items() if v is not None}
            genuine = dict((k, v) for k, v in pod["metadata"]["annotations"].items()
                           if k.startswith(PREFIX + "original-"))
            resized_by_the_product(pod, resized)
    for action in after:
        act(pod, action)

    for vouched in (None, genuine):
        decision = baseline(pod, RING, vouched=vouched)
        if decision.may_resize or decision.may_sign:
            trusted = values(read_originals(decision.pod))
            if decision.check.scope == "sized" and trusted != author:
                assert honest_author_of(pod, trusted), decision.check
                author = trusted
            else:
                assert trusted == author, decision.check
    cpu = int(author[("app", "cpu")][0] * 1000)
    held = restore_decision(pod, RING, SCOPE)
    if held.patch:
        (container,) = held.patch["spec"]["containers"]
        restored = {**pod["spec"]["containers"][0]["resources"]["requests"], **container["resources"]["requests"]}
        assert restored["cpu"] in (f"{cpu}m", f"{cpu / 1000:g}") or _milli(restored["cpu"]) == cpu
    plan = forecast_fleet([pod], {"node-1": "n4"}, CONFIG, SCOPE, keyring=RING)
    for group in plan.workloads:
        for forecast in group.pods:
            if forecast.outcome == "Resize":
                assert forecast.desired_cpu <= cpu, "never above the admitted value x the ratio (0.8)"


def _milli(text: str) -> int:
    return int(text[:-1]) if text.endswith("m") else int(float(text) * 1000)


# ------------------------------------------------------------------ restore and plan, one route each


def forged_after_a_resize() -> dict[str, Any]:
    pod = admitted(100, 64)
    resized_by_the_product(pod, 100)             # generation 2, bound to the pod
    act(pod, ("forge", 8000))                    # the tenant raises the originals
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
    sent["metadata"]["name"] = ""                # a generated pod has no name at admission
    stamp = admission_stamp(sent, "shop", RING)
    assert stamp[PREFIX + "original-cpu.app"] == "500m" and stamp[ORIGINALS_MAC].startswith("v1.a.")
    stored = admitted(500, 64, stamped=False)    # as the apiserver stores it, with the stamp
    stored["metadata"]["annotations"] = stamp
    decision = baseline(stored, RING)
    assert decision.may_resize and decision.check.scope == "admission"
    assert values(read_originals(decision.pod)) == values(read_originals(admitted(500, 64)))


# ---------------------------------------------------------------- a lost key

REPLACEMENT = KeyRing({"k20261127000214-abcdef": b"r" * 32})    # what a recreated keys Secret holds


def sized_at_admission(bound: bool) -> dict[str, Any]:
    """8 CPU pinned to n4, created at 6400m (generation 1), signed with RING's key; `bound`: also
    bound to the pod by the reconciler's first write (a pod MAC)."""
    review = authored_pinned(8000, "64Mi")
    sizing = admission_sizing(review, CONFIG, "n4")
    assert sizing is not None
    pod = admitted(6400, 64, stamped=False)
    pod["metadata"]["annotations"] = sized_stamp(review, "shop", RING, originals_from_spec_annotations(review),
                                                 "n4", sizing.sized)
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

    back = baseline(pod, KeyRing({**ring.keys, **RING.keys}))       # the key put back
    assert back.may_resize and values(read_originals(back.pod))[("app", "cpu")] == (8, 8)


def test_a_lost_key_on_originals_equal_to_the_unchanged_spec_is_recaptured_as_before() -> None:
    pod = admitted(500, 64)
    decision = baseline(pod, REPLACEMENT)
    assert decision.check.trust is Trust.RECAPTURE and decision.may_resize
    assert values(read_originals(decision.pod)) == values(read_originals(admitted(500, 64)))
    assert decision.stamp is not None and decision.stamp[ORIGINALS_MAC].startswith("v1.p.k20261127000214-abcdef.")
