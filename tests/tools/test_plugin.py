"""The kubectl plugin as admins install it: hack/plugin.py's archive and manifest, installed by
krew itself (built from its Go module by hack/tools, run offline with `--manifest --archive`
in a KREW_ROOT of its own), then run through kubectl, under every CPython it ships for.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hack import plugin

REPO = Path(__file__).resolve().parents[2]
CONFIG = """\
baselineNodeType: n2d
nodeTypes:
  n2d: {cpuPerf: 1.0, memPerf: 1.0}
  n4: {cpuPerf: 1.25, memPerf: 1.0}
bounds:
  cpu: {min: 50m, max: "16"}
  memory: {min: 64Mi, max: 32Gi}
"""


def tool(*argv: str) -> Path:
    """The path a hack/ build command prints (the build is skipped when cached)."""
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.split()[0])


def kubectl_dir() -> Path:
    """Where hack/cluster's kubectl is (built into the cache like the control plane)."""
    proc = subprocess.run([str(REPO / "hack" / "cluster"), "build"], capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return next(Path(line) for line in proc.stdout.split() if (Path(line) / "kubectl").exists())


def krew_env(root: Path) -> dict[str, str]:
    return {**os.environ, "KREW_ROOT": str(root), "KREW_NO_UPGRADE_CHECK": "1"}


def install_plugin(work: Path) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    """Build the archive and manifest into `work`, install them with krew into work/krew;
    returns the manifest, KREW_ROOT and krew's answer."""
    manifest = work / "workload-resizer.yaml"
    archive = plugin.build(work / "dist", manifest)
    krew = tool(str(REPO / "hack" / "tools"), "build", "krew")
    root = work / "krew"
    installed = subprocess.run(
        [str(krew), "install", f"--manifest={manifest}", f"--archive={archive}"],
        env=krew_env(root),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return manifest, root, installed


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    work = tmp_path_factory.mktemp("plugin")
    manifest, root, proc = install_plugin(work)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Installed plugin: workload-resizer" in proc.stderr + proc.stdout
    yield manifest, root, work


def test_krew_verifies_and_installs_the_archive_the_manifest_names(installed: tuple[Path, Path, Path]) -> None:
    manifest, root, work = installed
    spec = yaml.safe_load(manifest.read_text())["spec"]
    (platform,) = spec["platforms"]
    archive = work / "dist" / plugin.archive_name(plugin.version())
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["selector"] == {"matchLabels": {"os": "linux", "arch": "amd64"}}
    store = root / "store" / "workload-resizer" / spec["version"]
    link = root / "bin" / "kubectl-workload_resizer"
    assert link.is_symlink() and link.resolve() == (store / "kubectl-workload_resizer").resolve()
    assert sorted(p.name for p in (store / "lib").iterdir()) == ["common", *(plugin.tag(v) for v in plugin.PYTHONS)]
    receipt = yaml.safe_load((root / "receipts" / "workload-resizer.yaml").read_text())
    assert receipt["spec"]["version"] == f"v{plugin.version()}"


def test_kubectl_runs_the_installed_plugin(installed: tuple[Path, Path, Path]) -> None:
    _, root, _ = installed
    env = {**krew_env(root), "PATH": f"{root / 'bin'}:{kubectl_dir()}:{os.environ['PATH']}"}
    listed = subprocess.run(["kubectl", "plugin", "list"], env=env, capture_output=True, text=True, timeout=60)
    assert str(root / "bin" / "kubectl-workload_resizer") in listed.stdout, listed.stdout + listed.stderr
    direct = subprocess.run(["kubectl-workload_resizer", "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert direct.returncode == 0 and "{plan,report,restore,calibrate,selftest}" in direct.stdout, direct.stderr
    help_text = subprocess.run(
        ["kubectl", "workload-resizer", "plan", "--help"], env=env, capture_output=True, text=True, timeout=60
    )
    assert help_text.returncode == 0, help_text.stderr
    assert help_text.stdout.startswith("usage: kubectl workload-resizer plan") and "--config-file" in help_text.stdout


def cpythons() -> list[tuple[str, str]]:
    """(version, interpreter) for each CPython the plugin ships for that this machine can run:
    on PATH as python3.X, under pyenv's versions (whose shims on PATH run only the active one),
    and at least the one running the tests."""
    found = []
    for version in plugin.PYTHONS:
        candidates = [shutil.which(f"python{version}") or ""]
        candidates += sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}")))
        if version == f"{sys.version_info[0]}.{sys.version_info[1]}":
            # The interpreter under the tests' venv, never the venv's own: its site-packages hold
            # the product and would hide a package missing from the plugin.
            candidates.append(getattr(sys, "_base_executable", sys.executable))
        for candidate in candidates:
            if candidate and subprocess.run([candidate, "-c", ""], capture_output=True).returncode == 0:
                found.append((version, candidate))
                break
    return found


@pytest.mark.parametrize("version, python", cpythons(), ids=[v for v, _ in cpythons()])
def test_every_cpython_it_ships_for_loads_the_whole_command(
    installed: tuple[Path, Path, Path], tmp_path: Path, version: str, python: str
) -> None:
    """`plan` against an exec-plugin kubeconfig: the kubernetes package (the kubeconfig extra)
    runs the exec plugin, the config is compiled (PyYAML), and only then does
    the connection to a closed port fail."""
    _, root, _ = installed
    ran = tmp_path / "exec-plugin-ran"
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", "status": {"token": "t"}}
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
        "users": [
            {
                "name": "u",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": "/bin/sh",
                        "args": ["-c", f"touch {ran}; echo '{json.dumps(credential)}'"],
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    (tmp_path / "kubeconfig").write_text(json.dumps(kubeconfig))
    (tmp_path / "config.yaml").write_text(CONFIG)
    proc = subprocess.run(
        [
            python,
            "-S",  # no site-packages: a package missing from the plugin cannot be found elsewhere
            str(root / "bin" / "kubectl-workload_resizer"),
            "plan",
            f"--kubeconfig={tmp_path / 'kubeconfig'}",
            f"--config-file={tmp_path / 'config.yaml'}",
        ],
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1 and "error: cannot read the cluster" in proc.stderr, proc.stderr
    assert "Connect call failed ('127.0.0.1', 1)" in proc.stderr and ran.exists()


def test_a_python_without_its_libraries_and_no_other_says_which_it_needs(
    installed: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    _, root, _ = installed
    copy = tmp_path / "plugin"
    shutil.copytree(root / "store" / "workload-resizer" / f"v{plugin.version()}", copy)
    shutil.rmtree(copy / "lib" / f"cp{sys.version_info[0]}{sys.version_info[1]}")
    proc = subprocess.run(
        [sys.executable, str(copy / "kubectl-workload_resizer"), "plan", "--help"],
        env={"PATH": str(tmp_path / "no-python-here")},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.startswith("kubectl workload-resizer needs CPython 3.11 or 3.12 or 3.13 or 3.14"), proc.stderr
