"""A disposable hack/cluster control plane in its own state directory, with component control.

Never the shared <repo>/.cluster: every LocalCluster has its own WR_CLUSTER_DIR.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from bench.drills.observe import samples
from tests.support.kube import Kube, wait_for

REPO = Path(__file__).resolve().parents[2]
HACK_CLUSTER = REPO / "hack" / "cluster"
FAMILY_LABEL = "cloud.google.com/machine-family"
POOL_LABEL = "drill.workload-resizer.io/pool"


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
        if state_dir.resolve() == (REPO / ".cluster").resolve():
            raise ValueError("drills never use the shared cluster in <repo>/.cluster")
        self.state_dir = state_dir
        self.env = {**os.environ, "WR_CLUSTER_DIR": str(state_dir)}
        if scheduler_qps is not None:
            self.env["WR_SCHEDULER_QPS"] = str(scheduler_qps)
        self.kubeconfig = ""
        self.kube: Kube | None = None

    # ---- lifecycle

    def hack(self, *args: str, timeout: float = 300) -> str:
        proc = subprocess.run([str(HACK_CLUSTER), *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"hack/cluster {' '.join(args)} failed (exit {proc.returncode}):\n"
                               f"{proc.stderr[-3000:]}")
        return proc.stdout

    def up(self) -> Kube:
        out = self.hack("up", timeout=900)
        self.kubeconfig = next(line.split("=", 1)[1] for line in out.splitlines()
                               if line.startswith("export KUBECONFIG="))
        self.kube = Kube(self.kubeconfig)
        return self.kube

    def down(self) -> None:
        if self.kube is not None:
            self.kube.http.close()
        subprocess.run([str(HACK_CLUSTER), "down"], env=self.env, capture_output=True, timeout=120)

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

    def add_nodes(self, nodes: list[NodeSpec], parallel: int = 6) -> None:
        def add(node: NodeSpec) -> None:
            args = ["add-node", node.name, "--cpu", node.cpu, "--memory", node.memory, "--pods", str(node.pods),
                    "--label", f"{POOL_LABEL}={node.pool}"]
            if node.family:
                args += ["--family", node.family]
            for key, value in node.labels.items():
                args += ["--label", f"{key}={value}"]
            self.hack(*args)

        with ThreadPoolExecutor(parallel) as pool:
            list(pool.map(add, nodes))
        assert self.kube is not None
        names = {n.name for n in nodes}
        wait_for(f"{len(nodes)} nodes Ready", lambda: names <= self.ready_nodes(), timeout=120, interval=1)

    def ready_nodes(self) -> set[str]:
        assert self.kube is not None
        ready = set()
        for node in self.kube.get("/api/v1/nodes")["items"]:
            if any(c["type"] == "Ready" and c["status"] == "True"
                   for c in node.get("status", {}).get("conditions", [])):
                ready.add(node["metadata"]["name"])
        return ready

    def node_types(self, label: str = FAMILY_LABEL) -> dict[str, str | None]:
        assert self.kube is not None
        return {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(label)
                for n in self.kube.get("/api/v1/nodes")["items"]}

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


def ok_count(by_code: dict[str, float]) -> float:
    return sum(v for code, v in by_code.items() if code.startswith("2"))
