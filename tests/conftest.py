"""pytest wiring: unit tests need nothing; cluster tests share one control plane.

The `cluster` fixture runs `hack/cluster up` once per session in the tests' own state
directory ($WR_CLUSTER_DIR, else <repo>/.cluster; `make demo` uses another one), reusing a
cluster that already runs there, and stops it at the end only if this session started it.
WR_KEEP_CLUSTER=1 keeps it running for debugging. First-use builds (Kubernetes, helm,
cert-manager) show their progress on the terminal.
"""
from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from devkit import progress
from devkit.cluster import HACK_CLUSTER, REPO, ClusterError, LocalCluster, tests_state_dir
from devkit.kube import Kube, wait_for

__all__ = ["HACK_CLUSTER", "REPO", "Cluster"]


def pytest_configure(config: pytest.Config) -> None:
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        progress.show_through(capture.global_and_fixture_disabled)


@dataclass
class Cluster:
    kubeconfig: str
    bin_dir: str
    kube: Kube
    version: str
    local: LocalCluster

    def add_node(self, name: str, family: str | None = None, cpu: str = "32", memory: str = "128Gi",
                 no_resize: bool = False, labels: dict[str, str] | None = None) -> None:
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
                e.get("operator") == "In" for e in selector.get("matchExpressions", []))
            if not limited:
                found.append(f"{config['metadata']['name']} ({hook['name']})")
    return found


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    local = LocalCluster(tests_state_dir())
    started_here = not local.running()
    try:
        kube = local.up(visible=True)
    except ClusterError as err:
        pytest.fail(str(err))
    foreign = foreign_webhooks(kube)
    if foreign:
        pytest.fail(f"the cluster in {local.state_dir} has webhooks for every namespace that are not the "
                    f"tests' own: {', '.join(foreign)}. Run the tests on a cluster of their own "
                    "(another WR_CLUSTER_DIR), or remove them (`make demo-down` for the demo's).")
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
    cluster.kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": name}})
    wait_for("default service account", lambda: cluster.kube.get(
        f"/api/v1/namespaces/{name}/serviceaccounts/default"), timeout=30)
    yield name
    cluster.kube.delete(f"/api/v1/namespaces/{name}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "cluster" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.cluster)
