"""devkit.schemas on a small hand-made spec: what the apiserver's decoder refuses is reported with
its field path (unknown fields, types, required fields, enums, int-or-string, quantities), and
kinds of an API group the spec does not serve are skipped by name. No Go, helm or network here:
tests/tools/test_chart_schemas.py checks the real chart against a real spec."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest

from devkit import schemas
from devkit.schemas import INT_OR_STRING, QUANTITY, OpenAPI, Problem, Rendered, check, pinned_patches
from tests.unit.hack_cluster import load_hack_cluster

META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
SWAGGER: dict[str, Any] = {
    "definitions": {
        INT_OR_STRING: {"type": "string", "format": "int-or-string"},
        QUANTITY: {"type": "string"},
        META: {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        },
        "io.example.v1.Widget": {
            "type": "object",
            "required": ["spec"],
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"$ref": f"#/definitions/{META}"},
                "spec": {"$ref": "#/definitions/io.example.v1.WidgetSpec"},
            },
            "x-kubernetes-group-version-kind": [{"group": "example.io", "version": "v1", "kind": "Widget"}],
        },
        "io.example.v1.WidgetSpec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "format": "int32"},
                "port": {"$ref": f"#/definitions/{INT_OR_STRING}"},
                "memory": {"$ref": f"#/definitions/{QUANTITY}"},
                "mode": {"type": "string", "enum": ["Fast", "Slow"]},
                "parts": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "raw": {"type": "object"},
                "token": {"type": "string", "format": "byte"},
            },
        },
    }
}


@pytest.fixture(scope="module")
def openapi() -> OpenAPI:
    return OpenAPI(SWAGGER)


def widget(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.io/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": {"size": 1, **spec}}


def test_a_valid_object_has_no_problem(openapi: OpenAPI) -> None:
    obj = widget(port=8080, memory="1Gi", mode="Fast", parts=[{"name": "a"}], raw={"any": {"thing": 1}}, token="aGk=")
    assert openapi.problems(obj) == []


def test_an_unknown_field_is_reported_with_its_path(openapi: OpenAPI) -> None:
    obj = widget(parts=[{"name": "a"}, {"name": "b", "colour": "red"}])
    obj["metadata"]["namespce"] = "typo"
    assert openapi.problems(obj) == [
        Problem("metadata.namespce", "unknown field"),
        Problem("spec.parts[1].colour", "unknown field"),
    ]


def test_a_wrong_type_is_reported(openapi: OpenAPI) -> None:
    obj = widget(size="3")
    obj["metadata"]["labels"] = {"app.kubernetes.io/name": True}
    assert [str(p) for p in openapi.problems(obj)] == [
        'metadata.labels["app.kubernetes.io/name"]: must be string, not boolean',
        "spec.size: must be integer, not string",
    ]


def test_a_yaml_type_json_lacks_is_named() -> None:
    # PyYAML reads an unquoted 2026-01-02 as a date, which no JSON type is.
    assert OpenAPI(SWAGGER).problems(widget(size=datetime.date(2026, 1, 2))) == [
        Problem("spec.size", "must be integer, not date")
    ]


def test_an_int32_out_of_range_is_refused(openapi: OpenAPI) -> None:
    assert openapi.problems(widget(size=2**31 - 1)) == []
    assert openapi.problems(widget(size=2**31)) == [Problem("spec.size", "2147483648 is not a valid int32")]


@pytest.mark.parametrize("port", [8080, "http", "25%"])
def test_int_or_string_takes_an_int_or_a_string(openapi: OpenAPI, port: object) -> None:
    assert openapi.problems(widget(port=port)) == []


@pytest.mark.parametrize(("port", "found"), [(1.5, "number"), (True, "boolean"), ([80], "array")])
def test_int_or_string_takes_nothing_else(openapi: OpenAPI, port: object, found: str) -> None:
    assert openapi.problems(widget(port=port)) == [Problem("spec.port", f"must be integer or string, not {found}")]


@pytest.mark.parametrize("memory", ["128Mi", "1.5Gi", "100m", "1e3", "+.5", "-2", "1.", 512, 0.5])
def test_a_quantity_is_a_number_or_a_string_of_its_grammar(openapi: OpenAPI, memory: object) -> None:
    assert openapi.problems(widget(memory=memory)) == []


@pytest.mark.parametrize("memory", ["1.5.5", "Gi", "12 Mi", "1GB", ""])
def test_a_string_outside_the_quantity_grammar_is_refused(openapi: OpenAPI, memory: str) -> None:
    assert openapi.problems(widget(memory=memory)) == [Problem("spec.memory", f"{memory!r} is not a valid quantity")]


def test_a_missing_required_field_is_reported_where_it_belongs(openapi: OpenAPI) -> None:
    obj = widget()
    del obj["spec"]["size"]
    assert openapi.problems(obj) == [Problem("spec.size", "required field missing")]
    assert openapi.problems({"apiVersion": "example.io/v1", "kind": "Widget"}) == [
        Problem("spec", "required field missing")
    ]


def test_a_null_field_counts_as_left_out(openapi: OpenAPI) -> None:
    assert openapi.problems(widget(mode=None, raw=None)) == []
    assert openapi.problems(widget(size=None)) == [Problem("spec.size", "required field missing")]


def test_an_enum_takes_only_its_values(openapi: OpenAPI) -> None:
    (problem,) = openapi.problems(widget(mode="Medium"))
    assert problem.path == "spec.mode" and "'Medium' is not one of ['Fast', 'Slow']" in problem.message


def test_bytes_must_be_base64(openapi: OpenAPI) -> None:
    assert openapi.problems(widget(token="not base64!")) == [Problem("spec.token", "'not base64!' is not a valid byte")]


def test_an_unknown_kind_of_a_served_group_is_an_error(openapi: OpenAPI) -> None:
    gadget = {"apiVersion": "example.io/v1", "kind": "Gadget", "metadata": {"name": "g"}}
    assert openapi.problems(gadget) == [Problem("kind", "example.io/v1 has no kind 'Gadget'")]
    assert openapi.problems({**gadget, "kind": "Widget", "apiVersion": "example.io/v2"}) == [
        Problem("kind", "example.io/v2 has no kind 'Widget'")
    ]


def test_errors_name_the_object_the_minor_and_the_value_sets(openapi: OpenAPI) -> None:
    rendered = [Rendered(widget(size="3"), ["default", "custom"]), Rendered(widget(), ["helm"])]
    report = check("1.36", openapi, rendered)
    assert report.checked == 2 and not report.skipped
    assert report.errors == [
        "Kubernetes 1.36: Widget w (values: default, custom): spec.size: must be integer, not string"
    ]


def test_a_kind_whose_group_has_no_schema_is_skipped_by_name(openapi: OpenAPI) -> None:
    certificate = {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "serving"}}
    report = check("1.36", openapi, [Rendered(certificate, ["default"]), Rendered(widget(), ["default"])])
    assert report.errors == [] and report.checked == 1
    assert report.skipped == {"Certificate serving"}


def test_main_exits_non_zero_and_prints_each_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(schemas, "pinned_patches", lambda: {"1.35": "1.35.8", "1.36": "1.36.4"})
    monkeypatch.setattr(schemas, "ensure_helm", lambda: "helm")
    monkeypatch.setattr(schemas, "rendered_chart", lambda helm, sets: [Rendered(widget(extra=1), ["default"])])
    monkeypatch.setattr(schemas, "swagger_of", lambda patch: SWAGGER)
    assert schemas.main(["--minor", "1.36"]) == 1
    out, err = capsys.readouterr()
    assert err == "Kubernetes 1.36: Widget w (values: default): spec.extra: unknown field\n"
    assert out == "Kubernetes 1.36 (v1.36.4): 1 distinct objects: 1 errors\n"
    monkeypatch.setattr(schemas, "rendered_chart", lambda helm, sets: [Rendered(widget(), ["default"])])
    assert schemas.main([]) == 0
    assert [line.split(":")[0] for line in capsys.readouterr().out.splitlines()] == [
        "Kubernetes 1.35 (v1.35.8)",
        "Kubernetes 1.36 (v1.36.4)",
    ]


def test_the_pinned_patches_are_hack_clusters(tmp_path: Path) -> None:
    assert pinned_patches() == load_hack_cluster().K8S_PATCHES
    script = tmp_path / "cluster"
    script.write_text('import os\nK8S_PATCHES = {"1.40": "1.40.1"}\nK8S_PATCHES_OTHER = {}\n')
    assert pinned_patches(script) == {"1.40": "1.40.1"}
    for text in ("K8S_PATCHES = dict(a=1)\n", "K8S_PATCH = {}\n"):
        script.write_text(text)
        with pytest.raises(RuntimeError, match="no K8S_PATCHES"):
            pinned_patches(script)
