"""Projections of API objects down to the fields the reconciler reads.

A cached pod keeps what the pure core looks at (owner, labels, annotations,
node selector, container resources and resize policies, QoS class, whether the
kubelet reports container resources, the resize conditions and the observed
generation; a node's labels and allocatable cpu/memory) and drops the rest (env, volumes, probes,
managedFields, ...), which is most of a pod's size.
"""
from __future__ import annotations

from typing import Any

Obj = dict[str, Any]     # a Kubernetes object as decoded JSON (the one alias for it)

_DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)
_RESIZE_CONDITIONS = ("PodResizePending", "PodResizeInProgress")
# What reconciler.outcome reads of a resize condition.
_CONDITION_FIELDS = ("type", "reason", "message", "observedGeneration", "lastTransitionTime")


def slim_pod(pod: Obj) -> Obj:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    annotations = meta.get("annotations") or {}
    if any(k in annotations for k in _DROPPED_ANNOTATIONS):
        annotations = {k: v for k, v in annotations.items() if k not in _DROPPED_ANNOTATIONS}
    slim_meta: Obj = {
        "name": meta.get("name"),
        "generateName": meta.get("generateName"),     # bound by the webhook's originals MAC
        "namespace": meta.get("namespace"),
        "uid": meta.get("uid"),
        "resourceVersion": meta.get("resourceVersion"),
        "generation": meta.get("generation"),
        "labels": meta.get("labels") or {},
        "annotations": annotations,
        "ownerReferences": [o for o in meta.get("ownerReferences") or [] if o.get("controller")],
    }
    if meta.get("deletionTimestamp"):
        slim_meta["deletionTimestamp"] = meta["deletionTimestamp"]
    slim_spec: Obj = {
        "nodeName": spec.get("nodeName"),
        "containers": [_slim_container(c) for c in spec.get("containers") or []],
        "initContainers": [_slim_container(c) for c in spec.get("initContainers") or []],
    }
    if spec.get("nodeSelector"):
        slim_spec["nodeSelector"] = spec["nodeSelector"]
    if spec.get("resources"):
        slim_spec["resources"] = spec["resources"]
    slim_status: Obj = {
        "phase": status.get("phase"),
        "qosClass": status.get("qosClass"),
        "containerStatuses": [
            {"name": s.get("name"), "resources": s.get("resources"),
             "running": "running" in (s.get("state") or {})}
            for s in status.get("containerStatuses") or []
        ],
        "conditions": [{k: c[k] for k in _CONDITION_FIELDS if k in c}
                       for c in status.get("conditions") or [] if c.get("type") in _RESIZE_CONDITIONS],
    }
    if status.get("observedGeneration") is not None:
        slim_status["observedGeneration"] = status["observedGeneration"]
    return {"metadata": slim_meta, "spec": slim_spec, "status": slim_status}


def _slim_container(container: Obj) -> Obj:
    slim: Obj = {"name": container.get("name"), "resources": container.get("resources") or {}}
    if container.get("resizePolicy"):
        slim["resizePolicy"] = container["resizePolicy"]
    if container.get("restartPolicy"):
        slim["restartPolicy"] = container["restartPolicy"]
    return slim


def slim_node(node: Obj) -> Obj:
    meta = node.get("metadata") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return {"metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion"),
                         "labels": meta.get("labels") or {}},
            "status": {"allocatable": {k: allocatable[k] for k in ("cpu", "memory") if k in allocatable}}}


def status_fingerprint(pod: Obj) -> tuple[Any, ...]:
    """What of a pod's status decides whether a resize can be attempted again.

    A node without resize support is detected by the apiserver from running
    containers that report no resources; when that changes (kubelet upgraded,
    container restarted) the pod is worth another try.
    """
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return (pod.get("status", {}).get("phase"),
            tuple((s.get("running"), s.get("resources") is not None) for s in statuses))
