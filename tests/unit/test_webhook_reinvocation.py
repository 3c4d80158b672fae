"""The webhook called again on its own answer (reinvocationPolicy: IfNeeded), no cluster.

A later mutating webhook that changes the pod makes the apiserver call ours again with the pod
as it is then: our sized values, originals, record and sized MAC included. The webhook must take
the author's pod back from its own verified record and decide on it exactly as on the first
call; the patch is computed against the pod as sent.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

import orjson
import pytest

from app.review import Answer, encode, handle_review
from devkit.jsonpatch import apply_patch
from resizer import Trust, baseline, early_binding, original_key, pod_original_key
from resizer.podstate import ORIGINALS_MAC, SIZED_AT_ADMISSION
from tests.unit.test_webhook_review import container, pod, review
from tests.unit.test_webhook_sizing import KEYS, LABEL, context, held, sized_for

APP_CPU = original_key("app", "cpu", "request")


def authored(cpu: str = "1", spec: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = pod([container("app", {"cpu": cpu, "memory": "256Mi"}, {"cpu": cpu, "memory": "256Mi"})])
    obj["spec"].update(spec if spec is not None else {"nodeSelector": {LABEL: "n4"}})
    return obj


def admit(obj: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any], Answer]:
    """One call: (patch ops, the pod with them applied, the answer)."""
    answer = handle_review(orjson.dumps(review(obj)), KEYS, None, context())
    status, body = answer.status, encode(answer)
    assert status == 200
    response = orjson.loads(body)["response"]
    assert response["allowed"] is True
    ops = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return ops, apply_patch(copy.deepcopy(obj), ops), answer


def cpu(obj: dict[str, Any], index: int = 0, field: str = "containers") -> tuple[str, str]:
    resources = obj["spec"][field][index]["resources"]
    return resources["requests"]["cpu"], resources["limits"]["cpu"]


def ours(obj: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in (obj["metadata"].get("annotations") or {}).items() if k.startswith("workload-resizer.io/")}


def stored(obj: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    """The pod as the apiserver stores it."""
    meta = {**obj["metadata"], "name": "web-7d9f-x1", "uid": "pod-uid", "generation": generation}
    return {**obj, "metadata": meta}


def add_label(obj: dict[str, Any]) -> None:
    obj["metadata"].setdefault("labels", {})["team"] = "shop"


def inject_sidecar(obj: dict[str, Any]) -> None:
    obj["spec"]["containers"].append(
        container("proxy", {"cpu": "100m", "memory": "64Mi"}, {"cpu": "100m", "memory": "64Mi"})
    )


def add_gate(obj: dict[str, Any]) -> None:
    obj["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]


def unpin(obj: dict[str, Any]) -> None:
    obj["spec"].pop("nodeSelector")


def reinvoke(first: dict[str, Any], change: Any) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    """The apiserver's second call: the pod after our patch and a later webhook's change."""
    later = copy.deepcopy(first)
    change(later)
    return admit(later)


@pytest.mark.parametrize(("author", "sized"), [("1", "800m"), ("8", "6400m")])
def test_a_label_added_by_a_later_webhook_leaves_the_sized_pod_as_it_is(author: str, sized: str) -> None:
    _, first, answer = admit(authored(author))
    assert cpu(first) == (sized, sized) and answer.reason == "SizedAtAdmission"
    ops, second, answer = reinvoke(first, add_label)
    assert ops == [], "nothing of ours changed"
    assert answer.decision == "skipped" and answer.reason == "AlreadySized"
    assert cpu(second) == (sized, sized)
    assert ours(second)[APP_CPU] == author, "the author's value, not the sized one"
    assert ours(second) == ours(first)
    assert baseline(stored(second), KEYS).check.trust is Trust.TRUSTED


def test_calling_again_and_again_changes_nothing() -> None:
    _, first, _ = admit(authored())
    pod_now = first
    for _ in range(3):
        ops, pod_now, answer = admit(pod_now)
        assert ops == [] and answer.reason == "AlreadySized"
    assert pod_now == first


def test_a_container_injected_by_a_later_webhook_is_recorded_and_sized_too() -> None:
    _, first, _ = admit(authored())
    ops, second, answer = reinvoke(first, inject_sidecar)
    assert answer.reason == "SizedAtAdmission", answer
    assert cpu(second) == ("800m", "800m"), "the author's container keeps its size"
    assert cpu(second, 1) == ("80m", "80m"), "the injected one sized from its spec"
    annotations = ours(second)
    assert annotations[APP_CPU] == "1"
    assert annotations[original_key("proxy", "cpu", "request")] == "100m", "its spec: part of the pod as created"
    assert annotations[SIZED_AT_ADMISSION] == "n4" and annotations[ORIGINALS_MAC].startswith("v1.s.")
    check = baseline(stored(second), KEYS).check
    assert check.trust is Trust.TRUSTED and check.scope == "sized"
    assert all(op["path"].startswith(("/spec/containers/1/", "/metadata/annotations/")) for op in ops), ops
    ops, _, answer = admit(second)
    assert ops == [] and answer.reason == "AlreadySized"


@pytest.mark.parametrize("change", [add_gate, unpin], ids=["gated", "unpinned"])
def test_a_pod_no_longer_to_be_sized_gets_the_authors_values_back_and_is_stamped_only(change: Any) -> None:
    _, first, _ = admit(authored())
    ops, second, answer = reinvoke(first, change)
    assert ops, "the size goes back"
    assert cpu(second) == ("1", "1")
    annotations = ours(second)
    assert annotations[APP_CPU] == "1" and SIZED_AT_ADMISSION not in annotations
    assert annotations[ORIGINALS_MAC].startswith("v1.a."), "the spec is the baseline again"
    assert answer.decision == "patched" and not sized_for(answer)
    if change is add_gate:
        assert "scheduling gate" in held(answer)
    check = baseline(stored(second), KEYS).check
    assert check.trust is Trust.TRUSTED and check.scope == "admission"
    ops, _, answer = admit(second)
    assert ops == [] and answer.reason == "AlreadyStamped"


def test_a_pod_a_later_webhook_opts_out_gets_the_authors_values_back_and_nothing_of_ours() -> None:
    _, first, _ = admit(authored())
    _, second, answer = reinvoke(
        first, lambda p: p["metadata"]["annotations"].update({"workload-resizer.io/skip": "true"})
    )
    assert answer.reason == "SkipAnnotation" and answer.authored_from == "sized-at-admission"
    assert cpu(second) == ("1", "1") and ours(second) == {"workload-resizer.io/skip": "true"}


def test_a_pod_pinned_by_a_later_webhook_is_sized_on_the_second_call() -> None:
    _, first, answer = admit(authored(spec={}))
    assert cpu(first) == ("1", "1") and not sized_for(answer)
    _, second, answer = reinvoke(first, lambda p: p["spec"].update(nodeSelector={LABEL: "n4"}))
    assert cpu(second) == ("800m", "800m") and answer.reason == "SizedAtAdmission"
    assert ours(second)[APP_CPU] == "1"


def test_a_named_pod_and_pod_level_resources_are_recognised_too() -> None:
    obj = authored()
    obj["metadata"]["name"] = "web-0"
    obj["spec"]["resources"] = {"requests": {"cpu": "2", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "512Mi"}}
    _, first, _ = admit(obj)
    assert first["spec"]["resources"]["requests"]["cpu"] == "1600m"
    ops, second, answer = reinvoke(first, add_label)
    assert ops == [] and answer.reason == "AlreadySized"
    assert ours(second)[pod_original_key("cpu", "request")] == "2"
    _, third, _ = reinvoke(second, unpin)
    assert third["spec"]["resources"]["requests"]["cpu"] == "2" and cpu(third) == ("1", "1")


@pytest.mark.parametrize("tamper", ["raised-original", "other-size", "changed-by-later-webhook", "bad-mac"])
def test_a_record_that_does_not_verify_is_not_the_authors(tamper: str) -> None:
    """Only our own record, verified over the values it wrote, names the author's values;
    anything else is treated as on a first call: the spec is the baseline."""
    _, first, _ = admit(authored())
    later = copy.deepcopy(first)
    annotations = later["metadata"]["annotations"]
    if tamper == "raised-original":
        annotations[APP_CPU] = annotations[original_key("app", "cpu", "limit")] = "8"
    elif tamper == "other-size":  # a record copied from a pod of another size
        annotations.update(ours(admit(authored("2"))[1]))
    elif tamper == "changed-by-later-webhook":
        later["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "600m"
    else:
        annotations[ORIGINALS_MAC] = annotations[ORIGINALS_MAC][:-4] + "AAAA"
    spec_cpu = later["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    _, second, answer = admit(later)
    assert ours(second)[APP_CPU] == spec_cpu, "the spec as sent is the baseline"
    assert not answer.authored_from


@pytest.mark.parametrize("pinned", [True, False])
def test_a_copied_record_gives_the_pod_an_honest_author_of_its_originals_gets(pinned: bool) -> None:
    """A tenant creates a pod carrying a sized record (and the sized spec) copied from a sibling:
    the webhook decides on the recorded originals, exactly as for the author who wrote them."""
    _, sibling, _ = admit(authored("8"))
    copied = copy.deepcopy(sibling)
    honest = authored("8")
    if not pinned:
        unpin(copied)
        unpin(honest)
    _, created, _ = admit(copied)
    _, honest_created, _ = admit(honest)
    assert created == honest_created
    assert cpu(created) == (("6400m", "6400m") if pinned else ("8", "8"))


def test_a_gated_pod_is_stamped_only_and_trusted_once_its_gate_is_removed() -> None:
    """Removing a scheduling gate changes the spec (generation 2) before the pod is bound: a sized
    record could no longer be trusted then. Stamped only, its originals equal the spec; the
    reconciler binds them to the pod at generation 1 (early_binding), which vouches for them once
    the gate is gone. The webhook's own admission MAC no longer does then (anyone mints one)."""
    obj = authored()
    add_gate(obj)
    _, first, answer = admit(obj)
    assert cpu(first) == ("1", "1") and "scheduling gate" in held(answer)
    assert answer.decision == "patched" and SIZED_AT_ADMISSION not in ours(first)
    gated = stored(first)
    binding = early_binding(gated, KEYS)
    assert binding is not None and set(binding) == {ORIGINALS_MAC} and binding[ORIGINALS_MAC].startswith("v1.p.")
    for bound in (False, True):
        ungated = copy.deepcopy(stored(first, generation=2))
        ungated["spec"].pop("schedulingGates")
        if bound:
            ungated["metadata"]["annotations"] = {**ours(first), **binding}
        check = baseline(ungated, KEYS).check
        assert (check.trust, check.scope) == (
            (Trust.TRUSTED, "pod") if bound else (Trust.TRUSTED_IF_ALIGNED, "admission")
        ), bound


def test_a_fresh_pod_still_takes_the_memoised_path() -> None:
    """A pod without any key of ours is decided as before: the encoded patch is shared by replicas."""
    from app import review as review_mod

    review_mod._fresh_patch_cache.clear()
    admit(authored(spec={}))
    assert len(review_mod._fresh_patch_cache) == 1
    admit(authored(spec={}))
    assert len(review_mod._fresh_patch_cache) == 1


def test_the_sized_metric_counts_the_review_that_sized_not_the_call_again() -> None:
    import asyncio

    from tests.unit.test_webhook_worker import with_app

    _, first, _ = admit(authored())
    bodies = [orjson.dumps(review(authored())), orjson.dumps(review(first))]

    class View:
        context = context()

    async def scenario(client: Any, app: Any, metrics: Any, workers: Any) -> list[float]:
        app.keyring = KEYS
        app.cluster = View()
        counts = []
        for body in bodies:
            assert (await client.post("/mutate", content=body)).status_code == 200
            counts.append(metrics.sized["sized"].value)
        return counts

    assert asyncio.run(with_app(scenario, command=None)) == [1, 1]


def test_a_record_under_the_keys_an_earlier_version_wrote_is_recognised_too() -> None:
    """During a rolling upgrade the first call may come from a replica of the previous version,
    which wrote a long container name's originals under its legacy key: the reinvocation by a
    new replica takes the author's values back from them all the same."""
    from resizer import PodIdentity, sign_originals
    from resizer.integrity import _sized_cover
    from resizer.podstate import legacy_original_key

    long_name = "a" * 50
    obj = pod([container(long_name, {"cpu": "1", "memory": "256Mi"}, {"cpu": "1", "memory": "256Mi"})])
    obj["spec"]["nodeSelector"] = {LABEL: "n4"}
    _, first, answer = admit(obj)
    assert answer.reason == "SizedAtAdmission" and cpu(first) == ("800m", "800m")
    # The same answer as the previous version signed it: every key of the long name in legacy form.
    legacy = {}
    for resource, kind in (("cpu", "request"), ("cpu", "limit"), ("memory", "request"), ("memory", "limit")):
        legacy[original_key(long_name, resource, kind)] = legacy_original_key(long_name, resource, kind)
    annotations = first["metadata"]["annotations"]
    originals = {legacy[k]: v for k, v in annotations.items() if k in legacy}
    sized = {"cpu": ("800m", "800m"), "memory": ("256Mi", "256Mi")}
    sized_values = {
        legacy_original_key(long_name, r, k): sized[r][0 if k == "request" else 1]
        for r in ("cpu", "memory")
        for k in ("request", "limit")
    }
    identity = PodIdentity.of({**first, "metadata": {**first["metadata"], "name": ""}}, "shop", "sized")
    mac = sign_originals(KEYS, _sized_cover(originals, "n4", sized_values), identity, "sized")
    first["metadata"]["annotations"] = {
        **{k: v for k, v in annotations.items() if k not in legacy},
        **originals,
        ORIGINALS_MAC: mac,
    }
    ops, second, answer = reinvoke(first, add_label)
    assert answer.reason in ("SizedAtAdmission", "AlreadySized"), answer
    assert cpu(second) == ("800m", "800m"), "sized once, from the author's 1 CPU"
    assert {ours(second)[original_key(long_name, "cpu", kind)] for kind in ("request", "limit")} == {"1"}
