"""A hack/cluster control plane in a state directory of its own, with component control.

Who uses which state directory (each its own cluster, on free ports; they never share one):
- `make test` (tests/conftest.py): $WR_CLUSTER_DIR, else <repo>/.cluster — the default of hack/cluster;
- `make demo` (hack/demo.py): $WR_DEMO_CLUSTER_DIR, else <repo>/.cluster-demo;
- the drills: one directory per drill under their output directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from devkit.kube import Kube, wait_for
from devkit.metrics import samples
from devkit.progress import run_visible

REPO = Path(__file__).resolve().parents[1]
HACK_CLUSTER = REPO / "hack" / "cluster"
FAMILY_LABEL = "cloud.google.com/machine-family"
POOL_LABEL = "drill.workload-resizer.io/pool"


def cluster_dir_for_tests() -> Path:
    return Path(os.environ.get("WR_CLUSTER_DIR") or REPO / ".cluster")


def cluster_dir_for_demo() -> Path:
    return Path(os.environ.get("WR_DEMO_CLUSTER_DIR") or REPO / ".cluster-demo")


class ClusterError(RuntimeError):
    """A hack/cluster command failed."""


@dataclass(frozen=True)
class NodeSpec:
    name: str
    family: str | None
    pool: str
    cpu: str = "64"
    memory: str = "256Gi"
    pods: int = 1000
    labels: dict[str, str] = field(default_factory=dict)


class LocalCluster:
    def __init__(self, state_dir: Path, scheduler_qps: int | None = None) -> None:
        self.state_dir = state_dir
        self.env = {**os.environ, "WR_CLUSTER_DIR": str(state_dir)}
        if scheduler_qps is not None:
            self.env["WR_SCHEDULER_QPS"] = str(scheduler_qps)
        self.kubeconfig = ""
        self.bin_dir = ""  # kubectl and friends
        self.kube: Kube | None = None

    # ---- lifecycle

    def hack(self, *args: str, timeout: float = 300) -> str:
        proc = subprocess.run([str(HACK_CLUSTER), *args], env=self.env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise ClusterError(f"hack/cluster {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return proc.stdout

    def running(self) -> bool:
        proc = subprocess.run([str(HACK_CLUSTER), "status"], env=self.env, capture_output=True, text=True)
        return proc.returncode == 0 and "DEAD" not in proc.stdout

    def up(self, visible: bool = False) -> Kube:
        """Start (or reuse) the cluster; `visible` shows hack/cluster's progress (a first build takes minutes)."""
        if visible:
            proc = run_visible([str(HACK_CLUSTER), "up"], env=self.env)
            if proc.returncode != 0:
                raise ClusterError(f"hack/cluster up failed (exit {proc.returncode}; state in {self.state_dir})")
            out = proc.stdout
        else:
            out = self.hack("up", timeout=900)
        self.kubeconfig, self.bin_dir = cluster_env(out)
        self.kube = Kube(self.kubeconfig)
        return self.kube

    def down(self, quiet: bool = True) -> None:
        if self.kube is not None:
            self.kube.http.close()
        subprocess.run([str(HACK_CLUSTER), "down"], env=self.env, capture_output=quiet, timeout=120)

    # ---- component control (hack/cluster stop|start|restart|signal)

    def stop(self, component: str, timeout: float = 90) -> float:
        return self._timed("stop", component, "--timeout", str(timeout))

    def start(self, component: str, timeout: float = 90) -> float:
        return self._timed("start", component, "--timeout", str(timeout))

    def signal(self, component: str, sig: str) -> None:
        self.hack("signal", component, sig)

    def _timed(self, *args: str) -> float:
        started = time.monotonic()
        self.hack(*args)
        return time.monotonic() - started

    def pid(self, component: str) -> int:
        state = json.loads((self.state_dir / "state.json").read_text())
        return state["processes"][component]["pid"]

    # ---- nodes

    def add_node(
        self,
        name: str,
        family: str | None = None,
        cpu: str = "32",
        memory: str = "128Gi",
        pods: int | None = None,
        labels: dict[str, str] | None = None,
        no_resize: bool = False,
    ) -> None:
        """`hack/cluster add-node` (which also relabels an existing node); does not wait for Ready."""
        args = ["add-node", name, "--cpu", cpu, "--memory", memory]
        if pods is not None:
            args += ["--pods", str(pods)]
        if family:
            args += ["--family", family]
        if no_resize:
            args.append("--no-resize")
        for key, value in (labels or {}).items():
            args += ["--label", f"{key}={value}"]
        self.hack(*args)

    def add_nodes(self, nodes: list[NodeSpec], parallel: int = 6) -> None:
        def add(node: NodeSpec) -> None:
            self.add_node(
                node.name, node.family, node.cpu, node.memory, node.pods, {POOL_LABEL: node.pool, **node.labels}
            )

        with ThreadPoolExecutor(parallel) as pool:
            list(pool.map(add, nodes))
        assert self.kube is not None
        names = {n.name for n in nodes}
        wait_for(f"{len(nodes)} nodes Ready", lambda: names <= self.ready_nodes(), timeout=120, interval=1)

    def ready_nodes(self) -> set[str]:
        assert self.kube is not None
        ready = set()
        for node in self.kube.get("/api/v1/nodes")["items"]:
            if any(
                c["type"] == "Ready" and c["status"] == "True" for c in node.get("status", {}).get("conditions", [])
            ):
                ready.add(node["metadata"]["name"])
        return ready

    def node_types(self, label: str = FAMILY_LABEL) -> dict[str, str | None]:
        assert self.kube is not None
        return {
            n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(label)
            for n in self.kube.get("/api/v1/nodes")["items"]
        }

    # ---- the apiserver's own view

    def apiserver_metrics(self) -> str:
        assert self.kube is not None
        return self.kube.http.get("/metrics", timeout=30).text

    def resize_patches_served(self) -> dict[str, float]:
        """pods/resize PATCHes the running apiserver answered since it started, by response code."""
        by_code: dict[str, float] = {}
        for labels, value in samples(self.apiserver_metrics(), "apiserver_request_total"):
            if (labels.get("verb"), labels.get("resource"), labels.get("subresource")) == ("PATCH", "pods", "resize"):
                by_code[labels.get("code", "")] = by_code.get(labels.get("code", ""), 0) + value
        return by_code

    def apiserver_rejections(self) -> dict[str, float]:
        """Requests the apiserver refused for load since it started (429), by API Priority and
        Fairness flow schema."""
        by_flow: dict[str, float] = {}
        for labels, v in samples(self.apiserver_metrics(), "apiserver_flowcontrol_rejected_requests_total"):
            key = f"{labels.get('flow_schema')}/{labels.get('reason')}"
            by_flow[key] = by_flow.get(key, 0) + v
        return by_flow


def cluster_env(printed: str) -> tuple[str, str]:
    """The kubeconfig and the Kubernetes binaries' directory from the export lines that
    `hack/cluster up` prints last (`export PATH=DIR:$PATH`, `export KUBECONFIG=FILE`)."""
    exports = dict(
        line.removeprefix("export ").split("=", 1)
        for line in printed.splitlines()
        if line.startswith("export ") and "=" in line
    )
    if "KUBECONFIG" not in exports or "PATH" not in exports:
        raise ClusterError(f"hack/cluster up printed no export line of PATH and KUBECONFIG: {printed!r}")
    return exports["KUBECONFIG"], exports["PATH"].split(":", 1)[0]


def ok_count(by_code: dict[str, float]) -> float:
    return sum(v for code, v in by_code.items() if code.startswith("2"))
