"""The autoscaler benchmark's pure parts: what Karpenter is given (hack/karpenter) and what
bench/autoscaler_savings.py counts."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from types import ModuleType
from typing import Any

import pytest

from bench.autoscaler_savings import churn, cpu_by_family, manifests, saving, totals
from resizer import parse_quantity
from tests.unit.hack_cluster import load_hack_script


@pytest.fixture(scope="module")
def karpenter() -> ModuleType:
    return load_hack_script("karpenter")


def node(name: str, family: str | None, cpu: str) -> dict[str, Any]:
    labels = {"karpenter.sh/nodepool": family or "x"}
    if family:
        labels["cloud.google.com/machine-family"] = family
    return {"metadata": {"name": name, "labels": labels}, "status": {"allocatable": {"cpu": cpu}}}


def pod(node_name: str | None, *cpus: str) -> dict[str, Any]:
    containers = [{"name": f"c{i}", "resources": {"requests": {"cpu": cpu}}} for i, cpu in enumerate(cpus)]
    return {"metadata": {"name": "p"}, "spec": {"nodeName": node_name, "containers": containers}}


def test_cpu_by_family_sums_bound_pods_per_family_of_their_node() -> None:
    nodes = [node("a", "n4", "8"), node("b", "n4", "8"), node("c", "c3", "8"), node("d", None, "4")]
    pods = [pod("a", "800m"), pod("b", "800m", "400m"), pod("c", "1538m"), pod(None, "1"), pod("elsewhere", "1")]
    assert cpu_by_family(nodes, pods) == {
        "-": {"nodes": 1, "allocatable_cpu": 4.0, "requested_cpu": 0.0},
        "c3": {"nodes": 1, "allocatable_cpu": 8.0, "requested_cpu": 1.54},
        "n4": {"nodes": 2, "allocatable_cpu": 16.0, "requested_cpu": 2.0},
    }
    assert totals(cpu_by_family(nodes, pods)) == {
        "nodes": 4,
        "allocatable_cpu": 28.0,
        "requested_cpu": 3.54,
        "requested_of_allocatable": 0.126,
    }


def test_totals_of_no_node() -> None:
    assert totals({}) == {"nodes": 0, "allocatable_cpu": 0, "requested_cpu": 0, "requested_of_allocatable": 0.0}


def test_saving_compares_the_runs_at_the_window_end() -> None:
    def run(nodes_running: int, nodes_end: int) -> dict[str, Any]:
        return {
            "at_all_running": {"total": {"nodes": nodes_running, "allocatable_cpu": 8.0 * nodes_running}},
            "at_window_end": {"total": {"nodes": nodes_end, "allocatable_cpu": 8.0 * nodes_end}},
        }

    figures = saving(run(40, 36), run(33, 30))
    assert figures["nodes_at_all_running"] == {"without": 40, "with": 33}
    assert figures["allocatable_cpu_at_window_end"] == {"without": 288.0, "with": 240.0}
    assert figures["nodes_saved_at_window_end"] == 0.167
    assert saving(run(0, 0), run(0, 0))["nodes_saved_at_window_end"] == 0.0


def test_churn_counts_every_add_and_remove_between_samples() -> None:
    assert churn([set(), {"a"}, {"a", "b"}, {"b", "c"}, {"c"}]) == (3, 2)
    assert churn([{"a"}]) == (0, 0)


def test_the_workload_is_a_few_hundred_cpus_and_scales() -> None:
    def cpus(scale: float) -> float:
        return sum(
            d["spec"]["replicas"]
            * float(parse_quantity(d["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"]))
            for d in manifests(scale)
        )

    assert 200 <= cpus(1) <= 400
    assert cpus(0.5) == pytest.approx(cpus(1) / 2, rel=0.05)
    assert all(d["spec"]["replicas"] >= 1 for d in manifests(0.001))


def test_instance_types_have_exactly_the_asked_allocatable(karpenter: ModuleType) -> None:
    [n4] = karpenter.instance_types(["n4"], 8, 32)
    assert n4["name"] == "n4-standard-8"
    # The KWOK provider subtracts 100m and 10Mi of kube-reserved from the capacity.
    assert parse_quantity(n4["resources"]["cpu"]) - parse_quantity("100m") == 8
    assert parse_quantity(n4["resources"]["memory"]) - parse_quantity("10Mi") == parse_quantity("32Gi")


def test_node_pool_labels_its_nodes_for_kwok_and_the_product(karpenter: ModuleType) -> None:
    pool = karpenter.node_pool("c3", 8, "15s")
    assert pool["metadata"]["name"] == "c3"
    assert pool["spec"]["template"]["metadata"]["labels"] == {"type": "kwok", "cloud.google.com/machine-family": "c3"}
    assert {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c3-standard-8"]} in pool["spec"][
        "template"
    ]["spec"]["requirements"]
    assert pool["spec"]["disruption"]["consolidationPolicy"] == "WhenEmptyOrUnderutilized"
    assert pool["spec"]["disruption"]["consolidateAfter"] == "15s"


def test_node_class_ready_condition(karpenter: ModuleType) -> None:
    status = karpenter.node_class_ready(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    assert status["status"]["conditions"] == [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Ready",
            "message": "",
            "lastTransitionTime": "2026-01-02T03:04:05Z",
        }
    ]


def test_parse_families(karpenter: ModuleType) -> None:
    assert karpenter.parse_families("n2d, n4,c3") == ["n2d", "n4", "c3"]
    for bad in ("", "n4,n4"):
        with pytest.raises(argparse.ArgumentTypeError):
            karpenter.parse_families(bad)
