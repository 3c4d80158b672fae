#!/usr/bin/env python3
"""`make demo`: the main job of workload-resizer on a local control plane.

Brings up hack/cluster with n2d, n4 and c3 KWOK nodes, starts the webhook (with
generated certificates, registered with the apiserver) and the reconciler with the
chart's defaults, applies the sample config, a Deployment spread across the machine
families (resized in place after binding) and a DaemonSet (its pods' node types are
known at admission: created at their size), waits until every pod is aligned, and
prints a before/after table and the pods' Events.

As the chart runs them: the webhook sizes at admission, and the originals keys are the
Secret the reconciler creates at its first start (workload-resizer-system/
workload-resizer-originals-keys, where `workload-resizer plan|report|restore` read them);
the webhook reads them from a directory the demo writes the Secret into, as the kubelet
projects the Secret volume the chart mounts (until then it stamps unsigned originals,
which the reconciler signs).

It also joins a REAL node (`hack/cluster add-node real-n4 --real --family n4`:
containerd + runc + kubelet on this machine) and runs one pod there; the
reconciler resizes that running container in place, and the demo prints the
container's cgroup CPU limit read on the host before and after (and its
restart count and container ID, which do not change).

    hack/demo.py          run the demo (leaves everything running to look around)
    hack/demo.py down     stop the webhook and reconciler and the cluster

The demo's cluster is its own ($WR_DEMO_CLUSTER_DIR, else <repo>/.cluster-demo), never the
one `make test` uses (<repo>/.cluster): its webhook, registered for every namespace, and its
reconciler would otherwise act on the tests' pods.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devkit.cluster import ClusterError, LocalCluster, cluster_dir_for_demo  # noqa: E402
from devkit.kube import Kube, container, deployment, wait_for  # noqa: E402
from devkit.processes import Reconciler, Webhook, WebhookCerts, register_webhook  # noqa: E402
from reconciler.settings import ORIGINALS_KEYS_SECRET  # noqa: E402
from resizer import SAMPLE_CONFIG, original_key  # noqa: E402
from resizer.podstate import APPLIED_INSTANCE_TYPE, SIZED_AT_ADMISSION  # noqa: E402

CLUSTER = LocalCluster(cluster_dir_for_demo())
DEMO = CLUSTER.state_dir / "demo"
# The webhook's view of the originals keys Secret (the chart mounts it into the webhook's pod).
KEY_VOLUME = DEMO / "originals-keys"
VENV_BIN = Path(sys.executable).parent  # where `workload-resizer` is installed
SYSTEM_NS = "workload-resizer-system"
DEMO_NS = "demo"
FAMILY_LABEL = "cloud.google.com/machine-family"
REAL_NODE = "real-n4"
REAL_NODE_TAINT = "workload-resizer.io/real-node"
WORKLOAD_IMAGE = "workload-resizer.local/workload:1"
NODES = [
    ("n2d-node-1", "n2d"),
    ("n2d-node-2", "n2d"),
    ("n4-node-1", "n4"),
    ("n4-node-2", "n4"),
    ("c3-node-1", "c3"),
    ("c3-node-2", "c3"),
]


def say(text: str) -> None:
    print(f"==> {text}", flush=True)


def cluster_up() -> Kube:
    say(
        f"starting the demo's local control plane in {CLUSTER.state_dir} "
        "(hack/cluster up; the first run builds Kubernetes from Go modules)"
    )
    try:
        return CLUSTER.up(visible=True)
    except ClusterError as err:
        sys.exit(str(err))


def add_nodes() -> None:
    say("adding KWOK nodes: " + ", ".join(f"{n} ({f})" for n, f in NODES))
    for name, family in NODES:  # add-node also (re)labels an existing node
        CLUSTER.add_node(name, family, cpu="16", memory="64Gi", labels={"workload-resizer.io/demo": "true"})


def add_real_node() -> None:
    state = json.loads((CLUSTER.state_dir / "state.json").read_text())
    if REAL_NODE in state.get("real_nodes", {}):
        return
    say(f"joining a REAL node {REAL_NODE} (family n4): containerd + runc + kubelet on this machine")
    try:
        CLUSTER.hack("add-node", REAL_NODE, "--real", "--family", "n4", timeout=900)
    except ClusterError as err:
        sys.exit(str(err))


def real_pod(kube: Kube) -> dict | None:
    pods = [p for p in kube.pods(DEMO_NS, "app=real") if "deletionTimestamp" not in p["metadata"]]
    return pods[0] if len(pods) == 1 else None


def apply_real_workload(kube: Kube) -> tuple[dict, str]:
    """One pod of 1 CPU / 256Mi on the real node, running before the reconciler starts;
    returns it and its cgroup CPU limit as read on the host now, before any resize."""
    say(f"creating Deployment demo/real: 1 replica of 1 CPU / 256Mi on the real node {REAL_NODE}")
    kube.delete(f"/apis/apps/v1/namespaces/{DEMO_NS}/deployments/real")
    wait_for("old real-node pod gone", lambda: not kube.pods(DEMO_NS, "app=real"), timeout=120)
    manifest = deployment(
        "real",
        1,
        [container("app", requests={"cpu": "1", "memory": "256Mi"}, limits={"cpu": "1", "memory": "256Mi"})],
        node_selector={"kubernetes.io/hostname": REAL_NODE},
    )
    spec = manifest["spec"]["template"]["spec"]
    spec["hostNetwork"] = True
    spec["tolerations"] = [{"key": REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    spec["containers"][0].update(image=WORKLOAD_IMAGE, imagePullPolicy="Never")
    kube.create(f"/apis/apps/v1/namespaces/{DEMO_NS}/deployments", manifest)
    pod = wait_for(
        "the real-node pod running",
        lambda: p if (p := real_pod(kube)) and p["status"].get("phase") == "Running" else None,
        timeout=180,
    )
    return pod, cpu_cgroup(pod)[1]


def cpu_cgroup(pod: dict) -> tuple[str, str]:
    """(container ID, its cpu cgroup limit as read on the host: quota/period in µs, shares)."""
    status = pod["status"]["containerStatuses"][0]
    cid = status["containerID"].split("://", 1)[1]
    root = json.loads((CLUSTER.state_dir / "state.json").read_text())["real_nodes"][REAL_NODE]["cgroup"]
    for directory, subdirs, _ in os.walk(f"/sys/fs/cgroup/cpu/{root}"):
        if cid in subdirs:
            cg = Path(directory) / cid
            quota, period, shares = (
                (cg / f).read_text().strip() for f in ("cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares")
            )
            return (
                cid,
                f"cfs_quota_us={quota} cfs_period_us={period} shares={shares} ({int(quota) / int(period):g} CPU)",
            )
    for directory, subdirs, _ in os.walk(f"/sys/fs/cgroup/{root}"):  # cgroup v2
        if cid in subdirs:
            cg = Path(directory) / cid
            return (
                cid,
                f"cpu.max={(cg / 'cpu.max').read_text().strip()} cpu.weight={(cg / 'cpu.weight').read_text().strip()}",
            )
    return cid, "(cgroup not found)"


def show_real(kube: Kube, before: dict, cgroup_before: str) -> None:
    cid_before = before["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    after = wait_for(
        "the kubelet to actuate the resize",
        lambda: (
            p
            if (p := real_pod(kube))
            and (p["status"]["containerStatuses"][0].get("resources") or {}).get("limits", {}).get("cpu")
            == p["spec"]["containers"][0]["resources"]["limits"]["cpu"]
            and p["spec"]["containers"][0]["resources"]["limits"]["cpu"] != "1"
            else None
        ),
        timeout=120,
    )
    cid_after, cgroup_after = cpu_cgroup(after)
    status = after["status"]["containerStatuses"][0]
    say(f"the real node {REAL_NODE}: pod {after['metadata']['name']} resized in place by the real kubelet")
    print(
        f"  spec cpu      1 -> {after['spec']['containers'][0]['resources']['limits']['cpu']}"
        f"   (status.containerStatuses[0].resources: {json.dumps(status.get('resources'))})"
    )
    print(f"  cgroup before {cgroup_before}")
    print(f"  cgroup after  {cgroup_after}")
    print(f"  container ID  {cid_before[:12]} -> {cid_after[:12]}   restartCount {status['restartCount']}")
    print()


def start_webhook(kube: Kube, kubeconfig: str) -> None:
    say("generating webhook certificates (python -m certs) and starting the webhook on 127.0.0.1 (sizing at admission)")
    stop("webhook")
    webhook = Webhook(
        "--size-at-admission=true",
        f"--kubeconfig={kubeconfig}",
        f"--namespace={SYSTEM_NS}",
        f"--originals-key-dir={KEY_VOLUME}",
        "--originals-keys-optional",
        certs=WebhookCerts(DEMO / "certs"),
        log_path=DEMO / "webhook.log",
    )
    (DEMO / "webhook.pid").write_text(str(webhook.proc.pid))
    webhook.wait_ready()
    register_webhook(kube, webhook.url, webhook.certs.ca_bundle)


def start_reconciler(kubeconfig: str) -> None:
    say(
        f"starting the reconciler (python -m reconciler; originals keys: Secret {ORIGINALS_KEYS_SECRET}, "
        "created at its first start)"
    )
    stop("reconciler")
    reconciler = Reconciler(
        kubeconfig,
        f"--originals-keys-secret={ORIGINALS_KEYS_SECRET}",
        f"--namespace={SYSTEM_NS}",
        log_path=DEMO / "reconciler.log",
    )
    (DEMO / "reconciler.pid").write_text(str(reconciler.proc.pid))
    reconciler.wait_ready()  # ready once the keys Secret is read (created on a first start)


def project_keys(kube: Kube) -> None:
    """Write the keys Secret into the webhook's key directory, file per key, as the kubelet
    projects a Secret volume (the webhook re-reads it every --cert-reload-interval)."""
    namespace, name = ORIGINALS_KEYS_SECRET.split("/")
    data = kube.get(f"/api/v1/namespaces/{namespace}/secrets/{name}").get("data") or {}
    keys = {key_id: base64.b64decode(value) for key_id, value in data.items()}
    KEY_VOLUME.mkdir(mode=0o700, parents=True, exist_ok=True)
    for stale in [f for f in KEY_VOLUME.iterdir() if f.name not in keys]:
        stale.unlink()
    for key_id, key in keys.items():
        target = KEY_VOLUME / key_id
        if target.exists() and target.read_bytes() == key:
            continue
        staged = KEY_VOLUME / f".{key_id}.new"  # dot files are not keys: swapped in whole
        fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(key)
        staged.rename(target)


def wait_sizing_active(kube: Kube) -> None:
    """Until a server-side dry-run pod pinned to n4 comes back sized: the webhook has the key
    and knows the nodes and the config."""
    probe = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "sizing-probe-",
            "namespace": DEMO_NS,
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "probe", "uid": "probe-uid", "controller": True}
            ],
        },
        "spec": {
            "nodeSelector": {FAMILY_LABEL: "n4"},
            "containers": [
                container("probe", requests={"cpu": "1", "memory": "64Mi"}, limits={"cpu": "1", "memory": "64Mi"})
            ],
        },
    }
    wait_for(
        "the webhook to size at admission (it reads the keys every 10s)",
        lambda: (
            SIZED_AT_ADMISSION
            in (
                kube.request("POST", f"/api/v1/namespaces/{DEMO_NS}/pods", probe, params={"dryRun": "All"})[
                    "metadata"
                ].get("annotations")
                or {}
            )
        ),
        timeout=60,
        interval=0.5,
    )


def stop(name: str) -> None:
    """Stop a process an earlier demo left running (checking the pid is still ours)."""
    pid_file = DEMO / f"{name}.pid"
    if not pid_file.exists():
        return
    pid = int(pid_file.read_text())
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        cmdline = b""
    module = {"webhook": b"app", "reconciler": b"reconciler"}[name]
    if b"\0-m\0" + module + b"\0" in cmdline:  # still our process, not a recycled pid
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
    pid_file.unlink()


def apply_config(kube: Kube) -> None:
    say(f"applying the sample config (ConfigMap {SYSTEM_NS}/workload-resizer-config)")
    for ns in (SYSTEM_NS, DEMO_NS):
        kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "workload-resizer-config", "namespace": SYSTEM_NS},
            "data": {"config.yaml": SAMPLE_CONFIG},
        }
    )
    wait_for(
        "default service account in demo",
        lambda: kube.get(f"/api/v1/namespaces/{DEMO_NS}/serviceaccounts/default"),
        timeout=30,
    )


def apply_daemonset(kube: Kube) -> None:
    say(
        "creating DaemonSet demo/agent: 500m / 256Mi (Guaranteed) on every demo node; each pod is pinned to its "
        "node, so the webhook creates it at its size"
    )
    kube.delete(f"/apis/apps/v1/namespaces/{DEMO_NS}/daemonsets/agent")
    wait_for("old agent pods gone", lambda: not kube.pods(DEMO_NS, "app=agent"), timeout=60)
    template = deployment(
        "agent",
        1,
        [container("agent", requests={"cpu": "500m", "memory": "256Mi"}, limits={"cpu": "500m", "memory": "256Mi"})],
        node_selector={"workload-resizer.io/demo": "true"},
    )["spec"]["template"]
    kube.create(
        f"/apis/apps/v1/namespaces/{DEMO_NS}/daemonsets",
        {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "agent"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template},
        },
    )


def apply_workload(kube: Kube) -> None:
    say("creating Deployment demo/web: 6 replicas of 1 CPU / 1Gi (Guaranteed), spread across n2d, n4 and c3")
    kube.delete(f"/apis/apps/v1/namespaces/{DEMO_NS}/deployments/web")
    wait_for("old demo pods gone", lambda: not kube.pods(DEMO_NS, "app=web"), timeout=60)
    manifest = deployment(
        "web",
        6,
        [container("app", requests={"cpu": "1", "memory": "1Gi"}, limits={"cpu": "1", "memory": "1Gi"})],
        node_selector={"workload-resizer.io/demo": "true"},
    )
    manifest["spec"]["template"]["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": FAMILY_LABEL,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    kube.create(f"/apis/apps/v1/namespaces/{DEMO_NS}/deployments", manifest)


def wait_aligned(kube: Kube) -> list[dict]:
    say("waiting for the scheduler to bind the pods and the reconciler to resize them")
    expected = {"web": 6, "agent": len(NODES)}

    def aligned() -> list[dict] | None:
        pods = [
            p for app in expected for p in kube.pods(DEMO_NS, f"app={app}") if "deletionTimestamp" not in p["metadata"]
        ]
        done = [p for p in pods if APPLIED_INSTANCE_TYPE in (p["metadata"].get("annotations") or {})]
        return pods if len(pods) == len(done) == sum(expected.values()) else None

    return wait_for(f"{sum(expected.values())} aligned pods", aligned, timeout=120, interval=0.5)


def how(pod: dict) -> str:
    """How the pod got its size."""
    annotations = pod["metadata"]["annotations"]
    if SIZED_AT_ADMISSION in annotations:
        return "created at its size"
    return "resized in place" if pod["metadata"].get("generation", 1) > 1 else "unchanged"


def show(kube: Kube, pods: list[dict]) -> None:
    nodes = {
        n["metadata"]["name"]: n["metadata"]["labels"].get(FAMILY_LABEL) for n in kube.get("/api/v1/nodes")["items"]
    }
    rows = [("POD", "NODE", "TYPE", "CPU original -> now", "MEMORY original -> now", "LIMIT cpu", "QOS", "HOW")]
    for pod in sorted(
        pods,
        key=lambda p: (
            p["metadata"]["labels"]["app"] != "web",
            nodes.get(p["spec"]["nodeName"]) or "",
            p["metadata"]["name"],
        ),
    ):
        ann = pod["metadata"]["annotations"]
        app = pod["spec"]["containers"][0]
        res = app["resources"]
        rows.append(
            (
                pod["metadata"]["name"],
                pod["spec"]["nodeName"],
                nodes.get(pod["spec"]["nodeName"]) or "-",
                f"{ann.get(original_key(app['name'], 'cpu', 'request'))} -> {res['requests']['cpu']}",
                f"{ann.get(original_key(app['name'], 'memory', 'request'))} -> {res['requests']['memory']}",
                res.get("limits", {}).get("cpu", "-"),
                pod["status"].get("qosClass", ""),
                how(pod),
            )
        )
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    print()
    for row in rows:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)))
    print()
    say("Events of the pods (as `kubectl describe pod` shows them)")
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        for event in kube.events_for(DEMO_NS, pod["metadata"]["name"]):
            if event.get("source", {}).get("component") == "workload-resizer":
                print(f"  {pod['metadata']['name']:28} {event['type']:8} {event['reason']:16} {event['message']}")


def down() -> None:
    for name in ("reconciler", "webhook"):
        stop(name)
    CLUSTER.down(quiet=False)


def main(argv: list[str]) -> int:
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if argv[:1] == ["down"]:
        down()
        return 0
    kube = cluster_up()
    kubeconfig = CLUSTER.kubeconfig
    DEMO.mkdir(parents=True, exist_ok=True)
    add_nodes()
    add_real_node()
    apply_config(kube)
    start_webhook(kube, kubeconfig)
    stop("reconciler")
    real_before, real_cgroup_before = apply_real_workload(kube)
    start_reconciler(kubeconfig)
    project_keys(kube)
    apply_workload(kube)
    wait_sizing_active(kube)
    apply_daemonset(kube)
    pods = wait_aligned(kube)
    show(kube, pods)
    show_real(kube, real_before, real_cgroup_before)
    print(look_around(kubeconfig))
    return 0


def look_around(kubeconfig: str) -> str:
    """What to try next; tests/cluster/test_demo.py runs the `workload-resizer` lines as printed."""
    return f"""
Look around (webhook and reconciler keep running; logs in {DEMO}):
  export PATH={VENV_BIN}:{CLUSTER.bin_dir}:$PATH KUBECONFIG={kubeconfig}
  kubectl -n {DEMO_NS} get pods -o wide
  kubectl -n {DEMO_NS} describe pod <name>
  kubectl -n {DEMO_NS} scale deployment web --replicas=12
  workload-resizer report
  workload-resizer report -o html > {DEMO}/report.html
  workload-resizer plan
  tail -f {DEMO}/reconciler.log
Stop everything:
  make demo-down"""


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
