"""A rolling upgrade from the last release, under a burst of pods: nothing lost (marker `installed`).

Once per module, as tests/cluster/test_installed.py does it: the images are built by buildah,
one from a clean copy of this checkout and one from `git archive` of the last released commit
(OLD_COMMIT, tagged apart), both imported into three real nodes' containerd (three: with
hostNetwork each replica holds its ports on its node, so a rolling update's surge pod needs a
node the two replicas leave free); cert-manager runs, and the old commit's chart is installed
with README's install command and values. KWOK nodes of the families n2d, n4 and c3 take most
of the burst.

Then, while a burst of Deployments scales up (`WR_UPGRADE_PODS` pods, default 240, over
`WR_UPGRADE_BURST_SECONDS`, default 40: pods pinned to a family by the node-type label are
sized at admission, the others resized after binding, a few on the real nodes where the kubelet
actuates the resize), `helm upgrade` moves to this checkout's chart and image (the webhook's
rolling update, the reconciler's leader handover). Every pod must then be created (no
FailedCreate), carry its author's originals, be sized exactly once for its node's family with
one outcome Event, have no resize left in flight, and no Event say its originals were rejected;
the Lease must change hands within the lease duration. `helm rollback` then goes back to the
old release under a second, smaller burst, with the same checks (and the first burst's pods
left as they were).

Counts and durations are printed: run with -rP to see them.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from devkit.chart import CHART
from devkit.kube import Kube, wait_for
from devkit.progress import run_visible
from devkit.tempdirs import temporary_directory
from tests.cluster.test_installed import (
    CERT_MANAGER,
    HACK_IMAGE,
    IMAGE_REPOSITORY,
    LEASE_DURATION,
    OURS,
    RECONCILER,
    RELEASE,
    RETRY_PERIOD,
    clean_checkout,
    dry_run_annotations,
    hack,
    namespace_exists,
)
from tests.cluster.test_readme_install import README, Admin, marked_blocks
from tests.cluster.test_real_node import START_TIMEOUT, TAINT, WORKLOAD_IMAGE
from tests.conftest import HACK_CLUSTER, REPO

pytestmark = [pytest.mark.installed, pytest.mark.timeout(2400)]

# The last released state of main: the release an admin upgrades from.
OLD_COMMIT = "3d224dfb2e306c2616cbf6e6571b23a283850fd6"
BURST_PODS = int(os.environ.get("WR_UPGRADE_PODS", "240"))
BURST_SECONDS = float(os.environ.get("WR_UPGRADE_BURST_SECONDS", "40"))
FAMILY_LABEL = "cloud.google.com/machine-family"
# README's values: cpuPerf n2d 1.0 (the baseline), n4 1.25, c3 1.30; memPerf 1.0 everywhere.
AUTHORED = {"cpu": "650m", "memory": "64Mi"}
EXPECTED_CPU = {"n2d": "650m", "n4": "520m", "c3": "500m"}
OUTCOMES = frozenset({"Resized", "AlreadyAligned", "SizedAtAdmission"})
REJECTED_ORIGINALS = frozenset({"OriginalsUnverified", "OriginalsReplaced"})
# client-go semantics: a standby takes a Lease leaseDuration after its last renewal at the
# latest, trying every retryPeriod (jittered up to x1.2); a try may take a second on 2 CPUs.
HANDOVER_LIMIT = LEASE_DURATION + 1.2 * RETRY_PERIOD + 1
# The rollout starts once this many pods of the burst have their outcome Event.
ROLLOUT_AFTER_DECIDED = 10


@dataclass(frozen=True)
class Group:
    """One Deployment of a burst: where its pods go and what they must end up as."""

    name: str
    family: str
    replicas: int
    at_admission: bool = False  # pinned by the node-type label: sized by the webhook
    real: bool = False  # on the real nodes (family n4), where a kubelet actuates the resize

    @property
    def reason(self) -> str:
        if self.at_admission:
            return "SizedAtAdmission"
        return "AlreadyAligned" if EXPECTED_CPU[self.family] == AUTHORED["cpu"] else "Resized"


def groups(prefix: str, total: int, real: int) -> list[Group]:
    """`total` pods: `real` on the real nodes, the rest over the KWOK families (most resized after binding)."""
    shares = [("n2d", False, 0.15), ("n4", False, 0.25), ("c3", False, 0.25), ("n4", True, 0.15), ("c3", True, 0.2)]
    rest = total - real
    counts = [math.floor(rest * share) for _, _, share in shares]
    counts[-1] += rest - sum(counts)
    found = [
        Group(f"{prefix}-{family}{'-pinned' if pinned else ''}", family, count, at_admission=pinned)
        for (family, pinned, _), count in zip(shares, counts, strict=True)
    ]
    return [*found, Group(f"{prefix}-real", "n4", real, real=True)]


@dataclass
class Stage:
    kube: Kube
    admin: Admin
    ns: str  # the release namespace
    label: str  # this test's node label: value = the KWOK node's family, or "real"
    images: dict[str, str]  # "old" / "new" -> image reference
    upgrade: list[str]  # helm upgrade argv to this checkout's chart and image
    figures: dict[str, float] = field(default_factory=dict)
    rollouts: dict[str, tuple[float, float]] = field(default_factory=dict)  # what -> its wall-clock window

    def reconciler_releases(self) -> dict[str, str]:
        """{pod name prefix of a reconciler ReplicaSet: "old" or "new", the release whose image it runs}."""
        path = f"/apis/apps/v1/namespaces/{self.ns}/replicasets"
        versions = {image: version for version, image in self.images.items()}
        return {
            f"{RECONCILER}-{rs['metadata']['labels']['pod-template-hash']}-": versions[
                rs["spec"]["template"]["spec"]["containers"][0]["image"]
            ]
            for rs in self.kube.get(path, labelSelector="app.kubernetes.io/component=reconciler")["items"]
        }

    def our_images(self) -> set[str]:
        pods = self.kube.pods(self.ns, f"app.kubernetes.io/instance={RELEASE}")
        return {
            c["image"] for p in pods if p["metadata"].get("deletionTimestamp") is None for c in p["spec"]["containers"]
        }


def deployment(group: Group, label: str) -> dict[str, Any]:
    selector = {label: "real" if group.real else group.family}
    if group.at_admission:
        selector[FAMILY_LABEL] = group.family
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 1,
        "nodeSelector": selector,
        "containers": [
            {
                "name": "app",
                "image": WORKLOAD_IMAGE,
                "imagePullPolicy": "Never",
                "resources": {"requests": dict(AUTHORED)},
            }
        ],
    }
    if group.real:  # hack/cluster's real nodes give pods the node's network only
        spec |= {"hostNetwork": True, "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": group.name},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": group.name}},
            "template": {"metadata": {"labels": {"app": group.name}}, "spec": spec},
        },
    }


class Burst(threading.Thread):
    """Scales the groups' Deployments up in steps over BURST_SECONDS."""

    def __init__(self, kube: Kube, ns: str, burst: list[Group], label: str) -> None:
        super().__init__(daemon=True)
        self.kube, self.ns, self.burst = kube.own_connections(), ns, burst
        self.error: BaseException | None = None
        for group in burst:
            kube.create(f"/apis/apps/v1/namespaces/{ns}/deployments", deployment(group, label))

    def run(self) -> None:
        steps = max(1, int(BURST_SECONDS / 2))
        try:
            for step in range(1, steps + 1):
                for group in self.burst:
                    replicas = math.ceil(group.replicas * step / steps)
                    self.kube.patch(
                        f"/apis/apps/v1/namespaces/{self.ns}/deployments/{group.name}", {"spec": {"replicas": replicas}}
                    )
                time.sleep(BURST_SECONDS / steps)
        except BaseException as err:  # reported by the test
            self.error = err


class LeaseWatch(threading.Thread):
    """Polls the reconcilers' Lease: every (holder, acquireTime, renewTime) it goes through."""

    def __init__(self, kube: Kube, ns: str) -> None:
        super().__init__(daemon=True)
        self.kube = kube.own_connections()
        self.path = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{RECONCILER}"
        self.records: list[tuple[str, str, str]] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                spec = self.kube.get(self.path)["spec"]
            except Exception:  # a slow apiserver: the next poll sees the Lease again
                self.stopped.wait(0.2)
                continue
            record = (spec.get("holderIdentity") or "", spec.get("acquireTime") or "", spec.get("renewTime") or "")
            if not self.records or self.records[-1] != record:
                self.records.append(record)
            self.stopped.wait(0.2)

    def handovers(self) -> list[tuple[str, str, float]]:
        """(from, to, seconds without a leader: the new holder's acquireTime minus the last
        renewal, or release, seen before it) for each change to a new holder."""
        found = []
        for before, after in zip(self.records, self.records[1:], strict=False):
            if after[0] and after[0] != before[0]:
                gap = (micro_time(after[1]) - micro_time(before[2])).total_seconds()
                found.append((before[0], after[0], gap))
        return found


def micro_time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def old_checkout(into: Path) -> Path:
    """OLD_COMMIT's files, as its release archive has them (the main checkout is left alone)."""
    into.mkdir(parents=True)
    if not _have_commit(OLD_COMMIT):  # a shallow clone: fetch the release from where it came from
        subprocess.run(["git", "fetch", "--quiet", "--depth=1", "origin", OLD_COMMIT], cwd=REPO, capture_output=True)
    assert _have_commit(OLD_COMMIT), f"the upgrade test needs commit {OLD_COMMIT} (the last release) in this clone"
    archive = subprocess.run(["git", "archive", "--format=tar", OLD_COMMIT], cwd=REPO, capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def _have_commit(commit: str) -> bool:
    return (
        subprocess.run(["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=REPO, capture_output=True).returncode == 0
    )


def build_image(context: Path, image: str, work: Path) -> Path:
    """The image built from `context`, as an OCI archive for the real nodes."""
    assert (
        run_visible([str(HACK_IMAGE), "build", "--tag", image, "--context", str(context)], timeout=1800).returncode == 0
    )
    archive = work / f"{image.rsplit(':', 1)[1]}.oci.tar"
    assert run_visible([str(HACK_IMAGE), "archive", str(archive), "--tag", image]).returncode == 0
    return archive


def placement(label: str, tag: str, real_nodes_values: Path, tests: bool) -> list[str]:
    """The values an install on this test's real nodes adds to README's (test_installed.py's)."""
    components = ["webhook", "reconciler", *(["tests"] if tests else [])]
    return [
        "--set",
        f"image.repository={IMAGE_REPOSITORY}",
        "--set",
        f"image.tag={tag}",
        "-f",
        str(real_nodes_values),
        *[arg for c in components for arg in ("--set-string", f"{c}.nodeSelector.{label}=real")],
        "--wait",
        "--timeout",
        "10m",
    ]


@pytest.fixture(scope="module")
def stage(cluster: Any) -> Iterator[Stage]:
    env = cluster.env()
    suffix = uuid.uuid4().hex[:5]
    label = f"upgrade-test-{suffix}"
    tags = {"old": f"test-{suffix}-old", "new": f"test-{suffix}-new"}
    images = {k: f"{IMAGE_REPOSITORY}:{t}" for k, t in tags.items()}
    real_nodes = [f"upg-{suffix}-{i}" for i in "abc"]
    kwok_nodes = {f"upg-{suffix}-{family}": family for family in EXPECTED_CPU}
    work = temporary_directory("upgrade-")
    added: list[str] = []
    figures: dict[str, float] = {}
    files, install, _ = marked_blocks(README.read_text())
    (work / "admin").mkdir()
    for name, content in files.items():
        (work / "admin" / name).write_text(content)
    admin = Admin(cluster, work / "admin")
    (helm_install,) = install
    assert helm_install[:4] == ["helm", "install", RELEASE, "chart/"], helm_install
    release_ns = helm_install[helm_install.index("-n") + 1]
    new_values = [a for a in helm_install[4:] if a != "--create-namespace"]
    upgrade = ["helm", "upgrade", RELEASE, str(CHART), *new_values]
    upgrade += placement(label, tags["new"], REPO / "hack" / "chart" / "real-nodes.yaml", tests=True)
    result = Stage(cluster.kube, admin, release_ns, label, images, upgrade, figures)
    admin.run(["helm", "uninstall", RELEASE, "-n", release_ns, "--wait"], check=False)  # an interrupted run's
    cluster.kube.delete(f"/api/v1/namespaces/{release_ns}")
    wait_for(f"namespace {release_ns} gone", lambda: not namespace_exists(cluster.kube, release_ns), timeout=180)
    try:
        started = time.monotonic()
        old = old_checkout(work / "old")
        archives = [
            build_image(old, images["old"], work),
            build_image(clean_checkout(work / "checkout"), images["new"], work),
        ]
        figures["both images built (s)"] = time.monotonic() - started
        for node in real_nodes:
            added.append(node)
            hack("add-node", node, "--real", "--family", "n4", "--label", f"{label}=real", env=env)
            for archive in archives:
                hack("load-image", str(archive), "--node", node, env=env)
        for node, family in kwok_nodes.items():
            added.append(node)
            cluster.add_node(node, family=family, cpu="256", memory="512Gi", labels={label: family})
        for step in ("build", "install"):
            assert run_visible([str(CERT_MANAGER), step], env=env).returncode == 0, f"cert-manager {step}"
        started = time.monotonic()
        # The old release as it was installed: its chart and its real-node values (no `tests`).
        admin.run(
            [
                "helm",
                "install",
                RELEASE,
                str(old / "chart"),
                *helm_install[4:],
                *placement(label, tags["old"], old / "hack" / "chart" / "real-nodes.yaml", tests=False),
            ]
        )
        figures["old release: helm install --wait (s)"] = time.monotonic() - started
        assert result.our_images() == {images["old"]}
        yield result
    finally:
        print("\n".join(f"[upgrade] {k}: {v:.1f}" for k, v in figures.items()), file=sys.stderr)
        admin.run(["helm", "uninstall", RELEASE, "-n", release_ns, "--wait"], check=False)
        cluster.kube.delete(f"/api/v1/namespaces/{release_ns}")
        for node in added:
            subprocess.run([str(HACK_CLUSTER), "remove-node", node], capture_output=True, env=env, timeout=300)
        shutil.rmtree(work, ignore_errors=True)
        for image in images.values():
            subprocess.run([str(HACK_IMAGE), "remove", "--tag", image], capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def app_namespaces(stage: Stage) -> Iterator[dict[str, str]]:
    names = {"upgrade": f"upgrade-{uuid.uuid4().hex[:5]}", "rollback": f"rollback-{uuid.uuid4().hex[:5]}"}
    try:
        for name in names.values():
            stage.kube.create(
                "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            )
            wait_for(
                "default service account",
                lambda n=name: stage.kube.get(f"/api/v1/namespaces/{n}/serviceaccounts/default"),
                timeout=30,
            )
        yield names
    finally:
        for name in names.values():
            stage.kube.delete(f"/api/v1/namespaces/{name}")
        for name in names.values():
            wait_for(f"namespace {name} gone", lambda n=name: not namespace_exists(stage.kube, n), timeout=180)


def event_count(event: dict[str, Any]) -> int:
    return int(event.get("count") or (event.get("series") or {}).get("count") or 1)


def our_events(kube: Kube, ns: str) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
        if (e.get("source") or {}).get("component") == "workload-resizer"
        or e.get("reportingComponent") == "workload-resizer"
    ]


def outcome_reasons(events: list[dict[str, Any]]) -> dict[str, Counter[str]]:
    """{pod: Counter(outcome reason: times reported)}."""
    found: dict[str, Counter[str]] = {}
    for e in events:
        if e["involvedObject"].get("kind") == "Pod" and e["reason"] in OUTCOMES:
            found.setdefault(e["involvedObject"]["name"], Counter())[e["reason"]] += event_count(e)
    return found


def settled(kube: Kube, ns: str, burst: list[Group]) -> list[dict[str, Any]] | None:
    """Every pod of the burst Running with an outcome reported (:func:`check_pod` says whether
    it is the right one), else None."""
    pods = [p for p in kube.pods(ns) if p["metadata"].get("deletionTimestamp") is None]
    if len(pods) != sum(g.replicas for g in burst) or any(p["status"].get("phase") != "Running" for p in pods):
        return None
    reported = outcome_reasons(our_events(kube, ns))
    return pods if all(p["metadata"]["name"] in reported for p in pods) else None


def run_under_burst(
    stage: Stage, ns: str, burst: list[Group], argv: list[str], what: str
) -> tuple[tuple[float, float], LeaseWatch]:
    """`argv` (helm upgrade or rollback) once the burst has started; returns its start and end (wall
    clock) and the Lease's history over it."""
    lease = LeaseWatch(stage.kube, stage.ns)
    lease.start()
    driver = Burst(stage.kube, ns, burst, stage.label)
    driver.start()
    # Pods are being created and resized when the rollout begins: some already decided.
    wait_for(
        f"the first pods of the {what}'s burst decided",
        lambda: len(outcome_reasons(our_events(stage.kube, ns))) >= ROLLOUT_AFTER_DECIDED,
        timeout=BURST_SECONDS,
    )
    begun, started = time.time(), time.monotonic()
    try:
        stage.admin.run(argv)
        stage.figures[f"{what} --wait (s)"] = time.monotonic() - started
        ended = time.time()
        driver.join(timeout=BURST_SECONDS + 120)
        assert driver.error is None, driver.error
        wait_for(f"the {what}'s burst settled", lambda: settled(stage.kube, ns, burst), timeout=START_TIMEOUT + 120)
        time.sleep(2 * RETRY_PERIOD)  # a second decision on a pod would come now
    finally:
        lease.stopped.set()
        lease.join(timeout=10)
    return (begun, ended), lease


def check_pod(
    pod: dict[str, Any], group: Group, node_labels: dict[str, str], reported: Counter[str], in_rollout: bool = False
) -> None:
    """Created as its author wrote it, sized once for its node's family, nothing left in flight.
    A pinned pod admitted during a rollback (`in_rollout`) may be stamped only and sized after
    binding instead: a replica of the release before starts answering before its sizing caches
    have listed (this release's waits for them: --sizing-ready-timeout)."""
    name = pod["metadata"]["name"]
    annotations = pod["metadata"].get("annotations") or {}
    originals = {k: v for k, v in annotations.items() if k.startswith(f"{OURS}original-")}
    authored = {f"{OURS}original-cpu.app": AUTHORED["cpu"], f"{OURS}original-memory.app": AUTHORED["memory"]}
    assert originals == authored, (name, annotations)
    family = node_labels[FAMILY_LABEL]
    assert family == group.family, (name, node_labels)
    (container,) = pod["spec"]["containers"]
    expected = {"cpu": EXPECTED_CPU[family], "memory": AUTHORED["memory"]}
    assert container["resources"]["requests"] == expected, (name, container["resources"])
    allowed = [Counter({group.reason: 1})]
    if group.at_admission and in_rollout:
        allowed.append(Counter({"Resized": 1}))
    assert reported in allowed, (name, reported)
    assert annotations.get(f"{OURS}applied-instance-type") == family, (name, annotations)
    # Every resize reached its outcome: none pending or in progress, none waiting on the kubelet.
    assert f"{OURS}resize-state" not in annotations, (name, annotations)
    conditions = {c["type"] for c in pod["status"].get("conditions") or []}
    assert not conditions & {"PodResizePending", "PodResizeInProgress"}, (name, pod["status"]["conditions"])
    if group.real:
        (status,) = pod["status"]["containerStatuses"]
        assert status.get("resources", {}).get("requests", {}).get("cpu") == EXPECTED_CPU[family], (name, status)
        assert status["restartCount"] == 0, (name, status)


def deciders(stage: Stage, events: list[dict[str, Any]]) -> Counter[str]:
    """Outcome Events per release ("old", "new") whose reconciler reported them (the Event's
    source is its pod)."""
    releases = stage.reconciler_releases()
    return Counter(
        next((r for prefix, r in releases.items() if e["source"]["host"].startswith(prefix)), e["source"]["host"])
        for e in events
        if e["reason"] in OUTCOMES
    )


def check_pods(
    stage: Stage, ns: str, burst: list[Group], rollout: tuple[float, float] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every pod of the burst created and right (:func:`check_pod`), no Warning; returns the
    pods and our Events. `rollout`: the wall-clock window of the rollout the burst overlapped."""
    kube = stage.kube
    by_name = {g.name: g for g in burst}
    all_events = kube.get(f"/api/v1/namespaces/{ns}/events")["items"]
    failed = [
        e for e in all_events if e["involvedObject"].get("kind") == "ReplicaSet" and e["reason"] == "FailedCreate"
    ]
    assert not failed, [e["message"] for e in failed]
    pods = [p for p in kube.pods(ns) if p["metadata"].get("deletionTimestamp") is None]
    assert len(pods) == sum(g.replicas for g in burst)
    nodes = {n["metadata"]["name"]: n["metadata"]["labels"] for n in kube.get("/api/v1/nodes")["items"]}
    events = our_events(kube, ns)
    reported = outcome_reasons(events)
    for pod in pods:
        group = by_name[pod["metadata"]["labels"]["app"]]
        labels = nodes[pod["spec"]["nodeName"]]
        assert (labels.get(stage.label) == "real") == group.real, (pod["metadata"]["name"], labels)
        created = micro_time(pod["metadata"]["creationTimestamp"]).timestamp()
        in_rollout = rollout is not None and rollout[0] - 2 <= created <= rollout[1] + 2
        check_pod(pod, group, labels, reported.get(pod["metadata"]["name"], Counter()), in_rollout)
    rejected = [(e["involvedObject"]["name"], e["reason"]) for e in events if e["reason"] in REJECTED_ORIGINALS]
    assert not rejected, rejected
    warnings = [(e["involvedObject"]["name"], e["reason"], e["message"]) for e in events if e["type"] == "Warning"]
    assert not warnings, warnings
    return pods, events


def check_burst(stage: Stage, ns: str, burst: list[Group], window: tuple[float, float], what: str) -> list[str]:
    """The checks every burst passes; returns the printed summary lines."""
    stage.rollouts[what] = window
    # A replica of this release is ready only once its sizing caches have listed; one of the
    # release before may answer before (the rollback starts those).
    pods, events = check_pods(stage, ns, burst, window if what == "rollback" else None)
    # The burst overlapped the rollout: pods were admitted while it ran (creationTimestamp: 1 s).
    created = sorted(micro_time(p["metadata"]["creationTimestamp"]).timestamp() for p in pods)
    during = sum(window[0] <= t <= window[1] for t in created)
    assert during > 0, "no pod was created while the rollout ran: the burst ended too early"
    # Both releases' reconcilers decided pods of the burst: what the one before the handover
    # decided was read again by the one after it.
    decided = deciders(stage, events)
    assert decided["old"] and decided["new"], f"the burst was not decided on both sides of the handover: {decided}"
    reasons: Counter[str] = Counter()
    for e in events:
        reasons[e["reason"]] += event_count(e)
    reported, pinned = outcome_reasons(events), {g.name for g in burst if g.at_admission}
    stamped_only = sum(
        p["metadata"]["labels"]["app"] in pinned and reported.get(p["metadata"]["name"]) == Counter({"Resized": 1})
        for p in pods
    )
    per_reason: Counter[str] = Counter()
    for g in burst:
        per_reason[g.reason] += g.replicas
    return [
        f"{what}: pods {len(pods)}, created over {created[-1] - created[0]:.0f}s, {during} of them during the "
        f"{window[1] - window[0]:.1f}s rollout (from {window[0] - created[0]:.0f}s on); resized {per_reason['Resized']} "
        f"(on real nodes {sum(g.replicas for g in burst if g.real)}), sized at admission "
        f"{per_reason['SizedAtAdmission']}, already aligned {per_reason['AlreadyAligned']}; pinned pods a "
        f"replica just started stamped only (sized after binding): {stamped_only}",
        f"{what}: events per reason {dict(sorted(reasons.items()))}, ReplicaSets' FailedCreate 0",
        f"{what}: pods decided by the old release's reconciler {decided['old']}, by the new one's {decided['new']}",
    ]


def every_webhook_keyed(stage: Stage) -> bool:
    """Whether each webhook replica of the release has an originals key. A replica started before
    its kubelet projected the keys Secret logs that it stamps unsigned until it reloads one; the
    apiserver's reviews go to either replica, so a dry run signed by one says nothing of the other."""
    selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=webhook"
    replicas = [p for p in stage.kube.pods(stage.ns, selector) if p["metadata"].get("deletionTimestamp") is None]
    for pod in replicas:
        argv = ["kubectl", "logs", "-n", stage.ns, "--all-containers", pod["metadata"]["name"]]
        log = stage.admin.run(argv, check=False).stdout
        if "no originals key yet" in log and "originals keys reloaded" not in log:
            return False
    return bool(replicas)


def check_handovers(stage: Stage, lease: LeaseWatch, what: str) -> list[str]:
    handovers = lease.handovers()
    assert handovers, f"the Lease never changed hands during the {what}: {lease.records}"
    for _, _, gap in handovers:
        assert gap <= HANDOVER_LIMIT, (handovers, lease.records)
    stage.figures[f"{what}: longest handover (s)"] = max(gap for _, _, gap in handovers)
    return [
        f"{what}: leader handover {before or '(released)'} -> {after}: {gap:.1f}s" for before, after, gap in handovers
    ]


def test_helm_upgrade_under_a_burst_loses_nothing(stage: Stage, app_namespaces: dict[str, str]) -> None:
    ns = app_namespaces["upgrade"]
    # A fresh install's webhook stamps unsigned, and so sizes nothing at admission, until the
    # kubelet projects the keys Secret its reconciler created (about a minute): not an upgrade's.
    wait_for(
        "every replica of the old webhook to sign its stamps",
        lambda: every_webhook_keyed(stage) and f"{OURS}originals-mac" in dry_run_annotations(stage.kube, ns),
        timeout=180,
        interval=2,
    )
    burst = groups("up", BURST_PODS, real=3)
    window, lease = run_under_burst(stage, ns, burst, stage.upgrade, "helm upgrade")
    assert stage.our_images() == {stage.images["new"]}
    lines = check_burst(stage, ns, burst, window, "upgrade")
    lines += check_handovers(stage, lease, "upgrade")
    lines.append(f"upgrade: helm upgrade --wait took {stage.figures['helm upgrade --wait (s)']:.1f}s")
    print("\n".join(lines))


def test_helm_rollback_under_a_burst_loses_nothing(stage: Stage, app_namespaces: dict[str, str]) -> None:
    ns, upgraded = app_namespaces["rollback"], app_namespaces["upgrade"]
    before = {p["metadata"]["name"]: p["spec"]["containers"][0]["resources"] for p in stage.kube.pods(upgraded)}
    burst = groups("down", max(BURST_PODS // 3, 12), real=2)
    rollback = ["helm", "rollback", RELEASE, "-n", stage.ns, "--wait", "--timeout", "10m"]
    window, lease = run_under_burst(stage, ns, burst, rollback, "helm rollback")
    assert stage.our_images() == {stage.images["old"]}
    lines = check_burst(stage, ns, burst, window, "rollback")
    lines += check_handovers(stage, lease, "rollback")
    lines.append(f"rollback: helm rollback --wait took {stage.figures['helm rollback --wait (s)']:.1f}s")
    # The old release, back, leaves the first burst as it was: no second decision, no rejection.
    after = {p["metadata"]["name"]: p["spec"]["containers"][0]["resources"] for p in stage.kube.pods(upgraded)}
    assert after == before
    check_pods(stage, upgraded, groups("up", BURST_PODS, real=3))
    print("\n".join(lines))
