"""The originals keys under GitOps: the chart renders no key, the reconciler creates the Secret.

The chart is rendered with `helm template` (as Argo CD and Flux do: no cluster lookups) and
its objects applied with kubectl-apply semantics, twice, then a config edit is rendered and
applied a third time. The reconciler runs as a local process with the chart's flags and its
ServiceAccount token (the chart's RBAC); the webhook as a local process whose key directory
plays the Secret volume the chart mounts (optional: empty until the test projects the Secret,
as the kubelet would). Every pod the product sized before the re-renders must re-align after
the config edit: its signatures still verify because no render touched the key.
A key that goes missing is loud (gauge, log) and putting it back heals it.
"""

from __future__ import annotations

import base64
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devkit.chart import CHART, container_args, ensure_helm, render, run_helm
from devkit.kube import Kube, deployment, wait_for
from devkit.processes import (
    Reconciler,
    Webhook,
    register_webhook,
    unregister_webhook,
    wait_webhook_active,
    webhook_probe_pod,
)
from devkit.rbac import POLICY_KINDS, RBAC_KINDS, TEST_LABEL, chart_names, kubeconfig_for_token, uninstall_rbac
from devkit.tempdirs import temporary_directory
from resizer import key_id_of
from resizer.integrity import key_id_order
from resizer.podstate import ORIGINALS_MAC
from tests.cluster.test_reconciler import Harness, applied, guaranteed, ours, q, resources

CPU_ORIGINAL = "workload-resizer.io/original-cpu.app"
SAMPLE_TYPES = {
    "n2d": {"cpuPerf": 1.0, "memPerf": 1.0},
    "n4": {"cpuPerf": 1.25, "memPerf": 1.0},
    "c3": {"cpuPerf": 1.3, "memPerf": 1.0},
}


def chart_values(namespace: str, n4_cpu_perf: float = 1.25) -> dict[str, Any]:
    names = chart_names(namespace)
    return {
        "fullnameOverride": names["fullname"],
        "commonLabels": {TEST_LABEL: namespace},
        "config": {"nodeTypes": {**SAMPLE_TYPES, "n4": {"cpuPerf": n4_cpu_perf, "memPerf": 1.0}}},
        "admissionPolicy": {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "confineResizesToScope": False,
        },
    }


def gitops_sync(kube: Kube, namespace: str, values: dict[str, Any]) -> list[dict[str, Any]]:
    """`helm template` + apply of every object a test can hold (not the Deployments, Services and
    webhook configuration: the programs run as local processes)."""
    docs = render(ensure_helm(), namespace=namespace, values=values)
    owner = kube.get(f"/api/v1/namespaces/{namespace}")["metadata"]
    owned = [{"apiVersion": "v1", "kind": "Namespace", "name": namespace, "uid": owner["uid"]}]
    for doc in docs:
        if doc["kind"] in {*RBAC_KINDS, *POLICY_KINDS, "ConfigMap", "Secret"}:
            if "namespace" not in doc["metadata"]:
                doc["metadata"]["ownerReferences"] = owned
            kube.apply(doc, namespace)
    return docs


def project(secret: dict[str, Any], directory: Path) -> None:
    """What the kubelet does for the webhook's Secret volume."""
    for name, value in secret["data"].items():
        (directory / name).write_bytes(base64.b64decode(value))


@pytest.fixture
def world(cluster: Any, namespace: str) -> Iterator[dict[str, Any]]:
    harness = Harness(cluster, namespace)
    try:
        yield {"harness": harness, "kube": cluster.kube, "cluster": cluster}
    finally:
        harness.close(print_logs=True)
        uninstall_rbac(cluster.kube, namespace)


def test_helm_template_twice_then_a_config_edit_realigns_every_pod(world: dict[str, Any]) -> None:
    harness: Harness = world["harness"]
    kube: Kube = world["kube"]
    ns, names = harness.ns, chart_names(harness.ns)
    first = gitops_sync(kube, ns, chart_values(ns))
    assert not [d for d in first if d["kind"] == "Secret" and "originals" in d["metadata"]["name"]], (
        "no key material in a render"
    )
    secret_flag = next(
        a for a in container_args(first, names["reconciler"]) if a.startswith("--originals-keys-secret=")
    )
    secret_namespace, secret_name = secret_flag.split("=", 1)[1].split("/")
    assert secret_namespace == ns
    webhook_args = container_args(first, names["webhook"])
    assert "--originals-keys-optional" in webhook_args

    token = kube.create(
        f"/api/v1/namespaces/{ns}/serviceaccounts/{names['reconciler']}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )
    kubeconfig = kubeconfig_for_token(world["cluster"], token["status"]["token"])
    reconciler = Reconciler(
        kubeconfig,
        f"--config-namespace={ns}",
        f"--config-name={names['config']}",
        secret_flag,
        f"--node-type-label={harness.label}",
    )
    harness.processes.append(reconciler)
    reconciler.wait_ready()
    secret = kube.get(f"/api/v1/namespaces/{ns}/secrets/{secret_name}")
    (key_id,) = secret["data"]
    assert key_id_order(key_id) > key_id_order("k0001") and len(base64.b64decode(secret["data"][key_id])) == 64
    assert "created the originals key Secret" in reconciler.logs()

    # The webhook starts before the kubelet projected the Secret, and picks the key up after.
    key_dir = temporary_directory("projected-keys-")
    webhook = Webhook(f"--originals-key-dir={key_dir}", "--originals-keys-optional", "--cert-reload-interval=1s")
    harness.processes.append(webhook)
    webhook.wait_ready()
    hook = f"workload-resizer-{ns}"
    register_webhook(kube, webhook.url, webhook.certs.ca_bundle, name=hook, namespaces=[ns])
    try:
        wait_webhook_active(kube, ns)
        project(secret, key_dir)
        wait_for(
            "the webhook to sign with the key that appeared",
            lambda: (
                key_id_of(
                    (
                        kube.request(
                            "POST", f"/api/v1/namespaces/{ns}/pods", webhook_probe_pod(ns), params={"dryRun": "All"}
                        )["metadata"].get("annotations")
                        or {}
                    ).get(ORIGINALS_MAC)
                )
                == key_id
            ),
            timeout=30,
        )

        node = harness.node("n4", "n4")
        harness.deploy("web", node, [guaranteed(cpu="1000m")], replicas=3)
        pods = harness.wait_pods(
            "web",
            3,
            lambda p: applied(p) == "n4" and resources(p)["limits"]["cpu"] == q("800m"),
            "sized for n4",
            timeout=60,
        )
        assert {key_id_of(p["metadata"]["annotations"][ORIGINALS_MAC]) for p in pods} == {key_id}

        # A second render and apply (a GitOps sync): the key Secret is not the chart's to touch.
        gitops_sync(kube, ns, chart_values(ns))
        assert kube.get(f"/api/v1/namespaces/{ns}/secrets/{secret_name}")["data"] == secret["data"]

        # The config edit, through the chart's values: n4 twice the baseline.
        gitops_sync(kube, ns, chart_values(ns, n4_cpu_perf=2.0))
        harness.wait_pods(
            "web",
            3,
            lambda p: resources(p)["limits"]["cpu"] == q("500m") and resources(p)["requests"]["cpu"] == q("500m"),
            "re-aligned to 500m",
            timeout=90,
        )
        for pod in harness.pods("web"):
            assert "OriginalsUnverified" not in harness.reasons(pod["metadata"]["name"])
        assert reconciler.metric("workload_resizer_originals_unknown_key_pods") == 0

        # The key going missing is loud; the same key back heals it.
        kube.patch(
            f"/api/v1/namespaces/{ns}/secrets/{secret_name}",
            {"data": {key_id: None, "k0002": base64.b64encode(b"n" * 64).decode()}},
        )
        wait_for(
            "the unknown-key gauge",
            lambda: reconciler.metric("workload_resizer_originals_unknown_key_pods") == 3,
            timeout=30,
        )
        assert "pods signed with an originals key the reconciler does not have" in reconciler.logs()
        kube.patch(
            f"/api/v1/namespaces/{ns}/secrets/{secret_name}", {"data": {key_id: secret["data"][key_id], "k0002": None}}
        )
        wait_for(
            "the gauge back at 0",
            lambda: reconciler.metric("workload_resizer_originals_unknown_key_pods") == 0,
            timeout=30,
        )
    finally:
        unregister_webhook(kube, hook)


# The template of the chart versions before this one: the key rendered with lookup (a new
# random key whenever lookup finds nothing, as under helm template).
OLD_KEYS_TEMPLATE = """{{- if not .Values.originalsKeys.existingSecret }}
{{- $name := include "wr.originalsKeysSecretName" . -}}
{{- $existing := lookup "v1" "Secret" .Release.Namespace $name -}}
apiVersion: v1
kind: Secret
metadata:
  name: {{ $name }}
  namespace: {{ .Release.Namespace }}
  labels:
    {{- include "wr.labels" . | nindent 4 }}
type: Opaque
data:
{{- if and $existing $existing.data }}
  {{- toYaml $existing.data | nindent 2 }}
{{- else }}
  k0001: {{ randAlphaNum 64 | b64enc | quote }}
{{- end }}
{{- end }}
"""


def test_helm_upgrade_from_a_chart_that_rendered_the_key_keeps_it(cluster: Any, namespace: str) -> None:
    """Helm deletes what a new chart version no longer renders: the upgrade renders the old
    Secret once more, as it is, with helm.sh/resource-policy: keep, so it survives this
    upgrade, the next ones and an uninstall."""
    kube: Kube = cluster.kube
    helm = ensure_helm()
    old_chart = temporary_directory("old-chart-") / "chart"
    shutil.copytree(CHART, old_chart)
    (old_chart / "templates" / "originals-keys.yaml").write_text(OLD_KEYS_TEMPLATE)
    values = temporary_directory("values-") / "values.yaml"
    # The webhook configuration matches no namespace: nothing else in the shared cluster meets it.
    values.write_text(
        yaml.safe_dump(
            {
                "fullnameOverride": chart_names(namespace)["fullname"],
                "tls": {"mode": "helm"},
                "scope": {"namespaceSelector": {"matchLabels": {"workload-resizer.io/test-never-matches": namespace}}},
                "admissionPolicy": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
            }
        )
    )
    name = f"{chart_names(namespace)['fullname']}-originals-keys"
    path = f"/api/v1/namespaces/{namespace}/secrets/{name}"

    def helm_run(*args: str) -> None:
        run_helm(helm, *args, "-n", namespace, "--kubeconfig", str(cluster.kubeconfig))

    helm_run("install", "keys", str(old_chart), "-f", str(values))
    try:
        before = kube.get(path)["data"]
        for _ in range(2):
            helm_run("upgrade", "keys", str(CHART), "-f", str(values))
            secret = kube.get(path)
            assert secret["data"] == before
            assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    finally:
        helm_run("uninstall", "keys")
    assert kube.get(path)["data"] == before, "kept after uninstall"


def test_a_lost_key_secret_is_loud_and_a_pod_sized_at_admission_keeps_its_originals(h: Harness) -> None:
    """The keys Secret is deleted and the reconciler restarts: it creates a Secret with a new key
    id, so the pods signed with the lost key are counted (gauge, log, alert) and held: a pod
    authored at 8 CPU and created at 6400m for an n4 keeps original-cpu 8 (re-capturing its spec
    would make 6400m its baseline for good) and is not resized when its node becomes an n2d.
    Putting the key back heals it: it is then sized from its originals."""
    from tests.cluster.test_admission_sizing import sizing_webhook, wait_sizing_active
    from tests.cluster.test_webhook_cluster import Registration

    ns = h.ns
    name = f"wr-keys-{ns}"[:63]
    path = f"/api/v1/namespaces/{ns}/secrets/{name}"
    secret_flag = f"--originals-keys-secret={ns}/{name}"
    node = h.node("n4", "n4")
    first = h.reconciler(secret_flag, name="reconciler-first")
    secret = h.kube.get(path)
    (old_id,) = secret["data"]
    assert old_id != "k0001", "a generated id, never the same twice"
    key_dir = temporary_directory("projected-keys-")
    project(secret, key_dir)
    webhook = sizing_webhook(h, f"--originals-key-dir={key_dir}", "--cert-reload-interval=1s")
    with Registration(h.kube, ns, webhook):
        wait_sizing_active(h, "n4")
        h.kube.create(
            f"/apis/apps/v1/namespaces/{ns}/deployments",
            deployment("sized", 1, [guaranteed(cpu="8")], node_selector={h.label: "n4"}),
        )
        (pod,) = h.wait_running("sized")
    pod_name = pod["metadata"]["name"]
    h.wait_event(pod_name, "SizedAtAdmission", timeout=60)
    bound = h.pod(pod_name)
    assert resources(bound)["limits"]["cpu"] == q("6400m") and ours(bound)[CPU_ORIGINAL] == "8"
    assert key_id_of(ours(bound)[ORIGINALS_MAC]) == old_id

    # The Secret is lost; the reconciler restarts and creates it again.
    first.close()
    h.kube.delete(path)
    second = h.reconciler(secret_flag, name="reconciler-second")
    (new_id,) = h.kube.get(path)["data"]
    assert new_id != old_id and key_id_order(new_id) > key_id_order(old_id)
    wait_for(
        "the lost key's pod counted",
        lambda: second.metric("workload_resizer_originals_unknown_key_pods") == 1,
        timeout=60,
    )
    assert "pods signed with an originals key the reconciler does not have" in second.logs()
    now = h.pod(pod_name)
    assert ours(now)[CPU_ORIGINAL] == "8" and resources(now)["limits"]["cpu"] == q("6400m")

    # Its node becomes an n2d: the pod is decided again, held, and says why.
    h.relabel(node, "n2d")
    held = h.wait_event(pod_name, "OriginalsUnverified", timeout=60)
    assert f"unknown key {old_id!r}" in held["message"] and "put the key back" in held["message"], held
    now = h.pod(pod_name)
    assert ours(now)[CPU_ORIGINAL] == "8", "never re-captured from its sized spec"
    assert resources(now)["limits"]["cpu"] == q("6400m") and now["metadata"]["generation"] == 1

    # The key put back: the pod verifies again and is sized from its originals (8 CPU on an n2d).
    h.kube.patch(path, {"data": {old_id: secret["data"][old_id]}})
    h.wait_pods("sized", 1, lambda p: resources(p)["limits"]["cpu"] == q("8"), "sized from its originals", timeout=60)
    assert second.metric("workload_resizer_originals_unknown_key_pods") == 0
