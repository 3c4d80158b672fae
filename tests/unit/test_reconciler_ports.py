"""reconciler.ports: the fenced pods/resize patch."""

from __future__ import annotations

from reconciler.ports import fenced_resize_patch

POD = {
    "metadata": {"uid": "u-1", "generation": 3},
    "spec": {
        "containers": [{"name": "side", "resources": {}}, {"name": "app", "resources": {"requests": {"cpu": "1"}}}]
    },
}


def test_the_patch_tests_uid_generation_and_each_containers_position_before_changing_anything() -> None:
    patch = {
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "800m"}, "limits": {"cpu": "800m"}}}]}
    }
    ops = fenced_resize_patch(POD, patch, 3)
    assert ops[:3] == [
        {"op": "test", "path": "/metadata/uid", "value": "u-1"},
        {"op": "test", "path": "/metadata/generation", "value": 3},
        {"op": "test", "path": "/spec/containers/1/name", "value": "app"},
    ]
    assert ops[3:] == [
        {"op": "add", "path": "/spec/containers/1/resources/requests/cpu", "value": "800m"},
        {"op": "add", "path": "/spec/containers/1/resources/limits", "value": {"cpu": "800m"}},
    ]


def test_a_container_without_resources_gets_the_whole_map() -> None:
    ops = fenced_resize_patch(
        POD, {"spec": {"containers": [{"name": "side", "resources": {"requests": {"memory": "64Mi"}}}]}}, 3
    )
    assert ops[-1] == {"op": "add", "path": "/spec/containers/0/resources", "value": {"requests": {"memory": "64Mi"}}}
