"""Run the product's own processes (reconciler, webhook) against a test cluster."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from devkit.kube import ApiError
from devkit.metrics import metric_sum
from devkit.ports import free_port
from devkit.tempdirs import temporary_directory

REPO = Path(__file__).resolve().parents[1]


_KEY_DIR: Path | None = None


def originals_key_dir(directory: Path | None = None) -> Path:
    """One originals HMAC key directory per process, shared by every webhook and reconciler
    it starts (as the chart mounts one Secret into both). The first call decides where:
    `directory`, kept with its key (the demo's, whose processes outlive it and whose pods
    stay signed with it across runs), else a temporary one removed when this process exits."""
    global _KEY_DIR
    if _KEY_DIR is None:
        if directory is None:
            _KEY_DIR = temporary_directory("originals-keys-")
        else:
            directory.mkdir(parents=True, exist_ok=True)
            _KEY_DIR = directory
        key = _KEY_DIR / "k0001"
        if not key.exists():
            key.write_bytes(os.urandom(24).hex().encode())
            key.chmod(0o600)
    return _KEY_DIR


def _with_key_dir(flags: tuple[str, ...]) -> list[str]:
    if any(f.startswith(("--originals-key-dir", "--originals-keys-secret")) for f in flags):
        return list(flags)
    return [f"--originals-key-dir={originals_key_dir()}", *flags]


def _with_sizing_choice(flags: tuple[str, ...]) -> list[str]:
    """Stamp only unless the caller says otherwise: sizing at admission, the default, needs
    the apiserver (--kubeconfig), and a webhook without it does not start."""
    if any(f.startswith("--size-at-admission") for f in flags):
        return list(flags)
    return ["--size-at-admission=false", *flags]


class Process:
    """A product process with its log captured to a file."""

    def __init__(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, log_path: Path | None = None
    ) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path or Path(tempfile.mkstemp(prefix=f"{name}-", suffix=".log")[1])
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )

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

    def ready(self) -> bool:
        raise NotImplementedError  # each product process says how it reports readiness

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive:
                raise AssertionError(f"{self.name} exited early:\n{self.logs()[-3000:]}")
            if self.ready():
                return
            time.sleep(0.2)
        raise AssertionError(f"{self.name} not ready after {timeout}s:\n{self.logs()[-3000:]}")

    def wait_exit(self, timeout: float) -> int:
        return self.proc.wait(timeout)

    def close(self) -> None:
        self.kill()
        self._log.close()


class Reconciler(Process):
    def __init__(
        self,
        kubeconfig: str,
        *flags: str,
        env: dict[str, str] | None = None,
        name: str = "reconciler",
        log_path: Path | None = None,
    ) -> None:
        self.metrics_port = free_port()
        self.health_port = free_port()
        argv = [
            sys.executable,
            "-m",
            "reconciler",
            f"--kubeconfig={kubeconfig}",
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.health_port}",
            "--config-refresh-interval=2s",
            *_with_key_dir(flags),
        ]
        super().__init__(name, argv, env, log_path)

    def metrics(self) -> str:
        return httpx.get(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).text

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels`."""
        return metric_sum(self.metrics(), name, **labels)

    def ready(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.health_port}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False


# ---------------------------------------------------------------- the admission webhook

WEBHOOK_CONFIG_DIR = REPO / "webhook-config"
MUTATING_WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


class WebhookCerts:
    """A CA and a serving certificate for 127.0.0.1, made by `python -m certs`."""

    def __init__(self, directory: str | Path | None = None, ip: str = "127.0.0.1") -> None:
        self.directory = Path(directory) if directory else temporary_directory("webhook-certs-")
        bundle_file = self.directory / "ca.b64"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "certs",
                "--out-dir",
                str(self.directory),
                "--ip",
                ip,
                "--ca-bundle-file",
                str(bundle_file),
            ],
            cwd=REPO,
            check=True,
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.ca_bundle = bundle_file.read_text().strip()
        self.ca_file = str(self.directory / "ca.crt")
        self.cert_file = str(self.directory / "tls.crt")
        self.key_file = str(self.directory / "tls.key")


class Webhook(Process):
    """`python -m app` on 127.0.0.1:<free port>, serving https://127.0.0.1:<port>/mutate."""

    def __init__(
        self,
        *flags: str,
        certs: WebhookCerts | None = None,
        port: int | None = None,
        env: dict[str, str] | None = None,
        name: str = "webhook",
        log_path: Path | None = None,
    ) -> None:
        self.certs = certs or WebhookCerts()
        self.port = port or free_port()
        argv = [
            sys.executable,
            "-m",
            "app",
            "--bind-address=127.0.0.1",
            f"--port={self.port}",
            f"--tls-cert-file={self.certs.cert_file}",
            f"--tls-key-file={self.certs.key_file}",
            "--log-flush-interval=0",
            *_with_key_dir(tuple(_with_sizing_choice(flags))),
        ]
        super().__init__(name, argv, env, log_path)

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The admission endpoint, as the MutatingWebhookConfiguration names it."""
        return f"{self.base_url}/mutate"

    def _get(self, path: str) -> httpx.Response:
        import ssl

        context = ssl.create_default_context(cafile=self.certs.ca_file)
        return httpx.get(f"{self.base_url}{path}", verify=context, timeout=5)

    def metrics(self) -> str:
        return self._get("/metrics").text

    def metric(self, name: str, **labels: str) -> float:
        return metric_sum(self.metrics(), name, **labels)

    def ready(self) -> bool:
        try:
            return self._get("/readyz").status_code == 200
        except httpx.HTTPError:
            return False


def webhook_decisions(webhook: Process, namespace: str) -> list[dict[str, Any]]:
    """The JSON log records of a webhook's admission decisions about pods in `namespace`."""
    records = []
    for line in webhook.log_lines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and "decision" in record and record.get("namespace") == namespace:
            records.append(record)
    return records


def render_webhook_configuration(
    url: str, ca_bundle: str, template: str | Path = WEBHOOK_CONFIG_DIR / "local-url.yaml"
) -> dict:
    """webhook-config/local-url.yaml rendered by webhook-config/render.py, as the docs say to."""
    import yaml

    proc = subprocess.run(
        [
            sys.executable,
            str(WEBHOOK_CONFIG_DIR / "render.py"),
            str(template),
            f"WEBHOOK_URL={url}",
            f"CA_BUNDLE={ca_bundle}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if proc.returncode != 0:
        raise AssertionError(f"render.py failed (exit {proc.returncode}): {proc.stderr}")
    return yaml.safe_load(proc.stdout)


def register_webhook(
    kube, url: str, ca_bundle: str, name: str | None = None, namespaces: list[str] | None = None
) -> str:
    """Create the MutatingWebhookConfiguration for a webhook at `url`; return its name.

    `name` replaces the template's `workload-resizer` (so a test does not clobber
    someone else's registration); `namespaces` limits the webhook to those
    namespaces (so it does not stamp other tests' pods). Undo with
    unregister_webhook(kube, name).
    """
    config = render_webhook_configuration(url, ca_bundle)
    if name:
        config["metadata"]["name"] = name
    if namespaces is not None:
        for hook in config["webhooks"]:
            hook["namespaceSelector"] = {
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": list(namespaces)}
                ]
            }
    name = config["metadata"]["name"]
    kube.delete(f"{MUTATING_WEBHOOKS}/{name}")
    kube.create(MUTATING_WEBHOOKS, config)
    return name


def unregister_webhook(kube, name: str = "workload-resizer") -> None:
    kube.delete(f"{MUTATING_WEBHOOKS}/{name}")


def webhook_probe_pod(namespace: str) -> dict:
    """A pod the webhook stamps (controlled by a ReplicaSet), for dry-run admission probes."""
    import uuid

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "webhook-probe-",
            "namespace": namespace,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "webhook-probe",
                    "uid": str(uuid.uuid4()),
                    "controller": True,
                }
            ],
        },
        "spec": {
            "containers": [
                {"name": "probe", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "100m"}}}
            ]
        },
    }


def wait_webhook_active(kube, namespace: str, timeout: float = 30) -> None:
    """Wait until the apiserver calls the webhook for pods in `namespace`.

    Creates a probe pod with dryRun=All (nothing is stored) until the answer
    carries the original-* annotation the webhook stamps.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = kube.request(
            "POST", f"/api/v1/namespaces/{namespace}/pods", webhook_probe_pod(namespace), params={"dryRun": "All"}
        )
        if "workload-resizer.io/original-cpu.probe" in (pod["metadata"].get("annotations") or {}):
            return
        time.sleep(0.3)
    raise AssertionError(f"the apiserver did not call the webhook for namespace {namespace} within {timeout}s")


def wait_webhook_inactive(kube, namespace: str, timeout: float = 30) -> None:
    """Wait until the apiserver no longer calls the webhook for pods in `namespace`
    (its configuration informer has seen the unregistration).

    A dry-run probe pod must come back without the original-* annotation; a probe the
    apiserver refuses (a webhook with failurePolicy Fail that is already gone) counts
    as "not yet".
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            pod = kube.request(
                "POST", f"/api/v1/namespaces/{namespace}/pods", webhook_probe_pod(namespace), params={"dryRun": "All"}
            )
        except ApiError:
            pod = None
        if pod is not None and "workload-resizer.io/original-cpu.probe" not in (
            pod["metadata"].get("annotations") or {}
        ):
            return
        time.sleep(0.3)
    raise AssertionError(f"the apiserver still calls the webhook for namespace {namespace} after {timeout}s")
