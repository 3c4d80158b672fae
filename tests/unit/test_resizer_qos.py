from __future__ import annotations

from typing import Any

from resizer.qos import pod_qos_class

from .test_resizer_support import container, guaranteed


def spec(
    *containers: dict[str, Any], init: list[dict[str, Any]] | None = None, pod_level: dict[str, Any] | None = None
) -> dict[str, Any]:
    result: dict[str, Any] = {"containers": list(containers)}
    if init is not None:
        result["initContainers"] = init
    if pod_level is not None:
        result["resources"] = pod_level
    return result


def test_requests_equal_to_limits_for_cpu_and_memory_is_guaranteed() -> None:
    assert pod_qos_class(spec(guaranteed("a"), guaranteed("b", cpu="250m", memory="128Mi"))) == "Guaranteed"


def test_equality_is_by_value_not_by_string() -> None:
    same_values = container("app", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1000m", "memory": "1024Mi"})
    assert pod_qos_class(spec(same_values)) == "Guaranteed"


def test_no_requests_and_no_limits_is_best_effort() -> None:
    assert pod_qos_class(spec(container("app"), container("side", {}, {}))) == "BestEffort"


def test_zero_quantities_do_not_count() -> None:
    assert pod_qos_class(spec(container("app", {"cpu": "0", "memory": "0"}, {"cpu": "0"}))) == "BestEffort"


def test_resources_other_than_cpu_and_memory_are_ignored() -> None:
    only_storage = container("app", {"ephemeral-storage": "1Gi"}, {"ephemeral-storage": "1Gi"})
    assert pod_qos_class(spec(only_storage)) == "BestEffort"
    with_gpu = container("app", {"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"})
    assert pod_qos_class(spec(with_gpu)) == "Guaranteed"


def test_request_below_limit_is_burstable() -> None:
    assert (
        pod_qos_class(spec(container("app", {"cpu": "500m", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})))
        == "Burstable"
    )


def test_a_container_without_both_limits_makes_the_pod_burstable() -> None:
    assert pod_qos_class(spec(guaranteed("a"), container("b", {"cpu": "1"}, {"cpu": "1"}))) == "Burstable"


def test_requests_only_is_burstable() -> None:
    assert pod_qos_class(spec(container("app", {"memory": "64Mi"}))) == "Burstable"


def test_init_containers_count() -> None:
    assert pod_qos_class(spec(guaranteed(), init=[container("init", {"cpu": "100m"})])) == "Burstable"
    assert pod_qos_class(spec(container("app"), init=[container("init", {"cpu": "100m"})])) == "Burstable"
    assert pod_qos_class(spec(guaranteed(), init=[guaranteed("init", cpu="100m")])) == "Guaranteed"


def test_requests_and_limits_are_summed_per_resource() -> None:
    # Per container request != limit, but the sums match; Kubernetes compares the sums.
    crossed = spec(
        container("a", {"cpu": "1", "memory": "1Gi"}, {"cpu": "2", "memory": "1Gi"}),
        container("b", {"cpu": "2", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"}),
    )
    assert pod_qos_class(crossed) == "Guaranteed"


def test_pod_level_resources_take_precedence_over_containers() -> None:
    pod_level = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
    assert pod_qos_class(spec(container("app"), pod_level=pod_level)) == "Guaranteed"
    assert pod_qos_class(spec(guaranteed(), pod_level={"requests": {"cpu": "1"}})) == "Burstable"


def test_pod_level_resources_without_cpu_or_memory_fall_back_to_containers() -> None:
    assert pod_qos_class(spec(guaranteed(), pod_level={"requests": {"ephemeral-storage": "1Gi"}})) == "Guaranteed"
