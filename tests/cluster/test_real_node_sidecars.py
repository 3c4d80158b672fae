"""A sidecar (restartable init container) resized in place by the real kubelet with its pod's
container, in one pods/resize sent by the reconciler (`sidecars: true`): the sidecar's cgroup
follows, nothing restarts.

The pod (real node, type n4, cpu ratio 1/1.25): `app` 1 CPU / 256Mi and the sidecar `proxy`
500m / 128Mi, both Guaranteed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from devkit.kube import wait_for
from tests.cluster.test_real_node import (
    START_TIMEOUT,
    WORKLOAD_IMAGE,
    app_status,
    cgroup_limits,
    container_id,
    implied_limits,
    real_deployment,
    wait_resized_truthfully,
)
from tests.cluster.test_real_node_outcomes import alone_on_the_real_node, guaranteed_resources, show
from tests.cluster.test_reconciler import CONFIG_YAML, Harness, guaranteed, metric_snapshot, q, resources
from tests.conftest import RealNode


@pytest.fixture
def h(cluster: Any, namespace: str, real_node: RealNode) -> Iterator[Harness]:
    yield from alone_on_the_real_node(cluster, namespace, real_node, CONFIG_YAML + "sidecars: true\n")


def proxy_status(pod: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in pod["status"].get("initContainerStatuses") or [] if s["name"] == "proxy")


def proxy_spec(pod: dict[str, Any]) -> dict[str, Any]:
    c = next(c for c in pod["spec"]["initContainers"] if c["name"] == "proxy")
    return {kind: {r: q(v) for r, v in (c["resources"].get(kind) or {}).items()} for kind in ("requests", "limits")}


def proxy_reported(pod: dict[str, Any]) -> dict[str, Any] | None:
    res = proxy_status(pod).get("resources")
    if res is None:
        return None
    return {kind: {r: q(v) for r, v in (res.get(kind) or {}).items()} for kind in ("requests", "limits")}


def test_a_sidecar_is_resized_in_place_with_its_container(h: Harness, real_node: RealNode) -> None:
    h.relabel(real_node.name, "n4")
    manifest = real_deployment("meshed", real_node, [guaranteed(cpu="1", memory="256Mi")])
    proxy = {
        **guaranteed("proxy", cpu="500m", memory="128Mi"),
        "image": WORKLOAD_IMAGE,
        "imagePullPolicy": "Never",
        "restartPolicy": "Always",
    }
    manifest["spec"]["template"]["spec"]["initContainers"] = [proxy]
    h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", manifest)
    before = h.wait_pods(
        "meshed",
        1,
        lambda p: (
            p["status"].get("phase") == "Running"
            and all(s.get("ready") for s in p["status"].get("containerStatuses") or [{}])
            and proxy_status(p).get("started")
        ),
        "Running on the real node with its sidecar",
        timeout=START_TIMEOUT,
    )[0]
    name = before["metadata"]["name"]
    proxy_id = proxy_status(before)["containerID"].split("://", 1)[1]
    assert cgroup_limits(real_node, proxy_id) == implied_limits(q("500m"), q("128Mi"))
    assert proxy_reported(before) == guaranteed_resources("500m", "128Mi"), "the kubelet reports a sidecar's size"

    proc = h.reconciler()
    try:
        wait_resized_truthfully(h, name, guaranteed_resources("800m", "256Mi"))
        pod = wait_for(
            "the sidecar's status at 400m",
            lambda: p if proxy_reported(p := h.pod(name)) == guaranteed_resources("400m", "128Mi") else None,
            timeout=START_TIMEOUT,
        )
    finally:
        show(h, name)
    assert resources(pod) == guaranteed_resources("800m", "256Mi")
    assert proxy_spec(pod) == guaranteed_resources("400m", "128Mi")
    assert pod["metadata"]["generation"] == 2, "the container and the sidecar in one resize"
    assert metric_snapshot(proc)["PATCH pods/resize"] == 1
    # In place: the same containers, never restarted, their cgroups at the new sizes.
    assert proxy_status(pod)["restartCount"] == 0 and app_status(pod)["restartCount"] == 0
    assert proxy_status(pod)["containerID"] == proxy_status(before)["containerID"]
    assert container_id(pod) == container_id(before)
    assert cgroup_limits(real_node, proxy_id) == implied_limits(q("400m"), q("128Mi"))
    assert cgroup_limits(real_node, container_id(pod)) == implied_limits(q("800m"), q("256Mi"))
    h.wait_applied("meshed", "n4", timeout=START_TIMEOUT)
    assert pod["status"]["qosClass"] == "Guaranteed"
