"""What was freed: the managed pods' requests as authored and as now (resizer.forecast.managed_requests),
the reconciler's gauges of them (reconciler.freed, reconciler.metrics), bounded per node type."""

from __future__ import annotations

import copy
from typing import Any

from reconciler import metrics
from reconciler.freed import FreedRequests, requests_by_node_type
from resizer import originals_from_spec_annotations
from resizer.forecast import forecast_fleet, managed_requests

from .test_baseline_authority import CONFIG, RING, SCOPE, admitted, mint_admission_mac, resized_by_the_product

NODES = {"node-1": "n4", "node-2": "n2d", "node-3": "x9"}


def pod(
    name: str,
    cpu_milli: int,
    memory_mi: int,
    node: str = "node-1",
    resized_percent: int | None = None,
    namespace: str = "shop",
) -> dict[str, Any]:
    p = admitted(cpu_milli, memory_mi, name=name, uid=f"uid-{name}")
    p["metadata"]["namespace"] = namespace
    p["spec"]["nodeName"] = node
    mint_admission_mac(p, originals_from_spec_annotations(p))  # namespace is part of what is signed
    if resized_percent is not None:
        resized_by_the_product(p, resized_percent)
    return p


def tampered(p: dict[str, Any]) -> dict[str, Any]:
    """Originals edited after a resize: not verifiable, the pod is held back."""
    p = copy.deepcopy(p)
    p["metadata"]["annotations"]["workload-resizer.io/original-cpu.app"] = "64"
    return p


def fleet() -> list[dict[str, Any]]:
    return [
        pod("a", 1000, 256, resized_percent=80),  # n4: 1000m -> 800m
        pod("b", 500, 128, resized_percent=80),  # n4: 500m -> 400m
        pod("c", 1000, 512),  # n4, not resized yet: 1000m now
        pod("d", 2000, 1024, node="node-2"),  # n2d (the baseline): nothing to free
        tampered(pod("e", 1000, 256, resized_percent=80)),  # held back (OriginalsUnverified)
        pod("f", 1000, 256, node="node-3"),  # held back (UnknownNodeType)
        pod("g", 1000, 256, namespace="kube-system"),  # out of scope
    ]


def test_totals_are_the_sums_over_managed_pods_of_original_minus_current() -> None:
    forecast = forecast_fleet(fleet(), NODES, CONFIG, SCOPE, keyring=RING)
    totals = managed_requests(forecast, key=lambda p: p.node_type)
    assert set(totals) == {"n4", "n2d"}
    n4 = totals["n4"]
    assert (n4.pods, n4.original_cpu, n4.current_cpu) == (3, 2500, 2200)
    assert n4.freed_cpu == 300 and n4.freed_memory == 0
    assert (n4.original_memory, n4.current_memory) == ((256 + 128 + 512) << 20, (256 + 128 + 512) << 20)
    assert (totals["n2d"].pods, totals["n2d"].freed_cpu) == (1, 0)
    pods = [p for g in forecast.workloads for p in g.pods]
    assert sum(t.freed_cpu for t in totals.values()) == sum(p.original_cpu - p.current_cpu for p in pods)
    assert sorted((p.name, p.outcome) for p in forecast.not_resized) == [
        ("e", "OriginalsUnverified"),
        ("f", "UnknownNodeType"),
    ]
    by_workload = managed_requests(forecast, key=lambda p: f"{p.namespace}/{p.workload}")
    assert list(by_workload) == ["shop/ReplicaSet/web-7d9f"] and by_workload["shop/ReplicaSet/web-7d9f"].pods == 4


def samples(gauge: Any) -> dict[tuple[str, ...], float]:
    """The gauge's samples as a scrape sees them: label values (in labelnames order) -> value."""
    return {
        tuple(dict(labels)[name] for name in gauge.labelnames): value
        for family in gauge.collect()
        for _, labels, value in family.samples
    }


def test_the_original_of_an_unverifiable_pod_is_never_counted() -> None:
    """Forged originals of a resized pod would show as freed requests: the pod is held back instead."""
    forged = tampered(pod("a", 1000, 256, resized_percent=80))
    assert requests_by_node_type([forged], NODES, CONFIG, RING) == {}


def test_the_gauges_have_one_series_per_resource_node_type_and_state() -> None:
    pods, nodes = fleet(), [{"metadata": {"name": n, "labels": {"family": t}}} for n, t in NODES.items()]
    calls = []
    clock = [0.0]

    def listed() -> list[dict[str, Any]]:  # the reconciler passes the pods in scope only
        calls.append(1)
        return [p for p in pods if p["metadata"]["namespace"] != "kube-system"]

    source = FreedRequests(
        listed, lambda: nodes, lambda: CONFIG, lambda: RING, node_type_label="family", clock=lambda: clock[0]
    )
    saved = list(metrics.freed_source)
    metrics.freed_source[:] = [source.totals]
    try:
        requests = samples(metrics.MANAGED_REQUESTS)
        managed = samples(metrics.MANAGED_PODS)
    finally:
        metrics.freed_source[:] = saved
    assert requests == {
        ("cpu", "n4", "original"): 2.5,
        ("cpu", "n4", "current"): 2.2,
        ("memory", "n4", "original"): float(896 << 20),
        ("memory", "n4", "current"): float(896 << 20),
        ("cpu", "n2d", "original"): 2.0,
        ("cpu", "n2d", "current"): 2.0,
        ("memory", "n2d", "original"): float(1 << 30),
        ("memory", "n2d", "current"): float(1 << 30),
    }
    assert managed == {("n4",): 3.0, ("n2d",): 1.0}
    assert len(calls) == 1, "one computation per scrape (both gauges), not one per gauge"
    clock[0] = 5.0
    source.totals()
    assert len(calls) == 2


def test_no_config_no_samples_and_no_source_no_samples() -> None:
    source = FreedRequests(fleet, list, lambda: None, lambda: RING, node_type_label="family")
    assert source.totals() == {}
    saved = list(metrics.freed_source)
    metrics.freed_source[:] = []
    try:
        assert samples(metrics.MANAGED_REQUESTS) == {}
    finally:
        metrics.freed_source[:] = saved


def test_a_steady_cluster_is_summed_from_each_pods_kept_share(monkeypatch: Any) -> None:
    import reconciler.freed as freed

    pods, nodes = fleet()[:4], [{"metadata": {"name": n, "labels": {"family": t}}} for n, t in NODES.items()]
    for i, p in enumerate(pods):
        p["metadata"]["resourceVersion"] = str(i)
    computed: list[str] = []
    real = freed.requests_by_node_type

    def counting(one: list[dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
        computed.append(one[0]["metadata"]["name"])
        return real(one, *args, **kwargs)

    monkeypatch.setattr(freed, "requests_by_node_type", counting)
    clock = [0.0]
    source = FreedRequests(
        lambda: pods, lambda: nodes, lambda: CONFIG, lambda: RING, node_type_label="family", clock=lambda: clock[0]
    )
    first = source.totals()
    assert sorted(computed) == ["a", "b", "c", "d"]
    clock[0] = 10.0
    assert source.totals() == first and len(computed) == 4, "nothing changed: no pod planned again"
    pods[2]["metadata"]["resourceVersion"] = "99"  # one pod changed (e.g. resized)
    clock[0] = 20.0
    assert source.totals() == first and computed[4:] == ["c"]


def test_pods_with_pod_level_resources_count_where_their_node_resizes_them() -> None:
    p = pod("plr", 500, 256)
    p["spec"]["resources"] = {"requests": {"cpu": "1", "memory": "512Mi"}}
    p["status"]["qosClass"] = "Burstable"  # the pod level decides it
    mint_admission_mac(p, originals_from_spec_annotations(p))

    def node(declared: list[str]) -> dict[str, Any]:
        return {"metadata": {"name": "node-1", "labels": {"family": "n4"}}, "status": {"declaredFeatures": declared}}

    for declared, counted in (([], 0), (["InPlacePodLevelResourcesVerticalScaling"], 1)):
        source = FreedRequests(
            lambda: [p], lambda d=declared: [node(d)], lambda: CONFIG, lambda: RING, node_type_label="family"
        )
        totals = source.totals()
        assert sum(t.pods for t in totals.values()) == counted, declared
        if counted:
            assert totals["n4"].original_cpu == 1000, "the pod level, what the scheduler counts"
