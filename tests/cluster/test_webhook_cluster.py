"""End-to-end: the admission webhook (`python -m app`) registered with the real apiserver.

The webhook runs on 127.0.0.1 with a certificate from `python -m certs --ip
127.0.0.1`, and is registered through webhook-config/local-url.yaml rendered by
webhook-config/render.py (devkit.processes.register_webhook). Each test
registers its own MutatingWebhookConfiguration, named after and limited to the
test's namespace, and deletes it at the end.

The cluster is shared: somebody else's webhook may be registered for every
namespace too. Where that could change what a test sees, the test checks this
webhook's own decision log as well as the pod.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from typing import Any

import pytest

from devkit.kube import container, deployment, wait_for
from devkit.processes import (
    MUTATING_WEBHOOKS,
    Webhook,
    WebhookCerts,
    register_webhook,
    unregister_webhook,
    wait_webhook_active,
    wait_webhook_inactive,
    webhook_decisions,
)
from resizer import original_key
from resizer.podstate import APPLIED_AT, APPLIED_INSTANCE_TYPE, ORIGINALS_MAC, PREFIX, SKIP
from tests.cluster.test_reconciler import (
    Harness,
    applied,
    burstable,
    expected_originals,
    guaranteed,
    metric_snapshot,
    originals,
    ours,
    q,
    resources,
    status_resources,
)

NOWHERE = {"kubernetes.io/hostname": "no-such-node"}  # admission-only tests: pods stay Pending


@pytest.fixture(scope="module")
def certs() -> WebhookCerts:
    return WebhookCerts()


@pytest.fixture(scope="module")
def webhook(certs: WebhookCerts) -> Iterator[Webhook]:
    proc = Webhook(certs=certs)
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.terminate()
        proc.close()


class Registration:
    def __init__(self, kube: Any, namespace: str, webhook: Webhook) -> None:
        self.kube = kube
        self.ns = namespace
        self.webhook = webhook
        self.name = f"workload-resizer-{namespace}"

    def __enter__(self) -> Registration:
        register_webhook(
            self.kube, self.webhook.url, self.webhook.certs.ca_bundle, name=self.name, namespaces=[self.ns]
        )
        try:
            wait_webhook_active(self.kube, self.ns)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        unregister_webhook(self.kube, self.name)
        # Pods created after the block must not meet the webhook (the apiserver learns of the
        # unregistration through an informer, a moment later). Never hides the test's own failure.
        try:
            wait_webhook_inactive(self.kube, self.ns)
        except Exception:
            if not exc or exc[0] is None:
                raise
        lines = [line for line in self.webhook.log_lines() if self.ns in line]
        print(f"===== {self.webhook.name}: {len(lines)} log lines about {self.ns}\n" + "\n".join(lines[-60:]))

    def decisions(self) -> list[dict[str, Any]]:
        """This webhook's decision log records for pods of the namespace (dry-run probes excluded)."""
        return [
            record
            for record in webhook_decisions(self.webhook, self.ns)
            if record.get("msg") == "admission decision" and not str(record.get("pod", "")).startswith("webhook-probe-")
        ]

    def decision_for(self, pod_name_prefix: str, count: int = 1) -> list[dict[str, Any]]:
        """The decisions about pods named `pod_name_prefix...`, once `count` of them are logged (the
        webhook logs a decision after it answers, so the pod can be seen first), or all there are
        after a few seconds, for the caller's assertion to show."""
        deadline = time.monotonic() + 10
        while True:
            mine = [r for r in self.decisions() if str(r.get("pod", "")).startswith(pod_name_prefix)]
            if len(mine) >= count or time.monotonic() > deadline:
                return mine
            time.sleep(0.1)


@pytest.fixture
def registered(cluster: Any, namespace: str, webhook: Webhook) -> Iterator[Registration]:
    with Registration(cluster.kube, namespace, webhook) as registration:
        yield registration
    assert not any(m["metadata"]["name"] == registration.name for m in cluster.kube.get(MUTATING_WEBHOOKS)["items"]), (
        "registration left behind"
    )


def create_deployment(kube: Any, ns: str, manifest: dict[str, Any]) -> None:
    kube.create(f"/apis/apps/v1/namespaces/{ns}/deployments", manifest)


def wait_pods(kube: Any, ns: str, app: str, count: int) -> list[dict[str, Any]]:
    return wait_for(
        f"{count} pod(s) of {app}",
        lambda: pods if len(pods := kube.pods(ns, f"app={app}")) == count else None,
        timeout=30,
    )


SIDE = container("side", requests={"cpu": "250m", "memory": "64Mi"}, limits={"cpu": "500m"})


def test_deployment_pods_arrive_with_the_original_annotations(
    cluster: Any, namespace: str, registered: Registration
) -> None:
    app = guaranteed(cpu="1500m", memory="1Gi")
    create_deployment(cluster.kube, namespace, deployment("web", 2, [app, SIDE], node_selector=NOWHERE))
    pods = wait_pods(cluster.kube, namespace, "web", 2)
    want = {**expected_originals(app["resources"], "app"), **expected_originals(SIDE["resources"], "side")}
    assert sorted(want) == sorted(
        [
            original_key("app", "cpu", "request"),
            original_key("app", "cpu", "limit"),
            original_key("app", "memory", "request"),
            original_key("app", "memory", "limit"),
            original_key("side", "cpu", "request"),
            original_key("side", "cpu", "limit"),
            original_key("side", "memory", "request"),
        ]
    )
    for pod in pods:
        assert originals(pod) == want, ours(pod)
        assert set(ours(pod)) == set(want) | {ORIGINALS_MAC}, "nothing but the originals and their MAC"
        assert resources(pod, "app") == {
            "requests": {"cpu": q("1500m"), "memory": q("1Gi")},
            "limits": {"cpu": q("1500m"), "memory": q("1Gi")},
        }
    mine = registered.decision_for("web-", count=2)
    assert [r["decision"] for r in mine] == ["patched", "patched"], mine
    assert all(r["owner"].startswith("ReplicaSet/web-") for r in mine), mine


def test_forged_controller_annotations_in_a_template_are_replaced_or_removed(
    cluster: Any, namespace: str, registered: Registration
) -> None:
    app = burstable()  # cpu 500m (limit 2), memory 128Mi, no memory limit
    forged = {
        original_key("app", "cpu", "request"): "5",  # wrong value: replaced
        original_key("app", "memory", "limit"): "1Ti",  # no such limit: removed
        original_key("ghost", "cpu", "request"): "1",  # no such container: removed
        APPLIED_INSTANCE_TYPE: "n4",  # controller state: removed
        APPLIED_AT: "2020-01-01T00:00:00Z",
        "example.com/team": "payments",  # not ours: kept
    }
    create_deployment(
        cluster.kube, namespace, deployment("copied", 1, [app], node_selector=NOWHERE, annotations=forged)
    )
    pod = wait_pods(cluster.kube, namespace, "copied", 1)[0]
    assert originals(pod) == expected_originals(app["resources"])
    assert set(ours(pod)) == set(expected_originals(app["resources"])) | {ORIGINALS_MAC}, ours(pod)
    assert pod["metadata"]["annotations"]["example.com/team"] == "payments"
    assert [r["decision"] for r in registered.decision_for("copied-")] == ["patched"]


def test_bare_pod_and_skip_annotated_pod_lose_forged_keys_but_get_no_originals(
    cluster: Any, namespace: str, registered: Registration
) -> None:
    forged = {original_key("app", "cpu", "request"): "5", APPLIED_INSTANCE_TYPE: "n4"}
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare", "labels": {"app": "bare"}, "annotations": dict(forged)},
        "spec": {"containers": [guaranteed()], "nodeSelector": NOWHERE, "terminationGracePeriodSeconds": 0},
    }
    cluster.kube.create(f"/api/v1/namespaces/{namespace}/pods", bare)
    skipped = {**forged, SKIP: "true"}
    create_deployment(
        cluster.kube, namespace, deployment("optout", 1, [guaranteed()], node_selector=NOWHERE, annotations=skipped)
    )

    pod = cluster.kube.pod(namespace, "bare")
    assert ours(pod) == {}, "controller-owned keys go on every CREATE: the pod may become eligible later"
    optout = wait_pods(cluster.kube, namespace, "optout", 1)[0]
    assert ours(optout) == {SKIP: "true"}
    assert [(r["decision"], r["reason"]) for r in registered.decision_for("bare")] == [("skipped", "NoController")]
    assert [(r["decision"], r["reason"]) for r in registered.decision_for("optout-")] == [("skipped", "SkipAnnotation")]


STALLED_CONNECTIONS = 40  # more than --max-inflight-reviews (32)


def stall(webhook: Webhook, count: int) -> list[ssl.SSLSocket]:
    """``count`` TLS connections to the webhook, each with a review's headers and 100 bytes
    of its body sent, and never the rest."""
    context = ssl.create_default_context(cafile=webhook.certs.ca_file)
    body = b'{"kind":"AdmissionReview","apiVersion":"admission.k8s.io/v1","request":{"uid":"stall-' + b"x" * 80
    head = b"POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n"
    stalled = []
    for _ in range(count):
        sock = context.wrap_socket(
            socket.create_connection(("127.0.0.1", webhook.port), timeout=10), server_hostname="127.0.0.1"
        )
        sock.sendall(head + body[:100])
        stalled.append(sock)
    return stalled


def still_open(sock: ssl.SSLSocket) -> bool:
    sock.settimeout(0.05)
    try:
        return sock.recv(1) != b""
    except TimeoutError:
        return True
    except (OSError, ssl.SSLError):
        return False


def test_pods_are_stamped_while_connections_stall_their_bodies(
    cluster: Any, namespace: str, certs: WebhookCerts
) -> None:
    """A client holding more stalled connections than reviews in flight (and a read timeout
    long enough that they stay stalled throughout): pods created through the apiserver still
    get their originals, decided in full, well within timeoutSeconds."""
    slow = Webhook("--http-read-timeout=120s", certs=certs, name="webhook-stalled")
    stalled: list[ssl.SSLSocket] = []
    try:
        slow.wait_ready()
        stalled = stall(slow, STALLED_CONNECTIONS)
        with Registration(cluster.kube, namespace, slow) as registration:
            app = guaranteed(cpu="1500m", memory="1Gi")
            started = time.monotonic()
            create_deployment(cluster.kube, namespace, deployment("busy", 3, [app], node_selector=NOWHERE))
            pods = wait_pods(cluster.kube, namespace, "busy", 3)
            for pod in pods:
                assert originals(pod) == expected_originals(app["resources"]), ours(pod)
                assert ORIGINALS_MAC in ours(pod)
            mine = registration.decision_for("busy-", count=3)
            assert [r["decision"] for r in mine] == ["patched"] * 3, mine
            assert all(r["duration_ms"] < 1000 for r in mine), mine
            assert time.monotonic() - started < 30
        assert sum(map(still_open, stalled)) == STALLED_CONNECTIONS, "the stall held throughout"
        assert slow.metric("workload_resizer_webhook_requests_total", result="overloaded") == 0
    finally:
        for sock in stalled:
            sock.close()
        slow.terminate()
        slow.close()


def foreign_webhooks(kube: Any, mine: str) -> list[str]:
    return [m["metadata"]["name"] for m in kube.get(MUTATING_WEBHOOKS)["items"] if m["metadata"]["name"] != mine]


def test_pods_are_created_while_the_webhook_is_down_and_the_reconciler_still_sizes_them(
    h: Harness, certs: WebhookCerts
) -> None:
    stopped = Webhook(certs=certs, name="webhook-stopped")
    h.processes.append(stopped)
    stopped.wait_ready()
    with Registration(h.kube, h.ns, stopped) as registration:
        assert stopped.terminate() == 0
        node = h.node("n4", "n4")
        started = time.monotonic()
        h.deploy("web", node, [guaranteed()], replicas=2)
        pods = h.wait_running("web", 2)
        assert time.monotonic() - started < 25
        others = foreign_webhooks(h.kube, registration.name)
        if not others:  # otherwise someone else's webhook may have stamped them
            assert all(ours(p) == {} for p in pods), [ours(p) for p in pods]
        assert registration.decisions() == []

        # failurePolicy Ignore let them in unstamped; the reconciler takes the originals from the spec.
        reconciler = h.reconciler()
        for pod in h.wait_applied("web", "n4", 2):
            assert resources(pod)["requests"]["cpu"] == q("800m")
            assert originals(pod) == expected_originals(guaranteed()["resources"])
        assert reconciler.metric("rest_client_requests_total", method="PATCH", resource="pods/resize") == 2


def test_with_the_webhook_the_reconciler_makes_two_pod_writes_per_pod(h: Harness, registered: Registration) -> None:
    node = h.node("n4", "n4")
    reconciler = h.reconciler()
    h.deploy("g", node, [guaranteed()], replicas=2)
    h.deploy("b", node, [burstable()])
    pods = h.wait_applied("g", "n4", 2) + h.wait_applied("b", "n4", 1)
    h.wait_status_follows("g", 2)
    h.wait_status_follows("b", 1)
    for pod in pods:
        app = pod["metadata"]["labels"]["app"]
        spec = (guaranteed() if app == "g" else burstable())["resources"]
        pod = h.pod(pod["metadata"]["name"])
        assert originals(pod) == expected_originals(spec), "the originals are the author's, from admission"
        want = (
            {"requests": {"cpu": q("800m"), "memory": q("256Mi")}, "limits": {"cpu": q("800m"), "memory": q("256Mi")}}
            if app == "g"
            else {"requests": {"cpu": q("400m"), "memory": q("128Mi")}, "limits": {"cpu": q("1600m")}}
        )
        assert resources(pod) == want
        assert status_resources(pod) == want
        assert h.reasons(pod["metadata"]["name"]) == ["Resized"]
    assert [r["decision"] for r in registered.decisions()] == ["patched"] * 3
    # Per pod: the resize and the applied annotation, nothing else; one event each.
    assert metric_snapshot(reconciler) == {"PATCH pods": 3, "PATCH pods/resize": 3, "POST events": 3, "PATCH events": 0}
    assert {PREFIX + "applied-instance-type"} <= set(ours(h.pod(pods[0]["metadata"]["name"])))
    assert applied(h.pod(pods[0]["metadata"]["name"])) == "n4"
