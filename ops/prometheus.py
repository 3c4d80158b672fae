"""Prometheus metrics: prometheus_client, with the two conventions both processes share.

* No ``*_created`` series (controller-runtime exports none; dashboards expect none).
* ``/metrics`` answers the text format 0.0.4 (what Prometheus and controller-runtime
  speak), written by :func:`exposition` for one registry.

The reconciler's metrics live on the library's process-wide :data:`REGISTRY` (which
carries the ``process_*``, ``python_info`` and ``python_gc_*`` collectors); the webhook
makes a registry per app (:func:`new_registry`) so tests and several apps in one process
stay independent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence

import prometheus_client
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = [
    "CONTENT_TYPE",
    "REGISTRY",
    "CollectorRegistry",
    "ComputedGauge",
    "Counter",
    "Gauge",
    "Histogram",
    "exposition",
    "new_registry",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

prometheus_client.disable_created_metrics()


def new_registry(runtime_collectors: bool = True) -> CollectorRegistry:
    """A registry of its own, with the process, Python and GC collectors unless told not to."""
    registry = CollectorRegistry()
    if runtime_collectors:
        prometheus_client.ProcessCollector(registry=registry)
        prometheus_client.PlatformCollector(registry=registry)
        prometheus_client.GCCollector(registry=registry)
    return registry


def exposition(registry: CollectorRegistry = REGISTRY) -> bytes:
    """The ``/metrics`` page of ``registry`` in the text format of :data:`CONTENT_TYPE`."""
    return prometheus_client.generate_latest(registry)


class ComputedGauge(Collector):
    """A gauge family whose samples ``(label values, value)`` are computed when scraped (nothing
    kept between scrapes: a label set that is gone simply is not shown). A callback that fails
    shows the family without samples rather than failing the whole scrape."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        samples: Callable[[], Iterable[tuple[Sequence[str], float]]],
        registry: CollectorRegistry | None = REGISTRY,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._samples = samples
        if registry is not None:
            registry.register(self)

    def describe(self) -> list[GaugeMetricFamily]:
        # Known without computing the samples (registering must not call back).
        return [GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        try:
            for values, value in self._samples():
                family.add_metric(list(values), value)
        except Exception:  # one family must not take /metrics down
            logging.getLogger("metrics").exception("computing %s failed; shown without samples", self.name)
            family = GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)
        yield family
