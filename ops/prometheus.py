"""Prometheus metrics of both processes (counters, gauges and histograms with labels, gauges
computed when scraped, the runtime series) and the text format 0.0.4 ``/metrics`` answers with.

Written here, not taken from prometheus_client: importing that package loads its exposition
servers' modules (``http.server``, ``email``, ``urllib.request``, ``wsgiref``) into each
process's resident memory, which never uses them (docs/dependencies.md has the figure). The
page is what prometheus_client writes for the same metrics with its ``*_created`` series
disabled (controller-runtime exports none); a unit test compares the two byte for byte. Both
processes update their metrics from their event loop's thread only, so a value is a plain float
with no lock.

The reconciler's metrics live on the process-wide :data:`REGISTRY` (with the runtime series);
the webhook makes a registry per app (:func:`new_registry`) so tests and several apps in one
process stay independent.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Generic, NamedTuple, Protocol, TypeVar

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_INF = float("inf")

Labels = tuple[tuple[str, str], ...]


class Family(NamedTuple):
    """One metric family as scraped: the name of its ``# HELP``/``# TYPE`` lines, and its
    samples ``(sample name, labels, value)``."""

    name: str
    documentation: str
    kind: str
    samples: Sequence[tuple[str, Labels, float]]


class Collector(Protocol):
    def collect(self) -> Iterable[Family]: ...


class CollectorRegistry:
    """The collectors one ``/metrics`` page shows, in registration order."""

    def __init__(self) -> None:
        self._collectors: dict[Collector, tuple[str, ...]] = {}

    def register(self, collector: Collector, names: Sequence[str] = ()) -> None:
        taken = {name for known in self._collectors.values() for name in known}
        if clash := taken.intersection(names):
            raise ValueError(f"metric {sorted(clash)[0]!r} is already registered")
        self._collectors[collector] = tuple(names)

    def unregister(self, collector: Collector) -> None:
        del self._collectors[collector]

    def collect(self) -> Iterator[Family]:
        for collector in list(self._collectors):
            yield from collector.collect()

    def get_sample_value(self, name: str, labels: Mapping[str, str] | None = None) -> float | None:
        wanted = tuple(sorted((labels or {}).items()))
        for family in self.collect():
            for sample_name, sample_labels, value in family.samples:
                if sample_name == name and tuple(sorted(sample_labels)) == wanted:
                    return value
        return None


def format_value(value: float) -> str:
    """A sample value or bucket bound as Go's strconv writes it (Prometheus' own output)."""
    if value == _INF:
        return "+Inf"
    if value == -_INF:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(float(value))
    dot = text.find(".")
    if value > 0 and dot > 6:  # Go switches to an exponent sooner than Python does
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


def _escape(text: str, quote: bool) -> str:
    text = text.replace("\\", r"\\").replace("\n", r"\n")
    return text.replace('"', r"\"") if quote else text


_PROCESS_SERIES = (  # prometheus_client's order, names and help
    ("process_virtual_memory_bytes", "Virtual memory size in bytes.", "gauge"),
    ("process_resident_memory_bytes", "Resident memory size in bytes.", "gauge"),
    ("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", "gauge"),
    ("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", "counter"),
    ("process_open_fds", "Number of open file descriptors.", "gauge"),
    ("process_max_fds", "Maximum number of open file descriptors.", "gauge"),
)
_GC_SERIES = (
    ("python_gc_objects_collected_total", "Objects collected during gc", "collected"),
    ("python_gc_objects_uncollectable_total", "Uncollectable objects found during GC", "uncollectable"),
    ("python_gc_collections_total", "Number of times this generation was collected", "collections"),
)


class _Runtime:
    """The ``process_*`` (from Linux's /proc), ``python_info`` and ``python_gc_*`` series."""

    def collect(self) -> Iterator[Family]:
        for (name, documentation, kind), value in zip(_PROCESS_SERIES, _process_values(), strict=False):
            yield Family(name, documentation, kind, [(name, (), value)])
        major, minor, patch = (str(part) for part in sys.version_info[:3])
        implementation = {"cpython": "CPython", "pypy": "PyPy"}.get(sys.implementation.name, "Unknown")
        info = (("implementation", implementation), ("major", major), ("minor", minor), ("patchlevel", patch))
        version = (*info, ("version", f"{major}.{minor}.{patch}"))
        yield Family("python_info", "Python platform information", "gauge", [("python_info", version, 1.0)])
        stats = gc.get_stats()
        for name, documentation, field in _GC_SERIES:
            samples = [(name, (("generation", str(g)),), float(s[field])) for g, s in enumerate(stats)]
            yield Family(name, documentation, "counter", samples)


def _process_values() -> list[float]:
    """The values of :data:`_PROCESS_SERIES`, or none where /proc cannot be read."""
    try:
        with open("/proc/self/stat", "rb") as stat_file:
            stat = [float(field) for field in stat_file.read().split(b")")[-1].split()[11:22]]
        with open("/proc/stat", "rb") as machine:
            boot = next(float(line.split()[1]) for line in machine if line.startswith(b"btime "))
        with open("/proc/self/limits", "rb") as limits:
            max_fds = next(float(line.split()[3]) for line in limits if line.startswith(b"Max open file"))
        open_fds = float(len(os.listdir("/proc/self/fd")))
    except (OSError, StopIteration, IndexError, ValueError):
        return []
    ticks = os.sysconf("SC_CLK_TCK")
    # stat's fields after the command, from [11]: utime stime ... starttime (+8) vsize (+9) rss in pages (+10)
    utime, stime, start, vsize, rss = stat[0], stat[1], stat[8], stat[9], stat[10]
    return [
        vsize,
        rss * os.sysconf("SC_PAGESIZE"),
        start / ticks + boot,
        utime / ticks + stime / ticks,
        open_fds,
        max_fds,
    ]


RUNTIME_NAMES = (*(name for name, _, _ in _PROCESS_SERIES), "python_info", *(name for name, _, _ in _GC_SERIES))


def new_registry(runtime_collectors: bool = True) -> CollectorRegistry:
    """A registry of its own, with the process, Python and GC series unless told not to."""
    registry = CollectorRegistry()
    if runtime_collectors:
        registry.register(_Runtime(), RUNTIME_NAMES)
    return registry


REGISTRY = new_registry()


def exposition(registry: CollectorRegistry = REGISTRY) -> bytes:
    """The ``/metrics`` page of ``registry`` (the process-wide one by default)."""
    lines = []
    for family in registry.collect():
        lines.append(f"# HELP {family.name} {_escape(family.documentation, quote=False)}\n")
        lines.append(f"# TYPE {family.name} {family.kind}\n")
        for name, labels, value in family.samples:
            text = ",".join(f'{key}="{_escape(label, quote=True)}"' for key, label in sorted(labels))
            lines.append(f"{name}{{{text}}} {format_value(value)}\n" if text else f"{name} {format_value(value)}\n")
    return "".join(lines).encode()


Sample = tuple[str, Labels, float]


class _CounterValue:
    """A counter's value for one set of label values."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter can only increase")
        self.value += amount

    def samples(self, name: str, labels: Labels) -> list[Sample]:
        return [(name, labels, self.value)]


class _GaugeValue(_CounterValue):
    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)


class _Buckets:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)  # per bucket, not cumulative; the last bound is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.sum += value
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
                return

    def samples(self, name: str, labels: Labels) -> list[Sample]:
        cumulative, buckets = 0, []
        for bound, count in zip(self.bounds, self.counts, strict=True):
            cumulative += count
            buckets.append((f"{name}_bucket", (*labels, ("le", format_value(bound))), float(cumulative)))
        return [*buckets, (f"{name}_count", labels, float(cumulative)), (f"{name}_sum", labels, self.sum)]


Child = TypeVar("Child", _CounterValue, _GaugeValue, _Buckets)


class _Metric(Generic[Child]):
    """A family of children by label values (one child, ``()``, when it has no labels)."""

    kind = ""
    suffix = ""
    _new_child: Callable[[], Child]  # the value kept for a new set of label values

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        registry: CollectorRegistry | None = REGISTRY,
    ) -> None:
        self.name = name.removesuffix(self.suffix) + self.suffix
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._children: dict[tuple[str, ...], Child] = {}
        if not self.labelnames:
            self._children[()] = self._new_child()
        if registry is not None:
            suffixes = ("", "_bucket", "_count", "_sum") if self.kind == "histogram" else ("",)
            registry.register(self, [self.name + suffix for suffix in suffixes])

    def labels(self, *values: object) -> Child:
        key = tuple(map(str, values))
        child = self._children.get(key)
        if child is None:
            if len(key) != len(self.labelnames) or not key:
                raise ValueError(f"{self.name}: expected label values for {self.labelnames}, got {values!r}")
            child = self._children[key] = self._new_child()
        return child

    def _only(self) -> Child:
        if self.labelnames:
            raise ValueError(f"{self.name} has labels {self.labelnames}: use .labels(...)")
        return self._children[()]

    def collect(self) -> Iterator[Family]:
        samples = [
            sample
            for key, child in list(self._children.items())
            for sample in child.samples(self.name, tuple(zip(self.labelnames, key, strict=True)))
        ]
        yield Family(self.name, self.documentation, self.kind, samples)


class Counter(_Metric[_CounterValue]):
    """A count that only grows; written ``*_total`` (given with or without it)."""

    kind = "counter"
    suffix = "_total"
    _new_child = _CounterValue

    def inc(self, amount: float = 1.0) -> None:
        self._only().inc(amount)


class Gauge(_Metric[_GaugeValue]):
    kind = "gauge"
    _new_child = _GaugeValue

    def set(self, value: float) -> None:
        self._only().set(value)


DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


class Histogram(_Metric[_Buckets]):
    kind = "histogram"

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        buckets: Sequence[float] = DEFAULT_BUCKETS,
        registry: CollectorRegistry | None = REGISTRY,
    ) -> None:
        bounds = sorted(float(bound) for bound in buckets)
        if not bounds or len(set(bounds)) != len(bounds):
            raise ValueError(f"{name}: buckets must be distinct, got {buckets!r}")
        self._bounds = (*bounds, _INF) if bounds[-1] != _INF else tuple(bounds)
        super().__init__(name, documentation, labelnames, registry)

    def _new_child(self) -> _Buckets:
        return _Buckets(self._bounds)

    def observe(self, value: float) -> None:
        self._only().observe(value)


class ComputedGauge:
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
            registry.register(self, (name,))

    def collect(self) -> Iterator[Family]:
        try:
            samples = [
                (self.name, tuple(zip(self.labelnames, values, strict=True)), float(v)) for values, v in self._samples()
            ]
        except Exception:  # one family must not take /metrics down
            logging.getLogger("metrics").exception("computing %s failed; shown without samples", self.name)
            samples = []
        yield Family(self.name, self.documentation, "gauge", samples)
