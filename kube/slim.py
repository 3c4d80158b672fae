"""Projections of API objects down to the fields the reconciler reads.

A cached object keeps what the pure core and the preflight read and drops the rest (env,
volumes, probes, managedFields, ...), most of a pod's size. String values that pods of one
workload share (namespace, labels, annotation values, owner, node name, quantities, phase,
condition reasons) are interned: the JSON decoder makes a fresh copy of each in each pod, a
large share of the cache at scale.
"""

from __future__ import annotations

from sys import intern
from typing import Any

Obj = dict[str, Any]  # a Kubernetes object as decoded JSON (the one alias for it)

_DROPPED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
_RESIZE_CONDITIONS = ("PodResizePending", "PodResizeInProgress")
# What reconciler.outcome reads of a resize condition.
_CONDITION_FIELDS = ("type", "reason", "message", "observedGeneration", "lastTransitionTime")


def _shared(value: Any) -> Any:
    """`value` with its strings replaced by equal interned ones: a string, or the string values of
    a mapping (labels, annotations, an owner reference) and of its mappings (a resources' requests
    and limits), in place: rebuilding each mapping would cost more than the interning."""
    if type(value) is str:
        return intern(value)
    if type(value) is dict:
        for k, v in value.items():
            if type(v) is str:
                value[k] = intern(v)
            elif type(v) is dict:
                _shared(v)
    return value


def slim_pod(pod: Obj) -> Obj:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    slim_meta: Obj = {
        "name": meta.get("name"),
        "generateName": _shared(meta.get("generateName")),  # bound by the webhook's originals MAC
        "namespace": _shared(meta.get("namespace")),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
        "generation": meta.get("generation"),
        "labels": _shared(meta.get("labels") or {}),
        "annotations": _shared(
            annotations
            if _DROPPED_ANNOTATION not in annotations
            else {k: v for k, v in annotations.items() if k != _DROPPED_ANNOTATION}
        ),
        "ownerReferences": [_shared(o) for o in meta.get("ownerReferences") or [] if o.get("controller")],
    }
    if meta.get("deletionTimestamp"):
        slim_meta["deletionTimestamp"] = meta["deletionTimestamp"]
    slim_spec: Obj = {
        "nodeName": _shared(spec.get("nodeName")),
        "containers": [_slim_container(c) for c in spec.get("containers") or []],
        "initContainers": [_slim_container(c) for c in spec.get("initContainers") or []],
    }
    if spec.get("schedulingGates"):  # (never on a bound pod: the scheduler waits for them to go)
        slim_spec["schedulingGates"] = [_shared(g.get("name")) for g in spec["schedulingGates"] if type(g) is dict]
    # priority: an upsize of a critical pod may evict others. What a ResourceQuota's scopes match
    # a pod by (the preflight charges a resize to the quotas that match it): its priority class, a
    # deadline (Terminating) and cross-namespace affinity.
    for key in ("priority", "activeDeadlineSeconds"):
        if spec.get(key) is not None:
            slim_spec[key] = spec[key]
    for key in ("nodeSelector", "priorityClassName", "resources"):
        if spec.get(key):
            slim_spec[key] = _shared(spec[key])
    affinity = {k: v for k, v in (spec.get("affinity") or {}).items() if k in ("podAffinity", "podAntiAffinity")}
    if affinity:
        slim_spec["affinity"] = affinity
    slim_status: Obj = {
        "phase": _shared(status.get("phase")),
        "qosClass": _shared(status.get("qosClass")),
        "containerStatuses": [_slim_container_status(s) for s in status.get("containerStatuses") or []],
        "conditions": [
            {k: _shared(c[k]) for k in _CONDITION_FIELDS if k in c}
            for c in status.get("conditions") or []
            if c.get("type") in _RESIZE_CONDITIONS
        ],
    }
    if status.get("observedGeneration") is not None:
        slim_status["observedGeneration"] = status["observedGeneration"]
    sidecars = {c.get("name") for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"}
    if sidecars:  # what a sidecar has (resized in place like a container)
        slim_status["initContainerStatuses"] = [
            _slim_container_status(s) for s in status.get("initContainerStatuses") or [] if s.get("name") in sidecars
        ]
    if status.get("resources"):  # what the pod level has (kubelets that resize it)
        slim_status["resources"] = _shared(status["resources"])
    return {"metadata": slim_meta, "spec": slim_spec, "status": slim_status}


def slim_unbound_pod(pod: Obj) -> Obj:
    """A pod not bound to a node yet. Held by scheduling gates: what the baseline authority reads
    to bind its originals (reconciler.gated: identity, annotations, generation, the resources);
    otherwise (waiting for the scheduler, nothing to do) its name and resourceVersion only."""
    spec = pod.get("spec") or {}
    if not spec.get("schedulingGates"):
        meta = pod.get("metadata") or {}
        return {
            "metadata": {
                "name": meta.get("name"),
                "namespace": _shared(meta.get("namespace")),
                "resourceVersion": meta.get("resourceVersion"),
                "annotations": {},
            },
            "spec": {},
        }
    slim = slim_pod(pod)
    del slim["metadata"]["labels"]
    return {"metadata": slim["metadata"], "spec": slim["spec"]}


def _slim_container(container: Obj) -> Obj:
    slim: Obj = {"name": _shared(container.get("name")), "resources": _shared(container.get("resources") or {})}
    if container.get("resizePolicy"):
        slim["resizePolicy"] = [_shared(p) for p in container["resizePolicy"]]
    if container.get("restartPolicy"):
        slim["restartPolicy"] = _shared(container["restartPolicy"])
    return slim


def _slim_container_status(status: Obj) -> Obj:
    return {
        "name": _shared(status.get("name")),
        "resources": _shared(status.get("resources")),
        "running": "running" in (status.get("state") or {}),
    }


def slim_node(node: Obj) -> Obj:
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    allocatable = status.get("allocatable") or {}
    slim: Obj = {
        "metadata": {
            "name": meta.get("name"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": meta.get("labels") or {},
        },
        "status": {"allocatable": {k: allocatable[k] for k in ("cpu", "memory") if k in allocatable}},
    }
    features = status.get("declaredFeatures")
    if type(features) is list:  # whether the node resizes pod-level resources (resizer.plan)
        slim["status"]["declaredFeatures"] = [_shared(f) for f in features]
    return slim


def slim_metadata(obj: Obj) -> Obj:
    """An object's name, namespace and resourceVersion: all an informer's cache needs of its metadata."""
    meta = obj.get("metadata") or {}
    return {key: meta.get(key) for key in ("name", "namespace", "resourceVersion")}


def slim_limit_range(obj: Obj) -> Obj:
    """A LimitRange reduced to its items that bound containers and pods (what a resize is checked
    against; both programs' preflight reads no other type)."""
    return {
        "metadata": slim_metadata(obj),
        "spec": {
            "limits": [
                item for item in (obj.get("spec") or {}).get("limits") or [] if item.get("type") in ("Container", "Pod")
            ]
        },
    }


def slim_quota(obj: Obj) -> Obj:
    """A ResourceQuota reduced to what a resize is charged against: its hard limits, scopes and usage."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return {
        "metadata": slim_metadata(obj),
        "spec": {k: spec[k] for k in ("hard", "scopes", "scopeSelector") if spec.get(k)},
        "status": {"hard": status.get("hard") or {}, "used": status.get("used") or {}},
    }


def status_fingerprint(pod: Obj) -> tuple[Any, ...]:
    """What of a pod's status decides whether a resize can be attempted again: the apiserver tells
    a node without resize support by running containers that report no resources; when that
    changes (kubelet upgraded, container restarted) the pod is worth another try."""
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return (
        pod.get("status", {}).get("phase"),
        tuple((s.get("running"), s.get("resources") is not None) for s in statuses),
    )
