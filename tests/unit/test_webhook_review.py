"""app.review.handle_review: one AdmissionReview scenario per test."""

from __future__ import annotations

import base64
import copy
from typing import Any

import orjson
import pytest

import resizer
from app import review as review_mod
from app.review import Answer, annotation_path, build_patch, encode, handle_review, json_pointer_escape, originals_of
from devkit.jsonpatch import apply_patch

ORIG = "workload-resizer.io/original-"
APPLIED = "workload-resizer.io/applied-"


# -- builders ---------------------------------------------------------------------------
def container(name: str = "app", requests: dict | None = None, limits: dict | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "example.com/app:1", "resources": resources}


def pod(
    containers: list[dict] | None = None,
    annotations: dict[str, str] | None = None,
    owner: dict | None | str = "rs",
    name: str = "",
    generate_name: str = "web-7d9f-",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": "shop"}
    if name:
        meta["name"] = name
    if generate_name:
        meta["generateName"] = generate_name
    if annotations is not None:
        meta["annotations"] = annotations
    if owner == "rs":
        owner = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "u1", "controller": True}
    if owner:
        meta["ownerReferences"] = [owner]
    if containers is None:
        containers = [container("app", {"cpu": "500m", "memory": "256Mi"}, {"cpu": "1", "memory": "512Mi"})]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": containers}}


def review(
    obj: Any, operation: str = "CREATE", uid: str = "uid-1", resource: str = "pods", **extra: Any
) -> dict[str, Any]:
    req = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": resource},
        "namespace": "shop",
        "operation": operation,
        "object": obj,
    }
    req.update(extra)
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def call(r: Any) -> tuple[int, dict[str, Any], Answer]:
    answer = handle_review(orjson.dumps(r))
    status, body = answer.status, encode(answer)
    return status, orjson.loads(body), answer


def patch_of(resp: dict[str, Any]) -> list[dict[str, Any]] | None:
    r = resp["response"]
    if "patch" not in r:
        assert "patchType" not in r
        return None
    assert r["patchType"] == "JSONPatch"
    return orjson.loads(base64.b64decode(r["patch"]))


def mutated(p: dict[str, Any]) -> dict[str, Any]:
    status, resp, _ = call(review(p))
    assert status == 200
    ops = patch_of(resp)
    return apply_patch(p, ops) if ops else p


def owned(annotations: dict[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (annotations or {}).items() if resizer.is_controller_owned_key(k)}


# -- eligible pods ----------------------------------------------------------------------
def test_eligible_pod_without_annotations_gets_map_and_every_original():
    p = pod()
    status, resp, answer = call(review(p))
    assert status == 200
    assert resp["apiVersion"] == "admission.k8s.io/v1" and resp["kind"] == "AdmissionReview"
    assert resp["response"]["uid"] == "uid-1" and resp["response"]["allowed"] is True
    ops = patch_of(resp)
    assert ops[0] == {"op": "add", "path": "/metadata/annotations", "value": {}}
    after = apply_patch(p, ops)
    assert after["metadata"]["annotations"] == resizer.originals_from_spec_annotations(p)
    assert answer.decision == "patched" and answer.reason == "Eligible"
    assert answer.owner == "ReplicaSet/web-7d9f" and answer.pod == "web-7d9f-" and answer.namespace == "shop"
    assert answer.originals == resizer.originals_from_spec_annotations(p)


def test_eligible_pod_keeps_unrelated_annotations():
    p = pod(annotations={"prometheus.io/scrape": "true", "workload-resizer.io/skip": "false"})
    after = mutated(p)
    ann = after["metadata"]["annotations"]
    assert ann["prometheus.io/scrape"] == "true" and ann["workload-resizer.io/skip"] == "false"
    assert owned(ann) == resizer.originals_from_spec_annotations(p)


def test_existing_annotation_map_is_not_recreated():
    ops = patch_of(call(review(pod(annotations={"a": "b"})))[1])
    assert all(op["path"] != "/metadata/annotations" for op in ops)


def test_null_annotation_map_is_created():
    p = pod()
    p["metadata"]["annotations"] = None
    ops = patch_of(call(review(p))[1])
    assert ops[0] == {"op": "add", "path": "/metadata/annotations", "value": {}}


def test_forged_original_annotations_are_overwritten_from_the_spec():
    want = resizer.originals_from_spec_annotations(pod())
    forged = {k: "999" for k in want}
    after = mutated(pod(annotations=dict(forged)))
    assert owned(after["metadata"]["annotations"]) == want


def test_stale_original_and_applied_annotations_are_removed():
    stale = {
        ORIG + "cpu.gone": "2",
        ORIG + "memory-limit.gone": "1Gi",
        APPLIED + "instance-type": "n4",
        APPLIED + "at": "2024-01-01T00:00:00Z",
        "keep.me/too": "yes",
    }
    p = pod(annotations=stale)
    status, resp, answer = call(review(p))
    ops = patch_of(resp)
    removed = {op["path"] for op in ops if op["op"] == "remove"}
    assert removed == {annotation_path(k) for k in stale if k != "keep.me/too"}
    after = apply_patch(p, ops)
    assert owned(after["metadata"]["annotations"]) == resizer.originals_from_spec_annotations(p)
    assert after["metadata"]["annotations"]["keep.me/too"] == "yes"
    assert answer.decision == "patched"


def test_pod_without_resources_only_loses_forged_keys():
    p = pod(containers=[container("app")], annotations={APPLIED + "instance-type": "c3"})
    after = mutated(p)
    assert owned(after["metadata"]["annotations"]) == {}


def test_pod_without_resources_or_annotations_needs_no_patch():
    status, resp, answer = call(review(pod(containers=[container("app")])))
    assert patch_of(resp) is None
    assert answer.decision == "skipped" and answer.reason == "NothingToStamp"


def test_reinvocation_on_stamped_pod_yields_no_patch():
    once = mutated(pod())
    status, resp, answer = call(review(once))
    assert status == 200 and resp["response"]["allowed"] is True
    assert patch_of(resp) is None
    assert answer.decision == "skipped" and answer.reason == "AlreadyStamped"


def test_reinvocation_after_sidecar_injection_adds_only_the_sidecar():
    once = mutated(pod())
    once["spec"]["containers"].append(container("sidecar", {"cpu": "100m"}))
    ops = patch_of(call(review(once))[1])
    assert ops and all(op["op"] == "add" and "sidecar" in op["path"] for op in ops)
    assert owned(apply_patch(once, ops)["metadata"]["annotations"]) == resizer.originals_from_spec_annotations(once)


def test_many_containers_are_all_stamped():
    cs = [container(f"c{i}", {"cpu": f"{i + 1}m", "memory": f"{i + 1}Mi"}) for i in range(256)]
    p = pod(containers=cs)
    after = mutated(p)
    assert owned(after["metadata"]["annotations"]) == resizer.originals_from_spec_annotations(p)
    assert len(owned(after["metadata"]["annotations"])) == 512


def test_too_many_containers_are_admitted_unstamped_with_forged_keys_stripped():
    """Bounded work per review: originals of thousands of containers cost tens of ms on
    the single event loop and would not fit the annotation limit anyway."""
    cs = [container(f"c{i}", {"cpu": "1m"}) for i in range(review_mod.MAX_STAMPED_CONTAINERS + 1)]
    p = pod(containers=cs, annotations={ORIG + "cpu.c0": "16"})
    status, resp, answer = call(review(p))
    assert status == 200 and resp["response"]["allowed"] is True
    assert [op["op"] for op in patch_of(resp)] == ["remove"]
    assert answer.reason == "TooManyContainers"


@pytest.mark.parametrize("shape", ["containers", "sidecar"])
def test_containers_that_would_share_original_keys_are_admitted_unstamped_with_forged_keys_stripped(shape):
    """The apiserver validates names only after mutation: a review may name two resizable
    containers alike. One set of originals for both would size one from the other's values:
    the pod is admitted as sent, minus the product's keys a client set."""
    small, large = container("app", {"cpu": "100m"}, {"cpu": "100m"}), container("app", {"cpu": "4"}, {"cpu": "4"})
    p = pod(
        [small, large] if shape == "containers" else [small],
        annotations={ORIG + "cpu.app": "16", resizer.ORIGINALS_MAC: "v1.a.k.forged", "keep": "me"},
    )
    if shape == "sidecar":
        p["spec"]["initContainers"] = [{**large, "restartPolicy": "Always"}]
    status, resp, answer = call(review(p))
    assert status == 200 and resp["response"]["allowed"] is True
    after = apply_patch(p, patch_of(resp))
    assert after["metadata"]["annotations"] == {"keep": "me"}
    assert after["spec"] == p["spec"]
    assert (answer.decision, answer.reason) == ("skipped", "CollidingContainerKeys")
    assert "'app'" in answer.error and answer.originals == {}
    clean = pod([small, large] if shape == "containers" else [small])
    if shape == "sidecar":
        clean["spec"]["initContainers"] = [{**large, "restartPolicy": "Always"}]
    status, resp, answer = call(review(clean))
    assert status == 200 and "patch" not in resp["response"] and answer.reason == "CollidingContainerKeys"


# -- pods left alone --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("p", "reason"),
    [
        (pod(owner=None), "NoController"),
        (pod(annotations={"workload-resizer.io/skip": "true"}), "SkipAnnotation"),
        (pod(annotations={"kubernetes.io/config.mirror": "abc"}), "MirrorPod"),
        (
            pod(owner={"apiVersion": "v1", "kind": "ReplicationController", "name": "rc", "controller": True}),
            "UnsupportedOwnerKind",
        ),
    ],
    ids=["bare-pod", "skip-annotation", "mirror-pod", "unsupported-owner"],
)
def test_ineligible_pod_is_allowed_untouched(p, reason):
    status, resp, answer = call(review(p))
    assert status == 200 and resp["response"] == {"uid": "uid-1", "allowed": True}
    assert answer.decision == "skipped" and answer.reason == reason == resizer.eligibility(p).reason


@pytest.mark.parametrize(
    "p",
    [
        pod(owner=None, annotations={ORIG + "cpu.app": "16", "keep": "me"}),
        pod(annotations={"workload-resizer.io/skip": "true", ORIG + "cpu.app": "16", "keep": "me"}),
        pod(
            owner={"apiVersion": "v1", "kind": "ReplicationController", "name": "rc", "controller": True},
            annotations={ORIG + "cpu.app": "16", "keep": "me"},
        ),
    ],
    ids=["bare-pod", "skip-annotation", "unsupported-owner"],
)
def test_ineligible_pod_loses_forged_controller_keys_on_create(p):
    """A pod admitted ineligible may become eligible later (skip removed, owner edited):
    it must not keep a baseline its author chose."""
    p["metadata"]["annotations"].update({APPLIED + "instance-type": "n2d", resizer.ORIGINALS_MAC: "v1.a.k.x"})
    status, resp, answer = call(review(p))
    assert status == 200 and resp["response"]["allowed"] is True
    removed = {op["path"] for op in patch_of(resp) if op["op"] == "remove"}
    assert removed == {annotation_path(k) for k in p["metadata"]["annotations"] if resizer.is_controller_owned_key(k)}
    assert answer.decision == "skipped" and answer.stripped == 3


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_non_create_operation_is_allowed_without_patch(operation):
    obj = None if operation == "DELETE" else pod()
    status, resp, answer = call(review(obj, operation=operation))
    assert status == 200 and resp["response"] == {"uid": "uid-1", "allowed": True}
    assert answer.reason == "NotPodCreate"


def test_non_pod_resource_is_allowed_without_patch():
    status, resp, answer = call(review({"metadata": {"name": "x"}}, resource="configmaps"))
    assert status == 200 and patch_of(resp) is None and answer.reason == "NotPodCreate"


def test_pod_subresource_is_allowed_without_patch():
    status, resp, _ = call(review(pod(), subResource="ephemeralcontainers"))
    assert status == 200 and patch_of(resp) is None


def test_pod_without_metadata_is_allowed_without_patch():
    p = pod()
    del p["metadata"]
    status, resp, answer = call(review(p))
    assert status == 200 and patch_of(resp) is None and answer.reason == "NoMetadata"


def test_pod_name_is_preferred_over_generate_name_in_record():
    _, _, answer = call(review(pod(name="web-0", generate_name="web-")))
    assert answer.pod == "web-0"


# -- malformed requests -----------------------------------------------------------------
@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"not json",
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {',
        b"[]",
        b"42",
        b'"AdmissionReview"',
        b"null",
        b"\xff\xfe\x00garbage",
    ],
    ids=["empty", "text", "truncated", "array", "number", "string", "null", "binary"],
)
def test_body_that_is_not_a_json_object_is_400(body):
    answer = handle_review(body)
    status, out = answer.status, encode(answer)
    assert status == 400
    assert "error" in orjson.loads(out)
    assert answer.decision == "rejected"


@pytest.mark.parametrize(
    "mutate",
    [
        lambda r: r.update(apiVersion="admission.k8s.io/v1beta1"),
        lambda r: r.update(kind="AdmissionRequest"),
        lambda r: r.pop("apiVersion"),
        lambda r: r.pop("request"),
        lambda r: r.update(request="x"),
        lambda r: r["request"].pop("uid"),
        lambda r: r["request"].update(uid=""),
        lambda r: r["request"].update(uid=7),
        lambda r: r["request"].pop("object"),
        lambda r: r["request"].update(object=[1, 2]),
    ],
    ids=[
        "v1beta1",
        "wrong-kind",
        "no-apiversion",
        "no-request",
        "request-not-object",
        "no-uid",
        "empty-uid",
        "uid-not-string",
        "create-without-object",
        "object-not-object",
    ],
)
def test_review_missing_required_parts_is_400(mutate):
    r = review(pod())
    mutate(r)
    answer = handle_review(orjson.dumps(r))
    status, out = answer.status, encode(answer)
    assert status == 400
    assert orjson.loads(out)["code"] == 400


def test_bug_in_mutation_logic_still_allows_without_patch(monkeypatch):
    def boom(_pod):
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(resizer, "eligibility", boom)
    status, resp, answer = call(review(pod()))
    assert status == 200 and resp["response"] == {"uid": "uid-1", "allowed": True}
    assert answer.reason == "InternalError" and "simulated bug" in answer.error and bool(answer.stack)


def test_invalid_quantity_from_the_spec_still_allows_without_patch():
    status, resp, answer = call(review(pod(containers=[container("app", {"cpu": "lots"})])))
    assert status == 200 and resp["response"] == {"uid": "uid-1", "allowed": True}
    assert answer.reason == "InternalError"


# -- JSON pointer escaping --------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "token"),
    [("a/b", "a~1b"), ("a~b", "a~0b"), ("~/", "~0~1"), ("~1", "~01"), ("plain", "plain"), ("", "")],
)
def test_json_pointer_escape(key, token):
    assert json_pointer_escape(key) == token


def test_stale_key_with_tilde_and_slashes_is_removed_by_escaped_path():
    key = ORIG + "cpu.we~ird/x"
    p = pod(annotations={key: "1", "a~b/c": "keep"})
    ops = patch_of(call(review(p))[1])
    assert {"op": "remove", "path": "/metadata/annotations/workload-resizer.io~1original-cpu.we~0ird~1x"} in ops
    after = apply_patch(p, ops)
    assert key not in after["metadata"]["annotations"] and after["metadata"]["annotations"]["a~b/c"] == "keep"


def test_build_patch_with_nothing_to_do_is_empty():
    assert build_patch(None, {}) == []
    assert build_patch({"x": "y"}, {}) == []
    assert build_patch({"k": "v"}, {"k": "v"}) == []


# -- the originals memo -----------------------------------------------------------------
def test_originals_memo_matches_core_when_only_unkeyed_fields_differ():
    """The memo keys on containers' names and resources only: anything else in the pod
    (metadata, other container fields, volumes, init containers, ...) must not change the
    core's answer. If the core starts reading more of the pod, this fails: widen the key."""
    base = pod(
        containers=[
            container("app", {"cpu": "500m", "memory": "1Gi"}, {"cpu": "1"}),
            container("side", {"memory": "64Mi"}),
        ]
    )
    variant = copy.deepcopy(base)
    variant["metadata"].update(
        name="other", labels={"a": "b"}, annotations={ORIG + "cpu.app": "7", "workload-resizer.io/skip": "true"}
    )
    variant["spec"]["initContainers"] = [container("init", {"cpu": "2"}, {"cpu": "2"})]
    variant["spec"]["volumes"] = [{"name": "kube-api-access-abcde"}]
    variant["spec"]["nodeName"] = "node-1"
    variant["spec"]["containers"][0].update(image="other:2", env=[{"name": "A", "value": "1"}])
    variant["status"] = {"qosClass": "Burstable"}
    review_mod._originals_cache.clear()
    assert resizer.originals_from_spec_annotations(variant) == resizer.originals_from_spec_annotations(base)
    assert originals_of(base) == resizer.originals_from_spec_annotations(base)
    assert originals_of(variant) is originals_of(base)  # served from the memo


def test_originals_memo_misses_when_resources_differ():
    review_mod._originals_cache.clear()
    a = pod(containers=[container("app", {"cpu": "500m"})])
    b = pod(containers=[container("app", {"cpu": "250m"})])
    assert originals_of(a) != originals_of(b)
    assert originals_of(b) == resizer.originals_from_spec_annotations(b)


def test_originals_memo_misses_when_pod_level_resources_differ():
    review_mod._originals_cache.clear()
    a = pod(containers=[container("app", {"cpu": "500m"})])
    b = copy.deepcopy(a)
    b["spec"]["resources"] = {"requests": {"cpu": "1"}}
    assert originals_of(a) == resizer.originals_from_spec_annotations(a)
    assert originals_of(b) == resizer.originals_from_spec_annotations(b)
    assert originals_of(b)["workload-resizer.io/original-pod-cpu"] == "1"


def test_originals_memo_skips_very_large_pods():
    review_mod._originals_cache.clear()
    big = pod(containers=[container(f"c{i}", {"cpu": "1m"}) for i in range(200)])
    assert originals_of(big) == resizer.originals_from_spec_annotations(big)
    assert len(review_mod._originals_cache) == 0


def test_fresh_patch_memo_equals_the_generic_patch():
    from app.review import fresh_patch

    review_mod._fresh_patch_cache.clear()
    originals = resizer.originals_from_spec_annotations(pod())
    for create_map in (True, False):
        want = build_patch(None if create_map else {"a": "b"}, originals)
        got = orjson.loads(base64.b64decode(fresh_patch(originals, create_map, b"memo")))
        assert got == want
        assert fresh_patch(originals, create_map, b"memo") is fresh_patch(originals, create_map, b"memo")


def test_second_replica_gets_the_same_patch_as_the_first():
    first = patch_of(call(review(pod(generate_name="web-7d9f-")))[1])
    second = patch_of(call(review(pod(generate_name="web-7d9f-", annotations={"x": "y"}), uid="uid-2"))[1])
    third = patch_of(call(review(pod(generate_name="web-7d9f-"), uid="uid-3"))[1])
    assert first == third and first[0]["path"] == "/metadata/annotations"
    assert second == first[1:]


# -- signed originals -------------------------------------------------------------------
KEYS = resizer.KeyRing({"k1": b"k" * 32, "k2": b"s" * 32})


def call_signed(r: Any, keyring: resizer.KeyRing = KEYS) -> tuple[int, dict[str, Any], Answer]:
    answer = handle_review(orjson.dumps(r), keyring)
    status, body = answer.status, encode(answer)
    return status, orjson.loads(body), answer


def admitted(p: dict[str, Any], resp: dict[str, Any]) -> dict[str, Any]:
    """The pod as the apiserver stores it after applying the webhook's patch."""
    ops = patch_of(resp) or []
    return apply_patch(p, ops) if ops else copy.deepcopy(p)


def test_eligible_pod_gets_an_admission_scope_mac_with_the_newest_key():
    p = pod()
    _, resp, answer = call_signed(review(p))
    stored = admitted(p, resp)
    mac = stored["metadata"]["annotations"][resizer.ORIGINALS_MAC]
    assert resizer.key_id_of(mac) == "k2"
    stored["metadata"].update(name="web-7d9f-abcde", uid="pod-uid", generation=1)
    check = resizer.check_originals(stored, KEYS, resizer.originals_from_spec_annotations(stored))
    assert check.trust is resizer.Trust.TRUSTED and check.scope == "admission"


def test_forged_mac_and_originals_are_replaced_not_kept():
    p = pod(annotations={ORIG + "cpu.app": "16", resizer.ORIGINALS_MAC: "v1.a.k2.forged"})
    _, resp, _ = call_signed(review(p))
    stored = admitted(p, resp)["metadata"]["annotations"]
    assert stored[ORIG + "cpu.app"] == "500m"
    assert stored[resizer.ORIGINALS_MAC] != "v1.a.k2.forged"


def test_a_made_up_review_obtains_only_an_admission_scope_mac_over_the_spec_it_sent():
    """The signing oracle: anyone who can reach the webhook can post a review of their own
    making (any namespace, name, uid, owner, values). What comes back is what the apiserver's
    own review would get: originals computed from the spec sent (never from annotations sent)
    and an admission-scope MAC (no uid bound), never a pod-scope one."""
    victim = pod(
        name="victim",
        containers=[container("app", {"cpu": "64", "memory": "256Gi"})],
        annotations={ORIG + "cpu.app": "128", resizer.ORIGINALS_MAC: "v1.p.k2.forged"},
    )
    victim["metadata"].update(uid="victim-uid", generation=1)
    _, resp, _ = call_signed(review(victim))
    stored = admitted(victim, resp)
    notes = stored["metadata"]["annotations"]
    assert owned(notes) == {
        **resizer.originals_from_spec_annotations(victim),
        resizer.ORIGINALS_MAC: notes[resizer.ORIGINALS_MAC],
    }
    assert notes[ORIG + "cpu.app"] == "64"
    assert notes[resizer.ORIGINALS_MAC].startswith("v1.a.k2.")  # admission scope, newest key
    pod_scope = resizer.sign_originals(
        KEYS, resizer.original_annotations(stored), resizer.PodIdentity.of(stored), "pod"
    )
    assert notes[resizer.ORIGINALS_MAC] != pod_scope
    check = resizer.check_originals(stored, KEYS, resizer.originals_from_spec_annotations(stored))
    assert check.scope == "admission"


def test_replicas_of_one_owner_share_the_memoised_patch_and_other_owners_do_not():
    a1 = patch_of(call_signed(review(pod()))[1])
    a2 = patch_of(call_signed(review(pod(), uid="uid-2"))[1])
    other_owner = pod(
        owner={"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "u2", "controller": True}
    )
    b = patch_of(call_signed(review(other_owner))[1])
    mac_of = {op["path"]: op.get("value") for op in a1}
    assert a1 == a2
    assert {op["path"]: op.get("value") for op in b} != mac_of


def test_no_keyring_stamps_unsigned_originals():
    _, resp, _ = call_signed(review(pod()), resizer.EMPTY_KEYRING)
    assert not any(op["path"].endswith("originals-mac") for op in patch_of(resp))


def test_annotations_over_the_apiserver_limit_are_answered_without_building_a_patch():
    """The apiserver rejects such a pod after admission anyway; a 52k-key strip patch would
    cost as much memory as the input many times over."""
    ann = {f"{ORIG}cpu.f{i}": "16" for i in range(resizer.TOTAL_ANNOTATION_SIZE_LIMIT // 30)}
    status, resp, answer = call(review(pod(annotations=ann)))
    assert status == 200 and patch_of(resp) is None and answer.reason == "AnnotationsTooLarge"


def test_annotations_whose_text_grows_past_the_limit_are_counted_exactly():
    """Numbers as annotation values (the apiserver refuses them later) are counted as their str():
    1e15 is 18 bytes there, 4 in the review. Here the review stays under the limit but the
    annotations as counted do not, so the bound that spares the count must not apply."""
    ann: Any = {f"a{i:05}": 1e15 for i in range(11_000)}
    body = orjson.dumps(review(pod(annotations=ann))).replace(b"1000000000000000.0", b"1e15")
    assert len(body) < resizer.TOTAL_ANNOTATION_SIZE_LIMIT
    answer = handle_review(body)
    assert answer.status == 200 and answer.patch is None and answer.reason == "AnnotationsTooLarge"


def test_pods_in_a_namespace_the_scope_excludes_are_allowed_untouched():
    from resizer.scope import namespace_scope

    scope = namespace_scope("wr-system", ["shop"])
    answer = handle_review(orjson.dumps(review(pod())), scope=scope)
    status, body = answer.status, encode(answer)
    response = orjson.loads(body)["response"]
    assert status == 200 and response["allowed"] is True and "patch" not in response
    assert (answer.decision, answer.reason, answer.namespace) == ("skipped", "NamespaceExcluded", "shop")
    answer = handle_review(orjson.dumps(review(pod())), scope=namespace_scope("wr-system", ["other"]))
    status, body = answer.status, encode(answer)
    assert answer.decision == "patched"


def test_forged_controller_keys_are_stripped_even_in_an_excluded_namespace():
    from resizer.scope import namespace_scope

    p = pod(annotations={ORIG + "cpu.app": "16", resizer.RESIZE_STATE: "forged"})
    answer = handle_review(orjson.dumps(review(p)), scope=namespace_scope("wr-system", ["shop"]))
    body = encode(answer)
    stored = admitted(p, orjson.loads(body))["metadata"]["annotations"]
    assert answer.reason == "NamespaceExcluded"
    assert ORIG + "cpu.app" not in stored and resizer.RESIZE_STATE not in stored
