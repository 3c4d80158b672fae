"""The chart's RBAC, installed for real, and credentials of its ServiceAccounts.

    tokens = install_rbac(cluster.kube, ensure_helm(), namespace)
    names = chart_names(namespace)            # the objects' names, e.g. names["config"]
    kubeconfig = kubeconfig_for_token(cluster, tokens["reconciler"])
    # then: python -m reconciler --kubeconfig <kubeconfig> --config-namespace <namespace>
    #         --config-name names["config"] --leader-election-id names["lease"] ...

install_rbac renders chart/ with `helm template` for `namespace` and applies only the
ServiceAccounts, (Cluster)Roles, (Cluster)RoleBindings, the ValidatingAdmissionPolicies
with their bindings (limited to `namespace` by a namespaceSelector, so they judge only
this test's pods) and, unless with_config=False, the config ConfigMap. The cluster-scoped ClusterRole and ClusterRoleBinding are named
after the namespace (fullname wr-<hash of namespace>), so tests in parallel
namespaces never share them, and they are owned by the Namespace object: deleting the
namespace garbage-collects them (uninstall_rbac deletes them at once).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from devkit.chart import render
from devkit.kube import Kube
from devkit.tempdirs import temporary_directory

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
ADMISSION = "/apis/admissionregistration.k8s.io/v1"
TEST_LABEL = "workload-resizer.io/test-namespace"


def default_fullname(namespace: str) -> str:
    return "wr-" + hashlib.sha256(namespace.encode()).hexdigest()[:10]


def chart_names(namespace: str, fullname: str | None = None) -> dict[str, str]:
    """Names of the chart's objects for install_rbac(..., namespace, fullname)."""
    base = fullname or default_fullname(namespace)
    return {
        "fullname": base,
        "namespace": namespace,
        "reconciler": f"{base}-reconciler",  # ServiceAccount, (Cluster)Role(Binding), Deployment
        "webhook": f"{base}-webhook",  # ServiceAccount, Service, Deployment
        "config": f"{base}-config",  # ConfigMap (key config.yaml)
        "lease": f"{base}-reconciler",  # leader-election Lease
    }


def install_rbac(
    kube: Kube,
    helm: str,
    namespace: str,
    *,
    fullname: str | None = None,
    values: dict[str, Any] | None = None,
    with_config: bool = True,
    with_policy: bool = True,
    token_seconds: int = 3600,
) -> dict[str, str]:
    """Install the chart's RBAC (and config ConfigMap) into `namespace`; return a bearer token
    per ServiceAccount, keyed by component: {"reconciler": ..., "webhook": ...}."""
    names = chart_names(namespace, fullname)
    merged: dict[str, Any] = {
        "fullnameOverride": names["fullname"],
        "tls": {"mode": "helm"},
        "commonLabels": {TEST_LABEL: namespace},
        # The tests' pods live in the release namespace, which the chart's
        # scope always excludes: the policy confines resizes to it only when
        # a test asks for it (values).
        "admissionPolicy": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "confineResizesToScope": False,
        },
    }
    merged.update(values or {})
    docs = render(helm, namespace=namespace, values=merged)
    kinds = set(RBAC_KINDS) | ({"ConfigMap"} if with_config else set()) | (set(POLICY_KINDS) if with_policy else set())
    ns_obj = kube.get(f"/api/v1/namespaces/{namespace}")
    owner = {"apiVersion": "v1", "kind": "Namespace", "name": namespace, "uid": ns_obj["metadata"]["uid"]}
    for doc in docs:
        if doc["kind"] not in kinds:
            continue
        if "namespace" not in doc["metadata"]:  # cluster-scoped: owned by the namespace
            doc["metadata"]["ownerReferences"] = [owner]
        kube.apply(doc, namespace)
    tokens = {}
    for component in ("reconciler", "webhook"):
        sa = names[component]
        resp = kube.create(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{sa}/token",
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": token_seconds},
            },
        )
        tokens[component] = resp["status"]["token"]
    return tokens


def uninstall_rbac(kube: Kube, namespace: str) -> None:
    """Delete the cluster-scoped objects install_rbac made for `namespace` (the namespaced
    ones go with the namespace)."""
    selector = f"{TEST_LABEL}={namespace}"
    for path in (
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        f"{ADMISSION}/validatingadmissionpolicybindings",
        f"{ADMISSION}/validatingadmissionpolicies",
    ):
        for item in kube.get(path, labelSelector=selector)["items"]:
            kube.delete(f"{path}/{item['metadata']['name']}")


def kubeconfig_for_token(cluster: Any, token: str) -> str:
    """A kubeconfig file for the cluster (a conftest Cluster, or a kubeconfig path) that
    authenticates with `token`; returns its path."""
    source = Path(getattr(cluster, "kubeconfig", cluster))
    config = yaml.safe_load(source.read_text())
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    server = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    out = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": server}],
        "users": [{"name": "token", "user": {"token": token}}],
        "contexts": [{"name": "token", "context": {"cluster": "cluster", "user": "token"}}],
        "current-context": "token",
    }
    directory = temporary_directory("kubeconfig-token-")
    path = directory / "kubeconfig"
    path.write_text(json.dumps(out, indent=2))
    path.chmod(0o600)
    return str(path)


def tenant_kubeconfig(
    kube: Kube, cluster: Any, namespace: str, name: str = "tenant", rules: list[dict[str, Any]] | None = None
) -> str:
    """A tenant as docs/security.md defines one: a ServiceAccount of `namespace` with the built-in
    `edit` role there, plus `rules` (a Role of its own, e.g. pods/binding to schedule its pods);
    returns the path of a kubeconfig that authenticates as it (a TokenRequest token)."""
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}},
    )
    kube.create(
        f"{rbac}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"{name}-edit"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": subject,
        },
    )
    if rules:
        kube.create(
            f"{rbac}/roles",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": f"{name}-extra"},
                "rules": rules,
            },
        )
        kube.create(
            f"{rbac}/rolebindings",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"{name}-extra"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{name}-extra"},
                "subjects": subject,
            },
        )
    token = kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )
    return kubeconfig_for_token(cluster, token["status"]["token"])


__all__ = ["install_rbac", "uninstall_rbac", "kubeconfig_for_token", "chart_names", "tenant_kubeconfig"]
