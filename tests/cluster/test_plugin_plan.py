"""The krew-installed plugin against the local control plane: `kubectl workload-resizer plan`
(hack/plugin.py's archive, installed by krew from its manifest) says what the checkout's own
`python -m commands plan` says, through kubectl, with the cluster's kubeconfig.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from devkit.processes import REPO, originals_key_dir
from tests.cluster.test_reconciler import Harness, guaranteed
from tests.tools.test_plugin import install_plugin, krew_env


@pytest.fixture(scope="module")
def krew_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    _, root, proc = install_plugin(tmp_path_factory.mktemp("plugin"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root


def plan_json(argv: list[str], h: Harness, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(
        [
            *argv,
            "plan",
            f"--kubeconfig={h.cluster.kubeconfig}",
            f"--config-namespace={h.ns}",
            f"--node-type-label={h.label}",
            f"--originals-key-dir={originals_key_dir()}",
            "-o",
            "json",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # not a terminal: no progress counter
    plan = json.loads(proc.stdout)
    for timing in ("listSeconds", "planSeconds"):
        plan.pop(timing)
    return plan


def test_the_installed_plugin_plans_what_the_checkout_plans(h: Harness, krew_root: Path) -> None:
    nodes = {family: h.node(family, family) for family in ("n2d", "n4")}
    for name, family, replicas in (("web", "n4", 2), ("base", "n2d", 1)):
        h.deploy(name, nodes[family], [guaranteed()], replicas=replicas)
        h.wait_running(name, replicas)
    env = {**krew_env(krew_root), "PATH": f"{krew_root / 'bin'}:{h.cluster.bin_dir}:{os.environ['PATH']}"}
    env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    installed = plan_json(["kubectl", "workload-resizer"], h, env)
    checkout = plan_json([sys.executable, "-m", "commands"], h, {**os.environ})
    assert installed == checkout
    ours = [w for w in installed["workloads"] if w["namespace"] == h.ns]
    resized = {p["name"] for w in ours for p in w["podPlans"] if p["outcome"] == "Resize"}
    assert len(resized) == 2 and all(name.startswith("web-") for name in resized)


def run_on_terminal(argv: list[str], env: dict[str, str], stdout: Path) -> tuple[str, str, int]:
    """`argv` with stderr on a pseudo-terminal (read as it is written, so a long run never blocks
    on a full terminal buffer) and stdout in a file; what each received, and the exit code."""
    controller, terminal = pty.openpty()
    drawn = b""
    try:
        with open(stdout, "w") as out:
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=terminal)
        os.close(terminal)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if select.select([controller], [], [], 0.1)[0]:
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # every writer closed the terminal and it is drained
                    break
                if not chunk:
                    break
                drawn += chunk
        returncode = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(controller)
    return drawn.decode(), stdout.read_text(), returncode


def test_on_a_terminal_plan_counts_on_stderr_and_stdout_stays_clean(
    h: Harness, krew_root: Path, tmp_path: Path
) -> None:
    """stderr a real terminal (a pty), stdout a file: the counter goes to the terminal only,
    and is erased before plan prints; with -o json the terminal gets nothing."""
    node = h.node("n4", "n4")
    h.deploy("web", node, [guaranteed()], replicas=3)
    h.wait_running("web", 3)
    env = {**krew_env(krew_root), "PATH": f"{krew_root / 'bin'}:{h.cluster.bin_dir}:{os.environ['PATH']}"}
    seen = {}
    for output in ("table", "json"):
        argv = [
            "kubectl",
            "workload-resizer",
            "plan",
            f"--kubeconfig={h.cluster.kubeconfig}",
            f"--config-namespace={h.ns}",
            f"--node-type-label={h.label}",
            f"--originals-key-dir={originals_key_dir()}",
            "--page-size=1",
            f"--output={output}",
        ]
        drawn, printed, returncode = run_on_terminal(argv, env, tmp_path / f"stdout-{output}")
        assert returncode == 0
        assert "\r" not in printed and "pods read" not in printed
        seen[output] = (drawn, printed)
    table_terminal, table = seen["table"]
    assert "plan: 0 pods read" in table_terminal and table_terminal.endswith("\r\x1b[K"), table_terminal
    assert "Deployment/web" in table
    json_terminal, plan = seen["json"]
    assert json_terminal == "" and json.loads(plan)["total"]["resized"] >= 3
