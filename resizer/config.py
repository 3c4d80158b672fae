"""The ``config.yaml`` of the workload-resizer ConfigMap, and policy resolution per pod.

A policy block (an override, a ``podAnnotations``/``podLabels`` value or a ``computeClasses`` entry)
is overlaid on the global settings: a field it leaves out falls back to the global one, ``nodeTypes``
per entry, ``bounds`` per resource and side. Precedence: the first override (list order) whose
``match`` fully holds, then ``podAnnotations``, ``podLabels`` (a pod's matching keys in lexicographic
order), ``computeClasses``, then the global settings (docs/configuration.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, dataclass, field
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from functools import cache, partial
from types import MappingProxyType, UnionType
from typing import Annotated, Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

import yaml

from resizer.errors import ResizerError
from resizer.quantity import RESOURCES, QuantityError, Resource, coerce_quantity, to_bytes, to_millicores

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


COMPUTE_CLASS_SELECTOR = "cloud.google.com/compute-class"
# Where the webhook and the reconciler find the node type and the config, unless told otherwise.
NODE_TYPE_LABEL = "cloud.google.com/machine-family"
CONFIG_NAMESPACE = "workload-resizer-system"
CONFIG_NAME = "workload-resizer-config"
CONFIG_KEY = "config.yaml"  # the key of that ConfigMap holding the config

MemoryLimitDecrease = Literal["Never", "Allow"]
_T = TypeVar("_T")
# Perf values are ratios of machine capability; anything outside this range is a typo
# (and a huge exponent would make the exact Fraction arithmetic explode).
_PERF_MAX_ADJUSTED_EXPONENT = 18


class ConfigError(ResizerError):
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
    sidecars: bool = False  # restartable init containers sized like containers


@dataclass(frozen=True)
class PolicyTable:
    """The merged policy of every rule of a config, in precedence order."""

    overrides: tuple[tuple[PodMatch, Policy], ...]
    pod_annotations: tuple[tuple[str, Mapping[str, Policy]], ...]
    pod_labels: tuple[tuple[str, Mapping[str, Policy]], ...]
    compute_classes: Mapping[str, Policy]
    default: Policy


# ---- the document's structure: frozen dataclasses -----------------------------------------
# Field names are the document's (camelCase) so paths in errors read like the YAML. The parsers
# below are made from these field types: strict (no coercion: a number is not a string, a set is
# not a list), unknown fields refused, mappings read-only, every problem reported. They run once
# per ConfigMap change; the per-pod path (resolve_policy) reads the Policy records compiled from
# them. Hand-written rather than a library: docs/dependencies.md says why.

# An annotated field type: the function checks the value and converts it.
Perf = Annotated[Fraction, _perf]
NonNegativeQuantity = Annotated[Fraction, _non_negative_quantity]


def _override_name(value: object) -> str:
    name: str = _typed(str, value)
    if not name.strip():
        raise ValueError("must not be empty")
    return name


@dataclass(frozen=True, kw_only=True)
class NodeTypeSpec:
    """Performance of one machine family relative to the others (higher = faster)."""

    cpuPerf: Perf
    memPerf: Perf


@dataclass(frozen=True, kw_only=True)
class ResourceBounds:
    """Bounds of one resource in a policy block; each side optional (falls back to global)."""

    min: NonNegativeQuantity | None = None
    max: NonNegativeQuantity | None = None


@dataclass(frozen=True, kw_only=True)
class RequiredResourceBounds:
    """Global bounds of one resource; both sides required."""

    min: NonNegativeQuantity
    max: NonNegativeQuantity


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
    """Settings for the pods a block applies to, overlaid on the global ones (module docstring)."""

    baselineNodeType: str | None = None
    nodeTypes: Mapping[str, NodeTypeSpec] | None = None
    bounds: BoundsSpec | None = None
    memoryLimitDecrease: MemoryLimitDecrease | None = None
    sidecars: bool | None = None


@dataclass(frozen=True, kw_only=True)
class OverrideMatch:
    """Criteria of an override; all given criteria must hold (AND)."""

    computeClass: str | None = None
    podLabel: Mapping[str, str] | None = None
    podAnnotation: Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        if self.computeClass is None and not self.podLabel and not self.podAnnotation:
            raise ValueError("needs at least one of computeClass, podLabel, podAnnotation")


@dataclass(frozen=True, kw_only=True)
class Override(PolicyBlock):
    """A named policy block applied to the pods its ``match`` selects."""

    name: Annotated[str, _override_name]
    match: OverrideMatch


@dataclass(frozen=True, kw_only=True)
class ResizerConfig:
    """The validated ``config.yaml`` document (structure only; :func:`load_config` compiles it)."""

    baselineNodeType: str
    nodeTypes: Mapping[str, NodeTypeSpec]
    bounds: GlobalBounds
    # Never (default): a memory limit is never set below the author's. Lowering one below
    # the container's usage fails on cgroup v1 (the kernel refuses; the resize stays
    # InProgress) and risks an OOM kill on cgroup v2 (KEP-1287, "Memory Limit Decreases").
    memoryLimitDecrease: MemoryLimitDecrease = "Never"
    # false (default): restartable init containers (sidecars) are left alone. Their in-place
    # resize needs Kubernetes 1.33+, and a sidecar (a proxy, a log shipper) is often sized for
    # its own load, not for the node's speed: the admin opts in where the ratio fits it.
    sidecars: bool = False
    overrides: tuple[Override, ...] = ()
    podAnnotations: Mapping[str, Mapping[str, PolicyBlock]] = field(default_factory=lambda: MappingProxyType({}))
    podLabels: Mapping[str, Mapping[str, PolicyBlock]] = field(default_factory=lambda: MappingProxyType({}))
    computeClasses: Mapping[str, PolicyBlock] = field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_document(cls, document: object) -> ResizerConfig:
        """The structure of a parsed YAML document; :class:`ConfigError` lists every problem."""
        config, errors = _structure(document)
        if errors:
            raise ConfigError(errors)
        return config


@dataclass(frozen=True)
class PodMatch:
    """An override's criteria, compiled for the per-pod path; all given criteria must hold."""

    compute_class: str | None
    labels: Mapping[str, str]
    annotations: Mapping[str, str]

    @classmethod
    def of(cls, match: OverrideMatch) -> PodMatch:
        return cls(
            match.computeClass,
            MappingProxyType(dict(match.podLabel or {})),
            MappingProxyType(dict(match.podAnnotation or {})),
        )

    def holds(self, labels: Mapping[str, str], annotations: Mapping[str, str], compute_class: str | None) -> bool:
        return (
            (self.compute_class is None or self.compute_class == compute_class)
            and _includes(labels, self.labels)
            and _includes(annotations, self.annotations)
        )


# ---- parsers: (value, path, errors) -> the typed value, or _INVALID with errors appended ------

_Parser = Callable[[object, str, list[tuple[str, str]]], Any]
_INVALID: Any = object()


def _structure(document: object) -> tuple[ResizerConfig, list[tuple[str, str]]]:
    """The parsed document, or _INVALID and every structural problem ("(root)": the document)."""
    errors: list[tuple[str, str]] = []
    config = _parser(ResizerConfig)(document, "", errors)
    return config, [(path or "(root)", message) for path, message in errors]


@cache
def _parser(field_type: Any) -> _Parser:
    origin, args = get_origin(field_type), get_args(field_type)
    if origin is Annotated:
        return _checked(args[1])
    if field_type in _TYPE_NAMES:
        return _checked(partial(_typed, field_type))
    if origin is Literal:
        return _checked(partial(_one_of, args))
    if origin in (Union, UnionType):  # X | None, the only union of the document
        (inner,) = (arg for arg in args if arg is not type(None))
        return _optional(_parser(inner))
    if origin is Mapping:
        return _mapping_of(_parser(args[1]))
    if origin is tuple:
        return _list_of(_parser(args[0]))
    if isinstance(field_type, type) and dataclasses.is_dataclass(field_type):
        return _model(field_type)
    raise TypeError(f"no parser for {field_type!r}")


def _checked(check: Callable[[object], Any]) -> _Parser:
    """A parser from a function that returns the value or raises ValueError."""

    def parse(value: object, path: str, errors: list[tuple[str, str]]) -> Any:
        try:
            return check(value)
        except ValueError as error:
            errors.append((path, str(error)))
            return _INVALID

    return parse


_TYPE_NAMES: Mapping[type, str] = {str: "a string", bool: "a boolean"}


def _typed(kind: type, value: object) -> Any:
    if not isinstance(value, kind):
        raise ValueError(f"must be {_TYPE_NAMES[kind]}, got {_shown(value)}")
    return value


def _one_of(choices: tuple[str, ...], value: object) -> str:
    if value not in choices:
        raise ValueError(f"must be {' or '.join(map(repr, choices))}, got {_shown(value)}")
    return value


def _shown(value: object) -> str:
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    return "null" if value is None else repr(value)


def _optional(parser: _Parser) -> _Parser:
    def parse(value: object, path: str, errors: list[tuple[str, str]]) -> Any:
        return None if value is None else parser(value, path, errors)

    return parse


def _mapping_of(parser: _Parser) -> _Parser:
    """A mapping with string keys, each value checked by ``parser`` (a non-string key's is not)."""

    def parse(value: object, path: str, errors: list[tuple[str, str]]) -> Any:
        if not isinstance(value, Mapping):
            return _wrong(path, "a mapping", value, errors)
        before = len(errors)
        parsed = {}
        for key, item in value.items():
            if isinstance(key, str):
                parsed[key] = parser(item, _at(path, key), errors)
            else:
                errors.append(_key_error(path, key))
        return _INVALID if len(errors) > before else MappingProxyType(parsed)

    return parse


def _list_of(parser: _Parser) -> _Parser:
    def parse(value: object, path: str, errors: list[tuple[str, str]]) -> Any:
        if not isinstance(value, (list, tuple)):
            return _wrong(path, "a list", value, errors)
        before = len(errors)
        parsed = tuple(parser(item, f"{path}[{index}]", errors) for index, item in enumerate(value))
        return _INVALID if len(errors) > before else parsed

    return parse


def _model(cls: type[Any]) -> _Parser:
    """A mapping with the fields of dataclass ``cls`` (those without a default required, unknown ones
    refused); a ValueError of ``cls`` itself is a problem of the whole mapping."""
    field_types = get_type_hints(cls, include_extras=True)
    fields = {
        field.name: (_parser(field_types[field.name]), field.default is MISSING and field.default_factory is MISSING)
        for field in dataclasses.fields(cls)
    }

    def parse(value: object, path: str, errors: list[tuple[str, str]]) -> Any:
        if not isinstance(value, dict):
            return _wrong(path, "a mapping", value, errors)
        before = len(errors)
        parsed = {}
        for name, (parser, required) in fields.items():
            if name in value:
                parsed[name] = parser(value[name], _at(path, name), errors)
            elif required:
                errors.append((_at(path, name), "field required"))
        for key in value:
            if not isinstance(key, str):
                errors.append(_key_error(path, key))
            elif key not in fields:
                errors.append((_at(path, key), "unknown field"))
        if len(errors) > before:
            return _INVALID
        try:
            return cls(**parsed)
        except ValueError as error:
            errors.append((path, str(error)))
            return _INVALID

    return parse


def _wrong(path: str, expected: str, value: object, errors: list[tuple[str, str]]) -> Any:
    errors.append((path, f"must be {expected}, got {_shown(value)}"))
    return _INVALID


def _key_error(path: str, key: object) -> tuple[str, str]:
    return _at(path, str(key)), f"key must be a string, got {key!r}"


def _at(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _valid_or_none(field_type: Any, value: object) -> Any:
    errors: list[tuple[str, str]] = []
    parsed = _parser(field_type)(value, "", errors)
    return None if errors else parsed


@dataclass(frozen=True)
class PartialConfig:
    """The parts of a document valid on their own (None: missing or invalid; a valid document has
    none). Cross-field checks run on it, so one broken section does not hide the others' problems."""

    baselineNodeType: str | None
    nodeTypes: Mapping[str, NodeTypeSpec] | None
    bounds: GlobalBounds | None
    overrides: tuple[Override | None, ...]
    podAnnotations: Mapping[str, Mapping[str, PolicyBlock | None]]
    podLabels: Mapping[str, Mapping[str, PolicyBlock | None]]
    computeClasses: Mapping[str, PolicyBlock | None]

    @classmethod
    def of(cls, document: ResizerConfig) -> PartialConfig:
        return cls(**{part.name: getattr(document, part.name) for part in dataclasses.fields(cls)})


@dataclass(frozen=True)
class CompiledConfig:
    """A valid configuration: the document and the merged :class:`Policy` of every rule, computed once."""

    document: ResizerConfig
    policies: PolicyTable

    @property
    def baseline_node_type(self) -> str:
        return self.document.baselineNodeType

    @property
    def node_types(self) -> Mapping[str, NodeTypeSpec]:
        return self.document.nodeTypes


def config_text(configmap: Mapping[str, Any] | None) -> str | None:
    """The config a ConfigMap holds at :data:`CONFIG_KEY`; None without one (or with no string there)."""
    data = (configmap or {}).get("data")
    text = data.get(CONFIG_KEY) if isinstance(data, Mapping) else None
    return text if isinstance(text, str) else None


def load_config(text: str) -> CompiledConfig:
    """Parse, validate and compile ``config.yaml``; :class:`ConfigError` lists every structural
    problem and the cross-field ones (baseline not an effective node type, min > max on the
    effective bounds, duplicate override names) of every valid part."""
    document = _parse_yaml(text)
    config, errors = _structure(document)
    if errors:
        raise ConfigError(errors + _semantic_errors(_valid_parts(document)))
    return compile_config(config)


def compile_config(document: ResizerConfig) -> CompiledConfig:
    """Run the cross-field checks on a structurally valid document and merge its policies."""
    errors = _semantic_errors(PartialConfig.of(document))
    if errors:
        raise ConfigError(errors)
    return CompiledConfig(document, _compile(document))


def resolve_policy(config: CompiledConfig, pod: Mapping[str, Any]) -> Policy:
    """The policy for a pod, by the precedence the module docstring gives."""
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


def _valid_parts(document: Mapping[str, Any]) -> PartialConfig:
    def mapping(value: object) -> dict[Any, Any]:
        return value if isinstance(value, dict) else {}

    def valid_blocks(by_name: object) -> dict[str, PolicyBlock | None]:
        return {name: _valid_or_none(PolicyBlock, raw) for name, raw in mapping(by_name).items()}

    def blocks(section: str) -> dict[str, dict[str, PolicyBlock | None]]:
        return {key: valid_blocks(by_value) for key, by_value in mapping(document.get(section)).items()}

    overrides = document.get("overrides")
    return PartialConfig(
        baselineNodeType=_valid_or_none(str, document.get("baselineNodeType")),
        nodeTypes=_valid_or_none(Mapping[str, NodeTypeSpec], document.get("nodeTypes")),
        bounds=_valid_or_none(GlobalBounds, document.get("bounds")),
        overrides=tuple(_valid_or_none(Override, raw) for raw in (overrides if isinstance(overrides, list) else [])),
        podAnnotations=blocks("podAnnotations"),
        podLabels=blocks("podLabels"),
        computeClasses=valid_blocks(document.get("computeClasses")),
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
    errors: list[tuple[str, str]] = []
    first_index: dict[str, int] = {}
    for index, override in enumerate(config.overrides):
        if override is not None and (first := first_index.setdefault(override.name, index)) != index:
            message = f"duplicate override name {override.name!r} (first used by overrides[{first}])"
            errors.append((f"overrides[{index}].name", message))
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


def _not_a_node_type(name: str, node_types: Mapping[str, object]) -> str:
    return f"{name!r} is not one of the node types ({', '.join(sorted(node_types)) or 'none'})"


def _bounds_errors(path: str, global_bounds: GlobalBounds, block: PolicyBlock | None) -> list[tuple[str, str]]:
    """min > max on the effective bounds where the block sets them (a global one is reported at ``bounds``)."""
    errors = []
    for resource in RESOURCES:
        if block is not None and _block_resource_bounds(block, resource) is None:
            continue
        low, high = _effective_bounds(global_bounds, block, resource)
        if low > high:
            message = f"min ({_decimal_text(low)}) is greater than max ({_decimal_text(high)})"
            errors.append((f"{path}.{resource}", message))
    return errors


def _decimal_text(value: Fraction) -> str:
    return format(Decimal(value.numerator) / Decimal(value.denominator), "f")


def _block_resource_bounds(block: PolicyBlock | None, resource: Resource) -> ResourceBounds | None:
    return getattr(block.bounds, resource) if block is not None and block.bounds is not None else None


def _effective_bounds(bounds: GlobalBounds, block: PolicyBlock | None, resource: Resource) -> tuple[Fraction, Fraction]:
    global_bounds: RequiredResourceBounds = getattr(bounds, resource)
    own = _block_resource_bounds(block, resource) or ResourceBounds()
    return _inherited(own.min, global_bounds.min), _inherited(own.max, global_bounds.max)


def _effective_node_types(node_types: Mapping[str, NodeTypeSpec], block: PolicyBlock | None) -> dict[str, NodeTypeSpec]:
    return {**node_types, **((block.nodeTypes if block is not None else None) or {})}


def _inherited(own: _T | None, inherited: _T) -> _T:
    return inherited if own is None else own


def _compile(config: ResizerConfig) -> PolicyTable:
    def by_value(rule_kind: str, key: str, blocks: Mapping[str, PolicyBlock]) -> Mapping[str, Policy]:
        return MappingProxyType(
            {value: _policy(config, f"{rule_kind}:{key}={value}", block) for value, block in blocks.items()}
        )

    return PolicyTable(
        overrides=tuple(
            (PodMatch.of(override.match), _policy(config, f"override:{override.name}", override))
            for override in config.overrides
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
    own = block if block is not None else PolicyBlock()
    return Policy(
        rule=rule,
        baseline_node_type=_inherited(own.baselineNodeType, config.baselineNodeType),
        memory_limit_decrease=_inherited(own.memoryLimitDecrease, config.memoryLimitDecrease),
        sidecars=_inherited(own.sidecars, config.sidecars),
        node_types=MappingProxyType(
            {name: NodeProfile(name, spec.cpuPerf, spec.memPerf) for name, spec in node_types.items()}
        ),
        cpu_bounds=Bounds(*map(to_millicores, _effective_bounds(config.bounds, block, "cpu"))),
        memory_bounds=Bounds(*map(to_bytes, _effective_bounds(config.bounds, block, "memory"))),
    )


def _includes(actual: Mapping[str, str], required: Mapping[str, str] | None) -> bool:
    return all(actual.get(key) == value for key, value in (required or {}).items())
