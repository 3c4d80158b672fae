"""Typed settings of the reconciler and the admin commands, built once from the flags.

The defaults both share (the node-type label, where the ConfigMap lives) are defined here once;
``reconciler.options`` and ``commands.cli`` turn flags into these objects, and nothing past the
entry points sees an argparse Namespace.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from resizer.config import CONFIG_KEY as CONFIG_KEY  # shared with the webhook
from resizer.config import CONFIG_NAME as CONFIG_NAME
from resizer.config import CONFIG_NAMESPACE as CONFIG_NAMESPACE
from resizer.config import NODE_TYPE_LABEL as NODE_TYPE_LABEL
from resizer.scope import NamespaceScope

ORIGINALS_KEYS_SECRET = f"{CONFIG_NAMESPACE}/workload-resizer-originals-keys"  # the chart's, by default


@dataclass(frozen=True)
class ApiSettings:
    kubeconfig: str | None = None
    context: str | None = None
    qps: float = 100.0
    burst: int = 200
    page_size: int = 500
    watch_idle_timeout: float = 90.0


@dataclass(frozen=True)
class ControllerSettings:
    """What the pod resizer decides with (the controller's options)."""

    node_type_label: str = NODE_TYPE_LABEL
    dry_run: bool = False
    resize_restart_containers: bool = False
    realign: bool = True
    max_resizes_per_second: float = 10.0
    # A resize the kubelet keeps deferring is reported as a Warning after this long (seconds).
    deferred_timeout: float = 900.0
    # A resize the kubelet fails to actuate is re-checked this often (backoff doubling from
    # error_backoff) before the spec is set back to what the containers actually have.
    error_retries: int = 3
    error_backoff: float = 30.0


PREFLIGHT_CHECKS = ("LimitRange", "ResourceQuota", "NodeHeadroom")


@dataclass(frozen=True)
class PreflightSettings:
    """What a resize is judged against before it is sent, and whether pods an updating
    VerticalPodAutoscaler sizes are left alone."""

    checks: tuple[str, ...] = PREFLIGHT_CHECKS
    skip_vpa_managed: bool = True
    # An increase waits for room on its node at most this long (seconds), then is sent: the
    # kubelet keeps it Deferred and applies it once room frees (reported as such).
    node_room_wait: float = 600.0
    upsize_critical_pods: bool = False


@dataclass(frozen=True)
class LeaderElectionSettings:
    enabled: bool = False
    namespace: str = CONFIG_NAMESPACE
    name: str = "workload-resizer-reconciler"
    identity: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


@dataclass(frozen=True)
class ReconcilerSettings:
    """Everything `python -m reconciler` runs with."""

    api: ApiSettings = field(default_factory=ApiSettings)
    controller: ControllerSettings = field(default_factory=ControllerSettings)
    preflight: PreflightSettings = field(default_factory=PreflightSettings)
    leader_election: LeaderElectionSettings = field(default_factory=LeaderElectionSettings)
    scope: NamespaceScope = field(default_factory=lambda: NamespaceScope())
    config_namespace: str = CONFIG_NAMESPACE
    config_name: str = CONFIG_NAME
    config_refresh_interval: float = 30.0
    originals_key_dir: str = ""
    originals_keys_secret: str = ""  # namespace/name; created when absent
    concurrency: int = 8
    metrics_bind_address: str = ":8080"
    health_probe_bind_address: str = ":8081"
    log_level: str = "info"
    log_format: str = "json"
    shutdown_timeout: float = 20.0


@dataclass(frozen=True)
class KeySettings:
    """Where the admin commands read the originals MAC keys: a directory (as the reconciler
    mounts it) or, by default, the chart's Secret through the API."""

    key_dir: str = ""
    secret: str = ORIGINALS_KEYS_SECRET  # namespace/name


@dataclass(frozen=True)
class PlanSettings:
    """`workload-resizer plan`: what to plan with (the reconciler's sizing settings) and how to print it."""

    api: ApiSettings = field(default_factory=lambda: ApiSettings(qps=50.0, burst=100))
    scope: NamespaceScope = field(default_factory=lambda: NamespaceScope())
    keys: KeySettings = field(default_factory=KeySettings)
    config_file: str | None = None
    config_namespace: str = CONFIG_NAMESPACE
    config_name: str = CONFIG_NAME
    node_type_label: str = NODE_TYPE_LABEL
    resize_restart_containers: bool = False
    realign: bool = True
    output: str = "table"
    show_aligned: bool = False


@dataclass(frozen=True)
class ReportSettings(PlanSettings):
    """`workload-resizer report`: what the product freed, with `plan`'s sizing settings (table, json or html)."""


@dataclass(frozen=True)
class RestoreSettings:
    api: ApiSettings = field(default_factory=lambda: ApiSettings(qps=20.0, burst=40))
    scope: NamespaceScope = field(default_factory=lambda: NamespaceScope())
    keys: KeySettings = field(default_factory=KeySettings)
    # Pods whose originals cannot be verified keep their spec; also remove their annotations.
    remove_unverified: bool = False
    max_resizes_per_second: float = 10.0
    dry_run: bool = False
    only_namespace: str = ""
    shutdown_timeout: float = 10.0


# The benchmark image hack/cluster builds and imports into its real nodes (hack/node/images/calibrate).
CALIBRATE_IMAGE = "workload-resizer.local/calibrate:1"


@dataclass(frozen=True)
class CalibrateSettings:
    """`workload-resizer calibrate`: which node types to benchmark, how, and where the result goes."""

    api: ApiSettings = field(default_factory=lambda: ApiSettings(qps=20.0, burst=40))
    config_namespace: str = CONFIG_NAMESPACE
    config_name: str = CONFIG_NAME
    node_type_label: str = NODE_TYPE_LABEL
    node_types: tuple[str, ...] = ()  # empty: every type found on the nodes
    baseline_node_type: str = ""  # empty: the config's baselineNodeType
    repeats: int = 5
    confidence: float = 0.95
    cpu: str = "1"  # the benchmark pod's request = limit
    memory: str = "64Mi"
    timeout: float = 300.0  # per run: scheduling, start and the benchmark
    namespace: str = CONFIG_NAMESPACE  # where the benchmark pods run
    image: str = CALIBRATE_IMAGE
    image_pull_policy: str = "IfNotPresent"
    command: tuple[str, ...] = ()  # empty: the image's entrypoint
    benchmark_seconds: float = 2.0  # the built-in benchmark's wall time per kernel
    tolerations: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect); "" value: Exists
    host_network: bool = False
    output: str = "table"
    apply: bool = False


@dataclass(frozen=True)
class SelftestSettings:
    """`workload-resizer selftest` (what `helm test` runs): where the product runs and the webhook is probed."""

    api: ApiSettings = field(default_factory=lambda: ApiSettings(qps=20.0, burst=40))
    namespace: str = CONFIG_NAMESPACE  # the release's: the reconciler pods and the Lease
    probe_namespace: str = "default"  # a namespace the webhook covers; the probe pod is a dry run
    probe_image: str = "registry.k8s.io/pause:3.10"  # never pulled: nothing runs
    lease: str = LeaderElectionSettings().name  # empty: the reconciler runs without leader election
    reconciler_selector: str = "app.kubernetes.io/name=workload-resizer,app.kubernetes.io/component=reconciler"
    timeout: float = 30.0  # each check is retried this long before it fails
