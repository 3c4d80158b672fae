"""The ``config.yaml`` of the workload-resizer ConfigMap, and policy resolution per pod.

A policy block (an override, a ``podAnnotations``/``podLabels`` value or a
``computeClasses`` entry) is overlaid on the global settings: a field it leaves out falls
back to the global one, ``nodeTypes`` per entry, ``bounds`` per resource and side.
Precedence: the first override (list order) whose ``match`` fully holds, then
``podAnnotations``, ``podLabels`` (a pod's matching keys in lexicographic order),
``computeClasses``, then the global settings (docs/configuration.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from types import MappingProxyType
from typing import Annotated, Any, Literal, TypeVar

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    Strict,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from resizer.errors import ResizerError
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
    "CONFIG_NAME",
    "CONFIG_NAMESPACE",
    "NODE_TYPE_LABEL",
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
    "PodMatch",
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
# Where the webhook and the reconciler find the node type and the config, unless told otherwise.
NODE_TYPE_LABEL = "cloud.google.com/machine-family"
CONFIG_NAMESPACE = "workload-resizer-system"
CONFIG_NAME = "workload-resizer-config"

MemoryLimitDecrease = Literal["Never", "Allow"]
_RESOURCES: tuple[Resource, ...] = ("cpu", "memory")
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


# ---- the document's structure: pydantic models ------------------------------------------
# Strict (no coercion: a number is not a string, a set is not a list), unknown fields refused,
# frozen, mappings read-only. Field names are the document's (camelCase) so paths in errors
# read like the YAML. Pydantic runs once per ConfigMap change: the per-pod path
# (resolve_policy) reads only the plain dataclasses compiled from these models.

_K = TypeVar("_K")
_V = TypeVar("_V")
FrozenMap = Annotated[Mapping[_K, _V], AfterValidator(MappingProxyType)]
"""A mapping validated as a dict of its key and value types, then made read-only."""
Perf = Annotated[Fraction, PlainValidator(_perf)]
NonNegativeQuantity = Annotated[Fraction, PlainValidator(_non_negative_quantity)]


def _list_to_tuple(value: object) -> object:
    return tuple(value) if isinstance(value, list) else value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class NodeTypeSpec(_Strict):
    """Performance of one machine family relative to the others (higher = faster)."""

    cpuPerf: Perf
    memPerf: Perf


class ResourceBounds(_Strict):
    """Bounds of one resource in a policy block; each side optional (falls back to global)."""

    min: NonNegativeQuantity | None = None
    max: NonNegativeQuantity | None = None


class RequiredResourceBounds(_Strict):
    """Global bounds of one resource; both sides required."""

    min: NonNegativeQuantity
    max: NonNegativeQuantity


class BoundsSpec(_Strict):
    cpu: ResourceBounds | None = None
    memory: ResourceBounds | None = None


class GlobalBounds(_Strict):
    cpu: RequiredResourceBounds
    memory: RequiredResourceBounds


class PolicyBlock(_Strict):
    """Settings for the pods a block applies to, merged over the global settings as the
    module docstring describes (missing fields fall back; nodeTypes and bounds overlay)."""

    baselineNodeType: str | None = None
    nodeTypes: FrozenMap[str, NodeTypeSpec] | None = None
    bounds: BoundsSpec | None = None
    memoryLimitDecrease: MemoryLimitDecrease | None = None
    sidecars: bool | None = None


class OverrideMatch(_Strict):
    """Criteria of an override; all given criteria must hold (AND)."""

    computeClass: str | None = None
    podLabel: FrozenMap[str, str] | None = None
    podAnnotation: FrozenMap[str, str] | None = None

    @model_validator(mode="after")
    def _has_a_criterion(self) -> OverrideMatch:
        if self.computeClass is None and not self.podLabel and not self.podAnnotation:
            raise ValueError("needs at least one of computeClass, podLabel, podAnnotation")
        return self


class Override(PolicyBlock):
    """A named policy block applied to the pods its ``match`` selects."""

    name: str
    match: OverrideMatch

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, name: str) -> str:
        if not name.strip():
            raise ValueError("must not be empty")
        return name


class ResizerConfig(_Strict):
    """The validated ``config.yaml`` document (structure only). :func:`load_config`
    returns it compiled (:class:`CompiledConfig`), cross-field checks included."""

    baselineNodeType: str
    nodeTypes: FrozenMap[str, NodeTypeSpec]
    bounds: GlobalBounds
    # Never (default): a memory limit is never set below the author's. Lowering one below
    # the container's usage fails on cgroup v1 (the kernel refuses; the resize stays
    # InProgress) and risks an OOM kill on cgroup v2 (KEP-1287, "Memory Limit Decreases").
    memoryLimitDecrease: MemoryLimitDecrease = "Never"
    # false (default): restartable init containers (sidecars) are left alone. Their in-place
    # resize needs Kubernetes 1.33+, and a sidecar (a proxy, a log shipper) is often sized for
    # its own load, not for the node's speed: the admin opts in where the ratio fits it.
    sidecars: bool = False
    overrides: Annotated[tuple[Override, ...], BeforeValidator(_list_to_tuple)] = ()
    podAnnotations: FrozenMap[str, FrozenMap[str, PolicyBlock]] = Field(default_factory=lambda: MappingProxyType({}))
    podLabels: FrozenMap[str, FrozenMap[str, PolicyBlock]] = Field(default_factory=lambda: MappingProxyType({}))
    computeClasses: FrozenMap[str, PolicyBlock] = Field(default_factory=lambda: MappingProxyType({}))

    @classmethod
    def from_document(cls, document: object) -> ResizerConfig:
        """The structure of a parsed YAML document; :class:`ConfigError` lists every problem."""
        try:
            return cls.model_validate(document)
        except ValidationError as error:
            raise ConfigError(_structural_errors(error)) from None


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


# ---- pydantic's errors as (field path, message) ---------------------------------------------

_MAPPING_ERRORS = frozenset({"dict_type", "mapping_type", "model_type", "model_attributes_type"})
_LIST_ERRORS = frozenset({"list_type", "tuple_type"})


def _structural_errors(error: ValidationError) -> list[tuple[str, str]]:
    """One error per problem: what is under a key that is not a string is not checked further."""
    details = error.errors(include_url=False)
    bad_keys = [detail["loc"][:-1] for detail in details if _is_key_error(detail)]
    return [
        _path_and_message(detail)
        for detail in details
        if _is_key_error(detail) or not any(detail["loc"][: len(key)] == key for key in bad_keys)
    ]


def _is_key_error(detail: Mapping[str, Any]) -> bool:
    """Pydantic reports a key that is not a string at ``(..., key, "[key]")`` (key as an int
    or its repr); a field that happens to be named "[key]" does not repeat its value there."""
    loc, value = detail["loc"], detail.get("input")
    return (
        detail["type"] == "string_type"
        and len(loc) >= 2
        and loc[-1] == "[key]"
        and loc[-2] in (value, repr(value), str(value))
    )


def _path_and_message(detail: Mapping[str, Any]) -> tuple[str, str]:
    loc, kind, value = detail["loc"], detail["type"], detail.get("input")
    if _is_key_error(detail):
        return _path((*loc[:-2], str(value))), f"key must be a string, got {value!r}"
    if kind == "extra_forbidden":
        return _path(loc), "unknown field"
    if kind == "missing":
        return _path(loc), "field required"
    if kind == "string_type":
        return _path(loc), f"must be a string, got {_shown(value)}"
    if kind in _MAPPING_ERRORS:
        return _path(loc), f"must be a mapping, got {_shown(value)}"
    if kind in _LIST_ERRORS:
        return _path(loc), f"must be a list, got {_shown(value)}"
    if kind == "literal_error":
        return _path(loc), f"must be {(detail.get('ctx') or {}).get('expected')}, got {_shown(value)}"
    return _path(loc), str(detail["msg"]).removeprefix("Value error, ")


def _shown(value: object) -> str:
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    return "null" if value is None else repr(value)


_T = TypeVar("_T")


def _valid_or_none(adapter: TypeAdapter[_T], value: object) -> _T | None:
    try:
        return adapter.validate_python(value)
    except ValidationError:
        return None


_STR: TypeAdapter[str] = TypeAdapter(Annotated[str, Strict()])
_NODE_TYPES: TypeAdapter[Mapping[str, NodeTypeSpec]] = TypeAdapter(Annotated[FrozenMap[str, NodeTypeSpec], Strict()])
_GLOBAL_BOUNDS: TypeAdapter[GlobalBounds] = TypeAdapter(GlobalBounds)
_OVERRIDE: TypeAdapter[Override] = TypeAdapter(Override)
_BLOCK: TypeAdapter[PolicyBlock] = TypeAdapter(PolicyBlock)


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
    try:
        config = ResizerConfig.model_validate(document)
    except ValidationError as error:
        raise ConfigError(_structural_errors(error) + _semantic_errors(_valid_parts(document))) from None
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
    """``overrides[2].match``: the only list of the document is ``overrides``; any other
    int in a location is a mapping key that YAML read as a number."""
    path = ""
    for index, part in enumerate(loc):
        if isinstance(part, int) and index == 1 and loc[0] == "overrides":
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "(root)"


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


def _effective_bounds(bounds: GlobalBounds, block: PolicyBlock | None, resource: Resource) -> tuple[Fraction, Fraction]:
    global_bounds: RequiredResourceBounds = getattr(bounds, resource)
    own = _block_resource_bounds(block, resource) if block is not None else None
    low = own.min if own is not None and own.min is not None else global_bounds.min
    high = own.max if own is not None and own.max is not None else global_bounds.max
    return low, high


def _effective_node_types(node_types: Mapping[str, NodeTypeSpec], block: PolicyBlock | None) -> dict[str, NodeTypeSpec]:
    overlay = block.nodeTypes if block is not None and block.nodeTypes is not None else {}
    return {**node_types, **overlay}


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
    sidecars = block.sidecars if block is not None and block.sidecars is not None else config.sidecars
    return Policy(
        rule=rule,
        baseline_node_type=baseline,
        memory_limit_decrease=memory_limit_decrease,
        sidecars=sidecars,
        node_types=MappingProxyType(
            {name: NodeProfile(name, spec.cpuPerf, spec.memPerf) for name, spec in node_types.items()}
        ),
        cpu_bounds=Bounds(to_millicores(cpu_min), to_millicores(cpu_max)),
        memory_bounds=Bounds(to_bytes(memory_min), to_bytes(memory_max)),
    )


def _includes(actual: Mapping[str, str], required: Mapping[str, str] | None) -> bool:
    return all(actual.get(key) == value for key, value in (required or {}).items())
