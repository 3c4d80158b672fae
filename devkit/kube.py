"""A small synchronous Kubernetes API client for tests, benchmarks and the demo.

Deliberately independent of the product's own API client, so tests do not
check our code with our code. Raw JSON in and out; paths are explicit.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import ssl
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml

T = TypeVar("T")

PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}


class ApiError(RuntimeError):
    def __init__(self, status: int, body: dict[str, Any]) -> None:
        self.status = status
        self.body = body
        self.reason = body.get("reason", "")
        super().__init__(f"HTTP {status}: {body.get('message', body)}")


def _materialise(data: str, suffix: str, directory: Path) -> str:
    path = directory / suffix
    path.write_bytes(base64.b64decode(data))
    path.chmod(0o600)
    return str(path)


class Kube:
    """Admin access to one cluster, from a kubeconfig with embedded client certs or a token."""

    def __init__(self, kubeconfig: str | Path, token: str | None = None) -> None:
        self.kubeconfig = str(kubeconfig)
        config = yaml.safe_load(Path(kubeconfig).read_text())
        context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        self.server = cluster["server"]
        headers = {"Accept": "application/json"}
        # The SSLContext reads the PEM files at once; the key material is not left on disk.
        with tempfile.TemporaryDirectory(prefix="kube-test-") as tmp:
            directory = Path(tmp)
            tls = ssl.create_default_context(
                cafile=_materialise(cluster["certificate-authority-data"], "ca.crt", directory)
            )
            if token is not None:
                headers["Authorization"] = f"Bearer {token}"
            elif "token" in user:
                headers["Authorization"] = f"Bearer {user['token']}"
            else:
                tls.load_cert_chain(
                    _materialise(user["client-certificate-data"], "tls.crt", directory),
                    _materialise(user["client-key-data"], "tls.key", directory),
                )
        self.tls = tls
        self.http = httpx.Client(base_url=self.server, verify=tls, headers=headers, timeout=30)

    def own_connections(self) -> Kube:
        """The same access through connections of its own, for a thread that reads a stream.

        Only the reading thread may close its sockets: a socket closed under it frees its
        descriptor number while OpenSSL goes on reading that number, and the next pipe or file
        opened anywhere in the process takes it (its bytes then go to the thread)."""
        twin = copy.copy(self)
        twin.http = httpx.Client(
            base_url=self.server, verify=self.tls, headers=self.http.headers, timeout=self.http.timeout
        )
        return twin

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        params: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        content = json.dumps(body).encode() if body is not None else None
        resp = self.http.request(
            method,
            path,
            content=content,
            params=params,
            headers={"Content-Type": content_type} if content is not None else None,
        )
        payload = resp.json() if resp.content else {}
        if resp.status_code >= 300:
            raise ApiError(resp.status_code, payload)
        return payload

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        return self.request("GET", path, params=params or None)

    def create(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", path, obj)

    def patch(self, path: str, patch: Any, kind: str = "merge") -> dict[str, Any]:
        return self.request("PATCH", path, patch, content_type=PATCH_TYPES[kind])

    def delete(self, path: str, missing_ok: bool = True, **params: Any) -> dict[str, Any]:
        try:
            return self.request("DELETE", path, params=params or None)
        except ApiError as err:
            if missing_ok and err.status == 404:
                return {}
            raise

    def apply_yaml(self, text: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Create (or replace by merge patch) every document, as a tiny `kubectl apply`."""
        created = []
        for doc in yaml.safe_load_all(text):
            if doc:
                created.append(self.apply(doc, namespace))
        return created

    def apply(self, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        collection = collection_path(obj, namespace)
        try:
            return self.create(collection, obj)
        except ApiError as err:
            if err.status != 409:
                raise
            return self.patch(f"{collection}/{obj['metadata']['name']}", obj, "merge")

    # ---- pods and events

    def pods(self, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        params = {"labelSelector": selector} if selector else {}
        return self.get(f"/api/v1/namespaces/{namespace}/pods", **params)["items"]

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.get(f"/api/v1/namespaces/{namespace}/pods/{name}")

    def events_for(self, namespace: str, name: str, kind: str = "Pod") -> list[dict[str, Any]]:
        selector = f"involvedObject.name={name},involvedObject.kind={kind}"
        return self.get(f"/api/v1/namespaces/{namespace}/events", fieldSelector=selector)["items"]

    def resize(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.patch(f"/api/v1/namespaces/{namespace}/pods/{name}/resize", patch, "strategic")


def collection_path(obj: dict[str, Any], namespace: str | None) -> str:
    api_version = obj["apiVersion"]
    plural = PLURALS[obj["kind"]]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    ns = obj.get("metadata", {}).get("namespace", namespace)
    if plural in CLUSTER_SCOPED:
        return f"{base}/{plural}"
    return f"{base}/namespaces/{ns}/{plural}"


PLURALS = {
    "Namespace": "namespaces",
    "Node": "nodes",
    "Pod": "pods",
    "ConfigMap": "configmaps",
    "Secret": "secrets",
    "Service": "services",
    "ServiceAccount": "serviceaccounts",
    "Deployment": "deployments",
    "ReplicaSet": "replicasets",
    "StatefulSet": "statefulsets",
    "DaemonSet": "daemonsets",
    "Job": "jobs",
    "Role": "roles",
    "RoleBinding": "rolebindings",
    "ClusterRole": "clusterroles",
    "ClusterRoleBinding": "clusterrolebindings",
    "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
    "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "Lease": "leases",
    "LimitRange": "limitranges",
    "ResourceQuota": "resourcequotas",
    "NetworkPolicy": "networkpolicies",
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    "Issuer": "issuers",
    "Certificate": "certificates",  # cert-manager.io
    "CustomResourceDefinition": "customresourcedefinitions",
    "PrometheusRule": "prometheusrules",
    "PodMonitor": "podmonitors",  # monitoring.coreos.com
}
CLUSTER_SCOPED = {
    "namespaces",
    "nodes",
    "clusterroles",
    "clusterrolebindings",
    "customresourcedefinitions",
    "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
}


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 60, interval: float = 0.25) -> T:
    """Poll check() until it returns something truthy; fail with `what` after timeout."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            result = check()
        except ApiError as err:  # e.g. a 404 while an object is being created
            last_error, result = err, None
        if result:
            return result
        time.sleep(interval)
    raise AssertionError(
        f"timed out after {timeout:.0f}s waiting for {what}" + (f" (last error: {last_error})" if last_error else "")
    )


def deployment(
    name: str,
    replicas: int,
    containers: list[dict[str, Any]],
    node_selector: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Deployment manifest whose pods carry app=<name>."""
    pod_labels = {"app": name, **(labels or {})}
    spec: dict[str, Any] = {"containers": containers, "terminationGracePeriodSeconds": 0}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": pod_labels, "annotations": annotations or {}}, "spec": spec},
        },
    }


def container(
    name: str,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    resize_policy: dict[str, str] | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    c: dict[str, Any] = {"name": name, "image": "registry.k8s.io/pause:3.10", "resources": resources}
    if resize_policy:
        c["resizePolicy"] = [{"resourceName": r, "restartPolicy": p} for r, p in resize_policy.items()]
    return c


CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


@contextlib.contextmanager
def installed_crd(kube: Kube, crd: dict[str, Any]) -> Iterator[None]:
    """The CustomResourceDefinition served for the block, and removed after it: a test leaves
    none behind (a VerticalPodAutoscaler CRD left installed changes what the next test's
    reconciler watches and waits for)."""
    install_crd(kube, crd)
    try:
        yield
    finally:
        remove_crd(kube, crd["metadata"]["name"])


def remove_crd(kube: Kube, name: str) -> None:
    """Delete a CustomResourceDefinition and wait until the apiserver no longer has it."""
    path = f"{CRDS}/{name}"
    kube.delete(path)

    def gone() -> bool:
        try:
            kube.get(path)
        except ApiError as err:
            if err.status == 404:
                return True
            raise
        return False

    wait_for(f"CRD {name} removed", gone, timeout=60)


def install_crd(kube: Kube, crd: dict[str, Any]) -> None:
    """Create a CustomResourceDefinition and wait until the apiserver serves it (Established).
    One already there (an earlier test of the session installed the same manifest) is kept."""
    try:
        kube.create(CRDS, crd)
    except ApiError as err:
        if err.status != 409:
            raise
    path = f"{CRDS}/{crd['metadata']['name']}"
    wait_for(
        f"CRD {crd['metadata']['name']} established",
        lambda: any(  # null until the apiserver sets them
            c["type"] == "Established" and c["status"] == "True"
            for c in (kube.get(path).get("status") or {}).get("conditions") or []
        ),
        timeout=30,
    )
