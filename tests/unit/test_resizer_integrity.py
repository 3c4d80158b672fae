"""resizer.integrity: who may choose a pod's baseline, decided from the annotations,
the MAC, metadata.generation and the spec."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from resizer import (
    KeyRing,
    KeyRingError,
    PodIdentity,
    Trust,
    check_originals,
    early_binding,
    key_id_of,
    originals_from_spec_annotations,
    sign_originals,
)
from resizer.integrity import key_id_order
from resizer.podstate import ORIGINALS_MAC

OLD, NEW = "2026-01-01", "2026-06-01"
RING = KeyRing({OLD: b"o" * 32, NEW: b"n" * 32})
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "rs-uid", "controller": True}


def make_pod(
    cpu: str = "500m",
    name: str = "web-7d9f-abcde",
    uid: str = "pod-uid",
    generation: int = 1,
    annotations: dict[str, str] | None = None,
    owner: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "shop",
            "name": name,
            "generateName": "web-7d9f-",
            "uid": uid,
            "generation": generation,
            "annotations": dict(annotations or {}),
            "ownerReferences": [owner or OWNER],
        },
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]},
    }


def stamped_at_admission(pod: dict[str, Any], ring: KeyRing = RING) -> dict[str, Any]:
    """As the webhook stamps it: the name was not known yet (generateName)."""
    at_admission = copy.deepcopy(pod)
    at_admission["metadata"].pop("name")
    originals = originals_from_spec_annotations(pod)
    mac = sign_originals(ring, originals, PodIdentity.of(at_admission, scope="admission"), "admission")
    pod["metadata"]["annotations"].update({**originals, ORIGINALS_MAC: mac})
    return pod


def stamped_by_reconciler(
    pod: dict[str, Any], originals: dict[str, str] | None = None, ring: KeyRing = RING
) -> dict[str, Any]:
    originals = originals if originals is not None else originals_from_spec_annotations(pod)
    mac = sign_originals(ring, originals, PodIdentity.of(pod), "pod")
    pod["metadata"]["annotations"].update({**originals, ORIGINALS_MAC: mac})
    return pod


def check(pod: dict[str, Any], ring: KeyRing = RING):
    return check_originals(pod, ring, originals_from_spec_annotations(pod))


def resize_spec(pod: dict[str, Any], cpu: str) -> dict[str, Any]:
    """What pods/resize does: the spec changes, the apiserver bumps the generation."""
    pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}
    pod["metadata"]["generation"] += 1
    return pod


CPU = "workload-resizer.io/original-cpu.app"


def test_webhook_stamp_on_an_unchanged_pod_is_trusted() -> None:
    result = check(stamped_at_admission(make_pod()))
    assert result.trust is Trust.TRUSTED and result.scope == "admission" and result.key_id == NEW


def test_reconciler_stamp_is_trusted_after_a_resize() -> None:
    pod = resize_spec(stamped_by_reconciler(make_pod("1")), "800m")
    assert check(pod).trust is Trust.TRUSTED


def test_any_current_key_verifies_and_the_newest_signs() -> None:
    pod = stamped_by_reconciler(make_pod(), ring=KeyRing({OLD: b"o" * 32}))
    assert key_id_of(pod["metadata"]["annotations"][ORIGINALS_MAC]) == OLD
    result = check(resize_spec(pod, "400m"))
    assert result.trust is Trust.TRUSTED and result.key_id == OLD
    assert key_id_of(stamped_by_reconciler(make_pod())["metadata"]["annotations"][ORIGINALS_MAC]) == NEW


def test_a_retired_key_makes_a_resized_pod_unverifiable() -> None:
    pod = resize_spec(stamped_by_reconciler(make_pod("1"), ring=KeyRing({OLD: b"o" * 32})), "800m")
    result = check(pod, KeyRing({NEW: b"n" * 32}))
    assert result.trust is Trust.REFUSE and "unknown key" in result.reason


def test_edited_value_on_a_resized_pod_is_refused() -> None:
    pod = resize_spec(stamped_by_reconciler(make_pod("1")), "800m")
    pod["metadata"]["annotations"][CPU] = "16"
    result = check(pod)
    assert result.trust is Trust.REFUSE and result.tampered and "generation 2" in result.reason


def test_edited_value_on_an_unchanged_pod_is_recaptured_from_the_spec() -> None:
    pod = stamped_by_reconciler(make_pod("500m"))
    pod["metadata"]["annotations"][CPU] = "16"
    result = check(pod)
    assert result.trust is Trust.RECAPTURE and result.tampered


def test_an_added_original_key_breaks_the_mac() -> None:
    pod = resize_spec(stamped_by_reconciler(make_pod("1")), "800m")
    pod["metadata"]["annotations"]["workload-resizer.io/original-memory.app"] = "64Gi"
    assert check(pod).trust is Trust.REFUSE


def test_forged_values_without_a_mac_on_an_unchanged_pod_are_recaptured() -> None:
    pod = make_pod("500m", annotations={CPU: "16", "workload-resizer.io/original-cpu-limit.app": "16"})
    result = check(pod)
    assert result.trust is Trust.RECAPTURE and result.tampered


def test_no_originals_on_an_unchanged_pod_is_a_plain_capture() -> None:
    result = check(make_pod())
    assert result.trust is Trust.RECAPTURE and not result.tampered


def test_no_originals_on_a_changed_pod_is_refused_not_compounded() -> None:
    assert check(resize_spec(make_pod("1"), "800m")).trust is Trust.REFUSE


def test_removing_the_applied_annotation_does_not_make_a_resized_pod_look_new() -> None:
    pod = resize_spec(make_pod("1", annotations={CPU: "16"}), "800m")
    assert check(pod).trust is Trust.REFUSE


def test_reconciler_mac_copied_to_another_pod_does_not_verify() -> None:
    victim = resize_spec(stamped_by_reconciler(make_pod("16")), "12800m")
    copy_ = make_pod(
        "100m",
        name="web-7d9f-zzzzz",
        uid="other-uid",
        generation=2,
        annotations={k: v for k, v in victim["metadata"]["annotations"].items()},
    )
    assert check(copy_).trust is Trust.REFUSE


def test_admission_mac_copied_to_an_unchanged_sibling_is_recaptured() -> None:
    legit = stamped_at_admission(make_pod("16"))
    copy_ = make_pod("100m", name="web-7d9f-zzzzz", uid="other-uid", annotations=dict(legit["metadata"]["annotations"]))
    result = check(copy_)
    assert result.trust is Trust.RECAPTURE and result.tampered


def test_admission_mac_copied_to_a_changed_sibling_is_trusted_only_if_aligned() -> None:
    legit = stamped_at_admission(make_pod("16"))
    copy_ = make_pod(
        "100m", name="web-7d9f-zzzzz", uid="other-uid", generation=2, annotations=dict(legit["metadata"]["annotations"])
    )
    assert check(copy_).trust is Trust.TRUSTED_IF_ALIGNED


def test_admission_mac_after_a_crash_between_resize_and_applied_is_usable_if_aligned() -> None:
    pod = resize_spec(stamped_at_admission(make_pod("1")), "800m")
    assert check(pod).trust is Trust.TRUSTED_IF_ALIGNED


def test_admission_mac_does_not_verify_under_another_owner() -> None:
    pod = stamped_at_admission(make_pod("1"))
    pod["metadata"]["ownerReferences"] = [{**OWNER, "uid": "other-rs"}]
    resize_spec(pod, "800m")
    assert check(pod).trust is Trust.REFUSE


def test_admission_mac_of_a_named_pod_verifies() -> None:
    pod = make_pod("1", name="db-0")
    originals = originals_from_spec_annotations(pod)
    mac = sign_originals(RING, originals, PodIdentity.of(pod, scope="admission"), "admission")
    pod["metadata"]["annotations"].update({**originals, ORIGINALS_MAC: mac})
    assert check(resize_spec(pod, "800m")).trust is Trust.TRUSTED_IF_ALIGNED
    assert check(make_pod("1", name="db-0", annotations=dict(pod["metadata"]["annotations"]))).trust is Trust.TRUSTED


@pytest.mark.parametrize("mac", ["", "v1", "v2.p.k.x", "v1.x.k.x", "v1.p.k", 7])
def test_malformed_mac_is_unverifiable(mac: Any) -> None:
    pod = resize_spec(make_pod("1", annotations={CPU: "1", ORIGINALS_MAC: mac}), "800m")
    assert check(pod).trust is Trust.REFUSE


def test_without_keys_nothing_verifies_but_unchanged_pods_still_work() -> None:
    empty = KeyRing({})
    pod = stamped_by_reconciler(make_pod("1"))
    assert check(pod, empty).trust is Trust.RECAPTURE
    assert check(resize_spec(pod, "800m"), empty).trust is Trust.REFUSE


def test_without_a_generation_a_pod_counts_as_changed() -> None:
    """An apiserver that does not set metadata.generation cannot tell us the spec is the author's."""
    pod = make_pod("1", annotations={CPU: "16"})
    del pod["metadata"]["generation"]
    assert check(pod).trust is Trust.REFUSE


def test_unsigned_originals_equal_to_an_unchanged_spec_are_trusted_without_a_write() -> None:
    from resizer import baseline

    pod = make_pod("500m", annotations=originals_from_spec_annotations(make_pod("500m")))
    result = baseline(pod, KeyRing({}), originals_from_spec_annotations(pod))
    assert result.check.trust is Trust.TRUSTED and result.stamp is None


@pytest.mark.parametrize(("keys", "error"), [({"bad.id": b"x" * 32}, "key id"), ({"k": b"short"}, "bytes")])
def test_bad_key_rings_are_rejected(keys: dict[str, bytes], error: str) -> None:
    with pytest.raises(KeyRingError, match=error):
        KeyRing(keys)


def test_baseline_recapture_plans_from_the_spec_and_stamps_a_pod_mac() -> None:
    from resizer import baseline, read_originals

    pod = make_pod("500m", annotations={CPU: "16", ORIGINALS_MAC: "v1.a.k.forged", "other": "x"})
    result = baseline(pod, RING, originals_from_spec_annotations(pod))
    assert result.check.trust is Trust.RECAPTURE
    assert read_originals(result.pod)["app"].cpu.request == read_originals(make_pod("500m"))["app"].cpu.request
    assert result.stamp is not None and result.stamp[CPU] == "500m"
    after = copy.deepcopy(pod)
    after["metadata"]["annotations"] = {
        k: v for k, v in {**pod["metadata"]["annotations"], **result.stamp}.items() if v is not None
    }
    assert check(after).trust is Trust.TRUSTED and check(after).scope == "pod"


def test_baseline_of_trusted_originals_writes_nothing() -> None:
    from resizer import baseline

    pod = stamped_at_admission(make_pod())
    result = baseline(pod, RING, originals_from_spec_annotations(pod))
    assert result.stamp is None and result.pod is pod


def test_pod_mac_upgrades_an_admission_stamp_and_needs_resign_tracks_rotation() -> None:
    from resizer import needs_resign, pod_mac

    old_ring = KeyRing({OLD: b"o" * 32})
    pod = stamped_at_admission(make_pod("1"), ring=old_ring)
    assert not needs_resign(pod, old_ring)
    assert needs_resign(pod, RING)
    pod["metadata"]["annotations"].update(pod_mac(pod, RING))
    assert not needs_resign(pod, RING)
    assert check(resize_spec(pod, "800m")).scope == "pod"


@pytest.mark.parametrize(
    "originals, namespace, scope, mac",
    [
        (
            {"workload-resizer.io/original-cpu.app": "500m"},
            "shop",
            "pod",
            "v1.p.k1.G7DObZkYP0rxasP2WO5lLI1rX227_D2KfNI_mAQPzpI",
        ),
        (
            {"workload-resizer.io/original-cpu.\u00e4pp": "500m"},
            "sh\u00f6p",
            "admission",  # non-ASCII: escaped
            "v1.a.k1.cRy-Eas9zaoaK432UUVN10B3CFk1j7tAF1DbySeHRZs",
        ),
    ],
)
def test_macs_already_on_pods_keep_verifying(originals: dict[str, str], namespace: str, scope: Any, mac: str) -> None:
    """The signed message's encoding is a compatibility contract: these values were signed by
    an earlier version (stdlib json); any change of the encoding would make them unverifiable."""
    identity = PodIdentity(namespace, "web-1", "web-", "uid-1", "ReplicaSet", "apps/v1", "web", "rs-uid")
    assert sign_originals(KeyRing({"k1": b"k" * 32}), originals, identity, scope) == mac


def test_the_stand_in_for_a_pod_mac_has_its_exact_size() -> None:
    from resizer import pod_mac, pod_mac_stand_in

    pod = make_pod()
    assert {k: len(v) for k, v in pod_mac_stand_in(RING).items()} == {k: len(v) for k, v in pod_mac(pod, RING).items()}
    assert pod_mac_stand_in(KeyRing({})) == {} == pod_mac(pod, KeyRing({}))


@pytest.mark.parametrize(
    ("ids", "newest"),
    [
        (["k9", "k10"], "k10"),  # not the greatest string ("k9")
        (["k0009", "k0010", "k0002"], "k0010"),
        (["2026-9-30", "2026-11-23"], "2026-11-23"),
        (["2026-01-01", "2026-06-01"], "2026-06-01"),
        (["k1", "k01"], "k1"),  # equal as numbers: plain string order decides
        (["k2", "k2a"], "k2a"),
        (["a", "b10", "b9"], "b10"),
        (["only"], "only"),
    ],
)
def test_the_newest_key_is_the_greatest_id_in_natural_order(ids: list[str], newest: str) -> None:
    for order in (ids, list(reversed(ids))):
        assert KeyRing({key_id: b"k" * 32 for key_id in order}).newest == newest


def test_ids_mixing_digits_and_text_at_the_same_place_still_compare() -> None:
    ring = KeyRing({"2026-11-23": b"d" * 32, "k0002": b"k" * 32, "0": b"z" * 32, "Z_1": b"u" * 32})
    assert ring.newest == "k0002"
    assert sorted(ring.keys, key=key_id_order) == ["0", "2026-11-23", "Z_1", "k0002"]


def test_the_newest_signs_after_a_tenth_key() -> None:
    ring = KeyRing({f"k{n}": bytes([n]) * 32 for n in range(1, 11)})
    value = sign_originals(ring, {}, PodIdentity.of(make_pod()), "pod")
    assert key_id_of(value) == "k10"


# ---------------------------------------------------------------- a changed pod: only a pod MAC vouches (issue 34)


def test_admission_mac_equal_to_a_changed_spec_only_explains_an_aligned_pod() -> None:
    """A made-up review of a resized pod's spec obtains exactly these (docs/security.md, routes):
    trusted, they would make the resized size the baseline of the next resize."""
    pod = stamped_at_admission(make_pod("1", generation=2))
    result = check(pod)
    assert result.trust is Trust.TRUSTED_IF_ALIGNED and result.scope == "admission"
    assert "generation 2" in result.reason


def test_admission_mac_equal_to_a_changed_spec_is_trusted_while_this_process_vouches_for_it() -> None:
    pod = stamped_at_admission(make_pod("1", generation=2))
    originals = {k: v for k, v in pod["metadata"]["annotations"].items() if k != ORIGINALS_MAC}
    vouched = check_originals(pod, RING, originals_from_spec_annotations(pod), vouched=originals)
    assert vouched.trust is Trust.TRUSTED


def test_sized_mac_on_a_changed_pod_only_explains_an_aligned_pod() -> None:
    """A sized record whose sized values equal its originals (a pin of ratio 1), minted and put on a
    pod whose spec changed since but holds those values."""
    from resizer import sized_stamp
    from resizer.podstate import SIZED_AT_ADMISSION

    review = make_pod("1")
    review["metadata"].pop("name")
    originals = originals_from_spec_annotations(review)
    pod = make_pod("1", generation=2, annotations=sized_stamp(review, "shop", RING, originals, "n2d", originals))
    assert SIZED_AT_ADMISSION in pod["metadata"]["annotations"]
    result = check(pod)
    assert result.trust is Trust.TRUSTED_IF_ALIGNED and result.scope == "sized"


def test_originals_bound_to_the_pod_before_its_gate_was_removed_stay_trusted() -> None:
    pod = stamped_by_reconciler(stamped_at_admission(make_pod("1")))
    pod["metadata"]["generation"] = 2  # the gate removed: no resource changed
    result = check(pod)
    assert result.trust is Trust.TRUSTED and result.scope == "pod"


# ---------------------------------------------------------------- early_binding: a gated pod at generation 1


def bound_after(pod: dict[str, Any], patch: dict[str, str | None]) -> dict[str, Any]:
    """``pod`` as the merge patch leaves it, then its gate removed (generation 2)."""
    annotations = {k: v for k, v in {**pod["metadata"]["annotations"], **patch}.items() if v is not None}
    return {**pod, "metadata": {**pod["metadata"], "annotations": annotations, "generation": 2}}


@pytest.mark.parametrize("stamp", ["webhook", "unsigned", "none"])
def test_early_binding_binds_what_the_authority_trusts_on_a_never_changed_pod(stamp: str) -> None:
    pod = make_pod("1")
    if stamp == "webhook":
        stamped_at_admission(pod)
    elif stamp == "unsigned":
        pod["metadata"]["annotations"].update(originals_from_spec_annotations(pod))
    patch = early_binding(pod, RING)
    assert patch is not None and str(patch[ORIGINALS_MAC]).startswith(f"v1.p.{NEW}.")
    if stamp == "none":  # no originals (the webhook down): recorded from the spec, as step 1 does
        assert {k: v for k, v in patch.items() if k != ORIGINALS_MAC} == originals_from_spec_annotations(pod)
    else:
        assert set(patch) == {ORIGINALS_MAC}
    result = check(bound_after(pod, patch))
    assert result.trust is Trust.TRUSTED and result.scope == "pod"


def test_early_binding_binds_nothing_the_authority_does_not_trust_as_it_is() -> None:
    forged = make_pod("1", annotations={CPU: "16", "workload-resizer.io/original-cpu-limit.app": "16"})
    sibling = make_pod(
        "1",
        name="web-7d9f-zzzzz",
        uid="other-uid",
        annotations=dict(stamped_at_admission(make_pod("16"))["metadata"]["annotations"]),
    )
    for rejected in (forged, sibling):  # re-captured (and reported) by step 1 once the pod is bound
        assert check(rejected).trust is Trust.RECAPTURE and early_binding(rejected, RING) is None
    assert early_binding(stamped_at_admission(make_pod("1", generation=2)), RING) is None, "changed already"
    assert early_binding(stamped_by_reconciler(make_pod("1")), RING) is None, "bound already"
    assert early_binding(stamped_at_admission(make_pod("1")), KeyRing({})) is None, "no key to sign with"


def test_early_binding_of_a_sized_record_is_step_1s() -> None:
    from resizer import sized_stamp

    review = make_pod("1")
    review["metadata"].pop("name")
    originals = originals_from_spec_annotations(review)
    sized = {k: v.replace("1", "800m") for k, v in originals.items()}
    pod = make_pod("800m", annotations=sized_stamp(review, "shop", RING, originals, "n4", sized))
    assert check(pod).scope == "sized"
    patch = early_binding(pod, RING)
    assert patch is not None and str(patch[ORIGINALS_MAC]).startswith("v1.p.")
    bound = bound_after(pod, patch)
    assert check(bound).trust is Trust.TRUSTED and bound["metadata"]["annotations"][CPU] == "1"
