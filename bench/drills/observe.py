"""Observing a run from outside: pod timelines, process memory and descriptors, Prometheus text.

Shared by the drills and bench/reconciler_burst.py.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from devkit.kube import Kube
from devkit.metrics import samples
from resizer.podstate import APPLIED_INSTANCE_TYPE, PREFIX

ORIGINAL_PREFIX = PREFIX + "original-"


class PodTimeline:
    """Watches one namespace; records when each pod was created, first bound and first aligned.

    Also records whether a pod arrived already stamped (original-* annotations in its
    first ADDED event, i.e. the webhook admitted it), and deletions.
    """

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.applied: dict[str, float] = {}
        self.stamped_at_admission: dict[str, bool] = {}
        self.deleted: set[str] = set()
        # Its own connections, closed by its own thread: the drill closes `kube` when it ends,
        # and the watch may still be waiting for its next event then.
        self._kube = kube.own_connections()
        self._namespace = namespace
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"timeline-{namespace}")
        self._rv = ""

    def start(self) -> PodTimeline:
        self._rv = self._kube.get(f"/api/v1/namespaces/{self._namespace}/pods", limit="1")["metadata"][
            "resourceVersion"
        ]
        self._thread.start()
        return self

    def stop(self) -> None:
        """The thread ends at the watch's next event or end (the cluster going down ends it)."""
        self._stop.set()

    def _run(self) -> None:
        try:
            self._watch()
        finally:
            self._kube.http.close()

    def _watch(self) -> None:
        while not self._stop.is_set():
            params = {"watch": "1", "resourceVersion": self._rv, "timeoutSeconds": "60", "allowWatchBookmarks": "true"}
            try:
                with self._kube.http.stream(
                    "GET",
                    f"/api/v1/namespaces/{self._namespace}/pods",
                    params=params,
                    timeout=httpx.Timeout(30, read=90),
                ) as resp:
                    for line in resp.iter_lines():
                        if self._stop.is_set():
                            return
                        if line:
                            self._record(orjson.loads(line))
            except (httpx.HTTPError, orjson.JSONDecodeError):
                time.sleep(0.5)  # e.g. the apiserver is down in a fault drill: resume from _rv

    def _record(self, event: dict[str, Any]) -> None:
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        if event.get("type") == "ERROR":
            # 410 Gone after a long outage: resume from now (pods seen meanwhile are
            # still recorded by the next events; the drills' end-state check lists them).
            self._rv = ""
            return
        if meta.get("resourceVersion"):
            self._rv = meta["resourceVersion"]
        if event.get("type") == "DELETED":
            self.deleted.add(meta.get("name", ""))
            return
        if event.get("type") not in ("ADDED", "MODIFIED"):
            return
        now = time.monotonic()
        name = meta["name"]
        annotations = meta.get("annotations") or {}
        if name not in self.created:
            self.created[name] = now
            self.stamped_at_admission[name] = any(k.startswith(ORIGINAL_PREFIX) for k in annotations)
        if obj.get("spec", {}).get("nodeName"):
            self.bound.setdefault(name, now)
        if APPLIED_INSTANCE_TYPE in annotations:
            self.applied.setdefault(name, now)


# ----------------------------------------------------------------------------- processes


def _status_kib(pid: int, field_name: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        return None
    return None


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set size (VmHWM), in MiB."""
    kib = _status_kib(pid, "VmHWM")
    return float("nan") if kib is None else kib / 1024


def rss_mb(pid: int) -> float:
    kib = _status_kib(pid, "VmRSS")
    return float("nan") if kib is None else kib / 1024


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used so far."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError):
        return -1


@dataclass
class Sample:
    t: float
    rss_mb: float
    fds: int


@dataclass
class ProcessSampler:
    """Samples RSS and open descriptors of named processes every `interval` seconds."""

    pids: Callable[[], dict[str, int]]  # name -> pid, asked at every sample
    interval: float = 5.0
    samples: dict[str, list[Sample]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="sampler")
        self._t0 = time.monotonic()

    def start(self) -> ProcessSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.interval + 5)

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval):
                return

    def sample(self) -> None:
        now = time.monotonic() - self._t0
        for name, pid in self.pids().items():
            rss, fds = rss_mb(pid), open_fds(pid)
            if fds >= 0 and rss == rss:
                self.samples.setdefault(name, []).append(Sample(round(now, 1), round(rss, 1), fds))


@dataclass(frozen=True)
class Trend:
    """Is a series flat? After a warm-up: medians of its first and last quarter, the
    highest value of each half (a leak keeps setting new highs), and the slope."""

    first: float
    last: float
    first_half_max: float
    second_half_max: float
    minimum: float
    maximum: float
    slope_per_hour: float

    def as_dict(self) -> dict[str, float]:
        return {k: round(v, 2) for k, v in self.__dict__.items()}


def trend(times: list[float], values: list[float], warmup_fraction: float = 0.1) -> Trend:
    skip = int(len(values) * warmup_fraction)
    t, v = times[skip:], values[skip:]
    if len(v) < 4:
        raise ValueError(f"too few samples for a trend ({len(v)})")
    quarter, half = max(1, len(v) // 4), len(v) // 2
    slope = statistics.linear_regression(t, v).slope * 3600 if t[-1] > t[0] else 0.0
    return Trend(
        statistics.median(v[:quarter]),
        statistics.median(v[-quarter:]),
        max(v[:half]),
        max(v[half:]),
        min(v),
        max(v),
        slope,
    )


# ----------------------------------------------------------------------------- Prometheus text


def requests_by_verb(metrics_text: str, metric: str = "rest_client_requests_total") -> dict[tuple[str, str], float]:
    """{(method, resource): count} from the reconciler's rest_client_requests_total (or `metric`)."""
    totals: dict[tuple[str, str], float] = {}
    for labels, value in samples(metrics_text, metric):
        key = (labels["method"], labels["resource"])
        totals[key] = totals.get(key, 0) + value
    return totals


# ----------------------------------------------------------------------------- ceiling


async def bare_resize_ceiling(
    kube: Kube, namespace: str, pods: list[dict], concurrency: int, container: str = "app"
) -> float:
    """Seconds the apiserver needs to accept one pods/resize patch per pod from a minimal client.

    Each pod's container `container` gets its cpu request and limit set to 71m
    (72m if already 71m): a real resize, Guaranteed shape kept.
    """
    async with httpx.AsyncClient(
        base_url=kube.server,
        verify=kube.tls,
        headers=dict(kube.http.headers),
        limits=httpx.Limits(max_connections=concurrency),
    ) as client:
        queue: asyncio.Queue[dict] = asyncio.Queue()
        for pod in pods:
            queue.put_nowait(pod)

        async def worker() -> None:
            while not queue.empty():
                pod = queue.get_nowait()
                spec = next(c for c in pod["spec"]["containers"] if c["name"] == container)
                new = "71m" if spec["resources"]["requests"]["cpu"] != "71m" else "72m"
                body = orjson.dumps(
                    {
                        "spec": {
                            "containers": [
                                {"name": container, "resources": {"requests": {"cpu": new}, "limits": {"cpu": new}}}
                            ]
                        }
                    }
                )
                resp = await client.patch(
                    f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/resize",
                    content=body,
                    headers={"Content-Type": "application/strategic-merge-patch+json"},
                )
                if resp.status_code >= 300:
                    raise RuntimeError(f"bare resize failed: {resp.status_code} {resp.text[:200]}")

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return time.monotonic() - started
