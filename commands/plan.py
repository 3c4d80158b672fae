"""`plan`: what the product would do to the cluster, read-only.

One paged LIST of bound pods and one of nodes (plus namespaces when the scope selects by label)
with the admin's kubeconfig, the config from the product's ConfigMap or a candidate file, then
the reconciler's own pure decisions (:mod:`resizer.forecast`). Nothing is written.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from typing import Any, TextIO, TypeVar

from commands.errors import CommandError
from commands.keys import KeyDirectoryError, KeyRingError, load_keyring
from commands.progress import Progress
from kube import ApiError, KubeClient, KubeError, load_credentials
from kube.discovery import serves
from kube.slim import slim_pod
from reconciler.settings import CONFIG_KEY, ApiSettings, PlanSettings
from reconciler.vpa import OWNER_PATHS, slim_owned
from resizer.config import CompiledConfig, ConfigError, config_text, load_config
from resizer.eligibility import TERMINAL_PHASES
from resizer.forecast import FleetForecast, PodForecast, WorkloadForecast, forecast_fleet
from resizer.plan import node_resizes_pod_level
from resizer.preflight import apply_patch, limit_range_hold, node_hold, quota_hold
from resizer.quantity import format_cpu, format_memory
from resizer.runtime_hints import PodRuntimes, RuntimeHint, hints_by_pod, pod_runtimes
from resizer.vpa import GROUP_VERSION_PATH, NO_OWNER, RESOURCE, Owner, VpaVerdict, managing_vpa, vpa_index

T = TypeVar("T")
PodKey = tuple[str, str]  # (namespace, name)


def run_command(
    api: ApiSettings,
    go: Callable[[KubeClient], Coroutine[Any, Any, T]],
    unreachable: str = "cannot read the cluster",
    **client_options: Any,
) -> T | int:
    """`go(client)` with a client of the admin's kubeconfig (closed after), or its failure's exit code,
    said on stderr: 2 for a CommandError (the admin's to fix), 1 when the cluster cannot be read."""

    async def with_client() -> T:
        credentials = load_credentials(api.kubeconfig, api.context)
        client = KubeClient(credentials, qps=api.qps, burst=api.burst, **client_options)
        try:
            return await go(client)
        finally:
            await client.close()

    try:
        return asyncio.run(with_client())
    except CommandError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (KubeError, OSError) as err:
        print(f"error: {unreachable}: {err}", file=sys.stderr)
        return 1


async def list_all(
    client: KubeClient,
    path: str,
    page_size: int,
    slim: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    on_page: Callable[[int], None] | None = None,
    **params: Any,
) -> list[dict[str, Any]]:
    """Every item of a collection, in pages of ``page_size``, each reduced by ``slim`` as its page
    arrives (memory stays proportional to what is read); ``on_page`` gets the count after each page."""
    items: list[dict[str, Any]] = []
    query: dict[str, Any] = {"limit": page_size, **params}
    while True:
        page = await client.get(path, **query)
        items.extend(map(slim, page.get("items") or []) if slim else page.get("items") or [])
        if on_page is not None:
            on_page(len(items))
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items
        query["continue"] = token


async def namespace_labels(client: KubeClient, page_size: int) -> dict[str, dict[str, str]]:
    """Every namespace's labels by name, for a namespace scope that selects by label."""
    namespaces = await list_all(client, "/api/v1/namespaces", page_size)
    return {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in namespaces}


def is_ready(obj: Mapping[str, Any]) -> bool:
    """Whether a pod's or a node's Ready condition is True."""
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


async def read_config(client: KubeClient, settings: PlanSettings) -> tuple[CompiledConfig, str]:
    if settings.config_file:
        source = settings.config_file
        try:
            text = await asyncio.to_thread(Path(settings.config_file).read_text)
        except OSError as err:
            raise CommandError(f"cannot read {source}: {err}") from None
    else:
        text, _, source = await read_configmap(
            client, settings.config_namespace, settings.config_name, " (pass --config-file to plan a candidate config)"
        )
    return compile_config(text, source), source


async def read_configmap(client: KubeClient, namespace: str, name: str, hint: str = "") -> tuple[str, str, str]:
    """The product ConfigMap's config.yaml text, its resourceVersion and a name for messages."""
    source = f"ConfigMap {namespace}/{name}"
    try:
        configmap = await client.get(f"/api/v1/namespaces/{namespace}/configmaps/{name}")
    except ApiError as err:
        raise CommandError(f"cannot read {source}: {err}{hint}") from None
    text = config_text(configmap)
    if text is None:
        raise CommandError(f"{source} has no key {CONFIG_KEY}")
    return text, str(configmap["metadata"]["resourceVersion"]), source


def compile_config(text: str, source: str) -> CompiledConfig:
    try:
        return load_config(text)
    except ConfigError as err:
        raise CommandError(f"invalid config in {source}:\n{err}") from None


async def gather_forecast(
    client: KubeClient,
    settings: PlanSettings,
    skip_applied: bool,
    runtimes: dict[PodKey, PodRuntimes],
    progress: Progress,
    listed_pods: list[dict[str, Any]] | None = None,
) -> tuple[FleetForecast, dict[str, Any]]:
    """Read the cluster and forecast every pod; ``listed_pods``, if given, receives the (slim)
    bound pods read (what `report` needs to say why a pod is held back), ``runtimes`` what their
    containers' runtimes read from their limits at start (the slim pods drop env, image, command)."""
    started = time.monotonic()
    config, source = await read_config(client, settings)
    try:
        keyring, warning = await load_keyring(client, settings.keys)
    except (KeyRingError, KeyDirectoryError) as err:
        raise CommandError(f"originals keys: {err}") from None

    def slim(pod: dict[str, Any]) -> dict[str, Any]:  # slim_pod, recording the runtime facts of a pod with any
        found = pod_runtimes(pod)
        if found is not None:
            metadata = pod.get("metadata") or {}
            runtimes[(str(metadata.get("namespace")), str(metadata.get("name")))] = found
        return slim_pod(pod)

    progress.start()
    try:
        pods, nodes = await asyncio.gather(
            list_all(
                client,
                "/api/v1/pods",
                settings.api.page_size,
                slim,
                on_page=progress.update,
                fieldSelector="spec.nodeName!=",
            ),
            list_all(client, "/api/v1/nodes", settings.api.page_size),
        )
    finally:
        progress.finish()
    labels = await namespace_labels(client, settings.api.page_size) if settings.scope.needs_labels else None
    listed = time.monotonic()
    if listed_pods is not None:
        listed_pods.extend(pods)
    node_types = {
        n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(settings.node_type_label) for n in nodes
    }
    forecast = forecast_fleet(
        pods,
        node_types,
        config,
        settings.scope,
        labels,
        settings.resize_restart_containers,
        skip_applied=skip_applied,
        keyring=keyring,
        pod_level_nodes={n["metadata"]["name"] for n in nodes if node_resizes_pod_level(n)},
    )
    constraints = await read_constraints(client, settings.api.page_size, forecast)
    held = preflight_verdicts(forecast, pods, nodes, constraints)
    return forecast, {
        "config": source,
        "pods": len(pods),
        "nodes": len(nodes),
        "keys": warning or "verified",
        "listSeconds": round(listed - started, 3),
        "planSeconds": round(time.monotonic() - listed, 3),
        "held": held,
        "preflightNotJudged": constraints.get("notJudged", []),
    }


def planned_hints(
    forecast: FleetForecast, runtimes: dict[PodKey, PodRuntimes]
) -> dict[PodKey, tuple[RuntimeHint, ...]]:
    """The runtime hints of the resizes the plan would send (sizes now -> planned)."""
    return hints_by_pod(
        (((p.namespace, p.name), p.plan) for g in forecast.workloads for p in g.pods if p.outcome == "Resize"),
        runtimes,
    )


async def read_constraints(client: KubeClient, page_size: int, forecast: FleetForecast) -> dict[str, Any]:
    """What the reconciler's preflight judges with: LimitRanges, ResourceQuotas and, where the
    VerticalPodAutoscaler CRD is served, VPAs and the owners between pods and their targets.
    Read only when some pod would be resized; what cannot be read is named, not judged."""
    found: dict[str, Any] = {"limitranges": [], "resourcequotas": [], "vpas": [], "owners": {}, "notJudged": []}
    if not any(g.resized for g in forecast.workloads):
        return found

    async def read(name: str, path: str) -> list[dict[str, Any]]:
        try:
            return await list_all(client, path, page_size)
        except ApiError as err:
            found["notJudged"].append(f"{name}: {err.message or err.status}")
            return []

    found["limitranges"] = await read("LimitRange", "/api/v1/limitranges")
    found["resourcequotas"] = await read("ResourceQuota", "/api/v1/resourcequotas")
    try:
        served = await serves(client, GROUP_VERSION_PATH, RESOURCE)
    except ApiError as err:
        found["notJudged"].append(f"VerticalPodAutoscaler: {err.message or err.status}")
        served = False
    if served:
        found["vpas"] = await read("VerticalPodAutoscaler", f"{GROUP_VERSION_PATH}/{RESOURCE}")
        if vpa_index(found["vpas"]):
            for kind, path in OWNER_PATHS.items():
                for item in await read(kind, path):
                    meta = slim_owned(item)["metadata"]
                    found["owners"][(meta["namespace"], Owner(kind, str(meta["name"])))] = meta["owner"] or NO_OWNER
    return found


def preflight_verdicts(
    forecast: FleetForecast, pods: list[dict[str, Any]], nodes: list[dict[str, Any]], constraints: dict[str, Any]
) -> list[dict[str, str]]:
    """The resizes the reconciler would hold instead of sending, and why (each pod judged
    against the cluster as it is now, as the reconciler would judge it first)."""
    by_key = {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pods}
    by_node: dict[str, list[dict[str, Any]]] = {}
    for bound in pods:
        by_node.setdefault(str(bound["spec"].get("nodeName")), []).append(bound)
    node_objects = {n["metadata"]["name"]: n for n in nodes}
    index = vpa_index(constraints["vpas"])
    owners: dict[tuple[str, Owner], Owner] = constraints["owners"]
    held: list[dict[str, str]] = []
    for group in forecast.workloads:
        for entry in group.pods:
            pod = by_key.get(f"{entry.namespace}/{entry.name}")
            if pod is None or entry.plan is None or not entry.plan.patch:
                continue
            verdict = managing_vpa(pod, lambda ns, owner: owners.get((ns, owner)), index)
            if isinstance(verdict, VpaVerdict):
                held.append(_held_entry(entry, "VPAManaged", "VerticalPodAutoscaler", verdict.vpa, verdict.message()))
                continue
            resized = apply_patch(pod, entry.plan.patch)
            namespace = entry.namespace
            hold = limit_range_hold(
                resized, [o for o in constraints["limitranges"] if o["metadata"].get("namespace") == namespace]
            ) or quota_hold(
                pod, resized, [o for o in constraints["resourcequotas"] if o["metadata"].get("namespace") == namespace]
            )
            node = node_objects.get(entry.node)
            if hold is None and node is not None:
                others = [
                    o
                    for o in by_node.get(entry.node, [])
                    if o["metadata"].get("uid") != pod["metadata"].get("uid")
                    and o["status"].get("phase") not in TERMINAL_PHASES
                ]
                hold = node_hold(node, pod, resized, others)
            if hold is not None:
                held.append(_held_entry(entry, "ResizeHeld", hold.constraint, hold.name, hold.detail))
    return held


def _held_entry(entry: PodForecast, reason: str, constraint: str, name: str, detail: str) -> dict[str, str]:
    return {
        "namespace": entry.namespace,
        "name": entry.name,
        "node": entry.node,
        "reason": reason,
        "constraint": constraint,
        "object": name,
        "detail": detail,
    }


def run_plan(settings: PlanSettings, out: TextIO = sys.stdout) -> int:
    runtimes: dict[PodKey, PodRuntimes] = {}

    async def go(client: KubeClient) -> tuple[FleetForecast, dict[str, Any]]:
        return await gather_forecast(
            client,
            settings,
            skip_applied=not settings.realign,
            runtimes=runtimes,
            progress=Progress("plan", "pods read", enabled=settings.output == "table"),
        )

    result = run_command(settings.api, go, max_connections=4, timeout=120.0)
    if isinstance(result, int):
        return result
    forecast, info = result
    hints = planned_hints(forecast, runtimes)
    if settings.output == "json":
        out.write(json.dumps(forecast_json(forecast, info, hints), indent=2) + "\n")
    else:
        out.write(forecast_table(forecast, info, show_aligned=settings.show_aligned, hints=hints))
    return 0


# ------------------------------------------------------------------ rendering


def _signed(amount: int, fmt: Any) -> str:
    return "0" if amount == 0 else ("+" if amount > 0 else "") + fmt(amount)


def forecast_table(
    forecast: FleetForecast,
    info: dict[str, Any],
    show_aligned: bool = False,
    hints: dict[PodKey, tuple[RuntimeHint, ...]] | None = None,
) -> str:
    rows = [
        ("NAMESPACE", "WORKLOAD", "NODE TYPE", "PODS", "CPU REQUESTS", "MEMORY REQUESTS", "CPU", "MEMORY"),
        *(_row(group) for group in forecast.workloads if show_aligned or group.resized),
    ]
    lines = align(rows) if len(rows) > 1 else ["No pod would be resized."]
    cpu, memory, cpu_delta, memory_delta = _changes(forecast)
    lines += [
        "",
        f"Total: {forecast.resized} of {forecast.pods} pods in scope resized; CPU requests {cpu} ({cpu_delta}), "
        f"memory requests {memory} ({memory_delta}).",
    ]
    if forecast.not_resized:
        lines.append("Not resized (the reconciler reports these with a Warning Event):")
        for pod in forecast.not_resized:
            lines.append(f"  {pod.namespace}/{pod.name} on {pod.node} ({pod.node_type}): {pod.outcome}: {pod.detail}")
    if info.get("held"):
        lines.append("Held by preflight (not sent until the constraint changes; the reconciler reports each once):")
        held_line = "  {namespace}/{name} on {node}: {reason}: {constraint} {object}: {detail}"
        lines += [held_line.format_map(held) for held in info["held"]]
    if info.get("preflightNotJudged"):
        lines.append("Preflight not judged (cannot read): " + "; ".join(info["preflightNotJudged"]))
    sized = [pod for group in forecast.workloads for pod in group.pods if pod.sized_at_admission]
    if sized:
        shown = ", ".join(f"{p.namespace}/{p.name} ({p.sized_at_admission})" for p in sized[:10])
        more = f" and {len(sized) - 10} more" if len(sized) > 10 else ""
        lines.append(f"Sized at admission (created at their size by the webhook): {len(sized)} pods: {shown}{more}.")
    lines += hint_lines(hinted_pods(forecast.workloads, hints or {}))
    if forecast.skipped:
        lines.append("Left alone: " + ", ".join(f"{count} {reason}" for reason, count in forecast.skipped.items()))
    lines.append(
        f"Config: {info['config']}; read {info['pods']} bound pods and {info['nodes']} nodes in "
        f"{info['listSeconds']}s, planned in {info['planSeconds']}s."
    )
    if info.get("keys", "verified") != "verified":
        lines.append(
            f"Warning: {info['keys']}: pods whose spec changed since admission, or whose signed originals "
            f"differ from their spec (sized at admission), show as OriginalsUnverified."
        )
    return "\n".join(lines) + "\n"


def hinted_pods(
    groups: list[WorkloadForecast], hints: dict[PodKey, tuple[RuntimeHint, ...]]
) -> list[tuple[PodForecast, RuntimeHint]]:
    return [(pod, hint) for group in groups for pod in group.pods for hint in hints.get((pod.namespace, pod.name), ())]


def hint_lines(hinted: list[tuple[PodForecast, RuntimeHint]]) -> list[str]:
    """The "Runtime hints:" block: one line per workload, container and hint, with its pods counted."""
    if not hinted:
        return []
    pods = Counter((pod.namespace, pod.workload, hint.container, hint.reason, hint.message) for pod, hint in hinted)
    lines = ["Runtime hints (sized once at start: a resize in place leaves them until the container restarts):"]
    for (namespace, workload, container, reason, message), count in pods.items():
        lines.append(
            f"  {namespace}/{workload} ({count} pod{'' if count == 1 else 's'}), container {container}: {reason}: {message}"
        )
    return lines


def hint_json(hint: RuntimeHint) -> dict[str, str]:
    return {"container": hint.container, "runtime": hint.runtime, "reason": hint.reason, "message": hint.message}


def _row(group: WorkloadForecast) -> tuple[str, ...]:
    pods = f"{group.resized}/{len(group.pods)}" if group.resized != len(group.pods) else str(len(group.pods))
    return (group.namespace, group.workload, group.node_type, pods, *_changes(group))


def _changes(of: WorkloadForecast | FleetForecast) -> tuple[str, str, str, str]:
    """CPU and memory requests now -> desired, then the signed CPU and memory changes."""
    cpu_now, cpu_then = of.total("current_cpu"), of.total("desired_cpu")
    memory_now, memory_then = of.total("current_memory"), of.total("desired_memory")
    return (
        f"{format_cpu(cpu_now)} -> {format_cpu(cpu_then)}",
        f"{format_memory(memory_now)} -> {format_memory(memory_then)}",
        _signed(cpu_then - cpu_now, format_cpu),
        _signed(memory_then - memory_now, format_memory),
    )


def align(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]


def _change(unit: str, fmt: Callable[[int], str], current: int, desired: int) -> dict[str, Any]:
    return {
        f"current{unit}": current,
        f"desired{unit}": desired,
        f"delta{unit}": desired - current,
        "current": fmt(current),
        "desired": fmt(desired),
    }


def forecast_json(
    forecast: FleetForecast, info: dict[str, Any], hints: dict[PodKey, tuple[RuntimeHint, ...]] | None = None
) -> dict[str, Any]:
    """Amounts in millicores and bytes (integers), plus the canonical quantity strings; per pod, the
    runtime hints of its resize (``runtimeHints``)."""

    def amounts(current_cpu: int, desired_cpu: int, current_memory: int, desired_memory: int) -> dict[str, Any]:
        return {
            "cpu": _change("Millicores", format_cpu, current_cpu, desired_cpu),
            "memory": _change("Bytes", format_memory, current_memory, desired_memory),
        }

    def totals(of: WorkloadForecast | FleetForecast) -> dict[str, Any]:
        return amounts(*(of.total(a) for a in ("current_cpu", "desired_cpu", "current_memory", "desired_memory")))

    def pod_entry(pod: PodForecast) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "namespace": pod.namespace,
            "name": pod.name,
            "node": pod.node,
            "nodeType": pod.node_type,
            "outcome": pod.outcome,
            "detail": pod.detail,
            "requests": amounts(pod.current_cpu, pod.desired_cpu, pod.current_memory, pod.desired_memory),
        }
        if pod.plan is not None:
            entry["patch"] = pod.plan.patch
        if pod.sized_at_admission:
            entry["sizedAtAdmission"] = pod.sized_at_admission
        entry["runtimeHints"] = [hint_json(h) for h in (hints or {}).get((pod.namespace, pod.name), ())]
        return entry

    return {
        "apiVersion": "workload-resizer.io/v1alpha1",
        "kind": "Plan",
        **info,
        "workloads": [
            {
                "namespace": g.namespace,
                "workload": g.workload,
                "nodeType": g.node_type,
                "pods": len(g.pods),
                "resized": g.resized,
                "requests": totals(g),
                "podPlans": [pod_entry(p) for p in g.pods],
            }
            for g in forecast.workloads
        ],
        "notResized": [pod_entry(p) for p in forecast.not_resized],
        "leftAlone": forecast.skipped,
        "total": {"pods": forecast.pods, "resized": forecast.resized, "requests": totals(forecast)},
    }
