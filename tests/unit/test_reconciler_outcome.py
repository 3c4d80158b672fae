"""reconciler.outcome: reading a resize's stage from the pod, the revert patch, the state annotation."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reconciler.outcome import ResizeState, Stage, observe, revert_patch, same_resources

NEW = {"requests": {"cpu": "800m", "memory": "256Mi"}, "limits": {"cpu": "800m", "memory": "256Mi"}}
OLD = {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}


def pod(
    actual: dict[str, Any] | None = OLD,
    generation: int = 2,
    observed: int | None = 2,
    conditions: list[dict[str, Any]] | None = None,
    running: bool = True,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "containerStatuses": [{"name": "app", "running": running, "resources": copy.deepcopy(actual)}],
        "conditions": conditions or [],
    }
    if observed is not None:
        status["observedGeneration"] = observed
    return {
        "metadata": {"generation": generation},
        "spec": {"containers": [{"name": "app", "resources": copy.deepcopy(NEW)}]},
        "status": status,
    }


def condition(kind: str, reason: str = "", generation: int = 2, message: str = "why") -> dict[str, Any]:
    return {
        "type": kind,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def test_actuated_when_observed_without_conditions_and_the_status_equals_the_spec():
    assert observe(pod(actual=NEW)).stage == Stage.ACTUATED


def test_not_actuated_while_the_kubelet_has_not_observed_the_generation():
    assert observe(pod(actual=NEW, observed=1)).stage == Stage.REQUESTED


def test_a_kubelet_that_does_not_report_observed_generation_is_judged_by_the_rest():
    assert observe(pod(actual=NEW, observed=None)).stage == Stage.ACTUATED


def test_not_actuated_while_resources_differ():
    assert observe(pod(actual=OLD)).stage == Stage.REQUESTED


def test_not_actuated_while_in_progress():
    assert observe(pod(actual=NEW, conditions=[condition("PodResizeInProgress")])).stage == Stage.REQUESTED


@pytest.mark.parametrize(("reason", "stage"), [("Deferred", Stage.DEFERRED), ("Infeasible", Stage.INFEASIBLE)])
def test_a_pending_resize_is_deferred_or_infeasible_with_the_kubelets_message(reason, stage):
    observation = observe(pod(conditions=[condition("PodResizePending", reason, message="full")]))
    assert (observation.stage, observation.message, observation.since) == (stage, "full", "2026-01-01T00:00:00Z")


def test_a_pending_condition_about_an_older_generation_is_not_about_this_spec():
    assert (
        observe(
            pod(generation=3, observed=3, conditions=[condition("PodResizePending", "Infeasible", generation=2)])
        ).stage
        == Stage.REQUESTED
    )


def test_an_in_progress_error_is_an_error_with_its_message():
    observation = observe(pod(conditions=[condition("PodResizeInProgress", "Error", message="OOM risk")]))
    assert (observation.stage, observation.message) == (Stage.ERROR, "OOM risk")


def test_containers_not_running_yet_are_waited_for():
    assert observe(pod(actual=None, running=False)).stage == Stage.REQUESTED


def test_a_container_that_is_not_running_counts_with_the_allocated_resources_it_reports():
    """KEP-1287: status resources of a non-running container are its allocated resources."""
    assert observe(pod(actual=NEW, running=False)).stage == Stage.ACTUATED
    assert observe(pod(actual=OLD, running=False)).stage == Stage.REQUESTED


def test_running_containers_that_report_no_resources_mean_the_node_cannot_resize():
    assert observe(pod(actual=None, observed=None)).stage == Stage.UNSUPPORTED


@pytest.mark.parametrize(
    ("spec", "actual", "same"),
    [
        ({"requests": {"cpu": "1"}}, {"requests": {"cpu": "1000m"}}, True),
        ({"requests": {"memory": "1Gi"}}, {"requests": {"memory": "1073741824"}}, True),
        ({"requests": {"cpu": "1"}}, {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}, False),
        ({"requests": {"cpu": "1", "ephemeral-storage": "1Gi"}}, {"requests": {"cpu": "1"}}, True),
        (None, {}, True),
        ({"requests": {"cpu": "bogus"}}, {"requests": {"cpu": "1"}}, False),
    ],
)
def test_resources_are_compared_by_value(spec, actual, same):
    assert same_resources(spec, actual) is same


def test_the_revert_patch_sets_each_differing_value_back_to_what_runs():
    assert revert_patch(pod(actual=OLD)) == {
        "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}
    }


def test_nothing_to_revert_when_the_spec_is_what_runs_or_nothing_is_reported():
    assert revert_patch(pod(actual=NEW)) == {}
    assert revert_patch(pod(actual=None)) == {}


def test_the_state_annotation_round_trips():
    state = ResizeState(
        Stage.INFEASIBLE,
        "n4",
        3,
        size="abc",
        allocatable="cpu=8,memory=32Gi",
        requested_at="2026-01-01T00:00:00Z",
        warned=True,
    )
    assert ResizeState.decode(state.encode()) == state


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "{",
        "[]",
        '{"state":"bogus","nodeType":"n4"}',
        '{"state":"deferred"}',
        '{"state":"deferred","nodeType":7}',
        '{"state":"deferred","nodeType":"n4","generation":"2"}',
    ],
)
def test_an_unreadable_or_forged_state_is_ignored(text):
    assert ResizeState.decode(text) is None
