"""Prometheus metrics of the reconciler, named like controller-runtime's (the client machinery's
are in kube.metrics)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from ops.prometheus import ComputedGauge, Counter, Gauge, Histogram
from resizer.forecast import RequestTotals

CONTROLLER = "pod-resizer"
RECONCILE_TOTAL = Counter(
    "controller_runtime_reconcile_total",
    "Total number of reconciliations per controller and result.",
    ["controller", "result"],
)
RECONCILE_ERRORS = Counter(
    "controller_runtime_reconcile_errors_total", "Total number of reconciliation errors per controller.", ["controller"]
)
RECONCILE_TIME = Histogram(
    "controller_runtime_reconcile_time_seconds",
    "Length of time per reconciliation per controller.",
    ["controller"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
ACTIVE_WORKERS = Gauge(
    "controller_runtime_active_workers", "Number of currently used workers per controller.", ["controller"]
)
MAX_WORKERS = Gauge(
    "controller_runtime_max_concurrent_reconciles",
    "Maximum number of concurrent reconciles per controller.",
    ["controller"],
)
OUTCOMES = Counter("workload_resizer_outcomes_total", "Decisions per outcome (the Event reasons).", ["reason"])
ACTIONS = Counter(
    "workload_resizer_reconcile_actions_total",
    "Reconciles per action decided (reconciler.decide: Resize, RecordApplied, Follow, Report, Hold, Parked, "
    "Resign, Adopt, Nothing, NotEligible, Untyped).",
    ["action"],
)
CONFIG_VALID = Gauge("workload_resizer_config_valid", "1 if the latest ConfigMap content is valid, 0 if it is not.")
CONFIG_LOADED = Gauge("workload_resizer_config_loaded", "1 once a valid config is in use (possibly the last good one).")
CONFIG_ERRORS = Counter(
    "workload_resizer_config_errors_total", "ConfigMap contents rejected by validation, or missing."
)
CONFIG_RELOADS = Counter("workload_resizer_config_reloads_total", "Valid config versions taken into use.")
RESIZES_WAITING = Gauge(
    "workload_resizer_resizes_waiting",
    "Pods whose resize has not been actuated, by state (requested, deferred, infeasible, error).",
    ["state"],
)
RESIZE_ACTUATION = Histogram(
    "workload_resizer_resize_actuation_seconds",
    "Time from the pods/resize request to the kubelet reporting the new size (actuated).",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)
RESIZE_OUTCOMES = Counter(
    "workload_resizer_resize_outcomes_total",
    "Resizes by how they ended or stalled (actuated, deferred, deferred_too_long, infeasible, error, "
    "error_reverted, revert_refused, unsupported).",
    ["outcome"],
)
RESIZES_HELD = Gauge(
    "workload_resizer_resizes_held",
    "Pods whose resize is not sent because a constraint would refuse it or another controller sizes them, "
    "by constraint (LimitRange, ResourceQuota, NodeHeadroom, VerticalPodAutoscaler).",
    ["constraint"],
)
ORIGINALS_BOUND = Counter(
    "workload_resizer_originals_bound_total",
    "Pods whose originals were bound to them with a pod MAC ahead of a resize, by when: gated (held by "
    "scheduling gates at generation 1, before removing a gate changes the spec).",
    ["when"],
)
ORIGINALS_UNKNOWN_KEY_PODS = Gauge(
    "workload_resizer_originals_unknown_key_pods",
    "Pods in scope whose originals-mac names a key id the reconciler does not have (their originals no "
    "longer verify: put the key back into the Secret).",
)

# The label values known in advance start at 0 (controller-runtime does this for its results):
# a series that first appears at 1 shows no increase() in PromQL, so an alert on the first
# failure after a (re)start would never fire.
RESIZE_OUTCOME_VALUES = tuple(
    "actuated deferred deferred_too_long infeasible error error_reverted revert_refused unsupported".split()
)
WAITING_STATES = ("requested", "deferred", "infeasible", "error")
HELD_CONSTRAINTS = ("LimitRange", "ResourceQuota", "NodeHeadroom", "CriticalPriority", "VerticalPodAutoscaler")
# The names of reconciler.decide.Action's subclasses (decide cannot be imported here: its imports reach this module).
ACTION_NAMES = tuple("Resize RecordApplied Follow Report Hold Parked Resign Adopt Nothing NotEligible Untyped".split())


def _start_known_series_at_zero() -> None:
    from reconciler.reasons import Reason

    for metric, values in (
        (ACTIONS, ACTION_NAMES),
        (RESIZE_OUTCOMES, RESIZE_OUTCOME_VALUES),
        (RESIZES_WAITING, WAITING_STATES),
        (RESIZES_HELD, HELD_CONSTRAINTS),
        (ORIGINALS_BOUND, ("gated",)),
        (OUTCOMES, [reason.value for reason in Reason]),
    ):
        for value in values:
            metric.labels(value)
    for result in ("success", "error", "requeue_after"):
        RECONCILE_TOTAL.labels(CONTROLLER, result)
    RECONCILE_ERRORS.labels(CONTROLLER)


_start_known_series_at_zero()


# ---- what was freed: the managed pods' requests per node type (reconciler.freed), when scraped

# The running reconciler's source (one per process; none: no samples, e.g. a standby replica).
freed_source: list[Callable[[], Mapping[str, RequestTotals]]] = []


def _managed_request_samples() -> Iterator[tuple[tuple[str, str, str], float]]:
    for source in freed_source[-1:]:
        for node_type, totals in source().items():
            yield ("cpu", node_type, "original"), totals.original_cpu / 1000
            yield ("cpu", node_type, "current"), totals.current_cpu / 1000
            yield ("memory", node_type, "original"), float(totals.original_memory)
            yield ("memory", node_type, "current"), float(totals.current_memory)


def _managed_pod_samples() -> Iterator[tuple[tuple[str], float]]:
    for source in freed_source[-1:]:
        for node_type, totals in source().items():
            yield (node_type,), float(totals.pods)


MANAGED_REQUESTS = ComputedGauge(
    "workload_resizer_managed_requests",
    "Summed container requests of the pods the reconciler manages (trusted originals), by resource "
    "(cpu in cores, memory in bytes), node type and state: original (as authored) or current. "
    "original - current is what was freed (negative: added).",
    ["resource", "node_type", "state"],
    _managed_request_samples,
)
MANAGED_PODS = ComputedGauge(
    "workload_resizer_managed_pods",
    "Pods the reconciler manages (trusted originals), by node type.",
    ["node_type"],
    _managed_pod_samples,
)
