"""`report`: what the product has freed (or added) so far, and what it holds back, read-only.

The same reading and decisions as `plan` (:func:`commands.plan.gather_forecast`). A managed
pod's requests as authored are its verified originals; freed = as authored - as now, per node
type and per workload (:func:`resizer.forecast.managed_requests`). A held-back pod is listed
with the reason: one not at its planned size yet (deferred, infeasible or failed on its node,
or not resized yet) counts in the totals as it is now; one without a plan (unknown node type,
unverifiable originals, ...) does not, as what it was authored with cannot be told.
"""

from __future__ import annotations

import dataclasses
import html
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

from commands.plan import PodKey, align, gather_forecast, hint_json, hint_lines, run_command
from commands.progress import Progress
from kube import KubeClient
from reconciler.outcome import Stage, observe
from reconciler.settings import ReportSettings
from resizer.forecast import FleetForecast, PodForecast, RequestTotals, managed_requests
from resizer.quantity import format_cpu, format_memory
from resizer.runtime_hints import PodRuntimes, RuntimeHint, hints_by_pod

# Why a pod is held back, beyond the plan's outcomes (UnknownNodeType, OriginalsUnverified, ...).
NOT_RESIZED_YET = "NotResizedYet"
STAGE_REASONS = {Stage.DEFERRED: "ResizeDeferred", Stage.INFEASIBLE: "ResizeInfeasible", Stage.ERROR: "ResizeError"}


@dataclass(frozen=True)
class HeldBack:
    namespace: str
    name: str
    workload: str
    node: str
    node_type: str
    reason: str
    detail: str


@dataclass(frozen=True)
class Report:
    by_node_type: dict[str, RequestTotals]
    by_workload: dict[tuple[str, str, str], RequestTotals]  # (namespace, workload, node type)
    total: RequestTotals
    held_back: list[HeldBack]
    left_alone: dict[str, int]
    info: dict[str, Any]
    # Containers resized in place whose runtime still runs with what it read from its limits at start.
    runtime_hints: tuple[tuple[PodForecast, RuntimeHint], ...] = ()


def build_report(
    forecast: FleetForecast,
    pods: list[dict[str, Any]],
    info: dict[str, Any],
    runtimes: dict[PodKey, PodRuntimes] | None = None,
) -> Report:
    return Report(
        managed_requests(forecast, key=lambda p: p.node_type),
        managed_requests(forecast, key=lambda p: (p.namespace, p.workload, p.node_type)),
        managed_requests(forecast, key=lambda p: "all").get("all", RequestTotals()),
        held_back(forecast, pods),
        forecast.skipped,
        info,
        applied_hints(forecast, runtimes or {}),
    )


def applied_hints(
    forecast: FleetForecast, runtimes: dict[PodKey, PodRuntimes]
) -> tuple[tuple[PodForecast, RuntimeHint], ...]:
    """Managed pods' containers resized in place whose runtime read, at its start, a limit the resize
    changed, and has not restarted since. Pods sized at admission started at their size: not flagged."""
    managed = [pod for group in forecast.workloads for pod in group.pods if not pod.sized_at_admission]
    hints = hints_by_pod((((p.namespace, p.name), p.plan) for p in managed), runtimes, applied=True)
    return tuple((pod, hint) for pod in managed for hint in hints.get((pod.namespace, pod.name), ()))


def held_back(forecast: FleetForecast, pods: list[dict[str, Any]]) -> list[HeldBack]:
    """The pods in scope the product has not (fully) sized, and why: the plan's own outcome, or,
    for a pod the plan would still resize, what the kubelet says about its resize."""
    by_key = {(p["metadata"].get("namespace"), p["metadata"].get("name")): p for p in pods}

    def entry(pod: PodForecast, reason: str, detail: str) -> HeldBack:
        return HeldBack(pod.namespace, pod.name, pod.workload, pod.node, pod.node_type, reason, detail)

    out = [entry(pod, pod.outcome, pod.detail) for pod in forecast.not_resized]
    for group in forecast.workloads:
        for pod in group.pods:
            if pod.outcome != "Resize":
                continue
            raw = by_key.get((pod.namespace, pod.name))
            observation = observe(raw) if raw is not None else None
            if observation is not None and observation.stage in STAGE_REASONS:
                out.append(entry(pod, STAGE_REASONS[observation.stage], observation.message))
            else:
                out.append(entry(pod, NOT_RESIZED_YET, f"not at its planned size yet ({pod.detail})"))
    return sorted(out, key=lambda h: (h.namespace, h.name))


def run_report(settings: ReportSettings, out: TextIO = sys.stdout) -> int:
    async def go(client: KubeClient) -> Report:
        pods: list[dict[str, Any]] = []
        runtimes: dict[PodKey, PodRuntimes] = {}
        forecast, info = await gather_forecast(
            client,
            settings,
            skip_applied=False,
            listed_pods=pods,
            runtimes=runtimes,
            progress=Progress("report", "pods read", enabled=settings.output == "table"),
        )
        return build_report(forecast, pods, info, runtimes)

    report = run_command(settings.api, go, max_connections=4, timeout=120.0)
    if isinstance(report, int):
        return report
    if settings.output == "json":
        out.write(json.dumps(report_json(report), indent=2) + "\n")
    elif settings.output == "html":
        out.write(report_html(report))
    else:
        out.write(report_table(report))
    return 0


# ------------------------------------------------------------------ table and JSON


def _freed(amount: int, fmt: Any) -> str:
    """``500m freed`` / ``100m added`` / ``0``."""
    if amount == 0:
        return "0"
    return f"{fmt(abs(amount))} {'freed' if amount > 0 else 'added'}"


def _cells(totals: RequestTotals) -> tuple[str, ...]:
    return (
        str(totals.pods),
        f"{format_cpu(totals.original_cpu)} -> {format_cpu(totals.current_cpu)}",
        _freed(totals.freed_cpu, format_cpu),
        f"{format_memory(totals.original_memory)} -> {format_memory(totals.current_memory)}",
        _freed(totals.freed_memory, format_memory),
    )


HEADER = ("PODS", "CPU REQUESTS (AUTHORED -> NOW)", "CPU", "MEMORY REQUESTS (AUTHORED -> NOW)", "MEMORY")


def report_table(report: Report) -> str:
    lines: list[str] = []
    if report.by_node_type:
        lines += align([("NODE TYPE", *HEADER), *((t, *_cells(v)) for t, v in report.by_node_type.items())])
        lines.append("")
        lines += align(
            [
                ("NAMESPACE", "WORKLOAD", "NODE TYPE", *HEADER),
                *((*key, *_cells(v)) for key, v in report.by_workload.items()),
            ]
        )
    else:
        lines.append("No managed pod.")
    total = report.total
    lines += [
        "",
        f"Total: {total.pods} managed pods; CPU requests {format_cpu(total.original_cpu)} as authored -> "
        f"{format_cpu(total.current_cpu)} now ({_freed(total.freed_cpu, format_cpu)}), memory requests "
        f"{format_memory(total.original_memory)} -> {format_memory(total.current_memory)} "
        f"({_freed(total.freed_memory, format_memory)}).",
    ]
    if report.held_back:
        lines.append(f"Held back ({len(report.held_back)}; those without a plan are not in the totals):")
        lines += [
            f"  {h.namespace}/{h.name} on {h.node} ({h.node_type}): {h.reason}: {h.detail}" for h in report.held_back
        ]
    lines += hint_lines(list(report.runtime_hints))
    if report.left_alone:
        lines.append("Left alone: " + ", ".join(f"{count} {reason}" for reason, count in report.left_alone.items()))
    info = report.info
    lines.append(
        f"Config: {info['config']}; read {info['pods']} bound pods and {info['nodes']} nodes in {info['listSeconds']}s."
    )
    if info.get("keys", "verified") != "verified":
        lines.append(
            f"Warning: {info['keys']}: pods whose spec changed since admission, or whose signed "
            f"originals differ from their spec (sized at admission), are held back as OriginalsUnverified."
        )
    return "\n".join(lines) + "\n"


def _amounts(totals: RequestTotals) -> dict[str, Any]:
    return {
        "pods": totals.pods,
        "cpu": _freed_json("Millicores", format_cpu, totals.original_cpu, totals.current_cpu),
        "memory": _freed_json("Bytes", format_memory, totals.original_memory, totals.current_memory),
    }


def _freed_json(unit: str, fmt: Callable[[int], str], original: int, current: int) -> dict[str, Any]:
    return {
        f"original{unit}": original,
        f"current{unit}": current,
        f"freed{unit}": original - current,
        "original": fmt(original),
        "current": fmt(current),
    }


def report_json(report: Report) -> dict[str, Any]:
    """Amounts in millicores and bytes (freed = original - current; negative: added)."""
    return {
        "apiVersion": "workload-resizer.io/v1alpha1",
        "kind": "Report",
        **{k: v for k, v in report.info.items() if k != "planSeconds"},
        "nodeTypes": [{"nodeType": t, **_amounts(v)} for t, v in report.by_node_type.items()],
        "workloads": [
            {"namespace": ns, "workload": w, "nodeType": t, **_amounts(v)}
            for (ns, w, t), v in report.by_workload.items()
        ],
        "heldBack": [
            {("nodeType" if key == "node_type" else key): value for key, value in dataclasses.asdict(h).items()}
            for h in report.held_back
        ],
        "runtimeHints": [
            {
                "namespace": pod.namespace,
                "name": pod.name,
                "workload": pod.workload,
                "nodeType": pod.node_type,
                **hint_json(hint),
            }
            for pod, hint in report.runtime_hints
        ],
        "leftAlone": report.left_alone,
        "total": _amounts(report.total),
    }


# ------------------------------------------------------------------ HTML (one self-contained page)

AUTHORED_COLOUR, NOW_COLOUR = "#8a94a6", "#2563eb"
FREED_COLOUR, ADDED_COLOUR = "#15803d", "#b91c1c"
STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 2rem;
       color: #1f2937; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.2rem; margin-top: 2rem; }
table { border-collapse: collapse; margin: .5rem 0; } th, td { padding: .25rem .75rem; text-align: left; }
th { border-bottom: 2px solid #d1d5db; } td { border-bottom: 1px solid #e5e7eb; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
.freed { color: #15803d; } .added { color: #b91c1c; } .muted { color: #6b7280; font-size: .9rem; }
section.node-type { display: inline-block; vertical-align: top; margin: 0 2rem 1rem 0; }
"""


def _bar_chart(node_type: str, totals: RequestTotals) -> str:
    """An inline SVG: per resource, a bar as authored and a bar as now (same scale), and what was freed."""
    width, bar_max, row = 520, 300, 26
    parts = [
        f'<svg width="{width}" height="{row * 6 + 10}" role="img" aria-label="requests on {html.escape(node_type)}">'
    ]
    y = 8
    for label, original, current, fmt in (
        ("CPU", totals.original_cpu, totals.current_cpu, format_cpu),
        ("Memory", totals.original_memory, totals.current_memory, format_memory),
    ):
        scale = bar_max / max(original, current, 1)
        freed = original - current
        parts.append(f'<text x="0" y="{y + 14}" font-size="14" font-weight="bold">{label}</text>')
        parts.append(
            f'<text x="{width - 4}" y="{y + 14}" font-size="13" text-anchor="end" '
            f'fill="{FREED_COLOUR if freed >= 0 else ADDED_COLOUR}">{_freed(freed, fmt)}</text>'
        )
        y += row
        for name, value, colour in (("authored", original, AUTHORED_COLOUR), ("now", current, NOW_COLOUR)):
            parts.append(f'<text x="0" y="{y + 14}" font-size="12">{name}</text>')
            parts.append(f'<rect x="70" y="{y + 2}" width="{max(value * scale, 1):.1f}" height="16" fill="{colour}"/>')
            parts.append(f'<text x="{70 + value * scale + 6:.1f}" y="{y + 14}" font-size="12">{fmt(value)}</text>')
            y += row
    parts.append("</svg>")
    return "".join(parts)


def _td(text: str, numeric: bool = False, css: str = "") -> str:
    classes = " ".join(c for c in ("n" if numeric else "", css) if c)
    attribute = f' class="{classes}"' if classes else ""
    return f"<td{attribute}>{html.escape(text)}</td>"


def _totals_tds(totals: RequestTotals) -> str:
    tds = _td(str(totals.pods), True)
    for fmt, original, current in (
        (format_cpu, totals.original_cpu, totals.current_cpu),
        (format_memory, totals.original_memory, totals.current_memory),
    ):
        freed = original - current
        css = "freed" if freed > 0 else "added" if freed < 0 else ""
        tds += _td(fmt(original), True) + _td(fmt(current), True) + _td(_freed(freed, fmt), True, css)
    return tds


TOTALS_HEADER = (
    "<th>pods</th><th>CPU authored</th><th>CPU now</th><th>CPU</th><th>memory authored</th>"
    "<th>memory now</th><th>memory</th>"
)


def _hints_html(hinted: tuple[tuple[PodForecast, RuntimeHint], ...]) -> list[str]:
    if not hinted:
        return []
    return [
        f"<h2>Runtime hints ({len(hinted)})</h2>",
        '<p class="muted">Containers resized in place whose runtime sized itself once at start from a limit '
        "the resize changed: restart them, or let the runtime follow the limit.</p>",
        "<table><tr><th>pod</th><th>workload</th><th>container</th><th>reason</th><th>what it keeps</th></tr>",
        *(
            f"<tr>{_td(f'{pod.namespace}/{pod.name}')}{_td(pod.workload)}{_td(hint.container)}"
            f"{_td(hint.reason)}{_td(hint.message)}</tr>"
            for pod, hint in hinted
        ),
        "</table>",
    ]


def report_html(report: Report) -> str:
    total = report.total
    out = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        "<title>workload-resizer report</title>",
        f"<style>{STYLE}</style></head><body>",
        "<h1>What workload-resizer freed</h1>",
        f"<p>{total.pods} managed pods: CPU requests {html.escape(format_cpu(total.original_cpu))} as authored, "
        f"{html.escape(format_cpu(total.current_cpu))} now ({html.escape(_freed(total.freed_cpu, format_cpu))}); "
        f"memory requests {html.escape(format_memory(total.original_memory))} as authored, "
        f"{html.escape(format_memory(total.current_memory))} now "
        f"({html.escape(_freed(total.freed_memory, format_memory))}).</p>",
        "<h2>Per node type</h2>",
    ]
    if not report.by_node_type:
        out.append("<p>No managed pod.</p>")
    for node_type, totals in report.by_node_type.items():
        out.append(
            f'<section class="node-type"><h3>{html.escape(node_type)} '
            f'<span class="muted">({totals.pods} pods)</span></h3>{_bar_chart(node_type, totals)}</section>'
        )
    out.append(f"<table><tr><th>node type</th>{TOTALS_HEADER}</tr>")
    out += [f"<tr>{_td(t)}{_totals_tds(v)}</tr>" for t, v in report.by_node_type.items()]
    out.append("</table><h2>Per workload</h2>")
    out.append(f"<table><tr><th>namespace</th><th>workload</th><th>node type</th>{TOTALS_HEADER}</tr>")
    out += [f"<tr>{_td(ns)}{_td(w)}{_td(t)}{_totals_tds(v)}</tr>" for (ns, w, t), v in report.by_workload.items()]
    out.append(f"</table><h2>Held back ({len(report.held_back)})</h2>")
    if report.held_back:
        out.append(
            '<p class="muted">Pods not at their planned size count above as they are now; '
            "pods without a plan (no trusted originals, unknown node type) do not count.</p>"
            "<table><tr><th>pod</th><th>workload</th>"
            "<th>node (type)</th><th>reason</th><th>detail</th></tr>"
        )
        out += [
            f"<tr>{_td(f'{h.namespace}/{h.name}')}{_td(h.workload)}{_td(f'{h.node} ({h.node_type})')}"
            f"{_td(h.reason)}{_td(h.detail)}</tr>"
            for h in report.held_back
        ]
        out.append("</table>")
    else:
        out.append("<p>None.</p>")
    out += _hints_html(report.runtime_hints)
    if report.left_alone:
        left_alone = ", ".join(f"{count} {reason}" for reason, count in report.left_alone.items())
        out.append(f'<p class="muted">Left alone: {html.escape(left_alone)}</p>')
    info = report.info
    out.append(
        f'<p class="muted">Config: {html.escape(str(info["config"]))}; {info["pods"]} bound pods and '
        f"{info['nodes']} nodes read; originals keys: {html.escape(str(info.get('keys', 'verified')))}.</p>"
    )
    out.append("</body></html>\n")
    return "\n".join(out)
