"""The development toolkit's pure parts: the config builder and the Prometheus reader."""

from __future__ import annotations

from typing import Any

from devkit.configs import config_yaml
from devkit.metrics import metric_sum, samples
from ops.prometheus import Counter, Gauge, exposition, new_registry
from resizer import SAMPLE_CONFIG, load_config
from tests.conftest import foreign_webhooks


def test_the_default_config_is_the_design_sample() -> None:
    assert load_config(config_yaml()) == load_config(SAMPLE_CONFIG)


def test_extra_families_and_bounds_are_in_the_config() -> None:
    config = load_config(config_yaml(extra_node_types={"slow": (0.5, 1.0)}, cpu=("10m", "8")))
    assert set(config.node_types) == {"n2d", "n4", "c3", "slow"}
    assert config.node_types["slow"].cpuPerf == 0.5
    assert 'min: "10m", max: "8"' in config_yaml(cpu=("10m", "8"))


def test_metric_sum_adds_the_samples_whose_labels_match() -> None:
    registry = new_registry(runtime_collectors=False)
    requests = Counter("rest_client_requests", "requests", ["method", "resource"], registry=registry)
    requests.labels("PATCH", "pods/resize").inc(2)
    requests.labels("PATCH", "pods").inc(3)
    requests.labels("GET", "pods").inc(5)
    Gauge("leader_election_master_status", "leader", registry=registry).set(1)
    text = exposition(registry).decode()

    assert metric_sum(text, "rest_client_requests_total", method="PATCH") == 5
    assert metric_sum(text, "rest_client_requests_total", method="PATCH", resource="pods/resize") == 2
    assert metric_sum(text, "rest_client_requests_total") == 10
    assert metric_sum(text, "leader_election_master_status") == 1
    assert metric_sum(text, "no_such_metric") == 0
    assert sorted(labels["method"] for labels, _ in samples(text, "rest_client_requests_total")) == [
        "GET",
        "PATCH",
        "PATCH",
    ]


class _Webhooks:
    def __init__(self, *selectors: dict[str, Any] | None) -> None:
        self.items = [
            {
                "metadata": {"name": f"mwc-{i}"},
                "webhooks": [
                    {"name": "pods.workload-resizer.io", **({"namespaceSelector": s} if s is not None else {})}
                ],
            }
            for i, s in enumerate(selectors)
        ]

    def get(self, path: str) -> dict[str, Any]:
        return {"items": self.items}


def test_a_webhook_for_every_namespace_is_foreign_to_the_tests() -> None:
    own = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["t-1"]}]}
    never = {"matchLabels": {"workload-resizer.io/test-never-matches": "t-2"}}
    demo = {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]}]
    }
    assert foreign_webhooks(_Webhooks(own, never)) == []  # type: ignore[arg-type]
    assert foreign_webhooks(_Webhooks(own, demo, None)) == [  # type: ignore[arg-type]
        "mwc-1 (pods.workload-resizer.io)",
        "mwc-2 (pods.workload-resizer.io)",
    ]
