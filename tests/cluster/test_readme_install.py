"""A newcomer can install from README.md: its Helm commands and values, run as written.

The fenced blocks README.md marks with ``<!-- readme-install: FILE -->`` (a file the admin
writes), ``<!-- readme-install -->`` (the install commands) and ``<!-- readme-uninstall -->``
are taken from README.md itself and run against the local cluster, from a directory holding
the values file and ``chart/`` as a checkout does. Only the binaries' paths (the pinned helm,
the cluster's kubectl, the package's admin command) and the kubeconfig (the test cluster's)
are supplied here; nothing is added to the commands but ``--dry-run`` for ``restore`` (it
would otherwise act on every pod of the shared test cluster, and exit 1 for another test's
leftovers; tests/cluster/test_restore_command.py proves restore itself).

cert-manager, which README lists as a requirement, is installed first (hack/certmanager/run
install, as tests/cluster/test_chart.py does). While the release exists, its webhook
configuration sees every namespace but the release's; it is removed at the end whatever
happens, so no later test session finds a foreign webhook.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devkit.chart import CHART, ensure_helm, find, helm_env, render
from devkit.kube import ApiError, Kube, collection_path, wait_for
from devkit.progress import run_visible
from devkit.rbac import kubeconfig_for_token
from kube import KubeClient, load_credentials
from reconciler.originals_keys import SecretKeys
from resizer.config import load_config

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
CERT_MANAGER_RUN = REPO / "hack" / "certmanager" / "run"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"

pytestmark = pytest.mark.timeout(1500)

_MARKED_BLOCK = re.compile(
    r"<!-- (readme-install|readme-uninstall)(?:: ([^ ]+))? -->\n```[a-z]*\n(.*?)\n```", re.DOTALL
)


def marked_blocks(text: str) -> tuple[dict[str, str], list[list[str]], list[list[str]]]:
    """README's marked blocks: files to write, install commands, uninstall commands."""
    files: dict[str, str] = {}
    commands: dict[str, list[list[str]]] = {"readme-install": [], "readme-uninstall": []}
    for kind, filename, body in _MARKED_BLOCK.findall(text):
        if filename:
            files[filename] = body + "\n"
        else:
            commands[kind] += shell_commands(body)
    return files, commands["readme-install"], commands["readme-uninstall"]


def shell_commands(block: str) -> list[list[str]]:
    """argv of each command of a sh block (backslash continuations joined, comments dropped)."""
    joined = re.sub(r"\\\n\s*", " ", block)
    return [argv for line in joined.splitlines() if (argv := shlex.split(line, comments=True))]


def test_readme_marks_the_install() -> None:
    files, install, uninstall = marked_blocks(README.read_text())
    assert "values.yaml" in files, "README.md marks no values block (<!-- readme-install: values.yaml -->)"
    assert [argv[:2] for argv in install] == [["helm", "install"]], install
    assert "values.yaml" in install[0], "the install command does not use the values README shows"
    steps = [argv[:2] for argv in uninstall]
    assert ["workload-resizer", "restore"] in steps and steps[-1] == ["helm", "uninstall"], uninstall
    restore = steps.index(["workload-resizer", "restore"])
    assert any(
        argv[:2] == ["kubectl", "-n"] and "scale" in argv and "--replicas=0" in argv for argv in uninstall[:restore]
    ), "README must stop the reconciler before restore"


def test_readme_values_render() -> None:
    """README's values pass the chart's schema and give a ConfigMap the reconciler accepts
    (helm template: no cluster needed, so a broken README fails fast)."""
    files, install, _ = marked_blocks(README.read_text())
    values = yaml.safe_load(files["values.yaml"])
    docs = render(ensure_helm(), namespace=_flag(install[0], "-n", "--namespace"), values=values)
    config = load_config(find(docs, "ConfigMap")["data"]["config.yaml"])
    assert set(config.node_types) == set(values["config"]["nodeTypes"])


def _flag(argv: list[str], *names: str) -> str:
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name:
                return argv[i + 1]
            if arg.startswith(f"{name}="):
                return arg.split("=", 1)[1]
    raise AssertionError(f"no {names} in {argv}")


def _cert_manager_installed(kube: Kube) -> bool:
    try:
        resources = kube.get("/apis/cert-manager.io/v1")["resources"]
    except (ApiError, ValueError):
        return False
    return {"issuers", "certificates"} <= {r["name"] for r in resources}


class Admin:
    """Runs README's commands as an admin would, in a checkout-like directory."""

    def __init__(self, cluster: Any, workdir: Path) -> None:
        self.workdir = workdir
        self.helm = ensure_helm()
        self.kubectl = str(Path(cluster.bin_dir) / "kubectl")
        self.env = {
            **helm_env(),
            "KUBECONFIG": cluster.kubeconfig,
            "PATH": f"{Path(sys.executable).parent}:{cluster.bin_dir}:{os.environ['PATH']}",
        }

    def run(self, argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        program = {
            "helm": self.helm,
            "kubectl": self.kubectl,
            "workload-resizer": str(Path(sys.executable).parent / "workload-resizer"),
        }
        assert argv[0] in program, f"README.md asks to run {argv[0]!r}, which this test does not know"
        proc = subprocess.run(
            [program[argv[0]], *argv[1:]], cwd=self.workdir, env=self.env, capture_output=True, text=True, timeout=600
        )
        if check:
            assert proc.returncode == 0, (
                f"`{shlex.join(argv)}` failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            )
        return proc


@pytest.fixture
def readme_release(
    cluster: Any, tmp_path: Path
) -> Iterator[tuple[Admin, dict[str, str], list[list[str]], list[list[str]]]]:
    files, install, uninstall = marked_blocks(README.read_text())
    release, namespace = install[0][2], _flag(install[0], "-n", "--namespace")
    kube: Kube = cluster.kube
    proc = run_visible([str(CERT_MANAGER_RUN), "install"])
    assert proc.returncode == 0, f"hack/certmanager/run install failed (exit {proc.returncode})"
    assert _cert_manager_installed(kube), "cert-manager's CRDs are missing after hack/certmanager/run install"

    (tmp_path / "chart").symlink_to(CHART)
    for name, content in files.items():
        (tmp_path / name).write_text(content)
    admin = Admin(cluster, tmp_path)

    def clean() -> None:
        admin.run(["helm", "uninstall", release, "-n", namespace, "--wait"], check=False)
        kube.delete(f"/api/v1/namespaces/{namespace}")
        wait_for(
            f"namespace {namespace} gone", lambda: not _exists(kube, f"/api/v1/namespaces/{namespace}"), timeout=180
        )

    clean()  # what an earlier, interrupted run may have left
    try:
        yield admin, files, install, uninstall
    finally:
        clean()
        assert not _webhook_configurations_of(kube, namespace), "the release's webhook configuration is left"


def _exists(kube: Kube, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError as err:
        if err.status == 404:
            return False
        raise
    return True


def _webhook_configurations_of(kube: Kube, namespace: str) -> list[str]:
    return [
        c["metadata"]["name"]
        for c in kube.get(WEBHOOKS)["items"]
        if any(
            h.get("clientConfig", {}).get("service", {}).get("namespace") == namespace for h in c.get("webhooks", [])
        )
    ]


def _object_path(doc: dict[str, Any], namespace: str) -> str:
    return f"{collection_path(doc, namespace)}/{doc['metadata']['name']}"


def test_install_as_the_readme_says(cluster: Any, readme_release: Any) -> None:
    admin, files, install, uninstall = readme_release
    kube: Kube = cluster.kube
    values = yaml.safe_load(files["values.yaml"])
    release, namespace = install[0][2], _flag(install[0], "-n", "--namespace")

    for argv in install:
        admin.run(argv)

    # Every object of the release exists.
    manifest = admin.run(["helm", "get", "manifest", release, "-n", namespace]).stdout
    docs = [d for d in yaml.safe_load_all(manifest) if d]
    kinds = {d["kind"] for d in docs}
    assert {
        "Deployment",
        "Service",
        "ConfigMap",
        "MutatingWebhookConfiguration",
        "ClusterRole",
        "Role",
        "Certificate",
        "Issuer",
        "ValidatingAdmissionPolicy",
        "NetworkPolicy",
    } <= kinds, kinds
    assert "Secret" not in kinds, "no key material in the release: the reconciler creates the keys Secret"
    for doc in docs:
        assert _exists(kube, _object_path(doc, namespace)), f"{doc['kind']} {doc['metadata']['name']} not created"

    # The ConfigMap holds README's config, and the reconciler's own parser accepts it.
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    live = kube.get(_object_path(cm, namespace))
    config = load_config(live["data"]["config.yaml"])
    assert config.baseline_node_type == values["config"]["baselineNodeType"]
    assert set(config.node_types) == set(values["config"]["nodeTypes"])
    assert yaml.safe_load(live["data"]["config.yaml"])["bounds"] == values["config"]["bounds"]

    # The image README points at.
    image = f"{values['image']['repository']}:{values['image']['tag']}"
    for deployment in (d for d in docs if d["kind"] == "Deployment"):
        live_deployment = kube.get(_object_path(deployment, namespace))
        assert [c["image"] for c in live_deployment["spec"]["template"]["spec"]["containers"]] == [image]

    # The webhook configuration is registered, pointing at the release's Service, and
    # cert-manager issued the serving certificate and injected its CA.
    (name,) = _webhook_configurations_of(kube, namespace)
    secret = wait_for(
        "cert-manager's serving certificate in the webhook's TLS Secret",
        lambda: _tls_secret(kube, namespace),
        timeout=120,
    )
    injected = wait_for(
        "the CA injected into the webhook configuration",
        lambda: kube.get(f"{WEBHOOKS}/{name}")["webhooks"][0].get("clientConfig", {}).get("caBundle"),
        timeout=120,
    )
    assert base64.b64decode(injected) == base64.b64decode(secret["data"]["ca.crt"])
    (hook,) = kube.get(f"{WEBHOOKS}/{name}")["webhooks"]
    assert hook["failurePolicy"] == "Ignore"
    assert hook["clientConfig"]["service"]["namespace"] == namespace

    # The reconciler's first start creates the keys Secret (here its code with its ServiceAccount:
    # the KWOK nodes run no container).
    keys_secret = _reconciler_first_start(cluster, kube, docs, namespace)

    # Uninstall as README says (restore only as a dry run: see the module's docstring). It
    # finds the release's originals keys by itself (the Secret the reconciler made), and says so.
    for argv in uninstall:
        if argv[0] != "workload-resizer":
            admin.run(argv)
            continue
        proc = admin.run([*argv, "--dry-run"], check=False)
        output = proc.stdout + proc.stderr
        assert "Summary:" in output and proc.returncode in (0, 1), output
        assert "warning:" not in output and "error:" not in output, output
    assert not _exists(kube, keys_secret), "README's uninstall leaves the reconciler's keys Secret behind"
    wait_for("the release's webhook configuration removed", lambda: not _webhook_configurations_of(kube, namespace))
    for doc in docs:
        if doc["kind"] in ("Deployment", "ClusterRole", "ValidatingAdmissionPolicy"):
            assert not _exists(kube, _object_path(doc, namespace)), f"{doc['kind']} left after helm uninstall"


def _reconciler_first_start(cluster: Any, kube: Kube, docs: list[dict[str, Any]], namespace: str) -> str:
    """Make the keys Secret as the reconciler's first start does; returns its API path."""
    (deployment,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-reconciler")]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    secret_namespace, secret_name = next(
        a.split("=", 1)[1] for a in args if a.startswith("--originals-keys-secret=")
    ).split("/")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    token = kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}},
    )

    async def ensure() -> None:
        client = KubeClient(
            load_credentials(kubeconfig_for_token(cluster, token["status"]["token"])), qps=0, burst=1, max_connections=1
        )
        try:
            await SecretKeys(client, secret_namespace, secret_name).ensure()
        finally:
            await client.close()

    asyncio.run(ensure())
    path = f"/api/v1/namespaces/{secret_namespace}/secrets/{secret_name}"
    (key_id,) = kube.get(path)["data"]
    assert key_id.startswith("k") and key_id != "k0001", "a generated id"
    return path


def _tls_secret(kube: Kube, namespace: str) -> dict[str, Any] | None:
    secrets = kube.get(f"/api/v1/namespaces/{namespace}/secrets")["items"]
    return next(
        (
            s
            for s in secrets
            if s.get("type") == "kubernetes.io/tls"
            and s["metadata"]["name"].endswith("-webhook-tls")
            and "ca.crt" in s.get("data", {})
        ),
        None,
    )
