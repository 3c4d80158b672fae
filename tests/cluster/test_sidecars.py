"""Sidecars (restartable init containers) on the real apiserver, KWOK nodes.

Each pod runs `app` (Guaranteed 1 CPU / 256Mi), the sidecar `proxy` (initContainers,
restartPolicy Always, 500m / 128Mi) and the plain init container `setup` (200m / 64Mi), on an
n4 node (cpu ratio 1/1.25). With `sidecars: true` the proxy is sized with the app in one
pods/resize (400m); by default it is left alone; `setup` never changes; restore and a config
edit put the proxy back. Pods stamped by a version that had no sidecar originals are trusted
(no warning) and get them recorded before their sidecar is first resized.
"""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from typing import Any

from devkit.kube import deployment, wait_for
from devkit.processes import REPO, Webhook, originals_key_dir
from ops.keys import read_key_directory
from reconciler.outcome import spec_size
from resizer import KeyRing, PodIdentity, Trust, check_originals, original_key, sign_originals
from resizer.podstate import APPLIED_INSTANCE_TYPE, APPLIED_SIZE, ORIGINALS_MAC
from tests.cluster.test_realign import edit_config
from tests.cluster.test_reconciler import (
    CONFIG_YAML,
    Harness,
    guaranteed,
    metric_snapshot,
    ours,
    q,
    resources,
    status_resources,
)
from tests.cluster.test_webhook_cluster import Registration

SIDECARS_ON = CONFIG_YAML + "sidecars: true\n"
AUTHORED = {"app": ("1", "256Mi"), "proxy": ("500m", "128Mi"), "setup": ("200m", "64Mi")}


def sized(cpu: str, memory: str) -> dict[str, dict[str, Fraction]]:
    return {"requests": {"cpu": q(cpu), "memory": q(memory)}, "limits": {"cpu": q(cpu), "memory": q(memory)}}


def deploy(h: Harness, app: str, node: str) -> None:
    manifest = deployment(app, 1, [guaranteed("app", *AUTHORED["app"])], node_selector={"kubernetes.io/hostname": node})
    proxy = guaranteed("proxy", *AUTHORED["proxy"])
    proxy["restartPolicy"] = "Always"
    manifest["spec"]["template"]["spec"]["initContainers"] = [proxy, guaranteed("setup", *AUTHORED["setup"])]
    h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", manifest)


def init_resources(pod: dict[str, Any], name: str) -> dict[str, dict[str, Fraction]]:
    c = next(c for c in pod["spec"]["initContainers"] if c["name"] == name)
    res = c.get("resources") or {}
    return {kind: {r: q(v) for r, v in (res.get(kind) or {}).items()} for kind in ("requests", "limits")}


def init_status_resources(pod: dict[str, Any], name: str) -> dict[str, dict[str, Fraction]] | None:
    status = next((s for s in pod["status"].get("initContainerStatuses") or [] if s["name"] == name), None)
    if status is None or status.get("resources") is None:
        return None
    return {
        kind: {r: q(v) for r, v in (status["resources"].get(kind) or {}).items()} for kind in ("requests", "limits")
    }


def sizes(pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    return resources(pod, "app"), init_resources(pod, "proxy"), init_resources(pod, "setup")


def sidecar_keys(name: str = "proxy") -> list[str]:
    return [original_key(name, r, k) for r in ("cpu", "memory") for k in ("request", "limit")]  # type: ignore[arg-type]


def keyring() -> KeyRing:
    return KeyRing(read_key_directory(originals_key_dir()))


def wait_proxy(h: Harness, name: str, cpu: str) -> dict[str, Any]:
    """The pod once its spec and the fake kubelet's status both give the proxy `cpu` (memory as authored)."""
    want = sized(cpu, AUTHORED["proxy"][1])
    return wait_for(
        f"proxy of {name} at {cpu}",
        lambda: (
            p
            if init_resources(p := h.pod(name), "proxy") == want and init_status_resources(p, "proxy") == want
            else None
        ),
        timeout=30,
    )


def assert_signed_for_the_pod(pod: dict[str, Any]) -> None:
    verdict = check_originals(pod, keyring())
    assert (verdict.trust, verdict.scope) == (Trust.TRUSTED, "pod"), verdict
    for key, (container, value) in {
        original_key("proxy", "cpu", "request"): ("proxy", "500m"),
        original_key("proxy", "memory", "limit"): ("proxy", "128Mi"),
    }.items():
        assert q(ours(pod)[key]) == q(value), (container, key)


def no_warnings(h: Harness, name: str) -> None:
    warnings = [(e["reason"], e["message"]) for e in h.events(name) if e["type"] == "Warning"]
    assert not warnings, warnings


# ---------------------------------------------------------------- opted in


def test_opted_in_sidecar_is_resized_with_its_containers_in_one_resize_and_restored(
    h: Harness, webhook: Webhook
) -> None:
    h.config(SIDECARS_ON)
    node = h.node("n4", "n4")
    with Registration(h.kube, h.ns, webhook):
        deploy(h, "web", node)
        admitted = h.wait_running("web")[0]
    name = admitted["metadata"]["name"]
    # The webhook stamps the sidecar's originals (whatever the opt-in), not the plain init container's.
    assert set(sidecar_keys()) <= set(ours(admitted)), ours(admitted)
    assert not any(".setup" in key for key in ours(admitted))
    assert admitted["metadata"]["annotations"][ORIGINALS_MAC].startswith("v1.a.")

    # `plan` shows the sidecar's resize, and counts it.
    planned = subprocess.run(
        [
            sys.executable,
            "-m",
            "commands",
            "plan",
            f"--kubeconfig={h.cluster.kubeconfig}",
            f"--config-namespace={h.ns}",
            f"--node-type-label={h.label}",
            f"--originals-key-dir={originals_key_dir()}",
            "-o",
            "json",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert planned.returncode == 0, planned.stderr
    pod_plan = next(p for w in json.loads(planned.stdout)["workloads"] for p in w["podPlans"] if p["name"] == name)
    assert "proxy (sidecar): cpu 500m -> 400m" in pod_plan["detail"]
    assert pod_plan["requests"]["cpu"]["currentMillicores"] == 1500
    assert pod_plan["requests"]["cpu"]["desiredMillicores"] == 1200

    proc = h.reconciler()
    h.wait_applied("web", "n4")
    pod = wait_proxy(h, name, "400m")
    assert sizes(pod) == (sized("800m", "256Mi"), sized("400m", "128Mi"), sized("200m", "64Mi"))
    assert pod["metadata"]["generation"] == 2, "one resize for the container and the sidecar"
    assert pod_plan["patch"] == {
        "spec": {
            "containers": [{"name": "app", "resources": {"requests": {"cpu": "800m"}, "limits": {"cpu": "800m"}}}],
            "initContainers": [
                {"name": "proxy", "resources": {"requests": {"cpu": "400m"}, "limits": {"cpu": "400m"}}}
            ],
        }
    }
    assert pod["status"]["qosClass"] == "Guaranteed"
    assert_signed_for_the_pod(pod)
    assert ours(pod)[APPLIED_SIZE] == spec_size(pod)
    # Admission stamped the originals: the reconciler wrote the resize and step 3 only.
    assert metric_snapshot(proc) == {"PATCH pods": 1, "PATCH pods/resize": 1, "POST events": 1, "PATCH events": 0}
    resized = h.wait_event(name, "Resized")
    assert "proxy (sidecar): cpu 500m -> 400m" in resized["message"], resized["message"]
    assert "setup" not in resized["message"]
    no_warnings(h, name)

    proc.terminate()
    restore = subprocess.run(
        [
            sys.executable,
            "-m",
            "commands",
            "restore",
            f"--kubeconfig={h.cluster.kubeconfig}",
            f"--originals-key-dir={originals_key_dir()}",
            f"--only-namespace={h.ns}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert restore.returncode == 0, restore.stdout + restore.stderr
    pod = wait_proxy(h, name, "500m")
    assert sizes(pod) == (sized("1", "256Mi"), sized("500m", "128Mi"), sized("200m", "64Mi"))
    assert not ours(pod), "restore removes every workload-resizer.io annotation"
    assert pod["metadata"]["generation"] == 3, "one resize back, container and sidecar together"


# ---------------------------------------------------------------- opted out, then the config toggles


def test_sidecar_is_left_alone_by_default_and_a_config_toggle_sizes_it_then_puts_it_back(h: Harness) -> None:
    node = h.node("n4", "n4")
    deploy(h, "web", node)
    name = h.wait_unstamped("web")[0]["metadata"]["name"]
    proc = h.reconciler()
    h.wait_applied("web", "n4")
    pod = h.pod(name)
    assert sizes(pod) == (sized("800m", "256Mi"), sized("500m", "128Mi"), sized("200m", "64Mi"))
    assert pod["metadata"]["generation"] == 2
    # Recorded anyway (step 1 writes every original), so an opt-in later has its baseline.
    assert set(sidecar_keys()) <= set(ours(pod))
    assert_signed_for_the_pod(pod)

    edit_config(h, proc, SIDECARS_ON)
    pod = wait_proxy(h, name, "400m")
    assert sizes(pod) == (sized("800m", "256Mi"), sized("400m", "128Mi"), sized("200m", "64Mi"))
    assert pod["metadata"]["generation"] == 3, "the sidecar alone, one resize"
    wait_for("the re-alignment recorded", lambda: ours(h.pod(name))[APPLIED_SIZE] == spec_size(h.pod(name)), timeout=30)

    edit_config(h, proc, CONFIG_YAML)
    pod = wait_proxy(h, name, "500m")
    assert sizes(pod) == (sized("800m", "256Mi"), sized("500m", "128Mi"), sized("200m", "64Mi"))
    assert pod["metadata"]["generation"] == 4
    wait_for("the return recorded", lambda: ours(h.pod(name))[APPLIED_SIZE] == spec_size(h.pod(name)), timeout=30)
    assert_signed_for_the_pod(h.pod(name))
    no_warnings(h, name)


# ---------------------------------------------------------------- pods stamped before sidecars had originals


def stamp_as_before(h: Harness, pod: dict[str, Any], resized_to: str | None) -> dict[str, Any]:
    """Make `pod` look stamped by a version without sidecar originals: the app's originals only,
    signed at admission (`resized_to` None) or, resized to `resized_to` CPUs by that version, with a
    pod MAC and the applied-* record of the time (its size digest without the sidecar)."""
    name = pod["metadata"]["name"]
    path = f"/api/v1/namespaces/{h.ns}/pods/{name}"
    app = {original_key("app", r, k): v for r, v in (("cpu", "1"), ("memory", "256Mi")) for k in ("request", "limit")}  # type: ignore[arg-type]
    if resized_to is None:
        identity = PodIdentity.of({**pod, "metadata": {**pod["metadata"], "name": ""}}, scope="admission")
        h.kube.patch(
            path,
            {
                "metadata": {
                    "annotations": {**app, ORIGINALS_MAC: sign_originals(keyring(), app, identity, "admission")}
                }
            },
        )
        return h.pod(name)
    h.kube.patch(
        f"{path}/resize",
        {
            "spec": {
                "containers": [
                    {"name": "app", "resources": {"requests": {"cpu": resized_to}, "limits": {"cpu": resized_to}}}
                ]
            }
        },
        "strategic",
    )
    pod = wait_for(
        "the app resized by hand and actuated",
        lambda: (
            p
            if resources(p := h.pod(name), "app") == status_resources(p, "app") == sized(resized_to, "256Mi")
            else None
        ),
        timeout=30,
    )
    record = {
        **app,
        APPLIED_INSTANCE_TYPE: "n4",
        APPLIED_SIZE: spec_size(pod),
        ORIGINALS_MAC: sign_originals(keyring(), app, PodIdentity.of(pod), "pod"),
    }
    h.kube.patch(path, {"metadata": {"annotations": record}})
    return h.pod(name)


def test_a_pod_admitted_before_sidecar_originals_is_trusted_and_its_sidecar_recorded(h: Harness) -> None:
    h.config(SIDECARS_ON)
    node = h.node("n4", "n4")
    deploy(h, "web", node)
    pod = stamp_as_before(h, h.wait_unstamped("web")[0], None)
    name = pod["metadata"]["name"]
    assert pod["metadata"]["generation"] == 1
    h.reconciler()
    h.wait_applied("web", "n4")
    pod = wait_proxy(h, name, "400m")
    assert sizes(pod) == (sized("800m", "256Mi"), sized("400m", "128Mi"), sized("200m", "64Mi"))
    assert pod["metadata"]["generation"] == 2
    assert_signed_for_the_pod(pod)
    assert "OriginalsReplaced" not in h.reasons(name)
    no_warnings(h, name)


def test_a_pod_resized_before_sidecar_originals_gets_them_before_its_sidecar_is_sized(h: Harness) -> None:
    node = h.node("n4", "n4")
    deploy(h, "web", node)
    pod = stamp_as_before(h, h.wait_unstamped("web")[0], "800m")
    name, generation = pod["metadata"]["name"], pod["metadata"]["generation"]
    # Opted out: the old record still describes the pod; nothing is written (no spurious re-alignment).
    proc = h.reconciler()
    h.wait_idle(proc)  # ready: it listed the pod; idle: decided, or never queued
    assert metric_snapshot(proc) == {"PATCH pods": 0, "PATCH pods/resize": 0, "POST events": 0, "PATCH events": 0}
    now = h.pod(name)
    assert (now["metadata"]["generation"], ours(now)) == (generation, ours(pod))

    edit_config(h, proc, SIDECARS_ON)
    pod = wait_proxy(h, name, "400m")
    assert sizes(pod) == (sized("800m", "256Mi"), sized("400m", "128Mi"), sized("200m", "64Mi"))
    assert pod["metadata"]["generation"] == generation + 1
    wait_for("the re-alignment recorded", lambda: ours(h.pod(name))[APPLIED_SIZE] == spec_size(h.pod(name)), timeout=30)
    assert_signed_for_the_pod(h.pod(name))
    no_warnings(h, name)
