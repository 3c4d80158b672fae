"""A HorizontalPodAutoscaler keeps its meaning on every machine family (docs/how-it-works.md,
"Horizontal autoscaling"): a pod on a node k× faster does the same work with 1/k of the CPU time
and gets 1/k of the request, so utilization = usage / request, and the replica count an HPA
derives from it, are what they are on the baseline family.

Two real nodes as in test_calibrate.py: "base" (n2d, the baseline) and "slow", whose node cgroup
gets a CFS quota of half a core. `calibrate --apply` measures the slow node's cpuPerf (~0.5) into
the config; the reconciler sizes the pods from it. metrics-server (`hack/cluster
add-metrics-server`) feeds the controller manager's HPA controller. Each family runs the same
work: a Deployment with an HPA (autoscaling/v2, 50% CPU utilization of REQUEST millicores) and a
fixed total load spread over its live pods (the workload image's -load-millicores, paced by the
process's own CPU clock, not by wall time: what the machine's other load takes away is made up).

The quota gives the slow node less CPU, not slower CPU: a CPU-second there does the work it does
on base, and metrics-server counts CPU-seconds. So the workload does itself what a slower core
does to the same work: on the slow node it burns WORK / IMPOSED_RATIO. That is the premise of the
rule; the product's part is the request, which it must grow by the factor calibrate measured. A
third Deployment on the slow node, which the product skips, shows the HPA without it: it rests at
the same utilization (finding that is its job), but with twice the replicas. So the test asserts
the replica counts: the sized slow family's equals the baseline's, the skipped one's is
twice that; and the utilizations: the baseline's what the work gives, the sized slow family's
the same (times the measured over the imposed ratio), the skipped one's the same at twice the pods.
"""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from resizer.podstate import SKIP
from tests.cluster.test_calibrate import IMPOSED_RATIO, base_and_slow_nodes, calibrate, labelled_harness
from tests.cluster.test_real_node import real_deployment
from tests.cluster.test_reconciler import Harness, q, resources, status_resources
from tests.conftest import HACK_CLUSTER, RealNode, cluster_state_dir

REQUEST = 60  # each pod's CPU request as written, millicores
TARGET = 50  # the HPAs' averageUtilization target, percent
# The workload's total load on the baseline, millicores. The HPA starts from 1 pod at 85%
# (desired: ceil(1 x 85/50) = 2) and rests at 2 pods at 42.5% (ceil(2 x 42.5/50) = 2); without the
# product the slow family starts at 170% (ceil(3.4) = 4) and rests at 4 pods at 42.5%. Every step
# is 11% or more away from the next integer: noise and calibrate's error do not change a count.
WORK = 51
MAX_REPLICAS = 6
# The HPA at rest this long (two of its 15 s syncs) counts as settled.
SETTLED_FOR = 35.0
SETTLE_TIMEOUT = 240.0


@pytest.fixture(scope="module")
def nodes(cluster: Any) -> Iterator[tuple[RealNode, RealNode]]:
    yield from base_and_slow_nodes(cluster)


def metrics_server_running() -> bool:
    state = json.loads((cluster_state_dir() / "state.json").read_text())
    return "metrics-server" in state.get("processes", {})


@pytest.fixture(scope="module")
def metrics_server(cluster: Any) -> Iterator[None]:
    """`hack/cluster add-metrics-server`, removed again unless it ran before."""
    ran_before = metrics_server_running()
    proc = subprocess.run([str(HACK_CLUSTER), "add-metrics-server"], capture_output=True, text=True, env=cluster.env())
    if proc.returncode != 0:
        pytest.fail(f"hack/cluster add-metrics-server failed (exit {proc.returncode}):\n{proc.stderr}")
    try:
        yield
    finally:
        if not ran_before:
            subprocess.run([str(HACK_CLUSTER), "remove-metrics-server"], check=False, env=cluster.env())


@pytest.fixture
def h(cluster: Any, namespace: str, nodes: tuple[RealNode, RealNode]) -> Iterator[Harness]:
    yield from labelled_harness(cluster, namespace, nodes)


def burner(name: str, node: RealNode, load_millicores: int, load_dir: Path, skip: bool = False) -> dict[str, Any]:
    """A Deployment of one pod on `node` whose pods together burn load_millicores (REQUEST each)."""
    container = {
        "name": "app",
        "resources": {"requests": {"cpu": f"{REQUEST}m", "memory": "32Mi"}},
        "args": [f"-load-millicores={load_millicores}", "-load-dir=/load", "-load-member=$(POD_NAME)"],
        "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
        "volumeMounts": [{"name": "load", "mountPath": "/load"}],
    }
    manifest = real_deployment(name, node, [container])
    template = manifest["spec"]["template"]
    template["spec"]["volumes"] = [{"name": "load", "hostPath": {"path": str(load_dir), "type": "Directory"}}]
    if skip:
        template["metadata"]["annotations"][SKIP] = "true"
    return manifest


def autoscaler(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": MAX_REPLICAS,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": TARGET}},
                }
            ],
            # A pod added moves part of the load at once, but metrics-server's window of the others
            # still holds some of the time before: one sync's recommendation in either direction is
            # a transient, not the load. (Upstream's defaults: 0 s up, 300 s down.)
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 30},
                "scaleDown": {"stabilizationWindowSeconds": 30},
            },
        },
    }


def hpa_figures(h: Harness, name: str) -> dict[str, Any]:
    """What `kubectl get hpa` shows of one HPA, and whether it is at rest: it has scaled on the
    load, wants the replicas it has, and every pod of its Deployment is ready and measured."""
    hpa = h.kube.get(f"/apis/autoscaling/v2/namespaces/{h.ns}/horizontalpodautoscalers/{name}")
    status = hpa.get("status") or {}
    current = next(iter(status.get("currentMetrics") or []), {}).get("resource", {}).get("current", {})
    utilization = current.get("averageUtilization")
    replicas = status.get("currentReplicas", 0)
    deployment = h.kube.get(f"/apis/apps/v1/namespaces/{h.ns}/deployments/{name}").get("status") or {}
    at_rest = (
        utilization is not None
        and status.get("desiredReplicas") == replicas == deployment.get("readyReplicas") == len(h.pods(name))
        and status.get("lastScaleTime") is not None
    )
    return {"name": name, "utilization": utilization, "replicas": replicas, "at_rest": at_rest}


def settle(h: Harness, names: list[str]) -> dict[str, dict[str, Any]]:
    """Until every HPA has been at rest, at the same replica count, for SETTLED_FOR seconds;
    their figures then. Prints each change, `kubectl get hpa` style."""
    started = time.monotonic()
    since: float | None = None
    last: dict[str, dict[str, Any]] = {}
    while time.monotonic() - started < SETTLE_TIMEOUT:
        now = {name: hpa_figures(h, name) for name in names}
        shown = {n: (f["utilization"], f["replicas"]) for n, f in now.items()}
        if shown != {n: (f["utilization"], f["replicas"]) for n, f in last.items()}:
            print(f"{time.monotonic() - started:5.0f}s  " + "  ".join(row(f) for f in now.values()))
        steady = all(f["at_rest"] for f in now.values()) and all(
            n in last and now[n]["replicas"] == last[n]["replicas"] for n in names
        )
        since = (since or time.monotonic()) if steady else None
        last = now
        if since is not None and time.monotonic() - since >= SETTLED_FOR:
            return now
        time.sleep(2)
    pytest.fail(f"the HPAs did not settle in {SETTLE_TIMEOUT:.0f}s: {last}\n{hpa_conditions(h, names)}")


def row(figures: dict[str, Any]) -> str:
    utilization = "<unknown>" if figures["utilization"] is None else f"{figures['utilization']}%"
    return f"{figures['name']}: cpu {utilization}/{TARGET}% replicas {figures['replicas']}"


def hpa_conditions(h: Harness, names: list[str]) -> str:
    out = []
    for name in names:
        hpa = h.kube.get(f"/apis/autoscaling/v2/namespaces/{h.ns}/horizontalpodautoscalers/{name}")
        for c in (hpa.get("status") or {}).get("conditions") or []:
            out.append(f"{name}: {c['type']}={c['status']} {c.get('reason')}: {c.get('message')}")
    return "\n".join(out)


def pod_usage(h: Harness, name: str) -> dict[str, Fraction]:
    """{pod: CPU usage} from the metrics API, as `kubectl top pods` shows it."""
    items = h.kube.get(f"/apis/metrics.k8s.io/v1beta1/namespaces/{h.ns}/pods", labelSelector=f"app={name}")["items"]
    return {p["metadata"]["name"]: sum((q(c["usage"]["cpu"]) for c in p["containers"]), Fraction(0)) for p in items}


def test_the_hpa_keeps_its_meaning_on_a_slower_family(
    h: Harness, nodes: tuple[RealNode, RealNode], metrics_server: None
) -> None:
    base, slow = nodes
    started = time.monotonic()
    proc = calibrate(h, "--repeats=5", "--apply", "-o", "json")  # test_calibrate.py's settings
    assert proc.returncode == 0, proc.stderr + proc.stdout
    measured = Fraction(json.loads(proc.stdout)["changes"]["slow"])
    print(f"calibrate: slow cpuPerf {float(measured):.3f} (imposed {IMPOSED_RATIO}), {time.monotonic() - started:.0f}s")
    # The workload's CPU cost on the slow node assumes the imposed ratio; the product sizes by the
    # measured one. They must agree for the rule to apply (test_calibrate.py holds them to 10%).
    assert abs(float(measured) - IMPOSED_RATIO) <= 0.1 * IMPOSED_RATIO, measured
    h.reconciler()

    slow_load = round(WORK / IMPOSED_RATIO)
    workloads = {"base": (base, WORK, False), "slow": (slow, slow_load, False), "slow-skipped": (slow, slow_load, True)}
    for name, (node, load, skip) in workloads.items():
        load_dir = Path(tempfile.mkdtemp(prefix=f"hpa-{name}-"))
        h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", burner(name, node, load, load_dir, skip))
        h.kube.create(f"/apis/autoscaling/v2/namespaces/{h.ns}/horizontalpodautoscalers", autoscaler(name))

    figures = settle(h, list(workloads))
    print(f"settled {time.monotonic() - started:.0f}s after calibrate started")

    sized = {name: {p["metadata"]["name"]: p for p in h.pods(name)} for name in workloads}
    usage = {name: pod_usage(h, name) for name in workloads}
    print("NAME           TARGETS        REPLICAS  REQUEST/POD  USAGE/POD (kubectl top)")
    for name in workloads:
        requests = sorted({int(resources(p)["requests"]["cpu"] * 1000) for p in sized[name].values()})
        use = " ".join(f"{int(u * 1000)}m" for u in usage[name].values())
        f = figures[name]
        print(f"{name:14} cpu: {f['utilization']}%/{TARGET}%  {f['replicas']:8}  {requests}m  {use}")

    # The product: the slow family's pods ask for REQUEST / measured cpuPerf, actuated by the kubelet;
    # the baseline's and the skipped ones keep REQUEST.
    request = Fraction(REQUEST, 1000)
    want = {"base": request, "slow": request / measured, "slow-skipped": request}
    for name, pods in sized.items():
        for pod in pods.values():
            cpu = resources(pod)["requests"]["cpu"]
            assert cpu == status_resources(pod)["requests"]["cpu"], (name, pod["status"])
            assert abs(cpu - want[name]) <= Fraction(1, 1000), (name, cpu, want[name])
    # The HPA: the same replica count on both families, the one the work calls for at the target;
    # without the product, twice as many. The utilizations: what the work gives on that many pods
    # (the slow family's by the measured ratio, not exactly the imposed one), within 5 points.
    replicas = {name: f["replicas"] for name, f in figures.items()}
    assert replicas["slow"] == replicas["base"] == math.ceil(WORK * 100 / (TARGET * REQUEST)) == 2, replicas
    assert replicas["slow-skipped"] == 2 * replicas["base"], replicas
    base_utilization = Fraction(WORK * 100, replicas["base"] * REQUEST)
    expected = {
        "base": base_utilization,
        "slow": base_utilization * measured / Fraction(IMPOSED_RATIO),
        "slow-skipped": base_utilization,
    }
    for name, f in figures.items():
        assert abs(f["utilization"] - expected[name]) <= 5, (name, f, float(expected[name]))
