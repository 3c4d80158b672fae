"""Whether a planned resize would be refused, judged before it is sent, from cached objects.

Four judges, each answering with the :class:`Hold` that names the constraint, or None:

- :func:`limit_range_hold`: the namespace's LimitRanges (type Container and Pod: min, max,
  maxLimitRequestRatio for cpu and memory), checked as the LimitRanger admission plugin checks
  a pods/resize request: on the whole resized pod.
- :func:`quota_hold`: the namespace's ResourceQuotas (requests.cpu/cpu, requests.memory/memory,
  limits.cpu, limits.memory), charged as the quota admission charges a resize: by the change of
  the pod's totals; a decrease is never refused. Only the quotas whose scopes and scopeSelector
  match the pod charge it, matched as the apiserver's pod quota evaluator matches them.
- :func:`node_hold`: the node's room, counted as the kubelet admits a resize: its allocatable
  minus, for every other pod on it, the larger of what its spec requests and what its
  containers have; a decrease always fits. (:func:`fits_allocatable` is the apiserver's own,
  narrower check: the pod alone against the allocatable.)
- :func:`critical_hold`: an increase of a pod at system-cluster-critical priority or above, which
  may make the kubelet evict other pods (held unless --upsize-critical-pods allows it).

Pods and objects are the JSON shapes the API uses; amounts are millicores and bytes.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from operator import gt, lt
from typing import Any, Literal

from resizer import podstate
from resizer.qos import pod_qos_class
from resizer.quantity import QuantityError, coerce_quantity, format_cpu, format_memory, to_bytes, to_millicores

Constraint = Literal["LimitRange", "ResourceQuota", "NodeHeadroom", "CriticalPriority"]
# system-cluster-critical and system-node-critical and above: the kubelet may evict other pods to
# admit them (KEP-1287), so growing them in place is the admin's choice.
CRITICAL_PRIORITY = 2_000_000_000
Kind = Literal["requests", "limits"]
_KINDS: tuple[Kind, ...] = ("requests", "limits")
_RESOURCES = ("cpu", "memory")
# ResourceQuota resource names a pod's cpu and memory are charged to.
_QUOTA_NAMES: Mapping[str, tuple[Kind, str]] = {
    "cpu": ("requests", "cpu"),
    "requests.cpu": ("requests", "cpu"),
    "limits.cpu": ("limits", "cpu"),
    "memory": ("requests", "memory"),
    "requests.memory": ("requests", "memory"),
    "limits.memory": ("limits", "memory"),
}

Totals = dict[tuple[Kind, str], int]  # (requests|limits, cpu|memory) -> amount


@dataclass(frozen=True)
class Hold:
    """A resize not sent because `constraint` (the object `name`) would refuse it."""

    constraint: Constraint
    name: str
    detail: str
    subject: str = ""  # what of the object refuses it (a quota's resource name, a node's resource)

    @property
    def fingerprint(self) -> str:
        """What identifies this hold (not the amounts, which move while it waits): reported once."""
        return f"{self.constraint}/{self.name}/{self.subject or self.detail}"

    def message(self) -> str:
        if self.constraint == "CriticalPriority":
            return f"resize held: {self.detail}"
        what = {"LimitRange": "LimitRange", "ResourceQuota": "ResourceQuota", "NodeHeadroom": "node"}[self.constraint]
        return f"resize held: {what} {self.name} would refuse it ({self.detail}); retried when it changes"


def _amount(resource: str, value: Any) -> int:
    quantity: Fraction = coerce_quantity(value)
    return to_millicores(quantity) if resource == "cpu" else to_bytes(quantity)


def _show(resource: str, amount: int) -> str:
    return format_cpu(amount) if resource == "cpu" else format_memory(amount)


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name"))


def _container_amounts(container: Mapping[str, Any], kind: Kind) -> dict[str, int]:
    values = ((container.get("resources") or {}).get(kind)) or {}
    return {r: _amount(r, values[r]) for r in _RESOURCES if r in values}


def pod_totals(spec: Mapping[str, Any]) -> Totals:
    """The pod's effective requests and limits, as the scheduler and quota count them: pod-level
    ``spec.resources`` where set, else the containers' sum (restartable init containers included),
    at least the largest plain init container (with the sidecars started before it)."""
    totals: Totals = {}
    pod_level = spec.get("resources") or {}
    for kind in ("requests", "limits"):
        level = _container_amounts({"resources": pod_level}, kind)
        sidecars: Counter[str] = Counter()
        init_peak: dict[str, int] = {}
        for init in spec.get("initContainers") or []:
            amounts = _container_amounts(init, kind)
            if podstate.is_sidecar(init):
                sidecars.update(amounts)
            else:
                for r, v in amounts.items():
                    init_peak[r] = max(init_peak.get(r, 0), v + sidecars[r])
        running = Counter(sidecars)
        for container in spec.get("containers") or []:
            running.update(_container_amounts(container, kind))
        for r in _RESOURCES:
            if r in level:
                totals[(kind, r)] = level[r]
            elif r in running or r in init_peak:
                totals[(kind, r)] = max(running.get(r, 0), init_peak.get(r, 0))
    return totals


def apply_patch(pod: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """The pod's spec as a pods/resize strategic merge patch of container resources leaves it."""
    spec = dict(pod.get("spec") or {})
    patched = patch.get("spec") or {}
    for field in ("containers", "initContainers"):
        changes = {c.get("name"): c.get("resources") or {} for c in patched.get(field) or []}
        if not changes:
            continue
        spec[field] = [_merged(c, changes.get(c.get("name"))) for c in spec.get(field) or []]
    if patched.get("resources"):
        spec["resources"] = _merge_resources(spec.get("resources") or {}, patched["resources"])
    return spec


def _merged(container: Mapping[str, Any], resources: Mapping[str, Any] | None) -> dict[str, Any]:
    if resources is None:
        return dict(container)
    return {**container, "resources": _merge_resources(container.get("resources") or {}, resources)}


def _merge_resources(current: Mapping[str, Any], change: Mapping[str, Any]) -> dict[str, Any]:
    merged = {kind: dict(current.get(kind) or {}) for kind in ("requests", "limits") if current.get(kind)}
    for kind in ("requests", "limits"):
        for resource, value in (change.get(kind) or {}).items():
            if value is None:
                merged.get(kind, {}).pop(resource, None)
            else:
                merged.setdefault(kind, {})[resource] = value
    return merged


def limit_range_hold(spec: Mapping[str, Any], limit_ranges: Iterable[Mapping[str, Any]]) -> Hold | None:
    """The first LimitRange item the resized pod spec `spec` violates."""
    with contextlib.suppress(QuantityError):  # a value we cannot read: the apiserver judges it
        for limit_range in sorted(limit_ranges, key=_name):
            for item in (limit_range.get("spec") or {}).get("limits") or []:
                detail = _limit_item_violation(spec, item)
                if detail is not None:
                    return Hold("LimitRange", _name(limit_range), detail)
    return None


def _limit_item_violation(spec: Mapping[str, Any], item: Mapping[str, Any]) -> str | None:
    kind = item.get("type")
    if kind == "Container":  # sidecars too: the LimitRanger checks init containers like containers
        sidecars = [c for c in spec.get("initContainers") or [] if podstate.is_sidecar(c)]
        for container in [*(spec.get("containers") or []), *sidecars]:
            amounts = {(k, r): v for k in _KINDS for r, v in _container_amounts(container, k).items()}
            detail = _violation(item, amounts)
            if detail is not None:
                return f"container {container.get('name')}: {detail}"
    elif kind == "Pod":
        detail = _violation(item, pod_totals(spec))
        if detail is not None:
            return f"pod: {detail}"
    return None


def _violation(item: Mapping[str, Any], amounts: Totals) -> str | None:
    """What of min, max and maxLimitRequestRatio the amounts break (like the LimitRanger's checks)."""
    for resource in _RESOURCES:
        request, limit = amounts.get(("requests", resource)), amounts.get(("limits", resource))
        for key, beyond, word, checked in (
            ("min", lt, "below the minimum", (("request", request), ("limit", limit))),
            ("max", gt, "above the maximum", (("limit", limit), ("request", request))),
        ):
            bound = (item.get(key) or {}).get(resource)
            if bound is None:
                continue
            bound_amount = _amount(resource, bound)
            for what, amount in checked:
                if amount is not None and beyond(amount, bound_amount):
                    return f"{resource} {what} {_show(resource, amount)} is {word} {bound}"
        ratio = (item.get("maxLimitRequestRatio") or {}).get(resource)
        if ratio is not None and request and limit and Fraction(limit, request) > coerce_quantity(ratio):
            return (
                f"{resource} limit/request ratio {float(Fraction(limit, request)):.3g} is above "
                f"maxLimitRequestRatio {ratio}"
            )
    return None


def quota_hold(pod: Mapping[str, Any], resized: Mapping[str, Any], quotas: Iterable[Mapping[str, Any]]) -> Hold | None:
    """The first ResourceQuota the change from `pod`'s spec to the `resized` spec would exceed."""
    with contextlib.suppress(QuantityError):
        before, after = pod_totals(pod.get("spec") or {}), pod_totals(resized)
        best_effort = pod_qos_class(resized) == "BestEffort"
        for quota in sorted(quotas, key=_name):
            charged = _quota_applies(quota, pod.get("spec") or {}, best_effort)
            excess = _quota_excess(quota, before, after) if charged else None
            if excess is not None:
                return Hold("ResourceQuota", _name(quota), excess[1], excess[0])
    return None


def _quota_applies(quota: Mapping[str, Any], spec: Mapping[str, Any], best_effort: bool) -> bool:
    """Whether the quota charges a pod of this spec: each scope it lists and each expression of
    its scopeSelector match the pod, as the apiserver's pod quota evaluator matches them."""
    quota_spec = quota.get("spec") or {}
    selectors = [{"scopeName": scope, "operator": "Exists"} for scope in quota_spec.get("scopes") or []]
    selectors += (quota_spec.get("scopeSelector") or {}).get("matchExpressions") or []
    return all(_scope_matches(selector, spec, best_effort) for selector in selectors)


def _scope_matches(selector: Mapping[str, Any], spec: Mapping[str, Any], best_effort: bool) -> bool:
    scope = str(selector.get("scopeName"))
    if scope in ("Terminating", "NotTerminating"):
        deadline = spec.get("activeDeadlineSeconds")
        return (type(deadline) is int and deadline >= 0) == (scope == "Terminating")
    if scope in ("BestEffort", "NotBestEffort"):
        return best_effort == (scope == "BestEffort")
    if scope == "PriorityClass":  # a label selector over {"PriorityClass": name}, the key absent without a name
        name, operator = str(spec.get("priorityClassName") or ""), str(selector.get("operator"))
        values = selector.get("values")
        values = values if isinstance(values, list) else []
        if operator in ("Exists", "DoesNotExist"):
            return bool(name) == (operator == "Exists")
        return operator in ("In", "NotIn") and (bool(name) and name in values) == (operator == "In")
    if scope == "CrossNamespacePodAffinity":
        return _cross_namespace_affinity(spec.get("affinity") or {})
    return False  # the apiserver matches no pod to any other scope


def _cross_namespace_affinity(affinity: Mapping[str, Any]) -> bool:
    """Whether a pod (anti-)affinity term names namespaces or a namespace selector."""
    for kind in ("podAffinity", "podAntiAffinity"):
        rules = affinity.get(kind) or {}
        terms = [
            *(rules.get("requiredDuringSchedulingIgnoredDuringExecution") or []),
            *(
                t.get("podAffinityTerm") or {}
                for t in rules.get("preferredDuringSchedulingIgnoredDuringExecution") or []
            ),
        ]
        if any(t.get("namespaces") or t.get("namespaceSelector") is not None for t in terms):
            return True
    return False


def _quota_excess(quota: Mapping[str, Any], before: Totals, after: Totals) -> tuple[str, str] | None:
    """The quota's resource name the change exceeds, and how."""
    status = quota.get("status") or {}
    hard = status.get("hard") or (quota.get("spec") or {}).get("hard") or {}
    used = status.get("used") or {}
    for name, value in sorted(hard.items()):
        charged = _QUOTA_NAMES.get(name)
        if charged is None:
            continue
        resource = charged[1]
        delta = after.get(charged, 0) - before.get(charged, 0)
        if delta <= 0:
            continue
        in_use = _amount(resource, used.get(name, 0))
        if in_use + delta > _amount(resource, value):
            return name, f"{name}: used {_show(resource, in_use)} + {_show(resource, delta)} would exceed hard {value}"
    return None


def _status_requests(pod: Mapping[str, Any]) -> dict[str, int]:
    """What the pod has: its containers' and sidecars' reported resources, summed, or, for a
    resource it sets at pod level, what the kubelet reports applied there (status.resources)."""
    total: Counter[str] = Counter()
    status_of = pod.get("status") or {}
    sidecars = {c.get("name") for c in podstate.sidecars(pod)}
    for status in [
        *(status_of.get("containerStatuses") or []),
        *(s for s in status_of.get("initContainerStatuses") or [] if s.get("name") in sidecars),
    ]:
        total.update(_container_amounts(status, "requests"))
    return {**total, **_container_amounts(status_of, "requests")}


def node_hold(
    node: Mapping[str, Any], pod: Mapping[str, Any], resized: Mapping[str, Any], others: Iterable[Mapping[str, Any]]
) -> Hold | None:
    """Whether the node lacks the room an increase of `pod`'s requests (to the `resized` spec)
    needs, counting each of the `others` (the node's other live pods) at the larger of its spec
    requests and what its containers have."""
    with contextlib.suppress(QuantityError):
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        after, growing = _growing(pod, resized)
        growing = [r for r in growing if r in allocatable]
        if not growing:
            return None
        used = {r: 0 for r in growing}
        for other in others:
            spec_totals, actual = pod_totals(other.get("spec") or {}), _status_requests(other)
            for r in growing:
                used[r] += max(spec_totals.get(("requests", r), 0), actual.get(r, 0))
        for r in growing:
            want, total = after.get(("requests", r), 0), _amount(r, allocatable[r])
            room = total - used[r]
            needs = f"{r}: needs {_show(r, want)}"
            if want > total:  # what the kubelet calls Infeasible: never, until the node grows
                detail = f"{needs}, more than the node's {allocatable[r]} allocatable"
                return Hold("NodeHeadroom", _name(node), detail, f"{r} beyond allocatable")
            if want > room:  # Deferred: once other pods free room
                detail = f"{needs}, {_show(r, max(room, 0))} free of {allocatable[r]} allocatable"
                return Hold("NodeHeadroom", _name(node), detail, r)
    return None


def fits_allocatable(node: Mapping[str, Any], spec: Mapping[str, Any]) -> bool:
    """Whether the `spec`'s requests and overhead are within the node's allocatable, the other pods
    not counted: the 1.36+ apiserver's own check of a pods/resize request (PodResizeValidator)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    overhead = spec.get("overhead") or {}
    with contextlib.suppress(QuantityError):
        totals = pod_totals(spec)
        return all(
            totals.get(("requests", r), 0) + _amount(r, overhead.get(r, "0")) <= _amount(r, allocatable.get(r, "0"))
            for r in _RESOURCES
        )
    return False


def _growing(pod: Mapping[str, Any], resized: Mapping[str, Any]) -> tuple[Totals, list[str]]:
    """The ``resized`` spec's totals, and the resources whose requests it grows."""
    before, after = pod_totals(pod.get("spec") or {}), pod_totals(resized)
    return after, [r for r in _RESOURCES if after.get(("requests", r), 0) > before.get(("requests", r), 0)]


def critical_hold(pod: Mapping[str, Any], resized: Mapping[str, Any]) -> Hold | None:
    """An increase of a pod at system-cluster-critical priority or above (held unless allowed)."""
    priority = (pod.get("spec") or {}).get("priority")
    if not isinstance(priority, int) or priority < CRITICAL_PRIORITY:
        return None
    try:
        growing = _growing(pod, resized)[1]
    except QuantityError:
        return None
    if not growing:
        return None
    return Hold(
        "CriticalPriority",
        str(priority),
        f"pod priority {priority} is system-critical: growing its {' and '.join(growing)} in place may "
        f"make the kubelet evict other pods (--upsize-critical-pods allows it)",
        "upsize",
    )
