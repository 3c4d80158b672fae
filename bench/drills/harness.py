"""The shared harness of the drills: one fresh cluster per drill, the product's processes,
figures and verdicts, and the exact end-state check.

A drill is a Drill(name, about, sizes={"full": params, "ci": params}, run) whose
run(ctx, params) records figures with ctx.figure(...) and verdicts with
ctx.check(...), and raises DrillFailure (or any exception) to stop early. A drill
passes when it ran to the end and every check holds.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from bench.drills.observe import PodTimeline, requests_by_verb
from bench.drills.workload import (
    BURSTABLE,
    CONFIG,
    GUARANTEED,
    SKIPPED,
    EndState,
    Expectations,
    Template,
    check_end_state,
    replicaset,
)
from devkit.cluster import POOL_LABEL, LocalCluster, NodeSpec, cluster_dir_for_demo, cluster_dir_for_tests
from devkit.kube import ApiError, Kube
from devkit.metrics import metric_sum, samples
from devkit.processes import (
    Process,
    Reconciler,
    Webhook,
    WebhookCerts,
    register_webhook,
    wait_webhook_active,
)

T = TypeVar("T")
NAMESPACE = "drill"
# The reconciler's flags in every drill (the same as bench/reconciler_burst.py).
RECONCILER_FLAGS = ("--concurrency=16", "--kube-api-qps=500", "--kube-api-burst=1000")


class DrillFailure(AssertionError):
    """A drill could not even reach its end-state check (e.g. pods never aligned)."""


def say(message: str) -> None:
    print(f"[drills {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass
class Context:
    """Everything one drill run needs; `close()` stops what it started and the cluster."""

    drill: str
    size: str
    cluster: LocalCluster
    out_dir: Path
    figures: dict[str, Any] = field(default_factory=dict)
    checks: list[Check] = field(default_factory=list)
    processes: list[Process] = field(default_factory=list)
    reconciler_sets: list[ReconcilerLives] = field(default_factory=list)
    timelines: list[PodTimeline] = field(default_factory=list)
    namespace: str = NAMESPACE

    @property
    def log_dir(self) -> Path:
        """Where the processes' and the control plane's logs are kept (failed runs, or --keep-logs)."""
        return self.out_dir / "logs" / f"{self.drill}-{self.size}"

    @property
    def kube(self) -> Kube:
        assert self.cluster.kube is not None
        return self.cluster.kube

    # ---- recording

    def figure(self, key: str, value: Any) -> Any:
        self.figures[key] = round(value, 2) if isinstance(value, float) else value
        return value

    def check(self, name: str, ok: bool, detail: str = "") -> bool:
        self.checks.append(Check(name, bool(ok), detail))
        say(f"{self.drill}: {'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
        return bool(ok)

    def log(self, message: str) -> None:
        say(f"{self.drill}: {message}")

    # ---- setup

    def setup(self, config: str = CONFIG) -> None:
        self.cluster.up()
        self.kube.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
        )
        self.kube.create(
            f"/api/v1/namespaces/{self.namespace}/configmaps",
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "workload-resizer-config"},
                "data": {"config.yaml": config},
            },
        )
        wait(
            f"default service account in {self.namespace}",
            lambda: self.kube.get(f"/api/v1/namespaces/{self.namespace}/serviceaccounts/default"),
            60,
        )

    def add_nodes(self, per_family: dict[str, int], pool: str = "main", **node: Any) -> list[NodeSpec]:
        specs = [
            NodeSpec(f"{pool}-{family}-{i}", family, pool, **node)
            for family, count in per_family.items()
            for i in range(count)
        ]
        started = time.monotonic()
        self.cluster.add_nodes(specs)
        self.log(f"{len(specs)} nodes ready in {time.monotonic() - started:.1f}s")
        return specs

    def node_selector(self, pool: str = "main") -> dict[str, str]:
        return {POOL_LABEL: pool}

    def create_replicaset(self, name: str, template: Template, replicas: int, pool: str = "main") -> None:
        self.kube.create(
            f"/apis/apps/v1/namespaces/{self.namespace}/replicasets",
            replicaset(name, template, replicas, self.node_selector(pool)),
        )

    def scale(self, kind: str, name: str, replicas: int) -> None:
        self.kube.patch(
            f"/apis/apps/v1/namespaces/{self.namespace}/{kind}/{name}/scale", {"spec": {"replicas": replicas}}
        )

    # ---- the product's processes

    def webhook(self, certs: WebhookCerts | None = None, port: int | None = None, register: bool = True) -> Webhook:
        hook = Webhook("--log-level=warning", "--size-at-admission=false", certs=certs, port=port)
        self.processes.append(hook)
        hook.wait_ready(60)
        if register:
            register_webhook(
                self.kube, hook.url, hook.certs.ca_bundle, name="workload-resizer-drill", namespaces=[self.namespace]
            )
            wait_webhook_active(self.kube, self.namespace, 60)
        return hook

    def reconcilers(self, *flags: str, env: dict[str, str] | None = None) -> ReconcilerLives:
        lives = ReconcilerLives(self, [f"--config-namespace={self.namespace}", *RECONCILER_FLAGS, *flags], env)
        self.reconciler_sets.append(lives)
        return lives

    def timeline(self) -> PodTimeline:
        timeline = PodTimeline(self.kube, self.namespace).start()
        self.timelines.append(timeline)
        return timeline

    # ---- the verdict

    def end_state_resized_once_each(self, lives: ReconcilerLives, settle: float = 60) -> EndState:
        """The exact end state, and one pods/resize PATCH (the reconciler's own count) per pod that needed one."""
        state = self.end_state(settle=settle)
        patches = lives.resize_patches()
        self.figure("resize_patches", patches)
        self.check(
            "pods/resize PATCHes (reconciler metrics) == pods that needed a resize",
            patches == state.needed_resize,
            f"{patches:.0f} patches, {state.needed_resize} needed",
        )
        return state

    def end_state(
        self, expectations: Expectations | None = None, count_resizes: bool = True, settle: float = 60
    ) -> EndState:
        """The exact end-state check, retried for up to `settle` seconds (the fake kubelet's
        actuation of the last resizes lags); how long it took is a figure."""
        expectations = expectations or Expectations()
        started = time.monotonic()
        while True:
            state = check_end_state(self.kube, self.namespace, self.cluster.node_types(), expectations, count_resizes)
            if state.exact or time.monotonic() - started > settle:
                break
            time.sleep(2)
        self.figure("end_state", state.summary())
        self.figure("end_state_settled_s", time.monotonic() - started)
        self.check(
            "end state exact (sizes, originals, applied-instance-type, skip pods untouched"
            + (", one resize per pod that needed one)" if count_resizes else ")"),
            state.exact,
            f"{state.aligned}/{state.eligible} eligible pods aligned, "
            f"{state.skipped} skip-annotated, {len(state.problems)} problems"
            + (f" ({state.not_actuated} of them: not actuated by the fake kubelet yet)" if state.not_actuated else "")
            + (f"; e.g. {state.problems[0]}" if state.problems else ""),
        )
        return state

    def close(self, keep_logs: bool) -> None:
        for timeline in self.timelines:
            timeline.stop()
        for proc in self.processes:
            try:
                proc.terminate(20)
            finally:
                proc.close()
            if isinstance(proc, Webhook):
                shutil.rmtree(proc.certs.directory, ignore_errors=True)
            if keep_logs:
                self.log_dir.mkdir(parents=True, exist_ok=True)
                shutil.copy(proc.log_path, self.log_dir / f"{proc.name}-{proc.proc.pid}.log")
            proc.log_path.unlink(missing_ok=True)
        if keep_logs:
            cluster_logs = self.cluster.state_dir / "logs"
            if cluster_logs.exists():
                shutil.copytree(cluster_logs, self.log_dir / "cluster", dirs_exist_ok=True)


class ReconcilerLives:
    """Successive reconciler processes with the same flags; metrics summed over all lives.

    Each life's counters are scraped right before it is stopped or killed (a SIGKILL
    can lose the increments of the last few milliseconds: counts from killed lives
    are lower bounds) and at the end.
    """

    def __init__(self, ctx: Context, flags: list[str], env: dict[str, str] | None) -> None:
        self._ctx = ctx
        self._flags = flags
        self._env = env
        self.lives: list[Reconciler] = []
        self._last: dict[int, str] = {}
        self.killed = 0

    @property
    def current(self) -> Reconciler:
        return self.lives[-1]

    def start(self, wait_ready: bool = True) -> Reconciler:
        rec = Reconciler(
            self._ctx.cluster.kubeconfig, *self._flags, env=self._env, name=f"reconciler-{len(self.lives)}"
        )
        self._ctx.processes.append(rec)
        self.lives.append(rec)
        if wait_ready:
            rec.wait_ready(120)
        return rec

    def scrape(self) -> str | None:
        rec = self.current
        try:
            text = rec.metrics()
        except Exception:  # noqa: BLE001 - not serving yet / already gone
            return self._last.get(id(rec))
        self._last[id(rec)] = text
        return text

    def kill(self) -> None:
        self.scrape()
        self.current.proc.send_signal(signal.SIGKILL)
        self.current.proc.wait(10)
        self.killed += 1

    def terminate(self) -> None:
        self.scrape()
        self.current.terminate(30)

    def total(self, name: str, **labels: str) -> float:
        return sum(metric_sum(text, name, **labels) for text in self._last.values())

    def resize_patches(self) -> float:
        """2xx pods/resize PATCHes over all lives."""
        return sum(
            self.total("rest_client_requests_total", method="PATCH", resource="pods/resize", code=c)
            for c in ("200", "201")
        )

    def outcomes(self) -> dict[str, float]:
        """Decisions per outcome (the Event reasons), over all lives."""
        totals: dict[str, float] = {}
        for text in self._last.values():
            for labels, value in samples(text, "workload_resizer_outcomes_total"):
                totals[labels["reason"]] = totals.get(labels["reason"], 0) + value
        return totals

    def requests(self) -> dict[tuple[str, str], float]:
        totals: dict[tuple[str, str], float] = {}
        for text in self._last.values():
            for key, value in requests_by_verb(text).items():
                totals[key] = totals.get(key, 0) + value
        return totals

    def requests_per_pod(self, pods: int) -> dict[str, float]:
        return {f"{m} {r}": round(v / pods, 3) for (m, r), v in sorted(self.requests().items())}

    def wait_idle(self, timeout: float = 120) -> None:
        """Until the current life's work queue is empty and no worker is busy."""

        def idle() -> bool:
            text = self.scrape() or ""
            return (
                metric_sum(text, "workqueue_depth") == 0 and metric_sum(text, "controller_runtime_active_workers") == 0
            )

        wait("reconciler work queue empty and no active worker", idle, timeout, interval=1)


class Burst:
    """Three ReplicaSets in one pool: 50% Guaranteed, 40% Burstable (two containers),
    10% skip-annotated (must stay untouched); scaled together."""

    SHARES = ((GUARANTEED, 5), (BURSTABLE, 4), (SKIPPED, 1))

    def __init__(self, ctx: Context, total: int, prefix: str = "burst", pool: str = "main") -> None:
        self._ctx = ctx
        self.names = {t.name: f"{prefix}-{t.name}" for t, _ in self.SHARES}
        self.total = total
        for template, replicas in self.split(total).items():
            ctx.create_replicaset(self.names[template.name], template, replicas, pool)

    @classmethod
    def split(cls, total: int) -> dict[Template, int]:
        weight = sum(w for _, w in cls.SHARES)
        counts = {t: total * w // weight for t, w in cls.SHARES}
        counts[GUARANTEED] += total - sum(counts.values())
        return counts

    @property
    def eligible(self) -> int:
        return sum(n for t, n in self.split(self.total).items() if t.eligible)

    def scale_to(self, total: int) -> None:
        self.total = total
        for template, replicas in self.split(total).items():
            self._ctx.scale("replicasets", self.names[template.name], replicas)


def wait(what: str, check: Callable[[], T | None], timeout: float, interval: float = 0.5) -> T:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
        except (ApiError, OSError, httpx.HTTPError) as err:
            last, result = err, None
        if result:
            return result
        time.sleep(interval)
    raise DrillFailure(
        f"timed out after {timeout:.0f}s waiting for {what}" + (f" (last error: {last})" if last else "")
    )


def wait_aligned(timeline: PodTimeline, count: int, timeout: float) -> float:
    """Wait until the timeline saw `count` pods aligned; returns the monotonic time of the last one."""
    wait(f"{count} pods aligned", lambda: len(timeline.applied) >= count, timeout, 1)
    return max(timeline.applied.values())


# ----------------------------------------------------------------------------- running drills


@dataclass
class Result:
    drill: str
    size: str
    passed: bool
    seconds: float
    figures: dict[str, Any]
    checks: list[dict[str, Any]]
    error: str | None = None


@dataclass(frozen=True)
class Drill:
    name: str
    about: str
    sizes: dict[str, Any]  # "full" / "ci" -> the run function's parameters
    run: Callable[[Context, Any], None]
    needs_cluster: bool = True


def run_drill(
    drill: Drill,
    size: str,
    base_dir: Path,
    out_dir: Path,
    keep: bool,
    scheduler_qps: int | None,
    keep_logs: bool = False,
) -> Result:
    params = drill.sizes[size]
    state_dir = base_dir / drill.name
    if state_dir.resolve() in (cluster_dir_for_tests().resolve(), cluster_dir_for_demo().resolve()):
        raise ValueError(f"drills never use the tests' or the demo's cluster ({state_dir})")
    cluster = LocalCluster(state_dir, scheduler_qps)
    ctx = Context(drill.name, size, cluster, out_dir)
    started = time.monotonic()
    error = None
    say(f"=== {drill.name} ({size}): {drill.about}")
    try:
        drill.run(ctx, params)
    except Exception as err:  # noqa: BLE001 - a drill failure is a result, not a crash
        error = f"{type(err).__name__}: {err}"
        say(f"{drill.name}: ERROR {error}\n{traceback.format_exc()}")
    for lives in ctx.reconciler_sets:
        if lives.lives and lives.current.alive:
            lives.scrape()
        ctx.figure("reconciler_outcomes", lives.outcomes())
    passed = error is None and bool(ctx.checks) and all(c.ok for c in ctx.checks)
    try:
        ctx.close(keep_logs=keep_logs or not passed)
    finally:
        if not keep and drill.needs_cluster:
            cluster.down()
    result = Result(
        drill.name,
        size,
        passed,
        round(time.monotonic() - started, 1),
        ctx.figures,
        [c.__dict__ for c in ctx.checks],
        error,
    )
    return result


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_kib = 0
    try:
        mem_kib = int(
            next(
                line.split()[1]
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal:")
            )
        )
    except (OSError, StopIteration):
        pass
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "cpu_model": model,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "python": sys.version.split()[0],
    }


def write_json(path: Path, payload: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
