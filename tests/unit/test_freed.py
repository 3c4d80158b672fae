"""What was freed: the managed pods' requests as authored and as now (resizer.forecast.managed_requests),
the reconciler's gauges of them (reconciler.freed, reconciler.metrics), bounded per node type."""
from __future__ import annotations

import copy
from typing import Any

from ops.prometheus import format_value as go
from reconciler import metrics
from reconciler.freed import FreedRequests, requests_by_node_type
from resizer import originals_from_spec_annotations
from resizer.forecast import forecast_fleet, managed_requests

from .test_baseline_authority import CONFIG, RING, SCOPE, admitted, mint_admission_mac, resized_by_the_product

NODES = {"node-1": "n4", "node-2": "n2d", "node-3": "x9"}


def pod(name: str, cpu_milli: int, memory_mi: int, node: str = "node-1", resized_percent: int | None = None,
        namespace: str = "shop") -> dict[str, Any]:
    p = admitted(cpu_milli, memory_mi, name=name, uid=f"uid-{name}")
    p["metadata"]["namespace"] = namespace
    p["spec"]["nodeName"] = node
    mint_admission_mac(p, originals_from_spec_annotations(p))       # namespace is part of what is signed
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
        pod("a", 1000, 256, resized_percent=80),            # n4: 1000m -> 800m
        pod("b", 500, 128, resized_percent=80),             # n4: 500m -> 400m
        pod("c", 1000, 512),                                # n4, not resized yet: 1000m now
        pod("d", 2000, 1024, node="node-2"),                # n2d (the baseline): nothing to free
        tampered(pod("e", 1000, 256, resized_percent=80)),  # held back (OriginalsUnverified)
        pod("f", 1000, 256, node="node-3"),                 # held back (UnknownNodeType)
        pod("g", 1000, 256, namespace="kube-system"),       # out of scope
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
        ("e", "OriginalsUnverified"), ("f", "UnknownNodeType")]
    by_workload = managed_requests(forecast, key=lambda p: f"{p.namespace}/{p.workload}")
    assert list(by_workload) == ["shop/ReplicaSet/web-7d9f"] and by_workload["shop/ReplicaSet/web-7d9f"].pods == 4


def test_the_original_of_an_unverifiable_pod_is_never_counted() -> None:
    """Forged originals of a resized pod would show as freed requests: the pod is held back instead."""
    forged = tampered(pod("a", 1000, 256, resized_percent=80))
    assert requests_by_node_type([forged], NODES, CONFIG, RING) == {}


def test_the_gauges_have_one_series_per_resource_node_type_and_state() -> None:
    pods, nodes = fleet(), [{"metadata": {"name": n, "labels": {"family": t}}} for n, t in NODES.items()]
    calls = []
    clock = [0.0]

    def listed() -> list[dict[str, Any]]:       # the reconciler passes the pods in scope only
        calls.append(1)
        return [p for p in pods if p["metadata"]["namespace"] != "kube-system"]

    source = FreedRequests(listed, lambda: nodes, lambda: CONFIG, lambda: RING, node_type_label="family",
                           clock=lambda: clock[0])
    saved = list(metrics.freed_source)
    metrics.freed_source[:] = [source.totals]
    try:
        text = "\n".join(metrics.MANAGED_REQUESTS.lines())
        pods_text = "\n".join(metrics.MANAGED_PODS.lines())
    finally:
        metrics.freed_source[:] = saved
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert sorted(samples) == sorted([
        'workload_resizer_managed_requests{node_type="n4",resource="cpu",state="original"} 2.5',
        'workload_resizer_managed_requests{node_type="n4",resource="cpu",state="current"} 2.2',
        f'workload_resizer_managed_requests{{node_type="n4",resource="memory",state="original"}} {go(896 << 20)}',
        f'workload_resizer_managed_requests{{node_type="n4",resource="memory",state="current"}} {go(896 << 20)}',
        'workload_resizer_managed_requests{node_type="n2d",resource="cpu",state="original"} 2.0',
        'workload_resizer_managed_requests{node_type="n2d",resource="cpu",state="current"} 2.0',
        f'workload_resizer_managed_requests{{node_type="n2d",resource="memory",state="original"}} {go(1 << 30)}',
        f'workload_resizer_managed_requests{{node_type="n2d",resource="memory",state="current"}} {go(1 << 30)}',
    ])
    assert 'workload_resizer_managed_pods{node_type="n4"} 3.0' in pods_text
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
        assert [line for line in metrics.MANAGED_REQUESTS.lines() if not line.startswith("#")] == []
    finally:
        metrics.freed_source[:] = saved
