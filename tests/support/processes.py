"""Run the product's own processes (reconciler, webhook) against a test cluster."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Process:
    """A product process with its log captured to a file."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log_path = Path(tempfile.mkstemp(prefix=f"{name}-", suffix=".log")[1])
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, cwd=REPO,
                                     env={**os.environ, **(env or {})}, start_new_session=True)

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_lines(self) -> list[str]:
        return self.logs().splitlines()

    def terminate(self, timeout: float = 30) -> int:
        if self.alive:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.wait(5)

    def kill(self) -> None:
        if self.alive:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def wait_exit(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        self.kill()
        self._log.close()


class Reconciler(Process):
    def __init__(self, kubeconfig: str, *flags: str, env: dict[str, str] | None = None,
                 name: str = "reconciler") -> None:
        self.metrics_port = free_port()
        self.health_port = free_port()
        argv = [sys.executable, "-m", "reconciler", f"--kubeconfig={kubeconfig}",
                f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
                f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
                "--config-refresh-interval=2s", *flags]
        super().__init__(name, argv, env)

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels`."""
        total = 0.0
        for line in self.metrics().splitlines():
            if not line.startswith(name) or line.startswith("#"):
                continue
            series, _, value = line.rpartition(" ")
            metric_name = series.split("{", 1)[0]
            if metric_name != name:
                continue
            if all(f'{k}="{v}"' in series for k, v in labels.items()):
                total += float(value)
        return total

    def ready(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                raise AssertionError(f"reconciler exited early:\n{self.logs()[-3000:]}")
            if self.ready():
                return
            time.sleep(0.2)
        raise AssertionError(f"reconciler not ready after {timeout}s:\n{self.logs()[-3000:]}")
