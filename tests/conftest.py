"""pytest wiring: unit tests need nothing; cluster tests share one control plane.

The `cluster` fixture runs `hack/cluster up` once per session (idempotent: a
cluster that is already running is reused) and stops it at the end only if
this session started it. WR_KEEP_CLUSTER=1 keeps it running for debugging.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.kube import Kube, wait_for

REPO = Path(__file__).resolve().parent.parent
HACK_CLUSTER = REPO / "hack" / "cluster"


@dataclass
class Cluster:
    kubeconfig: str
    bin_dir: str
    kube: Kube
    version: str

    def add_node(self, name: str, family: str | None = None, cpu: str = "32", memory: str = "128Gi",
                 no_resize: bool = False, labels: dict[str, str] | None = None) -> None:
        args = [str(HACK_CLUSTER), "add-node", name, "--cpu", cpu, "--memory", memory]
        if family:
            args += ["--family", family]
        if no_resize:
            args.append("--no-resize")
        for key, value in (labels or {}).items():
            args += ["--label", f"{key}={value}"]
        subprocess.run(args, check=True, capture_output=True, text=True)
        wait_for(f"node {name} Ready", lambda: any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in self.kube.get(f"/api/v1/nodes/{name}").get("status", {}).get("conditions", [])))

    def ensure_node(self, name: str, **kwargs) -> None:
        try:
            self.kube.get(f"/api/v1/nodes/{name}")
        except Exception:
            self.add_node(name, **kwargs)
        else:
            return

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": self.kubeconfig, "PATH": f"{self.bin_dir}:{os.environ['PATH']}"}


def _cluster_running() -> bool:
    return subprocess.run([str(HACK_CLUSTER), "status"], capture_output=True).returncode == 0 and \
        "DEAD" not in subprocess.run([str(HACK_CLUSTER), "status"], capture_output=True, text=True).stdout


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    started_here = not _cluster_running()
    proc = subprocess.run([str(HACK_CLUSTER), "up"], stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
    if proc.returncode != 0:
        pytest.fail(f"hack/cluster up failed (exit {proc.returncode})")
    exports = dict(line.removeprefix("export ").split("=", 1) for line in proc.stdout.splitlines()
                   if line.startswith("export "))
    kubeconfig = exports["KUBECONFIG"]
    bin_dir = exports["PATH"].split(":", 1)[0]
    kube = Kube(kubeconfig)
    version = kube.get("/version")["gitVersion"]
    try:
        yield Cluster(kubeconfig=kubeconfig, bin_dir=bin_dir, kube=kube, version=version)
    finally:
        if started_here and os.environ.get("WR_KEEP_CLUSTER") != "1":
            subprocess.run([str(HACK_CLUSTER), "down"], check=False)


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards."""
    name = f"t-{request.node.name[:40].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    name = "".join(ch for ch in name if ch.isalnum() or ch == "-")
    cluster.kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": name}})
    wait_for("default service account", lambda: cluster.kube.get(
        f"/api/v1/namespaces/{name}/serviceaccounts/default"), timeout=30)
    yield name
    cluster.kube.delete(f"/api/v1/namespaces/{name}")


@dataclass
class RealNode:
    """A real node (containerd + runc + kubelet) joined to the session's cluster."""
    name: str
    cgroup: str          # the kubelet's cgroupRoot, without the leading /
    directory: Path      # its state: STATE/nodes/NAME
    ns_inode: int        # its private mount namespace
    kubelet_port: int    # the kubelet's HTTPS port on 127.0.0.1 (x509 clients of the cluster CA)
    pki: Path            # the cluster's CA and admin client certificate


def cluster_state_dir() -> Path:
    return Path(os.environ.get("WR_CLUSTER_DIR") or REPO / ".cluster")


def read_real_node(name: str, state_dir: Path | None = None) -> RealNode:
    state = json.loads(((state_dir or cluster_state_dir()) / "state.json").read_text())
    record = state["real_nodes"][name]
    return RealNode(name=name, cgroup=record["cgroup"], directory=Path(record["dir"]),
                    ns_inode=record["ns_inode"], kubelet_port=record["ports"]["kubelet"],
                    pki=(state_dir or cluster_state_dir()) / "pki")


@pytest.fixture(scope="session")
def real_node(cluster: Cluster) -> Iterator[RealNode]:
    """`hack/cluster add-node --real` once per session (family n4, kube-reserved cpu 100m so
    allocatable is 100m short of the machine), removed again at the end."""
    name = f"real-{uuid.uuid4().hex[:6]}"
    proc = subprocess.run([str(HACK_CLUSTER), "add-node", name, "--real", "--family", "n4",
                           "--reserved-cpu", "100m"], stdout=subprocess.PIPE, stderr=sys.stderr, text=True)
    if proc.returncode != 0:
        pytest.fail(f"hack/cluster add-node {name} --real failed (exit {proc.returncode})")
    try:
        yield read_real_node(name)
    finally:
        subprocess.run([str(HACK_CLUSTER), "remove-node", name], check=False)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
