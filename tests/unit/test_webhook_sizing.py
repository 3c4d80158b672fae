"""The webhook's decision with a sizing context (app.review + app.sizing + app.worker), no cluster."""

from __future__ import annotations

import asyncio
import base64
import copy
import pickle
from typing import Any

import orjson
import pytest

import resizer
from app.metrics import Metrics
from app import review as review_mod
from app.review import handle_review, handle_review_inline
from app.sizing import ClusterView, SizingContext
from app.worker import ReviewWorkers
from devkit.jsonpatch import apply_patch
from resizer import ORIGINALS_MAC, SIZED_AT_ADMISSION, SAMPLE_CONFIG, KeyRing, Trust, baseline
from tests.unit.test_webhook_review import container, pod, review
from tests.unit.test_webhook_worker import large_review, with_app

LABEL = "cloud.google.com/machine-family"
KEYS = KeyRing({"k0001": b"s" * 32})
NODES = {"n4-a": "n4", "c3-a": "c3", "n2d-a": "n2d"}


def context(dry_run: bool = False, version: int = 1, nodes: dict[str, str | None] | None = None,
            limit_ranges: dict[str, tuple[dict[str, Any], ...]] | None = None) -> SizingContext:
    return SizingContext(version, LABEL, nodes if nodes is not None else dict(NODES), SAMPLE_CONFIG,
                         dry_run=dry_run, limit_ranges=limit_ranges)


def pinned(spec: dict[str, Any]) -> dict[str, Any]:
    obj = pod([container("app", {"cpu": "1", "memory": "256Mi"}, {"cpu": "1", "memory": "256Mi"})])
    obj["spec"].update(spec)
    return obj


def decide(obj: dict[str, Any], sizing: SizingContext | None, keys: KeyRing = KEYS
           ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    status, body, record = handle_review(orjson.dumps(review(obj)), keys, None, sizing)
    assert status == 200
    response = orjson.loads(body)["response"]
    ops = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return response, apply_patch(copy.deepcopy(obj), ops), record


def cpu(obj: dict[str, Any]) -> tuple[str, str]:
    resources = obj["spec"]["containers"][0]["resources"]
    return resources["requests"]["cpu"], resources["limits"]["cpu"]


@pytest.mark.parametrize("spec", [{"nodeSelector": {LABEL: "n4"}}, {"nodeName": "n4-a"}, {
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n4-a"]}]}]}}}}])
def test_a_pinned_pod_is_created_at_its_size_with_signed_originals(spec: dict[str, Any]) -> None:
    obj = pinned(spec)
    response, created, record = decide(obj, context())
    assert cpu(created) == ("800m", "800m")
    annotations = created["metadata"]["annotations"]
    assert annotations[SIZED_AT_ADMISSION] == "n4"
    assert annotations["workload-resizer.io/original-cpu.app"] == "1"
    assert annotations[ORIGINALS_MAC].startswith("v1.s.k0001.")
    assert record["reason"] == "SizedAtAdmission" and record["sizedFor"] == "n4"
    assert "warnings" not in response
    stored = {**created, "metadata": {**created["metadata"], "name": "web-7d9f-x", "uid": "u", "generation": 1}}
    assert baseline(stored, KEYS).check.trust is Trust.TRUSTED


def test_an_unpinned_pod_or_no_context_or_no_keys_is_stamped_as_today() -> None:
    for obj, sizing, keys in ((pinned({}), context(), KEYS), (pinned({"nodeSelector": {LABEL: "n4"}}), None, KEYS),
                              (pinned({"nodeSelector": {LABEL: "n4"}}), context(), resizer.EMPTY_KEYRING)):
        _, created, record = decide(obj, sizing, keys)
        today = decide(obj, None, keys)[1]
        assert created == today and cpu(created) == ("1", "1")
        assert SIZED_AT_ADMISSION not in created["metadata"].get("annotations", {})
        assert "sizedFor" not in record


def test_different_performance_is_left_to_the_reconciler() -> None:
    obj = pinned({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": LABEL, "operator": "In", "values": ["n4", "c3"]}]}]}}}})
    _, created, record = decide(obj, context())
    assert cpu(created) == ("1", "1") and "sizedFor" not in record


def test_dry_run_warns_and_changes_no_size() -> None:
    obj = pinned({"nodeSelector": {LABEL: "n4"}})
    response, created, record = decide(obj, context(dry_run=True))
    assert cpu(created) == ("1", "1")
    assert created["metadata"]["annotations"][ORIGINALS_MAC].startswith("v1.a.")
    (warning,) = response["warnings"]
    assert "WouldResize" in warning and "n4" in warning and "cpu 1 -> 800m" in warning
    assert record["wouldResize"] and record["sizedFor"] == "n4"


def test_a_sizing_failure_never_blocks_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> None:
        raise RuntimeError("bug")
    monkeypatch.setattr(resizer, "admission_sizing", broken)
    review_mod._sized_cache.clear()
    obj = pinned({"nodeSelector": {LABEL: "n4"}})
    _, created, record = decide(obj, context())
    assert cpu(created) == ("1", "1") and "RuntimeError" in record["sizingError"]
    assert created["metadata"]["annotations"][ORIGINALS_MAC].startswith("v1.a.")


def test_forged_records_are_stripped() -> None:
    obj = pinned({})
    obj["metadata"]["annotations"] = {SIZED_AT_ADMISSION: "n4", ORIGINALS_MAC: "v1.s.k0001." + "A" * 43}
    _, created, _ = decide(obj, context())
    assert SIZED_AT_ADMISSION not in created["metadata"]["annotations"]
    assert created["metadata"]["annotations"][ORIGINALS_MAC].startswith("v1.a.")


def test_the_context_survives_pickling_and_is_compiled_again() -> None:
    copied = pickle.loads(pickle.dumps(context(version=7)))
    assert copied.version == 7 and dict(copied.nodes) == NODES and copied.config.baseline_node_type == "n2d"


def test_inline_and_worker_decide_alike_and_the_context_is_sent_once_per_version() -> None:
    obj = pinned({"nodeSelector": {LABEL: "n4"}})
    small = orjson.dumps(review(obj))
    inline = handle_review_inline(small, KEYS, None, context())
    assert inline is not None and inline[2]["reason"] == "SizedAtAdmission"

    big = orjson.loads(large_review())
    big["request"]["object"]["spec"]["nodeSelector"] = {LABEL: "n4"}
    body = orjson.dumps(big)

    class View:
        context = context(version=3)

    async def scenario(client: Any, app: Any, metrics: Metrics, workers: ReviewWorkers) -> list[dict[str, Any]]:
        app.keyring = KEYS
        app.cluster = View()
        records = []
        for _ in range(2):
            r = await client.post("/mutate", content=body)
            records.append(r.json()["response"])
        sent_full = workers._meta_cache.get(True)
        sent_short = workers._meta_cache.get(False)
        assert sent_full is not None and sent_short is not None   # first with the context, then by version
        assert len(sent_short[3]) < len(sent_full[3])
        return records

    first, second = asyncio.run(with_app(scenario, command=None))
    expected = handle_review(body, KEYS, None, context(version=3))[1]
    assert orjson.loads(expected)["response"]["patch"] == first["patch"] == second["patch"]


def test_the_view_keeps_the_last_good_config_and_tracks_node_labels() -> None:
    view = ClusterView.__new__(ClusterView)
    ClusterView.__init__(view, client=None, config_namespace="ns", config_name="cfg", label=LABEL)  # type: ignore[arg-type]
    assert view.context is None
    view.apply_config({"data": {"config.yaml": SAMPLE_CONFIG}})
    view._on_node("ADDED", {"metadata": {"name": "a", "labels": {LABEL: "n4"}}}, None)
    view.nodes.synced.set()
    assert view.context is None, "until the LimitRanges are known too"
    view.limitranges.synced.set()
    view._changed()
    first = view.context
    assert first is not None and dict(first.nodes) == {"a": "n4"}
    view.apply_config({"data": {"config.yaml": "baselineNodeType: [nope"}})
    assert view.context is first                      # invalid: nothing changed
    view._on_node("MODIFIED", {"metadata": {"name": "a", "labels": {LABEL: "c3"}}}, None)
    second = view.context
    assert second is not None and second.version > first.version and dict(second.nodes) == {"a": "c3"}
    assert second.config is first.config


def test_replicas_share_a_memoised_sizing_until_the_nodes_or_config_change() -> None:
    review_mod._sized_cache.clear()
    obj = pinned({"nodeName": "n4-a"})
    first = decide(obj, context(version=11))[1]
    assert len(review_mod._sized_cache) == 1
    assert decide(obj, context(version=11))[1] == first and len(review_mod._sized_cache) == 1
    relabelled = decide(obj, context(version=12, nodes={**NODES, "n4-a": "c3"}))[1]
    assert cpu(first) == ("800m", "800m") and cpu(relabelled) == ("769m", "769m")


def test_a_size_that_grows_or_that_a_limit_range_refuses_is_left_to_the_reconciler() -> None:
    review_mod._sized_cache.clear()
    slow = SizingContext(21, LABEL, {"slow-a": "slow"}, SAMPLE_CONFIG.replace(
        "nodeTypes:\n", "nodeTypes:\n  slow: { cpuPerf: 0.5, memPerf: 1.0 }\n"))
    _, created, record = decide(pinned({"nodeName": "slow-a"}), slow)
    assert cpu(created) == ("1", "1") and "grows" in record["sizingHeld"], record
    floor = {"metadata": {"name": "floor", "namespace": "shop"}, "spec": {"limits": [
        {"type": "Container", "min": {"cpu": "900m"}}]}}
    _, created, record = decide(pinned({"nodeName": "n4-a"}), context(version=22, limit_ranges={"shop": (floor,)}))
    assert cpu(created) == ("1", "1") and "LimitRange floor" in record["sizingHeld"], record
    other_namespace = context(version=23, limit_ranges={"elsewhere": (floor,)})
    assert cpu(decide(pinned({"nodeName": "n4-a"}), other_namespace)[1]) == ("800m", "800m")
    copied = pickle.loads(pickle.dumps(context(version=24, limit_ranges={"shop": (floor,)})))
    assert dict(copied.limit_ranges) == {"shop": (floor,)}


def test_a_key_recreated_under_the_same_id_never_gets_a_mac_of_the_old_one_from_a_cache() -> None:
    """Caches are keyed by the signing key's content, not its id: a keys Secret lost and recreated
    by hand under the same id signs with the new key at once (admission stamp and sized record)."""
    lost, recreated = KeyRing({"k0001": b"l" * 32}), KeyRing({"k0001": b"r" * 32})
    for sizing in (None, context(version=21)):
        obj = pinned({"nodeSelector": {LABEL: "n4"}} if sizing is not None else {})
        stored = []
        for ring in (lost, recreated, lost):
            created = decide(obj, sizing, ring)[1]
            created["metadata"].update(name="web-7d9f-x", uid="u", generation=1)
            assert baseline(created, ring).check.trust is Trust.TRUSTED, (sizing, ring.keys)
            stored.append(created["metadata"]["annotations"][ORIGINALS_MAC])
        assert stored[0] != stored[1] and stored[0] == stored[2]
        assert stored[1].startswith("v1.s.k0001." if sizing is not None else "v1.a.k0001.")
