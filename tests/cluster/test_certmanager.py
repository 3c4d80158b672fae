"""Real cert-manager issues, injects and rotates the webhook's serving certificate.

End to end against the local control plane (hack/cluster) with cert-manager's
controller and CA injector built from Go modules and run by
hack/certmanager/run (the first build takes several minutes):

* hack/certmanager/webhook-certificates.yaml (selfSigned Issuer -> CA
  Certificate -> CA Issuer -> serving Certificate with the webhook's Service
  DNS names and IP SAN 127.0.0.1) becomes Ready;
* the issued Secret is laid out like a kubelet Secret volume (``..data``
  symlink to a timestamped directory) and the real webhook (``python -m app``)
  serves it on 127.0.0.1;
* webhook-config/cert-manager.yaml, pointed at that URL and WITHOUT a caBundle,
  gets its caBundle from the cainjector (cert-manager.io/inject-ca-from), and
  the apiserver then calls the webhook over TLS for a Deployment's pod, which
  arrives stamped with the original-* annotations;
* a re-issuance (what ``cmctl renew`` does: Issuing=True on the status) changes
  the Secret; re-projected the kubelet way, the running webhook presents the
  new certificate on new handshakes, without a restart, and keeps stamping.

The cluster is shared, so the webhook configuration only matches this test's
pod namespace, and it is always deleted (and the webhook stopped) at the end.
"""

from __future__ import annotations

import base64
import datetime as dt
import os
import socket
import ssl
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cryptography import x509

from devkit.cluster import cluster_dir_for_tests
from devkit.kube import ApiError, Kube, container, deployment, wait_for
from devkit.processes import Process, free_port, webhook_decisions
from devkit.progress import run_visible
from resizer import original_key

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "hack" / "certmanager" / "run"
CERTIFICATES = REPO / "hack" / "certmanager" / "webhook-certificates.yaml"
WEBHOOK_CONFIG = REPO / "webhook-config" / "cert-manager.yaml"
STATE = cluster_dir_for_tests()

CM = "/apis/cert-manager.io/v1"
CERT = "workload-resizer-webhook"
SECRET = "workload-resizer-webhook-tls"
NODE = "cm-node"

# The first test builds cert-manager (several minutes on a cold Go build cache) in its setup.
pytestmark = pytest.mark.timeout(1800)


# --------------------------------------------------------------------------- cert-manager


@pytest.fixture(scope="session")
def cert_manager(cluster: Any) -> None:
    """cert-manager running against the test cluster (installed if needed, an install is reused).

    It is left running, like the cluster: other sessions sharing the cluster may be
    using it, and its processes exit by themselves when `hack/cluster down` removes
    the state directory holding their configuration (--exit-if-config-removed).
    """
    build = run_visible([str(RUN), "build"])
    if build.returncode != 0:
        pytest.fail(f"hack/certmanager/run build failed (exit {build.returncode})")
    install = run_visible([str(RUN), "install"])
    if install.returncode != 0:
        pytest.fail(f"hack/certmanager/run install failed (exit {install.returncode})")


def cert_manager_logs(lines: int = 60) -> str:
    out = []
    for name in ("cert-manager-controller", "cert-manager-cainjector"):
        path = STATE / "certmanager" / "logs" / f"{name}.log"
        text = path.read_text(errors="replace").splitlines() if path.exists() else ["(no log)"]
        out.append(f"===== {name}: last {min(lines, len(text))} lines\n" + "\n".join(text[-lines:]))
    return "\n".join(out)


# --------------------------------------------------------------------------- a kubelet-style Secret volume


class SecretVolume:
    """A directory laid out like the kubelet's projection of a Secret (its AtomicWriter).

    ``<dir>/..2025_01_02_03_04_05.123456789/`` holds the files, ``<dir>/..data`` is a
    symlink to it, and every key is a symlink ``<dir>/<key> -> ..data/<key>``. An
    update writes a new timestamped directory and renames a fresh ``..data_tmp``
    symlink over ``..data`` (atomic), then removes the old directory.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def project(self, data: dict[str, bytes]) -> None:
        now = dt.datetime.now(dt.timezone.utc)
        stamp = self.root / f"..{now:%Y_%m_%d_%H_%M_%S}.{time.time_ns() % 1_000_000_000:09d}"
        stamp.mkdir(mode=0o755)
        for key, value in data.items():
            (stamp / key).write_bytes(value)
            (stamp / key).chmod(0o644)
        old = (self.root / "..data").resolve() if (self.root / "..data").exists() else None
        tmp = self.root / "..data_tmp"
        if tmp.is_symlink():
            tmp.unlink()
        tmp.symlink_to(stamp.name)
        os.replace(tmp, self.root / "..data")
        for key in data:
            link = self.root / key
            if not link.is_symlink():
                link.symlink_to(f"..data/{key}")
        if old is not None and old != stamp:
            for child in old.iterdir():
                child.unlink()
            old.rmdir()


# --------------------------------------------------------------------------- helpers


def secret_data(kube: Kube, ns: str, name: str) -> dict[str, bytes]:
    secret = kube.get(f"/api/v1/namespaces/{ns}/secrets/{name}")
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def served_certificate(port: int, ca_file: Path) -> x509.Certificate:
    """The leaf presented on a fresh handshake with 127.0.0.1:port, verified against the CA and IP SAN."""
    ctx = ssl.create_default_context(cafile=str(ca_file))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def san(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    ext = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return ext.get_values_for_type(x509.DNSName), [str(ip) for ip in ext.get_values_for_type(x509.IPAddress)]


def make_namespace(kube: Kube, name: str) -> None:
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_for(
        f"default service account in {name}",
        lambda: kube.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
        timeout=30,
    )


@dataclass
class Stack:
    kube: Kube
    cert_ns: str  # the workload-resizer-system-like namespace
    pod_ns: str  # where workloads are admitted through the webhook
    volume: SecretVolume
    ca_file: Path
    webhook: Process
    port: int
    webhook_config: str

    def certificate(self) -> dict[str, Any]:
        return self.kube.get(f"{CM}/namespaces/{self.cert_ns}/certificates/{CERT}")

    def decisions(self) -> list[dict[str, Any]]:
        """The webhook's admission decision log records about this test's pods."""
        return webhook_decisions(self.webhook, self.pod_ns)

    def deploy(self, name: str) -> None:
        manifest = deployment(
            name,
            1,
            [container("app", requests={"cpu": "500m", "memory": "128Mi"}, limits={"cpu": "1", "memory": "256Mi"})],
            node_selector={"kubernetes.io/hostname": NODE},
        )
        self.kube.create(f"/apis/apps/v1/namespaces/{self.pod_ns}/deployments", manifest)

    def injected_bundle(self) -> bytes | None:
        """The caBundle cainjector put into every webhook of the configuration, once it has."""
        config = self.kube.get(
            f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{self.webhook_config}"
        )
        bundles = {base64.b64decode(h["clientConfig"].get("caBundle", "")) for h in config["webhooks"]}
        return bundles.pop() if len(bundles) == 1 and b"" not in bundles else None

    def admitted_through_webhook(self) -> bool:
        """A dry-run create of a ReplicaSet-owned pod comes back stamped: the apiserver has the
        injected caBundle and reaches the webhook over TLS (nothing is persisted)."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"probe-{uuid.uuid4().hex[:6]}",
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": "probe",
                        "uid": str(uuid.uuid4()),
                        "controller": True,
                    }
                ],
            },
            "spec": {"containers": [container("app", requests={"cpu": "100m"})]},
        }
        admitted = self.kube.request("POST", f"/api/v1/namespaces/{self.pod_ns}/pods", pod, params={"dryRun": "All"})
        return original_key("app", "cpu", "request") in (admitted["metadata"].get("annotations") or {})

    def stamped_pod(self, app: str) -> dict[str, Any]:
        """The pod of Deployment `app`, once it exists; it must carry the webhook's annotations."""
        pod = wait_for(
            f"a pod of Deployment {app}",
            lambda: next(iter(self.kube.pods(self.pod_ns, f"app={app}")), None),
            timeout=60,
        )
        annotations = pod["metadata"].get("annotations") or {}
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "ReplicaSet"
        assert annotations.get(original_key("app", "cpu", "request")) == "500m", (
            f"pod {pod['metadata']['name']} was not stamped by the webhook: annotations {annotations}\n"
            f"webhook decisions: {self.decisions()}\n{apiserver_webhook_errors(self.port)}"
        )
        assert annotations.get(original_key("app", "memory", "limit")) == "256Mi"
        # And *our* webhook stamped it (the cluster is shared): it logged the decision for this pod
        # (by generateName: the apiserver names the pod after admission).
        name = pod["metadata"]["name"]
        wait_for(
            f"the webhook's decision for pod {name} in its log",
            lambda: [
                d
                for d in self.decisions()
                if d.get("decision") == "patched" and d.get("pod") and name.startswith(d["pod"])
            ],
            timeout=10,
        )
        return pod


def apiserver_webhook_errors(port: int) -> str:
    """What the apiserver logged about calling our webhook's URL (why a pod went unstamped)."""
    path = STATE / "logs" / "kube-apiserver.log"
    if not path.exists():
        return ""
    needle = f"127.0.0.1:{port}/mutate"
    lines = [line for line in path.read_text(errors="replace").splitlines() if needle in line]
    return "apiserver log about the webhook:\n" + "\n".join(lines[-10:])


# --------------------------------------------------------------------------- the stack


@pytest.fixture(scope="module")
def stack(cluster: Any, cert_manager: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    kube: Kube = cluster.kube
    node_existed = True
    try:
        kube.get(f"/api/v1/nodes/{NODE}")
    except ApiError:
        node_existed = False
    cluster.ensure_node(NODE, family="n2d")
    suffix = uuid.uuid4().hex[:5]
    cert_ns, pod_ns = f"wr-system-{suffix}", f"cm-pods-{suffix}"
    webhook: Process | None = None
    webhook_config = f"workload-resizer-cm-{suffix}"
    try:
        for ns in (cert_ns, pod_ns):
            make_namespace(kube, ns)
        # 1. The issuer chain and the serving certificate, in the workload-resizer-system-like namespace.
        for doc in yaml.safe_load_all(CERTIFICATES.read_text().replace("workload-resizer-system", cert_ns)):
            plural = {"Issuer": "issuers", "Certificate": "certificates"}[doc["kind"]]
            kube.create(f"{CM}/namespaces/{cert_ns}/{plural}", doc)

        def ready() -> dict[str, Any] | None:
            crt = kube.get(f"{CM}/namespaces/{cert_ns}/certificates/{CERT}")
            return crt if condition(crt, "Ready").get("status") == "True" else None

        try:
            wait_for(f"Certificate {cert_ns}/{CERT} Ready", ready, timeout=180)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{cert_manager_logs()}") from None

        # 2. The issued Secret, projected like a kubelet Secret volume, served by the real webhook.
        tmp = tmp_path_factory.mktemp("cm-webhook")
        volume = SecretVolume(tmp / "tls")
        data = secret_data(kube, cert_ns, SECRET)
        volume.project(data)
        ca_file = tmp / "ca.crt"
        ca_file.write_bytes(data["ca.crt"])
        port = free_port()
        webhook = Process(
            "webhook",
            [
                sys.executable,
                "-m",
                "app",
                "--bind-address",
                "127.0.0.1",
                "--port",
                str(port),
                "--tls-cert-file",
                str(volume.root / "tls.crt"),
                "--tls-key-file",
                str(volume.root / "tls.key"),
                "--cert-reload-interval",
                "1s",
                "--size-at-admission=false",
            ],
        )

        def webhook_ready() -> bool:
            assert webhook is not None and webhook.alive, f"webhook exited:\n{webhook.logs()[-3000:]}"
            try:
                return (
                    httpx.get(
                        f"https://127.0.0.1:{port}/readyz",
                        verify=ssl.create_default_context(cafile=str(ca_file)),
                        timeout=2,
                    ).status_code
                    == 200
                )
            except httpx.HTTPError:
                return False

        wait_for("the webhook to serve the cert-manager certificate", webhook_ready, timeout=30)

        # 3. The shipped cert-manager webhook configuration, pointed at the local webhook, without a caBundle.
        config = yaml.safe_load(WEBHOOK_CONFIG.read_text())
        assert config["kind"] == "MutatingWebhookConfiguration"
        assert "cert-manager.io/inject-ca-from" in config["metadata"]["annotations"]
        config["metadata"]["name"] = webhook_config
        config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] = f"{cert_ns}/{CERT}"
        for hook in config["webhooks"]:
            assert "caBundle" not in hook["clientConfig"], "the cert-manager variant must leave caBundle to cainjector"
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}/mutate"}
            # Shared cluster: only this test's pods.
            hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": pod_ns}}
        kube.create("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations", config)
        stack = Stack(
            kube=kube,
            cert_ns=cert_ns,
            pod_ns=pod_ns,
            volume=volume,
            ca_file=ca_file,
            webhook=webhook,
            port=port,
            webhook_config=webhook_config,
        )

        # 4. cainjector fills the caBundle; the apiserver picks the configuration up.
        try:
            wait_for("cainjector to fill every caBundle", stack.injected_bundle, timeout=90)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{cert_manager_logs()}") from None
        try:
            wait_for("the apiserver to admit pods through the webhook", stack.admitted_through_webhook, timeout=30)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{apiserver_webhook_errors(port)}") from None
        yield stack
    finally:
        # Always, each step even if another fails: no webhook configuration may outlive the
        # test (it would send pods to a dead URL), and the webhook process is stopped.
        cleanup = [
            lambda: kube.delete(f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{webhook_config}")
        ]
        if webhook is not None:
            cleanup.append(lambda: stop_webhook(webhook))
        cleanup += [
            lambda: print(cert_manager_logs()),
            lambda: kube.delete(f"/api/v1/namespaces/{pod_ns}"),
            lambda: kube.delete(f"/api/v1/namespaces/{cert_ns}"),
        ]
        if not node_existed:
            cleanup.append(lambda: kube.delete(f"/api/v1/nodes/{NODE}"))
        for step in cleanup:
            try:
                step()
            except Exception as err:  # best effort: never hide the test's own failure
                print(f"cleanup step failed: {err!r}")


def stop_webhook(webhook: Process) -> None:
    try:
        webhook.terminate()
    finally:
        lines = webhook.log_lines()
        print(f"===== webhook (exit {webhook.proc.returncode}): last {min(80, len(lines))} of {len(lines)} lines")
        print("\n".join(lines[-80:]))
        webhook.close()


# --------------------------------------------------------------------------- tests


def test_cert_manager_issues_the_serving_certificate_from_its_own_ca(stack: Stack) -> None:
    crt = stack.certificate()
    assert condition(crt, "Ready")["status"] == "True"
    data = secret_data(stack.kube, stack.cert_ns, SECRET)
    leaf = x509.load_pem_x509_certificate(data["tls.crt"])
    ca = x509.load_pem_x509_certificate(data["ca.crt"])
    dns, ips = san(leaf)
    assert sorted(dns) == sorted(
        [f"workload-resizer-webhook.{stack.cert_ns}.svc", f"workload-resizer-webhook.{stack.cert_ns}.svc.cluster.local"]
    )
    assert ips == ["127.0.0.1"]
    assert leaf.issuer == ca.subject != leaf.subject
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert x509.ExtendedKeyUsageOID.SERVER_AUTH in leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    # And it is what the webhook serves (verified against the CA, for the IP SAN).
    assert served_certificate(stack.port, stack.ca_file).serial_number == leaf.serial_number


def test_cainjector_fills_the_ca_bundle_and_the_apiserver_calls_the_webhook_over_tls(stack: Stack) -> None:
    # The configuration was created without a caBundle (the fixture checks); cainjector put the CA in.
    assert stack.injected_bundle() == secret_data(stack.kube, stack.cert_ns, SECRET)["ca.crt"]

    stack.deploy("cm-app")
    stack.stamped_pod("cm-app")


def test_reissued_certificate_is_served_without_restarting_the_webhook(stack: Stack) -> None:
    kube = stack.kube
    before = secret_data(kube, stack.cert_ns, SECRET)
    old_serial = served_certificate(stack.port, stack.ca_file).serial_number
    assert old_serial == x509.load_pem_x509_certificate(before["tls.crt"]).serial_number
    revision = stack.certificate()["status"].get("revision", 0)
    pid = stack.webhook.proc.pid

    # What `cmctl renew` does: mark the Certificate as Issuing (status subresource).
    kube.patch(
        f"{CM}/namespaces/{stack.cert_ns}/certificates/{CERT}/status",
        [
            {
                "op": "add",
                "path": "/status/conditions/-",
                "value": {
                    "type": "Issuing",
                    "status": "True",
                    "reason": "ManuallyTriggered",
                    "message": "Certificate re-issuance manually triggered",
                    "lastTransitionTime": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                },
            }
        ],
        "json",
    )

    def reissued() -> dict[str, bytes] | None:
        data = secret_data(kube, stack.cert_ns, SECRET)
        return data if data["tls.crt"] != before["tls.crt"] else None

    try:
        after = wait_for("cert-manager to re-issue the Secret", reissued, timeout=120)
        wait_for(
            "the Certificate to be Ready at the next revision",
            lambda: (
                (crt := stack.certificate())["status"].get("revision", 0) > revision
                and condition(crt, "Ready").get("status") == "True"
                and not condition(crt, "Issuing")
            ),
            timeout=60,
        )
    except AssertionError as err:
        raise AssertionError(f"{err}\n{cert_manager_logs()}") from None
    new_leaf = x509.load_pem_x509_certificate(after["tls.crt"])
    assert new_leaf.serial_number != old_serial
    assert after["tls.key"] != before["tls.key"], "rotationPolicy: Always means a new private key"
    assert after["ca.crt"] == before["ca.crt"], "same CA, so the injected caBundle stays valid"

    # The kubelet re-projects the volume: new timestamped directory, atomic ..data swap.
    old_target = os.readlink(stack.volume.root / "..data")
    stack.volume.project(after)
    assert os.readlink(stack.volume.root / "..data") != old_target

    wait_for(
        "the webhook to present the re-issued certificate on a new handshake",
        lambda: served_certificate(stack.port, stack.ca_file).serial_number == new_leaf.serial_number,
        timeout=30,
    )
    assert stack.webhook.alive and stack.webhook.proc.pid == pid, "the webhook must not restart"

    # And the apiserver keeps getting its pods stamped through the rotated certificate.
    stack.deploy("cm-app-after-renewal")
    stack.stamped_pod("cm-app-after-renewal")
