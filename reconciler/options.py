"""Command-line flags of `python -m reconciler`, named like the Go ecosystem's, turned into
:class:`reconciler.settings.ReconcilerSettings` (the defaults live there)."""

from __future__ import annotations

import argparse
import os
import socket
import uuid
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

from ops import flags
from reconciler.settings import PREFLIGHT_CHECKS, ReconcilerSettings
from resizer.podstate import described_keys
from resizer.scope import ScopeError, namespace_scope

# Every flag's default is read from the settings' own defaults: one place each.
_DEFAULT = ReconcilerSettings()


# A flag: (name, the ReconcilerSettings field it sets and takes its default from, "api.qps" for a
# section's, help, more add_argument options); a function adds a family of shared flags.
Flag = tuple[str, str, str, dict[str, Any]]
# The --help groups and their flags, in --help order.
GROUPS: dict[str, tuple[Flag | Callable[[argparse._ArgumentGroup], None], ...]] = {
    "Kubernetes API": (
        (
            "--kubeconfig",
            "api.kubeconfig",
            "path to a kubeconfig; default: in-cluster config, then $KUBECONFIG / ~/.kube/config",
            {},
        ),
        ("--kube-api-qps", "api.qps", "client-side sustained requests per second", {"type": float}),
        ("--kube-api-burst", "api.burst", "client-side request burst", {"type": flags.positive_int}),
        (
            "--watch-idle-timeout",
            "api.watch_idle_timeout",
            "restart a watch that delivered nothing (not even a bookmark) for this long",
            {"type": flags.duration},
        ),
    ),
    "sizing": (
        (
            "--node-type-label",
            "controller.node_type_label",
            "node label whose value names the node type in the config's nodeTypes",
            {},
        ),
        ("--config-namespace", "config_namespace", "namespace of the config ConfigMap", {}),
        ("--config-name", "config_name", "name of the config ConfigMap (key config.yaml)", {}),
        (
            "--config-refresh-interval",
            "config_refresh_interval",
            "also re-read the ConfigMap this often, besides watching it",
            {"type": flags.duration},
        ),
        (
            "--resize-restart-containers",
            "controller.resize_restart_containers",
            "also resize resources whose resizePolicy is RestartContainer (restarts them)",
            {"action": "store_true"},
        ),
        partial(
            flags.scope_flags,
            helps={
                "--exclude-namespaces": "namespaces whose pods are never touched, besides kube-system and "
                "--namespace (set the same list on the webhook; the chart sets both from scope.*)",
                "--namespace": "the product's own namespace, always excluded (default: $POD_NAMESPACE)",
                "--namespace-selector": f"label selector (kubectl syntax, e.g. '!{described_keys('exclude')}') a "
                "pod's namespace must match to be in scope; needs list/watch on namespaces",
            },
        ),
        (
            "--realign",
            "controller.realign",
            "when the config or a node's type changes, resize pods already sized whose desired "
            "size changed (from their originals, never compounding); false: only pods not yet "
            "sized for their node's type are sized (the design's 'new pods only')",
            {"type": flags.boolean, "metavar": "BOOL"},
        ),
        (
            "--max-resizes-per-second",
            "controller.max_resizes_per_second",
            "re-alignment resizes (pods already sized) per second at most, so a config edit "
            "rolls out gradually; the first sizing of a new pod is not throttled",
            {"type": flags.positive_float, "metavar": "N"},
        ),
        (
            "--dry-run",
            "controller.dry_run",
            "decide, log and record WouldResize events, but patch nothing",
            {"action": "store_true"},
        ),
        (
            "--originals-key-dir",
            "originals_key_dir",
            "directory of HMAC keys (file name = key id; the greatest id signs, any verifies) "
            "for the original-* annotations: the Secret shared with the webhook; re-read every "
            "--config-refresh-interval. Empty: nothing verifies, so only pods whose spec never "
            "changed are resized (from their spec)",
            {},
        ),
        (
            "--originals-keys-secret",
            "originals_keys_secret",
            "Secret holding the HMAC keys (data entry name = key id), "
            "read through the API and re-read every --config-refresh-interval; created with one "
            "random key under a new id (k<UTC time>-<letters>) when it does not exist, never "
            "written otherwise (the webhook mounts it). Instead of --originals-key-dir",
            {"metavar": "NAMESPACE/NAME"},
        ),
    ),
    "resize outcomes (docs/how-it-works.md: Resize states)": (
        (
            "--resize-deferred-timeout",
            "controller.deferred_timeout",
            "a resize the kubelet still defers after this long gets a Warning event "
            "(it is kept: the kubelet applies it when the node has room)",
            {"type": flags.duration},
        ),
        (
            "--resize-error-retries",
            "controller.error_retries",
            "checks of a resize the kubelet fails to actuate before its spec is set back to what the containers have",
            {"type": flags.positive_int},
        ),
        (
            "--resize-error-backoff",
            "controller.error_backoff",
            "first wait between those checks; doubles after each",
            {"type": flags.duration},
        ),
    ),
    "preflight and other controllers (docs/how-it-works.md)": (
        (
            "--preflight-checks",
            "preflight.checks",
            "what a resize is judged against before it is sent, from cached state; a resize one of "
            "them would refuse is held (one ResizeHeld event) and decided again when the constraint "
            "changes. Any of: " + ", ".join(PREFLIGHT_CHECKS) + " (empty: none; needs list/watch on "
            "limitranges and resourcequotas)",
            {"type": flags.string_list, "default": list(_DEFAULT.preflight.checks), "metavar": "CHECK[,...]"},
        ),
        (
            "--node-room-wait",
            "preflight.node_room_wait",
            "an increase held for room on its node (NodeHeadroom: decreases there still pending, or "
            "the node full) is sent after this long anyway; the kubelet then keeps it Deferred "
            "until room frees",
            {"type": flags.duration},
        ),
        (
            "--upsize-critical-pods",
            "preflight.upsize_critical_pods",
            "also grow pods at system-cluster-critical priority or above (the kubelet may evict "
            "other pods to admit them); false: their increases are held (ResizeHeld)",
            {"type": flags.boolean, "metavar": "BOOL"},
        ),
        (
            "--skip-vpa-managed",
            "preflight.skip_vpa_managed",
            "leave alone (one VPAManaged event) pods whose owner a VerticalPodAutoscaler in an "
            "updating mode (Auto, Recreate, InPlaceOrRecreate, InPlace) targets; Off and Initial "
            "compose. Needs list/watch on verticalpodautoscalers, replicasets and jobs where the "
            "VPA CRD is installed",
            {"type": flags.boolean, "metavar": "BOOL"},
        ),
    ),
    "work": (("--concurrency", "concurrency", "pods reconciled at the same time", {"type": flags.positive_int}),),
    "leader election": (
        (
            "--leader-elect",
            "leader_election.enabled",
            "elect a leader on a Lease; only the leader watches and writes",
            {"action": "store_true"},
        ),
        (
            "--leader-election-namespace",
            "leader_election.namespace",
            "namespace of the Lease (default: --config-namespace)",
            {"default": None},
        ),
        ("--leader-election-id", "leader_election.name", "name of the Lease", {}),
        (
            "--leader-election-identity",
            "leader_election.identity",
            "this instance's identity in the Lease (default: $POD_NAME, else the hostname, _random)",
            {"default": None},
        ),
        (
            "--leader-election-lease-duration",
            "leader_election.lease_duration",
            "how long a lease is valid without renewal",
            {"type": flags.duration},
        ),
        (
            "--leader-election-renew-deadline",
            "leader_election.renew_deadline",
            "the leader gives up (and exits) if it cannot renew for this long",
            {"type": flags.duration},
        ),
        (
            "--leader-election-retry-period",
            "leader_election.retry_period",
            "interval between acquire/renew attempts",
            {"type": flags.duration},
        ),
    ),
    "operations": (
        ("--metrics-bind-address", "metrics_bind_address", "address for Prometheus /metrics ('0' disables)", {}),
        (
            "--health-probe-bind-address",
            "health_probe_bind_address",
            "address for /healthz and /readyz ('0' disables)",
            {},
        ),
        partial(flags.log_flags, level=_DEFAULT.log_level, fmt=_DEFAULT.log_format),
        (
            "--shutdown-timeout",
            "shutdown_timeout",
            "on SIGTERM, wait this long for in-flight reconciles",
            {"type": flags.duration},
        ),
    ),
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m reconciler",
        description="workload-resizer reconciler: resizes bound pods in place (pods/resize) for the "
        "machine family of their node, from the originals stamped at admission.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for title, entries in GROUPS.items():
        group = p.add_argument_group(title)
        for entry in entries:
            if callable(entry):
                entry(group)
            else:
                flag, field, text, options = entry
                section, _, name = field.rpartition(".")
                default = getattr(getattr(_DEFAULT, section) if section else _DEFAULT, name)
                group.add_argument(flag, help=text, **{"default": default, **options})
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
    fields: dict[str, dict[str, Any]] = {}  # section ("" for a field of the settings' own) -> field -> value
    for flag, field, _, _ in [entry for entries in GROUPS.values() for entry in entries if isinstance(entry, tuple)]:
        section, _, name = field.rpartition(".")
        fields.setdefault(section, {})[name] = getattr(args, flag[2:].replace("-", "_"))
    own, preflight, election = fields.pop(""), fields["preflight"], fields["leader_election"]
    preflight["checks"] = tuple(dict.fromkeys(preflight["checks"]))
    election["namespace"] = election["namespace"] or args.config_namespace
    election["identity"] = election["identity"] or f"{_instance_name()}_{uuid.uuid4().hex[:8]}"
    return ReconcilerSettings(
        **{section: replace(getattr(_DEFAULT, section), **values) for section, values in fields.items()},
        **own,
        scope=scope,
        log_level=args.log_level,
        log_format=args.log_format,
    )
