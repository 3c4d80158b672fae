"""Issue 3's cluster acceptance: resize plans from resizer.plan_resize, applied for real.

A generated sample of pods (Guaranteed, Burstable, mixed multi-container, a
RestartContainer resize policy, odd cpu and memory values) runs on a resize-capable
KWOK node. Each pod is planned for a node type of the design's config (n2d baseline,
n4, c3) or of a very fast type, and every plan with something to change is sent as
it is through pods/resize. The apiserver must accept it and keep the QoS class, the
spec and the status must equal the plan by value, and the canonical strings we send
must be stored verbatim.

The pods are bare (no controller) and annotated workload-resizer.io/skip, so a
reconciler running against a shared cluster leaves them alone, and the node carries
no machine-family label.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import pytest

from devkit.configs import config_yaml
from devkit.kube import Kube, container, wait_for
from resizer import (
    ResizePlan,
    format_cpu,
    format_memory,
    load_config,
    parse_quantity,
    plan_resize,
    pod_qos_class,
    resolve_policy,
)
from resizer.podstate import SKIP
from tests.conftest import Cluster

CONFIG = load_config(config_yaml(extra_node_types={"ultra": (6.0, 3.0), "slow": (0.5, 0.8)}))
NODE_TYPES = ("n4", "c3", "ultra", "slow")  # slow: growth (bounds never lift a request on a faster node)
NODE = "rp-big"  # room for two tests' samples at once (a namespace is deleted asynchronously)
SEED = 20251121
MiB = 2**20


@dataclass(frozen=True)
class Case:
    name: str
    containers: list[dict[str, Any]]
    resize_restart_containers: bool = False
    tags: frozenset[str] = field(default_factory=frozenset)


def same(requests: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    return requests, dict(requests)


def fixed_cases() -> list[Case]:
    restart = {"cpu": "RestartContainer", "memory": "NotRequired"}
    return [
        Case("guaranteed", [container("app", *same({"cpu": "1", "memory": "1Gi"}))]),
        Case("guaranteed-odd", [container("app", *same({"cpu": "333m", "memory": "1000M"}))]),
        Case("burstable", [container("app", {"cpu": "500m", "memory": "512Mi"}, {"cpu": "1500m", "memory": "1Gi"})]),
        Case("requests-only", [container("app", {"cpu": "300m", "memory": "200Mi"})]),
        # Targets such as "4", "2", "1G", "100000Ki": every canonical form, not only "m" and "Mi".
        Case(
            "round-values",
            [container("a", {"cpu": "5", "memory": "3G"}), container("b", {"cpu": "2500m", "memory": "300000Ki"})],
        ),
        Case(
            "mixed",
            [
                container("app", *same({"cpu": "2", "memory": "2Gi"})),
                container("metrics", {"cpu": "250m", "memory": "128Mi"}),
                container("logs", {"memory": "96Mi"}),
                container("tiny", {"cpu": "40m"}),
            ],
        ),
        Case("restart-cpu", [container("app", {"cpu": "1", "memory": "1Gi"}, resize_policy=restart)]),
        Case(
            "restart-cpu-allowed",
            [container("app", {"cpu": "1", "memory": "1Gi"}, resize_policy=restart)],
            resize_restart_containers=True,
        ),
    ]


def generated_cases(count: int = 4) -> list[Case]:
    """Seeded random pods: 1-3 containers, Guaranteed or Burstable, canonical odd values."""
    rng = random.Random(SEED)
    cases = []
    for index in range(count):
        guaranteed = rng.random() < 0.5
        containers = []
        for c in range(rng.randint(1, 3)):
            memory = rng.choice([rng.randint(32, 4096) * MiB, rng.randint(10**7, 5 * 10**9)])
            requests = {"cpu": format_cpu(rng.randint(10, 6000)), "memory": format_memory(memory)}
            if guaranteed:
                containers.append(container(f"c{c}", *same(requests)))
            elif rng.random() < 0.5:
                limit_cpu = format_cpu(rng.randint(int(parse_quantity(requests["cpu"]) * 1000), 8000))
                containers.append(container(f"c{c}", requests, {"cpu": limit_cpu}))
            else:
                containers.append(container(f"c{c}", requests))
        cases.append(Case(f"generated-{index}", containers))
    return cases


def sample() -> list[Case]:
    return fixed_cases() + generated_cases()


def pod_manifest(name: str, case: Case) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {SKIP: "true"}},
        "spec": {
            "containers": case.containers,
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "terminationGracePeriodSeconds": 0,
        },
    }


def plan_for(pod: dict[str, Any], node_type: str, case: Case) -> ResizePlan:
    return plan_resize(pod, resolve_policy(CONFIG, pod), node_type, case.resize_restart_containers)


# --------------------------------------------------------------------------- expectations


def expected(plan: ResizePlan) -> Iterator[tuple[str, str, str, Fraction]]:
    """(container, requests|limits, resource, exact value) the plan asks for."""
    scale = {"cpu": Fraction(1, 1000), "memory": Fraction(1)}
    for change in plan.changes:
        if change.skipped is not None:
            continue
        yield change.container, "requests", change.resource, change.desired_request * scale[change.resource]
        if change.desired_limit is not None:
            yield change.container, "limits", change.resource, change.desired_limit * scale[change.resource]


def sent_strings(plan: ResizePlan) -> Iterator[tuple[str, str, str, str]]:
    for c in plan.patch["spec"]["containers"]:
        for kind, values in c["resources"].items():
            for resource, text in values.items():
                yield c["name"], kind, resource, text


def spec_resources(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c.get("resources") or {} for c in pod["spec"]["containers"]}


def status_resources(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["name"]: s.get("resources") or {} for s in pod["status"].get("containerStatuses") or []}


def allocated(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        s["name"]: {"requests": s.get("allocatedResources") or {}} for s in pod["status"].get("containerStatuses") or []
    }


def matches_plan(resources: dict[str, dict[str, Any]], plan: ResizePlan, kinds: tuple[str, ...]) -> bool:
    return all(
        parse_quantity(resources[c].get(kind, {}).get(r, "-1")) == value
        for c, kind, r, value in expected(plan)
        if kind in kinds
    )


def status_follows(pod: dict[str, Any], plan: ResizePlan) -> bool:
    return matches_plan(status_resources(pod), plan, ("requests", "limits")) and matches_plan(
        allocated(pod), plan, ("requests",)
    )


# --------------------------------------------------------------------------- tests


def test_the_sample_covers_the_cases_of_the_design() -> None:
    """Planned on the specs alone: which kinds of change the cluster tests will apply."""
    seen: set[str] = set()
    for node_type in NODE_TYPES:
        for case in sample():
            pod = pod_manifest(case.name, case)
            plan = plan_for(pod, node_type, case)
            if plan.outcome != "Resize":
                continue
            seen.add(pod_qos_class(pod["spec"]))
            seen |= {
                f"{change.resource}-{'down' if change.desired_request < change.current_request else 'up'}"
                for change in plan.changed
            }
            seen |= {f"clamped-{change.clamped}" for change in plan.changed if change.clamped}
            seen |= {
                "limit-scaled" for change in plan.changed if change.desired_limit not in (None, change.desired_request)
            }
            if len(plan.patch["spec"]["containers"]) > 1:
                seen.add("multi-container")
            if any(change.skipped for change in plan.changes):
                seen.add("restart-skipped")
            if case.resize_restart_containers:
                seen.add("restart-resized")
            seen |= {string_form(resource, text) for *_, resource, text in sent_strings(plan)}
    assert {
        "Guaranteed",
        "Burstable",
        "cpu-down",
        "cpu-up",
        "memory-down",
        "clamped-min",
        "limit-scaled",
        "multi-container",
        "restart-skipped",
        "restart-resized",
        "cpu-m",
        "cpu-whole",
        "memory-bytes",
        "memory-SI",
        "memory-Ki",
        "memory-Mi",
    } <= seen, seen


def string_form(resource: str, text: str) -> str:
    """ "memory-Ki", "memory-SI" (k/M/G...), "memory-bytes", "cpu-m", "cpu-whole"."""
    suffix = text.lstrip("0123456789")
    if resource == "cpu":
        return "cpu-m" if suffix == "m" else "cpu-whole" if not suffix else f"cpu-{suffix}"
    return "memory-bytes" if not suffix else f"memory-{suffix}" if suffix.endswith("i") else "memory-SI"


@pytest.mark.parametrize("node_type", NODE_TYPES)
def test_plans_are_accepted_kept_verbatim_and_actuated(cluster: Cluster, namespace: str, node_type: str) -> None:
    kube = cluster.kube
    cluster.ensure_node(NODE, cpu="256", memory="1Ti")
    cases = {f"{case.name}-{node_type}": case for case in sample()}
    for name, case in cases.items():
        kube.create(f"/api/v1/namespaces/{namespace}/pods", pod_manifest(name, case))
    running = wait_for("sample pods running", lambda: running_pods(kube, namespace, len(cases)), timeout=30)

    plans = {name: plan_for(running[name], node_type, case) for name, case in cases.items()}
    resized = {name: plan for name, plan in plans.items() if plan.outcome == "Resize"}
    assert len(resized) >= len(cases) // 2, {name: plan.outcome for name, plan in plans.items()}

    for name, plan in resized.items():
        answer = kube.resize(namespace, name, plan.patch)
        assert_spec_is_the_plan(answer, plan)
    for name, plan in resized.items():
        pod = wait_for(
            f"status of {name} to follow its plan",
            lambda name=name, plan=plan: (p := kube.pod(namespace, name)) and status_follows(p, plan) and p,
            timeout=20,
        )
        assert_spec_is_the_plan(pod, plan)
        assert pod["status"]["qosClass"] == running[name]["status"]["qosClass"] == pod_qos_class(pod["spec"])
        assert_untouched_values_kept(running[name], pod, plan)


def running_pods(kube: Kube, namespace: str, count: int) -> dict[str, dict[str, Any]] | None:
    pods = {
        p["metadata"]["name"]: p
        for p in kube.pods(namespace)
        if p["status"].get("phase") == "Running" and p["status"].get("containerStatuses")
    }
    return pods if len(pods) == count else None


def assert_spec_is_the_plan(pod: dict[str, Any], plan: ResizePlan) -> None:
    spec = spec_resources(pod)
    name = pod["metadata"]["name"]
    for c, kind, resource, text in sent_strings(plan):
        assert spec[c][kind][resource] == text, f"{name}: {c} {kind}.{resource} stored as {spec[c][kind][resource]!r}"
    assert matches_plan(spec, plan, ("requests", "limits")), (name, spec, plan.summary())


def assert_untouched_values_kept(before: dict[str, Any], after: dict[str, Any], plan: ResizePlan) -> None:
    """Resources the plan leaves alone (skipped, or not sized) are as they were, spec and status."""
    planned = {(c, kind, r) for c, kind, r, _ in expected(plan)}
    for view in (spec_resources, status_resources):
        old, new = view(before), view(after)
        for c, resources in old.items():
            for kind, values in resources.items():
                for r, text in values.items():
                    if (c, kind, r) not in planned:
                        assert parse_quantity(new[c][kind][r]) == parse_quantity(text), (c, kind, r)
