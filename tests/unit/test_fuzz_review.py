"""Hostile AdmissionReviews beyond tests/unit/test_webhook_fuzz.py: very wide pods, unicode
and maximal container names, floods of foreign annotations, and forged original-*
annotations (which must never change what the pod is sized from).

WR_FUZZ_EXAMPLES sets hypothesis' examples per property (default 200).
"""

from __future__ import annotations

import base64
import copy
import os
import re
import uuid
from typing import Any

import orjson
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import resizer
from app.review import Answer, encode, handle_review
from devkit.jsonpatch import apply_patch
from tests.unit.test_webhook_fuzz import check_response, envelope

EXAMPLES = int(os.environ.get("WR_FUZZ_EXAMPLES", "200"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}
# The apiserver's limits (k8s.io/apimachinery validation): a qualified name part of at
# most 63 characters, and all annotations of an object together at most 256 KiB.
QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
TOTAL_ANNOTATION_LIMIT = 256 * 1024


def review(pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], Answer]:
    """(response, patched pod, answer) for a pod CREATE."""
    answer = handle_review(envelope(pod, str(uuid.uuid4())))
    status, out = answer.status, encode(answer)
    response = check_response(status, out)["response"]
    assert status == 200 and response["allowed"] is True
    ops = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return response, apply_patch(pod, ops), answer


def owned(pod: dict[str, Any]) -> dict[str, str]:
    return {
        k: v
        for k, v in ((pod.get("metadata") or {}).get("annotations") or {}).items()
        if resizer.is_controller_owned_key(k)
    }


def assert_apiserver_would_accept_annotations(before: dict[str, Any], after: dict[str, Any]) -> None:
    """Every key the webhook added is a valid annotation key; it never pushes a pod over the size limit."""
    old = (before.get("metadata") or {}).get("annotations") or {}
    new = (after.get("metadata") or {}).get("annotations") or {}
    for key in set(new) - set(old):
        prefix, _, name = key.partition("/")
        assert prefix == "workload-resizer.io" and len(name) <= 63 and QUALIFIED_NAME.fullmatch(name), key
    size = lambda a: sum(len(k.encode()) + len(v.encode()) for k, v in a.items())  # noqa: E731
    if size(old) <= TOTAL_ANNOTATION_LIMIT:
        assert size(new) <= TOTAL_ANNOTATION_LIMIT, (
            f"the webhook's stamp makes the pod invalid: annotations {size(old)} -> {size(new)} bytes"
        )


def wide_pod(containers: int, name: str = "c{i}") -> dict[str, Any]:
    return {
        "metadata": {"generateName": "wide-", "ownerReferences": [OWNER]},
        "spec": {
            "containers": [
                {
                    "name": name.format(i=i),
                    "resources": {
                        "requests": {"cpu": f"{i + 1}m", "memory": f"{i + 1}Mi"},
                        "limits": {"cpu": f"{2 * i + 2}m", "memory": f"{i + 1}Mi"},
                    },
                }
                for i in range(containers)
            ]
        },
    }


# ----------------------------------------------------------------------------- wide pods


def test_a_pod_at_the_container_cap_is_stamped_exactly() -> None:
    from app.review import MAX_STAMPED_CONTAINERS

    pod = wide_pod(MAX_STAMPED_CONTAINERS)
    response, after, answer = review(pod)
    assert answer.decision == "patched"
    assert owned(after) == resizer.originals_from_spec_annotations(pod)
    assert len(owned(after)) == 4 * MAX_STAMPED_CONTAINERS
    assert_apiserver_would_accept_annotations(pod, after)
    # and reinvocation on the stamped pod is a no-op
    assert "patch" not in review(after)[0]


def test_a_1000_container_pod_is_admitted_unstamped_with_forged_keys_stripped() -> None:
    pod = wide_pod(1000)
    pod["metadata"]["annotations"] = {resizer.original_key("c0", "cpu", "request"): "16"}
    response, after, answer = review(pod)
    assert (answer.decision, answer.reason) == ("skipped", "TooManyContainers")
    assert owned(after) == {}
    assert_apiserver_would_accept_annotations(pod, after)


def test_stamping_never_pushes_a_pod_over_the_annotation_size_limit() -> None:
    from app.review import MAX_STAMPED_CONTAINERS

    # ~89 KB of originals for the widest pod stamped, on a pod with ~206 KB of its own annotations.
    pod = wide_pod(MAX_STAMPED_CONTAINERS, name="c{i:04d}-" + "x" * 57)
    pod["metadata"]["annotations"] = {"example.com/blob": "x" * (TOTAL_ANNOTATION_LIMIT - 50_000)}
    assert sum(len(k) + len(v) for k, v in resizer.originals_from_spec_annotations(pod).items()) > 50_000
    _, after, answer = review(pod)
    assert (answer.decision, answer.reason) == ("skipped", "AnnotationsTooLarge") and owned(after) == {}
    assert_apiserver_would_accept_annotations(pod, after)


def test_stamping_a_pod_whose_own_annotations_are_near_the_limit() -> None:
    pod = wide_pod(1)
    pod["metadata"]["annotations"] = {"example.com/blob": "x" * (TOTAL_ANNOTATION_LIMIT - 100)}
    _, after, _ = review(pod)
    assert_apiserver_would_accept_annotations(pod, after)


def test_a_flood_of_foreign_annotations_is_left_alone() -> None:
    pod = wide_pod(3)
    # Many, odd, but together within the apiserver's 256 KiB limit (over it, see above).
    foreign = {f"example.com/k{i}-{'ü' * (i % 7)}": "v" * (i % 50) for i in range(3_000)}
    foreign["x" * 253 + "/" + "y" * 63] = "long key"
    pod["metadata"]["annotations"] = dict(foreign)
    response, after, _ = review(pod)
    ops = orjson.loads(base64.b64decode(response["patch"]))
    assert all(op["path"].startswith("/metadata/annotations/workload-resizer.io~1") for op in ops)
    assert {k: v for k, v in after["metadata"]["annotations"].items() if k in foreign} == foreign


# ----------------------------------------------------------------------------- names

label_names = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
any_names = st.text(min_size=1, max_size=80) | label_names


@FUZZ
@given(st.lists(any_names, min_size=1, max_size=8, unique=True))
def test_any_container_names_give_an_allowed_pod_and_only_valid_annotation_keys(names: list[str]) -> None:
    pod = {
        "metadata": {"name": "pöd-🚀", "ownerReferences": [OWNER]},
        "spec": {"containers": [{"name": n, "resources": {"requests": {"cpu": "100m"}}} for n in names]},
    }
    response, after, answer = review(pod)
    if "patch" in response:
        assert owned(after) == resizer.originals_from_spec_annotations(pod)
    assert_apiserver_would_accept_annotations(pod, after)


# ----------------------------------------------------------------------------- forged originals

millicores = st.integers(1, 64_000)
mebibytes = st.integers(1, 256 * 1024)


@st.composite
def authored_pods(draw) -> dict[str, Any]:
    """An eligible pod as its author wrote it: valid names, valid requests (and maybe limits)."""
    names = draw(st.lists(label_names, min_size=1, max_size=4, unique=True))
    containers = []
    for name in names:
        cpu, mem = draw(millicores), draw(mebibytes)
        resources: dict[str, Any] = {"requests": {"cpu": f"{cpu}m", "memory": f"{mem}Mi"}}
        shape = draw(st.sampled_from(["requests", "guaranteed", "burstable-limits"]))
        if shape == "guaranteed":
            resources["limits"] = dict(resources["requests"])
        elif shape == "burstable-limits":
            resources["limits"] = {"cpu": f"{cpu * draw(st.integers(2, 4))}m"}
        containers.append({"name": name, "resources": resources})
    return {"metadata": {"generateName": "app-", "ownerReferences": [OWNER]}, "spec": {"containers": containers}}


forged_values = (
    st.integers(1, 10**7).map(lambda m: f"{m}m") | st.sampled_from(["1000", "64", "1Ti", "1e6"]) | st.text(max_size=12)
)


@st.composite
def forgeries(draw, pod: dict[str, Any]) -> dict[str, str]:
    """original-* (and applied-*) annotations a tenant could write into the manifest."""
    keys = [
        resizer.original_key(c["name"], r, k)
        for c in pod["spec"]["containers"]
        for r in ("cpu", "memory")
        for k in ("request", "limit")
    ]
    keys += [resizer.APPLIED_INSTANCE_TYPE, "workload-resizer.io/original-cpu.not-a-container"]
    chosen = draw(st.lists(st.sampled_from(keys), min_size=1, unique=True))
    return {k: draw(forged_values) for k in chosen}


def sized(pod: dict[str, Any], node_type: str) -> resizer.ResizePlan:
    config = resizer.load_config(resizer.SAMPLE_CONFIG)
    return resizer.plan_resize(pod, resizer.resolve_policy(config, pod), node_type)


@FUZZ
@given(st.data())
def test_forged_originals_never_change_what_a_pod_is_sized_from(data: st.DataObject) -> None:
    authored = data.draw(authored_pods())
    forged = copy.deepcopy(authored)
    forged["metadata"]["annotations"] = data.draw(forgeries(authored))
    _, admitted, _ = review(forged)
    _, honest, _ = review(authored)
    # The webhook replaced every forged value: the originals are exactly the author's spec.
    assert owned(admitted) == resizer.originals_from_spec_annotations(authored) == owned(honest)
    node_type = data.draw(st.sampled_from(["n2d", "n4", "c3"]))
    plan, honest_plan = sized(admitted, node_type), sized(honest, node_type)
    assert plan.patch == honest_plan.patch and plan.changes == honest_plan.changes
    # Every node type of the sample config is at least as fast as the baseline: no request
    # ever ends above what the author wrote (unless the author wrote less than the min bound).
    bounds = {
        "cpu": resizer.to_millicores(resizer.parse_quantity("50m")),
        "memory": resizer.to_bytes(resizer.parse_quantity("64Mi")),
    }
    for change in plan.changes:
        assert change.desired_request <= max(change.original_request, bounds[change.resource])


@FUZZ
@given(st.data())
def test_forged_originals_on_an_unowned_or_skipped_pod_are_not_laundered(data: st.DataObject) -> None:
    """Pods the webhook does not stamp lose every controller-owned key they carry (they may
    become eligible later), and nothing is stamped on them."""
    authored = data.draw(authored_pods())
    forged = copy.deepcopy(authored)
    forged["metadata"]["annotations"] = data.draw(forgeries(authored))
    if data.draw(st.booleans()):
        forged["metadata"]["ownerReferences"] = []
    else:
        forged["metadata"]["annotations"][resizer.SKIP] = "true"
    assume(not resizer.eligibility(forged).eligible)
    response, after, answer = review(forged)
    assert answer.decision == "skipped" and owned(after) == {}
