"""End-to-end: the reconciler (`python -m reconciler`) against the local control plane.

Every test runs its own reconciler process with its own ConfigMap
(`--config-namespace=<test namespace>`) and its own node-type label
(`--node-type-label=e2e.workload-resizer.io/family-<random>`), on KWOK nodes only
it labels that way. The reconciler watches pods cluster-wide, so this keeps it
from touching anybody else's pods (and other reconcilers running against the
shared cluster, e.g. a demo, from touching ours: they look at the default label,
which our nodes do not carry).

This module holds the shared harness (`Harness`, fixtures, expectations) and the
sizing acceptance of the design: one pod per node type, one behaviour per test.
Recovery, leader election and config handling are in the sibling
test_reconciler_*.py files; the webhook in test_webhook_cluster.py.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from devkit.configs import config_yaml
from devkit.kube import ApiError, Kube, container, deployment, wait_for
from devkit.processes import Reconciler
from resizer import original_key, parse_quantity
from resizer.podstate import APPLIED_AT, APPLIED_INSTANCE_TYPE, PREFIX

CONFIG_NAME = "workload-resizer-config"
CRASH_AFTER = "WORKLOAD_RESIZER_TEST_CRASH_AFTER"
COMPONENT = "workload-resizer"

# The design's config plus a slow (0.5) and a very fast (100) machine family.
CONFIG_YAML = config_yaml(extra_node_types={"slow": (0.5, 1.0), "hyper": (100.0, 1.0)})

# Every resize write the reconciler makes, by metric labels.
PATCH_PODS = {"method": "PATCH", "resource": "pods"}
PATCH_RESIZE = {"method": "PATCH", "resource": "pods/resize"}
POST_EVENTS = {"method": "POST", "resource": "events"}
PATCH_EVENTS = {"method": "PATCH", "resource": "events"}

# A node type no config knows: a pod there is decided with one UnknownNodeType Event and nothing
# written to it (test_pod_on_unknown_node_type_gets_an_event_and_nothing_else), what a sentinel costs.
# Held Pending by the fake kubelet (no container starts), so it is decided once: a pod is decided
# again when its phase or containers change.
SENTINEL_TYPE = "sentinel-unknown"
START_HELD = "fake-kubelet.workload-resizer.io/start-held"
SENTINEL_WRITES = {"PATCH pods": 0, "PATCH pods/resize": 0, "POST events": 1, "PATCH events": 0}


def q(text: str) -> Fraction:
    return parse_quantity(text)


def guaranteed(name: str = "app", cpu: str = "1000m", memory: str = "256Mi") -> dict[str, Any]:
    return container(name, requests={"cpu": cpu, "memory": memory}, limits={"cpu": cpu, "memory": memory})


def burstable(name: str = "app") -> dict[str, Any]:
    return container(name, requests={"cpu": "500m", "memory": "128Mi"}, limits={"cpu": "2"})


# ---------------------------------------------------------------- pod accessors


def resources(pod: dict[str, Any], name: str = "app") -> dict[str, dict[str, Fraction]]:
    """{"requests": {...}, "limits": {...}} of a spec container, parsed."""
    c = next(c for c in pod["spec"]["containers"] if c["name"] == name)
    res = c.get("resources") or {}
    return {kind: {r: q(v) for r, v in (res.get(kind) or {}).items()} for kind in ("requests", "limits")}


def status_resources(pod: dict[str, Any], name: str = "app") -> dict[str, dict[str, Fraction]]:
    """What the (fake) kubelet reports as applied to the running container."""
    status = next(s for s in pod["status"].get("containerStatuses") or [] if s["name"] == name)
    res = status.get("resources") or {}
    return {kind: {r: q(v) for r, v in (res.get(kind) or {}).items()} for kind in ("requests", "limits")}


def ours(pod: dict[str, Any]) -> dict[str, str]:
    """The pod's workload-resizer.io/* annotations."""
    return {k: v for k, v in (pod["metadata"].get("annotations") or {}).items() if k.startswith(PREFIX)}


def originals(pod: dict[str, Any]) -> dict[str, Fraction]:
    """original-* annotations, parsed, keyed by annotation key."""
    return {k: q(v) for k, v in ours(pod).items() if k.startswith(PREFIX + "original-")}


def expected_originals(spec: dict[str, dict[str, str]], name: str = "app") -> dict[str, Fraction]:
    """original-* annotations for a container the author wrote as `spec` (requests/limits)."""
    out = {}
    for kind_field, kind in (("requests", "request"), ("limits", "limit")):
        for resource, value in (spec.get(kind_field) or {}).items():
            out[original_key(name, resource, kind)] = q(value)
    return out


def applied(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("annotations") or {}).get(APPLIED_INSTANCE_TYPE)


def qos(pod: dict[str, Any]) -> str:
    return pod["status"].get("qosClass", "")


# ---------------------------------------------------------------- harness


class Harness:
    """One test's world: its namespace, config, labelled nodes and reconciler processes."""

    def __init__(self, cluster: Any, namespace: str) -> None:
        self.cluster = cluster
        self.kube: Kube = cluster.kube
        self.ns = namespace
        self.label = f"e2e.workload-resizer.io/family-{uuid.uuid4().hex[:8]}"
        self.nodes: list[str] = []
        self.processes: list[Any] = []
        self._sentinel_node: str | None = None
        self._sentinels: dict[Reconciler, int] = {}

    # -- config, nodes

    def config(self, text: str = CONFIG_YAML) -> None:
        self.kube.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CONFIG_NAME, "namespace": self.ns},
                "data": {"config.yaml": text},
            },
            self.ns,
        )

    def node(self, suffix: str, family: str | None, no_resize: bool = False) -> str:
        """A KWOK node `<namespace>-<suffix>` whose type (our label) is `family`."""
        name = f"{self.ns}-{suffix}"[:63].rstrip("-")
        self.nodes.append(name)
        self.cluster.add_node(name, no_resize=no_resize, labels={self.label: family} if family else None)
        return name

    def relabel(self, node: str, family: str) -> None:
        self.kube.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {self.label: family}}})

    # -- processes

    def reconciler(
        self, *flags: str, env: dict[str, str] | None = None, name: str = "reconciler", wait: bool = True
    ) -> Reconciler:
        proc = Reconciler(
            self.cluster.kubeconfig,
            f"--config-namespace={self.ns}",
            f"--node-type-label={self.label}",
            *flags,
            env=env,
            name=name,
        )
        self.processes.append(proc)
        if wait:
            proc.wait_ready()
        return proc

    # -- workloads

    def deploy(
        self,
        name: str,
        node: str,
        containers: list[dict[str, Any]],
        replicas: int = 1,
        annotations: dict[str, str] | None = None,
    ) -> None:
        manifest = deployment(
            name, replicas, containers, node_selector={"kubernetes.io/hostname": node}, annotations=annotations
        )
        self.kube.create(f"/apis/apps/v1/namespaces/{self.ns}/deployments", manifest)

    def pods(self, app: str) -> list[dict[str, Any]]:
        return [p for p in self.kube.pods(self.ns, f"app={app}") if "deletionTimestamp" not in p["metadata"]]

    def pod(self, name: str) -> dict[str, Any]:
        return self.kube.pod(self.ns, name)

    def wait_pods(self, app: str, count: int, ok: Any, what: str, timeout: float = 30) -> list[dict[str, Any]]:
        def check() -> list[dict[str, Any]] | None:
            pods = self.pods(app)
            return pods if len(pods) == count and all(ok(p) for p in pods) else None

        return wait_for(f"{count} pod(s) of {app} {what}", check, timeout=timeout)

    def wait_running(self, app: str, count: int = 1) -> list[dict[str, Any]]:
        return self.wait_pods(app, count, lambda p: p["status"].get("phase") == "Running", "Running")

    def wait_unstamped(self, app: str, count: int = 1) -> list[dict[str, Any]]:
        """Wait for Running pods and make sure they look admitted *without* a webhook.

        The cluster is shared: somebody may have registered a webhook for every
        namespace (e.g. a demo's `workload-resizer`), which stamps our pods with
        original-* annotations at creation. Tests of the no-webhook path remove
        them, so the pods are exactly what a cluster without the webhook admits.
        """
        pods = self.wait_running(app, count)
        for pod in pods:
            stamped = ours(pod)
            if stamped:
                self.kube.patch(
                    f"/api/v1/namespaces/{self.ns}/pods/{pod['metadata']['name']}",
                    {"metadata": {"annotations": {k: None for k in stamped}}},
                )
        return self.wait_pods(app, count, lambda p: not ours(p), "without workload-resizer annotations")

    def wait_applied(self, app: str, node_type: str, count: int = 1, timeout: float = 30) -> list[dict[str, Any]]:
        return self.wait_pods(
            app,
            count,
            lambda p: applied(p) == node_type,
            f"annotated applied-instance-type={node_type}",
            timeout=timeout,
        )

    def wait_status_follows(self, app: str, count: int = 1) -> list[dict[str, Any]]:
        """Wait until the fake kubelet reports the spec's resources (the resize was actuated)."""
        return self.wait_pods(app, count, lambda p: status_resources(p) == resources(p), "actuated")

    # -- events

    def events(self, name: str, kind: str = "Pod") -> list[dict[str, Any]]:
        """Events the reconciler recorded about an object (not the scheduler's)."""
        return [
            e
            for e in self.kube.events_for(self.ns, name, kind)
            if (e.get("source") or {}).get("component") == COMPONENT
        ]

    def reasons(self, name: str, kind: str = "Pod") -> list[str]:
        return sorted(e["reason"] for e in self.events(name, kind))

    def wait_event(self, name: str, reason: str, kind: str = "Pod", timeout: float = 30) -> dict[str, Any]:
        return wait_for(
            f"{reason} event on {kind} {name}",
            lambda: next((e for e in self.events(name, kind) if e["reason"] == reason), None),
            timeout=timeout,
        )

    # -- positive signals, before asserting that something did not happen

    def wait_idle(self, proc: Reconciler, timeout: float = 30) -> None:
        """Until `proc` has nothing queued and nothing being reconciled: whatever it queued has been
        decided. A signal for the events it is known to have had: its informers' lists (queued
        before it is ready), a config reload (every pod is queued as the reload is counted), or
        those before a sentinel."""
        wait_for(
            f"{proc.name} idle",
            lambda: proc.metric("workqueue_depth") == 0 and proc.metric("controller_runtime_active_workers") == 0,
            timeout=timeout,
            interval=0.1,
        )

    def sentinel(self, proc: Reconciler) -> None:
        """Until `proc` has taken up every pod change made before this call and finished what they
        queued. The sentinel is a new pod on a node of a type the config does not know: `proc` sees
        pods through one watch, in order, so its UnknownNodeType Event about the sentinel comes
        after every earlier pod event was handled (queued or left alone); then nothing is queued or
        in progress. Costs SENTINEL_WRITES (see `writes_but_sentinels`)."""
        if self._sentinel_node is None:
            self._sentinel_node = self.node("sentinel", SENTINEL_TYPE, no_resize=True)  # start-held works there
        self._sentinels[proc] = self._sentinels.get(proc, 0) + 1
        app = f"sentinel-{sum(self._sentinels.values())}"
        self.deploy(app, self._sentinel_node, [guaranteed(cpu="10m", memory="16Mi")], annotations={START_HELD: "true"})
        [pod] = self.wait_pods(app, 1, lambda p: bool(p["spec"].get("nodeName")), "bound")
        self.wait_event(pod["metadata"]["name"], "UnknownNodeType")
        self.wait_idle(proc)

    def writes_but_sentinels(self, proc: Reconciler) -> dict[str, float]:
        """metric_snapshot(proc) less what the sentinels cost it."""
        count = self._sentinels.get(proc, 0)
        return {k: v - count * SENTINEL_WRITES[k] for k, v in metric_snapshot(proc).items()}

    def outcomes_but_sentinels(self, proc: Reconciler) -> float:
        """Decisions of `proc` (workload_resizer_outcomes_total) but the sentinels'."""
        return proc.metric("workload_resizer_outcomes_total") - self._sentinels.get(proc, 0)

    # -- teardown

    def close(self, print_logs: bool = True) -> None:
        for proc in self.processes:
            proc.close()
        for proc in self.processes if print_logs else ():  # shown by pytest only when the test failed
            lines = proc.log_lines()
            print(
                f"===== {proc.name} (exit {proc.proc.returncode}) {proc.log_path}: last "
                f"{min(len(lines), 150)} of {len(lines)} log lines"
            )
            print("\n".join(lines[-150:]))
        for name in self.nodes:
            try:
                self.kube.delete(f"/api/v1/nodes/{name}")
            except ApiError as err:  # best effort: never hide the test's own failure
                print(f"could not delete node {name}: {err}")


def make_namespace(kube: Kube, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    wait_for(
        "default service account", lambda: kube.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"), timeout=30
    )
    return name


def metric_snapshot(proc: Reconciler) -> dict[str, float]:
    """The write counters of a reconciler, for messages and exact comparisons."""
    return {
        "PATCH pods": proc.metric("rest_client_requests_total", **PATCH_PODS),
        "PATCH pods/resize": proc.metric("rest_client_requests_total", **PATCH_RESIZE),
        "POST events": proc.metric("rest_client_requests_total", **POST_EVENTS),
        "PATCH events": proc.metric("rest_client_requests_total", **PATCH_EVENTS),
    }


# ---------------------------------------------------------------- the design, node type by node type

FLEET = {
    # deployment: (node suffix, node type, container)
    "base": ("n2d", "n2d", guaranteed()),
    "fast": ("n4", "n4", guaranteed()),
    "burst": ("n4", "n4", burstable()),
    "slow": ("slow", "slow", guaranteed()),
    "unknown": ("zz", "zz9", guaranteed()),
    "hyper": ("hyper", "hyper", guaranteed()),
}


class Fleet:
    def __init__(self, harness: Harness, reconciler: Reconciler) -> None:
        self.h = harness
        self.reconciler = reconciler
        self.pods: dict[str, dict[str, Any]] = {}  # deployment -> its pod, settled
        self.admitted: dict[str, dict[str, Any]] = {}  # deployment -> its pod before the reconciler ran

    def pod(self, app: str) -> dict[str, Any]:
        return self.h.pod(self.pods[app]["metadata"]["name"])


@pytest.fixture(scope="module")
def _fleet(cluster: Any) -> Iterator[Fleet]:
    namespace = make_namespace(cluster.kube, "t-reconciler-fleet")
    harness = Harness(cluster, namespace)
    settled = False
    try:
        harness.config()
        nodes = {suffix: harness.node(suffix, family) for suffix, family, _ in FLEET.values()}
        for app, (suffix, _, spec) in FLEET.items():
            harness.deploy(app, nodes[suffix], [spec])
        admitted = {app: harness.wait_unstamped(app)[0] for app in FLEET}
        reconciler = harness.reconciler()
        fleet = Fleet(harness, reconciler)
        fleet.admitted = admitted
        for app, (_, family, _) in FLEET.items():
            if app == "unknown":
                harness.wait_event(admitted[app]["metadata"]["name"], "UnknownNodeType")
                fleet.pods[app] = harness.pods(app)[0]
            else:
                fleet.pods[app] = harness.wait_applied(app, family)[0]
        harness.wait_status_follows("fast")
        settled = True
        yield fleet
    finally:
        # After setup the `fleet` fixture prints the logs for a failing test.
        harness.close(print_logs=not settled)
        cluster.kube.delete(f"/api/v1/namespaces/{namespace}")


@pytest.fixture
def fleet(_fleet: Fleet) -> Iterator[Fleet]:
    yield _fleet
    # Printed on failure only (pytest shows a failing test's captured output).
    for proc in _fleet.h.processes:
        print(f"===== {proc.name}: last log lines\n" + "\n".join(proc.log_lines()[-100:]))


def test_pod_on_baseline_node_is_unchanged_and_marked_already_aligned(fleet: Fleet) -> None:
    pod = fleet.pod("base")
    assert resources(pod) == {
        "requests": {"cpu": q("1"), "memory": q("256Mi")},
        "limits": {"cpu": q("1"), "memory": q("256Mi")},
    }
    assert applied(pod) == "n2d"
    assert APPLIED_AT in ours(pod)
    assert fleet.h.reasons(pod["metadata"]["name"]) == ["AlreadyAligned"]


def test_guaranteed_pod_on_faster_node_shrinks_requests_and_limits_and_stays_guaranteed(fleet: Fleet) -> None:
    pod = fleet.pod("fast")
    want = {"requests": {"cpu": q("800m"), "memory": q("256Mi")}, "limits": {"cpu": q("800m"), "memory": q("256Mi")}}
    assert resources(pod) == want
    assert status_resources(pod) == want, "the kubelet's status must follow the resized spec"
    assert qos(pod) == "Guaranteed"
    assert applied(pod) == "n4"
    assert originals(pod) == expected_originals(guaranteed()["resources"])
    event = fleet.h.events(pod["metadata"]["name"])
    assert [e["reason"] for e in event] == ["Resized"]
    assert event[0]["type"] == "Normal" and event[0]["count"] == 1


def test_burstable_pod_on_faster_node_scales_request_and_limit(fleet: Fleet) -> None:
    pod = fleet.pod("burst")
    assert resources(pod) == {"requests": {"cpu": q("400m"), "memory": q("128Mi")}, "limits": {"cpu": q("1600m")}}
    assert qos(pod) == "Burstable"
    assert applied(pod) == "n4"
    assert originals(pod) == expected_originals(burstable()["resources"])
    assert fleet.h.reasons(pod["metadata"]["name"]) == ["Resized"]


def test_pod_on_slower_node_grows(fleet: Fleet) -> None:
    pod = fleet.pod("slow")
    assert resources(pod) == {
        "requests": {"cpu": q("2"), "memory": q("256Mi")},
        "limits": {"cpu": q("2"), "memory": q("256Mi")},
    }
    assert qos(pod) == "Guaranteed"
    assert applied(pod) == "slow"
    assert originals(pod) == expected_originals(guaranteed()["resources"])
    assert fleet.h.reasons(pod["metadata"]["name"]) == ["Resized"]


def test_pod_on_unknown_node_type_gets_an_event_and_nothing_else(fleet: Fleet) -> None:
    pod = fleet.pod("unknown")
    assert ours(pod) == {}, "no annotation may be written for an unknown node type"
    assert resources(pod) == resources(fleet.admitted["unknown"])
    assert pod["metadata"]["resourceVersion"] == fleet.admitted["unknown"]["metadata"]["resourceVersion"], (
        "the pod must not have been written at all"
    )
    events = fleet.h.events(pod["metadata"]["name"])
    assert [(e["reason"], e["type"], e["count"]) for e in events] == [("UnknownNodeType", "Warning", 1)]
    assert "zz9" in events[0]["message"]


def test_pod_on_very_fast_node_is_clamped_to_the_cpu_minimum(fleet: Fleet) -> None:
    pod = fleet.pod("hyper")
    assert resources(pod) == {
        "requests": {"cpu": q("50m"), "memory": q("256Mi")},
        "limits": {"cpu": q("50m"), "memory": q("256Mi")},
    }
    assert qos(pod) == "Guaranteed"
    assert applied(pod) == "hyper"
    assert fleet.h.reasons(pod["metadata"]["name"]) == ["BoundsClamped"]


def test_without_webhook_the_reconciler_writes_originals_resize_and_applied(fleet: Fleet) -> None:
    """No webhook: originals come from the spec at creation, in a third write per resized pod."""
    for app in ("base", "fast", "burst", "slow", "hyper"):
        spec = FLEET[app][2]["resources"]
        assert originals(fleet.pod(app)) == expected_originals(spec), app
    # 4 pods resized, annotated twice each (originals, then applied); base is aligned: its
    # originals and applied-* in one write; one event each, unknown included.
    assert metric_snapshot(fleet.reconciler) == {
        "PATCH pods": 9,
        "PATCH pods/resize": 4,
        "POST events": 6,
        "PATCH events": 0,
    }


# ---------------------------------------------------------------- modes and node changes


def test_dry_run_records_would_resize_and_patches_nothing(h: Harness) -> None:
    node = h.node("n4", "n4")
    h.deploy("web", node, [guaranteed()])
    before = h.wait_unstamped("web")[0]
    reconciler = h.reconciler("--dry-run")
    name = before["metadata"]["name"]
    event = h.wait_event(name, "WouldResize")
    assert event["type"] == "Normal" and "800m" in event["message"]
    h.wait_idle(reconciler)  # decided, nothing more queued (a dry run writes no pod: no echo to wait for)
    pod = h.pod(name)
    assert resources(pod) == resources(before)
    assert ours(pod) == {}
    assert metric_snapshot(reconciler) == {"PATCH pods": 0, "PATCH pods/resize": 0, "POST events": 1, "PATCH events": 0}
    assert h.reasons(name) == ["WouldResize"]


def test_relabelled_node_resizes_its_pod_from_the_originals(h: Harness) -> None:
    node = h.node("relabel", "n2d")
    h.deploy("web", node, [guaranteed()])
    h.wait_unstamped("web")
    h.reconciler()
    pod = h.wait_applied("web", "n2d")[0]
    name = pod["metadata"]["name"]
    assert resources(pod)["requests"]["cpu"] == q("1")
    first_originals = originals(pod)
    assert first_originals == expected_originals(guaranteed()["resources"])

    h.relabel(node, "n4")
    pod = h.wait_applied("web", "n4")[0]
    assert resources(pod) == {
        "requests": {"cpu": q("800m"), "memory": q("256Mi")},
        "limits": {"cpu": q("800m"), "memory": q("256Mi")},
    }
    assert originals(pod) == first_originals

    # Again, to c3: 1000m / 1.3 = 769m from the originals, not 800m / 1.3 = 615m (compounding).
    h.relabel(node, "c3")
    pod = h.wait_applied("web", "c3")[0]
    assert resources(pod)["requests"]["cpu"] == q("769m")
    assert resources(pod)["limits"]["cpu"] == q("769m")
    assert originals(pod) == first_originals
    # The Event follows the applied-* write (step 3): wait for it, then nothing more.
    wait_for("the second Resized event", lambda: h.reasons(name) == ["AlreadyAligned", "Resized", "Resized"])


def test_node_without_resize_support_gets_one_resize_unsupported_event_and_no_retries(h: Harness) -> None:
    node = h.node("old", "n4", no_resize=True)
    h.deploy("web", node, [guaranteed()], replicas=2)
    before = {p["metadata"]["name"]: p for p in h.wait_unstamped("web", 2)}
    reconciler = h.reconciler()
    for name in before:
        h.wait_event(name, "ResizeUnsupported")
    h.sentinel(reconciler)  # the echoes of its writes (originals, resize-state) taken up too
    for name, admitted in before.items():
        pod = h.pod(name)
        assert resources(pod) == resources(admitted), "the pod must be left at its size"
        assert applied(pod) is None
        events = h.events(name)
        assert [(e["reason"], e["type"], e["count"]) for e in events] == [("ResizeUnsupported", "Warning", 1)], events
        assert "does not support in-place resize" in events[0]["message"]
    # One attempt and one decision per pod, its own writes' echoes taken up: no retry, no requeue
    # storm, and none scheduled for later (a retry or a later look is counted as it is scheduled).
    # (Not controller_runtime_reconcile_total: the cluster is shared, and other people's
    # pods on nodes without our label are reconciled - to a no-op - as they change.)
    assert reconciler.metric("rest_client_requests_total", **PATCH_RESIZE) == 2, "one resize attempt per pod"
    assert h.outcomes_but_sentinels(reconciler) == 2
    assert reconciler.metric("workload_resizer_outcomes_total", reason="ResizeUnsupported") == 2
    assert reconciler.metric("workqueue_retries_total") == 0
    assert reconciler.metric("controller_runtime_reconcile_total", result="requeue_after") == 0
    assert reconciler.metric("controller_runtime_reconcile_errors_total") == 0
    # The originals were written (no webhook here), but nothing after the rejection.
    assert reconciler.metric("rest_client_requests_total", **PATCH_PODS) == 2
