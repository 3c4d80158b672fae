"""ops.prometheus: the metric types and the text format, checked against prometheus_client's
own writer and parser (a test dependency only)."""
from __future__ import annotations

import os
import time

import prometheus_client
import pytest
from prometheus_client.parser import text_string_to_metric_families

from ops.prometheus import CONTENT_TYPE, Counter, Gauge, Histogram, Registry, format_value, register_runtime_collectors

BUCKETS = (0.005, 0.5, 1, 10, 1e7)


def fill_ours(registry: Registry) -> None:
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


def fill_theirs(registry: prometheus_client.CollectorRegistry) -> None:
    requests = prometheus_client.Counter("requests_total", 'Requests \\ by "code"\nsecond line.',
                                         ["method", "code"], registry=registry)
    requests.labels("GET", 200).inc()
    requests.labels("PATCH", "409").inc(2.5)
    requests.labels('odd "value"\\\n', "x").inc()
    prometheus_client.Counter("restarts", "Without the suffix.", registry=registry).inc(3)
    depth = prometheus_client.Gauge("queue_depth", "Depth.", ["name"], registry=registry)
    depth.labels("pods").set(1234567.5)
    depth.labels("pods").dec(0.5)
    depth.labels("nodes").inc()
    prometheus_client.Gauge("empty_labels", "A family with labels and no child yet.", ["x"], registry=registry)
    latency = prometheus_client.Histogram("latency_seconds", "Latency.", ["controller"], buckets=BUCKETS,
                                          registry=registry)
    for value in (0.001, 0.005, 0.7, 3, 5e7):
        latency.labels("pods").observe(value)
    prometheus_client.Histogram("plain_seconds", "No labels.", buckets=(1, 2), registry=registry).observe(1.5)


def without_created(text: str) -> str:
    return "".join(line + "\n" for line in text.splitlines() if "_created" not in line)


def test_the_output_is_what_prometheus_client_writes_for_the_same_metrics_without_created_series() -> None:
    ours = Registry()
    fill_ours(ours)
    theirs = prometheus_client.CollectorRegistry()
    fill_theirs(theirs)
    assert ours.exposition().decode() == without_created(prometheus_client.generate_latest(theirs).decode())


def test_prometheus_parses_it_back_to_the_recorded_values() -> None:
    registry = Registry()
    fill_ours(registry)
    families = {f.name: f for f in text_string_to_metric_families(registry.exposition().decode())}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert families["requests"].type == "counter" and families["latency_seconds"].type == "histogram"
    assert samples[("requests_total", (("code", "409"), ("method", "PATCH")))] == 2.5
    assert samples[("requests_total", (("code", "x"), ("method", 'odd "value"\\\n')))] == 1
    assert samples[("queue_depth", (("name", "pods"),))] == 1234567.0
    assert samples[("latency_seconds_bucket", (("controller", "pods"), ("le", "0.005")))] == 2    # cumulative
    assert samples[("latency_seconds_bucket", (("controller", "pods"), ("le", "10.0")))] == 4
    assert samples[("latency_seconds_bucket", (("controller", "pods"), ("le", "+Inf")))] == 5
    assert samples[("latency_seconds_count", (("controller", "pods"),))] == 5
    assert samples[("latency_seconds_sum", (("controller", "pods"),))] == pytest.approx(50000003.706)
    assert registry.exposition().endswith(b"\n") and CONTENT_TYPE.startswith("text/plain; version=0.0.4")


def test_misuse_is_an_error_not_a_wrong_series() -> None:
    registry = Registry()
    counter = Counter("c_total", "c", ["a"], registry=registry)
    with pytest.raises(ValueError, match="only increase"):
        counter.labels("x").inc(-1)
    with pytest.raises(ValueError, match="label values"):
        counter.labels("x", "y")
    with pytest.raises(ValueError, match="use .labels"):
        counter.inc()
    with pytest.raises(ValueError, match="already registered"):
        Counter("c", "again", registry=registry)
    with pytest.raises(ValueError, match="distinct"):
        Histogram("h", "h", buckets=(1, 1), registry=registry)
    assert counter.labels("x").value == 0


@pytest.mark.parametrize(("value", "text"), [
    (1, "1.0"), (0.25, "0.25"), (1234567.0, "1.234567e+06"), (1e7, "1e+07"), (float("inf"), "+Inf"),
    (float("-inf"), "-Inf"), (float("nan"), "NaN"), (-2.5, "-2.5"), (123456.0, "123456.0")])
def test_values_are_formatted_like_go(value: float, text: str) -> None:
    assert format_value(value) == text


def test_runtime_collectors_report_this_process() -> None:
    registry = Registry()
    register_runtime_collectors(registry)
    values = {s.name: s.value for f in text_string_to_metric_families(registry.exposition().decode())
              for s in f.samples if not s.labels or s.name == "python_info"}
    with open(f"/proc/{os.getpid()}/status") as status:
        rss_kib = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    assert values["process_resident_memory_bytes"] == pytest.approx(rss_kib * 1024, rel=0.2)
    assert 0 < values["process_cpu_seconds_total"] <= time.process_time() + 0.05
    assert time.time() - 24 * 3600 < values["process_start_time_seconds"] <= time.time()
    assert values["process_open_fds"] >= 3 and values["process_max_fds"] >= values["process_open_fds"]
    assert values["python_info"] == 1
    theirs = prometheus_client.CollectorRegistry()
    prometheus_client.ProcessCollector(registry=theirs)
    prometheus_client.PlatformCollector(registry=theirs)
    prometheus_client.GCCollector(registry=theirs)
    names = {s.name for f in text_string_to_metric_families(prometheus_client.generate_latest(theirs).decode())
             for s in f.samples if "_created" not in s.name}
    ours = {s.name for f in text_string_to_metric_families(registry.exposition().decode()) for s in f.samples}
    assert ours == names


def test_computed_gauge_is_read_when_scraped_and_a_failing_one_shows_no_samples() -> None:
    from ops.prometheus import ComputedGauge, Registry

    registry = Registry()
    values = {"n4": 2.5}
    ComputedGauge("x_requests", "Summed.", ["node_type"], lambda: [((k,), v) for k, v in values.items()],
                  registry=registry)
    ComputedGauge("x_broken", "Fails.", ["a"], lambda: [(("1",), 1 / 0)], registry=registry)
    assert registry.exposition().decode().splitlines() == [
        "# HELP x_requests Summed.", "# TYPE x_requests gauge", 'x_requests{node_type="n4"} 2.5',
        "# HELP x_broken Fails.", "# TYPE x_broken gauge"]
    values.clear()
    assert 'x_requests{' not in registry.exposition().decode()
