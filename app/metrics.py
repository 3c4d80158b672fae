"""Prometheus metrics of the webhook, on a registry per :class:`Metrics` (not the process-wide
one: tests stay independent, several apps live in one process) that still has the process,
Python and GC collectors, so ``/metrics`` shows the usual ``process_*`` series."""

from __future__ import annotations

from functools import partial

from ops.prometheus import CollectorRegistry, Counter, Gauge, Histogram, new_registry

# Webhook calls take well under a millisecond; the apiserver gives up at timeoutSeconds (3 s in webhook-config/).
DURATION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None, process_metrics: bool = True) -> None:
        self.registry = registry if registry is not None else new_registry(runtime_collectors=process_metrics)
        counter, gauge = partial(Counter, registry=self.registry), partial(Gauge, registry=self.registry)
        self.requests = counter(
            "workload_resizer_webhook_requests_total",
            "Admission requests by result: patched (pod stamped), skipped (allowed unchanged), "
            "error (our bug; allowed unchanged), rejected (malformed request, HTTP 4xx), "
            "overloaded (answered allowed without a decision, or 503, under overload).",
            ["result"],
        )
        self.duration = Histogram(
            "workload_resizer_webhook_request_duration_seconds",
            "Time from the request reaching the webhook handler to the response being sent.",
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.cert_reloads = counter(
            "workload_resizer_webhook_cert_reloads_total",
            "Serving-certificate loads by result (success, error = bad pair kept out).",
            ["result"],
        )
        self.cert_not_after = gauge(
            "workload_resizer_webhook_cert_not_after_timestamp_seconds",
            "Expiry (notAfter, Unix time) of the serving certificate in use.",
        )
        self.worker_restarts = counter(
            "workload_resizer_webhook_review_worker_restarts_total",
            "Review worker processes (deciding the costly reviews) killed and replaced, by reason: crash (exited), "
            "timeout (no answer within --large-review-timeout), error (reported one), cancelled (shutdown mid-review).",
            ["reason"],
        )
        self.connections = gauge(
            "workload_resizer_webhook_connections", "Open connections (TLS handshake done), at most --max-connections."
        )
        self.connections_refused = counter(
            "workload_resizer_webhook_connections_refused_total",
            "New connections closed at once: --max-connections reached and every open connection "
            "had a review being decided.",
        )
        self.connections_closed = counter(
            "workload_resizer_webhook_connections_closed_total",
            "Connections the webhook dropped, by reason: read_timeout (a request not read in full "
            "within --http-read-timeout of its first byte), evicted (the connection waiting longest "
            "for its request, else idle longest, closed to admit a new one at --max-connections).",
            ["reason"],
        )
        self.sized_at_admission = counter(
            "workload_resizer_webhook_sized_at_admission_total",
            "Pods whose node type was known at admission, by result: sized (created at their size), would_resize "
            "(--dry-run: reported in a warning, not changed), held (an updating VerticalPodAutoscaler may manage the "
            "pod, the size would grow something, a LimitRange would refuse it, or the pod has scheduling gates: "
            "decided after binding), error (sizing failed; stamped only, as without sizing).",
            ["result"],
        )
        # Children resolved once: .labels() builds a tuple and looks it up per call.
        self.by_result = {r: self.requests.labels(r) for r in ("patched", "skipped", "error", "rejected", "overloaded")}
        self.reloads_by_result = {r: self.cert_reloads.labels(r) for r in ("success", "error")}
        self.sized = {r: self.sized_at_admission.labels(r) for r in ("sized", "would_resize", "held", "error")}
