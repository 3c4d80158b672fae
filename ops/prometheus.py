"""Prometheus metrics: counters, gauges and histograms with labels, the ``process_*`` /
``python_*`` collectors, and the text exposition format (0.0.4) ``/metrics`` answers with.

What the webhook and the reconciler need of ``prometheus_client``, without its cost:
importing it takes ~45 ms of CPU (``http.server``, ``email``, ``urllib.request`` for
exposition servers we do not use), a sixth of the reconciler's start-up, and every
update takes a lock. Both processes update their metrics from the event loop's thread
only, so a value here is a plain float; the output is what ``prometheus_client`` writes
for the same metrics, minus its ``*_created`` series (controller-runtime has none).
"""
from __future__ import annotations

import gc
import logging
import math
import os
import resource
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, Protocol, TypeVar

__all__ = [
    "CONTENT_TYPE",
    "REGISTRY",
    "ComputedGauge",
    "Counter",
    "Gauge",
    "Histogram",
    "Registry",
    "register_runtime_collectors",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_INF = float("inf")


class Collector(Protocol):
    def lines(self) -> Iterable[str]:
        """Its exposition lines (``# HELP``, ``# TYPE``, samples), without newlines."""


class Registry:
    """The collectors one ``/metrics`` endpoint shows, in registration order."""

    def __init__(self) -> None:
        self._collectors: list[Collector] = []
        self._names: set[str] = set()

    def register(self, collector: Collector, name: str) -> None:
        if name in self._names:
            raise ValueError(f"metric {name!r} is already registered")
        self._names.add(name)
        self._collectors.append(collector)

    def exposition(self) -> bytes:
        lines = [line for collector in self._collectors for line in collector.lines()]
        return ("\n".join(lines) + "\n").encode() if lines else b""


REGISTRY = Registry()       # the reconciler's (one per process); the webhook makes its own


def format_value(value: float) -> str:
    """A sample value or bucket bound as Go's strconv formats it (Prometheus' own output)."""
    if value == _INF:
        return "+Inf"
    if value == -_INF:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(float(value))
    dot = text.find(".")
    if value > 0 and dot > 6:       # Go switches to an exponent sooner than Python: 1e+07
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return text


def _escape_help(text: str) -> str:
    return text.replace("\\", r"\\").replace("\n", r"\n")


def _escape_label(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _label_text(names: Sequence[str], values: Sequence[str]) -> str:
    """``{name="value",...}`` sorted by name (as prometheus_client writes them), or ''."""
    if not names:
        return ""
    return "{" + ",".join(f'{n}="{_escape_label(v)}"' for n, v in sorted(zip(names, values, strict=True))) + "}"


def _head(name: str, help_text: str, kind: str) -> list[str]:
    return [f"# HELP {name} {_escape_help(help_text)}", f"# TYPE {name} {kind}"]


class _ValueChild:
    """One sample: a counter's or a gauge's value for one set of label values."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def samples(self, name: str, labelnames: tuple[str, ...], key: tuple[str, ...]) -> Iterable[str]:
        yield f"{name}{_label_text(labelnames, key)} {format_value(self.value)}"


class _CounterChild(_ValueChild):
    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter can only increase")
        self.value += amount


class _GaugeChild(_ValueChild):
    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)


class _HistogramChild:
    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * len(bounds)     # per bucket, not cumulative; the last bound is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.sum += value
        for i, bound in enumerate(self._bounds):
            if value <= bound:
                self.counts[i] += 1
                return

    def samples(self, name: str, labelnames: tuple[str, ...], key: tuple[str, ...]) -> Iterable[str]:
        cumulative = 0
        for bound, count in zip(self._bounds, self.counts, strict=True):
            cumulative += count
            labels = _label_text([*labelnames, "le"], [*key, format_value(bound)])
            yield f"{name}_bucket{labels} {format_value(cumulative)}"
        plain = _label_text(labelnames, key)
        yield f"{name}_count{plain} {format_value(cumulative)}"
        yield f"{name}_sum{plain} {format_value(self.sum)}"


C = TypeVar("C", _CounterChild, _GaugeChild, _HistogramChild)


class _Family(Generic[C]):
    """A metric family: its children by label values (one child, ``()``, without labels)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: Registry | None,
                 kind: str, new_child: Callable[[], C], sample_name: str | None = None) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._kind = kind
        self._sample_name = sample_name or name
        self._new_child: Callable[[], C] = new_child
        self._children: dict[tuple[str, ...], C] = {}
        if not self.labelnames:
            self._children[()] = new_child()
        if registry is not None:
            registry.register(self, name)

    def labels(self, *values: object) -> C:
        key = tuple(str(v) for v in values)
        child = self._children.get(key)
        if child is None:
            if len(key) != len(self.labelnames) or not self.labelnames:
                raise ValueError(f"{self.name}: expected label values for {self.labelnames}, got {values!r}")
            child = self._children[key] = self._new_child()
        return child

    def _only(self) -> C:
        if self.labelnames:
            raise ValueError(f"{self.name} has labels {self.labelnames}: use .labels(...)")
        return self._children[()]

    def lines(self) -> Iterable[str]:
        yield from _head(self._sample_name, self.documentation, self._kind)
        for key, child in list(self._children.items()):
            yield from child.samples(self._sample_name, self.labelnames, key)


class Counter(_Family[_CounterChild]):
    """A monotonic count; named ``*_total`` in the output (given with or without it)."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                 registry: Registry | None = REGISTRY) -> None:
        family = name.removesuffix("_total")
        super().__init__(family, documentation, labelnames, registry, "counter", _CounterChild, f"{family}_total")

    def inc(self, amount: float = 1.0) -> None:
        self._only().inc(amount)

    @property
    def value(self) -> float:
        return self._only().value


class Gauge(_Family[_GaugeChild]):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                 registry: Registry | None = REGISTRY) -> None:
        super().__init__(name, documentation, labelnames, registry, "gauge", _GaugeChild)

    def set(self, value: float) -> None:
        self._only().set(value)

    def inc(self, amount: float = 1.0) -> None:
        self._only().inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        self._only().dec(amount)

    @property
    def value(self) -> float:
        return self._only().value


DEFAULT_BUCKETS = (.005, .01, .025, .05, .075, .1, .25, .5, .75, 1.0, 2.5, 5.0, 7.5, 10.0)


class Histogram(_Family[_HistogramChild]):
    def __init__(self, name: str, documentation: str, labelnames: Sequence[str] = (),
                 buckets: Sequence[float] = DEFAULT_BUCKETS, registry: Registry | None = REGISTRY) -> None:
        bounds = sorted(float(b) for b in buckets)
        if not bounds or len(set(bounds)) != len(bounds):
            raise ValueError(f"{name}: buckets must be distinct, got {buckets!r}")
        if bounds[-1] != _INF:
            bounds.append(_INF)
        self._bounds = tuple(bounds)
        super().__init__(name, documentation, labelnames, registry, "histogram",
                         lambda: _HistogramChild(self._bounds))

    def observe(self, value: float) -> None:
        self._only().observe(value)


class ComputedGauge:
    """A gauge family whose samples ``(label values, value)`` are computed when scraped (nothing
    kept between scrapes: a label set that is gone simply is not shown). A callback that fails
    shows the family without samples rather than failing the whole scrape."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str],
                 samples: Callable[[], Iterable[tuple[Sequence[str], float]]],
                 registry: Registry | None = REGISTRY) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._samples = samples
        if registry is not None:
            registry.register(self, name)

    def lines(self) -> Iterable[str]:
        try:
            samples = list(self._samples())
        except Exception:           # one family must not take /metrics down
            logging.getLogger("metrics").exception("computing %s failed; shown without samples", self.name)
            samples = []
        lines = _head(self.name, self.documentation, "gauge")
        for values, value in samples:
            lines.append(f"{self.name}{_label_text(self.labelnames, values)} {format_value(value)}")
        return lines


class _Computed:
    """A collector whose samples are read when scraped."""

    def __init__(self, sample_lines: Callable[[], Iterable[str]]) -> None:
        self._sample_lines = sample_lines

    def lines(self) -> Iterable[str]:
        return self._sample_lines()


def _process_lines() -> Iterable[str]:
    """``process_*`` as Prometheus clients export them on Linux (nothing elsewhere)."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read().split(b")")[-1].split()
        fds = len(os.listdir("/proc/self/fd"))
    except OSError:
        return []
    ticks = os.sysconf("SC_CLK_TCK")
    page = resource.getpagesize()
    with open("/proc/stat", "rb") as f:
        boot = next(float(line.split()[1]) for line in f if line.startswith(b"btime"))
    # Fields after the command: [0] state ... [11] utime [12] stime [19] starttime [20] vsize [21] rss.
    values = [
        ("process_virtual_memory_bytes", "Virtual memory size in bytes.", "gauge", float(stat[20])),
        ("process_resident_memory_bytes", "Resident memory size in bytes.", "gauge", float(int(stat[21]) * page)),
        ("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", "gauge",
         boot + int(stat[19]) / ticks),
        ("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", "counter",
         (int(stat[11]) + int(stat[12])) / ticks),
        ("process_open_fds", "Number of open file descriptors.", "gauge", float(fds)),
        ("process_max_fds", "Maximum number of open file descriptors.", "gauge",
         float(resource.getrlimit(resource.RLIMIT_NOFILE)[0])),
    ]
    lines: list[str] = []
    for name, help_text, kind, value in values:
        lines += [*_head(name, help_text, kind), f"{name} {format_value(value)}"]
    return lines


def _python_lines() -> Iterable[str]:
    major, minor, patch = (str(n) for n in sys.version_info[:3])
    implementation = {"cpython": "CPython", "pypy": "PyPy"}.get(sys.implementation.name, sys.implementation.name)
    info = _label_text(("implementation", "major", "minor", "patchlevel", "version"),
                       (implementation, major, minor, patch, f"{major}.{minor}.{patch}"))
    lines = [*_head("python_info", "Python platform information", "gauge"), f"python_info{info} 1.0"]
    stats = gc.get_stats()
    for name, help_text, field in (
            ("python_gc_objects_collected_total", "Objects collected during gc", "collected"),
            ("python_gc_objects_uncollectable_total", "Uncollectable objects found during GC", "uncollectable"),
            ("python_gc_collections_total", "Number of times this generation was collected", "collections")):
        lines += _head(name, help_text, "counter")
        lines += [f'{name}{{generation="{generation}"}} {format_value(s[field])}' for generation, s in enumerate(stats)]
    return lines


def register_runtime_collectors(registry: Registry) -> None:
    """The ``process_*``, ``python_info`` and ``python_gc_*`` series every Prometheus client shows."""
    registry.register(_Computed(_process_lines), "process")
    registry.register(_Computed(_python_lines), "python")


register_runtime_collectors(REGISTRY)
