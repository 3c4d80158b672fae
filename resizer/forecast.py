"""What the product would do to a set of pods: the `plan` command's pure core.

Every decision is the reconciler's own: the namespace scope, eligibility, the baseline
authority (:func:`resizer.integrity.baseline`: originals it cannot verify are held, as the
reconciler holds them), the pod's policy and :func:`resizer.plan.plan_resize`. This module only
groups the results per workload and node type and adds up the requests freed or added.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from resizer.config import CompiledConfig, resolve_policy
from resizer.eligibility import eligibility, is_live_and_bound
from resizer.errors import ResizerError
from resizer.integrity import EMPTY_KEYRING, KeyRing, Trust, baseline
from resizer.originals import read_originals, read_pod_originals
from resizer.pinning import plan_bound_pod
from resizer.plan import POD_LEVEL, ResizePlan
from resizer.podstate import read_state, resizable_containers
from resizer.quantity import RESOURCES, QuantityError, coerce_quantity, to_bytes, to_millicores
from resizer.scope import NamespaceScope
from resizer.vpa import controller_owner, deployment_of

K = TypeVar("K", str, tuple[str, str, str])


def workload_of(pod: Mapping[str, Any]) -> str:
    """``Kind/name`` of the workload: a ReplicaSet of a Deployment counts as the Deployment."""
    metadata = pod.get("metadata") or {}
    owner = controller_owner(metadata)
    if owner is None:
        return "Pod/" + str(metadata.get("name"))
    deployment = deployment_of(pod, owner)
    return f"{owner.kind}/{owner.name}" if deployment is None else f"Deployment/{deployment}"


@dataclass(frozen=True)
class PodForecast:
    """One pod: the outcome and its requests now and planned (summed over its containers and
    sidecars, or the pod level where ``spec.resources`` sets them)."""

    namespace: str
    name: str
    workload: str
    node: str
    node_type: str
    outcome: str
    current_cpu: int
    desired_cpu: int
    current_memory: int
    desired_memory: int
    plan: ResizePlan | None = None
    detail: str = ""
    # The requests as authored (the baseline's originals; the current ones when unreadable).
    original_cpu: int = 0
    original_memory: int = 0
    # The node type the webhook sized the pod for at CREATE (its sized-at-admission record), if any.
    sized_at_admission: str = ""


@dataclass
class WorkloadForecast:
    """The pods of one workload on one node type, and their requests added up."""

    namespace: str
    workload: str
    node_type: str
    pods: list[PodForecast] = field(default_factory=list)

    @property
    def resized(self) -> int:
        return sum(1 for pod in self.pods if pod.outcome == "Resize")

    def total(self, attribute: str) -> int:
        return sum(getattr(pod, attribute) for pod in self.pods)


@dataclass
class FleetForecast:
    workloads: list[WorkloadForecast]
    skipped: dict[str, int]  # reason -> pods not resized (out of scope, ineligible, ...)
    not_resized: list[PodForecast]  # in scope and eligible, but the plan says no (e.g. UnknownNodeType)

    def total(self, attribute: str) -> int:
        return sum(group.total(attribute) for group in self.workloads)

    @property
    def pods(self) -> int:
        return sum(len(group.pods) for group in self.workloads)

    @property
    def resized(self) -> int:
        return sum(group.resized for group in self.workloads)


@dataclass
class RequestTotals:
    """Summed requests of a set of managed pods: as authored (original) and as now (current);
    cpu in millicores, memory in bytes. ``freed_*`` is original - current (negative: added)."""

    pods: int = 0
    original_cpu: int = 0
    current_cpu: int = 0
    original_memory: int = 0
    current_memory: int = 0

    def add(self, pod: PodForecast) -> None:
        self.pods += 1
        self.original_cpu += pod.original_cpu
        self.current_cpu += pod.current_cpu
        self.original_memory += pod.original_memory
        self.current_memory += pod.current_memory

    @property
    def freed_cpu(self) -> int:
        return self.original_cpu - self.current_cpu

    @property
    def freed_memory(self) -> int:
        return self.original_memory - self.current_memory


def managed_requests(forecast: FleetForecast, key: Callable[[PodForecast], K]) -> dict[K, RequestTotals]:
    """The requests of the pods the product manages (trusted baseline, sized or to be sized), added
    up per ``key`` (e.g. the node type), sorted by it. Pods it holds back (``not_resized``: no
    trusted baseline, or no plan) are not in them: what they were authored with cannot be told."""
    totals: dict[K, RequestTotals] = {}
    for group in forecast.workloads:
        for pod in group.pods:
            totals.setdefault(key(pod), RequestTotals()).add(pod)
    return {k: totals[k] for k in sorted(totals)}


def forecast_fleet(
    pods: Iterable[Mapping[str, Any]],
    node_types: Mapping[str, str | None],
    config: CompiledConfig,
    scope: NamespaceScope,
    namespace_labels: Mapping[str, Mapping[str, str]] | None = None,
    resize_restart_containers: bool = False,
    skip_applied: bool = False,
    keyring: KeyRing = EMPTY_KEYRING,
    pod_level_nodes: Collection[str] = frozenset(),
) -> FleetForecast:
    """Forecast every pod. ``node_types``: node name -> its node-type label (None: unlabelled);
    ``namespace_labels`` when the scope has a selector; ``pod_level_nodes``: the nodes that resize
    pod-level resources in place (:func:`resizer.plan.node_resizes_pod_level`); ``skip_applied``:
    pods sized for their node's type already are left alone, as the reconciler's re-alignment off."""
    groups: dict[tuple[str, str, str], WorkloadForecast] = {}
    skipped: Counter[str] = Counter()
    not_resized: list[PodForecast] = []
    # Replicas of a workload have the same plan: memoised on everything plan_resize and
    # resolve_policy read (a pure function of it), so 10,000 pods cost a few hundred plans.
    memo: dict[str, PodForecast] = {}

    for pod in pods:
        metadata = pod.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        if not is_live_and_bound(pod):
            skipped["NotBoundOrFinished"] += 1
            continue
        labels = (namespace_labels or {}).get(namespace, {}) if scope.needs_labels else None
        if not scope.includes(namespace, labels):
            skipped["OutOfScope"] += 1
            continue
        verdict = eligibility(pod)
        if not verdict.eligible:
            skipped[verdict.reason] += 1
            continue
        node = str(pod["spec"]["nodeName"])
        if node not in node_types:
            skipped["NodeNotFound"] += 1
            continue
        node_type = node_types[node]
        if not node_type:
            skipped["NodeWithoutType"] += 1
            continue
        state = read_state(pod)
        if skip_applied and state.applied.instance_type == node_type:
            skipped["AlreadyApplied"] += 1
            continue
        try:
            decision = baseline(pod, keyring)  # per pod: a MAC binds the pod's identity
        except ResizerError as error:
            not_resized.append(_pod_forecast(pod, node, node_type, "ResizeFailed", str(error)))
            continue
        if decision.refused:
            not_resized.append(_pod_forecast(pod, node, node_type, "OriginalsUnverified", decision.check.reason))
            continue
        pod_level, sized = node in pod_level_nodes, decision.check.scope == "sized"
        plan_key = _plan_key(decision.pod, node_type) + str((pod_level, sized))
        shared = memo.get(plan_key)
        if shared is None:
            shared = memo[plan_key] = forecast_pod(
                decision.pod, node, node_type, config, resize_restart_containers, pod_level, sized
            )
        if decision.check.trust is Trust.TRUSTED_IF_ALIGNED and shared.outcome == "Resize":
            detail = f"{decision.check.reason}, and the pod is not aligned with them"
            shared = _pod_forecast(pod, node, node_type, "OriginalsUnverified", detail)
        forecast = replace(
            shared,
            namespace=namespace,
            name=str(metadata.get("name")),
            workload=workload_of(pod),
            node=node,
            sized_at_admission=state.sized_at_admission or "",
        )
        if forecast.outcome in ("Resize", "AlreadyAligned"):
            key = (namespace, forecast.workload, node_type)
            groups.setdefault(key, WorkloadForecast(*key)).pods.append(forecast)
        else:
            not_resized.append(forecast)
    ordered = [groups[key] for key in sorted(groups)]
    return FleetForecast(ordered, dict(sorted(skipped.items())), not_resized)


def _plan_key(pod: Mapping[str, Any], node_type: str) -> str:
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    read = [metadata.get("labels"), metadata.get("annotations")]
    read += [spec.get(part) for part in ("containers", "initContainers", "resources", "nodeSelector")]
    read.append((pod.get("status") or {}).get("qosClass"))
    return json.dumps([node_type, *read], sort_keys=True, default=str)


def forecast_pod(
    pod: Mapping[str, Any],
    node: str,
    node_type: str,
    config: CompiledConfig,
    resize_restart_containers: bool,
    pod_level: bool = False,
    sized_at_admission: bool = False,
) -> PodForecast:
    try:
        plan = plan_bound_pod(
            pod, resolve_policy(config, pod), node_type, resize_restart_containers, pod_level, sized_at_admission
        )
    except ResizerError as error:
        return _pod_forecast(pod, node, node_type, "ResizeFailed", str(error), authored=True)
    return _pod_forecast(pod, node, node_type, plan.outcome, plan=plan, authored=True)


def _pod_forecast(
    pod: Mapping[str, Any],
    node: str,
    node_type: str,
    outcome: str,
    detail: str = "",
    plan: ResizePlan | None = None,
    authored: bool = False,
) -> PodForecast:
    """The pod's requests now and with ``plan``; ``authored``: also as authored (the baseline's
    originals, the current ones when unreadable), else none (a pod the reconciler leaves as it is)."""
    metadata = pod.get("metadata") or {}
    cpu, memory = _requests(pod, to_millicores, "cpu"), _requests(pod, to_bytes, "memory")
    desired_cpu, desired_memory = cpu, memory
    if plan is not None and outcome in ("Resize", "AlreadyAligned"):
        desired_cpu, desired_memory = cpu + _delta(plan, "cpu"), memory + _delta(plan, "memory")
    original_cpu = original_memory = 0
    if authored:
        try:
            original_cpu, original_memory = _original_requests(pod)
        except ResizerError:
            original_cpu, original_memory = cpu, memory
    return PodForecast(
        str(metadata.get("namespace")),
        str(metadata.get("name")),
        workload_of(pod),
        node,
        node_type,
        outcome,
        cpu,
        desired_cpu,
        memory,
        desired_memory,
        plan,
        detail or (plan.summary() if plan else ""),
        original_cpu,
        original_memory,
    )


def _delta(plan: ResizePlan, resource: str) -> int:
    """The change of the pod's request the scheduler counts: the pod level's where it is set."""
    changes = [c for c in plan.changes if c.resource == resource and c.skipped is None]
    pod_level = [c for c in changes if c.container == POD_LEVEL]
    return sum(change.desired_request - (change.current_request or 0) for change in pod_level or changes)


def _original_requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """Millicores and bytes of the containers' and sidecars' requests as authored: the ``original-*``
    annotations of ``pod`` (the baseline authority's view), the spec where there are none."""
    containers, pod_level = list(read_originals(pod).values()), read_pod_originals(pod)
    amounts = []
    for resource in RESOURCES:
        level = pod_level if pod_level is not None and pod_level.of(resource).request is not None else None
        requests = [holder.of(resource).request for holder in (containers if level is None else [level])]
        amounts.append(sum((to_millicores if resource == "cpu" else to_bytes)(r) for r in requests if r is not None))
    return amounts[0], amounts[1]


def _requests(pod: Mapping[str, Any], units: Callable[[Any], int], resource: str) -> int:
    """The pod's request of ``resource`` the scheduler counts: the pod level's where it is set and
    readable, else its containers' and sidecars' (an unreadable one counting as none)."""

    def request(holder: Mapping[str, Any]) -> int | None:
        value = ((holder.get("resources") or {}).get("requests") or {}).get(resource)
        try:
            return None if value is None else units(coerce_quantity(value))
        except QuantityError:
            return None

    pod_level = request(pod.get("spec") or {})
    if pod_level is not None:
        return pod_level
    return sum(request(container) or 0 for container in resizable_containers(pod))
