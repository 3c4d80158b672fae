"""The reconciler's resize lands only on the spec it was planned from (the real apiserver's JSON
patch `test` operations): a status update meanwhile does not conflict; a spec change does."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from kube import ApiError, KubeClient, load_credentials
from kube.slim import slim_pod
from reconciler.ports import ApiWriter
from tests.cluster.test_reconciler import Harness, guaranteed, q, resources


def resize_to(cpu: str) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}]}}


async def fenced(h: Harness, pod: dict[str, Any], cpu: str, generation: int) -> dict[str, Any]:
    client = KubeClient(load_credentials(h.cluster.kubeconfig), qps=0, burst=1, max_connections=1)
    try:
        return await ApiWriter(client).resize(slim_pod(pod), resize_to(cpu), if_generation=generation)
    finally:
        await client.close()


def test_a_resize_planned_from_an_older_spec_is_refused_and_a_status_update_is_no_conflict(h: Harness) -> None:
    node = h.node("n4", "n4")
    h.deploy("fenced", node, [guaranteed(cpu="1")])
    read = h.wait_running("fenced")[0]
    name = read["metadata"]["name"]
    # The kubelet reports a status meanwhile: resourceVersion moves, generation does not.
    h.kube.request(
        "PATCH",
        f"/api/v1/namespaces/{h.ns}/pods/{name}/status",
        {"status": {"conditions": [{"type": "example.com/probe", "status": "True"}]}},
        content_type="application/strategic-merge-patch+json",
    )
    assert h.pod(name)["metadata"]["resourceVersion"] != read["metadata"]["resourceVersion"]
    landed = asyncio.run(fenced(h, read, "800m", read["metadata"]["generation"]))
    assert landed["metadata"]["generation"] == read["metadata"]["generation"] + 1
    # A deposed leader's resize planned from the first read arrives late: refused as a conflict.
    with pytest.raises(ApiError) as late:
        asyncio.run(fenced(h, read, "2", read["metadata"]["generation"]))
    assert late.value.status == 409 and late.value.retryable
    assert resources(h.pod(name))["requests"]["cpu"] == q("800m")
