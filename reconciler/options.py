"""Command-line flags of `python -m reconciler`, named like the Go ecosystem's, turned into
:class:`reconciler.settings.ReconcilerSettings` (the defaults live there)."""

from __future__ import annotations

import argparse
import os
import socket
import uuid

from ops import flags
from reconciler.settings import (
    PREFLIGHT_CHECKS,
    ApiSettings,
    ControllerSettings,
    LeaderElectionSettings,
    PreflightSettings,
    ReconcilerSettings,
)
from resizer.podstate import described_keys
from resizer.scope import ScopeError, namespace_scope

# Every flag's default is read from the settings' own defaults: one place each.
_DEFAULT = ReconcilerSettings()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m reconciler",
        description="workload-resizer reconciler: resizes bound pods in place (pods/resize) for the "
        "machine family of their node, from the originals stamped at admission.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    api = p.add_argument_group("Kubernetes API")
    api.add_argument(
        "--kubeconfig",
        default=_DEFAULT.api.kubeconfig,
        help="path to a kubeconfig; default: in-cluster config, then $KUBECONFIG / ~/.kube/config",
    )
    api.add_argument(
        "--kube-api-qps", type=float, default=_DEFAULT.api.qps, help="client-side sustained requests per second"
    )
    api.add_argument(
        "--kube-api-burst", type=flags.positive_int, default=_DEFAULT.api.burst, help="client-side request burst"
    )
    api.add_argument(
        "--watch-idle-timeout",
        type=flags.duration,
        default=_DEFAULT.api.watch_idle_timeout,
        help="restart a watch that delivered nothing (not even a bookmark) for this long",
    )

    sizing = p.add_argument_group("sizing")
    sizing.add_argument(
        "--node-type-label",
        default=_DEFAULT.controller.node_type_label,
        help="node label whose value names the node type in the config's nodeTypes",
    )
    sizing.add_argument(
        "--config-namespace", default=_DEFAULT.config_namespace, help="namespace of the config ConfigMap"
    )
    sizing.add_argument(
        "--config-name", default=_DEFAULT.config_name, help="name of the config ConfigMap (key config.yaml)"
    )
    sizing.add_argument(
        "--config-refresh-interval",
        type=flags.duration,
        default=_DEFAULT.config_refresh_interval,
        help="also re-read the ConfigMap this often, besides watching it",
    )
    sizing.add_argument(
        "--resize-restart-containers",
        action="store_true",
        help="also resize resources whose resizePolicy is RestartContainer (restarts them)",
    )
    flags.scope_flags(
        sizing,
        {
            "--exclude-namespaces": "namespaces whose pods are never touched, besides kube-system and --namespace "
            "(set the same list on the webhook; the chart sets both from scope.*)",
            "--namespace": "the product's own namespace, always excluded (default: $POD_NAMESPACE)",
            "--namespace-selector": f"label selector (kubectl syntax, e.g. '!{described_keys('exclude')}') a pod's "
            "namespace must match to be in scope; needs list/watch on namespaces",
        },
    )
    sizing.add_argument(
        "--realign",
        type=flags.boolean,
        default=_DEFAULT.controller.realign,
        metavar="BOOL",
        help="when the config or a node's type changes, resize pods already sized whose desired "
        "size changed (from their originals, never compounding); false: only pods not yet "
        "sized for their node's type are sized (the design's 'new pods only')",
    )
    sizing.add_argument(
        "--max-resizes-per-second",
        type=flags.positive_float,
        default=_DEFAULT.controller.max_resizes_per_second,
        metavar="N",
        help="re-alignment resizes (pods already sized) per second at most, so a config edit "
        "rolls out gradually; the first sizing of a new pod is not throttled",
    )
    sizing.add_argument(
        "--dry-run", action="store_true", help="decide, log and record WouldResize events, but patch nothing"
    )
    sizing.add_argument(
        "--originals-key-dir",
        default=_DEFAULT.originals_key_dir,
        help="directory of HMAC keys (file name = key id; the greatest id signs, any verifies) "
        "for the original-* annotations: the Secret shared with the webhook; re-read every "
        "--config-refresh-interval. Empty: nothing verifies, so only pods whose spec never "
        "changed are resized (from their spec)",
    )
    sizing.add_argument(
        "--originals-keys-secret",
        default=_DEFAULT.originals_keys_secret,
        metavar="NAMESPACE/NAME",
        help="Secret holding the HMAC keys (data entry name = key id), "
        "read through the API and re-read every --config-refresh-interval; created with one "
        "random key under a new id (k<UTC time>-<letters>) when it does not exist, never "
        "written otherwise (the webhook mounts it). Instead of --originals-key-dir",
    )

    outcome = p.add_argument_group("resize outcomes (docs/how-it-works.md: Resize states)")
    outcome.add_argument(
        "--resize-deferred-timeout",
        type=flags.duration,
        default=_DEFAULT.controller.deferred_timeout,
        help="a resize the kubelet still defers after this long gets a Warning event "
        "(it is kept: the kubelet applies it when the node has room)",
    )
    outcome.add_argument(
        "--resize-error-retries",
        type=flags.positive_int,
        default=_DEFAULT.controller.error_retries,
        help="checks of a resize the kubelet fails to actuate before its spec is set back to what the containers have",
    )
    outcome.add_argument(
        "--resize-error-backoff",
        type=flags.duration,
        default=_DEFAULT.controller.error_backoff,
        help="first wait between those checks; doubles after each",
    )

    gates = p.add_argument_group("preflight and other controllers (docs/how-it-works.md)")
    gates.add_argument(
        "--preflight-checks",
        type=flags.string_list,
        default=list(_DEFAULT.preflight.checks),
        metavar="CHECK[,...]",
        help="what a resize is judged against before it is sent, from cached state; a resize one of "
        "them would refuse is held (one ResizeHeld event) and decided again when the constraint "
        "changes. Any of: " + ", ".join(PREFLIGHT_CHECKS) + " (empty: none; needs list/watch on "
        "limitranges and resourcequotas)",
    )
    gates.add_argument(
        "--node-room-wait",
        type=flags.duration,
        default=_DEFAULT.preflight.node_room_wait,
        help="an increase held for room on its node (NodeHeadroom: decreases there still pending, or "
        "the node full) is sent after this long anyway; the kubelet then keeps it Deferred "
        "until room frees",
    )
    gates.add_argument(
        "--upsize-critical-pods",
        type=flags.boolean,
        default=_DEFAULT.preflight.upsize_critical_pods,
        metavar="BOOL",
        help="also grow pods at system-cluster-critical priority or above (the kubelet may evict "
        "other pods to admit them); false: their increases are held (ResizeHeld)",
    )
    gates.add_argument(
        "--skip-vpa-managed",
        type=flags.boolean,
        default=_DEFAULT.preflight.skip_vpa_managed,
        metavar="BOOL",
        help="leave alone (one VPAManaged event) pods whose owner a VerticalPodAutoscaler in an "
        "updating mode (Auto, Recreate, InPlaceOrRecreate, InPlace) targets; Off and Initial "
        "compose. Needs list/watch on verticalpodautoscalers, replicasets and jobs where the "
        "VPA CRD is installed",
    )

    work = p.add_argument_group("work")
    work.add_argument(
        "--concurrency", type=flags.positive_int, default=_DEFAULT.concurrency, help="pods reconciled at the same time"
    )

    election = p.add_argument_group("leader election")
    election.add_argument(
        "--leader-elect", action="store_true", help="elect a leader on a Lease; only the leader watches and writes"
    )
    election.add_argument(
        "--leader-election-namespace", default=None, help="namespace of the Lease (default: --config-namespace)"
    )
    election.add_argument("--leader-election-id", default=_DEFAULT.leader_election.name, help="name of the Lease")
    election.add_argument(
        "--leader-election-identity",
        default=None,
        help="this instance's identity in the Lease (default: $POD_NAME, else the hostname, _random)",
    )
    election.add_argument(
        "--leader-election-lease-duration",
        type=flags.duration,
        default=_DEFAULT.leader_election.lease_duration,
        help="how long a lease is valid without renewal",
    )
    election.add_argument(
        "--leader-election-renew-deadline",
        type=flags.duration,
        default=_DEFAULT.leader_election.renew_deadline,
        help="the leader gives up (and exits) if it cannot renew for this long",
    )
    election.add_argument(
        "--leader-election-retry-period",
        type=flags.duration,
        default=_DEFAULT.leader_election.retry_period,
        help="interval between acquire/renew attempts",
    )

    ops = p.add_argument_group("operations")
    ops.add_argument(
        "--metrics-bind-address",
        default=_DEFAULT.metrics_bind_address,
        help="address for Prometheus /metrics ('0' disables)",
    )
    ops.add_argument(
        "--health-probe-bind-address",
        default=_DEFAULT.health_probe_bind_address,
        help="address for /healthz and /readyz ('0' disables)",
    )
    flags.log_flags(ops, _DEFAULT.log_level, _DEFAULT.log_format)
    ops.add_argument(
        "--shutdown-timeout",
        type=flags.duration,
        default=_DEFAULT.shutdown_timeout,
        help="on SIGTERM, wait this long for in-flight reconciles",
    )
    return p


def _instance_name() -> str:
    """The pod's name (the chart sets $POD_NAME), else the hostname: with hostNetwork the
    hostname is the node's, shared by every replica on it, and names no pod."""
    return os.environ.get("POD_NAME") or socket.gethostname()


def parse(argv: list[str] | None = None) -> ReconcilerSettings:
    """The settings the flags in `argv` describe; exits with a usage error on a bad combination."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.originals_key_dir and args.originals_keys_secret:
        parser.error("--originals-key-dir and --originals-keys-secret are alternatives: set one")
    if args.originals_keys_secret and not flags.is_namespaced_name(args.originals_keys_secret):
        parser.error("--originals-keys-secret must be NAMESPACE/NAME")
    if args.leader_election_renew_deadline >= args.leader_election_lease_duration:
        parser.error("--leader-election-renew-deadline must be shorter than the lease duration")
    unknown = sorted(set(args.preflight_checks) - set(PREFLIGHT_CHECKS))
    if unknown:
        parser.error(f"--preflight-checks: unknown {', '.join(unknown)} (known: {', '.join(PREFLIGHT_CHECKS)})")
    try:
        scope = namespace_scope(args.namespace or None, args.exclude_namespaces, args.namespace_selector)
    except ScopeError as error:
        parser.error(str(error))
    return ReconcilerSettings(
        api=ApiSettings(
            kubeconfig=args.kubeconfig,
            qps=args.kube_api_qps,
            burst=args.kube_api_burst,
            watch_idle_timeout=args.watch_idle_timeout,
        ),
        controller=ControllerSettings(
            node_type_label=args.node_type_label,
            dry_run=args.dry_run,
            resize_restart_containers=args.resize_restart_containers,
            realign=args.realign,
            max_resizes_per_second=args.max_resizes_per_second,
            deferred_timeout=args.resize_deferred_timeout,
            error_retries=args.resize_error_retries,
            error_backoff=args.resize_error_backoff,
        ),
        preflight=PreflightSettings(
            checks=tuple(dict.fromkeys(args.preflight_checks)),
            skip_vpa_managed=args.skip_vpa_managed,
            node_room_wait=args.node_room_wait,
            upsize_critical_pods=args.upsize_critical_pods,
        ),
        leader_election=LeaderElectionSettings(
            enabled=args.leader_elect,
            namespace=args.leader_election_namespace or args.config_namespace,
            name=args.leader_election_id,
            identity=args.leader_election_identity or f"{_instance_name()}_{uuid.uuid4().hex[:8]}",
            lease_duration=args.leader_election_lease_duration,
            renew_deadline=args.leader_election_renew_deadline,
            retry_period=args.leader_election_retry_period,
        ),
        scope=scope,
        config_namespace=args.config_namespace,
        config_name=args.config_name,
        config_refresh_interval=args.config_refresh_interval,
        originals_key_dir=args.originals_key_dir,
        originals_keys_secret=args.originals_keys_secret,
        concurrency=args.concurrency,
        metrics_bind_address=args.metrics_bind_address,
        health_probe_bind_address=args.health_probe_bind_address,
        log_level=args.log_level,
        log_format=args.log_format,
        shutdown_timeout=args.shutdown_timeout,
    )
