"""Fuzzing the webhook with malformed and random AdmissionReviews: never a 5xx, never a crash."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import httpx
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import resizer
from app.metrics import Metrics
from app.review import encode, handle_review
from app.server import create_app
from devkit.jsonpatch import apply_patch

REVIEW_2C = (Path(__file__).resolve().parents[2] / "bench" / "data" / "review-2c.json").read_bytes()
FUZZ = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

json_scalars = (
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text(max_size=30)
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=20), children, max_size=5),
    max_leaves=30,
)


def check_response(status: int, body: bytes) -> dict[str, Any]:
    assert status in (200, 400, 413), status
    out = orjson.loads(body)
    assert isinstance(out, dict)
    if status == 200:
        assert out["response"]["allowed"] is True
    else:
        assert out["code"] == status and out["error"]
    return out


@FUZZ
@given(st.binary(max_size=2000))
def test_random_bytes_never_crash(body):
    answer = handle_review(body)
    status, out = answer.status, encode(answer)
    check_response(status, out)


@FUZZ
@given(st.integers(0, len(REVIEW_2C) - 2))
def test_truncated_review_is_400(cut):
    answer = handle_review(REVIEW_2C[:cut])
    status, out = answer.status, encode(answer)
    assert status == 400
    check_response(status, out)


@FUZZ
@given(json_values)
def test_random_json_value_never_crashes(value):
    answer = handle_review(orjson.dumps(value))
    status, out = answer.status, encode(answer)
    check_response(status, out)


@FUZZ
@given(json_values, st.sampled_from(["request", "object", "metadata", "spec", "containers", "annotations"]))
def test_random_json_in_place_of_a_review_part_never_crashes(value, where):
    review = orjson.loads(REVIEW_2C)
    obj = review["request"]["object"]
    target = {
        "request": (review, "request"),
        "object": (review["request"], "object"),
        "metadata": (obj, "metadata"),
        "spec": (obj, "spec"),
        "containers": (obj["spec"], "containers"),
        "annotations": (obj["metadata"], "annotations"),
    }[where]
    target[0][target[1]] = value
    answer = handle_review(orjson.dumps(review))
    status, out = answer.status, encode(answer)
    check_response(status, out)


names = st.text(min_size=1, max_size=70)
quantities = st.sampled_from(["100m", "1", "0.5", "2Gi", "512Mi", "1e3", "250M", "1.5", "3k", "0"]) | st.text(
    max_size=8
)
resource_lists = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), quantities, max_size=3)
containers = st.builds(
    lambda name, req, lim: {"name": name, "resources": {"requests": req, "limits": lim}},
    names,
    resource_lists,
    resource_lists,
)
annotation_keys = st.sampled_from(
    [
        "workload-resizer.io/original-cpu.app",
        "workload-resizer.io/original-memory-limit.x",
        "workload-resizer.io/applied-instance-type",
        "workload-resizer.io/applied-at",
        "workload-resizer.io/skip",
        "kubernetes.io/config.mirror",
        "a/b~c",
        "plain",
    ]
) | st.text(max_size=40)
owners = st.sampled_from(
    [
        None,
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": True},
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "sts", "controller": True},
        {"apiVersion": "batch/v1", "kind": "Job", "name": "job", "controller": True},
        {"apiVersion": "v1", "kind": "Node", "name": "node", "controller": True},
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "controller": False},
    ]
)


@st.composite
def pods(draw) -> dict[str, Any]:
    meta: dict[str, Any] = {"generateName": draw(names)}
    if draw(st.booleans()):
        meta["annotations"] = draw(st.dictionaries(annotation_keys, st.text(max_size=20), max_size=6))
    owner = draw(owners)
    if owner:
        meta["ownerReferences"] = [owner]
    return {"metadata": meta, "spec": {"containers": draw(st.lists(containers, max_size=6))}}


def envelope(pod: Any, uid: str = "u") -> bytes:
    return orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "operation": "CREATE",
                "namespace": "ns",
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "object": pod,
            },
        }
    )


@FUZZ
@given(pods(), names)
def test_random_pod_is_allowed_and_patch_yields_exactly_the_core_originals(pod, uid):
    answer = handle_review(envelope(pod, uid))
    status, out = answer.status, encode(answer)
    resp = check_response(status, out)["response"]
    assert status == 200 and resp["uid"] == uid
    if "patch" not in resp:
        return
    after = apply_patch(pod, orjson.loads(base64.b64decode(resp["patch"])))
    owned = {k: v for k, v in after["metadata"]["annotations"].items() if resizer.is_controller_owned_key(k)}
    # (CollidingContainerKeys: two containers would share a key, e.g. one name twice, which the
    # apiserver refuses only after admission: nothing is stamped.)
    stamped = resizer.eligibility(pod).eligible and answer.reason not in (
        "AnnotationsTooLarge",
        "CollidingContainerKeys",
    )
    # eligible: exactly the core's originals; otherwise every client-supplied controller key is gone
    assert owned == (resizer.originals_from_spec_annotations(pod) if stamped else {})
    # and reinvoking on the result changes nothing
    again = handle_review(envelope(after, uid))
    out2 = encode(again)
    assert "patch" not in orjson.loads(out2)["response"]


def test_huge_annotations_are_handled():
    review = orjson.loads(REVIEW_2C)
    ann = review["request"]["object"]["metadata"]["annotations"]
    ann["big"] = "x" * 1_000_000
    for i in range(2000):
        ann[f"workload-resizer.io/original-cpu.forged-{i}"] = "1"
    answer = handle_review(orjson.dumps(review))
    status, out = answer.status, encode(answer)
    resp = check_response(status, out)["response"]
    # Over the apiserver's annotation size limit (its own 1 MB value): the apiserver rejects
    # the pod after admission whatever we do, so it is answered at once, without a patch.
    assert resp["allowed"] is True and "patch" not in resp
    assert (answer.decision, answer.reason) == ("skipped", "AnnotationsTooLarge")


def test_unicode_names_are_handled():
    pod = {
        "metadata": {
            "name": "pöd-🚀",
            "namespace": "nämespace",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs-ü", "controller": True}],
            "annotations": {"ключ/значение": "値", "workload-resizer.io/original-cpu.ü": "1"},
        },
        "spec": {
            "containers": [
                {"name": "cöntainer", "resources": {"requests": {"cpu": "1"}}},
                {"name": "app", "resources": {"requests": {"cpu": "1"}}},
            ]
        },
    }
    answer = handle_review(envelope(pod, "üid-✓"))
    status, out = answer.status, encode(answer)
    resp = check_response(status, out)["response"]
    assert status == 200 and resp["uid"] == "üid-✓"


def test_lone_surrogate_uid_is_rejected_not_crashed():
    body = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"\\ud800","operation":"CREATE","object":{}}}'
    answer = handle_review(body)
    status, out = answer.status, encode(answer)
    check_response(status, out)


def test_deeply_nested_json_is_400():
    answer = handle_review(b"[" * 10_000 + b"]" * 10_000)
    status, out = answer.status, encode(answer)
    assert status == 400
    check_response(status, out)


def test_more_brackets_than_any_pod_has_are_not_parsed():
    """100,000 brackets: answered without parsing (no uid to echo: 503, which failurePolicy
    Ignore admits), not a 400 from the parser's depth limit."""
    answer = handle_review(b"[" * 100_000 + b"]" * 100_000)
    status = answer.status
    assert status == 503 and answer.reason == "Overloaded"
    assert "more than 20000 JSON objects/arrays" in answer.error


@settings(max_examples=40, deadline=None, database=None)
@given(st.binary(max_size=500) | json_values.map(orjson.dumps))
def test_random_bodies_over_http_never_5xx(body):
    app = create_app(Metrics(process_metrics=False), lambda: True, 4 << 20)

    async def go():
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://w") as c:
            return await c.post("/mutate", content=body)

    r = asyncio.run(go())
    assert r.status_code < 500
