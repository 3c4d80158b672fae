"""pytest wiring: unit tests need nothing; cluster tests share one control plane.

The `cluster` fixture runs `hack/cluster up` once per session in the tests' own state
directory ($WR_CLUSTER_DIR, else <repo>/.cluster; `make demo` uses another one), reusing a
cluster that already runs there, and stops it at the end only if this session started it.
WR_KEEP_CLUSTER=1 keeps it running for debugging. First-use builds (Kubernetes, helm,
cert-manager) show their progress on the terminal.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from devkit import progress
from devkit.cluster import HACK_CLUSTER, REPO, ClusterError, LocalCluster, cluster_dir_for_tests
from devkit.kube import Kube, wait_for

__all__ = ["HACK_CLUSTER", "REPO", "Cluster"]


_SESSION_TMP: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        progress.show_through(capture.global_and_fixture_disabled)
    # Certificates, keys and kubeconfigs the tests and devkit write with tempfile land in one
    # directory of this session, removed at its end whatever the tests forgot (they used to pile
    # up in /tmp, private keys included). Only this process's tempfile: the cluster's processes
    # keep the real TMPDIR, as a kept cluster outlives the session.
    global _SESSION_TMP
    _SESSION_TMP = tempfile.mkdtemp(prefix="wr-tests-")
    tempfile.tempdir = _SESSION_TMP


def pytest_unconfigure(config: pytest.Config) -> None:
    global _SESSION_TMP
    if _SESSION_TMP is not None:
        tempfile.tempdir = None
        shutil.rmtree(_SESSION_TMP, ignore_errors=True)
        _SESSION_TMP = None


@dataclass
class Cluster:
    kubeconfig: str
    bin_dir: str
    kube: Kube
    version: str
    local: LocalCluster

    def add_node(
        self,
        name: str,
        family: str | None = None,
        cpu: str = "32",
        memory: str = "128Gi",
        no_resize: bool = False,
        labels: dict[str, str] | None = None,
    ) -> None:
        self.local.add_node(name, family, cpu, memory, labels=labels, no_resize=no_resize)
        wait_for(f"node {name} Ready", lambda: name in self.local.ready_nodes())

    def ensure_node(self, name: str, **kwargs: Any) -> None:
        try:
            self.kube.get(f"/api/v1/nodes/{name}")
        except Exception:
            self.add_node(name, **kwargs)
        else:
            return

    def env(self) -> dict[str, str]:
        return {**os.environ, "KUBECONFIG": self.kubeconfig, "PATH": f"{self.bin_dir}:{os.environ['PATH']}"}


def foreign_webhooks(kube: Kube) -> list[str]:
    """Mutating webhooks that would see the tests' namespaces (not limited by namespace name or label).

    The tests register theirs limited to their own namespaces; one for every namespace is
    somebody else's (e.g. a demo's) and would stamp the tests' pods before their own webhook.
    """
    found = []
    path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    for config in kube.get(path)["items"]:
        for hook in config.get("webhooks", []):
            selector = hook.get("namespaceSelector") or {}
            limited = bool(selector.get("matchLabels")) or any(
                e.get("operator") == "In" for e in selector.get("matchExpressions", [])
            )
            if not limited:
                found.append(f"{config['metadata']['name']} ({hook['name']})")
    return found


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    local = LocalCluster(cluster_dir_for_tests())
    started_here = not local.running()
    try:
        kube = local.up(visible=True)
    except ClusterError as err:
        pytest.fail(str(err))
    foreign = foreign_webhooks(kube)
    if foreign:
        pytest.fail(
            f"the cluster in {local.state_dir} has webhooks for every namespace that are not the "
            f"tests' own: {', '.join(foreign)}. Run the tests on a cluster of their own "
            "(another WR_CLUSTER_DIR), or remove them (`make demo-down` for the demo's)."
        )
    version = kube.get("/version")["gitVersion"]
    try:
        yield Cluster(kubeconfig=local.kubeconfig, bin_dir=local.bin_dir, kube=kube, version=version, local=local)
    finally:
        if started_here and os.environ.get("WR_KEEP_CLUSTER") != "1":
            local.down(quiet=False)


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards."""
    name = f"t-{request.node.name[:40].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:5]}"
    name = "".join(ch for ch in name if ch.isalnum() or ch == "-")
    cluster.kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_for(
        "default service account",
        lambda: cluster.kube.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        timeout=30,
    )
    yield name
    cluster.kube.delete(f"/api/v1/namespaces/{name}")


@dataclass
class RealNode:
    """A real node (containerd + runc + kubelet) joined to the session's cluster."""

    name: str
    cgroup: str  # the kubelet's cgroupRoot, without the leading /
    directory: Path  # its state: STATE/nodes/NAME
    ns_inode: int  # its private mount namespace
    kubelet_port: int  # the kubelet's HTTPS port on the node's IP, in its network namespace
    pki: Path  # the cluster's CA and admin client certificate


def cluster_state_dir() -> Path:
    return cluster_dir_for_tests()


def read_real_node(name: str, state_dir: Path | None = None) -> RealNode:
    state = json.loads(((state_dir or cluster_state_dir()) / "state.json").read_text())
    record = state["real_nodes"][name]
    return RealNode(
        name=name,
        cgroup=record["cgroup"],
        directory=Path(record["dir"]),
        ns_inode=record["ns_inode"],
        kubelet_port=record["ports"]["kubelet"],
        pki=(state_dir or cluster_state_dir()) / "pki",
    )


@pytest.fixture(scope="session")
def real_node(cluster: Cluster) -> Iterator[RealNode]:
    """`hack/cluster add-node --real` once per session (family n4, kube-reserved cpu 100m so
    allocatable is 100m short of the machine), removed again at the end."""
    name = f"real-{uuid.uuid4().hex[:6]}"
    proc = subprocess.run(
        [str(HACK_CLUSTER), "add-node", name, "--real", "--family", "n4", "--reserved-cpu", "100m"],
        stdout=subprocess.PIPE,
        stderr=sys.stderr,
        text=True,
        env=cluster.env(),
    )
    if proc.returncode != 0:
        pytest.fail(f"hack/cluster add-node {name} --real failed (exit {proc.returncode})")
    try:
        yield read_real_node(name)
    finally:
        subprocess.run([str(HACK_CLUSTER), "remove-node", name], check=False, env=cluster.env())


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
