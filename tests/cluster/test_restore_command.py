"""`restore`: every managed pod back to its originals, no workload-resizer.io annotation left;
SIGKILL halfway and a rerun reach the same end state; a third run changes nothing."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

from devkit.kube import wait_for
from devkit.processes import REPO, Process, originals_key_dir
from resizer import parse_quantity
from tests.cluster.test_reconciler import (
    Harness,
    burstable,
    guaranteed,
    ours,
)

WORKLOADS = {"web": ("n4", guaranteed(), 6), "api": ("c3", burstable(), 5), "base": ("n2d", guaranteed(), 2)}


def spec_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {
        c["name"]: {
            kind: {r: parse_quantity(v) for r, v in (c["resources"].get(kind) or {}).items()}
            for kind in ("requests", "limits")
        }
        for c in pod["spec"]["containers"]
    }


def restore_argv(h: Harness, rate: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "commands",
        "restore",
        f"--kubeconfig={h.cluster.kubeconfig}",
        f"--max-resizes-per-second={rate}",
        f"--originals-key-dir={originals_key_dir()}",
    ]


def test_restore_returns_every_managed_pod_to_its_originals_even_after_a_sigkill(h: Harness) -> None:
    nodes = {family: h.node(family, family) for family, _, _ in WORKLOADS.values()}
    for app, (family, spec, replicas) in WORKLOADS.items():
        h.deploy(app, nodes[family], [spec], replicas=replicas)
    authored = {p["metadata"]["name"]: spec_of(p) for app, w in WORKLOADS.items() for p in h.wait_running(app, w[2])}
    reconciler = h.reconciler()
    for app, (family, _, replicas) in WORKLOADS.items():
        h.wait_applied(app, family, count=replicas)
    reconciler.terminate()
    managed = {p["metadata"]["name"]: p for p in h.kube.pods(h.ns)}
    assert set(managed) == set(authored) and all(ours(p) for p in managed.values())
    resized = {n for n, p in managed.items() if spec_of(p) != authored[n]}
    assert len(resized) == 11  # web and api; base is on its baseline family

    # Halfway through (2 pods/s), SIGKILL.
    first = Process("restore", restore_argv(h, "2"))
    try:
        wait_for(
            "some pods restored", lambda: sum(not ours(p) for p in h.kube.pods(h.ns)) >= 5, timeout=60, interval=0.1
        )
    finally:
        first.kill()
        first.close()
    halfway = h.kube.pods(h.ns)
    assert any(ours(p) for p in halfway), "the kill came too late to test a rerun"

    rerun = subprocess.run(restore_argv(h, "20"), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "Summary:" in rerun.stdout and "0 failed" in rerun.stdout
    final = {p["metadata"]["name"]: p for p in h.kube.pods(h.ns)}
    for name, pod in final.items():
        assert ours(pod) == {}, name
        assert spec_of(pod) == authored[name], name
        # Exactly one more resize per pod that was resized: the restore, once, even across the kill.
        expected = managed[name]["metadata"]["generation"] + (1 if name in resized else 0)
        assert pod["metadata"]["generation"] == expected, name
    wait_for(
        "the fake kubelet actuated the restored sizes",
        lambda: all(
            {
                c["name"]: {
                    k: {r: parse_quantity(v) for r, v in (c.get("resources", {}).get(k) or {}).items()}
                    for k in ("requests", "limits")
                }
                for c in p["status"]["containerStatuses"]
            }
            == authored[p["metadata"]["name"]]
            for p in h.kube.pods(h.ns)
        ),
        timeout=60,
    )

    versions = {n: p["metadata"]["resourceVersion"] for n, p in final.items()}
    again = subprocess.run(restore_argv(h, "20"), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stdout + again.stderr
    assert {p["metadata"]["name"]: p["metadata"]["resourceVersion"] for p in h.kube.pods(h.ns)} == versions
