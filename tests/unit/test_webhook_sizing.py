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
from app import review as review_mod
from app.metrics import Metrics
from app.review import Answer, Sizing, encode, handle_review, handle_review_inline
from app.sizing import ClusterView, SizingContext, sizing_readiness
from app.worker import ReviewWorkers
from devkit.jsonpatch import apply_patch
from kube import ApiError, TransportError
from resizer import SAMPLE_CONFIG, KeyRing, Trust, baseline
from resizer.podstate import ORIGINALS_MAC, SIZED_AT_ADMISSION
from resizer.vpa import GROUP_VERSION_PATH, slim_vpa, vpa_index
from tests.unit.test_webhook_review import container, pod, review
from tests.unit.test_webhook_worker import large_review, with_app

LABEL = "cloud.google.com/machine-family"
KEYS = KeyRing({"k0001": b"s" * 32})
NODES = {"n4-a": "n4", "c3-a": "c3", "n2d-a": "n2d"}


def context(
    dry_run: bool = False,
    version: int = 1,
    nodes: dict[str, str | None] | None = None,
    limit_ranges: dict[str, tuple[dict[str, Any], ...]] | None = None,
    vpas: list[dict[str, Any]] | None = None,
) -> SizingContext:
    return SizingContext(
        version,
        LABEL,
        nodes if nodes is not None else dict(NODES),
        SAMPLE_CONFIG,
        dry_run=dry_run,
        limit_ranges=limit_ranges,
        vpas=vpa_index(vpas or []),
    )


def a_vpa(
    target: str,
    mode: str = "InPlaceOrRecreate",
    namespace: str = "shop",
    name: str = "web-vpa",
    kind: str = "Deployment",
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target},
            "updatePolicy": {"updateMode": mode},
        },
    }


def pinned(spec: dict[str, Any]) -> dict[str, Any]:
    obj = pod([container("app", {"cpu": "1", "memory": "256Mi"}, {"cpu": "1", "memory": "256Mi"})])
    obj["spec"].update(spec)
    return obj


def sized_for(answer: Answer) -> str:
    """The node type the pod was sized (or, dry run, would have been sized) for; "" when not."""
    note = answer.sizing
    return note.node_type if note is not None and note.result in (Sizing.SIZED, Sizing.WOULD_RESIZE) else ""


def _sizing_text(answer: Answer, result: Sizing) -> str:
    note = answer.sizing
    return note.text if note is not None and note.result is result else ""


def held(answer: Answer) -> str:
    """Why sizing at admission was held ("" when it was not)."""
    return _sizing_text(answer, Sizing.HELD)


def would_resize(answer: Answer) -> str:
    return _sizing_text(answer, Sizing.WOULD_RESIZE)


def sizing_error(answer: Answer) -> str:
    return _sizing_text(answer, Sizing.ERROR)


def decide(
    obj: dict[str, Any], sizing: SizingContext | None, keys: KeyRing = KEYS
) -> tuple[dict[str, Any], dict[str, Any], Answer]:
    answer = handle_review(orjson.dumps(review(obj)), keys, None, sizing)
    status, body = answer.status, encode(answer)
    assert status == 200
    response = orjson.loads(body)["response"]
    ops = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    return response, apply_patch(copy.deepcopy(obj), ops), answer


def cpu(obj: dict[str, Any]) -> tuple[str, str]:
    resources = obj["spec"]["containers"][0]["resources"]
    return resources["requests"]["cpu"], resources["limits"]["cpu"]


@pytest.mark.parametrize(
    "spec",
    [
        {"nodeSelector": {LABEL: "n4"}},
        {"nodeName": "n4-a"},
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n4-a"]}]}
                        ]
                    }
                }
            }
        },
    ],
)
def test_a_pinned_pod_is_created_at_its_size_with_signed_originals(spec: dict[str, Any]) -> None:
    obj = pinned(spec)
    response, created, answer = decide(obj, context())
    assert cpu(created) == ("800m", "800m")
    annotations = created["metadata"]["annotations"]
    assert annotations[SIZED_AT_ADMISSION] == "n4"
    assert annotations["workload-resizer.io/original-cpu.app"] == "1"
    assert annotations[ORIGINALS_MAC].startswith("v1.s.k0001.")
    assert answer.reason == "SizedAtAdmission" and sized_for(answer) == "n4"
    assert "warnings" not in response
    stored = {**created, "metadata": {**created["metadata"], "name": "web-7d9f-x", "uid": "u", "generation": 1}}
    assert baseline(stored, KEYS).check.trust is Trust.TRUSTED


def test_an_unpinned_pod_or_no_context_or_no_keys_is_stamped_as_today() -> None:
    for obj, sizing, keys in (
        (pinned({}), context(), KEYS),
        (pinned({"nodeSelector": {LABEL: "n4"}}), None, KEYS),
        (pinned({"nodeSelector": {LABEL: "n4"}}), context(), resizer.EMPTY_KEYRING),
    ):
        _, created, answer = decide(obj, sizing, keys)
        today = decide(obj, None, keys)[1]
        assert created == today and cpu(created) == ("1", "1")
        assert SIZED_AT_ADMISSION not in created["metadata"].get("annotations", {})
        assert not sized_for(answer)


def test_different_performance_is_left_to_the_reconciler() -> None:
    obj = pinned(
        {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": LABEL, "operator": "In", "values": ["n4", "c3"]}]}
                        ]
                    }
                }
            }
        }
    )
    _, created, answer = decide(obj, context())
    assert cpu(created) == ("1", "1") and not sized_for(answer)


def test_dry_run_warns_and_changes_no_size() -> None:
    obj = pinned({"nodeSelector": {LABEL: "n4"}})
    response, created, answer = decide(obj, context(dry_run=True))
    assert cpu(created) == ("1", "1")
    assert created["metadata"]["annotations"][ORIGINALS_MAC].startswith("v1.a.")
    (warning,) = response["warnings"]
    assert "WouldResize" in warning and "n4" in warning and "cpu 1 -> 800m" in warning
    assert would_resize(answer) and sized_for(answer) == "n4"


def test_a_sizing_failure_never_blocks_the_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any) -> None:
        raise RuntimeError("bug")

    monkeypatch.setattr(resizer, "admission_sizing", broken)
    review_mod._sized_cache.clear()
    obj = pinned({"nodeSelector": {LABEL: "n4"}})
    _, created, answer = decide(obj, context())
    assert cpu(created) == ("1", "1") and "RuntimeError" in sizing_error(answer)
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
    assert inline is not None and inline.reason == "SizedAtAdmission"

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
        assert sent_full is not None and sent_short is not None  # first with the context, then by version
        assert len(sent_short[3]) < len(sent_full[3])
        return records

    first, second = asyncio.run(with_app(scenario, command=None))
    expected = encode(handle_review(body, KEYS, None, context(version=3)))
    assert orjson.loads(expected)["response"]["patch"] == first["patch"] == second["patch"]


def test_the_view_keeps_the_last_good_config_and_tracks_node_labels() -> None:
    view = ClusterView.__new__(ClusterView)
    ClusterView.__init__(
        view,
        client=None,
        config_namespace="ns",
        config_name="cfg",
        label=LABEL,  # type: ignore[arg-type]
        skip_vpa_managed=False,
    )
    assert view.context is None
    view.apply_config({"data": {"config.yaml": SAMPLE_CONFIG}})
    view._on_node("ADDED", {"metadata": {"name": "a", "labels": {LABEL: "n4"}}}, None)
    view.nodes.synced.set()
    assert view.context is None, "until the LimitRanges are known too"
    view.limitranges.synced.set()  # (listed empty: no event, and the context is built all the same)
    first = view.context
    assert first is not None and dict(first.nodes) == {"a": "n4"}
    view.apply_config({"data": {"config.yaml": "baselineNodeType: [nope"}})
    assert view.context is first  # invalid: nothing changed
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
    slow = SizingContext(
        21,
        LABEL,
        {"slow-a": "slow"},
        SAMPLE_CONFIG.replace("nodeTypes:\n", "nodeTypes:\n  slow: { cpuPerf: 0.5, memPerf: 1.0 }\n"),
    )
    _, created, answer = decide(pinned({"nodeName": "slow-a"}), slow)
    assert cpu(created) == ("1", "1") and "grows" in held(answer), answer
    floor = {
        "metadata": {"name": "floor", "namespace": "shop"},
        "spec": {"limits": [{"type": "Container", "min": {"cpu": "900m"}}]},
    }
    _, created, answer = decide(pinned({"nodeName": "n4-a"}), context(version=22, limit_ranges={"shop": (floor,)}))
    assert cpu(created) == ("1", "1") and "LimitRange floor" in held(answer), answer
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


def of_deployment(spec: dict[str, Any]) -> dict[str, Any]:
    """A pinned pod as the ReplicaSet web-7d9f of Deployment web sends it."""
    obj = pinned(spec)
    obj["metadata"]["labels"] = {"app": "web", "pod-template-hash": "7d9f"}
    return obj


def test_a_pod_an_updating_vpa_manages_is_stamped_only_and_the_hold_names_the_vpa() -> None:
    review_mod._sized_cache.clear()
    obj = of_deployment({"nodeSelector": {LABEL: "n4"}})
    response, created, answer = decide(obj, context(version=31, vpas=[a_vpa("web")]))
    assert cpu(created) == ("1", "1") and SIZED_AT_ADMISSION not in created["metadata"]["annotations"]
    assert created["metadata"]["annotations"][ORIGINALS_MAC].startswith("v1.a."), "stamped as without sizing"
    assert "VerticalPodAutoscaler web-vpa (updateMode InPlaceOrRecreate)" in held(answer), answer
    assert "Deployment web" in held(answer) and not sized_for(answer) and "warnings" not in response
    dry = decide(obj, context(dry_run=True, version=32, vpas=[a_vpa("web")]))
    assert "warnings" not in dry[0] and "VerticalPodAutoscaler web-vpa" in held(dry[2])


def test_a_vpa_that_composes_or_targets_another_workload_leaves_the_pod_sized() -> None:
    review_mod._sized_cache.clear()
    obj = of_deployment({"nodeName": "n4-a"})
    for version, vpas in enumerate(
        ([a_vpa("web", "Off")], [a_vpa("web", "Initial")], [a_vpa("api")], [a_vpa("web", namespace="elsewhere")]),
        start=41,
    ):
        _, created, answer = decide(obj, context(version=version, vpas=vpas))
        assert cpu(created) == ("800m", "800m") and not held(answer), (vpas, answer)


def test_a_replicaset_the_pod_does_not_name_is_held_for_any_updating_deployment_vpa() -> None:
    review_mod._sized_cache.clear()
    obj = pinned({"nodeName": "n4-a"})  # ReplicaSet web-7d9f, no pod-template-hash label
    _, created, answer = decide(obj, context(version=51, vpas=[a_vpa("api")]))
    assert cpu(created) == ("1", "1") and "may own the pod's ReplicaSet web-7d9f" in held(answer)


def test_the_vpas_survive_pickling_for_the_review_workers() -> None:
    copied = pickle.loads(pickle.dumps(context(version=61, vpas=[a_vpa("web")])))
    assert copied.vpas == vpa_index([a_vpa("web")])
    _, created, answer = decide(of_deployment({"nodeName": "n4-a"}), copied)
    assert cpu(created) == ("1", "1") and "web-vpa" in held(answer)


class VpaApi:
    """Discovery of autoscaling.k8s.io/v1 and the VPA list, as the apiserver answers them."""

    def __init__(self) -> None:
        self.served: bool | None = False  # None: the apiserver cannot be reached
        self.vpas: list[dict[str, Any]] = []

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        if path == GROUP_VERSION_PATH:
            if self.served is None:
                raise TransportError("GET: connection refused")  # as KubeClient wraps an OSError
            if not self.served:
                raise ApiError(404, {"reason": "NotFound"})
            return {"resources": [{"name": "verticalpodautoscalers"}, {"name": "verticalpodautoscalers/status"}]}
        if path == f"{GROUP_VERSION_PATH}/verticalpodautoscalers":
            return {"metadata": {"resourceVersion": "7"}, "items": self.vpas}
        raise AssertionError(f"unexpected GET {path}")

    async def watch(self, *args: Any) -> Any:
        await asyncio.Event().wait()
        yield {}


def test_the_view_watches_vpas_only_while_their_crd_is_served_and_never_sizes_blind() -> None:
    async def scenario() -> None:
        api = VpaApi()
        view = ClusterView(api, "ns", "cfg", LABEL)  # type: ignore[arg-type]
        view.apply_config({"data": {"config.yaml": SAMPLE_CONFIG}})
        view.nodes.synced.set()
        view.limitranges.synced.set()
        api.served = None
        await view.vpa_discovery.check()
        assert view.context is None, "discovery never answered: stamp only"
        api.served = False
        await view.vpa_discovery.check()
        without = view.context
        assert without is not None and dict(without.vpas) == {} and view.vpa_discovery.informer is None
        api.served, api.vpas = True, [a_vpa("web")]
        await view.vpa_discovery.check()  # installed later
        assert view.context is None, "until the VPAs are listed"
        await asyncio.wait_for(view.vpa_discovery.informer.synced.wait(), 5)  # type: ignore[union-attr]
        listed = view.context
        assert listed is not None and listed.version > without.version and listed.vpas == vpa_index([a_vpa("web")])
        assert view.context is listed
        status_only = {**a_vpa("web"), "status": {"recommendation": {}}}
        view.vpa_discovery.informer.store["shop/web-vpa"] = slim_vpa(status_only)  # type: ignore[union-attr]
        view._on_vpa("MODIFIED", slim_vpa(status_only), slim_vpa(a_vpa("web")))
        assert view.context is listed, "a recommendation changes nothing"
        view._on_vpa("MODIFIED", slim_vpa(a_vpa("web", "Off")), slim_vpa(a_vpa("web")))
        view.vpa_discovery.informer.store["shop/web-vpa"] = slim_vpa(a_vpa("web", "Off"))  # type: ignore[union-attr]
        off = view.context
        assert off is not None and off.version > listed.version and dict(off.vpas) == {}
        api.served = None
        await view.vpa_discovery.check()
        assert view.context is off, "unreachable: the last answer stands"
        api.served = False
        await view.vpa_discovery.check()  # removed
        gone = view.context
        assert gone is not None and dict(gone.vpas) == {} and view.vpa_discovery.informer is None

    asyncio.run(scenario())


def test_with_skip_vpa_managed_off_the_view_never_looks_vpas_up() -> None:
    api = VpaApi()
    api.served = None
    view = ClusterView(api, "ns", "cfg", LABEL, skip_vpa_managed=False)  # type: ignore[arg-type]
    view.apply_config({"data": {"config.yaml": SAMPLE_CONFIG}})
    view.nodes.synced.set()
    view.limitranges.synced.set()
    context = view.context
    assert context is not None and dict(context.vpas) == {}


def test_a_starting_replica_is_ready_once_its_caches_list_or_after_the_bound(caplog) -> None:
    """/readyz's sizing check: failing until the view's watches have listed (a rolling update
    sends no review to a replica that could not size it yet), ready after the bound anyway (a view that never
    lists must not keep the webhook out of service), with one warning."""
    now = [100.0]
    view = ClusterView(VpaApi(), "ns", "cfg", LABEL, skip_vpa_managed=False)  # type: ignore[arg-type]
    current: list[ClusterView | None] = [None]
    check = sizing_readiness(lambda: current[0], 30.0, clock=lambda: now[0])
    assert check()[0] is False, "no view yet (before the lifespan starts it)"
    current[0] = view
    assert check() == (False, "nodes, config, LimitRanges and VPAs not all listed yet")
    view.nodes.synced.set()
    view.limitranges.synced.set()
    assert check()[0] is False, "the config's ConfigMap is not listed yet"
    view.configmaps.synced.set()
    assert check() == (True, "nodes, config, LimitRanges and VPAs listed"), "no config, and that is known"
    assert view.context is None, "stamp only"

    never = ClusterView(VpaApi(), "ns", "cfg", LABEL, skip_vpa_managed=False)  # type: ignore[arg-type]
    bounded = sizing_readiness(lambda: never, 30.0, clock=lambda: now[0])
    now[0] += 29.9
    assert bounded()[0] is False
    now[0] += 0.1
    with caplog.at_level("WARNING", logger="workload_resizer.webhook"):
        assert bounded() == (True, "not all listed after 30s: pods are stamped only until they are")
        assert bounded()[0] is True
    assert [r.message for r in caplog.records].count(
        "sizing at admission not ready; serving anyway: pods are stamped only until it is"
    ) == 1
    assert sizing_readiness(lambda: never, 0.0)()[0] is True, "0: ready at once"
