from __future__ import annotations

import pytest

from resizer.eligibility import Eligibility, eligibility

from .test_resizer_support import make_pod


@pytest.mark.parametrize("kind", ["ReplicaSet", "StatefulSet", "DaemonSet", "Job"])
def test_pods_of_supported_controllers_are_eligible(kind: str) -> None:
    assert eligibility(make_pod(owner_kind=kind)) == Eligibility(True, "Eligible", kind, "web")


def test_bare_pod_is_not_eligible() -> None:
    assert eligibility(make_pod(owner_kind=None)) == Eligibility(False, "NoController", None, None)


def test_owner_reference_that_is_not_the_controller_does_not_count() -> None:
    pod = make_pod(owner_kind=None)
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "1"}]
    assert eligibility(pod).reason == "NoController"


@pytest.mark.parametrize(
    ("api_version", "kind"),
    [
        ("v1", "ReplicationController"),
        ("argoproj.io/v1alpha1", "Workflow"),
        ("batch/v1", "CronJob"),
        ("batch.volcano.sh/v1alpha1", "Job"),
        (None, "ReplicaSet"),
    ],
)
def test_other_controllers_are_unsupported(api_version: str | None, kind: str) -> None:
    pod = make_pod(owner_kind=None)
    reference = {"kind": kind, "name": "owner", "uid": "1", "controller": True}
    if api_version is not None:
        reference["apiVersion"] = api_version
    pod["metadata"]["ownerReferences"] = [reference]
    assert eligibility(pod) == Eligibility(False, "UnsupportedOwnerKind", kind, "owner")


@pytest.mark.parametrize("value", ["true", "True", "TRUE"])
def test_skip_annotation_opts_a_pod_out(value: str) -> None:
    result = eligibility(make_pod(annotations={"workload-resizer.io/skip": value}))
    assert (result.eligible, result.reason, result.owner_kind) == (False, "SkipAnnotation", "ReplicaSet")


@pytest.mark.parametrize("value", ["false", "", "yes"])
def test_skip_annotation_other_than_true_is_ignored(value: str) -> None:
    assert eligibility(make_pod(annotations={"workload-resizer.io/skip": value})).eligible


def test_mirror_pod_annotation_makes_a_pod_ineligible() -> None:
    pod = make_pod(annotations={"kubernetes.io/config.mirror": "abc123"})
    assert eligibility(pod).reason == "MirrorPod"


def test_pod_controlled_by_a_node_is_a_mirror_pod() -> None:
    pod = make_pod(owner_kind=None)
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": "1", "controller": True}
    ]
    assert eligibility(pod) == Eligibility(False, "MirrorPod", "Node", "node-1")
