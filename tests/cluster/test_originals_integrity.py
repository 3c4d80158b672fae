"""Originals no tenant can choose: one adversarial scenario per route, on the real apiserver.

Every scenario deploys a pod whose author wrote 500m (Guaranteed) on an n4 node (ratio
1/1.25), while the attacker wants the baseline to be 16 CPU. Whatever the route, the
pod's requests must never exceed 500m x 0.8 = 400m, and the pod's Events must say why.
"""

from __future__ import annotations

from typing import Any

from devkit.kube import wait_for
from devkit.processes import Webhook
from resizer import original_key
from resizer.podstate import ORIGINALS_MAC
from tests.cluster.test_reconciler import Harness, guaranteed, ours, q, resources
from tests.cluster.test_webhook_cluster import Registration

AUTHOR = guaranteed(cpu="500m")
CEILING = q("400m")  # 500m x baselinePerf 1.0 / n4 cpuPerf 1.25
FORGED = {original_key("app", "cpu", "request"): "16", original_key("app", "cpu", "limit"): "16"}


def cpu(pod: dict[str, Any]) -> Any:
    return resources(pod)["requests"]["cpu"]


def settled(h: Harness, app: str, reason: str) -> dict[str, Any]:
    """The app's one pod once the reconciler recorded `reason` on it."""
    pod = h.wait_running(app)[0]
    h.wait_event(pod["metadata"]["name"], reason, timeout=60)
    return h.pod(pod["metadata"]["name"])


def test_ineligible_at_creation_then_eligible_keeps_no_forged_baseline(h: Harness, webhook: Webhook) -> None:
    """skip: "true" at creation (the webhook used to leave forged keys on ineligible pods), skip removed later."""
    node = h.node("n4", "n4")
    with Registration(h.kube, h.ns, webhook):
        h.deploy("skipped", node, [AUTHOR], annotations={"workload-resizer.io/skip": "true", **FORGED})
        pod = h.wait_running("skipped")[0]
    assert not any(k in ours(pod) for k in FORGED), "stripped at admission although ineligible"
    h.reconciler()
    name = pod["metadata"]["name"]
    h.kube.patch(
        f"/api/v1/namespaces/{h.ns}/pods/{name}", {"metadata": {"annotations": {"workload-resizer.io/skip": None}}}
    )
    # The Resized event follows the applied-* annotations (step 3), so wait for the event.
    h.wait_event(name, "Resized", timeout=60)
    pod = h.pod(name)
    assert ours(pod).get("workload-resizer.io/applied-instance-type") == "n4"
    assert cpu(pod) == CEILING


def test_forged_template_while_the_webhook_is_down_is_recaptured_from_the_spec(h: Harness) -> None:
    node = h.node("n4", "n4")
    h.reconciler()
    h.deploy("forged", node, [AUTHOR], annotations=FORGED)
    pod = settled(h, "forged", "Resized")
    assert cpu(pod) == CEILING
    replaced = next(e for e in h.events(pod["metadata"]["name"]) if e["reason"] == "OriginalsReplaced")
    assert replaced["type"] == "Warning" and "originals MAC" in replaced["message"]
    assert ours(pod)[original_key("app", "cpu", "request")] == "500m"


def test_forged_template_with_the_webhook_up_is_replaced_at_admission(h: Harness, webhook: Webhook) -> None:
    node = h.node("n4", "n4")
    h.reconciler()
    with Registration(h.kube, h.ns, webhook):
        h.deploy("forged", node, [AUTHOR], annotations={**FORGED, ORIGINALS_MAC: "v1.p.k0001.forged"})
        pod = settled(h, "forged", "Resized")
    assert cpu(pod) == CEILING
    assert "OriginalsReplaced" not in h.reasons(pod["metadata"]["name"])


def test_post_creation_edit_of_a_resized_pod_is_refused(h: Harness, webhook: Webhook) -> None:
    node = h.node("n4", "n4")
    h.reconciler()
    with Registration(h.kube, h.ns, webhook):
        h.deploy("edited", node, [AUTHOR])
        pod = settled(h, "edited", "Resized")
    assert cpu(pod) == CEILING
    name = pod["metadata"]["name"]
    h.kube.patch(f"/api/v1/namespaces/{h.ns}/pods/{name}", {"metadata": {"annotations": FORGED}})
    h.relabel(node, "c3")  # a reason to resize again, from the (forged) originals
    event = h.wait_event(name, "OriginalsUnverified", timeout=60)
    assert event["type"] == "Warning" and "spec has changed since creation" in event["message"]
    assert cpu(h.pod(name)) <= CEILING


def test_annotations_copied_from_another_pod_do_not_verify(h: Harness, webhook: Webhook) -> None:
    node = h.node("n4", "n4")
    h.reconciler()
    with Registration(h.kube, h.ns, webhook):
        h.deploy("big", node, [guaranteed(cpu="16")])
        big = settled(h, "big", "Resized")
    copied = {k: v for k, v in ours(big).items() if "original-" in k or k == ORIGINALS_MAC}
    assert copied[original_key("app", "cpu", "request")] == "16"
    # Webhook down (not registered): the copy reaches the apiserver as written.
    h.deploy("copy", node, [AUTHOR], annotations=copied)
    pod = settled(h, "copy", "Resized")
    assert cpu(pod) == CEILING
    assert "OriginalsReplaced" in h.reasons(pod["metadata"]["name"])


def test_the_generation_not_the_applied_annotation_says_whether_a_pod_was_resized(h: Harness, webhook: Webhook) -> None:
    """Removing applied-* and forging originals on a resized pod must not look like a new pod."""
    node = h.node("n4", "n4")
    h.reconciler()
    with Registration(h.kube, h.ns, webhook):
        h.deploy("again", node, [AUTHOR])
        pod = settled(h, "again", "Resized")
    name = pod["metadata"]["name"]
    assert pod["metadata"]["generation"] > 1
    h.kube.patch(
        f"/api/v1/namespaces/{h.ns}/pods/{name}",
        {
            "metadata": {
                "annotations": {
                    **FORGED,
                    ORIGINALS_MAC: None,
                    "workload-resizer.io/applied-instance-type": None,
                    "workload-resizer.io/applied-at": None,
                }
            }
        },
    )
    h.wait_event(name, "OriginalsUnverified", timeout=60)
    assert cpu(h.pod(name)) <= CEILING
    wait_for("no resize after the refusal", lambda: cpu(h.pod(name)) <= CEILING, timeout=5)
