"""Container names never share their ``original-*`` keys: a digest no search can collide, one
place that says which annotation holds a container's original (the legacy key of a pod stamped
before, when unambiguous), and a refusal, never a sharing, when two containers would map to one."""

from __future__ import annotations

import copy
import hashlib
import itertools
import re
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reconciler.outcome import spec_size
from resizer import (
    KeyRing,
    OriginalsError,
    PodIdentity,
    Trust,
    baseline,
    check_originals,
    load_config,
    originals_from_spec_annotations,
    read_originals,
    resolve_policy,
    sign_originals,
    sized_stamp,
)
from resizer.originals import KeyCollisionError, missing_original_annotations, original_keys, read_pod_originals
from resizer.plan import plan_resize
from resizer.podstate import ORIGINALS_MAC, legacy_original_key, original_key
from resizer.restore import restore_patch

from .test_resizer_annotations import assert_valid_annotation_key, dns_labels
from .test_resizer_support import SAMPLE_CONFIG, guaranteed

# Two valid container names (DNS-1123 labels of 50 characters sharing their first 41) whose
# 8-hex legacy keys are equal: a birthday search over random 9-character tails finds such a
# pair after some 50,000 names.
A = "payments-api-with-a-really-long-name-for-z41osl3f8"
B = "payments-api-with-a-really-long-name-for-qhtejfsi8"
SLOTS = list(itertools.product(("cpu", "memory"), ("request", "limit")))
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
RING = KeyRing({"k1": b"k" * 32})
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "rs-uid", "controller": True}


def old_key(container: str, resource: str, kind: str) -> str:
    """The key format before: a 63-character name became a truncation plus 8 hex of sha256."""
    stem = f"original-{resource}" + ("-limit" if kind == "limit" else "")
    name = f"{stem}.{container}"
    if len(name) >= 63:
        name = f"{stem}.{container[: 63 - len(stem) - 10]}-{hashlib.sha256(container.encode()).hexdigest()[:8]}"
    return "workload-resizer.io/" + name


def old_stamp(*containers: dict[str, Any]) -> dict[str, str]:
    """What the previous webhook stamped: one dict, so a later container's value overwrote an
    earlier one's under a shared key."""
    stamp: dict[str, str] = {}
    for c in containers:
        for resource, kind in SLOTS:
            value = (c["resources"].get(kind + "s") or {}).get(resource)
            if value is not None:
                stamp[old_key(c["name"], resource, kind)] = value
    return stamp


def make_pod(
    *containers: dict[str, Any],
    sidecars: tuple[dict[str, Any], ...] = (),
    generation: int = 1,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "namespace": "shop",
            "name": "web-7d9f-abcde",
            "generateName": "web-7d9f-",
            "uid": "pod-uid",
            "generation": generation,
            "annotations": dict(annotations or {}),
            "ownerReferences": [OWNER],
        },
        "spec": {"containers": list(containers)},
    }
    if sidecars:
        pod["spec"]["initContainers"] = [{**s, "restartPolicy": "Always"} for s in sidecars]
    return pod


def pod_signed(pod: dict[str, Any], originals: dict[str, str]) -> dict[str, Any]:
    """Bound to the pod by a reconciler (a pod MAC over exactly ``originals``)."""
    signed = copy.deepcopy(pod)
    signed["metadata"]["annotations"] = {
        **originals,
        ORIGINALS_MAC: sign_originals(RING, originals, PodIdentity.of(pod), "pod"),
    }
    return signed


def admission_signed(pod: dict[str, Any], originals: dict[str, str]) -> dict[str, Any]:
    identity = PodIdentity.of({**pod, "metadata": {**pod["metadata"], "name": ""}}, scope="admission")
    signed = copy.deepcopy(pod)
    signed["metadata"]["annotations"] = {
        **originals,
        ORIGINALS_MAC: sign_originals(RING, originals, identity, "admission"),
    }
    return signed


SMALL, LARGE = guaranteed(A, "100m", "64Mi"), guaranteed(B, "4", "8Gi")


# ---------------------------------------------------------------- the key format


def test_the_pair_is_two_valid_container_names_whose_legacy_keys_collide() -> None:
    for name in (A, B):
        assert DNS_LABEL.fullmatch(name) and len(name) <= 63
    for resource, kind in SLOTS:
        assert old_key(A, resource, kind) == old_key(B, resource, kind)
        assert legacy_original_key(A, resource, kind) == old_key(A, resource, kind)  # type: ignore[arg-type]


def test_the_two_names_get_distinct_keys_now() -> None:
    for resource, kind in SLOTS:
        first, second = (original_key(name, resource, kind) for name in (A, B))  # type: ignore[arg-type]
        assert first != second
        assert_valid_annotation_key(first)
        assert_valid_annotation_key(second)


def test_long_names_get_130_bits_of_sha256_and_short_names_keep_their_keys() -> None:
    key = original_key(A, "memory", "limit").partition("/")[2]
    assert len(key) == 63
    digest = key[-26:]
    assert re.fullmatch(r"[a-z2-7]{26}", digest) and key[-27] == "_"
    assert key.startswith("original-memory-limit." + A[:14])
    assert (
        original_key("app", "cpu", "request")
        == legacy_original_key("app", "cpu", "request")
        == "workload-resizer.io/original-cpu.app"
    )
    fits = "c" * 49  # original-cpu.<49> is 62 characters: verbatim under both formats
    assert (
        original_key(fits, "cpu", "request")
        == legacy_original_key(fits, "cpu", "request")
        == "workload-resizer.io/original-cpu." + fits
    )


@settings(deadline=None)
@given(st.lists(dns_labels, min_size=2, max_size=2, unique=True))
def test_keys_of_distinct_valid_names_never_collide_in_either_format(names: list[str]) -> None:
    """Verbatim keys are at most 62 characters; hashed and legacy keys are 63, and a legacy key
    has '-' ninth from the end where a hashed key has a digest character. So a key written today
    equals no other key of either format, except its own legacy key when it is verbatim."""
    keys = [
        (name, slot, form, key(name, *slot))
        for name in names
        for slot in SLOTS  # type: ignore[operator]
        for form, key in (("new", original_key), ("legacy", legacy_original_key))
    ]
    for _name, _slot, form, key in keys:
        if form == "new":
            assert_valid_annotation_key(key)
    for (name, slot, form, key), (other, other_slot, other_form, other_key) in itertools.combinations(keys, 2):
        if "new" in (form, other_form) and key == other_key:
            assert (name, slot) == (other, other_slot) and len(key.partition("/")[2]) < 63


@settings(deadline=None)
@given(dns_labels)
def test_a_names_hashed_key_is_never_its_legacy_key(name: str) -> None:
    for resource, kind in SLOTS:
        new, legacy = original_key(name, resource, kind), legacy_original_key(name, resource, kind)  # type: ignore[arg-type]
        assert (new == legacy) == (len(new.partition("/")[2]) < 63)


# ---------------------------------------------------------------- refuse, never share


def test_a_pod_stamped_with_colliding_legacy_keys_is_refused_by_every_reader() -> None:
    pod = make_pod(SMALL, LARGE, generation=2, annotations=old_stamp(SMALL, LARGE))
    assert pod["metadata"]["annotations"][old_key(A, "cpu", "request")] == "4", "A carries B's originals"
    for read in (read_originals, read_pod_originals, original_keys, missing_original_annotations, restore_patch):
        with pytest.raises(KeyCollisionError) as raised:
            read(pod)
        assert A in str(raised.value) and B in str(raised.value), read
    with pytest.raises(OriginalsError):
        plan_resize(pod, resolve_policy(load_config(SAMPLE_CONFIG), pod), "n4")


def test_a_pod_signed_over_colliding_legacy_keys_is_refused_by_the_authority() -> None:
    """What the previous version left: stamped, then bound by a pod MAC and resized."""
    pod = pod_signed(make_pod(SMALL, LARGE, generation=2), old_stamp(SMALL, LARGE))
    for decide in (lambda: check_originals(pod, RING), lambda: baseline(pod, RING)):
        with pytest.raises(KeyCollisionError):
            decide()


def test_a_colliding_legacy_key_of_a_container_not_reading_it_refuses_the_pod_too() -> None:
    """A's own key is present, B falls back to the legacy key A shares: whose value is it?"""
    annotations = {original_key(A, "cpu", "request"): "100m", old_key(B, "cpu", "request"): "4"}
    with pytest.raises(KeyCollisionError):
        read_originals(make_pod(SMALL, LARGE, annotations=annotations))


def test_the_pod_stamped_today_is_read_by_its_own_keys() -> None:
    pod = make_pod(SMALL, LARGE, generation=2)
    pod["metadata"]["annotations"] = originals_from_spec_annotations(pod)
    pod["spec"]["containers"] = [guaranteed(A, "80m", "64Mi"), guaranteed(B, "3200m", "8Gi")]
    originals = read_originals(pod)
    assert originals[A].cpu.request == originals[A].cpu.limit == Fraction(1, 10)
    assert originals[B].cpu.request == 4
    assert originals[A].memory.limit == 64 * 2**20


@pytest.mark.parametrize(
    "twin",
    [
        pytest.param(make_pod(guaranteed("app"), guaranteed("app")), id="two containers"),
        pytest.param(make_pod(guaranteed("app"), sidecars=(guaranteed("app"),)), id="a container and a sidecar"),
    ],
)
def test_duplicate_names_are_refused_not_merged(twin: dict[str, Any]) -> None:
    with pytest.raises(KeyCollisionError, match="'app'"):
        originals_from_spec_annotations(twin)
    with pytest.raises(KeyCollisionError):
        read_originals(twin)


def test_a_plain_init_container_sharing_a_name_is_not_resizable_and_not_a_collision() -> None:
    pod = make_pod(guaranteed("app"))
    pod["spec"]["initContainers"] = [guaranteed("app")]
    assert list(read_originals(pod)) == ["app"]


# ---------------------------------------------------------------- upgrade: read the old, write the new


def test_a_legacy_key_without_its_new_key_is_read_and_only_new_keys_are_written() -> None:
    authored = make_pod(guaranteed(A, "1", "1Gi"))
    resized = make_pod(
        guaranteed(A, "800m", "1Gi"), generation=2, annotations=old_stamp(authored["spec"]["containers"][0])
    )
    assert read_originals(resized)[A].cpu.request == 1, "not the resized spec: no compounding"
    assert original_keys(resized)[A][("cpu", "request")] == old_key(A, "cpu", "request")
    assert missing_original_annotations(resized) == {}
    assert set(originals_from_spec_annotations(authored)) == {
        original_key(A, r, k)  # type: ignore[arg-type]
        for r, k in SLOTS
    }
    new_and_old = copy.deepcopy(resized)
    new_and_old["metadata"]["annotations"][original_key(A, "cpu", "request")] = "2"
    assert read_originals(new_and_old)[A].cpu.request == 2, "the key written today wins"
    assert restore_patch(resized) == {
        "spec": {"containers": [{"name": A, "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}
    }


def test_legacy_admission_stamps_on_unchanged_pods_stay_trusted() -> None:
    authored = make_pod(guaranteed(A, "1", "1Gi"), sidecars=(guaranteed("proxy", "500m", "128Mi"),))
    pod = admission_signed(authored, old_stamp(authored["spec"]["containers"][0]))
    verdict = check_originals(pod, RING)
    assert verdict.trust is Trust.TRUSTED and not verdict.tampered, verdict
    decision = baseline(pod, RING)
    assert decision.stamp is not None
    assert {k for k in decision.stamp if k != ORIGINALS_MAC} == {
        original_key("proxy", r, k)  # type: ignore[arg-type]
        for r, k in SLOTS
    }


def test_a_legacy_sidecar_under_a_pod_mac_is_not_recorded_again_from_its_resized_spec() -> None:
    """Step 1 completes missing sidecar originals from the spec: a sidecar whose originals live
    under legacy keys has them, and its (resized) spec must not become its baseline."""
    proxy = guaranteed("proxy-" + "p" * 50, "500m", "128Mi")
    authored = make_pod(guaranteed("app"), sidecars=(proxy,))
    resized = make_pod(guaranteed("app", "800m"), sidecars=(guaranteed(proxy["name"], "400m", "128Mi"),), generation=2)
    pod = pod_signed(resized, old_stamp(authored["spec"]["containers"][0], proxy))
    decision = baseline(pod, RING)
    assert decision.check.trust is Trust.TRUSTED and decision.stamp is None, decision
    assert read_originals(pod)[proxy["name"]].cpu.request == Fraction(1, 2)
    digest_with = spec_size(pod)
    unrecorded = pod_signed(resized, old_stamp(authored["spec"]["containers"][0]))
    assert digest_with != spec_size(unrecorded), "a sidecar with legacy originals counts as recorded"


def test_a_legacy_sized_at_admission_stamp_still_verifies() -> None:
    """The sized MAC covers the sized spec under the keys the originals use: legacy ones on a
    pod sized by the previous webhook. Unverified it would be re-captured from the sized spec:
    compounded."""
    authored = make_pod(guaranteed(A, "1", "1Gi"))
    sized = make_pod(guaranteed(A, "800m", "1Gi"))
    at_admission = {**sized, "metadata": {**sized["metadata"], "name": ""}}
    stamp = sized_stamp(
        at_admission,
        "shop",
        RING,
        old_stamp(authored["spec"]["containers"][0]),
        "n4",
        old_stamp(sized["spec"]["containers"][0]),
    )
    pod = copy.deepcopy(sized)
    pod["metadata"]["annotations"] = stamp
    verdict = check_originals(pod, RING)
    assert (verdict.trust, verdict.scope) == (Trust.TRUSTED, "sized"), verdict


# ---------------------------------------------------------------- the reconciler


def bound_pod(annotations: dict[str, str], generation: int = 2) -> dict[str, Any]:
    """The issue's pod as the previous version left it: stamped, bound by a pod MAC, resized."""
    from tests.unit.test_reconciler_reconcile import KEYS

    containers = [guaranteed(A, "100m", "64Mi"), guaranteed(B, "4", "8Gi")]
    full: dict[str, Any] = {
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "uid": "uid-1",
            "generation": generation,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "controller": True}],
        },
        "spec": {"nodeName": "node-1", "containers": containers},
        "status": {
            "phase": "Running",
            "qosClass": "Guaranteed",
            "observedGeneration": generation,
            "containerStatuses": [
                {"name": c["name"], "state": {"running": {}}, "resources": copy.deepcopy(c["resources"])}
                for c in containers
            ],
        },
    }
    full["metadata"]["annotations"] = {
        **annotations,
        ORIGINALS_MAC: sign_originals(KEYS, annotations, PodIdentity.of(full), "pod"),
    }
    return full


@pytest.mark.parametrize("applied", [None, "n4"])
def test_the_reconciler_refuses_a_pod_with_colliding_legacy_keys_once_and_writes_nothing(applied: str | None) -> None:
    from tests.unit.test_reconciler_reconcile import KEY, cluster, reconciler, run

    annotations = old_stamp(SMALL, LARGE)
    if applied is not None:  # sized by the previous version: left as it is, never re-aligned from B's values
        annotations["workload-resizer.io/applied-instance-type"] = applied
    fake = cluster(bound_pod(annotations))
    rec = reconciler(fake)
    run(rec.reconcile(KEY))
    run(rec.reconcile(KEY))
    assert fake.ops() == []
    if applied is None:
        assert [(e.type, e.reason) for e in fake.events] == [("Warning", "ResizeFailed")]
        assert A in fake.events[0].message and B in fake.events[0].message
    assert fake.pod_now(KEY)["spec"] == bound_pod(annotations)["spec"]
