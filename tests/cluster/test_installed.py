"""The product installed as users install it, running on real nodes (marker `installed`).

Once per module: the image is built from a clean copy of the checkout by buildah
(`hack/image build`, on the local Debian base), exported as an OCI archive and imported into
two real nodes' containerd (`hack/cluster load-image`); cert-manager runs; the chart is
installed by README's own install command and values.yaml (the marked blocks
tests/cluster/test_readme_install.py reads), with only these added: the image reference,
hack/chart/real-nodes.yaml (hostNetwork, the real nodes' toleration and selector), a node
selector for this test's nodes, and --wait. Then a Deployment of 3 pods spread over the two
real nodes and a KWOK node is resized by the in-cluster webhook and reconciler, the leader is
stopped, and README's uninstall commands (restore limited to the test's namespace) are
checked to leave nothing of ours behind.

Figures (build time, image size, `helm install` to the first `Resized`, leader takeover) are
printed: run with -s or -rP to see them.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from devkit.chart import CHART
from devkit.kube import Kube, wait_for
from devkit.progress import run_visible
from devkit.tempdirs import temporary_directory
from tests.cluster.test_readme_install import README, Admin, _exists, _flag, marked_blocks
from tests.cluster.test_real_node import START_TIMEOUT, TAINT, WORKLOAD_IMAGE, container_cgroups
from tests.conftest import HACK_CLUSTER, REPO, read_real_node

pytestmark = [pytest.mark.installed, pytest.mark.timeout(2400)]

HACK_IMAGE = REPO / "hack" / "image"
CERT_MANAGER = REPO / "hack" / "certmanager" / "run"
REAL_NODE_VALUES = REPO / "hack" / "chart" / "real-nodes.yaml"
IMAGE_REPOSITORY = "workload-resizer.local/workload-resizer"
RELEASE = "workload-resizer"
RECONCILER = f"{RELEASE}-reconciler"
WEBHOOK = f"{RELEASE}-webhook"
OURS = "workload-resizer.io/"
LEASE_DURATION = 15.0  # the chart's reconciler.leaderElection defaults
RETRY_PERIOD = 2.0
REPLICAS = 3


@dataclass
class Installed:
    kube: Kube
    env: dict[str, str]
    admin: Admin  # runs README's commands
    uninstall: list[list[str]]  # README's uninstall commands
    ns: str  # the release namespace
    app_ns: str  # the workload's namespace
    nodes: list[str]  # the two real nodes
    kwok_node: str
    figures: dict[str, float] = field(default_factory=dict)

    def kubectl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(["kubectl", *args], capture_output=True, text=True, env=self.env, timeout=120)
        if check:
            assert proc.returncode == 0, f"kubectl {' '.join(args)}: {proc.stderr}"
        return proc

    def our_pods(self, component: str) -> list[dict[str, Any]]:
        return self.kube.pods(self.ns, f"app.kubernetes.io/component={component}")

    def app_pods(self) -> list[dict[str, Any]]:
        return self.kube.pods(self.app_ns, "app=installed")

    def lease_holder(self) -> str:
        lease = self.kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{self.ns}/leases/{RECONCILER}")
        return str(lease["spec"].get("holderIdentity") or "")

    def identities(self) -> dict[str, str]:
        """{leader-election identity: reconciler pod name}, from each pod's own log."""
        found = {}
        for pod in self.our_pods("reconciler"):
            for line in self.kubectl("logs", "-n", self.ns, pod["metadata"]["name"]).stdout.splitlines():
                entry = parse(line)
                if entry.get("msg") in ("waiting for leadership", "became leader") and entry.get("identity"):
                    found[entry["identity"]] = pod["metadata"]["name"]
        return found


def namespace_exists(kube: Kube, name: str) -> bool:
    return any(n["metadata"]["name"] == name for n in kube.get("/api/v1/namespaces")["items"])


def parse(line: str) -> dict[str, Any]:
    try:
        entry = json.loads(line)
    except ValueError:
        return {}
    return entry if isinstance(entry, dict) else {}


def clean_checkout(into: Path) -> Path:
    """The checkout's files as git sees them (tracked, and new files not ignored): no venv,
    caches or cluster state, as a fresh clone would have."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, listed):
        source = REPO / rel
        if source.is_file():
            target = into / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return into


def hack(*args: str, env: dict[str, str]) -> str:
    proc = run_visible([str(HACK_CLUSTER), *args], env=env, timeout=900)
    assert proc.returncode == 0, f"hack/cluster {' '.join(args)} failed (exit {proc.returncode})"
    return proc.stdout


def workload(nodes_label: str) -> dict[str, Any]:
    """3 Guaranteed pods, one per node labelled `nodes_label` (the two real nodes and a KWOK node)."""
    resources = {"cpu": "500m", "memory": "64Mi"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "installed"},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": {"app": "installed"}},
            "template": {
                "metadata": {"labels": {"app": "installed"}},
                "spec": {
                    "hostNetwork": True,
                    "terminationGracePeriodSeconds": 1,
                    "tolerations": [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}],
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {"matchExpressions": [{"key": nodes_label, "operator": "Exists"}]}
                                ]
                            }
                        },
                        "podAntiAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": [
                                {
                                    "topologyKey": "kubernetes.io/hostname",
                                    "labelSelector": {"matchLabels": {"app": "installed"}},
                                }
                            ]
                        },
                    },
                    "containers": [
                        {
                            "name": "app",
                            "image": WORKLOAD_IMAGE,
                            "imagePullPolicy": "Never",
                            "resources": {"requests": resources, "limits": resources},
                        }
                    ],
                },
            },
        },
    }


def resized_events(kube: Kube, ns: str) -> list[dict[str, Any]]:
    return [e for e in kube.get(f"/api/v1/namespaces/{ns}/events")["items"] if e["reason"] == "Resized"]


def webhook_stamps(kube: Kube, ns: str) -> bool:
    """A dry-run pod creation comes back with original-* annotations: the apiserver called the
    in-cluster webhook (through its Service) with the CA cert-manager injected."""
    return any(k.startswith(f"{OURS}original-") for k in dry_run_annotations(kube, ns))


def dry_run_annotations(kube: Kube, ns: str) -> dict[str, str]:
    """The annotations a pod controlled by a ReplicaSet comes back with from a dry-run creation."""
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "probe-",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "probe",
                    "uid": str(uuid.uuid4()),
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "c", "image": WORKLOAD_IMAGE, "resources": {"requests": {"cpu": "100m"}}}]},
    }
    created = kube.request("POST", f"/api/v1/namespaces/{ns}/pods", probe, params={"dryRun": "All"})
    return dict(created.get("metadata", {}).get("annotations") or {})


@pytest.fixture(scope="module")
def installed(cluster: Any) -> Iterator[Installed]:
    env = cluster.env()
    suffix = uuid.uuid4().hex[:5]
    label = f"installed-test-{suffix}"
    tag = f"test-{suffix}"
    image = f"{IMAGE_REPOSITORY}:{tag}"
    figures: dict[str, float] = {}
    nodes = [f"inst-{suffix}-a", f"inst-{suffix}-b"]
    kwok_node = f"inst-{suffix}-kwok"
    work = temporary_directory("installed-")
    added: list[str] = []
    files, install, uninstall = marked_blocks(README.read_text())
    (work / "admin").mkdir()
    (work / "admin" / "chart").symlink_to(CHART)
    for name, content in files.items():
        (work / "admin" / name).write_text(content)
    admin = Admin(cluster, work / "admin")
    release_ns = _flag(install[0], "-n", "--namespace")
    inst = Installed(
        kube=cluster.kube,
        env=env,
        admin=admin,
        uninstall=uninstall,
        ns=release_ns,
        app_ns=f"installed-{suffix}",
        nodes=nodes,
        kwok_node=kwok_node,
        figures=figures,
    )
    admin.run(["helm", "uninstall", RELEASE, "-n", release_ns, "--wait"], check=False)  # an interrupted run's
    cluster.kube.delete(f"/api/v1/namespaces/{release_ns}")
    wait_for(f"namespace {release_ns} gone", lambda: not namespace_exists(cluster.kube, release_ns), timeout=180)
    try:
        started = time.monotonic()
        build = run_visible(
            [str(HACK_IMAGE), "build", "--tag", image, "--context", str(clean_checkout(work / "checkout"))],
            timeout=1800,
        )
        assert build.returncode == 0, "hack/image build failed"
        figures["image build (s)"] = time.monotonic() - started
        archive = work / "image.oci.tar"
        assert run_visible([str(HACK_IMAGE), "archive", str(archive), "--tag", image]).returncode == 0
        figures["image archive (MB, compressed layers)"] = archive.stat().st_size / 1e6
        inspect = json.loads(run_visible([str(HACK_IMAGE), "inspect", "--tag", image]).stdout)
        figures["image size (MB, uncompressed layers)"] = inspect["size_bytes"] / 1e6
        assert inspect["user"] == "65532:65532"

        for node in nodes:
            added.append(node)
            hack("add-node", node, "--real", "--family", "n4", "--label", f"{label}=1", env=env)
            hack("load-image", str(archive), "--node", node, env=env)
        added.append(kwok_node)
        cluster.add_node(kwok_node, family="n4", labels={label: "1"})

        for step in ("build", "install"):
            assert run_visible([str(CERT_MANAGER), step], env=env).returncode == 0, f"cert-manager {step}"

        install_started = time.monotonic()
        (helm_install,) = install
        assert helm_install[:3] == ["helm", "install", RELEASE], helm_install
        admin.run(
            [
                *helm_install,
                "--set",
                f"image.repository={IMAGE_REPOSITORY}",
                "--set",
                f"image.tag={tag}",
                "-f",
                str(REAL_NODE_VALUES),
                # Only this test's real nodes have the image (the session may have others).
                "--set-string",
                f"webhook.nodeSelector.{label}=1",
                "--set-string",
                f"reconciler.nodeSelector.{label}=1",
                "--set-string",
                f"tests.nodeSelector.{label}=1",
                "--wait",
                "--timeout",
                "10m",
            ]
        )
        figures["helm install --wait (s)"] = time.monotonic() - install_started
        cluster.kube.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": inst.app_ns}}
        )
        wait_for(
            "default service account",
            lambda: cluster.kube.get(f"/api/v1/namespaces/{inst.app_ns}/serviceaccounts/default"),
            timeout=30,
        )
        wait_for(
            "the in-cluster webhook to stamp pods (cert-manager's caBundle injected)",
            lambda: webhook_stamps(cluster.kube, inst.app_ns),
            timeout=120,
            interval=1,
        )
        # Restricted to this test's nodes: the session's own real node has no product image.
        cluster.kube.create(f"/apis/apps/v1/namespaces/{inst.app_ns}/deployments", workload(label))
        wait_for("the first Resized event", lambda: resized_events(cluster.kube, inst.app_ns), timeout=START_TIMEOUT)
        figures["helm install to the first Resized (s)"] = time.monotonic() - install_started
        yield inst
    finally:
        print("\n".join(f"[installed] {k}: {v:.1f}" for k, v in figures.items()), file=sys.stderr)
        admin.run(["helm", "uninstall", RELEASE, "-n", release_ns, "--wait"], check=False)
        for ns in (inst.app_ns, inst.ns):
            cluster.kube.delete(f"/api/v1/namespaces/{ns}")
        for node in added:
            subprocess.run([str(HACK_CLUSTER), "remove-node", node], capture_output=True, env=env, timeout=300)
        shutil.rmtree(work, ignore_errors=True)
        subprocess.run([str(HACK_IMAGE), "remove", "--tag", image], capture_output=True, timeout=120)


def seconds_between(earlier: str, later: str) -> float:
    def parse_time(text: str) -> float:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))

    return parse_time(later) - parse_time(earlier)


def test_the_chart_runs_on_the_real_nodes_non_root_with_a_read_only_root(installed: Installed) -> None:
    pods = installed.our_pods("webhook") + installed.our_pods("reconciler")
    assert len(pods) == 4, [p["metadata"]["name"] for p in pods]
    for pod in pods:  # start-up: container started -> Ready (the API's timestamps have 1 s resolution)
        ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
        started = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
        print(
            f"{pod['metadata']['name']}: created -> Ready "
            f"{seconds_between(pod['metadata']['creationTimestamp'], ready['lastTransitionTime']):.0f}s, "
            f"container started -> Ready {seconds_between(started, ready['lastTransitionTime']):.0f}s"
        )
    assert {p["spec"]["nodeName"] for p in pods} == set(installed.nodes)  # one of each per node (host ports)
    for pod in pods:
        name = pod["metadata"]["name"]
        assert pod["status"]["phase"] == "Running", name
        (status,) = pod["status"]["containerStatuses"]
        assert status["ready"] and status["restartCount"] == 0, (name, status)
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
        assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
        # What the process really is, asked through kubectl exec on the real node.
        ids = installed.kubectl("exec", "-n", installed.ns, name, "--", "id", "-u").stdout.strip()
        assert ids == "65532", (name, ids)
        write = installed.kubectl("exec", "-n", installed.ns, name, "--", "touch", "/probe", check=False)
        assert write.returncode != 0 and "Read-only file system" in write.stderr, (name, write.stderr)
    # TLS from cert-manager: the Certificate is Ready and its CA is in the webhook configuration,
    # which names the Service (no URL): the apiserver resolves it to the webhook pods' endpoints.
    cert = installed.kube.get(f"/apis/cert-manager.io/v1/namespaces/{installed.ns}/certificates/{WEBHOOK}")
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in cert["status"]["conditions"]), cert["status"]
    config = installed.kube.get(f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{RELEASE}")
    (hook,) = config["webhooks"]
    assert hook["clientConfig"]["service"]["name"] == WEBHOOK and "url" not in hook["clientConfig"]
    assert hook["clientConfig"].get("caBundle")


def test_helm_test_passes_on_the_installed_release(installed: Installed) -> None:
    """`helm test` as an admin runs it after installing: the test Pod (the image's `selftest`) finds
    the webhook stamping a dry-run pod and a reconciler pod leading, and its hooks are deleted."""
    started = time.monotonic()
    proc = installed.admin.run(["helm", "test", RELEASE, "-n", installed.ns, "--timeout", "3m"])
    installed.figures["helm test (s)"] = time.monotonic() - started
    output = proc.stdout + proc.stderr  # Helm writes the Pod's output (hook-output-log-policy) on stderr
    print(output)
    assert f"TEST SUITE:     {RELEASE}-test\n" in proc.stdout and "Phase:          Failed" not in proc.stdout, output
    assert "webhook: ok: a pod created in default (dry run) came back with" in output, output
    holder = installed.lease_holder()
    assert f"reconciler: ok: {holder.rpartition('_')[0]} leads" in output, output
    assert installed.identities()[holder] == holder.rpartition("_")[0]  # the holder names its pod ($POD_NAME)
    hooks = [
        f"/api/v1/namespaces/{installed.ns}/pods/{RELEASE}-test",
        f"/api/v1/namespaces/{installed.ns}/serviceaccounts/{RELEASE}-test",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{installed.ns}/roles/{RELEASE}-test",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings/{RELEASE}-test-probe",
    ]
    wait_for(
        "the passed test's hooks deleted", lambda: not [p for p in hooks if _exists(installed.kube, p)], timeout=60
    )


def test_a_deployment_on_real_and_kwok_nodes_is_resized_by_the_installed_product(installed: Installed) -> None:
    kube = installed.kube
    pods = wait_for(
        "3 Running pods",
        lambda: (
            lambda ps: ps if len(ps) == REPLICAS and all(p["status"].get("phase") == "Running" for p in ps) else None
        )(installed.app_pods()),
        timeout=START_TIMEOUT,
    )
    assert {p["spec"]["nodeName"] for p in pods} == {*installed.nodes, installed.kwok_node}
    names = {p["metadata"]["name"] for p in pods}
    events = wait_for(
        "a Resized event for each pod",
        lambda: (lambda es: es if {e["involvedObject"]["name"] for e in es} >= names else None)(
            resized_events(kube, installed.app_ns)
        ),
        timeout=120,
    )
    print("\n".join(f"{e['involvedObject']['name']}: {e['message']}" for e in events))
    for pod in installed.app_pods():
        name = pod["metadata"]["name"]
        annotations = pod["metadata"].get("annotations") or {}
        assert annotations.get(f"{OURS}original-cpu.app") == "500m", (name, annotations)  # stamped at admission
        (status,) = pod["status"]["containerStatuses"]
        assert status["restartCount"] == 0, (name, status)
        assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "400m"  # n4: 500m / 1.25
    for pod in installed.app_pods():  # the real kubelets have actuated it
        if pod["spec"]["nodeName"] in installed.nodes:
            wait_for(
                f"{pod['metadata']['name']}'s status at 400m",
                lambda n=pod["metadata"]["name"]: (
                    kube.pod(installed.app_ns, n)["status"]["containerStatuses"][0]
                    .get("resources", {})
                    .get("requests", {})
                    .get("cpu")
                    == "400m"
                ),
                timeout=60,
            )

    # The audit trail: the leader's log, read with kubectl logs from the real node.
    leader = installed.identities()[installed.lease_holder()]
    log = installed.kubectl("logs", "-n", installed.ns, leader).stdout
    decisions = {
        e["pod"]: e
        for e in map(parse, log.splitlines())
        if e.get("logger") == "reconciler.decision" and e.get("namespace") == installed.app_ns
    }
    assert set(decisions) >= names, log[-3000:]
    for name in names:
        assert decisions[name]["outcome"] == "Resized"
        (cpu,) = [c for c in decisions[name]["changes"] if c["resource"] == "cpu"]
        assert (cpu["original"], cpu["desired"]) == (500, 400), decisions[name]
    # As README shows it: by Deployment (kubectl picks one of the two replicas).
    assert installed.kubectl("logs", "-n", installed.ns, f"deploy/{RECONCILER}").stdout
    # The webhook sizes at admission (the chart's default): with its token, through its NetworkPolicy,
    # it has listed the nodes and LimitRanges and loaded the config.
    webhook_log = installed.kubectl("logs", "-n", installed.ns, f"deploy/{WEBHOOK}").stdout
    webhook_records = [e for e in map(parse, webhook_log.splitlines()) if e]
    assert {e.get("resource") for e in webhook_records if e.get("msg") == "listed"} >= {"nodes", "limitranges"}, (
        webhook_log[-3000:]
    )
    assert any(e.get("msg") == "config loaded for sizing at admission" for e in webhook_records), webhook_log[-3000:]


def test_a_stopped_leader_is_replaced_within_the_lease_duration(installed: Installed) -> None:
    """The leader stops dead (SIGSTOP of its process: hung, or cut off, so it neither renews nor
    releases the Lease and, unlike after a SIGKILL, no restarted container races the standby),
    then is SIGKILLed once the other replica leads."""
    identities = installed.identities()
    holder = installed.lease_holder()
    leader = installed.kube.pod(installed.ns, identities[holder])
    node = read_real_node(leader["spec"]["nodeName"])
    cid = leader["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    pids = [int(p) for p in (next(iter(container_cgroups(node, cid).values())) / "cgroup.procs").read_text().split()]
    stopped = time.monotonic()
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        new = wait_for(
            "another replica to hold the Lease",
            lambda: (lambda h: h if h and h != holder else None)(installed.lease_holder()),
            timeout=LEASE_DURATION + 4 * RETRY_PERIOD + 10,
            interval=0.1,
        )
        took = time.monotonic() - stopped
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    installed.figures["leader takeover after the leader stopped (s)"] = took
    successor = installed.identities().get(new)
    print(f"leader {leader['metadata']['name']} stopped; {successor} ({new}) took over after {took:.1f}s")
    assert successor and successor != leader["metadata"]["name"], (successor, new)
    # client-go semantics: the Lease expires leaseDuration after the last renewal (before the
    # stop); the standby tries every retryPeriod (jittered up to x1.2), and a try may take a
    # second on this shared 2-CPU machine.
    assert took <= LEASE_DURATION + 2 * 1.2 * RETRY_PERIOD + 1, took
    log = installed.kubectl("logs", "-n", installed.ns, successor).stdout
    assert any(parse(line).get("msg") == "became leader" for line in log.splitlines()), log[-2000:]


def test_readmes_uninstall_leaves_nothing_behind(installed: Installed) -> None:
    """README's uninstall: the reconciler scaled to 0, restore, helm uninstall."""
    kube = installed.kube
    for argv in installed.uninstall:
        if argv[:2] == ["workload-resizer", "restore"]:
            argv = [*argv, f"--only-namespace={installed.app_ns}"]  # not other tests' pods
        print(installed.admin.run(argv).stdout[-2000:])
    wait_for(
        "our pods to be gone", lambda: not installed.our_pods("webhook") + installed.our_pods("reconciler"), timeout=120
    )
    for pod in installed.app_pods():
        name = pod["metadata"]["name"]
        assert not [k for k in pod["metadata"].get("annotations") or {} if k.startswith(OURS)], name
        assert pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "500m", name
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 0, name
    selector = f"app.kubernetes.io/instance={RELEASE}"
    for path in (
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
        "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    ):
        left = [o["metadata"]["name"] for o in kube.get(path, labelSelector=selector)["items"]]
        assert not left, (path, left)
    # In the release namespace only what no chart can own remains: the reconcilers' Lease
    # (written at run time) and what Kubernetes itself puts in every namespace.
    left = {}
    for path in (
        "/api/v1/namespaces/{ns}/pods",
        "/api/v1/namespaces/{ns}/services",
        "/api/v1/namespaces/{ns}/secrets",
        "/api/v1/namespaces/{ns}/configmaps",
        "/api/v1/namespaces/{ns}/serviceaccounts",
        "/apis/apps/v1/namespaces/{ns}/deployments",
        "/apis/cert-manager.io/v1/namespaces/{ns}/certificates",
        "/apis/cert-manager.io/v1/namespaces/{ns}/issuers",
        "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases",
    ):
        names = [o["metadata"]["name"] for o in kube.get(path.format(ns=installed.ns))["items"]]
        if names:
            left[path.rsplit("/", 1)[1]] = sorted(names)
    print(f"left in {installed.ns} after helm uninstall + restore: {left}")
    # cert-manager keeps the Secrets of a deleted Certificate (the CA's and the serving one)
    # unless its controller runs with --enable-certificate-owner-ref; the Lease is the
    # reconcilers' own. Deleting the namespace (helm install --create-namespace made it) ends them.
    assert left == {
        "configmaps": ["kube-root-ca.crt"],
        "serviceaccounts": ["default"],
        "leases": [RECONCILER],
        "secrets": [f"{RELEASE}-ca", f"{WEBHOOK}-tls"],
    }, left
    kube.delete(f"/api/v1/namespaces/{installed.ns}")
    wait_for(f"namespace {installed.ns} gone", lambda: not namespace_exists(kube, installed.ns), timeout=120)
