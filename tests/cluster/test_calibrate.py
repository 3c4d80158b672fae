"""`workload-resizer calibrate` on two REAL nodes, one made slower by a CPU quota on its own cgroup.

Two real kubelets join the session's cluster (`hack/cluster add-node --real`): "base" (the
baseline type n2d) and "slow", whose node cgroup gets a CFS quota of half a core
(`--cpu-quota 50000/100000`), so every pod on it together gets half a core. The machine is
shared with other test runs; `--cpu-shares` gives both nodes' pods the highest priority over
that load (cgroup v1 shares 262144), as near as this machine gets to each node being a machine
of its own. The config claims slow is as fast
as n2d (cpuPerf 1.0): calibrate must measure ~0.5, suggest it, and with --apply write it; the
running reconciler then re-aligns a pod on the slow node, which the container's cgroup shows.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from commands.calibrate import APP, APP_LABEL
from devkit.kube import wait_for
from resizer.config import load_config
from tests.cluster.test_real_node import PERIOD_US, START_TIMEOUT, app_status, cgroup_limits, container_id, deploy
from tests.cluster.test_reconciler import CONFIG_NAME, Harness, resources, status_resources
from tests.conftest import HACK_CLUSTER, RealNode, read_real_node

IMPOSED_RATIO = 0.5
TAINT = "workload-resizer.io/real-node"
CONFIG = """\
# calibrate changes only the cpuPerf it measured; this comment stays
baselineNodeType: n2d
nodeTypes:
  n2d:  { cpuPerf: 1.0, memPerf: 1.0 }
  slow: { cpuPerf: 1.0, memPerf: 1.0 }    # a marketing table's number
bounds:
  cpu:    { min: "50m",  max: "16" }
  memory: { min: "64Mi", max: "32Gi" }
"""


def add_real_node(cluster: Any, name: str, *flags: str) -> RealNode:
    proc = subprocess.run(
        [str(HACK_CLUSTER), "add-node", name, "--real", *flags],
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        text=True,
        env=cluster.env(),
    )
    if proc.returncode != 0:
        pytest.fail(f"hack/cluster add-node {name} --real {' '.join(flags)} failed (exit {proc.returncode})")
    return read_real_node(name)


def not_ready_lifted(cluster: Any, name: str) -> bool:
    taints = cluster.kube.get(f"/api/v1/nodes/{name}")["spec"].get("taints") or []
    return not any(t["key"] == "node.kubernetes.io/not-ready" for t in taints)


def base_and_slow_nodes(cluster: Any) -> Iterator[tuple[RealNode, RealNode]]:
    """(base, slow): two real nodes; slow's own cgroup has half a core. Both have the machine's
    highest cpu.shares, as near as it gets to each being a machine of its own."""
    suffix = uuid.uuid4().hex[:5]
    added = []
    try:
        added.append(add_real_node(cluster, f"base-{suffix}", "--cpu-shares", "262144"))
        added.append(add_real_node(cluster, f"slow-{suffix}", "--cpu-shares", "262144", "--cpu-quota", "50000/100000"))
        for node in added:  # Ready, and the node lifecycle controller has lifted its not-ready taint
            wait_for(f"node {node.name} untainted", lambda node=node: not_ready_lifted(cluster, node.name), timeout=120)
        yield added[0], added[1]
    finally:
        for node in added:
            subprocess.run([str(HACK_CLUSTER), "remove-node", node.name], check=False, env=cluster.env())


def labelled_harness(cluster: Any, namespace: str, nodes: tuple[RealNode, RealNode]) -> Iterator[Harness]:
    """A harness with CONFIG whose label makes the nodes n2d (base) and slow, unlabelled after."""
    harness = Harness(cluster, namespace)
    harness.config(CONFIG)
    harness.relabel(nodes[0].name, "n2d")
    harness.relabel(nodes[1].name, "slow")
    try:
        yield harness
    finally:
        harness.close()
        for node in nodes:
            cluster.kube.patch(f"/api/v1/nodes/{node.name}", {"metadata": {"labels": {harness.label: None}}})


@pytest.fixture(scope="module")
def nodes(cluster: Any) -> Iterator[tuple[RealNode, RealNode]]:
    yield from base_and_slow_nodes(cluster)


@pytest.fixture
def h(cluster: Any, namespace: str, nodes: tuple[RealNode, RealNode]) -> Iterator[Harness]:
    yield from labelled_harness(cluster, namespace, nodes)


def calibrate(h: Harness, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "commands",
            "calibrate",
            f"--kubeconfig={h.cluster.kubeconfig}",
            f"--config-namespace={h.ns}",
            f"--node-type-label={h.label}",
            f"--namespace={h.ns}",
            f"--toleration={TAINT}",
            "--host-network",
            *flags,
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )


def config_text(h: Harness) -> str:
    return str(h.kube.get(f"/api/v1/namespaces/{h.ns}/configmaps/{CONFIG_NAME}")["data"]["config.yaml"])


def benchmark_pods(h: Harness) -> list[str]:
    pods = h.kube.get(f"/api/v1/namespaces/{h.ns}/pods", labelSelector=f"{APP_LABEL}={APP}")["items"]
    return [p["metadata"]["name"] for p in pods]


def cpu_cgroup(node: RealNode, pod: dict[str, Any]) -> dict[str, int | None]:
    limits = cgroup_limits(node, container_id(pod))
    return {k: v for k, v in limits.items() if k.startswith("cpu")}


def test_calibrate_measures_the_imposed_ratio_and_apply_realigns_the_slow_node(
    h: Harness, nodes: tuple[RealNode, RealNode]
) -> None:
    base, slow = nodes
    pod = deploy(h, "on-slow", slow, cpu="250m", memory="64Mi")
    h.reconciler()
    h.wait_applied("on-slow", "slow", timeout=START_TIMEOUT)  # aligned: slow claims cpuPerf 1.0
    before = cpu_cgroup(slow, pod)
    assert before["cpu_shares" if "cpu_shares" in before else "cpu_weight"] in (256, 10)

    proc = calibrate(h, "--repeats=5", "-o", "json", "--apply")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    result = json.loads(proc.stdout)
    by_type = {t["nodeType"]: t for t in result["nodeTypes"]}
    assert set(by_type) == {"n2d", "slow"} and result["failed"] == []
    assert (by_type["n2d"]["node"], by_type["slow"]["node"]) == (base.name, slow.name)
    assert len(by_type["slow"]["scores"]) == len(by_type["n2d"]["scores"]) == 5
    ratio = by_type["slow"]["ratio"]
    measured = Fraction(by_type["slow"]["measuredCpuPerf"])
    print(
        f"calibrate: ratio {ratio}, measured cpuPerf {measured}, n2d {by_type['n2d']}, slow {by_type['slow']}, "
        f"{result['seconds']}s"
    )
    assert abs(ratio["value"] - IMPOSED_RATIO) <= 0.1 * IMPOSED_RATIO, ratio
    assert abs(float(measured) - IMPOSED_RATIO) <= 0.1 * IMPOSED_RATIO
    assert ratio["low"] <= ratio["value"] <= ratio["high"]
    assert result["changes"] == {"slow": by_type["slow"]["measuredCpuPerf"]} and result["applied"] is True

    # The ConfigMap: exactly that value changed, the rest of the text as the admin wrote it.
    text = config_text(h)
    assert text == CONFIG.replace("slow: { cpuPerf: 1.0,", f"slow: {{ cpuPerf: {by_type['slow']['measuredCpuPerf']},")
    assert load_config(text).node_types["slow"].cpuPerf == measured
    assert benchmark_pods(h) == []

    # The reconciler re-aligns the running pod on the slow node: original 250m x 1.0 / measured.
    want = Fraction(250, 1000) / measured

    def realigned() -> dict[str, Any] | None:
        now = h.pod(pod["metadata"]["name"])
        cpu = status_resources(now)["requests"].get("cpu")
        return now if cpu is not None and abs(cpu - want) <= Fraction(1, 1000) else None

    after_pod = wait_for(f"pod on the slow node resized to ~{float(want):.3f} CPU", realigned, timeout=START_TIMEOUT)
    assert app_status(after_pod)["restartCount"] == 0 and container_id(after_pod) == container_id(pod)
    spec = resources(after_pod)
    assert spec["limits"]["cpu"] == spec["requests"]["cpu"], spec  # still Guaranteed
    millis = int(status_resources(after_pod)["requests"]["cpu"] * 1000)
    after = cpu_cgroup(slow, after_pod)
    shares = millis * 1024 // 1000  # the kubelet's MilliCPUToShares, from the request
    if "cpu_shares" in after:  # cgroup v1: the quota'd node's kubelet sets no CFS quota (hack/cluster)
        assert after == {"cpu_quota_us": None, "cpu_period_us": PERIOD_US, "cpu_shares": shares}
    else:
        assert after == {
            "cpu_quota_us": int(spec["limits"]["cpu"] * PERIOD_US),
            "cpu_period_us": PERIOD_US,
            "cpu_weight": 1 + ((shares - 2) * 9999) // 262142,
        }
    assert after != before


def test_a_value_inside_the_interval_is_kept(h: Harness, nodes: tuple[RealNode, RealNode]) -> None:
    """slow configured at the imposed 0.5: kept when the measured interval holds it (nothing written),
    else replaced by the measurement; either way the table says which, and the ConfigMap agrees."""
    right = CONFIG.replace("slow: { cpuPerf: 1.0,", "slow: { cpuPerf: 0.5,")
    h.config(right)
    path = f"/api/v1/namespaces/{h.ns}/configmaps/{CONFIG_NAME}"
    version = h.kube.get(path)["metadata"]["resourceVersion"]
    proc = calibrate(h, "--repeats=3", "--apply", "-o", "json")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    result = json.loads(proc.stdout)
    slow = next(t for t in result["nodeTypes"] if t["nodeType"] == "slow")
    assert abs(slow["ratio"]["value"] - IMPOSED_RATIO) <= 0.1 * IMPOSED_RATIO, slow
    inside = slow["ratio"]["low"] <= IMPOSED_RATIO <= slow["ratio"]["high"]
    assert slow["change"] is not inside and result["applied"] is not inside
    if inside:
        assert result["changes"] == {} and h.kube.get(path)["metadata"]["resourceVersion"] == version
    else:
        assert config_text(h) == right.replace("cpuPerf: 0.5,", f"cpuPerf: {slow['measuredCpuPerf']},")
    assert benchmark_pods(h) == []


def test_clear_errors_change_nothing(h: Harness, nodes: tuple[RealNode, RealNode], tmp_path: Path) -> None:
    # A type with no node at all, next to one that measures: reported, exit 1, nothing applied.
    proc = calibrate(h, "--repeats=2", "--benchmark-duration=200ms", "--node-types=slow,ghost", "--apply")
    assert proc.returncode == 1, proc.stderr + proc.stdout
    assert f"ghost: no node has the label {h.label}=ghost" in proc.stdout
    assert "Nothing applied: 1 node type(s) failed." in proc.stdout
    assert config_text(h) == CONFIG

    # A benchmark that cannot start: the kubelet's reason, fast (not the timeout).
    proc = calibrate(
        h, "--repeats=2", "--image=workload-resizer.local/absent:1", "--image-pull-policy=Never", "--timeout=120s"
    )
    assert proc.returncode == 1, proc.stderr + proc.stdout
    assert "ErrImageNeverPull" in proc.stdout and "FAILED" in proc.stdout

    # No termination message: the score line is read from the log (kubectl logs works on the real
    # node: the apiserver reaches its kubelet through the node's network namespace).
    proc = calibrate(h, "--repeats=2", "--command", "/calibrate -duration=100ms -termination-log=")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    # A benchmark that fails: which contract it broke.
    proc = calibrate(h, "--repeats=2", "--command", "/calibrate -duration=100ms -nope")
    assert proc.returncode == 1 and "the benchmark failed (exit code 2" in proc.stdout, proc.stdout

    # The baseline's nodes are tainted and not tolerated: a usage error before any pod.
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "commands",
            "calibrate",
            f"--kubeconfig={h.cluster.kubeconfig}",
            f"--config-namespace={h.ns}",
            f"--node-type-label={h.label}",
            f"--namespace={h.ns}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "baseline node type n2d: every Ready node is tainted" in proc.stderr, proc.stderr
    assert config_text(h) == CONFIG
    assert benchmark_pods(h) == []


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_calibration_deletes_its_pods(
    h: Harness, nodes: tuple[RealNode, RealNode], sig: signal.Signals
) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "commands",
            "calibrate",
            f"--kubeconfig={h.cluster.kubeconfig}",
            f"--config-namespace={h.ns}",
            f"--node-type-label={h.label}",
            f"--namespace={h.ns}",
            f"--toleration={TAINT}",
            "--host-network",
            "--repeats=3",
            "--benchmark-duration=30s",
            "--apply",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As in an admin's terminal: a test run started in the background (a non-interactive
        # shell's `&`) passes SIGINT on ignored, and Python then installs no Ctrl-C handler.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        wait_for("both benchmark pods", lambda: len(benchmark_pods(h)) == 2 or None, timeout=START_TIMEOUT)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, (out, err)
    assert "interrupted; its benchmark pods are deleted, the config is unchanged" in err
    assert benchmark_pods(h) == []
    assert config_text(h) == CONFIG
