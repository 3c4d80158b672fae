"""The chart as `helm template` renders it, applied to a hack/cluster, with its two programs run
as local processes with the arguments the chart gives them.

    chart = LocalChart(kube, kubeconfig, release_namespace)    # renders the chart (its defaults)
    chart.apply()                        # RBAC, the config ConfigMap, the admission policies
    reconciler = chart.start_reconciler()    # creates the originals keys Secret
    webhook = chart.start_webhook()          # its keys projected from that Secret
    chart.register(webhook)              # the chart's MutatingWebhookConfiguration, pointed at it
    ...
    chart.close()

Only what must differ outside a pod differs from the rendered Deployments:
- credentials: --kubeconfig with a TokenRequest token of the chart's ServiceAccount (in a pod:
  the mounted token), so the apiserver sees the identities the chart's RBAC and admission
  policies name (`system:serviceaccount:<namespace>:<fullname>-reconciler`);
- listen addresses and ports (127.0.0.1, free ports), and the serving certificate's paths;
- the originals keys' path: a directory a SecretProjection keeps equal to the keys Secret, as
  the kubelet does for the webhook's (optional) Secret volume;
- POD_NAME and POD_NAMESPACE (in a pod: the downward API);
- the webhook configuration's clientConfig: the local URL and its CA instead of the Service,
  and no cert-manager CA injection (nothing here issues a certificate).
The Deployments, the Service, PodDisruptionBudgets, NetworkPolicies and cert-manager objects
are about pods that do not exist here: they are not applied.
"""

from __future__ import annotations

import base64
import os
import sys
import threading
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from devkit.chart import container_args, ensure_helm, find, render
from devkit.kube import ApiError, Kube, collection_path, wait_for
from devkit.processes import Process, Reconciler, Webhook, WebhookCerts, free_port
from devkit.rbac import POLICY_KINDS, RBAC_KINDS, kubeconfig_for_token
from devkit.tempdirs import temporary_directory

APPLIED_KINDS = frozenset({*RBAC_KINDS, *POLICY_KINDS, "ConfigMap", "MutatingWebhookConfiguration"})


def with_flags(args: list[str], replace: Mapping[str, str], add: Mapping[str, str] | None = None) -> list[str]:
    """`args` with the values of the flags in `replace` replaced (each must be there) and the
    flags in `add` appended (none may be there already)."""
    present = {a.split("=", 1)[0] for a in args}
    missing = set(replace) - present
    assert not missing, f"the chart's args have no {sorted(missing)}: {args}"
    twice = set(add or {}) & present
    assert not twice, f"the chart's args already set {sorted(twice)}: {args}"
    out = [f"{a.split('=', 1)[0]}={replace[a.split('=', 1)[0]]}" if a.split("=", 1)[0] in replace else a for a in args]
    return out + [f"{flag}={value}" for flag, value in (add or {}).items()]


def flag_value(args: list[str], flag: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"{flag}=")]
    return value


class ChartReconciler(Reconciler):
    """`python -m reconciler` with the chart's args; its listen addresses and credentials local."""

    def __init__(self, args: list[str], kubeconfig: str, namespace: str, name: str = "reconciler") -> None:
        assert args[0] == "reconciler", args
        self.metrics_port, self.health_port = free_port(), free_port()
        argv = [
            sys.executable,
            "-m",
            *with_flags(
                args,
                {
                    "--metrics-bind-address": f"127.0.0.1:{self.metrics_port}",
                    "--health-probe-bind-address": f"127.0.0.1:{self.health_port}",
                },
                {"--kubeconfig": kubeconfig},
            ),
        ]
        Process.__init__(self, name, argv, {"POD_NAME": f"{name}-{uuid.uuid4().hex[:5]}", "POD_NAMESPACE": namespace})


class ChartWebhook(Webhook):
    """`python -m app` with the chart's args; its listen address, certificate, keys and credentials local."""

    def __init__(
        self,
        args: list[str],
        kubeconfig: str,
        namespace: str,
        key_dir: Path,
        name: str = "webhook",
        certs: WebhookCerts | None = None,
        port: int | None = None,
    ) -> None:
        assert args[0] == "app", args
        self.certs, self.port = certs or WebhookCerts(), port or free_port()
        argv = [
            sys.executable,
            "-m",
            *with_flags(
                args,
                {
                    "--bind-address": "127.0.0.1",
                    "--port": str(self.port),
                    "--tls-cert-file": self.certs.cert_file,
                    "--tls-key-file": self.certs.key_file,
                    "--originals-key-dir": str(key_dir),
                },
                {"--kubeconfig": kubeconfig},
            ),
        ]
        Process.__init__(self, name, argv, {"POD_NAME": f"{name}-{uuid.uuid4().hex[:5]}", "POD_NAMESPACE": namespace})


class SecretProjection:
    """A directory kept equal to a Secret's data, as the kubelet keeps a Secret volume that is
    `optional: true` (empty while the Secret does not exist); polled every `interval` seconds."""

    def __init__(self, kubeconfig: str, namespace: str, name: str, interval: float = 0.5) -> None:
        self.path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
        self.directory = temporary_directory("projected-secret-")
        self.interval = interval
        self.data: dict[str, bytes] = {}
        self.error: str | None = None
        self._kube = Kube(kubeconfig)  # a connection of its own, used by the thread only
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"projection-{name}", daemon=True)
        self._thread.start()

    def _read(self) -> dict[str, bytes]:
        try:
            secret = self._kube.get(self.path)
        except ApiError as err:
            if err.status == 404:
                return {}
            raise
        return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}

    def _write(self, data: dict[str, bytes]) -> None:
        for name, value in data.items():
            if self.data.get(name) != value:
                staged = self.directory / f".{name}.new"  # dot files are not keys (ops.keys)
                staged.write_bytes(value)
                staged.chmod(0o600)
                os.replace(staged, self.directory / name)
        for name in set(self.data) - set(data):
            (self.directory / name).unlink()
        self.data = data

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._read()
                if data != self.data:
                    self._write(data)
                self.error = None
            except Exception as err:  # the apiserver restarting: try again, as the kubelet does
                self.error = repr(err)
            self._stop.wait(self.interval)

    def wait_for(self, what: str, check: Any, timeout: float = 30) -> None:
        """Until check(data) holds for the projected data."""
        wait_for(
            f"the projected Secret to hold {what} (last error: {self.error})",
            lambda: check(dict(self.data)),
            timeout=timeout,
            interval=0.1,
        )

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._kube.http.close()


class LocalChart:
    def __init__(self, kube: Kube, kubeconfig: str, namespace: str, values: dict[str, Any] | None = None) -> None:
        self.kube, self.kubeconfig, self.ns = kube, kubeconfig, namespace
        self.helm = ensure_helm()
        self.docs = render(self.helm, namespace=namespace, values=values)
        self.fullname = find(self.docs, "MutatingWebhookConfiguration")["metadata"]["name"]
        self.processes: list[Process] = []
        self.projection: SecretProjection | None = None
        self._applied: list[str] = []  # paths of the cluster-scoped objects, deleted by close()
        self._owner: list[dict[str, str]] = []

    # ---- what the chart renders

    def deployment(self, component: str) -> dict[str, Any]:
        return find(self.docs, "Deployment", f"{self.fullname}-{component}")

    def args(self, component: str) -> list[str]:
        return container_args(self.docs, f"{self.fullname}-{component}")

    def username(self, component: str) -> str:
        """The identity the apiserver sees for the component's ServiceAccount."""
        account = self.deployment(component)["spec"]["template"]["spec"]["serviceAccountName"]
        return f"system:serviceaccount:{self.ns}:{account}"

    @property
    def keys_secret(self) -> tuple[str, str]:
        namespace, name = flag_value(self.args("reconciler"), "--originals-keys-secret").split("/")
        return namespace, name

    def config_map(self, values: dict[str, Any] | None = None) -> dict[str, Any]:
        """The config ConfigMap the chart renders with `values` (a config edit through the chart)."""
        docs = self.docs if values is None else render(self.helm, namespace=self.ns, values=values)
        return find(docs, "ConfigMap", flag_value(self.args("reconciler"), "--config-name"))

    # ---- installing

    def apply(self) -> None:
        """The RBAC, the config ConfigMap and the admission policies with their bindings, as
        rendered. Cluster-scoped objects are owned by the release namespace: deleting it
        garbage-collects them whatever happens to this process."""
        namespace = self.kube.get(f"/api/v1/namespaces/{self.ns}")["metadata"]
        self._owner = [{"apiVersion": "v1", "kind": "Namespace", "name": self.ns, "uid": namespace["uid"]}]
        for doc in self.docs:
            if doc["kind"] in APPLIED_KINDS - {"MutatingWebhookConfiguration"}:
                self._apply(doc)

    def _apply(self, doc: dict[str, Any]) -> None:
        if "namespace" not in doc["metadata"]:
            doc = {**doc, "metadata": {**doc["metadata"], "ownerReferences": self._owner}}
            path = f"{collection_path(doc, None)}/{doc['metadata']['name']}"
            if path not in self._applied:
                self._applied.append(path)
        self.kube.apply(doc, self.ns)

    def token_kubeconfig(self, component: str) -> str:
        """A kubeconfig authenticating as the component's ServiceAccount (a TokenRequest token)."""
        account = self.deployment(component)["spec"]["template"]["spec"]["serviceAccountName"]
        token = self.kube.create(
            f"/api/v1/namespaces/{self.ns}/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
        )
        return kubeconfig_for_token(self.kubeconfig, token["status"]["token"])

    def start_reconciler(self, name: str = "reconciler") -> ChartReconciler:
        proc = ChartReconciler(self.args("reconciler"), self.token_kubeconfig("reconciler"), self.ns, name=name)
        self.processes.append(proc)
        proc.wait_ready()
        return proc

    def project_keys(self) -> SecretProjection:
        """The keys Secret as the kubelet projects it into the webhook's volume."""
        if self.projection is None:
            self.projection = SecretProjection(self.kubeconfig, *self.keys_secret)
        return self.projection

    def start_webhook(self, name: str = "webhook", replacing: ChartWebhook | None = None) -> ChartWebhook:
        """The webhook, its keys directory the projection of the keys Secret (the chart mounts it);
        `replacing`: a webhook to stop first, whose address and certificate the new one takes."""
        if replacing is not None:
            replacing.terminate()
        proc = ChartWebhook(
            self.args("webhook"),
            self.token_kubeconfig("webhook"),
            self.ns,
            self.project_keys().directory,
            name=name,
            certs=replacing.certs if replacing else None,
            port=replacing.port if replacing else None,
        )
        self.processes.append(proc)
        proc.wait_ready()
        return proc

    def webhook_configuration(self, webhook: ChartWebhook) -> dict[str, Any]:
        config = find(self.docs, "MutatingWebhookConfiguration")
        local = {**config, "metadata": {k: v for k, v in config["metadata"].items() if k != "annotations"}}
        local["webhooks"] = [
            {**hook, "clientConfig": {"url": webhook.url, "caBundle": webhook.certs.ca_bundle}}
            for hook in config["webhooks"]
        ]
        return local

    def register(self, webhook: ChartWebhook) -> None:
        self._apply(self.webhook_configuration(webhook))

    def close(self) -> None:
        for path in reversed(self._applied):
            self.kube.delete(path)
        for proc in self.processes:
            proc.terminate()
            proc.close()
        if self.projection is not None:
            self.projection.close()
