"""ops.prometheus: prometheus_client with the project's conventions (no *_created series, the
0.0.4 text format, runtime collectors on every /metrics page), read back with its parser."""

from __future__ import annotations

import os
import time

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ops.prometheus import (
    CONTENT_TYPE,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    exposition,
    new_registry,
)

BUCKETS = (0.005, 0.5, 1, 10, 1e7)


def fill(registry: CollectorRegistry) -> None:
    requests = Counter("requests_total", 'Requests \\ by "code"\nsecond line.', ["method", "code"], registry=registry)
    requests.labels("GET", 200).inc()
    requests.labels("PATCH", "409").inc(2.5)
    requests.labels('odd "value"\\\n', "x").inc()
    Counter("restarts", "Without the suffix.", registry=registry).inc(3)
    depth = Gauge("queue_depth", "Depth.", ["name"], registry=registry)
    depth.labels("pods").set(1234567.5)
    depth.labels("pods").dec(0.5)
    depth.labels("nodes").inc()
    Gauge("empty_labels", "A family with labels and no child yet.", ["x"], registry=registry)
    latency = Histogram("latency_seconds", "Latency.", ["controller"], buckets=BUCKETS, registry=registry)
    for value in (0.001, 0.005, 0.7, 3, 5e7):
        latency.labels("pods").observe(value)
    Histogram("plain_seconds", "No labels.", buckets=(1, 2), registry=registry).observe(1.5)


def test_the_page_reads_back_to_the_recorded_values_under_controller_runtime_like_names() -> None:
    registry = new_registry(runtime_collectors=False)
    fill(registry)
    families = {f.name: f for f in text_string_to_metric_families(exposition(registry).decode())}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert families["requests"].type == "counter" and families["latency_seconds"].type == "histogram"
    assert samples[("requests_total", (("code", "409"), ("method", "PATCH")))] == 2.5
    assert samples[("requests_total", (("code", "x"), ("method", 'odd "value"\\\n')))] == 1
    assert samples[("restarts_total", ())] == 3
    assert samples[("queue_depth", (("name", "pods"),))] == 1234567.0
    assert samples[("latency_seconds_bucket", (("controller", "pods"), ("le", "0.005")))] == 2  # cumulative
    assert samples[("latency_seconds_bucket", (("controller", "pods"), ("le", "10.0")))] == 4
    assert samples[("latency_seconds_bucket", (("controller", "pods"), ("le", "+Inf")))] == 5
    assert samples[("latency_seconds_count", (("controller", "pods"),))] == 5
    assert samples[("latency_seconds_sum", (("controller", "pods"),))] == pytest.approx(50000003.706)
    assert exposition(registry).endswith(b"\n") and CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_no_created_series() -> None:
    """controller-runtime exports no *_created series; prometheus_client does unless told not to."""
    registry = new_registry(runtime_collectors=False)
    fill(registry)
    page = exposition(registry).decode()
    assert "requests_total" in page and "_created" not in page


def test_a_new_registry_shows_this_process_and_only_what_is_registered_on_it() -> None:
    registry = new_registry()
    Counter("only_here", "A metric of this registry.", registry=registry).inc()
    page = exposition(registry).decode()
    values = {
        s.name: s.value
        for f in text_string_to_metric_families(page)
        for s in f.samples
        if not s.labels or s.name == "python_info"
    }
    with open(f"/proc/{os.getpid()}/status") as status:
        rss_kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    assert values["process_resident_memory_bytes"] == pytest.approx(rss_kib * 1024, rel=0.2)
    assert 0 < values["process_cpu_seconds_total"] <= time.process_time() + 0.05
    assert time.time() - 24 * 3600 < values["process_start_time_seconds"] <= time.time()
    assert values["process_open_fds"] >= 3 and values["python_info"] == 1
    assert values["only_here_total"] == 1
    assert "python_gc_collections_total" in page
    assert "only_here" not in exposition(new_registry()).decode()
    assert "process_" not in exposition(new_registry(runtime_collectors=False)).decode()


def test_the_process_wide_registry_is_the_default_and_shows_the_runtime_series() -> None:
    counter = Counter("ops_prometheus_test_default_total", "Registered without naming a registry.")
    try:
        counter.inc()
        page = exposition().decode()
        assert "ops_prometheus_test_default_total 1.0" in page and "process_resident_memory_bytes" in page
    finally:
        REGISTRY.unregister(counter)


def test_misuse_is_an_error_not_a_wrong_series() -> None:
    registry = new_registry(runtime_collectors=False)
    counter = Counter("c_total", "c", ["a"], registry=registry)
    with pytest.raises(ValueError):
        counter.labels("x").inc(-1)
    with pytest.raises(ValueError):
        counter.labels("x", "y")
    with pytest.raises(ValueError):
        counter.inc()
    with pytest.raises(ValueError):
        Counter("c", "again", registry=registry)
    assert registry.get_sample_value("c_total", {"a": "x"}) == 0


def test_computed_gauge_is_read_when_scraped_and_a_failing_one_shows_no_samples() -> None:
    from ops.prometheus import ComputedGauge, exposition, new_registry

    registry = new_registry(runtime_collectors=False)
    values = {"n4": 2.5}
    ComputedGauge(
        "x_requests", "Summed.", ["node_type"], lambda: [((k,), v) for k, v in values.items()], registry=registry
    )
    ComputedGauge("x_broken", "Fails.", ["a"], lambda: [(("1",), 1 / 0)], registry=registry)
    assert exposition(registry).decode().splitlines() == [
        "# HELP x_requests Summed.",
        "# TYPE x_requests gauge",
        'x_requests{node_type="n4"} 2.5',
        "# HELP x_broken Fails.",
        "# TYPE x_broken gauge",
    ]
    values.clear()
    assert "x_requests{" not in exposition(registry).decode()
