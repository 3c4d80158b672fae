"""`calibrate`: measure each node type's CPU performance instead of typing it from a table.

Per round, one benchmark pod per node type runs at the same time on one Ready, schedulable node
of its type (Guaranteed: --cpu request = limit; pinned by node affinity on the node's name, so
the scheduler honours taints and capacity); its score comes from the container's termination
message (no connection to the kubelet needed), else its log's last line. After --repeats rounds
each type gets a mean, a spread, a ratio to the baseline with its confidence interval
(:mod:`resizer.calibration`) and a suggested ``nodeTypes.<type>.cpuPerf``; --apply writes only
those bytes of the ConfigMap's config.yaml (validated first; resourceVersion precondition), and
the reconciler re-aligns the pods at its own rate.

The pods are bare and carry the skip annotation: neither the webhook nor the reconciler touches
them. Each is deleted once it has run, and all this run created (labelled with the run,
:func:`resizer.podstate.calibration_labels`) on the way out, Ctrl-C and SIGTERM included.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import difflib
import json
import re
import signal
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, TextIO

from commands.errors import CommandError
from commands.plan import align, compile_config, is_ready, list_all, read_configmap, run_command
from commands.progress import Progress
from kube import ApiError, KubeClient, KubeError
from kube.client import TransportError
from reconciler.settings import CONFIG_KEY, CalibrateSettings
from resizer.calibration import (
    CalibrationError,
    Ratio,
    ScoreSummary,
    Suggestion,
    decimal_text,
    parse_score_line,
    ratio_of_means,
    set_cpu_perf,
    suggest,
    summarize,
)
from resizer.config import CompiledConfig, load_config
from resizer.errors import ResizerError
from resizer.podstate import calibration_labels, calibration_selector, skip_patch

APP_LABEL = "app.kubernetes.io/name"
APP = "workload-resizer-calibrate"
CONTAINER = "benchmark"
POLL_SECONDS = 1.0
LOG_TAIL_LINES = 20
# Below this share of a CPU on the baseline, other load held the benchmark back there and
# every ratio against it comes out too high (the built-in benchmark reports its share).
BUSY_BASELINE_SHARE = 0.95
BUILT_IN = (
    "the built-in benchmark (single thread; geometric mean of integer, floating-point and cache-resident "
    "pointer-chase kernels, millions of operations/s)"
)
# Container waiting reasons that will not resolve by waiting.
STUCK_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)


class BenchmarkError(CommandError):
    """One benchmark run failed; the message says what the pod did."""


@dataclass(frozen=True)
class Target:
    """The node one type's benchmarks run on, or why there is none."""

    node_type: str
    node: str = ""
    problem: str = ""


@dataclass
class TypeResult:
    target: Target
    scores: list[float] = field(default_factory=list)
    cpu_shares: list[float] = field(default_factory=list)  # the built-in benchmark's cpuShare
    error: str = ""

    @property
    def node_type(self) -> str:
        return self.target.node_type


# ------------------------------------------------------------------ choosing nodes (pure)


def tolerates(taint: Mapping[str, Any], tolerations: Sequence[tuple[str, str, str]]) -> bool:
    """Whether (key, value, effect) tolerations admit a taint (value "": operator Exists)."""
    return any(
        key == taint.get("key")
        and (not value or value == taint.get("value"))
        and (not effect or effect == taint.get("effect"))
        for key, value, effect in tolerations
    )


def choose_targets(
    nodes: Sequence[Mapping[str, Any]],
    label: str,
    wanted: Sequence[str],
    baseline: str,
    tolerations: Sequence[tuple[str, str, str]] = (),
) -> list[Target]:
    """One target per node type to measure (the baseline first): a Ready, uncordoned node whose
    NoSchedule/NoExecute taints are tolerated, the first by name; otherwise the reason there is none."""
    by_type: dict[str, list[Mapping[str, Any]]] = {}
    for node in nodes:
        node_type = (node["metadata"].get("labels") or {}).get(label)
        if node_type:
            by_type.setdefault(node_type, []).append(node)
    types = list(dict.fromkeys([baseline, *(wanted or sorted(by_type))]))
    return [_target(node_type, by_type.get(node_type, []), label, tolerations) for node_type in types]


def _target(
    node_type: str, nodes: list[Mapping[str, Any]], label: str, tolerations: Sequence[tuple[str, str, str]]
) -> Target:
    if not nodes:
        return Target(node_type, problem=f"no node has the label {label}={node_type}")
    ready = [n for n in nodes if is_ready(n) and not (n.get("spec") or {}).get("unschedulable")]
    if not ready:
        names = ", ".join(sorted(n["metadata"]["name"] for n in nodes))
        return Target(node_type, problem=f"no schedulable node: {names} NotReady or cordoned")
    taints = {n["metadata"]["name"]: (n.get("spec") or {}).get("taints") or [] for n in ready}
    usable = [
        name
        for name, on_node in taints.items()
        if all(tolerates(t, tolerations) for t in on_node if t.get("effect") in ("NoSchedule", "NoExecute"))
    ]
    if not usable:
        shown = sorted(
            {f"{t['key']}={t.get('value', '')}:{t['effect']}" for on_node in taints.values() for t in on_node}
        )
        problem = f"every Ready node is tainted ({', '.join(shown)}): pass --toleration KEY[=VALUE][:EFFECT]"
        return Target(node_type, problem=problem)
    return Target(node_type, node=min(usable))


# ------------------------------------------------------------------ the benchmark pod


def benchmark_pod(settings: CalibrateSettings, target: Target, run_id: str, attempt: int) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": settings.image,
        "imagePullPolicy": settings.image_pull_policy,
        "resources": {kind: {"cpu": settings.cpu, "memory": settings.memory} for kind in ("requests", "limits")},
        "terminationMessagePath": "/dev/termination-log",
        # A failing benchmark's last log lines land in the message, which the error quotes.
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    if settings.command:
        container["command"] = list(settings.command)
    else:
        container["args"] = [f"-duration={settings.benchmark_seconds}s"]
    tolerations = [
        {
            "key": key,
            "operator": "Equal" if value else "Exists",
            **({"value": value} if value else {}),
            **({"effect": effect} if effect else {}),
        }
        for key, value, effect in settings.tolerations
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{APP}-{_name_part(target.node_type)}-{attempt}-",
            "labels": {APP_LABEL: APP, **calibration_labels(run_id, target.node_type)},
            "annotations": skip_patch(),
        },
        "spec": {
            "restartPolicy": "Never",
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [target.node]}]}
                        ]
                    }
                }
            },
            "tolerations": tolerations,
            "hostNetwork": settings.host_network,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65534,
                "runAsGroup": 65534,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [container],
            "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "16Mi"}}],
        },
    }


def _name_part(node_type: str) -> str:
    """A node type as part of a pod name (label values may hold '_' and capitals; names may not)."""
    return re.sub(r"[^a-z0-9]+", "-", node_type.lower())[:30].strip("-") or "type"


def pod_verdict(pod: Mapping[str, Any]) -> tuple[str, str]:
    """("done", termination message) | ("failed", why) | ("waiting", what it waits for)."""
    status = pod.get("status") or {}
    container: Mapping[str, Any] = next(
        (s for s in status.get("containerStatuses") or [] if s.get("name") == CONTAINER), {}
    )
    state = container.get("state") or {}
    terminated = state.get("terminated")
    if status.get("phase") == "Succeeded" and terminated:
        return "done", str(terminated.get("message") or "")
    if status.get("phase") == "Failed" or (terminated and terminated.get("exitCode")):
        detail = terminated or {}
        message = str(detail.get("message") or status.get("message") or "").strip()
        why = f"exit code {detail.get('exitCode')}, {detail.get('reason') or status.get('reason') or 'Failed'}"
        return "failed", f"the benchmark failed ({why})" + (f": {message[-500:]}" if message else "")
    waiting = state.get("waiting") or {}
    if waiting.get("reason") in STUCK_REASONS:
        return "failed", f"the container cannot start: {waiting['reason']}: {waiting.get('message', '')}"
    scheduled: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {}
    )
    if scheduled.get("status") == "False":
        return "waiting", f"not scheduled: {scheduled.get('message') or scheduled.get('reason')}"
    return "waiting", f"{status.get('phase', 'Pending')}" + (f" ({waiting['reason']})" if waiting.get("reason") else "")


class Calibration:
    def __init__(self, client: KubeClient, settings: CalibrateSettings, progress: Progress | None = None) -> None:
        self._client = client
        self._settings = settings
        self._progress = progress or Progress("calibrate", "benchmark runs", enabled=False)
        self._pods = f"/api/v1/namespaces/{settings.namespace}/pods"
        self.run_id = uuid.uuid4().hex[:10]
        self._live: set[str] = set()

    async def run_rounds(self, targets: list[Target]) -> list[TypeResult]:
        results = [TypeResult(t, error=t.problem) for t in targets]
        self._progress.start(self._settings.repeats * sum(not r.error for r in results))
        try:
            for attempt in range(1, self._settings.repeats + 1):
                active = [r for r in results if not r.error]
                if not active or results[0].error:
                    break
                self._progress.say(
                    f"calibrate: round {attempt}/{self._settings.repeats}: "
                    + ", ".join(f"{r.node_type} on {r.target.node}" for r in active),
                    sys.stderr,
                )
                await asyncio.gather(*(self._measure(r, attempt) for r in active))
        finally:
            self._progress.finish()
            await asyncio.shield(self.clean_up())
        return results

    async def _measure(self, result: TypeResult, attempt: int) -> None:
        try:
            score, details = await self.run_once(result.target, attempt)
        except BenchmarkError as err:
            result.error = f"run {attempt}: {err}"
        except KubeError as err:
            result.error = f"run {attempt}: the API refused or failed a request: {err}"
        else:
            result.scores.append(score)
            share = details.get("cpuShare")
            if isinstance(share, (int, float)) and not isinstance(share, bool):
                result.cpu_shares.append(float(share))
        if result.error:
            self._progress.shrink(self._settings.repeats - attempt)  # a failed type runs no more rounds
        self._progress.advance()

    async def run_once(self, target: Target, attempt: int) -> tuple[float, dict[str, Any]]:
        try:
            pod = await self._client.create(self._pods, benchmark_pod(self._settings, target, self.run_id, attempt))
        except ApiError as err:
            raise BenchmarkError(f"cannot create the benchmark pod in {self._settings.namespace}: {err}") from None
        name = pod["metadata"]["name"]
        self._live.add(name)
        try:
            message = await self._wait(name)
            return await self._score(name, message)
        finally:
            await asyncio.shield(self._delete(name))

    async def _wait(self, name: str) -> str:
        deadline = time.monotonic() + self._settings.timeout
        what = "Pending"
        while time.monotonic() < deadline:
            try:
                pod = await self._client.get(f"{self._pods}/{name}")
            except ApiError as err:
                if err.status == 404:
                    raise BenchmarkError(f"pod {name} was deleted while it ran") from None
                if not err.retryable:
                    raise
            except TransportError:  # the apiserver restarting, a dropped connection: poll again
                pass
            else:
                verdict, what = pod_verdict(pod)
                if verdict == "done":
                    return what
                if verdict == "failed":
                    raise BenchmarkError(f"pod {name} on {pod['spec'].get('nodeName') or '(unscheduled)'}: {what}")
            await asyncio.sleep(POLL_SECONDS)
        warning = await self._last_warning(name)
        raise BenchmarkError(
            f"pod {name} did not finish within {self._settings.timeout:g}s (--timeout): {what}"
            + (f"; last Warning event: {warning}" if warning else "")
        )

    async def _last_warning(self, name: str) -> str:
        try:
            events = await self._client.get(
                f"/api/v1/namespaces/{self._settings.namespace}/events",
                fieldSelector=f"involvedObject.name={name},type=Warning",
            )
        except KubeError:
            return ""
        items = sorted(events.get("items") or [], key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
        return f"{items[-1].get('reason')}: {str(items[-1].get('message'))[:300]}" if items else ""

    async def _score(self, name: str, message: str) -> tuple[float, dict[str, Any]]:
        try:
            return parse_score_line(message)
        except CalibrationError as err:
            if message.strip():
                raise BenchmarkError(f"pod {name}: termination message: {err}") from None
        try:  # nothing in the termination message: the last line of the log
            log = await self._client.get_text(f"{self._pods}/{name}/log", container=CONTAINER, tailLines=LOG_TAIL_LINES)
        except KubeError as err:
            raise BenchmarkError(
                f"pod {name}: empty termination message and its log cannot be read ({err}); "
                'write {"score": <number>} to /dev/termination-log'
            ) from None
        try:
            return parse_score_line(log)
        except CalibrationError as err:
            raise BenchmarkError(f"pod {name}: log: {err}") from None

    async def _delete(self, name: str) -> None:
        with contextlib.suppress(ApiError, TransportError):
            await self._client.request(
                "DELETE",
                f"{self._pods}/{name}",
                {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
                decode=False,
            )
        self._live.discard(name)

    async def clean_up(self) -> None:
        """Delete every pod of this run: those tracked, then any the label finds (a create whose reply was lost)."""
        for name in list(self._live):
            await self._delete(name)
        with contextlib.suppress(ApiError, TransportError):
            left = await self._client.get(self._pods, labelSelector=calibration_selector(self.run_id))
            for pod in left.get("items") or []:
                await self._delete(pod["metadata"]["name"])


# ------------------------------------------------------------------ the verdict (pure)


@dataclass(frozen=True)
class TypeReport:
    result: TypeResult
    summary: ScoreSummary | None = None
    ratio: Ratio | None = None
    suggestion: Suggestion | None = None
    configured: Fraction | None = None


@dataclass(frozen=True)
class Report:
    baseline: str
    types: list[TypeReport]
    config_source: str
    old_text: str
    new_text: str
    changes: dict[str, Fraction]
    confidence: float
    seconds: float
    applied: bool = False

    @property
    def failed(self) -> list[TypeReport]:
        return [t for t in self.types if t.result.error]


def evaluate(
    results: list[TypeResult], config: CompiledConfig, baseline: str, confidence: float, config_text: str
) -> tuple[list[TypeReport], dict[str, Fraction], str]:
    """Per type: summary, ratio, suggestion; the cpuPerf changes; the edited config text."""
    base = results[0]
    base_summary = summarize(base.scores) if base.scores and not base.error else None
    base_spec = config.node_types.get(baseline)
    baseline_perf = base_spec.cpuPerf if base_spec is not None else Fraction(1)
    reports = []
    for result in results:
        configured = config.node_types[result.node_type].cpuPerf if result.node_type in config.node_types else None
        if result.error or not result.scores or base_summary is None:
            reports.append(TypeReport(result, configured=configured))
        elif result is base:
            itself = Ratio(1.0, 1.0, 1.0, confidence, float("inf"))
            reports.append(TypeReport(result, base_summary, itself, configured=configured))
        else:
            summary = summarize(result.scores)
            ratio = ratio_of_means(summary, base_summary, confidence)
            suggestion = suggest(result.node_type, ratio, baseline_perf, configured)
            reports.append(TypeReport(result, summary, ratio, suggestion, configured))
    changes = {t.suggestion.node_type: t.suggestion.measured for t in reports if t.suggestion and t.suggestion.change}
    try:
        new_text = set_cpu_perf(config_text, changes)
        load_config(new_text)
    except ResizerError as err:
        raise CommandError(f"the suggested config.yaml is not valid: {err}") from None
    return reports, changes, new_text


# ------------------------------------------------------------------ entry point


async def calibrate(client: KubeClient, settings: CalibrateSettings) -> Report:
    started = time.monotonic()
    text, resource_version, source = await read_configmap(client, settings.config_namespace, settings.config_name)
    config = compile_config(text, source)
    baseline = settings.baseline_node_type or config.baseline_node_type
    if baseline not in config.node_types:
        raise CommandError(
            f"baseline node type {baseline!r} is not in {source} nodeTypes: the ratios are relative to its cpuPerf"
        )
    nodes = await list_all(client, "/api/v1/nodes", settings.api.page_size)
    targets = choose_targets(nodes, settings.node_type_label, settings.node_types, baseline, settings.tolerations)
    if targets[0].problem:
        raise CommandError(f"baseline node type {baseline}: {targets[0].problem}")
    if len(targets) < 2:
        raise CommandError(
            f"only the baseline type {baseline} was found (label {settings.node_type_label}): "
            "nothing to compare it with"
        )
    run = Calibration(client, settings, Progress("calibrate", "benchmark runs", enabled=settings.output == "table"))
    results = await run.run_rounds(targets)
    reports, changes, new_text = evaluate(results, config, baseline, settings.confidence, text)
    report = Report(baseline, reports, source, text, new_text, changes, settings.confidence, time.monotonic() - started)
    if settings.apply and changes and not report.failed:
        path = f"/api/v1/namespaces/{settings.config_namespace}/configmaps/{settings.config_name}"
        try:
            await client.patch(
                path, {"metadata": {"resourceVersion": resource_version}, "data": {CONFIG_KEY: new_text}}
            )
        except ApiError as err:
            if err.status == 409:
                raise CommandError(
                    f"{source} changed while calibrating; nothing applied, run calibrate again"
                ) from None
            raise CommandError(f"cannot update {source}: {err}") from None
        report = dataclasses.replace(report, applied=True)
    return report


def run_calibrate(settings: CalibrateSettings, out: TextIO = sys.stdout) -> int:
    async def go(client: KubeClient) -> Report:
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        if task is not None:
            loop.add_signal_handler(signal.SIGTERM, task.cancel)
        try:
            return await calibrate(client, settings)
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    try:
        report = run_command(settings.api, go, "cannot reach the cluster", max_connections=8, timeout=60.0)
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("calibrate: interrupted; its benchmark pods are deleted, the config is unchanged", file=sys.stderr)
        return 130
    if isinstance(report, int):
        return report
    if settings.output == "json":
        out.write(json.dumps(report_json(report, settings), indent=2) + "\n")
    else:
        out.write(report_table(report, settings))
    return 1 if report.failed else 0


# ------------------------------------------------------------------ rendering


def _g(value: float, digits: int = 4) -> str:
    return f"{value:.{digits}g}"


def _perf(value: Fraction | None) -> str:
    return "-" if value is None else decimal_text(value)


def report_table(report: Report, settings: CalibrateSettings) -> str:
    percent = f"{report.confidence * 100:g}%"
    rows: list[tuple[str, ...]] = [
        (
            "NODE TYPE",
            "NODE",
            "RUNS",
            "SCORE MEAN",
            "STDEV",
            "MIN..MAX",
            "CPU SHARE",
            "RATIO",
            f"{percent} CI",
            "CPUPERF NOW",
            "MEASURED",
            "ACTION",
        )
    ]
    for t in report.types:
        r = t.result
        if t.summary is None or t.ratio is None:
            rows.append(
                (r.node_type, r.target.node or "-", str(len(r.scores)), *["-"] * 6, _perf(t.configured), "-", "FAILED")
            )
            continue
        s = t.summary
        if r.node_type == report.baseline:
            ci, measured, action = "baseline", _perf(t.configured), "baseline"
        else:
            ci = f"{_g(t.ratio.low, 3)}..{_g(t.ratio.high, 3)}"
            measured = _perf(t.configured if t.suggestion is None else t.suggestion.measured)
            changed = t.suggestion and t.suggestion.change
            action = "add" if t.configured is None else "change" if changed else "keep (inside the CI)"
        share = f"{_mean_share(r):.0%}" if r.cpu_shares else "-"
        rows.append(
            (
                r.node_type,
                r.target.node,
                str(s.runs),
                _g(s.mean),
                f"{_g(s.stdev, 2)} ({s.relative_stdev:.1%})",
                f"{_g(s.minimum)}..{_g(s.maximum)}",
                share,
                _g(t.ratio.value, 3),
                ci,
                _perf(t.configured),
                measured,
                action,
            )
        )
    lines = align(rows)
    lines += [f"{t.result.node_type}: {t.result.error}" for t in report.failed]
    baseline_result = report.types[0].result
    if baseline_result.cpu_shares and _mean_share(baseline_result) < BUSY_BASELINE_SHARE:
        lines.append(
            f"Warning: the benchmark got only {_mean_share(baseline_result):.0%} of a CPU on "
            f"{baseline_result.target.node}: other load competed there, so the ratios to "
            f"{report.baseline} come out too high. Calibrate on an idle baseline node (whole CPUs in "
            "--cpu get exclusive cores under the kubelet's static CPU manager policy)."
        )
    lines += [
        "",
        f"Score: work per wall second of {'the benchmark command' if settings.command else BUILT_IN}, "
        f"{settings.repeats} runs per type in pods of cpu {settings.cpu} (Guaranteed).",
        f"Ratio: mean score / the baseline's ({report.baseline}); CI: {percent} confidence interval of that ratio "
        "(Welch t on log scale). MEASURED = the baseline's cpuPerf x ratio. A configured value inside the CI is kept.",
        "CPU SHARE: the benchmark's CPU time / wall time (built-in benchmark): below 100% a quota or other load "
        "held it back.",
    ]
    old, new = report.old_text.splitlines(), report.new_text.splitlines()
    diff = list(difflib.unified_diff(old, new, f"{report.config_source} (now)", "suggested", lineterm=""))
    if report.failed:
        lines.append(("Nothing applied: " if settings.apply else "") + f"{len(report.failed)} node type(s) failed.")
    if not diff:
        lines.append(f"{report.config_source} needs no change.")
    else:
        lines += ["", f"Suggested change to {CONFIG_KEY}:", *diff, ""]
        if report.applied:
            lines.append(
                f"Applied to {report.config_source}: the reconciler re-aligns the pods on "
                f"{', '.join(sorted(report.changes))} at its --max-resizes-per-second."
            )
        elif not report.failed:
            lines.append("Run again with --apply to write it.")
    lines.append(f"Calibrated in {report.seconds:.0f}s.")
    return "\n".join(lines) + "\n"


def _mean_share(result: TypeResult) -> float:
    return sum(result.cpu_shares) / len(result.cpu_shares)


def report_json(report: Report, settings: CalibrateSettings) -> dict[str, Any]:
    def entry(t: TypeReport) -> dict[str, Any]:
        r = t.result
        item: dict[str, Any] = {
            "nodeType": r.node_type,
            "node": r.target.node or None,
            "scores": r.scores,
            "configuredCpuPerf": _perf(t.configured) if t.configured is not None else None,
        }
        if r.error:
            item["error"] = r.error
        if r.cpu_shares:
            item["cpuShare"] = round(_mean_share(r), 4)
        if t.summary is not None:
            s = t.summary
            item.update({"mean": s.mean, "stdev": s.stdev, "min": s.minimum, "max": s.maximum})
        if t.ratio is not None:
            item["ratio"] = {"value": t.ratio.value, "low": t.ratio.low, "high": t.ratio.high}
        if t.suggestion is not None:
            item["measuredCpuPerf"] = decimal_text(t.suggestion.measured)
            item["change"] = t.suggestion.change
        return item

    return {
        "apiVersion": "workload-resizer.io/v1alpha1",
        "kind": "Calibration",
        "config": report.config_source,
        "baselineNodeType": report.baseline,
        "confidence": report.confidence,
        "repeats": settings.repeats,
        "cpu": settings.cpu,
        "image": settings.image,
        "nodeTypes": [entry(t) for t in report.types],
        "changes": {k: decimal_text(v) for k, v in sorted(report.changes.items())},
        "suggestedConfig": report.new_text if report.changes else None,
        "applied": report.applied,
        "failed": [t.result.node_type for t in report.failed],
        "seconds": round(report.seconds, 1),
    }
