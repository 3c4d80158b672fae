"""The ``config.yaml`` of the workload-resizer ConfigMap, and policy resolution per pod.

A policy block (an override, a ``podAnnotations``/``podLabels`` value or a
``computeClasses`` entry) is overlaid on the global settings: a field it leaves out falls
back to the global one, ``nodeTypes`` per entry, ``bounds`` per resource and side.
Precedence: the first override (list order) whose ``match`` fully holds, then
``podAnnotations``, ``podLabels`` (a pod's matching keys in lexicographic order),
``computeClasses``, then the global settings (docs/configuration.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Literal

import yaml

from resizer.quantity import QuantityError, Resource, coerce_quantity, to_bytes, to_millicores

SAMPLE_CONFIG = """\
baselineNodeType: n2d
nodeTypes:
  n2d: { cpuPerf: 1.0, memPerf: 1.0 }
  n4:  { cpuPerf: 1.25, memPerf: 1.0 }
  c3:  { cpuPerf: 1.30, memPerf: 1.0 }
bounds:
  cpu:    { min: "50m",  max: "16" }
  memory: { min: "64Mi", max: "32Gi" }
"""
"""The design's sample ``config.yaml``: the chart's default and the demo's config."""

__all__ = [
    "COMPUTE_CLASS_SELECTOR",
    "Bounds",
    "BoundsSpec",
    "CompiledConfig",
    "ConfigError",
    "GlobalBounds",
    "NodeProfile",
    "NodeTypeSpec",
    "Override",
    "OverrideMatch",
    "PartialConfig",
    "Policy",
    "PolicyBlock",
    "PolicyTable",
    "RequiredResourceBounds",
    "ResizerConfig",
    "ResourceBounds",
    "compile_config",
    "load_config",
    "resolve_policy",
]

COMPUTE_CLASS_SELECTOR = "cloud.google.com/compute-class"

MemoryLimitDecrease = Literal["Never", "Allow"]
_RESOURCES: tuple[Resource, ...] = ("cpu", "memory")
# Perf values are ratios of machine capability; anything outside this range is a typo
# (and a huge exponent would make the exact Fraction arithmetic explode).
_PERF_MAX_ADJUSTED_EXPONENT = 18


class ConfigError(ValueError):
    """The configuration is invalid; ``errors`` holds ``(field path, message)`` pairs."""

    def __init__(self, errors: list[tuple[str, str]]) -> None:
        self.errors = list(errors)
        super().__init__("\n".join(f"{path}: {message}" for path, message in self.errors))


def _perf(value: object) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal, Fraction)):
        raise ValueError(f"must be a number, got {value!r}")
    perf = value if isinstance(value, Fraction) else _exact_decimal(value)
    if perf <= 0:
        raise ValueError(f"must be greater than 0, got {value!r}")
    return perf


def _exact_decimal(value: int | float | str | Decimal) -> Fraction:
    """Exact value of the decimal text, so 1.25 is exactly 5/4 rather than a binary float."""
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"must be a number, got {value!r}") from None
    if not number.is_finite():
        raise ValueError(f"must be finite, got {value!r}")
    if number and abs(number.adjusted()) > _PERF_MAX_ADJUSTED_EXPONENT:
        raise ValueError(f"must be between 1e-18 and 1e18, got {value!r}")
    return Fraction(number)


def _non_negative_quantity(value: object) -> Fraction:
    if isinstance(value, Fraction):
        quantity = value
    else:
        try:
            quantity = coerce_quantity(value)  # type: ignore[arg-type]
        except QuantityError as error:
            raise ValueError(str(error)) from None
    if quantity < 0:
        raise ValueError(f"must not be negative, got {value!r}")
    return quantity


@dataclass(frozen=True)
class NodeProfile:
    name: str
    cpu_perf: Fraction
    mem_perf: Fraction


@dataclass(frozen=True)
class Bounds:
    """Inclusive bounds in whole millicores (cpu) or bytes (memory)."""

    min: int
    max: int


@dataclass(frozen=True)
class Policy:
    """The fully merged settings that apply to one pod."""

    rule: str
    baseline_node_type: str
    node_types: Mapping[str, NodeProfile]
    cpu_bounds: Bounds
    memory_bounds: Bounds
    memory_limit_decrease: MemoryLimitDecrease = "Never"


@dataclass(frozen=True)
class PolicyTable:
    """The merged policy of every rule of a config, in precedence order."""

    overrides: tuple[tuple[OverrideMatch, Policy], ...]
    pod_annotations: tuple[tuple[str, Mapping[str, Policy]], ...]
    pod_labels: tuple[tuple[str, Mapping[str, Policy]], ...]
    compute_classes: Mapping[str, Policy]
    default: Policy


# ---- the document's structure -----------------------------------------------------------
# Plain frozen dataclasses checked by the small parsers below (no pydantic: building its
# models was ~0.25 CPU-s of every reconciler start, a third of its cost for a 500-pod burst).
# Field names are the document's (camelCase) so paths in errors read like the YAML.


@dataclass(frozen=True, kw_only=True)
class NodeTypeSpec:
    """Performance of one machine family relative to the others (higher = faster)."""

    cpuPerf: Fraction
    memPerf: Fraction


@dataclass(frozen=True, kw_only=True)
class ResourceBounds:
    """Bounds of one resource in a policy block; each side optional (falls back to global)."""

    min: Fraction | None = None
    max: Fraction | None = None


@dataclass(frozen=True, kw_only=True)
class RequiredResourceBounds:
    """Global bounds of one resource; both sides required."""

    min: Fraction
    max: Fraction


@dataclass(frozen=True, kw_only=True)
class BoundsSpec:
    cpu: ResourceBounds | None = None
    memory: ResourceBounds | None = None


@dataclass(frozen=True, kw_only=True)
class GlobalBounds:
    cpu: RequiredResourceBounds
    memory: RequiredResourceBounds


@dataclass(frozen=True, kw_only=True)
class PolicyBlock:
    """Settings for the pods a block applies to, merged over the global settings as the
    module docstring describes (missing fields fall back; nodeTypes and bounds overlay)."""

    baselineNodeType: str | None = None
    nodeTypes: Mapping[str, NodeTypeSpec] | None = None
    bounds: BoundsSpec | None = None
    memoryLimitDecrease: MemoryLimitDecrease | None = None


@dataclass(frozen=True, kw_only=True)
class OverrideMatch:
    """Criteria of an override; all given criteria must hold (AND)."""

    computeClass: str | None = None
    podLabel: Mapping[str, str] | None = None
    podAnnotation: Mapping[str, str] | None = None

    def holds(self, labels: Mapping[str, str], annotations: Mapping[str, str], compute_class: str | None) -> bool:
        return (
            (self.computeClass is None or self.computeClass == compute_class)
            and _includes(labels, self.podLabel)
            and _includes(annotations, self.podAnnotation)
        )


@dataclass(frozen=True, kw_only=True)
class Override(PolicyBlock):
    """A named policy block applied to the pods its ``match`` selects."""

    name: str
    match: OverrideMatch


@dataclass(frozen=True, kw_only=True)
class ResizerConfig:
    """The validated ``config.yaml`` document (structure only). :func:`load_config`
    returns it compiled (:class:`CompiledConfig`), cross-field checks included."""

    baselineNodeType: str
    nodeTypes: Mapping[str, NodeTypeSpec]
    bounds: GlobalBounds
    # Never (default): a memory limit is never set below the author's. Lowering one below
    # the container's usage fails on cgroup v1 (the kernel refuses; the resize stays
    # InProgress) and risks an OOM kill on cgroup v2 (KEP-1287, "Memory Limit Decreases").
    memoryLimitDecrease: MemoryLimitDecrease = "Never"
    overrides: tuple[Override, ...] = ()
    podAnnotations: Mapping[str, Mapping[str, PolicyBlock]] = field(default_factory=dict)
    podLabels: Mapping[str, Mapping[str, PolicyBlock]] = field(default_factory=dict)
    computeClasses: Mapping[str, PolicyBlock] = field(default_factory=dict)

    @classmethod
    def from_document(cls, document: object) -> ResizerConfig:
        """The structure of a parsed YAML document; :class:`ConfigError` lists every problem."""
        errors: list[_Error] = []
        config: ResizerConfig = _RESIZER_CONFIG(document, (), errors)
        if config is _INVALID:
            raise ConfigError([(_path(loc), message) for loc, message in errors])
        return config


# ---- parsers: value, location, error list -> the typed value or _INVALID -------------------

_Loc = tuple[int | str, ...]
_Error = tuple[_Loc, str]
_INVALID: Any = object()
_Parser = Callable[[object, _Loc, list[_Error]], Any]


def _checked(check: Callable[[object], Any]) -> _Parser:
    """A parser from a function that returns the value or raises ValueError."""

    def parse(value: object, loc: _Loc, errors: list[_Error]) -> Any:
        try:
            return check(value)
        except ValueError as error:
            errors.append((loc, str(error)))
            return _INVALID

    return parse


def _string(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {_shown(value)}")
    return value


def _memory_limit_decrease(value: object) -> MemoryLimitDecrease:
    if value == "Never" or value == "Allow":
        return value
    raise ValueError(f"must be 'Never' or 'Allow', got {_shown(value)}")


def _shown(value: object) -> str:
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    return "null" if value is None else repr(value)


def _optional(parser: _Parser) -> _Parser:
    def parse(value: object, loc: _Loc, errors: list[_Error]) -> Any:
        return None if value is None else parser(value, loc, errors)

    return parse


def _mapping_of(parser: _Parser, frozen: bool = True) -> _Parser:
    """A mapping with string keys, each value checked by ``parser``."""

    def parse(value: object, loc: _Loc, errors: list[_Error]) -> Any:
        if not isinstance(value, dict):
            errors.append((loc, f"must be a mapping, got {_shown(value)}"))
            return _INVALID
        before = len(errors)
        parsed = {}
        for key, item in value.items():
            if not isinstance(key, str):
                errors.append(((*loc, str(key)), f"key must be a string, got {key!r}"))
                continue
            parsed[key] = parser(item, (*loc, key), errors)
        if len(errors) > before:
            return _INVALID
        return MappingProxyType(parsed) if frozen else parsed

    return parse


def _list_of(parser: _Parser) -> _Parser:
    def parse(value: object, loc: _Loc, errors: list[_Error]) -> Any:
        if not isinstance(value, list):
            errors.append((loc, f"must be a list, got {_shown(value)}"))
            return _INVALID
        before = len(errors)
        parsed = tuple(parser(item, (*loc, index), errors) for index, item in enumerate(value))
        return _INVALID if len(errors) > before else parsed

    return parse


def _model(cls: type, fields: Mapping[str, tuple[_Parser, bool]],
           check: Callable[[Any], str | None] | None = None) -> _Parser:
    """A mapping with exactly these fields ((parser, required) each), unknown fields refused;
    ``check`` then sees the built object and returns a message for the whole, or None."""

    def parse(value: object, loc: _Loc, errors: list[_Error]) -> Any:
        if not isinstance(value, dict):
            errors.append((loc, f"must be a mapping, got {_shown(value)}"))
            return _INVALID
        before = len(errors)
        parsed = {}
        for name, (parser, required) in fields.items():
            if name in value:
                parsed[name] = parser(value[name], (*loc, name), errors)
            elif required:
                errors.append(((*loc, name), "field required"))
        errors.extend(((*loc, str(key)), "unknown field") for key in value if key not in fields)
        if len(errors) > before:
            return _INVALID
        built = cls(**parsed)
        message = check(built) if check is not None else None
        if message is not None:
            errors.append((loc, message))
            return _INVALID
        return built

    return parse


def _override_match_check(match: OverrideMatch) -> str | None:
    if match.computeClass is None and not match.podLabel and not match.podAnnotation:
        return "needs at least one of computeClass, podLabel, podAnnotation"
    return None


def _override_name(value: object) -> str:
    name = _string(value)
    if not name.strip():
        raise ValueError("must not be empty")
    return name


_STR = _checked(_string)
_PERF = _checked(_perf)
_QUANTITY = _checked(_non_negative_quantity)
_NODE_TYPES = _mapping_of(_model(NodeTypeSpec, {"cpuPerf": (_PERF, True), "memPerf": (_PERF, True)}))
_OPTIONAL_BOUNDS = _model(ResourceBounds, {"min": (_optional(_QUANTITY), False), "max": (_optional(_QUANTITY), False)})
_REQUIRED_BOUNDS = _model(RequiredResourceBounds, {"min": (_QUANTITY, True), "max": (_QUANTITY, True)})
_GLOBAL_BOUNDS = _model(GlobalBounds, {"cpu": (_REQUIRED_BOUNDS, True), "memory": (_REQUIRED_BOUNDS, True)})
_BLOCK_FIELDS: dict[str, tuple[_Parser, bool]] = {
    "baselineNodeType": (_optional(_STR), False),
    "nodeTypes": (_optional(_NODE_TYPES), False),
    "bounds": (_optional(_model(BoundsSpec, {"cpu": (_optional(_OPTIONAL_BOUNDS), False),
                                              "memory": (_optional(_OPTIONAL_BOUNDS), False)})), False),
    "memoryLimitDecrease": (_optional(_checked(_memory_limit_decrease)), False),
}
_BLOCK = _model(PolicyBlock, _BLOCK_FIELDS)
_LABELS = _mapping_of(_STR)
_OVERRIDE = _model(Override, {
    **_BLOCK_FIELDS,
    "name": (_checked(_override_name), True),
    "match": (_model(OverrideMatch, {"computeClass": (_optional(_STR), False),
                                     "podLabel": (_optional(_LABELS), False),
                                     "podAnnotation": (_optional(_LABELS), False)},
                     check=_override_match_check), True),
})
_RESIZER_CONFIG = _model(ResizerConfig, {
    "baselineNodeType": (_STR, True),
    "nodeTypes": (_NODE_TYPES, True),
    "bounds": (_GLOBAL_BOUNDS, True),
    "memoryLimitDecrease": (_checked(_memory_limit_decrease), False),
    "overrides": (_list_of(_OVERRIDE), False),
    "podAnnotations": (_mapping_of(_mapping_of(_BLOCK)), False),
    "podLabels": (_mapping_of(_mapping_of(_BLOCK)), False),
    "computeClasses": (_mapping_of(_BLOCK), False),
})


@dataclass(frozen=True)
class PartialConfig:
    """The parts of a document that are valid on their own; None marks a part that is
    missing or invalid. Cross-field checks run on it, so one broken section does not
    hide the problems of the others. A valid document gives a partial config with no None.
    """

    baselineNodeType: str | None
    nodeTypes: Mapping[str, NodeTypeSpec] | None
    bounds: GlobalBounds | None
    overrides: tuple[Override | None, ...]
    podAnnotations: Mapping[str, Mapping[str, PolicyBlock | None]]
    podLabels: Mapping[str, Mapping[str, PolicyBlock | None]]
    computeClasses: Mapping[str, PolicyBlock | None]

    @classmethod
    def of(cls, document: ResizerConfig) -> PartialConfig:
        return cls(
            baselineNodeType=document.baselineNodeType,
            nodeTypes=document.nodeTypes,
            bounds=document.bounds,
            overrides=tuple(document.overrides),
            podAnnotations=document.podAnnotations,
            podLabels=document.podLabels,
            computeClasses=document.computeClasses,
        )


@dataclass(frozen=True)
class CompiledConfig:
    """A valid configuration: the document and the merged :class:`Policy` of every rule,
    computed once. Obtain it with :func:`load_config` or :func:`compile_config`."""

    document: ResizerConfig
    policies: PolicyTable

    @property
    def baseline_node_type(self) -> str:
        return self.document.baselineNodeType

    @property
    def node_types(self) -> Mapping[str, NodeTypeSpec]:
        return self.document.nodeTypes


def load_config(text: str) -> CompiledConfig:
    """Parse, validate and compile ``config.yaml``; raise :class:`ConfigError` listing every problem.

    Structural problems (types, unknown fields, bad quantities or perf values) are all
    reported, and so are the cross-field ones (baseline not among the effective node
    types, min > max on the effective bounds, duplicate override names) for every part
    of the document that is itself structurally valid.
    """
    document = _parse_yaml(text)
    errors: list[_Error] = []
    config = _RESIZER_CONFIG(document, (), errors)
    if config is _INVALID:
        structural = [(_path(loc), message) for loc, message in errors]
        raise ConfigError(structural + _semantic_errors(_valid_parts(document)))
    return compile_config(config)


def compile_config(document: ResizerConfig) -> CompiledConfig:
    """Run the cross-field checks on a structurally valid document and merge its policies."""
    errors = _semantic_errors(PartialConfig.of(document))
    if errors:
        raise ConfigError(errors)
    return CompiledConfig(document, _compile(document))


def resolve_policy(config: CompiledConfig, pod: Mapping[str, Any]) -> Policy:
    """The policy for a pod, by the precedence described in the module docstring."""
    table = config.policies
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    annotations = metadata.get("annotations") or {}
    compute_class = ((pod.get("spec") or {}).get("nodeSelector") or {}).get(COMPUTE_CLASS_SELECTOR)
    for match, policy in table.overrides:
        if match.holds(labels, annotations, compute_class):
            return policy
    for source, by_key in ((annotations, table.pod_annotations), (labels, table.pod_labels)):
        for key, by_value in by_key:
            value = source.get(key)
            if value is not None and value in by_value:
                return by_value[value]
    if compute_class is not None and compute_class in table.compute_classes:
        return table.compute_classes[compute_class]
    return table.default


def _parse_yaml(text: str) -> dict[str, Any]:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError([("(root)", f"invalid YAML: {error}")]) from None
    except Exception as error:  # noqa: BLE001 - PyYAML's constructors leak ValueError/KeyError/..., deep nesting RecursionError
        raise ConfigError([("(root)", f"invalid YAML: {type(error).__name__}: {error}")]) from None
    if not isinstance(document, dict):
        raise ConfigError([("(root)", f"must be a mapping, got {type(document).__name__}")])
    return document


def _path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path or "(root)"


def _valid_or_none(parser: _Parser, value: object) -> Any:
    parsed = parser(value, (), [])
    return None if parsed is _INVALID else parsed


def _valid_parts(document: Mapping[str, Any]) -> PartialConfig:
    """The parts of ``document`` that are valid on their own (others are None)."""

    def mapping(value: object) -> dict[Any, Any]:
        return value if isinstance(value, dict) else {}

    def blocks(section: str) -> dict[str, dict[str, PolicyBlock | None]]:
        return {
            key: {value: _valid_or_none(_BLOCK, raw) for value, raw in mapping(by_value).items()}
            for key, by_value in mapping(document.get(section)).items()
        }

    overrides = document.get("overrides")
    return PartialConfig(
        baselineNodeType=_valid_or_none(_STR, document.get("baselineNodeType")),
        nodeTypes=_valid_or_none(_NODE_TYPES, document.get("nodeTypes")),
        bounds=_valid_or_none(_GLOBAL_BOUNDS, document.get("bounds")),
        overrides=tuple(_valid_or_none(_OVERRIDE, raw) for raw in (overrides if isinstance(overrides, list) else [])),
        podAnnotations=blocks("podAnnotations"),
        podLabels=blocks("podLabels"),
        computeClasses={
            name: _valid_or_none(_BLOCK, raw) for name, raw in mapping(document.get("computeClasses")).items()
        },
    )


def _blocks(config: PartialConfig | ResizerConfig) -> Iterator[tuple[str, PolicyBlock]]:
    """Every non-global block with its config path; invalid (None) parts are skipped."""
    for index, override in enumerate(config.overrides):
        if override is not None:
            yield f"overrides[{index}]", override
    for section, by_key in (("podAnnotations", config.podAnnotations), ("podLabels", config.podLabels)):
        for key, by_value in by_key.items():
            for value, block in by_value.items():
                if block is not None:
                    yield f"{section}.{key}.{value}", block
    for name, block in config.computeClasses.items():
        if block is not None:
            yield f"computeClasses.{name}", block


def _semantic_errors(config: PartialConfig) -> list[tuple[str, str]]:
    errors = _override_name_errors(config.overrides)
    node_types, bounds, baseline = config.nodeTypes, config.bounds, config.baselineNodeType
    if node_types is not None and baseline is not None and baseline not in node_types:
        errors.append(("baselineNodeType", _not_a_node_type(baseline, node_types)))
    if bounds is not None:
        errors += _bounds_errors("bounds", bounds, None)
    if node_types is None or bounds is None:
        return errors  # blocks cannot be merged onto a broken global part
    for path, block in _blocks(config):
        effective_types = _effective_node_types(node_types, block)
        if block.baselineNodeType is not None and block.baselineNodeType not in effective_types:
            errors.append((f"{path}.baselineNodeType", _not_a_node_type(block.baselineNodeType, effective_types)))
        errors += _bounds_errors(f"{path}.bounds", bounds, block)
    return errors


def _override_name_errors(overrides: tuple[Override | None, ...]) -> list[tuple[str, str]]:
    errors: list[tuple[str, str]] = []
    first_index: dict[str, int] = {}
    for index, override in enumerate(overrides):
        if override is None:
            continue
        first = first_index.setdefault(override.name, index)
        if first != index:
            message = f"duplicate override name {override.name!r} (first used by overrides[{first}])"
            errors.append((f"overrides[{index}].name", message))
    return errors


def _not_a_node_type(name: str, node_types: Mapping[str, object]) -> str:
    return f"{name!r} is not one of the node types ({', '.join(sorted(node_types)) or 'none'})"


def _bounds_errors(path: str, global_bounds: GlobalBounds, block: PolicyBlock | None) -> list[tuple[str, str]]:
    """min > max on the effective bounds, reported only where the block sets bounds
    (an inherited global problem is reported once, at ``bounds``)."""
    errors = []
    for resource in _RESOURCES:
        if block is not None and _block_resource_bounds(block, resource) is None:
            continue
        low, high = _effective_bounds(global_bounds, block, resource)
        if low > high:
            errors.append(
                (f"{path}.{resource}", f"min ({_decimal_text(low)}) is greater than max ({_decimal_text(high)})")
            )
    return errors


def _decimal_text(value: Fraction) -> str:
    return format(Decimal(value.numerator) / Decimal(value.denominator), "f")


def _block_resource_bounds(block: PolicyBlock, resource: Resource) -> ResourceBounds | None:
    return getattr(block.bounds, resource) if block.bounds is not None else None


def _effective_bounds(
    bounds: GlobalBounds, block: PolicyBlock | None, resource: Resource
) -> tuple[Fraction, Fraction]:
    global_bounds: RequiredResourceBounds = getattr(bounds, resource)
    own = _block_resource_bounds(block, resource) if block is not None else None
    low = own.min if own is not None and own.min is not None else global_bounds.min
    high = own.max if own is not None and own.max is not None else global_bounds.max
    return low, high


def _effective_node_types(
    node_types: Mapping[str, NodeTypeSpec], block: PolicyBlock | None
) -> dict[str, NodeTypeSpec]:
    overlay = block.nodeTypes if block is not None and block.nodeTypes is not None else {}
    return {**node_types, **overlay}


def _compile(config: ResizerConfig) -> PolicyTable:
    def by_value(rule_kind: str, key: str, blocks: Mapping[str, PolicyBlock]) -> Mapping[str, Policy]:
        return MappingProxyType(
            {value: _policy(config, f"{rule_kind}:{key}={value}", block) for value, block in blocks.items()}
        )

    return PolicyTable(
        overrides=tuple(
            (override.match, _policy(config, f"override:{override.name}", override)) for override in config.overrides
        ),
        pod_annotations=tuple(
            (key, by_value("podAnnotation", key, config.podAnnotations[key])) for key in sorted(config.podAnnotations)
        ),
        pod_labels=tuple((key, by_value("podLabel", key, config.podLabels[key])) for key in sorted(config.podLabels)),
        compute_classes=MappingProxyType(
            {name: _policy(config, f"computeClass:{name}", block) for name, block in config.computeClasses.items()}
        ),
        default=_policy(config, "global", None),
    )


def _policy(config: ResizerConfig, rule: str, block: PolicyBlock | None) -> Policy:
    node_types = _effective_node_types(config.nodeTypes, block)
    cpu_min, cpu_max = _effective_bounds(config.bounds, block, "cpu")
    memory_min, memory_max = _effective_bounds(config.bounds, block, "memory")
    baseline = (
        block.baselineNodeType if block is not None and block.baselineNodeType is not None else config.baselineNodeType
    )
    memory_limit_decrease = (
        block.memoryLimitDecrease
        if block is not None and block.memoryLimitDecrease is not None
        else config.memoryLimitDecrease
    )
    return Policy(
        rule=rule,
        baseline_node_type=baseline,
        memory_limit_decrease=memory_limit_decrease,
        node_types=MappingProxyType(
            {name: NodeProfile(name, spec.cpuPerf, spec.memPerf) for name, spec in node_types.items()}
        ),
        cpu_bounds=Bounds(to_millicores(cpu_min), to_millicores(cpu_max)),
        memory_bounds=Bounds(to_bytes(memory_min), to_bytes(memory_max)),
    )


def _includes(actual: Mapping[str, str], required: Mapping[str, str] | None) -> bool:
    return all(actual.get(key) == value for key, value in (required or {}).items())
