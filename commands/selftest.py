"""`selftest`: is the installed product working? What `helm test` runs in its test Pod.

Two checks, each retried until it passes or ``--timeout`` runs out (right after an install the
CA may not be injected yet, nor a leader elected):

- the webhook: a ReplicaSet's pod created in ``--probe-namespace`` as a server-side dry run
  (``dryRun=All``: admission runs, nothing is stored) must come back with the ``original-*``
  annotations: with ``failurePolicy: Ignore`` an unreachable webhook admits pods unstamped.
- the reconciler: its leader-election Lease's holder (``<pod name>_<random>``) renewed it within
  the lease duration and is a Running reconciler pod; without leader election (``--lease ''``),
  a Ready reconciler pod.

The judging is pure (``judge_*``); only :func:`run_selftest` talks to the cluster.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TextIO

from commands.plan import is_ready, run_command
from kube import ApiError, KubeClient
from reconciler.settings import SelftestSettings
from resizer.podstate import described_keys, read_state

PROBE_CONTAINER = "probe"
RETRY_INTERVAL = 1.0


@dataclass(frozen=True)
class Verdict:
    ok: bool
    message: str


def probe_pod(image: str, owner_uid: str) -> dict[str, Any]:
    """A pod as a Deployment's ReplicaSet creates it (the webhook stamps only controlled pods),
    with a CPU request to record, and a securityContext any Pod Security level admits."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "workload-resizer-selftest-",
            "labels": {"app.kubernetes.io/name": "workload-resizer-selftest"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "workload-resizer-selftest",
                    "uid": owner_uid,
                    "controller": True,
                }
            ],
        },
        "spec": {
            "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": PROBE_CONTAINER,
                    "image": image,
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "16Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                }
            ],
        },
    }


def judge_webhook(answer: Mapping[str, Any], namespace: str) -> Verdict:
    """The apiserver's answer to the dry-run creation of :func:`probe_pod` in ``namespace``."""
    state = read_state(answer)
    originals = [o for o in state.containers.get(PROBE_CONTAINER, {}).values() if o.recorded]
    if not originals:
        return Verdict(
            False,
            f"a pod created in {namespace} (dry run) came back without {described_keys('original-*')} "
            "annotations: the apiserver did not call the webhook, or the call failed and failurePolicy "
            f"Ignore admitted the pod unstamped. Is {namespace} in the webhook's namespaceSelector "
            "(scope.*), its caBundle set (cert-manager's CA injector), its pods Ready? Its logs and "
            "the apiserver's say why",
        )
    signed = "signed" if state.mac is not None else "not signed (the webhook has no originals key yet)"
    return Verdict(True, f"a pod created in {namespace} (dry run) came back with {len(originals)} originals, {signed}")


def judge_lease(
    lease: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]], now: datetime, where: str
) -> Verdict:
    """The reconciler's Lease (``where``: namespace/name; None: absent) and the reconciler pods."""
    if lease is None:
        return Verdict(False, f"no Lease {where}: no reconciler has taken the lead (are its pods running?)")
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    if not holder:
        return Verdict(False, f"the Lease {where} has no holder (released; a standby takes it within its retry period)")
    duration = float(spec.get("leaseDurationSeconds") or 0)
    renewed = _parse_time(spec.get("renewTime"))
    if renewed is None:
        return Verdict(False, f"the Lease {where} held by {holder} has no renewTime")
    age = (now - renewed).total_seconds()
    if age > duration:
        return Verdict(
            False,
            f"the Lease {where} held by {holder} was last renewed {age:.0f}s ago, longer than its duration "
            f"({duration:g}s): the leader stopped renewing (or this node's clock is off)",
        )
    name = holder.rpartition("_")[0] or holder
    pod = next((p for p in pods if p["metadata"]["name"] == name), None)
    if pod is None:
        running = ", ".join(sorted(p["metadata"]["name"] for p in pods)) or "none"
        return Verdict(False, f"the Lease {where} is held by {holder}, which is no reconciler pod (pods: {running})")
    phase = (pod.get("status") or {}).get("phase")
    if phase != "Running" or pod["metadata"].get("deletionTimestamp"):
        return Verdict(False, f"the Lease {where} is held by {holder}, whose pod is {phase} or terminating")
    return Verdict(True, f"{name} leads (Lease {where} renewed {max(age, 0):.1f}s ago, duration {duration:g}s)")


def judge_pods(pods: Sequence[Mapping[str, Any]]) -> Verdict:
    """Without leader election: a Ready reconciler pod."""
    ready = sorted(p["metadata"]["name"] for p in pods if is_ready(p))
    if not ready:
        return Verdict(False, f"no reconciler pod is Ready ({len(pods)} found)")
    return Verdict(True, f"{', '.join(ready)} Ready (no leader election)")


def _parse_time(text: Any) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(str(text))  # RFC 3339 with Z: Python 3.11's fromisoformat
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


async def check_webhook(client: KubeClient, settings: SelftestSettings) -> Verdict:
    namespace = settings.probe_namespace
    answer = await client.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        probe_pod(settings.probe_image, str(uuid.uuid4())),
        params={"dryRun": "All"},
    )
    return judge_webhook(answer, namespace)


async def check_reconciler(client: KubeClient, settings: SelftestSettings) -> Verdict:
    pods = (
        await client.get(f"/api/v1/namespaces/{settings.namespace}/pods", labelSelector=settings.reconciler_selector)
    ).get("items") or []
    if not settings.lease:
        return judge_pods(pods)
    lease = None
    try:
        lease = await client.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{settings.namespace}/leases/{settings.lease}"
        )
    except ApiError as err:
        if err.status != 404:
            raise
    return judge_lease(lease, pods, datetime.now(timezone.utc), f"{settings.namespace}/{settings.lease}")


async def until_ok(check: Callable[[], Awaitable[Verdict]], deadline: float) -> Verdict:
    """``check()`` again until it passes or ``deadline`` (monotonic) passes; an API error is a
    failed attempt (e.g. the test's RoleBinding not yet seen by the authorizer)."""
    while True:
        try:
            verdict = await check()
        except ApiError as err:
            verdict = Verdict(False, f"the apiserver refused: {err}")
        if verdict.ok or time.monotonic() + RETRY_INTERVAL > deadline:
            return verdict
        await asyncio.sleep(RETRY_INTERVAL)


def run_selftest(settings: SelftestSettings, out: TextIO = sys.stdout) -> int:
    """Print each check's verdict; 0 when both pass, 1 when one fails (the reason printed)."""

    async def go(client: KubeClient) -> list[tuple[str, Verdict]]:
        deadline = time.monotonic() + settings.timeout
        webhook, reconciler = await asyncio.gather(
            until_ok(lambda: check_webhook(client, settings), deadline),
            until_ok(lambda: check_reconciler(client, settings), deadline),
        )
        return [("webhook", webhook), ("reconciler", reconciler)]

    result = run_command(settings.api, go, max_connections=2)
    if isinstance(result, int):
        return result
    for name, verdict in result:
        print(f"{name}: {'ok' if verdict.ok else 'FAILED'}: {verdict.message}", file=out)
    return 0 if all(verdict.ok for _, verdict in result) else 1
