"""Prometheus metrics of the API client machinery (requests, watches, caches, work queues,
leader election), named like client-go's and controller-runtime's."""

from __future__ import annotations

from ops.prometheus import Counter, Gauge, Histogram

QUEUE_DEPTH = Gauge("workqueue_depth", "Current depth of workqueue.", ["name"])
QUEUE_ADDS = Counter("workqueue_adds_total", "Total number of adds handled by workqueue.", ["name"])
QUEUE_RETRIES = Counter("workqueue_retries_total", "Total number of retries handled by workqueue.", ["name"])
QUEUE_LATENCY = Histogram(
    "workqueue_queue_duration_seconds",
    "How long an item stays in workqueue before being requested.",
    ["name"],
    buckets=(0.001, 0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300),
)
QUEUE_WORK = Histogram(
    "workqueue_work_duration_seconds",
    "How long processing an item from workqueue takes.",
    ["name"],
    buckets=(0.001, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 60),
)
API_REQUESTS = Counter(
    "rest_client_requests_total",
    "Number of HTTP requests to the apiserver, by method, resource and code.",
    ["method", "resource", "code"],
)
LEADER = Gauge("leader_election_master_status", "1 if this instance is the leader of the named lease.", ["name"])
WATCH_RESTARTS = Counter(
    "workload_resizer_watch_restarts_total", "Watch streams restarted, by resource and cause.", ["resource", "cause"]
)
CACHED_OBJECTS = Gauge("workload_resizer_cached_objects", "Objects held in the reconciler's caches.", ["resource"])
