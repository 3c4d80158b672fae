"""The chart's ValidatingAdmissionPolicies on the real apiserver.

The reconciler's ServiceAccount (the chart's RBAC, a TokenRequest token) may change a
pod's workload-resizer.io/* annotations and, through pods/resize, its container
resources, and nothing else: an image, a label or another annotation is denied by the
apiserver even though RBAC allows `patch pods`. A tenant (a ServiceAccount with the
built-in `edit` role in its namespace) cannot add, change or remove workload-resizer.io/*
annotations after creation. The reconciler's full job under both policies is
tests/cluster/test_rbac_reconciler.py (zero denials).
"""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import resizer
from tests.cluster.test_reconciler import Harness, guaranteed, ours
from devkit.chart import ensure_helm
from devkit.kube import ApiError, Kube, wait_for
from devkit.processes import REPO, originals_key_dir
from devkit.rbac import install_rbac, kubeconfig_for_token, uninstall_rbac

ORIGINAL_CPU = "workload-resizer.io/original-cpu.app"


@pytest.fixture
def world(cluster: Any, namespace: str) -> Iterator[dict[str, Any]]:
    harness = Harness(cluster, namespace)
    tokens = install_rbac(cluster.kube, ensure_helm(), namespace)
    kube = cluster.kube
    kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant"}})
    kube.create(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "tenant-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}]})
    tenant_token = kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/tenant/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    try:
        tenant_kubeconfig = kubeconfig_for_token(cluster, tenant_token["status"]["token"])
        yield {"harness": harness, "ns": namespace, "admin_kubeconfig": cluster.kubeconfig, "admin": cluster.kube,
               "reconciler": Kube(kubeconfig_for_token(cluster, tokens["reconciler"])),
               "tenant": Kube(tenant_kubeconfig), "tenant_kubeconfig": tenant_kubeconfig}
    finally:
        harness.close(print_logs=False)
        uninstall_rbac(cluster.kube, namespace)


def denied(call: Any) -> str:
    """The apiserver's denial message of `call` (fails if it was allowed)."""
    try:
        call()
    except ApiError as err:
        assert err.status in (403, 422), err
        return str(err)
    raise AssertionError("allowed, but the policy should have denied it")


def running_pod(world: dict[str, Any]) -> str:
    harness: Harness = world["harness"]
    node = harness.node("n4", "n4")
    harness.deploy("web", node, [guaranteed()])
    return harness.wait_running("web")[0]["metadata"]["name"]


def wait_policy_active(kube: Kube, path: str, admin: Kube | None = None) -> None:
    """The apiserver loads new policies asynchronously (within about a second): wait until a
    label edit is denied. Each probe sets a new value: the policy denies changes, and a probe
    that landed before the policy was enforced would make every later identical one a no-op
    that is rightly allowed (which once looked like a policy the apiserver ignored for
    minutes). On a timeout the failure lists the policies and bindings the apiserver has
    (with `admin`)."""
    attempts = iter(range(1, 10_000))

    def label_denied() -> bool:
        return _denied_now(lambda: kube.patch(path, {"metadata": {"labels": {"policy-probe": str(next(attempts))}}}))
    try:
        wait_for("the ValidatingAdmissionPolicy to be enforced", label_denied, timeout=60, interval=0.5)
    except AssertionError as err:
        raise AssertionError(f"{err}\n{_policies_seen(admin)}") from None


def _policies_seen(admin: Kube | None) -> str:
    if admin is None:
        return "(no admin client to list the policies)"
    base = "/apis/admissionregistration.k8s.io/v1"
    lines = []
    for kind in ("validatingadmissionpolicies", "validatingadmissionpolicybindings"):
        for item in admin.get(f"{base}/{kind}")["items"]:
            lines.append(f"{kind}/{item['metadata']['name']}: status {item.get('status')}, "
                         f"created {item['metadata'].get('creationTimestamp')}")
    return "\n".join(lines) or "no policies or bindings at all"


def test_reconciler_identity_changes_only_product_annotations_and_resources(world: dict[str, Any]) -> None:
    me: Kube = world["reconciler"]
    name = running_pod(world)
    path = f"/api/v1/namespaces/{world['ns']}/pods/{name}"
    wait_policy_active(me, path, world["admin"])

    image = denied(lambda: me.patch(path, {"spec": {"containers": [{"name": "app", "image": "evil:1"}]}},
                                    "strategic"))
    assert "may change only workload-resizer.io/* annotations" in image
    denied(lambda: me.patch(path, {"metadata": {"labels": {"app": "other"}}}))
    denied(lambda: me.patch(path, {"metadata": {"annotations": {"example.com/note": "x"}}}))
    denied(lambda: me.patch(path, {"metadata": {"ownerReferences": None}}))

    # Its own job: product annotations and pods/resize of container resources.
    me.patch(path, {"metadata": {"annotations": {"workload-resizer.io/applied-at": "2026-11-23T00:00:00Z"}}})
    me.patch(f"{path}/resize", {"spec": {"containers": [{"name": "app", "resources": {
        "requests": {"cpu": "800m"}, "limits": {"cpu": "800m"}}}]}}, "strategic")
    pod = world["harness"].pod(name)
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "800m"
    assert pod["spec"]["containers"][0]["image"] != "evil:1"


def test_tenant_cannot_touch_product_annotations_after_creation(world: dict[str, Any]) -> None:
    tenant: Kube = world["tenant"]
    ns = world["ns"]
    # Creating with them is admitted (the webhook strips them; the reconciler verifies them).
    pod = tenant.create(f"/api/v1/namespaces/{ns}/pods", {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "tenant-pod", "annotations": {ORIGINAL_CPU: "16", "note": "mine"}},
        "spec": {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
                                 "resources": {"requests": {"cpu": "100m"}}}]}})
    path = f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}"
    attempts = iter(range(1, 10_000))      # a new value each time: an unchanged value is no edit
    wait_for("the policy to be enforced", lambda: _denied_now(
        lambda: tenant.patch(path, {"metadata": {"annotations": {"workload-resizer.io/probe": str(next(attempts))}}})),
        timeout=60)

    change = denied(lambda: tenant.patch(path, {"metadata": {"annotations": {ORIGINAL_CPU: "32"}}}))
    assert "managed by workload-resizer" in change and "system:serviceaccount:" in change
    denied(lambda: tenant.patch(path, {"metadata": {"annotations": {ORIGINAL_CPU: None}}}))
    denied(lambda: tenant.patch(path, {"metadata": {"annotations": {
        "workload-resizer.io/applied-instance-type": "n4"}}}))
    denied(lambda: tenant.patch(path, {"metadata": {"annotations": {"workload-resizer.io/skip": "true"}}}))

    # Everything else stays the tenant's.
    tenant.patch(path, {"metadata": {"labels": {"tier": "web"}, "annotations": {"note": "changed"}}})
    # An exempt admin (system:masters by default) can still fix things.
    world["harness"].kube.patch(path, {"metadata": {"annotations": {ORIGINAL_CPU: None}}})
    assert ORIGINAL_CPU not in world["harness"].pod("tenant-pod")["metadata"].get("annotations", {})


def test_reconciler_identity_cannot_change_other_fields_through_resize(world: dict[str, Any]) -> None:
    me: Kube = world["reconciler"]
    name = running_pod(world)
    path = f"/api/v1/namespaces/{world['ns']}/pods/{name}"
    wait_policy_active(me, path, world["admin"])
    resize_policy = [{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]
    try:
        me.patch(f"{path}/resize", {"spec": {"containers": [{"name": "app", "resizePolicy": resize_policy}]}},
                 "strategic")
    except ApiError as err:
        assert err.status in (403, 422), err
    pod = world["harness"].pod(name)
    assert pod["spec"]["containers"][0].get("resizePolicy") != resize_policy


def _denied_now(call: Any) -> bool:
    try:
        call()
    except ApiError as err:
        return err.status in (403, 422)
    return False


def restore(kubeconfig: str, namespace: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "reconciler", "restore", f"--kubeconfig={kubeconfig}",
                           f"--only-namespace={namespace}", f"--originals-key-dir={originals_key_dir()}", *flags],
                          cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_restore_needs_an_exempt_principal_says_so_and_changes_nothing(world: dict[str, Any]) -> None:
    """An operator with all the RBAC restore needs, but outside admissionPolicy.exemptGroups/Users,
    gets a clear error before anything changes; the cluster admin (system:masters) just works."""
    harness: Harness = world["harness"]
    kube, ns = harness.kube, world["ns"]
    name = running_pod(world)
    path = f"/api/v1/namespaces/{ns}/pods/{name}"
    # A managed pod: the author's sizes stamped, as the webhook does (by the admin: exempt).
    stamp = resizer.originals_from_spec_annotations(harness.pod(name))
    kube.patch(path, {"metadata": {"annotations": stamp}})
    role = f"restore-operator-{ns}"
    owner = kube.get(f"/api/v1/namespaces/{ns}")["metadata"]
    owned = [{"apiVersion": "v1", "kind": "Namespace", "name": ns, "uid": owner["uid"]}]
    kube.create("/apis/rbac.authorization.k8s.io/v1/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": role, "ownerReferences": owned},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "patch"]},
                  {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["patch"]}]})
    kube.create("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": role, "ownerReferences": owned},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}]})
    try:
        before = harness.pod(name)
        # --dry-run changes nothing ever: retried until RBAC and the policy are both in force.
        wait_for("restore --dry-run to be denied by the policy", lambda: (
            (r := restore(world["tenant_kubeconfig"], ns, "--dry-run")).returncode == 1
            and "ValidatingAdmissionPolicy" in r.stdout), timeout=60, interval=1)

        denied_run = restore(world["tenant_kubeconfig"], ns)
        assert denied_run.returncode == 1, denied_run.stdout + denied_run.stderr
        assert "Traceback" not in denied_run.stdout + denied_run.stderr
        assert "admissionPolicy.exemptGroups (default: system:masters" in denied_run.stdout
        assert "Stopped: 0 of 1 managed pods restored" in denied_run.stdout
        after = harness.pod(name)
        assert ours(after) == ours(before) and after["metadata"]["resourceVersion"] == before["metadata"][
            "resourceVersion"], "a denied restore changed the pod"

        admin_run = restore(world["admin_kubeconfig"], ns)
        assert admin_run.returncode == 0, admin_run.stdout + admin_run.stderr
        assert "already at its originals; annotations removed" in admin_run.stdout
        assert ours(harness.pod(name)) == {}
    finally:
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{role}")
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}")
