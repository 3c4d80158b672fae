from __future__ import annotations

import copy
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest
import yaml

from resizer.config import (
    Bounds,
    CompiledConfig,
    ConfigError,
    NodeProfile,
    PartialConfig,
    ResizerConfig,
    _valid_parts,
    compile_config,
    config_text,
    load_config,
    resolve_policy,
)

from .test_resizer_support import SAMPLE_CONFIG, GiB, MiB, make_pod, sample_config

BASE: dict[str, Any] = yaml.safe_load(SAMPLE_CONFIG)


def config_with(edit: Callable[[dict[str, Any]], None]) -> str:
    document = copy.deepcopy(BASE)
    edit(document)
    return yaml.safe_dump(document)


def errors_of(text: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as raised:
        load_config(text)
    return dict(raised.value.errors)


def override(name: str = "batch", **fields: Any) -> dict[str, Any]:
    return {"name": name, "match": {"computeClass": "spot"}, **fields}


# --- loading -------------------------------------------------------------------------


def test_sample_config_loads_with_exact_perf_values() -> None:
    config = sample_config()
    assert config.baseline_node_type == "n2d"
    assert config.node_types["n4"].cpuPerf == Fraction(5, 4)
    assert config.node_types["c3"].cpuPerf == Fraction(13, 10)
    policy = resolve_policy(config, make_pod())
    assert policy.rule == "global"
    assert policy.baseline_node_type == "n2d"
    assert policy.node_types["n4"] == NodeProfile("n4", Fraction(5, 4), Fraction(1))
    assert policy.cpu_bounds == Bounds(50, 16_000)
    assert policy.memory_bounds == Bounds(64 * MiB, 32 * GiB)


def test_perf_values_may_be_ints_or_numeric_strings() -> None:
    text = config_with(lambda d: d["nodeTypes"].update(n4={"cpuPerf": "1.25", "memPerf": 2}))
    assert load_config(text).node_types["n4"].cpuPerf == Fraction(5, 4)


def test_bounds_may_be_yaml_numbers() -> None:
    text = config_with(lambda d: d["bounds"]["cpu"].update(min=0.05, max=16))
    assert resolve_policy(load_config(text), make_pod()).cpu_bounds == Bounds(50, 16_000)


def test_full_document_with_every_section_loads() -> None:
    text = (
        SAMPLE_CONFIG
        + """
overrides:
  - name: batch
    match: { computeClass: spot, podLabel: {team: ml}, podAnnotation: {tier: batch} }
    baselineNodeType: n4
    nodeTypes: { n4: { cpuPerf: 1.5, memPerf: 1.0 } }
    bounds: { cpu: { min: 10m } }
podAnnotations:
  example.com/profile: { heavy: { bounds: { memory: { max: 64Gi } } } }
podLabels:
  team: { ml: { baselineNodeType: c3 } }
computeClasses:
  spot: { nodeTypes: { n4: { cpuPerf: 2, memPerf: 1 } } }
"""
    )
    config = load_config(text)
    assert [o.name for o in config.document.overrides] == ["batch"]


# --- validation errors ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "must be greater than 0"),
        (-1, "must be greater than 0"),
        (float("inf"), "must be finite"),
        (float("nan"), "must be finite"),
        (True, "must be a number"),
        ("fast", "must be a number"),
        ("1e40", "must be between"),
    ],
    ids=["zero", "negative", "inf", "nan", "bool", "word", "huge"],
)
def test_invalid_perf_is_reported_at_its_path(value: object, message: str) -> None:
    errors = errors_of(config_with(lambda d: d["nodeTypes"]["n4"].update(cpuPerf=value)))
    assert list(errors) == ["nodeTypes.n4.cpuPerf"]
    assert message in errors["nodeTypes.n4.cpuPerf"]


def test_yaml_special_floats_are_rejected_as_perf() -> None:
    text = SAMPLE_CONFIG.replace("n4:  { cpuPerf: 1.25, memPerf: 1.0 }", "n4: { cpuPerf: .inf, memPerf: .nan }")
    assert set(errors_of(text)) == {"nodeTypes.n4.cpuPerf", "nodeTypes.n4.memPerf"}


def test_baseline_missing_from_node_types() -> None:
    errors = errors_of(config_with(lambda d: d.update(baselineNodeType="t2a")))
    assert "'t2a' is not one of the node types" in errors["baselineNodeType"]


def test_block_baseline_is_checked_against_its_effective_node_types() -> None:
    def edit(document: dict[str, Any]) -> None:
        document["podLabels"] = {
            "team": {
                "ml": {"baselineNodeType": "t2a"},
                "web": {"baselineNodeType": "a3", "nodeTypes": {"a3": {"cpuPerf": 2, "memPerf": 1}}},
            }
        }
        document["overrides"] = [override(baselineNodeType="a3")]

    errors = errors_of(config_with(edit))
    assert set(errors) == {"podLabels.team.ml.baselineNodeType", "overrides[0].baselineNodeType"}


def test_min_above_max_globally() -> None:
    errors = errors_of(config_with(lambda d: d["bounds"]["cpu"].update(min="17")))
    assert errors == {"bounds.cpu": "min (17) is greater than max (16)"}


def test_min_above_max_on_the_merged_bounds_of_a_block() -> None:
    def edit(document: dict[str, Any]) -> None:
        document["computeClasses"] = {"spot": {"bounds": {"memory": {"min": "64Gi"}}}}
        document["overrides"] = [override(bounds={"cpu": {"max": "10m"}})]

    errors = errors_of(config_with(edit))
    assert set(errors) == {"computeClasses.spot.bounds.memory", "overrides[0].bounds.cpu"}


@pytest.mark.parametrize("value", ["lots", "1.2.3", "-1", True])
def test_bad_quantity_is_reported_at_its_path(value: object) -> None:
    errors = errors_of(config_with(lambda d: d["bounds"]["memory"].update(max=value)))
    assert list(errors) == ["bounds.memory.max"]


def test_global_bounds_need_both_sides_of_both_resources() -> None:
    def edit(document: dict[str, Any]) -> None:
        document["bounds"] = {"cpu": {"min": "50m"}}

    assert errors_of(config_with(edit)) == {"bounds.cpu.max": "field required", "bounds.memory": "field required"}


def test_empty_override_name() -> None:
    errors = errors_of(config_with(lambda d: d.update(overrides=[override("  ")])))
    assert errors == {"overrides[0].name": "must not be empty"}


def test_duplicate_override_names() -> None:
    errors = errors_of(config_with(lambda d: d.update(overrides=[override("a"), override("b"), override("a")])))
    assert errors == {"overrides[2].name": "duplicate override name 'a' (first used by overrides[0])"}


@pytest.mark.parametrize("match", [{}, {"podLabel": {}}, {"podLabel": {}, "podAnnotation": {}}])
def test_override_match_needs_a_criterion(match: dict[str, Any]) -> None:
    errors = errors_of(config_with(lambda d: d.update(overrides=[{"name": "all", "match": match}])))
    assert list(errors) == ["overrides[0].match"]


def test_unknown_field_at_top_level() -> None:
    assert errors_of(config_with(lambda d: d.update(baseline="n2d"))) == {"baseline": "unknown field"}


def test_unknown_fields_nested() -> None:
    def edit(document: dict[str, Any]) -> None:
        document["nodeTypes"]["n4"]["gpuPerf"] = 1
        document["overrides"] = [override(), override("b", priority=1)]
        document["podLabels"] = {"team": {"ml": {"bound": {}}}}
        document["bounds"]["cpu"]["step"] = "1m"

    errors = errors_of(config_with(edit))
    assert errors == {
        "nodeTypes.n4.gpuPerf": "unknown field",
        "overrides[1].priority": "unknown field",
        "podLabels.team.ml.bound": "unknown field",
        "bounds.cpu.step": "unknown field",
    }


@pytest.mark.parametrize(
    ("edit", "path", "message"),
    [
        (lambda d: d.update(baselineNodeType=5), "baselineNodeType", "must be a string, got 5"),
        (lambda d: d.update(baselineNodeType=None), "baselineNodeType", "must be a string, got null"),
        (lambda d: d.update(nodeTypes=["n2d"]), "nodeTypes", "must be a mapping, got a list"),
        (
            lambda d: d["nodeTypes"].update({7: {"cpuPerf": 1, "memPerf": 1}}),
            "nodeTypes.7",
            "key must be a string, got 7",
        ),
        (lambda d: d["nodeTypes"].update(n4="fast"), "nodeTypes.n4", "must be a mapping, got 'fast'"),
        (lambda d: d.update(overrides=None), "overrides", "must be a list, got null"),
        (lambda d: d.update(overrides={"name": "x"}), "overrides", "must be a list, got a mapping"),
        (
            lambda d: d.update(overrides=[{"name": 3, "match": {"computeClass": "spot"}}]),
            "overrides[0].name",
            "must be a string, got 3",
        ),
        (
            lambda d: d.update(overrides=[override(match={"podLabel": {"tier": 1}})]),
            "overrides[0].match.podLabel.tier",
            "must be a string, got 1",
        ),
        (lambda d: d.update(podLabels={"team": None}), "podLabels.team", "must be a mapping, got null"),
        (
            lambda d: d.update(computeClasses={"spot": {"memoryLimitDecrease": True}}),
            "computeClasses.spot.memoryLimitDecrease",
            "must be 'Never' or 'Allow', got True",
        ),
        (lambda d: d.update(memoryLimitDecrease=None), "memoryLimitDecrease", "must be 'Never' or 'Allow', got null"),
        (lambda d: d.update(sidecars="yes"), "sidecars", "must be a boolean, got 'yes'"),
        (
            lambda d: d.update(computeClasses={"spot": {"sidecars": 1}}),
            "computeClasses.spot.sidecars",
            "must be a boolean, got 1",
        ),
        (lambda d: d.update({7: "n2d"}), "7", "key must be a string, got 7"),
        (
            lambda d: d["nodeTypes"].update({7: {"cpuPerf": 0, 8: 1}}),
            "nodeTypes.7",
            "key must be a string, got 7",
        ),
    ],
    ids=[
        "baseline-int",
        "baseline-null",
        "node-types-list",
        "node-type-int-key",
        "node-type-text",
        "overrides-null",
        "overrides-mapping",
        "override-name-int",
        "label-value-int",
        "labels-null",
        "mld-bool",
        "mld-null",
        "sidecars-text",
        "block-sidecars-int",
        "field-key-int",
        "nothing-under-a-bad-key",
    ],
)
def test_wrong_types_are_reported_at_their_path(
    edit: Callable[[dict[str, Any]], None], path: str, message: str
) -> None:
    document = copy.deepcopy(BASE)
    edit(document)
    with pytest.raises(ConfigError) as raised:
        ResizerConfig.from_document(document)
    assert raised.value.errors == [(path, message)]
    assert errors_of(yaml.safe_dump(document))[path] == message


def test_optional_fields_may_be_null() -> None:
    document = {
        **BASE,
        "computeClasses": {
            "spot": {"baselineNodeType": None, "nodeTypes": None, "bounds": {"cpu": None, "memory": {"min": None}}}
        },
        "overrides": [override(match={"computeClass": "spot", "podLabel": None})],
    }
    config = compile_config(ResizerConfig.from_document(document))
    assert config.document.overrides[0].match.podLabel is None
    assert config.policies.compute_classes["spot"] == config.policies.default.__class__(
        **{**config.policies.default.__dict__, "rule": "computeClass:spot"}
    )


def test_the_parsed_document_cannot_be_changed() -> None:
    config = load_config(SAMPLE_CONFIG)
    with pytest.raises(TypeError):
        config.node_types["n4"] = config.node_types["n2d"]  # type: ignore[index]


@pytest.mark.parametrize("text", ["- a\n- b\n", "just text", "", "{unclosed"])
def test_document_that_is_not_a_mapping_is_reported_at_root(text: str) -> None:
    assert list(errors_of(text)) == ["(root)"]


def test_all_errors_are_collected() -> None:
    def edit(document: dict[str, Any]) -> None:
        document["nodeTypes"]["n4"]["cpuPerf"] = 0
        document["bounds"]["cpu"]["min"] = "17"
        document["overrides"] = [override(""), override("b", baselineNodeType="t2a"), override("b")]
        document["surprise"] = 1

    errors = errors_of(config_with(edit))
    assert set(errors) == {
        "nodeTypes.n4.cpuPerf",
        "bounds.cpu",
        "overrides[0].name",
        "overrides[2].name",
        "surprise",
    }


def test_cross_field_checks_still_run_when_the_global_part_is_valid() -> None:
    def edit(document: dict[str, Any]) -> None:
        document["overrides"] = [override("a", match={}), override("b", baselineNodeType="t2a")]

    assert set(errors_of(config_with(edit))) == {"overrides[0].match", "overrides[1].baselineNodeType"}


def test_config_error_str_lists_path_and_message_lines() -> None:
    error = ConfigError([("bounds.cpu", "min (17) is greater than max (16)"), ("baseline", "unknown field")])
    assert str(error) == "bounds.cpu: min (17) is greater than max (16)\nbaseline: unknown field"


# --- precedence ----------------------------------------------------------------------

PRECEDENCE_CONFIG = (
    SAMPLE_CONFIG
    + """
overrides:
  - name: ml-spot
    match: { computeClass: spot, podLabel: { team: ml } }
  - name: spot
    match: { computeClass: spot }
podAnnotations:
  b.example.com/profile: { heavy: {} }
  a.example.com/profile: { heavy: {} }
podLabels:
  zone: { west: {} }
  team: { ml: {}, web: {} }
computeClasses:
  spot: {}
  balanced: {}
"""
)


def rule_for(**pod_fields: Any) -> str:
    return resolve_policy(load_config(PRECEDENCE_CONFIG), make_pod(**pod_fields)).rule


def test_first_matching_override_wins() -> None:
    assert (
        rule_for(labels={"team": "ml"}, node_selector={"cloud.google.com/compute-class": "spot"}) == "override:ml-spot"
    )
    assert rule_for(labels={"team": "web"}, node_selector={"cloud.google.com/compute-class": "spot"}) == "override:spot"


def test_override_needs_every_criterion() -> None:
    text = (
        SAMPLE_CONFIG
        + """
overrides:
  - name: batch
    match: { computeClass: spot, podLabel: { team: ml }, podAnnotation: { tier: batch } }
"""
    )
    config = load_config(text)
    spot = {"cloud.google.com/compute-class": "spot"}
    full = make_pod(labels={"team": "ml"}, annotations={"tier": "batch"}, node_selector=spot)
    partial = make_pod(labels={"team": "ml"}, annotations={"tier": "online"}, node_selector=spot)
    assert resolve_policy(config, full).rule == "override:batch"
    assert resolve_policy(config, partial).rule == "global"


def test_pod_annotations_beat_pod_labels() -> None:
    assert (
        rule_for(annotations={"a.example.com/profile": "heavy"}, labels={"team": "ml"})
        == "podAnnotation:a.example.com/profile=heavy"
    )


def test_pod_annotation_keys_are_tried_in_lexicographic_order() -> None:
    annotations = {"b.example.com/profile": "heavy", "a.example.com/profile": "heavy"}
    assert rule_for(annotations=annotations) == "podAnnotation:a.example.com/profile=heavy"


def test_pod_label_keys_are_tried_in_lexicographic_order() -> None:
    assert rule_for(labels={"zone": "west", "team": "ml"}) == "podLabel:team=ml"
    assert rule_for(labels={"zone": "west", "team": "qa"}) == "podLabel:zone=west"


def test_pod_labels_beat_compute_classes() -> None:
    assert (
        rule_for(labels={"team": "web"}, node_selector={"cloud.google.com/compute-class": "balanced"})
        == "podLabel:team=web"
    )


def test_compute_class_comes_from_the_node_selector() -> None:
    assert rule_for(node_selector={"cloud.google.com/compute-class": "balanced"}) == "computeClass:balanced"
    assert rule_for(labels={"cloud.google.com/compute-class": "balanced"}) == "global"


def test_unmatched_pod_gets_the_global_policy() -> None:
    assert rule_for(labels={"team": "qa"}, annotations={"a.example.com/profile": "light"}) == "global"


# --- merge semantics -----------------------------------------------------------------

MERGE_CONFIG = (
    SAMPLE_CONFIG
    + """
computeClasses:
  spot:
    baselineNodeType: c3
    nodeTypes:
      n4: { cpuPerf: 2, memPerf: 1.5 }
      t2a: { cpuPerf: 0.8, memPerf: 1 }
    bounds:
      cpu: { min: 100m }
      memory: { max: 8Gi }
"""
)


def spot_policy():  # type: ignore[no-untyped-def]
    return resolve_policy(load_config(MERGE_CONFIG), make_pod(node_selector={"cloud.google.com/compute-class": "spot"}))


def test_block_node_types_are_overlaid_entry_by_entry() -> None:
    node_types = spot_policy().node_types
    assert set(node_types) == {"n2d", "n4", "c3", "t2a"}
    assert node_types["n4"] == NodeProfile("n4", Fraction(2), Fraction(3, 2))
    assert node_types["c3"] == NodeProfile("c3", Fraction(13, 10), Fraction(1))


def test_block_bounds_are_overlaid_per_resource_and_side() -> None:
    policy = spot_policy()
    assert policy.cpu_bounds == Bounds(100, 16_000)
    assert policy.memory_bounds == Bounds(64 * MiB, 8 * GiB)


def test_block_fields_left_out_fall_back_to_global() -> None:
    config = load_config(SAMPLE_CONFIG + "computeClasses: { spot: {} }\n")
    policy = resolve_policy(config, make_pod(node_selector={"cloud.google.com/compute-class": "spot"}))
    assert policy.rule == "computeClass:spot"
    assert (policy.baseline_node_type, dict(policy.node_types), policy.cpu_bounds, policy.memory_bounds) == (
        "n2d",
        dict(resolve_policy(config, make_pod()).node_types),
        Bounds(50, 16_000),
        Bounds(64 * MiB, 32 * GiB),
    )


def test_memory_limit_decrease_defaults_to_never() -> None:
    assert resolve_policy(sample_config(), make_pod()).memory_limit_decrease == "Never"


def test_memory_limit_decrease_is_global_and_per_block() -> None:
    config = load_config(
        SAMPLE_CONFIG + "memoryLimitDecrease: Allow\ncomputeClasses: { careful: { memoryLimitDecrease: Never } }\n"
    )
    assert resolve_policy(config, make_pod()).memory_limit_decrease == "Allow"
    careful = make_pod(node_selector={"cloud.google.com/compute-class": "careful"})
    assert resolve_policy(config, careful).memory_limit_decrease == "Never"


def test_memory_limit_decrease_accepts_only_its_values() -> None:
    with pytest.raises(ConfigError) as error:
        load_config(SAMPLE_CONFIG + "memoryLimitDecrease: sometimes\n")
    assert error.value.errors == [("memoryLimitDecrease", "must be 'Never' or 'Allow', got 'sometimes'")]


def test_block_baseline_replaces_the_global_one() -> None:
    assert spot_policy().baseline_node_type == "c3"


def test_policies_are_precomputed_and_shared_between_pods() -> None:
    config = sample_config()
    assert resolve_policy(config, make_pod()) is resolve_policy(config, make_pod(labels={"x": "y"}))


def test_a_document_validated_on_its_own_is_compiled_with_the_cross_field_checks() -> None:
    config = compile_config(ResizerConfig.from_document(BASE))
    assert isinstance(config, CompiledConfig)
    assert resolve_policy(config, make_pod()).rule == "global"
    broken = ResizerConfig.from_document({**BASE, "baselineNodeType": "t2a"})
    with pytest.raises(ConfigError) as error:
        compile_config(broken)
    assert error.value.errors == [("baselineNodeType", "'t2a' is not one of the node types (c3, n2d, n4)")]


def test_the_partial_config_keeps_the_valid_parts_of_a_broken_document() -> None:
    document = {**BASE, "nodeTypes": {"n2d": {"cpuPerf": -1, "memPerf": 1}}, "overrides": [override(), "junk"]}
    partial = _valid_parts(document)
    assert isinstance(partial, PartialConfig)
    assert partial.nodeTypes is None and partial.bounds is not None and partial.baselineNodeType == "n2d"
    assert [o.name if o is not None else None for o in partial.overrides] == ["batch", None]


def test_a_valid_document_has_no_missing_part() -> None:
    partial = PartialConfig.of(ResizerConfig.from_document(BASE))
    assert None not in (partial.baselineNodeType, partial.nodeTypes, partial.bounds)


def test_config_text_is_the_string_at_the_config_key_or_none() -> None:
    assert config_text({"data": {"config.yaml": "a: 1"}}) == "a: 1"
    assert config_text({"data": {"config.yaml": ""}}) == ""
    for configmap in (None, {}, {"data": None}, {"data": "x"}, {"data": {"other": "a"}}, {"data": {"config.yaml": 1}}):
        assert config_text(configmap) is None, configmap
