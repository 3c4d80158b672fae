"""The namespace scope, the same for the webhook and the reconciler, against the real apiserver.

kube-system, a namespace excluded by name and a namespace excluded by a label selector:
their pods are never stamped by the webhook nor resized (nor annotated, nor reported)
by the reconciler, while a pod in an in-scope namespace beside them is both.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from devkit.kube import deployment, wait_for
from devkit.processes import Webhook, register_webhook, unregister_webhook, wait_webhook_active
from resizer.scope import namespace_scope
from tests.cluster.test_reconciler import (
    COMPONENT,
    Harness,
    applied,
    guaranteed,
    make_namespace,
    ours,
    q,
    resources,
)


@pytest.fixture
def webhook() -> Iterator[list[Webhook]]:
    started: list[Webhook] = []
    yield started
    for proc in started:
        proc.close()


def test_pods_out_of_scope_are_never_touched_by_either_program(h: Harness, webhook: list[Webhook]) -> None:
    kube = h.kube
    tag = uuid.uuid4().hex[:6]
    opt_out = f"e2e.workload-resizer.io/exclude-{tag}"
    by_name = make_namespace(kube, "scope-name")
    by_label = make_namespace(kube, "scope-label")
    kube.patch(f"/api/v1/namespaces/{by_label}", {"metadata": {"labels": {opt_out: "true"}}})
    system_app = f"scope-{tag}"
    flags = (f"--exclude-namespaces={by_name}", f"--namespace-selector=!{opt_out}")
    scope = namespace_scope(None, [by_name], f"!{opt_out}")
    hook_name = f"wr-scope-{tag}"
    try:
        # The webhook, registered with the namespaceSelector the chart renders for this scope
        # (plus a name filter so it does not stamp other tests' pods).
        proc = Webhook(*flags, name="webhook")
        webhook.append(proc)
        proc.wait_ready()
        register_webhook(kube, proc.url, proc.certs.ca_bundle, name=hook_name)
        config = kube.get(f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{hook_name}")
        selector = scope.webhook_namespace_selector()
        selector["matchExpressions"].append(
            {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [h.ns, by_name, by_label, "kube-system"]}
        )
        config["webhooks"][0]["namespaceSelector"] = selector
        kube.request("PUT", f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{hook_name}", config)
        wait_webhook_active(kube, h.ns)

        node = h.node("n4", "n4")
        manifest = deployment("web", 1, [guaranteed()], node_selector={"kubernetes.io/hostname": node})
        for namespace in (h.ns, by_name, by_label):
            kube.create(f"/apis/apps/v1/namespaces/{namespace}/deployments", manifest)
        system = {
            **manifest,
            "metadata": {"name": system_app},
            "spec": {
                **manifest["spec"],
                "selector": {"matchLabels": {"app": system_app}},
                "template": {**manifest["spec"]["template"], "metadata": {"labels": {"app": system_app}}},
            },
        }
        kube.create("/apis/apps/v1/namespaces/kube-system/deployments", system)
        out_of_scope = {ns: running_pod(h, ns, "web") for ns in (by_name, by_label)}
        out_of_scope["kube-system"] = running_pod(h, "kube-system", system_app)
        in_scope = running_pod(h, h.ns, "web")
        assert ours(in_scope), "the webhook stamps the in-scope pod"
        for namespace, pod in out_of_scope.items():
            assert ours(pod) == {}, f"the webhook stamped a pod in {namespace}"

        reconciler = h.reconciler(*flags)
        resized = h.wait_applied("web", "n4")[0]
        assert resources(resized)["requests"]["cpu"] == q("800m")
        h.wait_idle(reconciler)  # it listed the others before it was ready: decided, or never queued
        for namespace, before in out_of_scope.items():
            pod = kube.pod(namespace, before["metadata"]["name"])
            assert ours(pod) == {}, f"the reconciler annotated a pod in {namespace}"
            assert resources(pod) == resources(before) and pod["metadata"].get("generation") == 1, namespace
            assert pod["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], namespace
            ours_events = [
                e
                for e in kube.events_for(namespace, pod["metadata"]["name"])
                if (e.get("source") or {}).get("component") == COMPONENT
            ]
            assert ours_events == [], namespace

        # The label scope is live: dropping the opt-out label brings the namespace in.
        kube.patch(f"/api/v1/namespaces/{by_label}", {"metadata": {"labels": {opt_out: None}}})
        name = out_of_scope[by_label]["metadata"]["name"]
        pod = wait_for(
            "the opted-in pod resized", lambda: (p := kube.pod(by_label, name)) and applied(p) == "n4" and p, timeout=30
        )
        assert resources(pod)["requests"]["cpu"] == q("800m")
        assert ours(kube.pod(by_name, out_of_scope[by_name]["metadata"]["name"])) == {}
    finally:
        unregister_webhook(kube, hook_name)
        kube.delete(f"/apis/apps/v1/namespaces/kube-system/deployments/{system_app}", propagationPolicy="Background")
        for namespace in (by_name, by_label):
            kube.delete(f"/api/v1/namespaces/{namespace}")


def running_pod(h: Harness, namespace: str, app: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        pods = [p for p in h.kube.pods(namespace, f"app={app}") if p["status"].get("phase") == "Running"]
        return pods[0] if pods else None

    return wait_for(f"a Running {app} pod in {namespace}", check, timeout=60)
