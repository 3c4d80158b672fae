from __future__ import annotations

from fractions import Fraction

import pytest

from resizer.originals import (
    ContainerOriginals,
    OriginalsError,
    ResourceOriginal,
    missing_original_annotations,
    only_container_values,
    originals_from_spec_annotations,
    read_originals,
)
from resizer.podstate import original_key

from .test_resizer_support import GiB, container, guaranteed, make_pod


def test_originals_come_from_the_spec_when_not_annotated() -> None:
    pod = make_pod(container("app", {"cpu": "500m", "memory": "1Gi"}, {"cpu": "2"}))
    assert read_originals(pod) == {
        "app": ContainerOriginals(
            "app",
            cpu=ResourceOriginal(Fraction(1, 2), Fraction(2)),
            memory=ResourceOriginal(Fraction(GiB), None),
        )
    }


def test_annotations_win_over_the_already_resized_spec() -> None:
    annotations = {
        "workload-resizer.io/original-cpu.app": "1",
        "workload-resizer.io/original-cpu-limit.app": "1",
    }
    pod = make_pod(guaranteed(cpu="800m"), annotations=annotations)
    originals = read_originals(pod)["app"]
    assert originals.cpu == ResourceOriginal(Fraction(1), Fraction(1))
    assert originals.memory == ResourceOriginal(Fraction(GiB), Fraction(GiB))


def test_each_value_falls_back_to_the_spec_independently() -> None:
    pod = make_pod(guaranteed(cpu="800m"), annotations={"workload-resizer.io/original-cpu.app": "1"})
    assert read_originals(pod)["app"].cpu == ResourceOriginal(Fraction(1), Fraction(4, 5))


@pytest.mark.parametrize("value", ["lots", "", "1.2.3", "-1", " 1"])
def test_corrupt_annotation_raises_naming_key_and_value(value: str) -> None:
    key = "workload-resizer.io/original-memory.app"
    pod = make_pod(guaranteed(), annotations={key: value})
    with pytest.raises(OriginalsError) as raised:
        read_originals(pod)
    assert key in str(raised.value)
    assert repr(value) in str(raised.value)


def test_only_regular_containers_are_read() -> None:
    pod = make_pod(guaranteed(), init_containers=[guaranteed("init")])
    assert list(read_originals(pod)) == ["app"]


def test_spec_annotations_cover_all_four_values_canonically() -> None:
    pod = make_pod(
        container("app", {"cpu": "1000m", "memory": "1024Mi"}, {"cpu": "2", "memory": "2147483648"}),
        container("side", {"cpu": "0.5"}),
    )
    assert originals_from_spec_annotations(pod) == {
        "workload-resizer.io/original-cpu.app": "1",
        "workload-resizer.io/original-cpu-limit.app": "2",
        "workload-resizer.io/original-memory.app": "1Gi",
        "workload-resizer.io/original-memory-limit.app": "2Gi",
        "workload-resizer.io/original-cpu.side": "500m",
    }


def test_spec_annotations_keep_values_that_are_not_whole_units() -> None:
    pod = make_pod(container("app", {"cpu": "100u", "memory": "0.5"}))
    assert originals_from_spec_annotations(pod) == {
        "workload-resizer.io/original-cpu.app": "100u",
        "workload-resizer.io/original-memory.app": "0.5",
    }


def test_missing_original_annotations_lists_only_absent_keys() -> None:
    pod = make_pod(guaranteed(), annotations={"workload-resizer.io/original-cpu.app": "1"})
    assert missing_original_annotations(pod) == {
        "workload-resizer.io/original-cpu-limit.app": "1",
        "workload-resizer.io/original-memory.app": "1Gi",
        "workload-resizer.io/original-memory-limit.app": "1Gi",
    }


def test_spec_annotations_round_trip_through_read_originals() -> None:
    pod = make_pod(container("app", {"cpu": "1500m", "memory": "100M"}, {"cpu": "3", "memory": "1Gi"}))
    annotated = make_pod(guaranteed(cpu="1m", memory="1Mi"), annotations=originals_from_spec_annotations(pod))
    assert read_originals(annotated) == read_originals(pod)


def test_long_container_names_get_valid_keys_that_read_back() -> None:
    name = "a-very-long-container-name-that-uses-all-sixty-three-characters"
    assert len(name) == 63
    pod = make_pod(guaranteed(name))
    annotations = originals_from_spec_annotations(pod)
    assert set(annotations) == {original_key(name, r, k) for r in ("cpu", "memory") for k in ("request", "limit")}
    assert all(len(key.partition("/")[2]) <= 63 for key in annotations)
    resized = make_pod(guaranteed(name, cpu="800m"), annotations=annotations)
    assert read_originals(resized)[name].cpu == ResourceOriginal(Fraction(1), Fraction(1))


def test_only_container_values_is_false_for_a_pod_level_or_a_sidecar() -> None:
    """What lets the authority skip the late originals (pod level, sidecars) of most pods."""
    plain = make_pod(guaranteed())
    pod_level = make_pod(guaranteed())
    pod_level["spec"]["resources"] = {"requests": {"cpu": "1"}}
    with_sidecar = make_pod(guaranteed(), init_containers=[{**guaranteed("proxy"), "restartPolicy": "Always"}])
    plain_init = make_pod(guaranteed(), init_containers=[guaranteed("setup")])
    verdicts = [only_container_values(p) for p in (plain, pod_level, with_sidecar, plain_init)]
    assert verdicts == [True, False, False, True]
