"""A tenant against every program of the product, on the real apiserver (the adversarial matrix).

Routes past the webhook's strip: the webhook down, an undecided answer (a review over
its object cap), MACs minted through a made-up AdmissionReview (the signing oracle),
annotations and MACs copied from another pod, and a namespace out of the product's
scope; each time the tenant also bumps metadata.generation by removing a scheduling
gate. Forged fields: original-* (8 CPU), with a resize-state or applied-* alongside.
Programs: the reconciler, `plan` and `restore`.

The author wrote 500m (Guaranteed) on n4 nodes (ratio 1/1.25): no program may take a
pod above 500m x 0.8 = 400m, put one back above 500m, or touch one out of scope.

Containers sharing original-* keys: two valid long names whose (legacy, 8-hex) keys collide,
a small container and a large one; the small one is never sized from the large one's values.
"""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import uuid
from typing import Any

import httpx

from devkit.kube import deployment, wait_for
from devkit.processes import REPO, Webhook, originals_key_dir
from ops.keys import read_key_directory
from resizer import KeyRing, PodIdentity, original_key, sign_originals
from resizer.podstate import APPLIED_INSTANCE_TYPE, APPLIED_SIZE, ORIGINALS_MAC, RESIZE_STATE, legacy_original_key
from tests.cluster.test_reconciler import CONFIG_YAML, Harness, guaranteed, make_namespace, ours, q, resources
from tests.cluster.test_webhook_cluster import Registration

AUTHOR = guaranteed(cpu="500m")
AUTHORED, CEILING = q("500m"), q("400m")
GATE = "example.com/tenant-gate"
EIGHT = {
    original_key("app", "cpu", "request"): "8",
    original_key("app", "cpu", "limit"): "8",
    original_key("app", "memory", "request"): "256Mi",
    original_key("app", "memory", "limit"): "256Mi",
}
FORGERIES = {
    "originals": {},
    "state": {RESIZE_STATE: '{"state":"deferred","nodeType":"n4","generation":1}'},
    "applied": {APPLIED_INSTANCE_TYPE: "c3", APPLIED_SIZE: "0" * 16},
}


# ---------------------------------------------------------------- the tenant's moves


def gated_deployments(h: Harness, node: str, annotations: dict[str, dict[str, str]]) -> dict[str, str]:
    """One gated single-pod Deployment per forgery, its template carrying `annotations[forgery]`;
    returns forgery -> the pod's name once the pods exist (Pending: gated)."""
    for forgery, template_annotations in annotations.items():
        manifest = deployment(
            forgery, 1, [AUTHOR], node_selector={"kubernetes.io/hostname": node}, annotations=template_annotations
        )
        manifest["spec"]["template"]["spec"]["schedulingGates"] = [{"name": GATE}]
        h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", manifest)
    return {
        forgery: h.wait_pods(forgery, 1, lambda p: True, "created")[0]["metadata"]["name"] for forgery in annotations
    }


def annotate(h: Harness, name: str, annotations: dict[str, str]) -> None:
    h.kube.patch(f"/api/v1/namespaces/{h.ns}/pods/{name}", {"metadata": {"annotations": annotations}})


def ungate(h: Harness, names: dict[str, str]) -> None:
    """Removing the gate is a spec change: the apiserver bumps metadata.generation to 2."""
    for name in names.values():
        h.kube.patch(
            f"/api/v1/namespaces/{h.ns}/pods/{name}", [{"op": "remove", "path": "/spec/schedulingGates"}], kind="json"
        )
    for forgery in names:
        h.wait_running(forgery)


def minted(webhook: Webhook, pod: dict[str, Any], originals: dict[str, str]) -> dict[str, str]:
    """The signing oracle: a made-up AdmissionReview for the pod's identity with an 8-CPU spec.
    Returns the annotations the webhook's patch would set (the originals and their MAC)."""
    fake = json.loads(json.dumps(pod))
    fake["metadata"].pop("name", None)
    fake["metadata"]["annotations"] = {}
    cpu = originals[original_key("app", "cpu", "request")]
    fake["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": cpu, "memory": "256Mi"},
        "limits": {"cpu": cpu, "memory": "256Mi"},
    }
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": pod["metadata"]["namespace"],
            "object": fake,
            "userInfo": {"username": "tenant"},
        },
    }
    context = ssl.create_default_context(cafile=webhook.certs.ca_file)
    answer = httpx.post(webhook.url, json=review, verify=context, timeout=10).json()["response"]
    patch = json.loads(base64.b64decode(answer["patch"]))
    annotations: dict[str, str] = {}
    for op in patch:
        if op["path"] == "/metadata/annotations":
            annotations.update(op["value"])
        elif op["path"].startswith("/metadata/annotations/"):
            annotations[op["path"].rsplit("/", 1)[1].replace("~1", "/")] = op["value"]
    assert annotations.get(ORIGINALS_MAC, "").startswith("v1.a."), f"the oracle answers: {annotations}"
    return {k: v for k, v in annotations.items() if "original" in k}


# ---------------------------------------------------------------- the programs' verdicts


def plan(h: Harness, *flags: str) -> dict[str, dict[str, Any]]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "commands",
            "plan",
            f"--kubeconfig={h.cluster.kubeconfig}",
            f"--config-namespace={h.ns}",
            f"--node-type-label={h.label}",
            "-o",
            "json",
            f"--originals-key-dir={originals_key_dir()}",
            *flags,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    pods = [p for w in out["workloads"] for p in w["podPlans"]] + out["notResized"]
    return {p["name"]: p for p in pods if p["namespace"] == h.ns}


def restore_dry_run(h: Harness, *flags: str) -> str:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "commands",
            "restore",
            f"--kubeconfig={h.cluster.kubeconfig}",
            f"--only-namespace={h.ns}",
            "--dry-run",
            f"--originals-key-dir={originals_key_dir()}",
            *flags,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return proc.stdout


def never_above_the_invariant(
    h: Harness, names: dict[str, str], *flags: str, expected_event: str | None = "OriginalsUnverified"
) -> None:
    for forgery, name in names.items():
        if expected_event is not None:
            event = h.wait_event(name, expected_event, timeout=60)
            assert event["type"] == "Warning", (forgery, event)
        pod = h.pod(name)
        assert resources(pod)["requests"]["cpu"] <= AUTHORED, (forgery, "the reconciler raised it")
        assert resources(pod)["limits"]["cpu"] <= AUTHORED, forgery
        assert pod["metadata"]["generation"] == 2, (forgery, "the reconciler resized it")
    planned = plan(h, *flags)
    for forgery, name in names.items():
        entry = planned.get(name)
        if entry is not None:
            cpu = entry["requests"]["cpu"]
            limit = CEILING if entry["outcome"] == "Resize" else AUTHORED
            assert q(f"{cpu['desiredMillicores']}m") <= limit, (forgery, "plan forecasts a raise", entry)
    restored = restore_dry_run(h, *flags)
    for forgery, name in names.items():
        line = next((ln for ln in restored.splitlines() if ln.startswith(f"{h.ns}/{name}:")), "")
        assert "would resize back" not in line, (forgery, "restore would raise it", line)
        assert "left as it is" in line or "would remove" in line, (forgery, line)


# ---------------------------------------------------------------- the routes


def test_webhook_down_forged_template_then_a_generation_bump(h: Harness) -> None:
    node = h.node("n4", "n4")
    h.reconciler()
    names = gated_deployments(h, node, {f: {**EIGHT, **extra} for f, extra in FORGERIES.items()})
    assert all(ours(h.pod(n)).get(original_key("app", "cpu", "request")) == "8" for n in names.values())
    ungate(h, names)
    never_above_the_invariant(h, names)


def test_undecided_webhook_answer_keeps_forgeries_that_still_lift_nothing(h: Harness, webhook: Webhook) -> None:
    node = h.node("n4", "n4")
    h.reconciler()
    padding = {"example.com/padding": "{" * 20_001}  # over the webhook's object cap: "allowed, no patch"
    with Registration(h.kube, h.ns, webhook):
        names = gated_deployments(h, node, {f: {**EIGHT, **extra, **padding} for f, extra in FORGERIES.items()})
    ungate(h, names)
    forged_kept = all(ours(h.pod(n)).get(original_key("app", "cpu", "request")) == "8" for n in names.values())
    # Undecided, the forgeries reached the pod; had the webhook decided, it replaced them with the
    # spec's values (then the pods are resized from 500m, as any other).
    never_above_the_invariant(h, names, expected_event="OriginalsUnverified" if forged_kept else None)


def test_macs_minted_through_a_made_up_review_lift_nothing(h: Harness, webhook: Webhook) -> None:
    node = h.node("n4", "n4")
    h.reconciler()
    names = gated_deployments(h, node, {f: {} for f in FORGERIES})
    for forgery, name in names.items():
        annotate(h, name, {**minted(webhook, h.pod(name), EIGHT), **FORGERIES[forgery]})
    ungate(h, names)
    never_above_the_invariant(h, names)


def test_admission_originals_minted_for_a_resized_spec_lift_nothing(h: Harness, webhook: Webhook) -> None:
    """Issue 34's last route: authored at 500m on a node type twice as slow as the baseline, the pod
    is resized to 1 CPU (generation 2, bound by a pod MAC). The tenant replaces its originals with
    those a made-up review of its spec obtains (1 CPU, signed at admission, equal to the spec). A
    config edit (that type now 2.5x slower) has the pod decided again: trusted, they would give it
    2500m; they vouch for nothing on a changed pod: OriginalsUnverified, left at 1 CPU."""
    node = h.node("slow", "slow")
    h.reconciler()
    with Registration(h.kube, h.ns, webhook):
        h.deploy("resized", node, [AUTHOR])
        name = h.wait_running("resized")[0]["metadata"]["name"]
    h.wait_event(name, "Resized", timeout=60)
    pod = h.pod(name)
    assert resources(pod)["requests"]["cpu"] == q("1") and pod["metadata"]["generation"] == 2
    assert ours(pod)[ORIGINALS_MAC].startswith("v1.p."), "bound to the pod by the reconciler"
    annotate(h, name, minted(webhook, pod, {original_key("app", "cpu", "request"): "1"}))
    assert ours(h.pod(name))[original_key("app", "cpu", "request")] == "1"
    h.config(CONFIG_YAML.replace("slow: { cpuPerf: 0.5", "slow: { cpuPerf: 0.4"))
    event = h.wait_event(name, "OriginalsUnverified", timeout=60)
    assert event["type"] == "Warning" and "signed at admission only" in event["message"], event
    pod = h.pod(name)
    assert resources(pod)["requests"]["cpu"] == q("1") and resources(pod)["limits"]["cpu"] == q("1"), "raised"
    assert pod["metadata"]["generation"] == 2, "resized"
    entry = plan(h)[name]
    assert entry["outcome"] == "OriginalsUnverified", entry
    assert q(f"{entry['requests']['cpu']['desiredMillicores']}m") == q("1"), ("plan forecasts a raise", entry)
    line = next(ln for ln in restore_dry_run(h).splitlines() if ln.startswith(f"{h.ns}/{name}:"))
    assert "left as it is" in line and "would resize back" not in line, line


def test_originals_and_mac_copied_from_another_pod_lift_nothing(h: Harness, webhook: Webhook) -> None:
    node = h.node("n4", "n4")
    h.reconciler()
    with Registration(h.kube, h.ns, webhook):
        h.deploy("big", node, [guaranteed(cpu="8")])
        big = h.wait_running("big")[0]
        h.wait_event(big["metadata"]["name"], "Resized", timeout=60)
        copied = {
            k: v for k, v in ours(h.pod(big["metadata"]["name"])).items() if "original" in k or k == ORIGINALS_MAC
        }
        assert copied[ORIGINALS_MAC].startswith("v1.p."), "bound to the big pod by the reconciler"
        names = gated_deployments(h, node, {f: {} for f in FORGERIES})
    for forgery, name in names.items():
        annotate(h, name, {**copied, **FORGERIES[forgery]})
    ungate(h, names)
    never_above_the_invariant(h, names)


def test_pods_out_of_scope_are_touched_by_no_program(h: Harness) -> None:
    node = h.node("n4", "n4")
    scope = f"--exclude-namespaces={h.ns}"
    h.reconciler(scope)
    names = gated_deployments(h, node, {f: {**EIGHT, **extra} for f, extra in FORGERIES.items()})
    ungate(h, names)
    # A pod in scope, on the same node, after them: once it is resized the reconciler has seen them all.
    other = make_namespace(h.kube, "in-scope")
    try:
        h.kube.create(
            f"/apis/apps/v1/namespaces/{other}/deployments",
            deployment("control", 1, [AUTHOR], node_selector={"kubernetes.io/hostname": node}),
        )
        control = wait_for("the control pod", lambda: next(iter(h.kube.pods(other, "app=control")), None))
        wait_for(
            "the control pod resized",
            lambda: next(
                (e for e in h.kube.events_for(other, control["metadata"]["name"]) if e["reason"] == "Resized"), None
            ),
            timeout=60,
        )
        for name in names.values():
            pod = h.pod(name)
            assert h.events(name) == [], f"{name}: out of scope, yet decided"
            assert resources(pod)["requests"]["cpu"] == AUTHORED and pod["metadata"]["generation"] == 2
            assert ours(pod)[original_key("app", "cpu", "request")] == "8", "not even re-stamped"
        planned = plan(h, scope)
        assert not planned, f"plan lists pods out of scope: {sorted(planned)}"
        restored = restore_dry_run(h, scope)
        for name in names.values():
            line = next(ln for ln in restored.splitlines() if ln.startswith(f"{h.ns}/{name}:"))
            assert "out of the product's scope" in line, line
    finally:
        h.kube.delete(f"/api/v1/namespaces/{other}")


# ---------------------------------------------------------------- sized at admission (docs/security.md)


def sizing_oracle(h: Harness) -> Webhook:
    """A webhook that sizes at admission (for the tenant's made-up reviews; registered for nobody)."""
    proc = Webhook(
        "--size-at-admission=true",
        f"--kubeconfig={h.cluster.kubeconfig}",
        f"--config-namespace={h.ns}",
        f"--node-type-label={h.label}",
        name="webhook-sizing-oracle",
    )
    h.processes.append(proc)
    proc.wait_ready()
    return proc


def minted_sized(h: Harness, webhook: Webhook, pod: dict[str, Any], cpu: str) -> tuple[dict[str, str], str]:
    """A made-up review of the pod's identity, authored at `cpu` and pinned to n4: the annotations
    the webhook's answer sets (originals, record, sized MAC) and the cpu it sizes the pod to."""
    fake = json.loads(json.dumps(pod))
    fake["metadata"].pop("name", None)
    fake["metadata"]["annotations"] = {}
    fake["spec"]["nodeSelector"] = {h.label: "n4"}
    fake["spec"].pop("nodeName", None)
    fake["spec"].pop("schedulingGates", None)  # (a gated pod is not sized at admission: made up without)
    fake["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": cpu, "memory": "256Mi"},
        "limits": {"cpu": cpu, "memory": "256Mi"},
    }
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": "CREATE",
            "namespace": pod["metadata"]["namespace"],
            "object": fake,
        },
    }
    context = ssl.create_default_context(cafile=webhook.certs.ca_file)

    def answer() -> list[dict[str, Any]] | None:
        response = httpx.post(webhook.url, json=review, verify=context, timeout=10).json()["response"]
        ops = json.loads(base64.b64decode(response["patch"]))
        return ops if any(op["path"].startswith("/spec/") for op in ops) else None  # sized once synced

    ops = wait_for("the oracle to size at admission", answer, timeout=60)
    annotations = {
        op["path"].rsplit("/", 1)[1].replace("~1", "/"): op["value"]
        for op in ops
        if op["path"].startswith("/metadata/annotations/")
    }
    sized_cpu = next(op["value"] for op in ops if op["path"].endswith("/requests/cpu"))
    assert annotations[ORIGINALS_MAC].startswith("v1.s."), annotations
    return annotations, sized_cpu


def test_sized_records_minted_through_a_made_up_review_lift_nothing(h: Harness) -> None:
    node = h.node("n4", "n4")
    oracle = sizing_oracle(h)
    h.reconciler()
    names = gated_deployments(h, node, {f: {} for f in FORGERIES})
    for forgery, name in names.items():
        annotations, sized_cpu = minted_sized(h, oracle, h.pod(name), "8")
        assert sized_cpu == "6400m"
        annotate(h, name, {**annotations, **FORGERIES[forgery]})
    ungate(h, names)
    never_above_the_invariant(h, names)


def test_a_minted_sized_record_gives_the_pod_an_honest_author_gets(h: Harness) -> None:
    """The tenant creates pods at the sized values of 8-CPU originals (6400m, what an n4-pinned
    8-CPU pod is created at) and copies minted sized records onto them, unchanged since creation:
    trusted, and sized exactly like the honest author's pods of 8 CPU on every node type."""
    n4, n2d = h.node("n4", "n4"), h.node("n2d", "n2d")
    oracle = sizing_oracle(h)
    with Registration(h.kube, h.ns, oracle):
        manifest = deployment("honest-n4", 1, [guaranteed(cpu="8")], node_selector={h.label: "n4"})
        h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", manifest)
        honest_n4 = h.wait_running("honest-n4")[0]
    h.deploy("honest-n2d", n2d, [guaranteed(cpu="8")])
    tenants = {}
    for app, node in (("tenant-n4", n4), ("tenant-n2d", n2d)):
        h.deploy(app, node, [guaranteed(cpu="6400m")])
        pod = h.wait_running(app)[0]
        annotations, sized_cpu = minted_sized(h, oracle, pod, "8")
        assert sized_cpu == "6400m"
        annotate(h, pod["metadata"]["name"], annotations)
        tenants[app] = pod["metadata"]["name"]
    assert all(h.pod(name)["metadata"]["generation"] == 1 for name in tenants.values())
    h.reconciler()
    h.wait_event(tenants["tenant-n4"], "SizedAtAdmission", timeout=60)
    h.wait_event(honest_n4["metadata"]["name"], "SizedAtAdmission", timeout=60)
    h.wait_applied("tenant-n2d", "n2d", timeout=60)
    h.wait_applied("honest-n2d", "n2d", timeout=60)
    for tenant, honest in (("tenant-n4", "honest-n4"), ("tenant-n2d", "honest-n2d")):
        (t,), (o,) = h.pods(tenant), h.pods(honest)
        assert resources(t) == resources(o), (tenant, resources(t), resources(o))
    assert resources(h.pods("tenant-n2d")[0])["requests"]["cpu"] == q("8"), "the 8-CPU author's size on n2d"


# ---------------------------------------------------------------- containers sharing keys (docs/security.md)

# Two valid container names whose 8-hex legacy keys are equal (tests/unit/test_resizer_original_keys.py).
A = "payments-api-with-a-really-long-name-for-z41osl3f8"
B = "payments-api-with-a-really-long-name-for-qhtejfsi8"
SMALL, LARGE = guaranteed(A, cpu="100m", memory="64Mi"), guaranteed(B, cpu="4", memory="8Gi")


def test_containers_whose_legacy_keys_collide_are_sized_from_their_own_originals(h: Harness, webhook: Webhook) -> None:
    """The issue's measurement: with 8-hex keys the webhook stamped one set for both (the
    large one's) and the small container ended at 3.2 CPU/8Gi on n4."""
    node = h.node("n4", "n4")
    h.reconciler()
    with Registration(h.kube, h.ns, webhook):
        h.deploy("twins", node, [SMALL, LARGE])
        name = h.wait_running("twins")[0]["metadata"]["name"]
    h.wait_event(name, "Resized", timeout=60)
    pod = h.pod(name)
    small, large = resources(pod, A), resources(pod, B)
    assert small["requests"]["cpu"] <= q("80m") and small["limits"]["cpu"] <= q("80m"), small
    assert small["requests"]["memory"] <= q("64Mi") and small["limits"]["memory"] <= q("64Mi"), small
    assert large["requests"]["cpu"] == q("3200m") and large["requests"]["memory"] == q("8Gi"), large
    annotations = ours(pod)
    assert annotations[original_key(A, "cpu", "request")] == "100m"
    assert annotations[original_key(B, "cpu", "request")] == "4"


def legacy_stamp(*containers: dict[str, Any]) -> dict[str, str]:
    """What the previous webhook stamped: one dict under the 8-hex keys (the later container's
    values overwrote the earlier one's)."""
    stamp: dict[str, str] = {}
    for c in containers:
        for kind in ("request", "limit"):
            for resource, value in c["resources"][kind + "s"].items():
                stamp[legacy_original_key(c["name"], resource, kind)] = value
    return stamp


def test_a_pod_left_with_colliding_legacy_originals_is_refused_by_every_program(h: Harness) -> None:
    """Stamped (and bound by a pod MAC) by the previous version, or forged past the webhook:
    the reconciler, `plan` and `restore` all refuse it, naming both containers. (The reconciler
    starts once the pods carry only that stamp: it would bind the spec's originals to a gated pod
    without any, under keys of today that the legacy ones never shadow.)"""
    node = h.node("n4", "n4")
    stamp = legacy_stamp(SMALL, LARGE)
    assert stamp[legacy_original_key(A, "cpu", "request")] == "4", "the small container carries the large one's"
    names = {}
    for route in ("signed", "forged"):
        manifest = deployment(route, 1, [SMALL, LARGE], node_selector={"kubernetes.io/hostname": node})
        manifest["spec"]["template"]["spec"]["schedulingGates"] = [{"name": GATE}]
        h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", manifest)
        names[route] = h.wait_pods(route, 1, lambda p: True, "created")[0]["metadata"]["name"]
    keyring = KeyRing(read_key_directory(originals_key_dir()))
    signed = h.pod(names["signed"])
    annotate(
        h, names["signed"], {**stamp, ORIGINALS_MAC: sign_originals(keyring, stamp, PodIdentity.of(signed), "pod")}
    )
    annotate(h, names["forged"], stamp)
    h.reconciler()
    ungate(h, names)
    for route, name in names.items():
        event = h.wait_event(name, "ResizeFailed", timeout=60)
        assert A in event["message"] and B in event["message"], (route, event["message"])
        pod = h.pod(name)
        assert pod["metadata"]["generation"] == 2, (route, "resized")
        assert resources(pod, A)["requests"]["cpu"] == q("100m"), route
    planned = plan(h)
    for route, name in names.items():
        assert planned[name]["outcome"] == "ResizeFailed" and A in planned[name]["detail"], (route, planned[name])
    restored = restore_dry_run(h)
    for route, name in names.items():
        line = next(ln for ln in restored.splitlines() if ln.startswith(f"{h.ns}/{name}:"))
        assert "NOT restored" in line and A in line and "would resize back" not in line, (route, line)
