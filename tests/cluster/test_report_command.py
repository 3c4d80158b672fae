"""`workload-resizer report` on a mixed cluster: what the reconciler freed, checked against the pods.

Node types n2d (the baseline), n4 and c3 (faster: requests go down), slow (requests go up)
and one unknown to the config, on KWOK nodes; the reconciler resizes what it may. Then the
report's totals, per node type and in all, must be the sums over the managed pods of
original (their original-* request annotations) - current (their spec), the pod on the
unknown type must be held back with its reason, and the HTML page, rendered by headless
Chromium, must show that text and a chart (a screenshot that is not blank and has the
bars' colours in it).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from commands.report import NOW_COLOUR
from devkit.browser import dump_dom, screenshot
from devkit.kube import container
from devkit.png import read_png
from devkit.processes import REPO, originals_key_dir
from resizer import original_key, parse_quantity
from tests.cluster.test_reconciler import Harness, burstable, guaranteed

WORKLOADS = {
    # deployment: (node type, containers, replicas)
    "web": ("n4", [guaranteed()], 2),
    "api": ("c3", [burstable()], 1),
    "batch": ("slow", [container("app", {"cpu": "300m", "memory": "200Mi"})], 1),
    "mixed": (
        "n4",
        [guaranteed("app", "2", "1Gi"), container("side", {"cpu": "250m", "memory": "64Mi"}, {"cpu": "500m"})],
        1,
    ),
    "base": ("n2d", [guaranteed()], 1),
    "odd": ("zz9", [guaranteed()], 1),
}


def run_report(h: Harness, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "commands",
            "report",
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


def original_and_current(pod: dict[str, Any]) -> dict[str, tuple[int, int]]:
    """Per resource: the pod's requests as authored (its original-* annotations) and now, in m / bytes."""
    annotations = pod["metadata"].get("annotations") or {}
    out = {}
    for resource, scale in (("cpu", 1000), ("memory", 1)):
        original = current = 0
        for c in pod["spec"]["containers"]:
            now = ((c.get("resources") or {}).get("requests") or {}).get(resource)
            if now is None:
                continue
            current += int(parse_quantity(now) * scale)
            original += int(parse_quantity(annotations[original_key(c["name"], resource, "request")]) * scale)
        out[resource] = (original, current)
    return out


def test_report_totals_are_the_sums_over_pods_of_original_minus_current(h: Harness, tmp_path: Path) -> None:
    nodes = {family: h.node(family, family) for family in {w[0] for w in WORKLOADS.values()}}
    for name, (family, containers, replicas) in WORKLOADS.items():
        h.deploy(name, nodes[family], containers, replicas=replicas)
    h.reconciler()
    for app, (family, _, replicas) in WORKLOADS.items():
        if app == "odd":
            h.wait_event(h.pods(app)[0]["metadata"]["name"], "UnknownNodeType")
        else:
            h.wait_applied(app, family, count=replicas)
            h.wait_status_follows(app, replicas)
    pods = {p["metadata"]["name"]: p for p in h.kube.pods(h.ns)}

    proc = run_report(h, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    # Expected, from the pods themselves: per node type, sum of original and of current requests.
    expected: dict[str, dict[str, list[int]]] = defaultdict(lambda: {"cpu": [0, 0], "memory": [0, 0]})
    managed = [p for p in pods.values() if p["metadata"]["labels"]["app"] != "odd"]
    for pod in managed:
        family = WORKLOADS[pod["metadata"]["labels"]["app"]][0]
        for resource, (original, current) in original_and_current(pod).items():
            expected[family][resource][0] += original
            expected[family][resource][1] += current
    got = {
        n["nodeType"]: {
            "cpu": [n["cpu"]["originalMillicores"], n["cpu"]["currentMillicores"]],
            "memory": [n["memory"]["originalBytes"], n["memory"]["currentBytes"]],
        }
        for n in report["nodeTypes"]
    }
    assert got == dict(expected)
    for n in report["nodeTypes"]:
        assert n["cpu"]["freedMillicores"] == n["cpu"]["originalMillicores"] - n["cpu"]["currentMillicores"]
        assert n["pods"] == sum(1 for p in managed if WORKLOADS[p["metadata"]["labels"]["app"]][0] == n["nodeType"])
    freed_cpu = sum(o - c for p in managed for o, c in [original_and_current(p)["cpu"]])
    freed_memory = sum(o - c for p in managed for o, c in [original_and_current(p)["memory"]])
    assert (report["total"]["cpu"]["freedMillicores"], report["total"]["memory"]["freedBytes"]) == (
        freed_cpu,
        freed_memory,
    )
    assert sum(w["cpu"]["freedMillicores"] for w in report["workloads"]) == freed_cpu
    # Something was freed (n4, c3) and something added (slow: cpuPerf 0.5).
    by_type = {n["nodeType"]: n["cpu"]["freedMillicores"] for n in report["nodeTypes"]}
    assert by_type["n4"] > 0 and by_type["c3"] > 0 and by_type["slow"] < 0 and by_type["n2d"] == 0
    (odd,) = [held for held in report["heldBack"] if held["namespace"] == h.ns]
    assert odd["reason"] == "UnknownNodeType" and odd["nodeType"] == "zz9"

    table = run_report(h)
    assert table.returncode == 0, table.stderr
    assert "Deployment/web" in table.stdout and "UnknownNodeType" in table.stdout and "Total:" in table.stdout

    html = run_report(h, "-o", "html")
    assert html.returncode == 0, html.stderr
    page = tmp_path / "report.html"
    page.write_text(html.stdout)
    dom = dump_dom(page)
    for text in (
        "What workload-resizer freed",
        "Per node type",
        "Deployment/web",
        "UnknownNodeType",
        f"{by_type['n4']}m freed" if by_type["n4"] % 1000 else "freed",
        "added",
    ):
        assert text in dom, text
    assert dom.count("<svg") == len(report["nodeTypes"])
    image = read_png(screenshot(page, tmp_path / "report.png"))
    assert image.luminance_variance() > 100, "the screenshot is blank"
    bar = tuple(int(NOW_COLOUR[i : i + 2], 16) for i in (1, 3, 5))
    assert any(image.pixel(x, y)[:3] == bar for y in range(0, image.height, 2) for x in range(0, image.width, 2)), (
        "no bar of the chart in the screenshot"
    )
