"""What the drills deploy, and the exact end state it must reach.

The expected size of every pod comes from the pure core (`resizer.load_config`,
`resolve_policy`, `plan_resize`) applied to the pod template its author wrote and
its node's type, never from what the reconciler did.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from devkit.configs import DESIGN_NODE_TYPES, config_yaml
from devkit.kube import Kube, container
from resizer import (
    coerce_quantity,
    is_controller_owned_key,
    load_config,
    originals_from_spec_annotations,
    plan_resize,
    resolve_policy,
    to_bytes,
    to_millicores,
)
from resizer.podstate import APPLIED_INSTANCE_TYPE, PREFIX, SKIP

TEMPLATE_LABEL = "drill.workload-resizer.io/template"
WORKLOAD_LABEL = "drill.workload-resizer.io/workload"


# The design's sample node types with bounds loose enough that no drill pod is clamped.
def drill_config(extra_node_types: dict[str, tuple[float, float]] | None = None) -> str:
    return config_yaml(
        node_types={**DESIGN_NODE_TYPES, "c3": (1.30, 1.1)},
        extra_node_types=extra_node_types,
        cpu=("10m", "16"),
        memory=("16Mi", "32Gi"),
    )


CONFIG = drill_config()


@dataclass(frozen=True, eq=False)  # hashed by identity: the templates are module constants
class Template:
    """A pod template: what the author wrote."""

    name: str
    containers: tuple[dict[str, Any], ...]
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def eligible(self) -> bool:
        return self.annotations.get(SKIP, "").lower() != "true"

    def pod_spec(self, node_selector: dict[str, str] | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": copy.deepcopy(list(self.containers)), "terminationGracePeriodSeconds": 0}
        if node_selector:
            spec["nodeSelector"] = dict(node_selector)
        return spec


GUARANTEED = Template(
    "guaranteed",
    (container("app", requests={"cpu": "100m", "memory": "128Mi"}, limits={"cpu": "100m", "memory": "128Mi"}),),
)
BURSTABLE = Template(
    "burstable",
    (
        container("app", requests={"cpu": "250m", "memory": "200Mi"}, limits={"cpu": "1", "memory": "400Mi"}),
        container("sidecar", requests={"cpu": "50m", "memory": "64Mi"}),
    ),
)
SKIPPED = Template(
    "skipped", (container("app", requests={"cpu": "300m", "memory": "96Mi"}),), annotations={SKIP: "true"}
)
TEMPLATES = {t.name: t for t in (GUARANTEED, BURSTABLE, SKIPPED)}


def replicaset(name: str, template: Template, replicas: int, node_selector: dict[str, str]) -> dict[str, Any]:
    labels = {WORKLOAD_LABEL: name, TEMPLATE_LABEL: template.name}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {WORKLOAD_LABEL: name}},
            "template": {
                "metadata": {"labels": labels, "annotations": dict(template.annotations)},
                "spec": template.pod_spec(node_selector),
            },
        },
    }


def deployment(name: str, template: Template, replicas: int, node_selector: dict[str, str]) -> dict[str, Any]:
    manifest = replicaset(name, template, replicas, node_selector)
    manifest["kind"] = "Deployment"
    manifest["spec"]["strategy"] = {"type": "RollingUpdate"}
    return manifest


# ----------------------------------------------------------------------------- expectations


def _units(resource: str, value: Any) -> int | str:
    if resource == "cpu":
        return to_millicores(coerce_quantity(value))
    if resource == "memory":
        return to_bytes(coerce_quantity(value))
    return str(value)


def resource_units(containers: list[dict[str, Any]]) -> dict[tuple[str, str, str], int | str]:
    """{(container, requests|limits, resource): amount} of a container list."""
    out: dict[tuple[str, str, str], int | str] = {}
    for c in containers:
        for kind in ("requests", "limits"):
            for resource, value in ((c.get("resources") or {}).get(kind) or {}).items():
                out[(c["name"], kind, resource)] = _units(resource, value)
    return out


@dataclass(frozen=True)
class Expected:
    originals: dict[str, str]  # the original-* annotations
    resources: dict[tuple[str, str, str], int | str]
    needs_resize: bool


class Expectations:
    """The expected end state of each (template, node type) under one config."""

    def __init__(self, config_text: str = CONFIG) -> None:
        self.config = load_config(config_text)
        self._cache: dict[tuple[str, str], Expected] = {}

    def of(self, template: Template, node_type: str) -> Expected:
        key = (template.name, node_type)
        if key not in self._cache:
            self._cache[key] = self._compute(template, node_type)
        return self._cache[key]

    def _compute(self, template: Template, node_type: str) -> Expected:
        authored = {"metadata": {"annotations": dict(template.annotations)}, "spec": template.pod_spec()}
        originals = originals_from_spec_annotations(authored)
        stamped = copy.deepcopy(authored)
        stamped["metadata"]["annotations"].update(originals)
        plan = plan_resize(stamped, resolve_policy(self.config, stamped), node_type)
        if plan.outcome not in ("Resize", "AlreadyAligned"):
            raise ValueError(f"drill template {template.name} on {node_type}: plan {plan.outcome}")
        resources = resource_units(list(template.containers))
        for change in plan.changes:
            if change.skipped is None:
                resources[(change.container, "requests", change.resource)] = change.desired_request
                if change.desired_limit is not None:
                    resources[(change.container, "limits", change.resource)] = change.desired_limit
        return Expected(originals, resources, bool(plan.patch))


# ----------------------------------------------------------------------------- the check


@dataclass
class EndState:
    pods: int = 0
    eligible: int = 0
    skipped: int = 0
    needed_resize: int = 0
    aligned: int = 0
    not_actuated: int = 0  # spec right, the (fake) kubelet has not reported it yet
    effective_resizes: int = 0  # sum of (metadata.generation - 1) over eligible pods
    resized_more_than_once: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not self.problems

    def summary(self) -> dict[str, Any]:
        return {
            "pods": self.pods,
            "eligible": self.eligible,
            "skip_annotated": self.skipped,
            "needed_resize": self.needed_resize,
            "aligned": self.aligned,
            "not_actuated": self.not_actuated,
            "effective_resizes": self.effective_resizes,
            "resized_more_than_once": self.resized_more_than_once,
            "problems": len(self.problems),
            "first_problems": self.problems[:8],
        }


def list_pods(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = []
    params: dict[str, str] = {"limit": "1000"}
    while True:
        page = kube.get(f"/api/v1/namespaces/{namespace}/pods", **params)
        pods += page["items"]
        cont = page["metadata"].get("continue")
        if not cont:
            return pods
        params["continue"] = cont


def check_end_state(
    kube: Kube,
    namespace: str,
    node_types: dict[str, str | None],
    expectations: Expectations,
    count_resizes: bool = True,
) -> EndState:
    """Every live pod of `namespace` against the pure core's verdict.

    Eligible pods: exactly the desired size (spec and kubelet-reported status), original-*
    annotations exactly what the author's template gives, applied-instance-type = the node's
    type. Skip-annotated pods: untouched (no controller-owned annotation, template size).
    With count_resizes, also: metadata.generation - 1 (the apiserver bumps it on every
    effective pods/resize) is 1 for pods that needed a resize and 0 otherwise.
    """
    state = EndState()

    def problem(pod_name: str, text: str) -> None:
        state.problems.append(f"{pod_name}: {text}")

    for pod in list_pods(kube, namespace):
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        state.pods += 1
        name = meta["name"]
        template = TEMPLATES.get((meta.get("labels") or {}).get(TEMPLATE_LABEL, ""))
        if template is None:
            problem(name, "not a drill pod (no template label)")
            continue
        annotations = meta.get("annotations") or {}
        owned = {k: v for k, v in annotations.items() if is_controller_owned_key(k)}
        actual = resource_units(pod["spec"]["containers"])
        resizes = int(meta.get("generation") or 1) - 1
        if not template.eligible:
            state.skipped += 1
            if owned:
                problem(name, f"skip-annotated pod was touched: {sorted(owned)}")
            if actual != resource_units(list(template.containers)):
                problem(name, "skip-annotated pod was resized")
            continue
        state.eligible += 1
        node = pod["spec"].get("nodeName")
        if not node:
            problem(name, "never bound")
            continue
        node_type = node_types.get(node)
        if node_type is None:
            problem(name, f"node {node} has no type label")
            continue
        want = expectations.of(template, node_type)
        state.needed_resize += want.needs_resize
        ok = True
        originals = {k: v for k, v in owned.items() if k.startswith(PREFIX + "original-")}
        if originals != want.originals:
            ok = False
            problem(name, f"originals {originals} != authored {want.originals}")
        if annotations.get(APPLIED_INSTANCE_TYPE) != node_type:
            ok = False
            problem(name, f"applied-instance-type {annotations.get(APPLIED_INSTANCE_TYPE)!r} != node type {node_type}")
        if actual != want.resources:
            ok = False
            problem(name, f"on {node_type}: spec {_show(actual)} != desired {_show(want.resources)}")
        reported = _status_units(pod)
        if reported is not None and reported != {k: v for k, v in want.resources.items() if k[2] in ("cpu", "memory")}:
            ok = False
            state.not_actuated += 1
            problem(name, f"kubelet status {_show(reported)} != desired (not actuated)")
        state.effective_resizes += resizes
        if resizes > 1:
            state.resized_more_than_once += 1
        if count_resizes and resizes != int(want.needs_resize):
            ok = False
            problem(
                name,
                f"resized {resizes} times (generation {meta.get('generation')}), expected {int(want.needs_resize)}",
            )
        state.aligned += ok
    return state


def _status_units(pod: dict[str, Any]) -> dict[tuple[str, str, str], int | str] | None:
    statuses = pod.get("status", {}).get("containerStatuses") or []
    if not statuses or any(s.get("resources") is None for s in statuses):
        return None  # not running yet / node without resize support: nothing reported
    return resource_units([{"name": s["name"], "resources": s["resources"]} for s in statuses])


def _show(units: dict[tuple[str, str, str], int | str]) -> str:
    return ", ".join(f"{c}.{k}.{r}={v}" for (c, k, r), v in sorted(units.items()))
