"""`plan` on a mixed cluster predicts exactly what the reconciler then does.

Node types n2d (baseline), n4, c3, slow and one unknown to the config; Guaranteed,
Burstable, requests-only, below-the-floor and multi-container pods, one opted out with
the skip annotation. `plan -o json` (read-only: nothing changes) names the pods it would
resize and their sizes; the reconciler then resizes exactly those pods (metadata.generation
+1), to exactly those sizes, leaves every other pod unresized, and the plan's totals are
the sums of the pods' requests before and after.
"""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from typing import Any

from devkit.kube import container
from devkit.processes import REPO, originals_key_dir
from resizer import SKIP, parse_quantity
from tests.cluster.test_reconciler import (
    Harness,
    applied,
    burstable,
    guaranteed,
)

# A Go runtime told its GOMAXPROCS and a variable the kubelet fills from the CPU limit at start.
SIZED_AT_START = {
    **guaranteed(),
    "env": [
        {"name": "GOMAXPROCS", "value": "1"},
        {"name": "CPU_MILLIS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}},
    ],
}

WORKLOADS = {
    # deployment: (node type, containers, replicas, pod annotations)
    "web": ("n4", [SIZED_AT_START], 2, None),
    "api": ("c3", [burstable()], 1, None),
    "batch": ("slow", [container("app", {"cpu": "300m", "memory": "200Mi"})], 1, None),
    "tiny": ("n4", [container("app", {"cpu": "10m", "memory": "32Mi"})], 1, None),
    "mixed": (
        "n4",
        [guaranteed("app", "2", "1Gi"), container("side", {"cpu": "250m", "memory": "64Mi"}, {"cpu": "500m"})],
        1,
        None,
    ),
    "base": ("n2d", [guaranteed()], 1, None),
    "odd": ("zz9", [guaranteed()], 1, None),
    "optout": ("n4", [guaranteed()], 1, {SKIP: "true"}),
}


def run_plan(h: Harness, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "commands",
            "plan",
            f"--kubeconfig={h.cluster.kubeconfig}",
            f"--config-namespace={h.ns}",
            f"--node-type-label={h.label}",
            f"--originals-key-dir={originals_key_dir()}",
            *extra,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def millicores(text: str) -> int:
    return int(parse_quantity(text) * 1000)


def requests_total(pods: list[dict[str, Any]]) -> tuple[int, int]:
    cpu = memory = Fraction(0)
    for pod in pods:
        for c in pod["spec"]["containers"]:
            requests = (c.get("resources") or {}).get("requests") or {}
            cpu += parse_quantity(requests.get("cpu", "0"))
            memory += parse_quantity(requests.get("memory", "0"))
    return int(cpu * 1000), int(memory)


def spec_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {
        c["name"]: {
            kind: {r: parse_quantity(v) for r, v in (c["resources"].get(kind) or {}).items()}
            for kind in ("requests", "limits")
        }
        for c in pod["spec"]["containers"]
    }


def patched(spec: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = json.loads(
        json.dumps({n: {k: {r: str(v) for r, v in kv.items()} for k, kv in c.items()} for n, c in spec.items()})
    )
    for entry in (patch.get("spec") or {}).get("containers") or []:
        for kind, values in entry["resources"].items():
            out[entry["name"]][kind].update(values)
    return {n: {k: {r: parse_quantity(v) for r, v in kv.items()} for k, kv in c.items()} for n, c in out.items()}


def test_plan_predicts_exactly_what_the_reconciler_does(h: Harness) -> None:
    nodes = {family: h.node(family, family) for family in {w[0] for w in WORKLOADS.values()}}
    for name, (family, containers, replicas, pod_annotations) in WORKLOADS.items():
        h.deploy(name, nodes[family], containers, replicas=replicas, annotations=pod_annotations)
    before = {p["metadata"]["name"]: p for app, w in WORKLOADS.items() for p in h.wait_running(app, w[2])}
    versions = {name: p["metadata"]["resourceVersion"] for name, p in before.items()}

    table = run_plan(h)
    assert table.returncode == 0, table.stderr
    proc = run_plan(h, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    ours = [w for w in plan["workloads"] if w["namespace"] == h.ns]
    pod_plans = {p["name"]: p for w in ours for p in w["podPlans"]}
    not_resized = {p["name"]: p for p in plan["notResized"] if p["namespace"] == h.ns}
    # Read-only: the plan changed nothing.
    assert {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in h.kube.pods(h.ns)} == versions

    by_app = {name: p["metadata"]["labels"]["app"] for name, p in before.items()}
    predicted_resized = {name for name, p in pod_plans.items() if p["outcome"] == "Resize"}
    assert {by_app[n] for n in predicted_resized} == {"web", "api", "batch", "mixed"}
    assert {by_app[n] for n, p in pod_plans.items() if p["outcome"] == "AlreadyAligned"} == {"tiny", "base"}
    assert {by_app[n]: p["outcome"] for n, p in not_resized.items()} == {"odd": "UnknownNodeType"}
    assert not any(by_app.get(n) == "optout" for n in [*pod_plans, *not_resized])
    assert "Deployment/web" in table.stdout and "Total:" in table.stdout
    # Runtime hints: the web pods' resize changes the CPU limit their runtime read at start.
    hinted = {n: [hint["reason"] for hint in p["runtimeHints"]] for n, p in pod_plans.items() if p["runtimeHints"]}
    assert {by_app[n] for n in hinted} == {"web"}
    assert all(reasons == ["CpuCountFromDownwardApi", "GoMaxProcsAtStart"] for reasons in hinted.values()), hinted
    assert f"  {h.ns}/Deployment/web (2 pods), container app: GoMaxProcsAtStart: GOMAXPROCS=1" in table.stdout

    h.reconciler()
    for app, (family, _, replicas, pod_annotations) in WORKLOADS.items():
        if app == "odd":
            h.wait_event(h.pods(app)[0]["metadata"]["name"], "UnknownNodeType")
        elif not pod_annotations:
            h.wait_applied(app, family, count=replicas)
    after = {p["metadata"]["name"]: p for p in h.kube.pods(h.ns)}

    actually_resized = {
        n for n, p in after.items() if p["metadata"]["generation"] == before[n]["metadata"]["generation"] + 1
    }
    unchanged = {n for n, p in after.items() if p["metadata"]["generation"] == before[n]["metadata"]["generation"]}
    assert actually_resized == predicted_resized
    assert actually_resized | unchanged == set(after)
    for name, pod in after.items():
        expected = (
            patched(spec_of(before[name]), pod_plans[name]["patch"])
            if name in predicted_resized
            else spec_of(before[name])
        )
        assert spec_of(pod) == expected, name

    # Totals: the sums of the in-scope pods' requests before and after.
    planned_pods = [after[n] for n in pod_plans]
    cpu_now, memory_now = requests_total([before[n] for n in pod_plans])
    cpu_then, memory_then = requests_total(planned_pods)
    totals = {"cpu": (cpu_now, cpu_then), "memory": (memory_now, memory_then)}
    ours_total = {"cpu": [0, 0], "memory": [0, 0]}
    for w in ours:
        ours_total["cpu"][0] += w["requests"]["cpu"]["currentMillicores"]
        ours_total["cpu"][1] += w["requests"]["cpu"]["desiredMillicores"]
        ours_total["memory"][0] += w["requests"]["memory"]["currentBytes"]
        ours_total["memory"][1] += w["requests"]["memory"]["desiredBytes"]
    assert {k: tuple(v) for k, v in ours_total.items()} == totals
    for resource, unit in (("cpu", "Millicores"), ("memory", "Bytes")):
        for side in ("current", "desired"):
            assert plan["total"]["requests"][resource][side + unit] == sum(
                w["requests"][resource][side + unit] for w in plan["workloads"]
            )
    web = next(w for w in ours if w["workload"] == "Deployment/web")
    assert (web["nodeType"], web["pods"], web["requests"]["cpu"]["deltaMillicores"]) == ("n4", 2, -400)
    assert applied(after[next(iter(predicted_resized))]) is not None
