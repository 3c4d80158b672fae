"""`workload-resizer selftest` (what `helm test` runs): its verdicts on the webhook's answer and
the reconciler's Lease, and its flags. The cluster run: tests/cluster/test_installed.py."""

from __future__ import annotations

import base64
import io
from datetime import datetime, timedelta, timezone
from typing import Any

import orjson
import pytest

from app.review import encode, handle_review
from commands import plan, selftest
from commands.cli import parse
from commands.selftest import judge_lease, judge_pods, judge_webhook, probe_pod
from devkit.jsonpatch import apply_patch
from kube import ApiError
from ops.timestamps import rfc3339_micro
from reconciler.settings import SelftestSettings

NOW = datetime(2026, 11, 28, 8, 0, 0, tzinfo=timezone.utc)
WHERE = "workload-resizer-system/workload-resizer-reconciler"


def admitted(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the apiserver answers its creation after calling our webhook's code."""
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "default",
            "operation": "CREATE",
            "dryRun": True,
            "object": pod,
        },
    }
    response = orjson.loads(encode(handle_review(orjson.dumps(review))))["response"]
    assert response["allowed"]
    return apply_patch(pod, orjson.loads(base64.b64decode(response["patch"]))) if "patch" in response else pod


def test_the_webhook_stamps_the_probe_pod_and_the_verdict_says_so() -> None:
    verdict = judge_webhook(admitted(probe_pod("img", "uid-1")), "default")
    assert verdict.ok, verdict.message
    assert verdict.message.startswith("a pod created in default (dry run) came back with 3 originals")


def test_an_unstamped_answer_fails_with_what_to_look_at() -> None:
    verdict = judge_webhook(probe_pod("img", "uid-1"), "apps")
    assert not verdict.ok
    assert "without workload-resizer.io/original-* annotations" in verdict.message
    assert "Is apps in the webhook's namespaceSelector" in verdict.message


def test_the_probe_pod_is_a_replicasets_with_a_restricted_security_context() -> None:
    pod = probe_pod("registry.example/wr:1", "uid-9")
    (owner,) = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("ReplicaSet", "uid-9", True)
    (container,) = pod["spec"]["containers"]
    assert container["image"] == "registry.example/wr:1"
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def reconciler_pod(name: str, phase: str = "Running", ready: bool = True, **metadata: Any) -> dict[str, Any]:
    condition = {"type": "Ready", "status": "True" if ready else "False"}
    return {"metadata": {"name": name, **metadata}, "status": {"phase": phase, "conditions": [condition]}}


def lease(holder: str | None, renewed_ago: float = 2.0, duration: int = 15, now: datetime = NOW) -> dict[str, Any]:
    spec = {"holderIdentity": holder, "leaseDurationSeconds": duration}
    spec["renewTime"] = rfc3339_micro(now - timedelta(seconds=renewed_ago))
    return {"metadata": {"name": "workload-resizer-reconciler"}, "spec": spec}


PODS = [reconciler_pod("wr-reconciler-7f-abcde"), reconciler_pod("wr-reconciler-7f-fghij")]


def test_a_fresh_lease_held_by_a_running_reconciler_pod_passes() -> None:
    verdict = judge_lease(lease("wr-reconciler-7f-fghij_0a1b2c3d", renewed_ago=1.5), PODS, NOW, WHERE)
    assert verdict.ok
    assert verdict.message == f"wr-reconciler-7f-fghij leads (Lease {WHERE} renewed 1.5s ago, duration 15s)"


@pytest.mark.parametrize(
    ("the_lease", "pods", "says"),
    [
        (None, PODS, f"no Lease {WHERE}: no reconciler has taken the lead"),
        (lease(None), PODS, "has no holder (released"),
        (lease("wr-reconciler-7f-abcde_0a1b2c3d", renewed_ago=16), PODS, "last renewed 16s ago, longer than"),
        (lease("node-1_0a1b2c3d"), PODS, "held by node-1_0a1b2c3d, which is no reconciler pod (pods: wr-reconciler"),
        (lease("wr-reconciler-7f-abcde_0a1b2c3d"), [], "which is no reconciler pod (pods: none)"),
        (
            lease("wr-reconciler-7f-abcde_0a1b2c3d"),
            [reconciler_pod("wr-reconciler-7f-abcde", phase="Failed")],
            "whose pod is Failed",
        ),
        (
            lease("wr-reconciler-7f-abcde_0a1b2c3d"),
            [reconciler_pod("wr-reconciler-7f-abcde", deletionTimestamp="2026-11-28T07:59:59Z")],
            "or terminating",
        ),
        ({"spec": {"holderIdentity": "x_1", "leaseDurationSeconds": 15}}, PODS, "has no renewTime"),
    ],
)
def test_a_lease_not_proving_a_live_leader_fails_with_why(the_lease: Any, pods: Any, says: str) -> None:
    verdict = judge_lease(the_lease, pods, NOW, WHERE)
    assert not verdict.ok
    assert says in verdict.message, verdict.message


def test_without_leader_election_a_ready_reconciler_pod_suffices() -> None:
    assert judge_pods([reconciler_pod("a", ready=False), reconciler_pod("b")]).message == "b Ready (no leader election)"
    assert not judge_pods([reconciler_pod("a", ready=False)]).ok
    assert judge_pods([]).message == "no reconciler pod is Ready (0 found)"


def test_flags_become_the_settings_and_defaults_are_the_charts() -> None:
    assert parse(["selftest"]) == SelftestSettings(api=parse(["selftest"]).api)
    settings = parse(
        ["selftest", "--namespace=ops", "--lease=", "--probe-namespace=apps", "--probe-image=i", "--timeout=5s"]
    )
    assert isinstance(settings, SelftestSettings)
    assert (settings.namespace, settings.lease, settings.probe_namespace, settings.probe_image, settings.timeout) == (
        "ops",
        "",
        "apps",
        "i",
        5.0,
    )
    assert SelftestSettings().lease == "workload-resizer-reconciler"


class FakeClient:
    """The apiserver as the selftest sees it: a webhook that stamps (or not), a Lease (or 403s)."""

    def __init__(self, stamps: bool, holder: str | None, fail_first: int = 0) -> None:
        self.stamps, self.holder, self.fail_first, self.calls = stamps, holder, fail_first, 0

    async def request(self, method: str, path: str, body: Any, params: dict[str, str]) -> dict[str, Any]:
        assert (method, params) == ("POST", {"dryRun": "All"}) and path == "/api/v1/namespaces/default/pods"
        return admitted(body) if self.stamps else body

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        if path.endswith("/pods"):
            return {"items": PODS}
        self.calls += 1
        if self.calls <= self.fail_first:
            raise ApiError(403, {"reason": "Forbidden", "message": "leases is forbidden"})
        if self.holder is None:
            raise ApiError(404, {"reason": "NotFound", "message": "not found"})
        return lease(self.holder, now=datetime.now(timezone.utc))

    async def close(self) -> None:
        pass


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(client: FakeClient) -> FakeClient:
        monkeypatch.setattr(plan, "KubeClient", lambda *a, **k: client)  # run_command's client
        monkeypatch.setattr(plan, "load_credentials", lambda *a: None)
        monkeypatch.setattr(selftest, "RETRY_INTERVAL", 0.01)
        return client

    return install


def test_both_checks_pass_after_a_refusal_the_rbac_cache_heals(fake: Any) -> None:
    client = fake(FakeClient(stamps=True, holder="wr-reconciler-7f-abcde_0a1b2c3d", fail_first=2))
    out = io.StringIO()
    assert selftest.run_selftest(SelftestSettings(timeout=5), out) == 0
    assert client.calls == 3
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("webhook: ok: a pod created in default (dry run) came back with 3 originals")
    assert lines[1].startswith("reconciler: ok: wr-reconciler-7f-abcde leads")


def test_a_failing_check_exits_1_with_its_reason_after_the_timeout(fake: Any) -> None:
    fake(FakeClient(stamps=False, holder=None))
    out = io.StringIO()
    assert selftest.run_selftest(SelftestSettings(timeout=0.05), out) == 1
    webhook, reconciler = out.getvalue().splitlines()
    assert webhook.startswith("webhook: FAILED: a pod created in default (dry run) came back without")
    assert reconciler.startswith("reconciler: FAILED: no Lease workload-resizer-system/workload-resizer-reconciler")
