"""The `restore` command's pure core: the resize back to the originals, and which keys are ours."""

from __future__ import annotations

import pytest

from resizer.originals import OriginalsError, originals_from_spec_annotations
from resizer.podstate import controller_owned_keys, read_state
from resizer.restore import restore_patch

from .test_resizer_support import container, guaranteed, make_pod, with_annotations


def resized_pod() -> dict:
    original = make_pod(guaranteed(), container("side", {"cpu": "250m"}, {"cpu": "500m"}))
    annotations = {
        **originals_from_spec_annotations(original),
        "workload-resizer.io/applied-instance-type": "n4",
        "workload-resizer.io/skip": "false",
        "team": "shop",
    }
    pod = make_pod(
        container("app", {"cpu": "800m", "memory": "1Gi"}, {"cpu": "800m", "memory": "1Gi"}),
        container("side", {"cpu": "200m"}, {"cpu": "400m"}),
    )
    return with_annotations(pod, annotations)


def test_the_patch_puts_back_only_what_differs_as_the_author_wrote_it() -> None:
    assert restore_patch(resized_pod()) == {
        "spec": {
            "containers": [
                {"name": "app", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}},
                {"name": "side", "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "500m"}}},
            ]
        }
    }


def test_a_pod_at_its_originals_needs_no_resize() -> None:
    pod = make_pod(guaranteed(cpu="1000m"))
    pod = with_annotations(pod, {"workload-resizer.io/original-cpu.app": "1"})
    assert restore_patch(pod) == {}


def test_only_the_products_own_keys_are_removed() -> None:
    assert controller_owned_keys(read_state(resized_pod())) == [
        "workload-resizer.io/applied-instance-type",
        "workload-resizer.io/original-cpu-limit.app",
        "workload-resizer.io/original-cpu-limit.side",
        "workload-resizer.io/original-cpu.app",
        "workload-resizer.io/original-cpu.side",
        "workload-resizer.io/original-memory-limit.app",
        "workload-resizer.io/original-memory.app",
    ]


def test_an_unusable_original_is_an_error_not_a_guess() -> None:
    pod = with_annotations(make_pod(guaranteed()), {"workload-resizer.io/original-cpu.app": "lots"})
    with pytest.raises(OriginalsError):
        restore_patch(pod)
