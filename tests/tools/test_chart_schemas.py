"""The real chart against the real OpenAPI of the newest pinned minor, as `make lint` checks it
(devkit/schemas.py): every object of every value set passes, the cert-manager and Prometheus
Operator objects are skipped by name, every template is rendered by some value set, and an object
the apiserver would refuse is refused. The spec comes from the k8s.io/kubernetes Go module (the
module proxy the first time, then Go's module cache); helm is built once (hack/tools build helm).
"""

from __future__ import annotations

import copy
import re

import pytest

from devkit.chart import CHART, ensure_helm, find, template
from devkit.schemas import OpenAPI, Problem, Rendered, check, minor_number, pinned_patches, rendered_chart, swagger_of
from devkit.schemas import value_sets as chart_value_sets

pytestmark = pytest.mark.timeout(1200)  # the first run builds helm and fetches the module

# Rendered only on an upgrade from a chart that rendered the Secret (a `lookup` in the cluster).
RENDERED_ONLY_FROM_A_CLUSTER = {"templates/originals-keys.yaml"}
SKIPPED = {
    "Certificate workload-resizer-ca",
    "Certificate workload-resizer-webhook",
    "Issuer workload-resizer-ca",
    "Issuer workload-resizer-selfsigned",
    "PodMonitor workload-resizer-reconciler",
    "PodMonitor workload-resizer-webhook",
    "PrometheusRule workload-resizer",
}


@pytest.fixture(scope="module")
def helm() -> str:
    return ensure_helm()


@pytest.fixture(scope="module")
def minor() -> str:
    return max(pinned_patches(), key=minor_number)


@pytest.fixture(scope="module")
def openapi(minor: str) -> OpenAPI:
    return OpenAPI(swagger_of(pinned_patches()[minor]))


@pytest.fixture(scope="module")
def value_sets() -> dict[str, dict]:
    return chart_value_sets()


@pytest.fixture(scope="module")
def objects(helm: str, value_sets: dict[str, dict]) -> list[Rendered]:
    return rendered_chart(helm, value_sets)


def test_every_rendered_object_passes_and_the_crds_objects_are_skipped(
    minor: str, openapi: OpenAPI, objects: list[Rendered]
) -> None:
    report = check(minor, openapi, objects)
    assert report.errors == []
    assert report.skipped == SKIPPED
    assert report.checked == len(objects) - sum(1 for o in objects if o.name in SKIPPED) > 50
    kinds = {o.obj["kind"] for o in objects}
    assert {"Deployment", "Pod", "NetworkPolicy", "ValidatingAdmissionPolicy", "PodDisruptionBudget"} <= kinds


def test_every_template_is_rendered_by_some_value_set(helm: str, value_sets: dict[str, dict]) -> None:
    rendered = set()
    for values in value_sets.values():
        text = template(helm, values=values, tests=True).stdout
        rendered |= set(re.findall(r"^# Source: workload-resizer/(\S+)$", text, re.MULTILINE))
    templates = {str(p.relative_to(CHART)) for p in (CHART / "templates").rglob("*.yaml")}
    assert templates - rendered == RENDERED_ONLY_FROM_A_CLUSTER


def test_an_object_the_apiserver_would_refuse_is_refused(minor: str, openapi: OpenAPI, objects: list[Rendered]) -> None:
    defaults = [o.obj for o in objects if "default" in o.value_sets]
    webhook = copy.deepcopy(find(defaults, "Deployment", "workload-resizer-webhook"))
    container = webhook["spec"]["template"]["spec"]["containers"][0]
    container["resource"] = container.pop("resources")
    container["ports"][0]["containerPort"] = "8443"
    webhook["spec"]["strategy"] = {"rollingUpdate": {"maxSurge": 0.5}}
    assert openapi.problems(webhook) == [
        Problem("spec.strategy.rollingUpdate.maxSurge", "must be integer or string, not number"),
        Problem("spec.template.spec.containers[0].ports[0].containerPort", "must be integer, not string"),
        Problem("spec.template.spec.containers[0].resource", "unknown field"),
    ]
    errors = check(minor, openapi, [Rendered(webhook, ["default"])]).errors
    assert errors[2] == (
        f"Kubernetes {minor}: Deployment workload-resizer-webhook (values: default): "
        "spec.template.spec.containers[0].resource: unknown field"
    )
