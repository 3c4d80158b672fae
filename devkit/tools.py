"""The pinned tools of hack/tools (prometheus, promtool, ...), fetched into the shared cache on first use."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from devkit.progress import run_visible

HACK_TOOLS = Path(__file__).resolve().parents[1] / "hack" / "tools"


@functools.cache
def ensure_tool(name: str) -> str:
    """Path of the pinned `name` binary; `hack/tools build <name>` makes it the first time."""
    proc = run_visible([str(HACK_TOOLS), "build", name])
    if proc.returncode != 0:
        raise RuntimeError(f"hack/tools build {name} failed (exit {proc.returncode})")
    return proc.stdout.strip().splitlines()[-1]


# The Prometheus Operator whose CRDs (PrometheusRule, PodMonitor) the chart's monitoring
# objects are validated against, from its Go module (example/prometheus-operator-crd/).
PROMETHEUS_OPERATOR = ("github.com/prometheus-operator/prometheus-operator", "0.85.0")


@functools.cache
def go_module_dir(module: str, version: str) -> Path:
    """The unpacked source of a Go module (the module proxy, verified against the checksum database)."""
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    proc = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@v{version}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tempfile.gettempdir(),
    )
    info = json.loads(proc.stdout or "{}")
    if proc.returncode != 0 or info.get("Error") or not info.get("Dir"):
        raise RuntimeError(f"go mod download {module}@v{version} failed: {info.get('Error') or proc.stderr}")
    return Path(info["Dir"])


def prometheus_operator_crds(*plurals: str) -> list[dict[str, Any]]:
    """The Prometheus Operator's CustomResourceDefinitions of these resources (e.g. "prometheusrules")."""
    module, version = PROMETHEUS_OPERATOR
    directory = go_module_dir(module, version) / "example" / "prometheus-operator-crd"
    return [yaml.safe_load((directory / f"monitoring.coreos.com_{plural}.yaml").read_text()) for plural in plurals]
