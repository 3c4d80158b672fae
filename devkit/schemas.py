"""The chart's rendered objects checked offline against the OpenAPI of each Kubernetes minor that
hack/cluster pins, as strictly as the apiserver decodes them with strict field validation
(`make lint`). Not its semantic validation (name and label syntax, enum values the spec does not
list): the server-side dry run of tests/cluster/test_chart.py covers that, on a live cluster.

python -m devkit.schemas                 # every pinned minor
python -m devkit.schemas --minor 1.36

The spec is api/openapi-spec/swagger.json of the k8s.io/kubernetes Go module at the pinned patch,
kept in Go's module cache (fetched through the module proxy the first time). An object's
definition is the one whose x-kubernetes-group-version-kind names its apiVersion and kind; it is
checked with jsonschema (draft 4, the dialect of OpenAPI 2) once made as strict as the apiserver's
decoder: an object with declared properties takes no other field, an IntOrString is an int32 or a
string, a Quantity a number or a string of the quantity grammar. Objects of an API group the minor
does not serve (cert-manager's, the Prometheus Operator's) are skipped, by name.
"""

from __future__ import annotations

import argparse
import ast
import base64
import binascii
import contextlib
import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonschema import Draft4Validator, FormatChecker, ValidationError

from devkit.chart import ensure_helm, render
from devkit.chart_variants import VARIANTS, values_for
from devkit.tools import go_module_dir

REPO = Path(__file__).resolve().parents[1]
HACK_CLUSTER = REPO / "hack" / "cluster"
KUBERNETES_MODULE = "k8s.io/kubernetes"
SWAGGER = Path("api") / "openapi-spec" / "swagger.json"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
GROUP_VERSION_KIND = "x-kubernetes-group-version-kind"

# Value sets only this check renders, beside the server-side dry run's (VARIANTS): the monitoring
# objects (the dry run's cluster has no Prometheus Operator CRDs; test_chart.py checks them
# against those CRDs), and the branches of the templates that no other value set takes.
EXTRA_VALUE_SETS: dict[str, dict[str, Any]] = {
    "monitoring": {
        "monitoring": {
            "podMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
            "prometheusRule": {"enabled": True, "alertLabels": {"team": "platform"}},
            "dashboard": {"enabled": True, "namespace": "monitoring", "annotations": {"grafana_folder": "Platform"}},
        }
    },
    "other-options": {
        "commonLabels": {"team": "platform"},
        "image": {"digest": "sha256:" + "0" * 64},
        "imagePullSecrets": [{"name": "registry"}],
        "originalsKeys": {"existingSecret": "originals-keys"},
        "admissionPolicy": {"validationActions": ["Warn", "Audit"], "exemptUsers": ["break-glass"]},
        "networkPolicy": {"metricsNamespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
        "webhook": {
            "hostNetwork": True,
            "sizeAtAdmission": False,
            "extraEnv": [{"name": "TZ", "value": "UTC"}],
            "podLabels": {"tier": "control"},
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}
            ],
            "serviceAccount": {"annotations": {"example.com/role": "webhook"}},
            "service": {"annotations": {"example.com/lb": "internal"}},
        },
        "reconciler": {
            "hostNetwork": True,
            "extraEnv": [{"name": "TZ", "value": "UTC"}],
            "podLabels": {"tier": "control"},
        },
        "tests": {
            "hostNetwork": True,
            "priorityClassName": "system-cluster-critical",
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            "podLabels": {"tier": "test"},
        },
    },
}

# resource.Quantity's grammar: a signed decimal number, then a binary or decimal SI suffix or an exponent.
_QUANTITY = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][+-]?\d+)?")
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
_JSON_TYPES = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
    (type(None), "null"),
)

FORMATS = FormatChecker(formats=())


@FORMATS.checks("int32")
def _is_int32(value: object) -> bool:
    return not isinstance(value, int) or -(2**31) <= value < 2**31


@FORMATS.checks("int64")
def _is_int64(value: object) -> bool:
    return not isinstance(value, int) or -(2**63) <= value < 2**63


@FORMATS.checks("byte")
def _is_base64(value: object) -> bool:
    if not isinstance(value, str):
        return True
    try:
        base64.b64decode(value, validate=True)
    except binascii.Error:
        return False
    return True


@FORMATS.checks("quantity")
def _is_quantity(value: object) -> bool:
    return not isinstance(value, str) or _QUANTITY.fullmatch(value) is not None


# ---------------------------------------------------------------------------- the spec


def pinned_patches(script: Path = HACK_CLUSTER) -> dict[str, str]:
    """hack/cluster's K8S_PATCHES (minor -> patch), read from its source (devkit imports no hack/)."""
    for node in ast.parse(script.read_text(), str(script)).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["K8S_PATCHES"]:
            with contextlib.suppress(ValueError):  # not a literal
                patches = ast.literal_eval(node.value)
                if isinstance(patches, dict) and patches:
                    return {str(minor): str(patch) for minor, patch in patches.items()}
    raise RuntimeError(f"{script}: no K8S_PATCHES = {{minor: patch, ...}} found")


def swagger_of(patch: str) -> dict[str, Any]:
    """The OpenAPI 2 spec of Kubernetes `patch` (e.g. 1.36.4), from its Go module."""
    path = go_module_dir(KUBERNETES_MODULE, patch) / SWAGGER
    if not path.is_file():
        raise RuntimeError(f"{KUBERNETES_MODULE}@v{patch} has no {SWAGGER}")
    spec: dict[str, Any] = json.loads(path.read_text())
    return spec


def strict_definitions(definitions: Mapping[str, Any]) -> dict[str, Any]:
    """The definitions as strict as the apiserver decodes objects."""
    strict = {name: _strict(schema) for name, schema in definitions.items()}
    strict[INT_OR_STRING] = {"type": ["integer", "string"], "format": "int32"}
    strict[QUANTITY] = {"type": ["string", "number"], "format": "quantity"}
    return strict


def _strict(schema: Mapping[str, Any]) -> dict[str, Any]:
    strict = dict(schema)
    if "properties" in strict:
        strict["properties"] = {name: _strict(s) for name, s in strict["properties"].items()}
        if "additionalProperties" not in strict and not strict.get("x-kubernetes-preserve-unknown-fields"):
            strict["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(strict.get(key), Mapping):
            strict[key] = _strict(strict[key])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in strict:
            strict[key] = [_strict(s) for s in strict[key]]
    if strict.get("format") == "int-or-string":
        strict.update(type=["integer", "string"], format="int32")
    return strict


# ---------------------------------------------------------------------------- checking objects


@dataclass(frozen=True, order=True)
class Problem:
    path: str  # spec.template.spec.containers[0].image
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class OpenAPI:
    """One minor's object definitions, by the apiVersion and kind they serve."""

    def __init__(self, swagger: Mapping[str, Any]) -> None:
        self.definitions = strict_definitions(swagger["definitions"])
        self.kinds = {
            (gvk["group"], gvk["version"], gvk["kind"]): name
            for name, definition in self.definitions.items()
            for gvk in definition.get(GROUP_VERSION_KIND, ())
        }
        self.groups = {group for group, _, _ in self.kinds}
        self._validators: dict[str, Draft4Validator] = {}

    def has_group_of(self, obj: Mapping[str, Any]) -> bool:
        group, _ = group_version(obj)
        return group in self.groups

    def problems(self, obj: Mapping[str, Any]) -> list[Problem]:
        """What the apiserver's decoder would refuse in `obj` (its API group must be served:
        `has_group_of`)."""
        group, version = group_version(obj)
        name = self.kinds.get((group, version, str(obj.get("kind"))))
        if name is None:
            return [Problem("kind", f"{obj.get('apiVersion')} has no kind {obj.get('kind')!r}")]
        errors = self._validator(name).iter_errors(without_nulls(obj))
        return sorted({problem for error in errors for problem in problems_of(error)})

    def _validator(self, name: str) -> Draft4Validator:
        if name not in self._validators:
            schema = {"$ref": f"#/definitions/{name}", "definitions": self.definitions}
            self._validators[name] = Draft4Validator(schema, format_checker=FORMATS)
        return self._validators[name]


def group_version(obj: Mapping[str, Any]) -> tuple[str, str]:
    """("apps", "v1") of apps/v1, ("", "v1") of the core group's v1."""
    group, _, version = str(obj.get("apiVersion", "")).rpartition("/")
    return group, version


def without_nulls(value: Any) -> Any:
    """The apiserver decodes a field set to null as a field left out."""
    if isinstance(value, dict):
        return {key: without_nulls(item) for key, item in value.items() if item is not None}
    if isinstance(value, list):
        return [without_nulls(item) for item in value]
    return value


def problems_of(error: ValidationError) -> Iterator[Problem]:
    path, value, instance = list(error.absolute_path), error.validator_value, error.instance
    if error.validator == "additionalProperties" and isinstance(instance, dict):
        declared = error.schema.get("properties", {}) if isinstance(error.schema, Mapping) else {}
        for name in sorted(set(instance) - set(declared)):
            yield Problem(field_path([*path, name]), "unknown field")
    elif error.validator == "required" and isinstance(instance, dict) and isinstance(value, list):
        for name in value:
            if name not in instance:
                yield Problem(field_path([*path, name]), "required field missing")
    elif error.validator == "type":
        expected = value if isinstance(value, list) else [value]
        yield Problem(field_path(path), f"must be {' or '.join(map(str, expected))}, not {json_type(instance)}")
    elif error.validator == "format":
        yield Problem(field_path(path), f"{instance!r} is not a valid {value}")
    else:
        yield Problem(field_path(path), error.message)


def field_path(parts: Iterable[str | int]) -> str:
    """spec.containers[0].env, metadata.labels["app.kubernetes.io/name"]; the object itself: "."."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part)}]"
    return text or "."


def json_type(value: object) -> str:
    for python_type, name in _JSON_TYPES:
        if isinstance(value, python_type):
            return name
    return type(value).__name__  # a YAML type JSON lacks, e.g. an unquoted date


# ---------------------------------------------------------------------------- the chart


@dataclass
class Rendered:
    """One distinct rendered object and the value sets that render it."""

    obj: dict[str, Any]
    value_sets: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.obj.get('kind')} {self.obj.get('metadata', {}).get('name')}"


def value_sets() -> dict[str, dict[str, Any]]:
    return {**{variant: values_for(variant) for variant in VARIANTS}, **EXTRA_VALUE_SETS}


def rendered_chart(helm: str, sets: Mapping[str, dict[str, Any]]) -> list[Rendered]:
    """Every object the chart renders with each value set, `helm test`'s hooks included, once each."""
    distinct: dict[str, Rendered] = {}
    for set_name, values in sets.items():
        for obj in render(helm, values=values, tests=True):
            key = json.dumps(obj, sort_keys=True, default=str)
            distinct.setdefault(key, Rendered(obj)).value_sets.append(set_name)
    return list(distinct.values())


@dataclass
class Report:
    minor: str
    checked: int = 0
    skipped: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


def check(minor: str, openapi: OpenAPI, objects: Sequence[Rendered]) -> Report:
    report = Report(minor)
    for rendered in objects:
        if not openapi.has_group_of(rendered.obj):
            report.skipped.add(rendered.name)
            continue
        report.checked += 1
        where = f"Kubernetes {minor}: {rendered.name} (values: {', '.join(rendered.value_sets)})"
        report.errors += [f"{where}: {problem}" for problem in openapi.problems(rendered.obj)]
    return report


def summary(report: Report, patch: str) -> str:
    verdict = f": {len(report.errors)} errors" if report.errors else " valid"
    skipped = f"; skipped (no schema): {', '.join(sorted(report.skipped))}" if report.skipped else ""
    return f"Kubernetes {report.minor} (v{patch}): {report.checked} distinct objects{verdict}{skipped}"


def minor_number(minor: str) -> tuple[int, ...]:
    return tuple(int(part) for part in minor.split("."))


def main(argv: Sequence[str] | None = None) -> int:
    pinned = pinned_patches()
    parser = argparse.ArgumentParser(
        prog="python -m devkit.schemas",
        description="Check every object the chart renders against each pinned minor's OpenAPI.",
    )
    parser.add_argument(
        "--minor", action="append", choices=sorted(pinned), help="a pinned minor (repeatable); default: all"
    )
    args = parser.parse_args(argv)
    objects = rendered_chart(ensure_helm(), value_sets())
    failed = False
    for minor in args.minor or sorted(pinned, key=minor_number):
        report = check(minor, OpenAPI(swagger_of(pinned[minor])), objects)
        for error in report.errors:
            print(error, file=sys.stderr)
        print(summary(report, pinned[minor]))
        failed = failed or bool(report.errors)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
