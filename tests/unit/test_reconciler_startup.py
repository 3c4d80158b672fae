"""Startup failures exit non-zero with a clear message instead of running half-broken."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def kubeconfig(tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": "https://127.0.0.1:9", "insecure-skip-tls-verify": True}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


def run_reconciler(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *flags], cwd=REPO, capture_output=True, text=True, timeout=60
    )


def test_a_taken_metrics_port_is_a_startup_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            free_port = free.getsockname()[1]
        result = run_reconciler(
            f"--kubeconfig={kubeconfig(tmp_path)}",
            f"--metrics-bind-address=127.0.0.1:{port}",
            f"--health-probe-bind-address=127.0.0.1:{free_port}",
        )
    assert result.returncode == 1
    assert "cannot listen" in result.stderr + result.stdout
    assert f"127.0.0.1:{port}" in result.stderr + result.stdout
    assert "in use" in result.stderr + result.stdout


def test_an_unusable_key_directory_is_a_startup_error(tmp_path: Path) -> None:
    result = run_reconciler(
        f"--kubeconfig={kubeconfig(tmp_path)}",
        f"--originals-key-dir={tmp_path / 'absent'}",
        "--metrics-bind-address=0",
        "--health-probe-bind-address=0",
    )
    assert result.returncode == 2
    assert "--originals-key-dir" in result.stderr and "cannot list" in result.stderr


def test_the_reconciler_does_not_import_pydantic() -> None:
    """pydantic (the webhook's, through FastAPI) and its models are half of the reconciler's
    memory after its imports: the reconciler and the config it loads do without it."""
    code = (
        "import sys, reconciler.run, reconciler.__main__, resizer\n"
        "resizer.load_config(resizer.SAMPLE_CONFIG)\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] in ('pydantic', 'pydantic_core')))"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
