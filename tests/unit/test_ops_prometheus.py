"""ops.prometheus: the page prometheus_client writes for the same metrics (byte for byte, minus
its *_created series), read back with its parser; the runtime series on every /metrics page."""

from __future__ import annotations

import os
import time
from typing import Any

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

import ops.prometheus
from ops.prometheus import (
    CONTENT_TYPE,
    REGISTRY,
    CollectorRegistry,
    Counter,
    exposition,
    new_registry,
)

BUCKETS = (0.005, 0.5, 1, 10, 1e7)


def fill(registry: CollectorRegistry, library: Any = ops.prometheus) -> None:
    counter, gauge, histogram = library.Counter, library.Gauge, library.Histogram
    requests = counter("requests_total", 'Requests \\ by "code"\nsecond line.', ["method", "code"], registry=registry)
    requests.labels("GET", 200).inc()
    requests.labels("PATCH", "409").inc(2.5)
    requests.labels('odd "value"\\\n', "x").inc()
    counter("restarts", "Without the suffix.", registry=registry).inc(3)
    depth = gauge("queue_depth", "Depth.", ["name"], registry=registry)
    depth.labels("pods").set(1234567.5)
    depth.labels("pods").dec(0.5)
    depth.labels("nodes").inc()
    gauge("empty_labels", "A family with labels and no child yet.", ["x"], registry=registry)
    latency = histogram("latency_seconds", "Latency.", ["controller"], buckets=BUCKETS, registry=registry)
    for value in (0.001, 0.005, 0.7, 3, 5e7):
        latency.labels("pods").observe(value)
    histogram("plain_seconds", "No labels.", buckets=(1, 2), registry=registry).observe(1.5)
    gauge("large", "Values Go writes with an exponent.", registry=registry).set(12345678901.0)


def test_the_page_is_what_prometheus_client_writes_for_the_same_metrics() -> None:
    ours = new_registry(runtime_collectors=False)
    fill(ours)
    prometheus_client.disable_created_metrics()
    theirs = prometheus_client.CollectorRegistry()
    fill(theirs, prometheus_client)
    assert exposition(ours) == prometheus_client.generate_latest(theirs)


def test_the_runtime_series_are_prometheus_client_s() -> None:
    theirs = prometheus_client.CollectorRegistry()
    for collector in (prometheus_client.ProcessCollector, prometheus_client.PlatformCollector):
        collector(registry=theirs)
    prometheus_client.GCCollector(registry=theirs)

    def shape(page: bytes) -> list[tuple[str, str, str, list[tuple[str, ...]]]]:
        families = text_string_to_metric_families(page.decode())
        return [(f.name, f.type, f.documentation, [tuple(sorted(s.labels)) for s in f.samples]) for f in families]

    assert shape(exposition(new_registry())) == shape(prometheus_client.generate_latest(theirs))


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
