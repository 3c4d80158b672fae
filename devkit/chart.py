"""The Helm chart in chart/, rendered by the pinned helm that hack/tools builds.

helm = ensure_helm()                       # builds helm once (minutes), then cached
docs = render(helm, namespace="ns", values={"tls": {"mode": "helm"}})
"""

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
from devkit.tempdirs import temporary_directory

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "chart"
HACK_TOOLS = REPO / "hack" / "tools"
CERT_MANAGER_KINDS = {"Issuer", "ClusterIssuer", "Certificate"}


class HelmFailed(AssertionError):
    def __init__(self, args: list[str], proc: subprocess.CompletedProcess[str]) -> None:
        self.stderr = proc.stderr
        super().__init__(f"helm {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr}")


@functools.cache
def ensure_helm() -> str:
    """Path of the pinned helm binary; built through `hack/tools build helm` the first time."""
    proc = run_visible([str(HACK_TOOLS), "build", "helm"])
    if proc.returncode != 0:
        raise RuntimeError(f"hack/tools build helm failed (exit {proc.returncode})")
    return proc.stdout.strip().splitlines()[-1]


@functools.cache
def _helm_home() -> Path:
    return temporary_directory("helm-home-")


def helm_env() -> dict[str, str]:
    """Keep helm's config, cache and data out of the user's home directory."""
    home = _helm_home()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    env.update(
        HELM_CONFIG_HOME=str(home / "config"), HELM_CACHE_HOME=str(home / "cache"), HELM_DATA_HOME=str(home / "data")
    )
    env.pop("KUBECONFIG", None)  # template and lint never talk to a cluster
    return env


def run_helm(helm: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([helm, *args], capture_output=True, text=True, env=helm_env(), timeout=120)
    if check and proc.returncode != 0:
        raise HelmFailed(list(args), proc)
    return proc


def _values_args(values: dict[str, Any] | None, set_values: list[str] | None) -> list[str]:
    args: list[str] = []
    if values:
        fd, path = tempfile.mkstemp(prefix="values-", suffix=".yaml", dir=_helm_home())
        with os.fdopen(fd, "w") as f:
            json.dump(values, f)  # JSON is YAML
        args += ["-f", path]
    for item in set_values or ():
        args += ["--set", item]
    return args


def template(
    helm: str,
    *,
    namespace: str = "workload-resizer-system",
    release: str = "workload-resizer",
    values: dict[str, Any] | None = None,
    set_values: list[str] | None = None,
    extra: list[str] | None = None,
    check: bool = True,
    tests: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`helm template`: the release's objects, as `helm install` creates them; its `helm test`
    hooks (created only by `helm test`) too with ``tests``."""
    args = [
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        *_values_args(values, set_values),
        *(extra or []),
        *([] if tests else ["--skip-tests"]),
    ]
    return run_helm(helm, *args, check=check)


def render(helm: str, **kwargs: Any) -> list[dict[str, Any]]:
    """The chart's objects (helm template) as dicts, in helm's install order (`tests=True`: with
    its `helm test` hooks)."""
    return [doc for doc in yaml.safe_load_all(template(helm, **kwargs).stdout) if doc]


def lint(
    helm: str,
    *,
    values: dict[str, Any] | None = None,
    set_values: list[str] | None = None,
    namespace: str = "workload-resizer-system",
) -> subprocess.CompletedProcess[str]:
    return run_helm(
        helm, "lint", "--strict", str(CHART), "--namespace", namespace, *_values_args(values, set_values), check=False
    )


def find(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''}, found {[d['metadata']['name'] for d in matches]}"
    return matches[0]


def find_all(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def container_args(docs: list[dict[str, Any]], deployment: str) -> list[str]:
    """The args of the one container of the rendered Deployment `deployment`."""
    (container,) = find(docs, "Deployment", deployment)["spec"]["template"]["spec"]["containers"]
    return list(container["args"])
