"""Hostile config.yaml: whatever the ConfigMap holds, load_config returns a config or raises
ConfigError, never another exception (the reconciler only catches ConfigError: anything
else would leave it without a config, or stop it).

WR_FUZZ_EXAMPLES sets hypothesis' examples per property (default 200; the drills' full
size runs 1,000).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from resizer import SAMPLE_CONFIG, CompiledConfig, ConfigError, load_config, resolve_policy

EXAMPLES = int(os.environ.get("WR_FUZZ_EXAMPLES", "200"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

FULL_CONFIG = """\
baselineNodeType: n2d
nodeTypes:
  n2d: { cpuPerf: 1.0, memPerf: 1.0 }
  n4: { cpuPerf: 1.25, memPerf: 1.0 }
  c3: { cpuPerf: "1.30", memPerf: 1 }
bounds:
  cpu: { min: "50m", max: "16" }
  memory: { min: "64Mi", max: "32Gi" }
overrides:
  - name: batch
    match: { podLabel: { tier: batch }, computeClass: spot }
    bounds: { cpu: { min: "10m" } }
podAnnotations:
  example.com/profile:
    fast: { nodeTypes: { n4: { cpuPerf: 1.5, memPerf: 1.0 } } }
podLabels:
  team:
    ml: { baselineNodeType: n4 }
computeClasses:
  spot: { bounds: { memory: { max: "8Gi" } } }
"""


def load_or_error(text: str) -> CompiledConfig | None:
    """The contract: a config, or a ConfigError with (path, message) pairs. Anything else propagates."""
    try:
        config = load_config(text)
    except ConfigError as err:
        assert err.errors, "a ConfigError names at least one problem"
        assert all(isinstance(path, str) and isinstance(message, str) for path, message in err.errors)
        assert str(err)
        return None
    assert isinstance(config, CompiledConfig)
    # A config that loads can be used: policy resolution of an arbitrary pod works.
    resolve_policy(
        config,
        {
            "metadata": {"labels": {"tier": "batch", "team": "ml"}, "annotations": {"example.com/profile": "fast"}},
            "spec": {"nodeSelector": {"cloud.google.com/compute-class": "spot"}},
        },
    )
    return config


def test_the_documents_used_here_are_valid() -> None:
    assert load_or_error(SAMPLE_CONFIG) is not None
    assert load_or_error(FULL_CONFIG) is not None


# ----------------------------------------------------------------------------- random text


@FUZZ
@given(st.text(max_size=2000))
def test_random_text(text: str) -> None:
    load_or_error(text)


@FUZZ
@given(st.binary(max_size=500))
def test_random_bytes_decoded_leniently(data: bytes) -> None:
    load_or_error(data.decode("utf-8", errors="surrogateescape"))


@pytest.mark.parametrize("document", [SAMPLE_CONFIG, FULL_CONFIG], ids=["sample", "full"])
def test_every_truncation(document: str) -> None:
    for cut in range(len(document) + 1):
        load_or_error(document[:cut])


@FUZZ
@given(st.data())
def test_random_splices_of_valid_documents(data: st.DataObject) -> None:
    """Cut a valid document at two places and glue, or insert random characters."""
    doc = data.draw(st.sampled_from([SAMPLE_CONFIG, FULL_CONFIG]))
    i = data.draw(st.integers(0, len(doc)))
    j = data.draw(st.integers(i, len(doc)))
    junk = data.draw(st.text(alphabet=st.sampled_from(list(":{}[]-,&*!|>'\"#%@`\n\t ?0123456789.eE+")), max_size=10))
    load_or_error(doc[:i] + junk + doc[j:])


# ----------------------------------------------------------------------------- random structures

keys = st.text(max_size=30) | st.sampled_from(
    [
        "baselineNodeType",
        "nodeTypes",
        "bounds",
        "overrides",
        "podAnnotations",
        "podLabels",
        "computeClasses",
        "cpuPerf",
        "memPerf",
        "cpu",
        "memory",
        "min",
        "max",
        "name",
        "match",
        "podLabel",
        "podAnnotation",
        "computeClass",
        "n2d",
        "n4",
        "c3",
    ]
)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**30), 10**30)
    | st.floats(allow_nan=True)
    | st.text(max_size=20)
    | st.sampled_from(
        [
            "50m",
            "16",
            "64Mi",
            "32Gi",
            "1e3",
            "-1",
            "0",
            "1.25",
            "NaN",
            ".inf",
            "1e400",
            "1e-400",
            "0x10",
            "1_000",
            "n2d",
            "",
            " ",
            "\u00a0",
            "\U0001f680",
        ]
    )
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5), max_leaves=25
)


@FUZZ
@given(st.dictionaries(keys, values, max_size=8))
def test_random_yaml_documents(document: dict[str, Any]) -> None:
    load_or_error(yaml.safe_dump(document, allow_unicode=True))


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, prefix + (i,))
    return out


@FUZZ
@given(st.data())
def test_one_field_of_a_valid_document_replaced_by_anything(data: st.DataObject) -> None:
    document = yaml.safe_load(FULL_CONFIG)
    path = data.draw(st.sampled_from(_paths(document)[1:]))
    parent = document
    for part in path[:-1]:
        parent = parent[part]
    if data.draw(st.booleans()):
        parent[path[-1]] = data.draw(values)
    else:
        del parent[path[-1]]
    load_or_error(yaml.safe_dump(document, allow_unicode=True))


# ----------------------------------------------------------------------------- huge and unicode


@FUZZ
@given(st.text(min_size=1, max_size=300), st.sampled_from([1, 100, 3000]))
def test_unicode_and_huge_node_type_names(name: str, repeat: int) -> None:
    big = name * repeat
    document = {
        "baselineNodeType": big,
        "nodeTypes": {big: {"cpuPerf": 1, "memPerf": 1}, "n4": {"cpuPerf": 1.25, "memPerf": 1}},
        "bounds": {"cpu": {"min": "50m", "max": "16"}, "memory": {"min": "64Mi", "max": "32Gi"}},
    }
    text = yaml.safe_dump(document, allow_unicode=True)
    config = load_or_error(text)
    # (PyYAML does not round-trip every character, e.g. NEL: compare with what it reads back.)
    assert config is not None and yaml.safe_load(text)["baselineNodeType"] in config.node_types


def test_huge_document_with_many_node_types() -> None:
    # Correctness only: how fast such a document parses is a benchmark's question, not a unit test's.
    types = "".join(f"  t{i}-{'é' * 50}: {{ cpuPerf: {1 + i / 10000}, memPerf: 1 }}\n" for i in range(3_000))
    text = SAMPLE_CONFIG.replace("nodeTypes:\n", "nodeTypes:\n" + types)
    config = load_or_error(text)
    assert config is not None and len(config.node_types) == 3_003


def test_huge_unknown_key() -> None:
    assert load_or_error(SAMPLE_CONFIG + f"{'k' * 1_000_000}: 1\n") is None


# ----------------------------------------------------------------------------- YAML hazards


@pytest.mark.parametrize("depth", [10, 100, 500, 1_000, 10_000])
@pytest.mark.parametrize("kind", ["list", "flow map", "block map"])
def test_deeply_nested_documents(kind: str, depth: int) -> None:
    if kind == "list":
        text = "nodeTypes: " + "[" * depth + "]" * depth
    elif kind == "flow map":
        text = "nodeTypes: {n: " + "{a: " * depth + "1" + "}" * depth + "}"
    else:
        text = "".join(" " * i + "a:\n" for i in range(depth))
    assert load_or_error(text) is None


@pytest.mark.parametrize(
    "scalar",
    [
        '!!timestamp "x"',
        '!!float "x"',
        '!!int "x"',
        '!!bool "x"',
        '!!int "0x"',
        '!!int ""',
        '!!float ""',
        "2001-02-30",
        "0x_",
        "0b",
        "9" * 5000,
        "-" + "9" * 5000,
        "!!python/object/apply:os.system ['true']",
        "!!binary '%%%'",
        "!!set {a, b}",
        "!!omap [a]",
        "*undefined",
        "&a [*a]",
        "!!str [1]",
        "\x00",
        "\ud800",
    ],
)
@pytest.mark.parametrize(
    "where", ["baselineNodeType: {}", "nodeTypes: {{n: {{cpuPerf: {}, memPerf: 1}}}}", "bounds: {{cpu: {{min: {}}}}}"]
)
def test_yaml_scalars_that_break_constructors(where: str, scalar: str) -> None:
    load_or_error(SAMPLE_CONFIG + where.format(scalar) + "\n")
    load_or_error(where.format(scalar))


@pytest.mark.timeout(120)  # expanded, the bomb is 9**9 nodes: a hang, which this turns into a failure
def test_alias_bomb_is_rejected() -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    bomb = "\n".join(lines) + "\n"
    for text in (
        bomb,
        SAMPLE_CONFIG + bomb,
        SAMPLE_CONFIG + bomb.replace("i: &i", "overrides: &i"),
        SAMPLE_CONFIG.replace("nodeTypes:", "ignored:") + bomb.replace("i: &i", "nodeTypes: &i"),
    ):
        assert load_or_error(text) is None
