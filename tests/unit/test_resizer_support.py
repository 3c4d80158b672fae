"""Builders shared by the test_resizer_* modules (this module holds no tests)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from resizer import SAMPLE_CONFIG, Bounds, CompiledConfig, NodeProfile, Policy, load_config

GiB = 1024**3
MiB = 1024**2


def sample_config() -> CompiledConfig:
    return load_config(SAMPLE_CONFIG)


def policy(
    node_perfs: Mapping[str, tuple[Fraction | int | float, Fraction | int | float]] | None = None,
    baseline: str = "n2d",
    cpu_bounds: tuple[int, int] = (50, 16_000),
    memory_bounds: tuple[int, int] = (64 * MiB, 32 * GiB),
    rule: str = "global",
) -> Policy:
    """A Policy built directly; perfs given as (cpuPerf, memPerf), floats via str()."""
    perfs = node_perfs or {"n2d": (1, 1), "n4": ("1.25", 1), "c3": ("1.30", 1)}
    node_types = {
        name: NodeProfile(name, Fraction(str(cpu)), Fraction(str(memory))) for name, (cpu, memory) in perfs.items()
    }
    return Policy(rule, baseline, MappingProxyType(node_types), Bounds(*cpu_bounds), Bounds(*memory_bounds))


def container(
    name: str = "app",
    requests: Mapping[str, str] | None = None,
    limits: Mapping[str, str] | None = None,
    restart_on: tuple[str, ...] = (),
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests is not None:
        resources["requests"] = dict(requests)
    if limits is not None:
        resources["limits"] = dict(limits)
    spec: dict[str, Any] = {"name": name, "image": "registry.example/app:1", "resources": resources}
    if restart_on:
        spec["resizePolicy"] = [
            {"resourceName": resource, "restartPolicy": "RestartContainer" if resource in restart_on else "NotRequired"}
            for resource in ("cpu", "memory")
        ]
    return spec


def make_pod(
    *containers: dict[str, Any],
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    qos_class: str | None = None,
    owner_kind: str | None = "ReplicaSet",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "web-5d8f7", "namespace": "default"}
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    if labels is not None:
        metadata["labels"] = dict(labels)
    if owner_kind is not None:
        api_version = "batch/v1" if owner_kind == "Job" else "apps/v1"
        metadata["ownerReferences"] = [
            {"apiVersion": api_version, "kind": owner_kind, "name": "web", "uid": "1", "controller": True}
        ]
    spec: dict[str, Any] = {"containers": list(containers) or [container()]}
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    if init_containers is not None:
        spec["initContainers"] = init_containers
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if qos_class is not None:
        pod["status"] = {"qosClass": qos_class}
    return pod


def guaranteed(name: str = "app", cpu: str = "1", memory: str = "1Gi") -> dict[str, Any]:
    return container(name, {"cpu": cpu, "memory": memory}, {"cpu": cpu, "memory": memory})


def apply_resize_patch(pod: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """What the API server stores after the strategic merge patch of a pods/resize call."""
    patched = copy.deepcopy(dict(pod))
    by_name = {entry["name"]: entry for entry in patched["spec"]["containers"]}
    for entry in (patch.get("spec") or {}).get("containers") or []:
        resources = by_name[entry["name"]].setdefault("resources", {})
        for kind, values in entry.get("resources", {}).items():
            resources.setdefault(kind, {}).update(values)
    return patched


def with_annotations(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> dict[str, Any]:
    annotated = copy.deepcopy(dict(pod))
    annotated["metadata"].setdefault("annotations", {}).update(annotations)
    return annotated
