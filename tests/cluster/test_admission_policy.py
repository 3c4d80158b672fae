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
from devkit.chart import ensure_helm
from devkit.kube import ApiError, Kube, deployment, wait_for
from devkit.processes import REPO, Webhook, originals_key_dir, register_webhook, unregister_webhook, wait_webhook_active
from devkit.rbac import chart_names, install_rbac, kubeconfig_for_token, uninstall_rbac
from resizer import podstate
from tests.cluster.test_reconciler import Harness, guaranteed, make_namespace, ours, q, resources
from tests.cluster.test_webhook_cluster import Registration

ORIGINAL_CPU = "workload-resizer.io/original-cpu.app"
SIZED_AT_ADMISSION = podstate.SIZED_AT_ADMISSION


@pytest.fixture
def world(cluster: Any, namespace: str) -> Iterator[dict[str, Any]]:
    harness = Harness(cluster, namespace)
    tokens = install_rbac(cluster.kube, ensure_helm(), namespace)
    kube = cluster.kube
    kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "tenant"}},
    )
    kube.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "tenant-edit"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": namespace}],
        },
    )
    tenant_token = kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/tenant/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )
    try:
        tenant_kubeconfig = kubeconfig_for_token(cluster, tenant_token["status"]["token"])
        yield {
            "harness": harness,
            "ns": namespace,
            "names": chart_names(namespace),
            "admin_kubeconfig": cluster.kubeconfig,
            "admin": cluster.kube,
            "reconciler": Kube(kubeconfig_for_token(cluster, tokens["reconciler"])),
            "tenant": Kube(tenant_kubeconfig),
            "tenant_kubeconfig": tenant_kubeconfig,
        }
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
            lines.append(
                f"{kind}/{item['metadata']['name']}: status {item.get('status')}, "
                f"created {item['metadata'].get('creationTimestamp')}"
            )
    return "\n".join(lines) or "no policies or bindings at all"


def test_reconciler_identity_changes_only_product_annotations_and_resources(world: dict[str, Any]) -> None:
    me: Kube = world["reconciler"]
    name = running_pod(world)
    path = f"/api/v1/namespaces/{world['ns']}/pods/{name}"
    wait_policy_active(me, path, world["admin"])

    image = denied(lambda: me.patch(path, {"spec": {"containers": [{"name": "app", "image": "evil:1"}]}}, "strategic"))
    assert "may change only workload-resizer.io/* annotations" in image
    denied(lambda: me.patch(path, {"metadata": {"labels": {"app": "other"}}}))
    denied(lambda: me.patch(path, {"metadata": {"annotations": {"example.com/note": "x"}}}))
    denied(lambda: me.patch(path, {"metadata": {"ownerReferences": None}}))

    # Its own job: product annotations and pods/resize of container resources.
    me.patch(path, {"metadata": {"annotations": {"workload-resizer.io/applied-at": "2026-11-23T00:00:00Z"}}})
    me.patch(
        f"{path}/resize",
        {
            "spec": {
                "containers": [{"name": "app", "resources": {"requests": {"cpu": "800m"}, "limits": {"cpu": "800m"}}}]
            }
        },
        "strategic",
    )
    pod = world["harness"].pod(name)
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "800m"
    assert pod["spec"]["containers"][0]["image"] != "evil:1"


def test_tenant_cannot_touch_product_annotations_after_creation(world: dict[str, Any]) -> None:
    tenant: Kube = world["tenant"]
    ns = world["ns"]
    # Creating with them is admitted (the webhook strips them; the reconciler verifies them).
    pod = tenant.create(
        f"/api/v1/namespaces/{ns}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "tenant-pod", "annotations": {ORIGINAL_CPU: "16", "note": "mine"}},
            "spec": {
                "containers": [
                    {"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "100m"}}}
                ]
            },
        },
    )
    path = f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}"
    attempts = iter(range(1, 10_000))  # a new value each time: an unchanged value is no edit
    wait_for(
        "the policy to be enforced",
        lambda: _denied_now(
            lambda: tenant.patch(
                path, {"metadata": {"annotations": {"workload-resizer.io/probe": str(next(attempts))}}}
            )
        ),
        timeout=60,
    )

    change = denied(lambda: tenant.patch(path, {"metadata": {"annotations": {ORIGINAL_CPU: "32"}}}))
    assert "managed by workload-resizer" in change and "system:serviceaccount:" in change
    denied(lambda: tenant.patch(path, {"metadata": {"annotations": {ORIGINAL_CPU: None}}}))
    denied(
        lambda: tenant.patch(path, {"metadata": {"annotations": {"workload-resizer.io/applied-instance-type": "n4"}}})
    )
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
        me.patch(
            f"{path}/resize", {"spec": {"containers": [{"name": "app", "resizePolicy": resize_policy}]}}, "strategic"
        )
    except ApiError as err:
        assert err.status in (403, 422), err
    pod = world["harness"].pod(name)
    assert pod["spec"]["containers"][0].get("resizePolicy") != resize_policy


def test_reconciler_identity_resizes_sidecars_and_nothing_else_of_init_containers(world: dict[str, Any]) -> None:
    me: Kube = world["reconciler"]
    harness: Harness = world["harness"]
    manifest = deployment("web", 1, [guaranteed()], node_selector={"kubernetes.io/hostname": harness.node("n4", "n4")})
    proxy = guaranteed("proxy", cpu="500m", memory="128Mi")
    proxy["restartPolicy"] = "Always"
    manifest["spec"]["template"]["spec"]["initContainers"] = [proxy, guaranteed("setup", cpu="200m", memory="64Mi")]
    harness.kube.create(f"/apis/apps/v1/namespaces/{world['ns']}/deployments", manifest)
    name = harness.wait_running("web")[0]["metadata"]["name"]
    path = f"/api/v1/namespaces/{world['ns']}/pods/{name}"
    wait_policy_active(me, path, world["admin"])

    policy = [{"resourceName": "cpu", "restartPolicy": "RestartContainer"}]
    denied(
        lambda: me.patch(
            f"{path}/resize", {"spec": {"initContainers": [{"name": "proxy", "resizePolicy": policy}]}}, "strategic"
        )
    )
    # A plain init container is never the reconciler's to size: 1.35's apiserver refuses it itself,
    # 1.36's allows it and the policy refuses it.
    message = denied(
        lambda: me.patch(
            f"{path}/resize",
            {
                "spec": {
                    "initContainers": [
                        {"name": "setup", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "100m"}}}
                    ]
                }
            },
            "strategic",
        )
    )
    assert (
        "may change only container, sidecar and pod-level resources" in message
        or "resources for non-sidecar init containers are immutable" in message
    ), message
    # The sidecar's resources, with the container's, in one resize.
    me.patch(
        f"{path}/resize",
        {
            "spec": {
                "containers": [{"name": "app", "resources": {"requests": {"cpu": "800m"}, "limits": {"cpu": "800m"}}}],
                "initContainers": [
                    {"name": "proxy", "resources": {"requests": {"cpu": "400m"}, "limits": {"cpu": "400m"}}}
                ],
            }
        },
        "strategic",
    )
    pod = harness.pod(name)
    assert [c["resources"]["requests"]["cpu"] for c in pod["spec"]["initContainers"]] == ["400m", "200m"]
    assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "800m"
    assert pod["spec"]["initContainers"][0].get("resizePolicy") != policy


def _denied_now(call: Any) -> bool:
    try:
        call()
    except ApiError as err:
        return err.status in (403, 422)
    return False


def restore(kubeconfig: str, namespace: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "commands",
            "restore",
            f"--kubeconfig={kubeconfig}",
            f"--only-namespace={namespace}",
            f"--originals-key-dir={originals_key_dir()}",
            *flags,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


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
    kube.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role, "ownerReferences": owned},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "patch"]},
                {"apiGroups": [""], "resources": ["pods/resize"], "verbs": ["patch"]},
            ],
        },
    )
    kube.create(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role, "ownerReferences": owned},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}],
        },
    )
    try:
        before = harness.pod(name)
        # --dry-run changes nothing ever: retried until RBAC and the policy are both in force.
        wait_for(
            "restore --dry-run to be denied by the policy",
            lambda: (
                (r := restore(world["tenant_kubeconfig"], ns, "--dry-run")).returncode == 1
                and "ValidatingAdmissionPolicy" in r.stdout
            ),
            timeout=60,
            interval=1,
        )

        denied_run = restore(world["tenant_kubeconfig"], ns)
        assert denied_run.returncode == 1, denied_run.stdout + denied_run.stderr
        assert "Traceback" not in denied_run.stdout + denied_run.stderr
        assert "admissionPolicy.exemptGroups (default: system:masters" in denied_run.stdout
        assert "Stopped: 0 of 1 managed pods restored" in denied_run.stdout
        after = harness.pod(name)
        assert (
            ours(after) == ours(before)
            and after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        ), "a denied restore changed the pod"

        admin_run = restore(world["admin_kubeconfig"], ns)
        assert admin_run.returncode == 0, admin_run.stdout + admin_run.stderr
        assert "already at its originals; annotations removed" in admin_run.stdout
        assert ours(harness.pod(name)) == {}
    finally:
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{role}")
        kube.delete(f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{role}")


# ---------------------------------------------------------------- CREATE, pods/status, scope

ADMISSION_MAC = "v1.a.k0001." + "A" * 43  # the form the webhook writes (a MAC only the keys verify)
SIZED_MAC = "v1.s.k0001." + "A" * 43  # the webhook's, with its sized-at-admission record
POD_MAC = "v1.p.k0001." + "A" * 43  # the reconciler's form: never on a pod being created


def bare_pod(name: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "no-such-node"},
            "containers": [
                {"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": "100m"}}}
            ],
        },
    }


def wait_create_policy_active(kube: Kube, ns: str) -> None:
    wait_for(
        "the CREATE policy to be enforced",
        lambda: _denied_now(
            lambda: kube.request(
                "POST",
                f"/api/v1/namespaces/{ns}/pods",
                bare_pod("probe", {"workload-resizer.io/applied-at": "x"}),
                params={"dryRun": "All"},
            )
        ),
        timeout=60,
        interval=0.5,
    )


def test_without_the_webhook_nobody_creates_a_pod_with_keys_only_workload_resizer_writes(world: dict[str, Any]) -> None:
    """No webhook registered (as when it is skipped): applied-*, resize-state and a pod-scope
    originals-mac are denied at creation; the author's own keys, and what the webhook writes,
    are not; exempt admins may still."""
    tenant: Kube = world["tenant"]
    ns = world["ns"]
    pods = f"/api/v1/namespaces/{ns}/pods"
    wait_create_policy_active(tenant, ns)
    for i, forged in enumerate(
        [
            {"workload-resizer.io/applied-instance-type": "n4"},
            {"workload-resizer.io/applied-size": "x"},
            {"workload-resizer.io/resize-state": "{}"},
            {ORIGINAL_CPU: "16", "workload-resizer.io/originals-mac": POD_MAC},
            {ORIGINAL_CPU: "16", "workload-resizer.io/originals-mac": "v1.a.k0001.short"},
            # A sized MAC only with its record, the record only with a sized MAC.
            {ORIGINAL_CPU: "16", "workload-resizer.io/originals-mac": SIZED_MAC},
            {ORIGINAL_CPU: "16", SIZED_AT_ADMISSION: "n4", "workload-resizer.io/originals-mac": ADMISSION_MAC},
            {ORIGINAL_CPU: "16", SIZED_AT_ADMISSION: "n4"},
            {ORIGINAL_CPU: "16", SIZED_AT_ADMISSION: "n4", "workload-resizer.io/originals-mac": POD_MAC},
        ]
    ):
        manifest = bare_pod(f"forged-{i}", forged)
        message = denied(lambda: tenant.create(pods, manifest))  # noqa: B023 (called at once)
        assert "written by workload-resizer only" in message and "system:serviceaccount:" in message
    tenant.create(pods, bare_pod("authored", {"workload-resizer.io/skip": "true", "note": "mine"}))
    tenant.create(
        pods, bare_pod("webhook-form", {ORIGINAL_CPU: "16", "workload-resizer.io/originals-mac": ADMISSION_MAC})
    )
    tenant.create(
        pods,
        bare_pod(
            "webhook-sized-form",
            {ORIGINAL_CPU: "16", SIZED_AT_ADMISSION: "n4", "workload-resizer.io/originals-mac": SIZED_MAC},
        ),
    )
    world["admin"].create(pods, bare_pod("admin", {"workload-resizer.io/applied-instance-type": "n4"}))


def test_pods_the_webhook_sizes_at_admission_pass_the_create_policy(world: dict[str, Any]) -> None:
    """The chart's defaults together: the webhook sizes at admission and the policies deny.
    Validation runs after mutation, so the policy judges the webhook's sized record (a `v1.s.`
    MAC with its `sized-at-admission` annotation): a tenant's own pinned pod and a Deployment's
    (created by the ReplicaSet controller, not exempt) are created sized."""
    from tests.cluster.test_admission_sizing import pinned_deployment, sizing_webhook, wait_sizing_active

    harness: Harness = world["harness"]
    tenant: Kube = world["tenant"]
    ns = world["ns"]
    harness.config()
    harness.node("n4", "n4")
    wait_create_policy_active(tenant, ns)
    with Registration(harness.kube, ns, sizing_webhook(harness)):
        wait_sizing_active(harness, "n4")
        owned = bare_pod("pinned", {})
        owned["spec"]["nodeSelector"] = {harness.label: "n4"}
        owned["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}
        owned["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "rs",
                "uid": "00000000-0000-0000-0000-000000000002",
                "controller": True,
            }
        ]
        pod = tenant.request("POST", f"/api/v1/namespaces/{ns}/pods", owned, params={"dryRun": "All"})
        assert pod["metadata"]["annotations"][SIZED_AT_ADMISSION] == "n4"
        assert pod["metadata"]["annotations"][podstate.ORIGINALS_MAC].startswith("v1.s.")

        harness.kube.create(
            f"/apis/apps/v1/namespaces/{ns}/deployments", pinned_deployment("pinned", {harness.label: "n4"})
        )
        (created,) = harness.wait_running("pinned")
        assert resources(created)["limits"]["cpu"] == q("800m"), "1 CPU sized for n4 at creation"
        assert ours(created)[SIZED_AT_ADMISSION] == "n4"
        assert ours(created)[podstate.ORIGINALS_MAC].startswith("v1.s.")


def test_with_the_webhook_forged_keys_are_stripped_and_down_they_are_denied(world: dict[str, Any]) -> None:
    """The webhook's own stamp passes the CREATE policy (validation runs after mutation); with
    the webhook registered but down (failurePolicy Ignore), the forged pod is denied."""
    tenant: Kube = world["tenant"]
    ns, kube = world["ns"], world["admin"]
    pods = f"/api/v1/namespaces/{ns}/pods"
    forged = {
        "workload-resizer.io/applied-instance-type": "n4",
        ORIGINAL_CPU: "16",
        "workload-resizer.io/originals-mac": POD_MAC,
    }
    owned = bare_pod("stamped", forged)
    owned["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "rs",
            "uid": "00000000-0000-0000-0000-000000000001",
            "controller": True,
        }
    ]
    wait_create_policy_active(tenant, ns)
    webhook = Webhook()
    name = f"workload-resizer-{ns}"
    try:
        webhook.wait_ready()
        register_webhook(kube, webhook.url, webhook.certs.ca_bundle, name=name, namespaces=[ns])
        wait_webhook_active(kube, ns)
        pod = tenant.create(pods, owned)
        annotations = pod["metadata"]["annotations"]
        assert annotations[ORIGINAL_CPU] == "100m", "the webhook's stamp, not the forged value"
        assert annotations["workload-resizer.io/originals-mac"].startswith("v1.a.")
        assert "workload-resizer.io/applied-instance-type" not in annotations

        webhook.terminate()
        owned["metadata"]["name"] = "forged"
        denied(lambda: tenant.create(pods, owned))
    finally:
        unregister_webhook(kube, name)
        webhook.close()


def test_annotations_cannot_be_set_through_a_binding(world: dict[str, Any]) -> None:
    """The apiserver merges a Binding's metadata.annotations into the pod it binds (pods/binding
    and the older bindings resource alike): whoever may bind (a scheduler's credentials) is
    denied any workload-resizer.io/* key there, and binds as usual without one."""
    tenant: Kube = world["tenant"]
    harness: Harness = world["harness"]
    ns, admin = world["ns"], world["admin"]
    node = harness.node("n4", "n4")
    admin.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "binder"},
            "rules": [{"apiGroups": [""], "resources": ["pods/binding", "bindings"], "verbs": ["create"]}],
        },
    )
    admin.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "binder"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "binder"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}],
        },
    )
    unscheduled = bare_pod("unbound", {})
    unscheduled["spec"] = {"schedulerName": "nobody", "containers": unscheduled["spec"]["containers"]}
    name = admin.create(f"/api/v1/namespaces/{ns}/pods", unscheduled)["metadata"]["name"]

    def binding(annotations: dict[str, str] | None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, **({"annotations": annotations} if annotations else {})}
        return {"apiVersion": "v1", "kind": "Binding", "metadata": meta, "target": {"kind": "Node", "name": node}}

    routes = {
        "pods/binding": f"/api/v1/namespaces/{ns}/pods/{name}/binding",
        "bindings": f"/api/v1/namespaces/{ns}/bindings",
    }
    skip = {"workload-resizer.io/skip": "true"}
    attempts = iter(range(1, 10_000))
    wait_for(
        "RBAC and the policy in force on pods/binding",
        lambda: _denied_by_policy(
            lambda: tenant.request(
                "POST",
                routes["pods/binding"],
                binding({"workload-resizer.io/probe": str(next(attempts))}),
                params={"dryRun": "All"},
            )
        ),
        timeout=60,
        interval=0.5,
    )
    for route, path in routes.items():
        for forged in (
            skip,
            {"workload-resizer.io/resize-state": "{}"},
            {ORIGINAL_CPU: "16", SIZED_AT_ADMISSION: "n4", "workload-resizer.io/originals-mac": SIZED_MAC},
        ):
            message = denied(lambda: tenant.create(path, binding(forged)))  # noqa: B023 (called at once)
            assert "cannot be set through a Binding" in message, (route, message)
    assert not ours(harness.pod(name)) and not harness.pod(name)["spec"].get("nodeName")

    tenant.create(routes["pods/binding"], binding({"note": "a binder's own annotation"}))
    bound = harness.pod(name)
    assert bound["spec"]["nodeName"] == node and bound["metadata"]["annotations"] == {
        "note": "a binder's own annotation"
    }


def _denied_by_policy(call: Any) -> bool:
    try:
        call()
    except ApiError as err:
        return err.status == 403 and "ValidatingAdmissionPolicy" in str(err)
    return False


def test_annotations_cannot_be_changed_through_pods_status(world: dict[str, Any]) -> None:
    """The apiserver keeps annotation changes sent to pods/status: the policy covers it."""
    tenant: Kube = world["tenant"]
    ns, admin = world["ns"], world["admin"]
    admin.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "status-writer"},
            "rules": [{"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch", "update"]}],
        },
    )
    admin.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "status-writer"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "status-writer"},
            "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}],
        },
    )
    pod = admin.create(f"/api/v1/namespaces/{ns}/pods", bare_pod("status", {ORIGINAL_CPU: "100m"}))
    path = f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/status"
    # The gap: an annotation change through pods/status is stored (here by an exempt admin).
    admin.patch(path, {"metadata": {"annotations": {ORIGINAL_CPU: "200m"}}})
    assert world["harness"].pod("status")["metadata"]["annotations"][ORIGINAL_CPU] == "200m"

    attempts = iter(range(1, 10_000))
    wait_for(
        "the policy to be enforced on pods/status",
        lambda: _denied_now(
            lambda: tenant.patch(
                path, {"metadata": {"annotations": {"workload-resizer.io/probe": str(next(attempts))}}}
            )
        ),
        timeout=60,
    )
    message = denied(lambda: tenant.patch(path, {"metadata": {"annotations": {ORIGINAL_CPU: "16"}}}))
    assert "managed by workload-resizer" in message
    assert world["harness"].pod("status")["metadata"]["annotations"][ORIGINAL_CPU] == "200m"
    tenant.patch(path, {"metadata": {"annotations": {"note": "status writers keep their other annotations"}}})


def test_reconciler_identity_never_writes_status_nor_resizes_a_skipped_pod(world: dict[str, Any]) -> None:
    me: Kube = world["reconciler"]
    harness: Harness = world["harness"]
    name = running_pod(world)
    path = f"/api/v1/namespaces/{world['ns']}/pods/{name}"
    wait_policy_active(me, path, world["admin"])
    # RBAC refuses pods/status first: lend the identity the verb, so the policy is what answers.
    ns, admin = world["ns"], world["admin"]
    admin.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "lent-status"},
            "rules": [{"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]}],
        },
    )
    admin.create(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "lent-status"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lent-status"},
            "subjects": [{"kind": "ServiceAccount", "name": f"{world['names']['reconciler']}", "namespace": ns}],
        },
    )
    message = wait_for(
        "the lent verb to reach the policy",
        lambda: (
            m
            if "never writes pods/status"
            in (
                m := denied(
                    lambda: me.patch(
                        f"{path}/status", {"metadata": {"annotations": {"workload-resizer.io/applied-at": "x"}}}
                    )
                )
            )
            else None
        ),
        timeout=30,
    )
    assert "Forbidden" in message or "403" in message

    harness.deploy("skipped", harness.nodes[0], [guaranteed()], annotations={"workload-resizer.io/skip": "true"})
    skipped = harness.wait_running("skipped")[0]["metadata"]["name"]
    message = denied(
        lambda: me.patch(
            f"/api/v1/namespaces/{world['ns']}/pods/{skipped}/resize",
            {
                "spec": {
                    "containers": [
                        {"name": "app", "resources": {"requests": {"cpu": "900m"}, "limits": {"cpu": "900m"}}}
                    ]
                }
            },
            "strategic",
        )
    )
    assert "may resize only eligible pods" in message and "not eligible" in message


def test_reconciler_resizes_only_in_namespaces_in_scope(cluster: Any, namespace: str) -> None:
    """confineResizesToScope: the release namespace never, a namespace matching
    scope.namespaceSelector yes, and no more once its label changes."""
    kube: Kube = cluster.kube
    other = make_namespace(kube, "wr-scope")
    label = f"scope-{namespace}"
    kube.patch(f"/api/v1/namespaces/{other}", {"metadata": {"labels": {label: "in"}}})
    values = {
        "admissionPolicy": {
            "confineResizesToScope": True,
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace, other]}
                ]
            },
        },
        "scope": {"namespaceSelector": {"matchLabels": {label: "in"}}},
    }
    tokens = install_rbac(kube, ensure_helm(), namespace, values=values)
    home, away = Harness(cluster, namespace), Harness(cluster, other)
    try:
        me = Kube(kubeconfig_for_token(cluster, tokens["reconciler"]))
        node = home.node("n4", "n4")
        pods = []
        for harness in (home, away):
            harness.deploy("web", node, [guaranteed()])
            pods.append(f"/api/v1/namespaces/{harness.ns}/pods/{harness.wait_running('web')[0]['metadata']['name']}")
        wait_policy_active(me, pods[0], kube)

        def resize(path: str, cpu: str) -> Any:
            return me.patch(
                f"{path}/resize",
                {
                    "spec": {
                        "containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]
                    }
                },
                "strategic",
            )

        assert "out of scope" in denied(lambda: resize(pods[0], "800m")), "the release namespace"
        resize(pods[1], "800m")
        kube.patch(f"/api/v1/namespaces/{other}", {"metadata": {"labels": {label: "out"}}})
        assert "out of scope" in denied(lambda: resize(pods[1], "700m"))
        assert resources(away.pod(pods[1].rsplit("/", 1)[1]))["requests"]["cpu"] == q("800m")
    finally:
        home.close(print_logs=False)
        away.close(print_logs=False)
        uninstall_rbac(kube, namespace)
        kube.delete(f"/api/v1/namespaces/{other}")
