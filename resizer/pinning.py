"""Sizing at admission: the node type a pod is pinned to when it is created, and its size there.

A pod's machine family is often known before it is scheduled: a DaemonSet pod is pinned to
its node (required node affinity ``matchFields metadata.name In [<node>]``), a pod may be
created with ``spec.nodeName``, and a ``nodeSelector`` or a required node affinity may pin the
node-type label. When every node type the pod may run on has the same performance (per
resource, in the rule block that applies to the pod), its size there is known at CREATE: the
webhook writes it into the pod (:func:`admission_sizing`, the same :func:`resizer.plan.plan_resize`
the reconciler uses, from the spec as sent). Anything else (no pin, types of different
performance, an unknown node or type) is left to the reconciler after binding.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from resizer.config import CompiledConfig, Policy, resolve_policy
from resizer.originals import originals_from_spec_annotations
from resizer.plan import POD_LEVEL, ResizePlan, plan_resize, resized_spec
from resizer.podstate import SPEC_FIELD, is_sidecar, original_key, pod_original_key, without_controller_owned
from resizer.preflight import limit_range_hold
from resizer.quantity import RESOURCES, QuantityError, coerce_quantity, format_cpu, format_memory

# node name -> its node-type label value (None: the node has no such label)
NodeTypes = Mapping[str, str | None]
_NODE_NAME_FIELD = "metadata.name"


def pinned_types(pod: Mapping[str, Any], nodes: NodeTypes, label: str) -> frozenset[str] | None:
    """The node types the pod can only run on, as its spec says at admission; None when it does
    not say (or names a node that is not known, or not labelled). ``spec.nodeName``, the
    ``nodeSelector`` on ``label`` and the required node affinity (terms ORed, each term's
    expressions and fields ANDed) all hold, so their sets intersect."""
    spec = pod.get("spec") or {}
    sets: list[frozenset[str] | None] = []
    node_name = spec.get("nodeName")
    if node_name:
        sets.append(_types_of_nodes([node_name], nodes))
    selector = spec.get("nodeSelector") or {}
    if isinstance(selector, Mapping) and isinstance(selector.get(label), str):
        sets.append(frozenset([selector[label]]))
    terms = (
        ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
        or {}
    ).get("nodeSelectorTerms")
    if terms:
        sets.append(_terms_types(terms, nodes, label))
    known = [s for s in sets if s is not None]
    if not known or (node_name and sets[0] is None):
        return None
    return frozenset.intersection(*known) or None


def pinned_node_type(pod: Mapping[str, Any], nodes: NodeTypes, config: CompiledConfig, label: str) -> str | None:
    """The node type the pod will run on, if admission can tell: every type it is pinned to is in
    its policy with the same cpu and memory performance (the least name of them: they size alike)."""
    types = pinned_types(pod, nodes, label)
    if types is None:
        return None
    profiles = resolve_policy(config, pod).node_types
    if not types <= profiles.keys():
        return None
    return min(types) if len({(profiles[t].cpu_perf, profiles[t].mem_perf) for t in types}) == 1 else None


def _types_of_nodes(names: Iterable[Any], nodes: NodeTypes) -> frozenset[str] | None:
    types = [nodes.get(name) if isinstance(name, str) else None for name in names]
    if None in types:
        return None  # a node not known, or without the label
    return frozenset(t for t in types if t is not None) or None


def _terms_types(terms: Any, nodes: NodeTypes, label: str) -> frozenset[str] | None:
    """The union of what each term allows; None when any term does not pin a type."""
    if not isinstance(terms, list):
        return None
    allowed = [_term_types(term, nodes, label) if isinstance(term, Mapping) else None for term in terms]
    if None in allowed:
        return None
    return frozenset(t for types in allowed if types is not None for t in types) or None


def _term_types(term: Mapping[str, Any], nodes: NodeTypes, label: str) -> frozenset[str] | None:
    """The types one term allows (its requirements ANDed); None when none of them pins a type.
    Requirements on other labels or fields only narrow the nodes further: ignored."""
    result: frozenset[str] | None = None
    for group, key in (("matchExpressions", label), ("matchFields", _NODE_NAME_FIELD)):
        for expr in term.get(group) or []:
            if not isinstance(expr, Mapping) or expr.get("key") != key or expr.get("operator") != "In":
                continue
            values = expr.get("values")
            if not isinstance(values, list):
                continue
            if group == "matchExpressions":
                allowed: frozenset[str] | None = frozenset(v for v in values if isinstance(v, str))
            else:
                allowed = _types_of_nodes(values, nodes)
            if allowed is None:
                return None  # a node we do not know: its type cannot be told
            result = allowed if result is None else result & allowed
    return result


@dataclass(frozen=True)
class AdmissionSizing:
    """The pod's size on ``node_type`` (``plan``), as JSONPatch ops on the pod as sent (``ops``)
    and as the spec values after them (``sized``, in ``originals_from_spec_annotations`` form:
    what the sized-scope MAC covers)."""

    node_type: str
    plan: ResizePlan
    ops: tuple[dict[str, Any], ...]
    sized: Mapping[str, str]


def admission_sizing(pod: Mapping[str, Any], config: CompiledConfig, node_type: str) -> AdmissionSizing | None:
    """The sizing of the pod as sent for ``node_type``, by the reconciler's own rules and default
    (the spec is the baseline; restart-policy resources left alone); None unless the plan is
    ``Resize``. Pod-level resources are sized with the containers: at CREATE they need only the
    PodLevelResources feature (the apiserver drops them without it, before admission), not the
    node's in-place pod-level resize. Raises like :func:`resizer.plan.plan_resize`."""
    as_sent = _without_controller_owned(pod)  # the spec as sent is the baseline, whatever original-* it carries
    plan = plan_resize(as_sent, resolve_policy(config, as_sent), node_type, pod_level=True)
    if plan.outcome != "Resize":
        return None
    return AdmissionSizing(
        node_type,
        plan,
        tuple(_ops(pod, plan)),
        originals_from_spec_annotations({**pod, "spec": resized_spec(pod, plan.changed)}),
    )


def _ops(pod: Mapping[str, Any], plan: ResizePlan) -> list[dict[str, Any]]:
    spec = pod.get("spec") or {}
    index = {
        (field, c.get("name")): i
        for field in ("containers", "initContainers")
        for i, c in enumerate(spec.get(field) or [])
    }
    ops: list[dict[str, Any]] = []
    added: set[str] = set()  # the requests/limits maps an op creates (the next resource adds into it)
    for change in plan.changed:
        if change.container == POD_LEVEL:
            base, resources = "/spec/resources", spec.get("resources") or {}
        else:
            field = "initContainers" if change.sidecar else "containers"
            position = index[(field, change.container)]
            base = f"/spec/{field}/{position}/resources"
            resources = spec[field][position].get("resources") or {}
        for kind, amount in (("requests", change.desired_request), ("limits", change.desired_limit)):
            if amount is None:
                continue
            value = (format_cpu if change.resource == "cpu" else format_memory)(amount)
            if isinstance(resources.get(kind), Mapping) or f"{base}/{kind}" in added:
                ops.append({"op": "add", "path": f"{base}/{kind}/{change.resource}", "value": value})
            else:  # (the apiserver defaults requests from limits before admission: not expected)
                ops.append({"op": "add", "path": f"{base}/{kind}", "value": {change.resource: value}})
                added.add(f"{base}/{kind}")
    return ops


def plan_bound_pod(
    pod: Mapping[str, Any],
    policy: Policy,
    node_type: str,
    resize_restart_containers: bool,
    pod_level: bool,
    sized_at_admission: bool,
) -> ResizePlan:
    """:func:`resizer.plan.plan_resize` for a bound pod; ``sized_at_admission``: its baseline is the
    webhook's verified sized record. Such a pod with pod-level resources was created at its size at
    both levels: where its node cannot resize pod level, it is aligned while both levels hold the
    plan, and only a change (e.g. a config edit) is left alone there."""
    plan = plan_resize(pod, policy, node_type, resize_restart_containers, pod_level)
    if plan.outcome != "PodLevelResources" or not sized_at_admission:
        return plan
    at_both = plan_resize(pod, policy, node_type, resize_restart_containers, pod_level=True)
    return at_both if at_both.outcome == "AlreadyAligned" else plan


def admission_hold(
    pod: Mapping[str, Any], sizing: AdmissionSizing, limit_ranges: Iterable[Mapping[str, Any]]
) -> str | None:
    """Why the pod is not to be created at ``sizing`` (None: it may be). The apiserver judges
    the pod as mutated against LimitRanges and ResourceQuotas at CREATE, where a refusal would
    block its creation: a size that grows anything (a quota the author's size fits may not fit
    it) or that a LimitRange of its namespace refuses is left to the reconciler after binding,
    whose preflight holds such a resize instead."""
    if (pod.get("spec") or {}).get("schedulingGates"):
        # Removing a gate changes the spec (generation 2) before the pod can be bound: the sized
        # record, trusted only on a never-changed spec, would be void by the time the reconciler
        # sees the pod. Stamped only, its originals equal its spec whatever the generation.
        return "the pod has scheduling gates (removing one changes its spec, which voids a size given at CREATE)"
    grown = [
        c
        for c in sizing.plan.changed
        if c.desired_request > (c.current_request or 0)
        or (c.desired_limit is not None and c.current_limit is not None and c.desired_limit > c.current_limit)
    ]
    if grown:
        what = "the pod level" if grown[0].container == POD_LEVEL else f"{grown[0].container}'s"
        return f"the size grows {what} {grown[0].resource} (a ResourceQuota is judged at CREATE)"
    hold = limit_range_hold(resized_spec(pod, sizing.plan.changed), limit_ranges)
    return None if hold is None else f"LimitRange {hold.name} would refuse the size: {hold.detail}"


# -- the webhook called again on its own answer ----------------------------------------------
_POD_LEVEL_FIELD = "resources"  # spec.resources: the pod level's holder, at /spec


def _holders(spec: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    """(spec field, index, holder) of every place ``original-*`` values describe: the containers,
    the sidecars (restartable init containers) and the pod level (``spec`` itself, index -1)."""
    holders = [("containers", i, c) for i, c in enumerate(spec.get("containers") or [])]
    holders += [("initContainers", i, c) for i, c in enumerate(spec.get("initContainers") or []) if is_sidecar(c)]
    return [*holders, (_POD_LEVEL_FIELD, -1, spec)]


def _wanted(field: str, holder: Mapping[str, Any], values: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """The requests and limits ``values`` (``originals_from_spec_annotations`` form) give one holder."""
    wanted: dict[str, dict[str, str]] = {}
    for singular, kind in SPEC_FIELD.items():
        for resource in RESOURCES:
            key = (
                pod_original_key(resource, singular)
                if field == _POD_LEVEL_FIELD
                else original_key(holder["name"], resource, singular)
            )
            if key in values:
                wanted.setdefault(kind, {})[resource] = values[key]
    return wanted


def as_authored(pod: Mapping[str, Any], originals: Mapping[str, str]) -> dict[str, Any]:
    """``pod`` as its author wrote it, from the originals the webhook recorded when it sized it
    (:func:`resizer.integrity.admitted_originals`): recorded values back in the spec, the others as
    the spec has them (a later webhook's: part of the pod as created), no controller-owned annotation."""
    spec: dict[str, Any] = dict(pod.get("spec") or {})
    lists = {field: list(spec.get(field) or []) for field in ("containers", "initContainers")}
    for field, index, holder in _holders(pod.get("spec") or {}):
        resources = {kind: dict(v or {}) for kind, v in (holder.get("resources") or {}).items()}
        for kind, recorded in _wanted(field, holder, originals).items():
            resources.setdefault(kind, {}).update(recorded)
        if field == _POD_LEVEL_FIELD:
            if resources:
                spec["resources"] = resources
        else:
            lists[field][index] = {**holder, "resources": resources}
    spec.update((field, items) for field, items in lists.items() if field in spec)
    return {**_without_controller_owned(pod), "spec": spec}


def _without_controller_owned(pod: Mapping[str, Any]) -> dict[str, Any]:
    metadata = pod.get("metadata") or {}
    return {**pod, "metadata": {**metadata, "annotations": without_controller_owned(metadata.get("annotations") or {})}}


def values_patch(pod: Mapping[str, Any], values: Mapping[str, str]) -> list[dict[str, Any]]:
    """JSONPatch ops giving ``pod``'s spec exactly the cpu/memory ``values``
    (``originals_from_spec_annotations`` of the spec it is to have): every value that differs by
    quantity set, every value without a key removed; none when the spec holds them already."""
    ops: list[dict[str, Any]] = []
    for field, index, holder in _holders(pod.get("spec") or {}):
        base = "/spec/resources" if field == _POD_LEVEL_FIELD else f"/spec/{field}/{index}/resources"
        wanted = _wanted(field, holder, values)
        resources = holder.get("resources")
        if not isinstance(resources, Mapping):
            if wanted:
                ops.append({"op": "add", "path": base, "value": wanted})
            continue
        for kind in SPEC_FIELD.values():
            have, want = resources.get(kind), wanted.get(kind, {})
            if not isinstance(have, Mapping):
                if want:
                    ops.append({"op": "add", "path": f"{base}/{kind}", "value": want})
                continue
            for resource in RESOURCES:
                current, target = have.get(resource), want.get(resource)
                if target is None and current is not None:
                    ops.append({"op": "remove", "path": f"{base}/{kind}/{resource}"})
                elif target is not None and (current is None or not _same_quantity(current, target)):
                    ops.append({"op": "add", "path": f"{base}/{kind}/{resource}", "value": target})
    return ops


def _same_quantity(current: Any, target: str) -> bool:
    try:
        return coerce_quantity(current) == coerce_quantity(target)
    except QuantityError:
        return bool(current == target)
