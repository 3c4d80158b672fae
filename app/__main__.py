"""``python -m app``: run the workload-resizer mutating admission webhook."""

from __future__ import annotations

import argparse
import contextlib
import sys
from functools import partial
from typing import Sequence

from ops import flags
from resizer import KeyRingError
from resizer.config import CONFIG_NAME, CONFIG_NAMESPACE, NODE_TYPE_LABEL
from resizer.podstate import described_keys
from resizer.scope import ScopeError, namespace_scope


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m app",
        description=(
            "workload-resizer mutating admission webhook. Serves POST /mutate (admission.k8s.io/v1 "
            f"AdmissionReview) over TLS: at pod CREATE it stamps the {described_keys('original-*')} "
            "annotations of eligible pods and strips forged controller-owned annotations. Also serves "
            "GET /healthz (alive), /readyz (certificate loaded, sizing caches listed) and /metrics (Prometheus)."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    duration = partial(p.add_argument, type=flags.duration, metavar="DURATION")
    boolean = partial(p.add_argument, type=flags.boolean, default=True, metavar="BOOL")
    count = partial(p.add_argument, type=int, metavar="N")
    switch = partial(p.add_argument, action="store_true")
    p.add_argument("--bind-address", default="0.0.0.0", metavar="IP", help="IP address to listen on.")
    p.add_argument("--port", type=int, default=8443, help="TCP port to listen on (HTTPS).")
    p.add_argument(
        "--tls-cert-file",
        required=True,
        metavar="PATH",
        help="PEM serving certificate (chain). Re-read every --cert-reload-interval; "
        "a kubelet-mounted Secret (..data symlink swap) is picked up without restart.",
    )
    p.add_argument("--tls-key-file", required=True, metavar="PATH", help="PEM private key of --tls-cert-file.")
    p.add_argument("--tls-min-version", choices=("1.2", "1.3"), default="1.2", help="Minimum TLS version.")
    duration(
        "--cert-reload-interval",
        default="10s",
        help="How often to check the certificate files for a rotation (Go duration, e.g. 10s, 500ms; "
        "0 disables reloading).",
    )
    p.add_argument(
        "--max-request-bytes",
        type=flags.byte_size,
        metavar="SIZE",
        default="4MiB",
        help="Largest AdmissionReview body accepted (e.g. 4MiB); larger requests get HTTP 413. "
        "The apiserver accepts requests up to 3 MiB, and the review wraps the pod in an envelope.",
    )
    duration(
        "--http-keep-alive-timeout",
        default="120s",
        help="Close idle keep-alive connections after this long. Keep it above the apiserver's idle "
        "timeout (90s) so the client, not us, closes idle connections (no request ever races a close).",
    )
    duration(
        "--http-read-timeout",
        default="3s",
        help="A request's headers and body must arrive within this long of its first byte (a new connection's first "
        "request: of the TLS handshake's end), else the connection is dropped (checked every quarter of it). Bounds "
        "what a client that never finishes a request holds. The apiserver gives up at the webhook configuration's "
        "timeoutSeconds anyway: shorter only drops the apiserver's own requests when this process is short of CPU (a "
        "throttled pod reads late what has arrived).",
    )
    count(
        "--max-connections",
        type=flags.positive_int,
        default=1024,
        help="Open connections at most. A new connection beyond that closes the one that has waited longest for its "
        "request, else the one idle longest; refused only when every connection has a review being decided.",
    )
    duration(
        "--shutdown-timeout",
        default="20s",
        help="On SIGTERM/SIGINT stop accepting, finish in-flight requests, and give up after this long.",
    )
    count(
        "--max-inflight-reviews",
        default=32,
        help="Costly reviews (see --large-review-workers) waiting for their decision at once; beyond that (or beyond "
        "16MiB of buffered large bodies) a review is answered at once 'allowed, no patch' (the reconciler captures the "
        "originals later) and its connection closed: overload never delays or blocks pod creation. Reviews still "
        "arriving do not count (--max-connections, --http-read-timeout bound them).",
    )
    count(
        "--large-review-workers",
        default=1,
        help="Worker processes deciding the reviews too costly for the event loop (over 16KiB, over "
        "2048 JSON values or 64 annotations, or over 4 containers not seen before), so that small "
        "reviews never wait behind them. Each is a Python process of its own (RSS under 64MiB), "
        "at a lower CPU priority. 0: decide them on the event loop, one at a time.",
    )
    duration(
        "--large-review-timeout",
        default="2s",
        help="A large review not decided this long after it arrived is answered 'allowed, no patch'; "
        "a worker still busy with one review after this long is killed and replaced. Keep it "
        "below the webhook configuration's timeoutSeconds.",
    )
    duration(
        "--shutdown-delay",
        default="5s",
        help="On SIGTERM, first fail /readyz and keep serving this long (closing each connection "
        "after its answer) so endpoints and the apiserver move away, then shut down "
        "gracefully. terminationGracePeriodSeconds must exceed this plus --shutdown-timeout.",
    )
    p.add_argument(
        "--originals-key-dir",
        metavar="DIR",
        default="",
        help="Directory of HMAC keys (file name = key id, the greatest id signs) that sign the original-* annotations; "
        "the mounted Secret shared with the reconciler. Re-read every --cert-reload-interval. Empty: originals are "
        "stamped unsigned (the reconciler then trusts them only on pods whose spec never changed).",
    )
    switch(
        "--originals-keys-optional",
        help="An empty or absent --originals-key-dir at startup is not an error: originals are "
        "stamped unsigned until a key appears (a Secret volume mounted optional, whose Secret "
        "the reconciler creates at its first start: the chart's default).",
    )
    flags.scope_flags(
        p,
        {
            "--exclude-namespaces": "Namespaces whose pods are never stamped, besides kube-system and --namespace. "
            "Set the same list on the reconciler (the chart sets both from scope.*).",
            "--namespace-selector": "Label selector (kubectl syntax) a namespace must match to be in scope. The "
            "webhook cannot read namespace labels: only validated here; the webhook configuration's "
            "namespaceSelector applies it (the chart renders both from scope.*).",
            "--namespace": "The product's own namespace, always excluded (default: $POD_NAMESPACE).",
        },
    )
    boolean(
        "--size-at-admission",
        help="Create pods whose node type is known at admission (spec.nodeName, a DaemonSet's node affinity, a "
        "nodeSelector or required node affinity on --node-type-label naming types of equal performance) at their size "
        "for it, with the reconciler's sizing rules. Needs list/watch on nodes and the config ConfigMap (--kubeconfig "
        "or in-cluster): without either the webhook does not start. Also needs --originals-key-dir. Until the nodes, "
        "the config and a key are known, and on any error, pods are stamped only. false: stamp only, no API access.",
    )
    switch(
        "--dry-run",
        help="With --size-at-admission: change no pod's size; report what it would have been as an "
        "AdmissionReview warning (WouldResize), a log field and a metric.",
    )
    duration(
        "--sizing-ready-timeout",
        default="30s",
        help="With --size-at-admission: /readyz fails until the nodes, the config, the LimitRanges and the VPAs are "
        "listed, so a replica that starts (a rolling update) takes reviews only once it can size pods; for at most "
        "this long after start, then it is ready and stamps only until they are. 0: ready at once.",
    )
    boolean(
        "--skip-vpa-managed",
        help="With --size-at-admission: a pod an updating VerticalPodAutoscaler (not Off or Initial) may manage is not "
        "sized at admission, only stamped (its controller, the Deployment its ReplicaSet's name and pod-template-hash "
        "label name, or a kind that may own its controller is the VPA's target), as the reconciler's flag of the same "
        "name leaves such pods alone. Looks the VPA CRD up by discovery at start and every 30s; where it is served, "
        "needs list/watch on verticalpodautoscalers.",
    )
    p.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="kubeconfig for --size-at-admission; default: in-cluster config, then $KUBECONFIG.",
    )
    p.add_argument(
        "--node-type-label",
        default=NODE_TYPE_LABEL,
        help="Node label naming the node type in the config's nodeTypes (as the reconciler's).",
    )
    p.add_argument("--config-namespace", default=CONFIG_NAMESPACE, help="Namespace of the config ConfigMap.")
    p.add_argument("--config-name", default=CONFIG_NAME, help="Name of the config ConfigMap (key config.yaml).")
    flags.log_flags(
        p,
        "info",
        "json",
        level_help="Minimum log level. 'info' logs one line per admission decision.",
        fmt_help="json: one JSON object per line; text: human-readable.",
    )
    duration(
        "--log-flush-interval",
        default="100ms",
        help="Write info/debug lines in batches at most this old (warnings and errors at once; "
        "everything on shutdown). 0 writes every line at once. Batching saves a write "
        "syscall per admission decision; a SIGKILL may lose up to this much.",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.large_review_workers < 0:
        parser.error("--large-review-workers must be 0 or more")
    if args.large_review_timeout <= 0:
        parser.error("--large-review-timeout must be positive")
    if args.http_read_timeout <= 0:
        parser.error("--http-read-timeout must be positive")
    if args.max_inflight_reviews < 0:
        parser.error("--max-inflight-reviews must be 0 or more")
    try:
        scope = namespace_scope(args.namespace or None, args.exclude_namespaces, args.namespace_selector)
    except ScopeError as error:
        parser.error(str(error))

    if args.dry_run and not args.size_at_admission:
        parser.error("--dry-run needs --size-at-admission")
    from app.run import run

    credentials = None
    if args.size_at_admission:  # --kubeconfig, else in-cluster, else $KUBECONFIG or ~/.kube/config
        from kube import load_credentials

        try:
            credentials = load_credentials(args.kubeconfig)
        except Exception as err:  # any loader's failure (the kubernetes package's too)
            print(
                f"error: --size-at-admission (on by default) needs the apiserver, from an in-cluster service "
                f"account or --kubeconfig: {str(err) or repr(err)}. Pass --kubeconfig, or "
                f"--size-at-admission=false to stamp the originals only.",
                file=sys.stderr,
            )
            return 2
    from ops.jsonlog import configure_logging

    configure_logging(args.log_level, args.log_format, flush_interval=args.log_flush_interval)
    from ops.keys import KeyDirectoryError

    try:
        with contextlib.suppress(KeyboardInterrupt):
            return run(args, scope, credentials)
    except (KeyDirectoryError, KeyRingError) as err:
        print(f"error: --originals-key-dir: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
