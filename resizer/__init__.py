"""Sizing policy core of workload-resizer.

Pure functions shared by the admission webhook and the reconciler: Kubernetes quantity
arithmetic, the annotation contract, ConfigMap configuration and per-pod policy
resolution, pod eligibility and QoS class, baseline ("original") values, and the
resize plan (original x baselinePerf / nodePerf, stopped by the bounds) with its
``pods/resize`` patch. No I/O, logging or Kubernetes client: pods are plain dicts in
the JSON shape the API server uses.
"""

from resizer.config import (
    SAMPLE_CONFIG,
    Bounds,
    CompiledConfig,
    ConfigError,
    NodeProfile,
    Policy,
    ResizerConfig,
    compile_config,
    load_config,
    resolve_policy,
)
from resizer.eligibility import eligibility
from resizer.errors import ResizerError
from resizer.integrity import (
    EMPTY_KEYRING,
    Baseline,
    KeyRing,
    KeyRingError,
    PodIdentity,
    Trust,
    admission_stamp,
    admitted_originals,
    baseline,
    check_originals,
    early_binding,
    key_id_of,
    needs_resign,
    original_annotations,
    pod_mac,
    pod_mac_stand_in,
    sign_originals,
    sized_stamp,
)
from resizer.originals import (
    KeyCollisionError,
    OriginalsError,
    missing_original_annotations,
    original_keys,
    originals_from_spec_annotations,
    read_originals,
)
from resizer.pinning import (
    admission_hold,
    admission_sizing,
    as_authored,
    pinned_node_type,
    plan_bound_pod,
    values_patch,
)
from resizer.plan import PlanError, ResizePlan, node_resizes_pod_level, plan_resize
from resizer.podstate import (
    TOTAL_ANNOTATION_SIZE_LIMIT,
    fits_annotation_limit,
    is_controller_owned_key,
    is_original_key,
    original_key,
    pod_original_key,
    sidecars,
)
from resizer.qos import pod_qos_class
from resizer.quantity import (
    QuantityError,
    coerce_quantity,
    format_cpu,
    format_memory,
    parse_quantity,
    to_bytes,
    to_millicores,
)

__all__ = [
    "EMPTY_KEYRING",
    "TOTAL_ANNOTATION_SIZE_LIMIT",
    "Bounds",
    "CompiledConfig",
    "ConfigError",
    "KeyRing",
    "KeyRingError",
    "PodIdentity",
    "Trust",
    "Baseline",
    "admission_hold",
    "admission_sizing",
    "admission_stamp",
    "admitted_originals",
    "as_authored",
    "values_patch",
    "pinned_node_type",
    "plan_bound_pod",
    "sized_stamp",
    "baseline",
    "early_binding",
    "needs_resign",
    "pod_mac",
    "pod_mac_stand_in",
    "check_originals",
    "key_id_of",
    "original_annotations",
    "sign_originals",
    "is_original_key",
    "KeyCollisionError",
    "NodeProfile",
    "OriginalsError",
    "PlanError",
    "Policy",
    "QuantityError",
    "ResizerError",
    "ResizePlan",
    "ResizerConfig",
    "SAMPLE_CONFIG",
    "coerce_quantity",
    "compile_config",
    "eligibility",
    "fits_annotation_limit",
    "format_cpu",
    "format_memory",
    "is_controller_owned_key",
    "load_config",
    "missing_original_annotations",
    "original_key",
    "original_keys",
    "originals_from_spec_annotations",
    "parse_quantity",
    "plan_resize",
    "node_resizes_pod_level",
    "pod_original_key",
    "pod_qos_class",
    "read_originals",
    "resolve_policy",
    "sidecars",
    "to_bytes",
    "to_millicores",
]
