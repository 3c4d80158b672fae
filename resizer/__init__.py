"""Sizing policy core of workload-resizer.

Pure functions shared by the admission webhook and the reconciler: Kubernetes quantity
arithmetic, the annotation contract, ConfigMap configuration and per-pod policy
resolution, pod eligibility and QoS class, baseline ("original") values, and the
resize plan (desired = clamp(original x baselinePerf / nodePerf, bounds)) with its
``pods/resize`` patch. No I/O, logging or Kubernetes client: pods are plain dicts in
the JSON shape the API server uses.
"""

from resizer.annotations import (
    APPLIED_AT,
    APPLIED_INSTANCE_TYPE,
    ORIGINALS_MAC,
    PREFIX,
    SKIP,
    TOTAL_ANNOTATION_SIZE_LIMIT,
    fits_annotation_limit,
    is_controller_owned_key,
    is_original_key,
    original_key,
)
from resizer.config import (
    COMPUTE_CLASS_SELECTOR,
    Bounds,
    ConfigError,
    NodeProfile,
    Policy,
    ResizerConfig,
    SAMPLE_CONFIG,
    load_config,
    resolve_policy,
)
from resizer.eligibility import Eligibility, eligibility
from resizer.integrity import (
    EMPTY_KEYRING,
    Baseline,
    KeyRing,
    KeyRingError,
    OriginalsCheck,
    PodIdentity,
    Trust,
    baseline,
    check_originals,
    key_id_of,
    needs_resign,
    original_annotations,
    pod_mac,
    sign_originals,
)
from resizer.originals import (
    ContainerOriginals,
    OriginalsError,
    ResourceOriginal,
    missing_original_annotations,
    originals_from_spec_annotations,
    read_originals,
)
from resizer.plan import ResizePlan, ResourceChange, desired_quantity, plan_resize
from resizer.qos import pod_qos_class
from resizer.quantity import (
    QuantityError,
    coerce_quantity,
    format_cpu,
    format_memory,
    parse_quantity,
    round_half_away,
    to_bytes,
    to_millicores,
)

__all__ = [
    "APPLIED_AT",
    "APPLIED_INSTANCE_TYPE",
    "COMPUTE_CLASS_SELECTOR",
    "EMPTY_KEYRING",
    "ORIGINALS_MAC",
    "PREFIX",
    "SKIP",
    "TOTAL_ANNOTATION_SIZE_LIMIT",
    "Bounds",
    "ConfigError",
    "ContainerOriginals",
    "Eligibility",
    "KeyRing",
    "KeyRingError",
    "OriginalsCheck",
    "PodIdentity",
    "Trust",
    "Baseline",
    "baseline",
    "needs_resign",
    "pod_mac",
    "check_originals",
    "key_id_of",
    "original_annotations",
    "sign_originals",
    "is_original_key",
    "NodeProfile",
    "OriginalsError",
    "Policy",
    "QuantityError",
    "ResizePlan",
    "ResizerConfig",
    "SAMPLE_CONFIG",
    "ResourceChange",
    "ResourceOriginal",
    "coerce_quantity",
    "desired_quantity",
    "eligibility",
    "fits_annotation_limit",
    "format_cpu",
    "format_memory",
    "is_controller_owned_key",
    "load_config",
    "missing_original_annotations",
    "original_key",
    "originals_from_spec_annotations",
    "parse_quantity",
    "plan_resize",
    "pod_qos_class",
    "read_originals",
    "resolve_policy",
    "round_half_away",
    "to_bytes",
    "to_millicores",
]
