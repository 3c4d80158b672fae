"""A real kubelet (containerd + runc) resizes a running container's cgroup in place.

The session's real node (`real_node` fixture: `hack/cluster add-node NAME --real --family n4
--reserved-cpu 100m`) runs the pods; everything else is the usual harness of
test_reconciler.py: a reconciler with its own ConfigMap and node-type label, which these
tests put on the real node. What the kubelet did is read from the pod's status and from the
container's cgroup files on the host.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from devkit.kube import ApiError, Kube, deployment, wait_for
from devkit.processes import REPO, Webhook, originals_key_dir, register_webhook, unregister_webhook, wait_webhook_active
from ops.keys import read_key_directory
from resizer import KeyRing, Trust, baseline, pod_original_key
from resizer.podstate import RESIZE_STATE
from tests.cluster.test_reconciler import (
    Harness,
    expected_originals,
    guaranteed,
    metric_snapshot,
    originals,
    q,
    resources,
    status_resources,
)
from tests.cluster.test_restore_command import restore_argv
from tests.conftest import HACK_CLUSTER, RealNode, cluster_state_dir, read_real_node

TAINT = "workload-resizer.io/real-node"
WORKLOAD_IMAGE = "workload-resizer.local/workload:1"
CGROUP = Path("/sys/fs/cgroup")
PERIOD_US = 100_000  # the kubelet's CFS period
# Generous: a real container start on a 2-core machine shared with other test runs.
START_TIMEOUT = 180


# ---------------------------------------------------------------- pods on the real node


def real_deployment(name: str, node: RealNode, containers: list[dict[str, Any]]) -> dict[str, Any]:
    """A Deployment whose pod runs the workload image on the real node (hostNetwork, taint tolerated)."""
    manifest = deployment(name, 1, containers, node_selector={"kubernetes.io/hostname": node.name})
    spec = manifest["spec"]["template"]["spec"]
    spec["hostNetwork"] = True
    spec["tolerations"] = [{"key": TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    for c in spec["containers"]:
        c["image"] = WORKLOAD_IMAGE
        c["imagePullPolicy"] = "Never"
    return manifest


def deploy(
    h: Harness, name: str, node: RealNode, cpu: str = "1", memory: str = "256Mi", args: list[str] | None = None
) -> dict[str, Any]:
    manifest = real_deployment(name, node, [guaranteed(cpu=cpu, memory=memory)])
    if args:
        manifest["spec"]["template"]["spec"]["containers"][0]["args"] = args
    h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", manifest)
    return h.wait_pods(
        name,
        1,
        lambda p: (
            p["status"].get("phase") == "Running"
            and all(s.get("ready") for s in p["status"].get("containerStatuses") or [{}])
        ),
        "Running on the real node",
        timeout=START_TIMEOUT,
    )[0]


def app_status(pod: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in pod["status"]["containerStatuses"] if s["name"] == "app")


def container_id(pod: dict[str, Any]) -> str:
    return app_status(pod)["containerID"].split("://", 1)[1]


def kubelet_memory_usage(kube: Kube, node: RealNode, pod: dict[str, Any]) -> int:
    """The container's memory usage as the kubelet's stats provider sees it (its /stats/summary,
    through the apiserver's node proxy: the numbers its memory-decrease check uses); 0 until it
    has any."""
    summary = kube.get(f"/api/v1/nodes/{node.name}/proxy/stats/summary")
    for stats in summary.get("pods") or []:
        if stats["podRef"]["uid"] == pod["metadata"]["uid"]:
            for c in stats.get("containers") or []:
                if c["name"] == "app":
                    return int((c.get("memory") or {}).get("usageBytes") or 0)
    return 0


# ---------------------------------------------------------------- cgroups on the host


def container_cgroups(node: RealNode, cid: str) -> dict[str, Path]:
    """{controller: the container's cgroup dir} on the host (cgroup v1 hierarchies, or "v2")."""
    if (CGROUP / "cgroup.controllers").exists():
        hierarchies = {"v2": CGROUP}
    else:
        hierarchies = {name: CGROUP / name for name in ("cpu", "memory")}
    found = {}
    for controller, root in hierarchies.items():
        for directory, subdirs, _ in os.walk(root / node.cgroup):
            if cid in subdirs:
                found[controller] = Path(directory) / cid
                break
    assert set(found) == set(hierarchies), f"cgroup of container {cid} not found under {node.cgroup}: {found}"
    return found


def cgroup_limits(node: RealNode, cid: str) -> dict[str, int | None]:
    """CPU quota/period, shares (v1) or weight (v2), and memory limit of a container, from the host."""
    dirs = container_cgroups(node, cid)

    def read(path: Path) -> str:
        return path.read_text().strip()

    if "v2" in dirs:
        quota, period = read(dirs["v2"] / "cpu.max").split()
        memory = read(dirs["v2"] / "memory.max")
        return {
            "cpu_quota_us": None if quota == "max" else int(quota),
            "cpu_period_us": int(period),
            "cpu_weight": int(read(dirs["v2"] / "cpu.weight")),
            "memory_limit_bytes": None if memory == "max" else int(memory),
        }
    quota = int(read(dirs["cpu"] / "cpu.cfs_quota_us"))
    return {
        "cpu_quota_us": None if quota == -1 else quota,
        "cpu_period_us": int(read(dirs["cpu"] / "cpu.cfs_period_us")),
        "cpu_shares": int(read(dirs["cpu"] / "cpu.shares")),
        "memory_limit_bytes": int(read(dirs["memory"] / "memory.limit_in_bytes")),
    }


def implied_limits(cpu: Fraction, memory: Fraction) -> dict[str, int | None]:
    """The cgroup values the kubelet derives from a container's cpu and memory (request = limit),
    as its MilliCPUToQuota / MilliCPUToShares / CPUSharesToCPUWeight do."""
    millis = int(cpu * 1000)
    values: dict[str, int | None] = {
        "cpu_quota_us": millis * PERIOD_US // 1000,
        "cpu_period_us": PERIOD_US,
        "memory_limit_bytes": int(memory),
    }
    shares = millis * 1024 // 1000
    if (CGROUP / "cgroup.controllers").exists():
        values["cpu_weight"] = 1 + ((shares - 2) * 9999) // 262142
    else:
        values["cpu_shares"] = shares
    return values


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def h(cluster: Any, namespace: str, real_node: RealNode) -> Iterator[Harness]:
    """The reconciler harness, with the real node carrying this test's node-type label (n4)."""
    harness = Harness(cluster, namespace)
    harness.config()
    harness.relabel(real_node.name, "n4")
    try:
        yield harness
    finally:
        harness.close()
        cluster.kube.patch(f"/api/v1/nodes/{real_node.name}", {"metadata": {"labels": {harness.label: None}}})


def assert_resized_in_place(h: Harness, node: RealNode, before: dict[str, Any], cpu: str, memory: str) -> None:
    """The pod's spec and status say cpu/memory, its cgroup agrees, and nothing restarted."""
    name = before["metadata"]["name"]
    want = {"requests": {"cpu": q(cpu), "memory": q(memory)}, "limits": {"cpu": q(cpu), "memory": q(memory)}}
    pod = wait_for(
        f"pod {name} status resources = {want}",
        lambda: p if status_resources(p := h.pod(name)) == want else None,
        timeout=START_TIMEOUT,
    )
    assert resources(pod) == want
    assert pod["status"]["qosClass"] == "Guaranteed"
    assert app_status(pod)["restartCount"] == 0
    assert container_id(pod) == container_id(before)
    assert (
        app_status(pod)["state"].get("running", {}).get("startedAt")
        == app_status(before)["state"]["running"]["startedAt"]
    )
    assert cgroup_limits(node, container_id(pod)) == implied_limits(q(cpu), q(memory))


# ---------------------------------------------------------------- acceptance


def wait_resized_truthfully(h: Harness, name: str, want: dict[str, Any]) -> dict[str, Any]:
    """Wait for our Resized Event; the moment it shows, the pod's status must already show `want`."""

    def check() -> dict[str, Any] | None:
        resized = [e for e in h.events(name) if e["reason"] == "Resized"]
        if not resized:
            return None
        pod = h.pod(name)  # read after the Event: the status it was based on can only be newer
        assert status_resources(pod) == want, f"Resized before the status showed {want}: {status_resources(pod)}"
        return resized[0]

    return wait_for(f"Resized on {name}", check, timeout=START_TIMEOUT, interval=0.2)


def test_reconciler_resizes_a_running_container_in_place(h: Harness, real_node: RealNode) -> None:
    pod = deploy(h, "fast", real_node)
    name = pod["metadata"]["name"]
    assert cgroup_limits(real_node, container_id(pod)) == implied_limits(q("1"), q("256Mi"))
    proc = h.reconciler()
    resized = wait_resized_truthfully(
        h,
        name,
        {"requests": {"cpu": q("800m"), "memory": q("256Mi")}, "limits": {"cpu": q("800m"), "memory": q("256Mi")}},
    )
    assert resized["type"] == "Normal" and "actuated" in resized["message"], resized
    h.wait_applied("fast", "n4", timeout=START_TIMEOUT)
    assert_resized_in_place(h, real_node, pod, cpu="800m", memory="256Mi")
    assert [(e["type"], e["reason"], e["count"]) for e in h.events(name)] == [("Normal", "Resized", 1)]
    assert RESIZE_STATE not in (h.pod(name)["metadata"].get("annotations") or {})
    assert h.pod(name)["metadata"]["generation"] == 2, "one resize"
    # originals, the resize, applied, one Event.
    assert metric_snapshot(proc) == {"PATCH pods": 2, "PATCH pods/resize": 1, "POST events": 1, "PATCH events": 0}
    reasons = {e["reason"] for e in h.kube.events_for(h.ns, name)}
    assert {"ResizeStarted", "ResizeCompleted"} <= reasons, reasons  # 1.35.8, 1.36.4 and 1.37.2 all emit them


def test_webhook_originals_then_reconciler_resize_in_place(h: Harness, real_node: RealNode) -> None:
    webhook = Webhook()
    h.processes.append(webhook)
    webhook.wait_ready()
    hook = register_webhook(
        h.kube, webhook.url, webhook.certs.ca_bundle, name=f"wr-real-{uuid.uuid4().hex[:6]}", namespaces=[h.ns]
    )
    try:
        wait_webhook_active(h.kube, h.ns)
        pod = deploy(h, "stamped", real_node)
        spec = {"requests": {"cpu": "1", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}
        assert originals(pod) == expected_originals(spec)
        h.reconciler()
        h.wait_applied("stamped", "n4", timeout=START_TIMEOUT)
        assert_resized_in_place(h, real_node, pod, cpu="800m", memory="256Mi")
        assert originals(h.pod(pod["metadata"]["name"])) == expected_originals(spec)
    finally:
        unregister_webhook(h.kube, hook)


def test_resize_beyond_allocatable(h: Harness, real_node: RealNode) -> None:
    """slow (0.5) doubles 1 CPU to 2 CPUs, more than the node's allocatable (machine - 100m).

    1.36: the apiserver's PodResizeValidator admission rejects the resize (403); the pod,
    its status and its cgroup keep 1 CPU. 1.35 (no such plugin; observed on 1.35.8): the
    resize is stored (the spec says 2 CPUs), the kubelet marks it PodResizePending/Infeasible
    with a ResizeInfeasible Warning event, and keeps the container at 1 CPU.
    """
    allocatable = q(h.kube.get(f"/api/v1/nodes/{real_node.name}")["status"]["allocatable"]["cpu"])
    assert allocatable < 2
    h.relabel(real_node.name, "slow")
    pod = deploy(h, "slow", real_node)
    name = pod["metadata"]["name"]
    patch = {"spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}}]}}
    if h.cluster.version >= "v1.36":
        with pytest.raises(ApiError) as err:
            h.kube.resize(h.ns, name, patch)
        assert err.value.status == 403, err.value
        assert "node didn't have enough allocatable resources: cpu, requested: 2000" in str(err.value), err.value
    else:
        h.kube.resize(h.ns, name, patch)
        pending = wait_for(
            "PodResizePending Infeasible",
            lambda: next(
                (
                    c
                    for c in h.pod(name)["status"].get("conditions") or []
                    if c["type"] == "PodResizePending" and c.get("reason") == "Infeasible"
                ),
                None,
            ),
            timeout=START_TIMEOUT,
        )
        capacity = f"cpu, requested: 2000, capacity: {int(allocatable * 1000)}"
        assert pending.get("message") == f"Node didn't have enough capacity: {capacity}", pending
        assert wait_for(
            "ResizeInfeasible Warning event",
            lambda: [
                e
                for e in h.kube.events_for(h.ns, name)
                if e["reason"] == "ResizeInfeasible" and e["type"] == "Warning" and capacity in e.get("message", "")
            ],
        )
    now = h.pod(name)
    # 1.36 never stored the resize; 1.35 stored it and the kubelet left it unactuated.
    assert resources(now)["limits"]["cpu"] == (q("1") if h.cluster.version >= "v1.36" else q("2"))
    assert status_resources(now)["limits"]["cpu"] == q("1")
    assert app_status(now)["restartCount"] == 0 and container_id(now) == container_id(pod)
    assert cgroup_limits(real_node, container_id(now)) == implied_limits(q("1"), q("256Mi"))


def pod_cgroup_limits(node: RealNode, cid: str) -> dict[str, int | None]:
    """The POD's cgroup values (the parent of its container's cgroup): where the kubelet puts
    pod-level limits (KEP-2837)."""
    dirs = {controller: path.parent for controller, path in container_cgroups(node, cid).items()}

    def read(path: Path) -> str:
        return path.read_text().strip()

    if "v2" in dirs:
        quota, _ = read(dirs["v2"] / "cpu.max").split()
        memory = read(dirs["v2"] / "memory.max")
        return {
            "cpu_quota_us": None if quota == "max" else int(quota),
            "cpu_weight": int(read(dirs["v2"] / "cpu.weight")),
            "memory_limit_bytes": None if memory == "max" else int(memory),
        }
    quota = int(read(dirs["cpu"] / "cpu.cfs_quota_us"))
    return {
        "cpu_quota_us": None if quota == -1 else quota,
        "cpu_shares": int(read(dirs["cpu"] / "cpu.shares")),
        "memory_limit_bytes": int(read(dirs["memory"] / "memory.limit_in_bytes")),
    }


def implied_pod_limits(cpu_request: Fraction, cpu_limit: Fraction, memory_limit: Fraction) -> dict[str, int | None]:
    """The pod cgroup values the kubelet derives from pod-level resources (ResourceConfigForPod)."""
    shares = int(cpu_request * 1000) * 1024 // 1000
    values: dict[str, int | None] = {
        "cpu_quota_us": int(cpu_limit * 1000) * PERIOD_US // 1000,
        "memory_limit_bytes": int(memory_limit),
    }
    if (CGROUP / "cgroup.controllers").exists():
        values["cpu_weight"] = 1 + ((shares - 2) * 9999) // 262142
    else:
        values["cpu_shares"] = shares
    return values


def test_pod_level_resources_are_resized_in_place_at_both_levels(h: Harness, real_node: RealNode) -> None:
    """The kubelet actuates a pod-level resize (KEP-5419) with the containers': pod spec, status
    and the POD cgroup say the new pod-level values, the container's its own; one pods/resize,
    no restart; restore puts it all back. n4 (cpuPerf 1.25): cpu x 0.8. On 1.35 (no pod-level
    resize; its kubelet declares nothing) the pod is left alone with an Event."""
    manifest = real_deployment(
        "podlevel", real_node, [{"name": "app", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}]
    )
    manifest["spec"]["template"]["spec"]["resources"] = {
        "requests": {"cpu": "500m", "memory": "128Mi"},
        "limits": {"cpu": "1", "memory": "256Mi"},
    }
    h.kube.create(f"/apis/apps/v1/namespaces/{h.ns}/deployments", manifest)
    pod = h.wait_pods(
        "podlevel",
        1,
        lambda p: (
            p["status"].get("phase") == "Running"
            and all(s.get("ready") for s in p["status"].get("containerStatuses") or [{}])
        ),
        "Running on the real node",
        timeout=START_TIMEOUT,
    )[0]
    name, cid = pod["metadata"]["name"], container_id(pod)
    assert pod_cgroup_limits(real_node, cid) == implied_pod_limits(q("500m"), q("1"), q("256Mi"))
    proc = h.reconciler()
    if h.cluster.version < "v1.36":
        # A 1.35 kubelet declares no pod-level resize: left alone, nothing sent.
        event = h.wait_event(name, "PodLevelResources", timeout=START_TIMEOUT)
        assert event["type"] == "Warning" and "declaredFeatures" in event["message"], event
        assert metric_snapshot(proc)["PATCH pods/resize"] == 0 and h.pod(name)["metadata"]["generation"] == 1
        assert pod_cgroup_limits(real_node, cid) == implied_pod_limits(q("500m"), q("1"), q("256Mi"))
        return
    declared = h.kube.get(f"/api/v1/nodes/{real_node.name}")["status"].get("declaredFeatures") or []
    assert "InPlacePodLevelResourcesVerticalScaling" in declared, declared
    h.wait_applied("podlevel", "n4", timeout=START_TIMEOUT)
    want = {"requests": {"cpu": q("400m"), "memory": q("128Mi")}, "limits": {"cpu": q("800m"), "memory": q("256Mi")}}
    now = wait_for(
        "pod-level status follows",
        lambda: (
            (p := h.pod(name))
            and {
                kind: {r: q(v) for r, v in ((p["status"].get("resources") or {}).get(kind) or {}).items()}
                for kind in ("requests", "limits")
            }
            == want
            and p
        ),
        timeout=START_TIMEOUT,
    )
    assert {kind: {r: q(v) for r, v in now["spec"]["resources"][kind].items()} for kind in want} == want
    assert resources(now)["requests"] == {"cpu": q("200m"), "memory": q("64Mi")}
    assert status_resources(now)["requests"]["cpu"] == q("200m")
    # (The reconciler's own resize count is not this pod's alone: pods of earlier tests may still
    # be terminating on the shared real node.)
    assert now["metadata"]["generation"] == 2, "both levels in one resize"
    assert app_status(now)["restartCount"] == 0 and container_id(now) == cid
    assert pod_cgroup_limits(real_node, cid) == implied_pod_limits(q("400m"), q("800m"), q("256Mi"))
    check = baseline(now, KeyRing(read_key_directory(originals_key_dir()))).check
    assert (check.trust, check.scope) == (Trust.TRUSTED, "pod"), check
    assert now["metadata"]["annotations"][pod_original_key("cpu", "limit")] == "1"

    # restore: both levels back in one resize, actuated by the kubelet (pod cgroup included).
    proc.terminate()
    result = subprocess.run(
        restore_argv(h, "20") + [f"--only-namespace={h.ns}"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    authored = {"requests": {"cpu": q("500m"), "memory": q("128Mi")}, "limits": {"cpu": q("1"), "memory": q("256Mi")}}
    wait_for(
        "pod-level status back",
        lambda: (
            (p := h.pod(name))
            and {
                kind: {r: q(v) for r, v in ((p["status"].get("resources") or {}).get(kind) or {}).items()}
                for kind in ("requests", "limits")
            }
            == authored
            and p
        ),
        timeout=START_TIMEOUT,
    )
    back = h.pod(name)
    assert back["metadata"]["generation"] == 3 and status_resources(back)["requests"]["cpu"] == q("250m")
    assert pod_cgroup_limits(real_node, cid) == implied_pod_limits(q("500m"), q("1"), q("256Mi"))


def memory_patch(memory: str) -> dict[str, Any]:
    return {
        "spec": {
            "containers": [{"name": "app", "resources": {"requests": {"memory": memory}, "limits": {"memory": memory}}}]
        }
    }


def test_memory_limit_decrease(h: Harness, real_node: RealNode) -> None:
    """Guaranteed 256Mi -> 128Mi (requests and limits) on a container using a few MiB: the
    kubelet lowers memory.limit_in_bytes in place (KEP-1287 allows limit decreases since
    1.33, best effort: it refuses only when usage is above the new limit)."""
    pod = deploy(h, "memory", real_node)
    name = pod["metadata"]["name"]
    h.kube.resize(h.ns, name, memory_patch("128Mi"))
    assert_resized_in_place(h, real_node, pod, cpu="1", memory="128Mi")


def test_memory_limit_decrease_below_usage_is_an_error_and_changes_nothing(h: Harness, real_node: RealNode) -> None:
    """The container holds 200 MiB; 256Mi -> 128Mi would OOM it. Once the kubelet's stats
    show that usage, the kubelet refuses: PodResizeInProgress, reason Error ("cannot decrease
    memory limits: ... below current usage"), a ResizeError Warning event, and the container
    keeps running with the old limit (the kubelet retries while the spec asks for 128Mi).

    The check is only as fresh as the kubelet's stats: a decrease sent before they show the
    usage (seconds after the container started) is applied, and the kernel OOM-kills the
    container (observed on 1.36.4, cgroup v1; see docs/development.md "A real node").
    """
    pod = deploy(h, "holder", real_node, args=["-hold-mib", "200"])
    name = pod["metadata"]["name"]
    wait_for(
        "the kubelet's stats to show the 200 MiB",
        lambda: kubelet_memory_usage(h.kube, real_node, pod) >= 200 << 20,
        timeout=START_TIMEOUT,
    )
    h.kube.resize(h.ns, name, memory_patch("128Mi"))
    condition = wait_for(
        "PodResizeInProgress reason Error",
        lambda: next(
            (
                c
                for c in h.pod(name)["status"].get("conditions") or []
                if c["type"] == "PodResizeInProgress" and c.get("reason") == "Error"
            ),
            None,
        ),
        timeout=START_TIMEOUT,
    )
    assert condition["message"].startswith("cannot decrease memory limits: "), condition
    assert 'container "app" memory limit (134217728) below current usage' in condition["message"], condition
    assert wait_for(
        "ResizeError event",
        lambda: [e for e in h.kube.events_for(h.ns, name) if e["reason"] == "ResizeError" and e["type"] == "Warning"],
    )
    now = h.pod(name)
    assert resources(now)["limits"]["memory"] == q("128Mi")  # the spec asks for it ...
    assert status_resources(now)["limits"]["memory"] == q("256Mi")  # ... the container keeps its limit
    assert app_status(now)["restartCount"] == 0 and container_id(now) == container_id(pod)
    assert cgroup_limits(real_node, container_id(now)) == implied_limits(q("1"), q("256Mi"))


# ---------------------------------------------------------------- leave the machine as we found it


def machine_snapshot() -> dict[str, set[str]]:
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {
        "links": {line.split(":")[1].strip().split("@")[0] for line in links.splitlines()},
        "netns": {line.split()[0] for line in netns.splitlines() if line.strip()},
    }


def processes_in(ns_inode: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.stat(entry / "ns" / "mnt").st_ino == ns_inode:
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def process_start(pid: int) -> int | None:
    """pid's start time (clock ticks since boot), None if there is no such pid."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def hold_namespace(pids: list[int]) -> int:
    """An fd on the mount namespace of the first of pids still running: it keeps the namespace,
    and so its inode number, from being freed (through /proc, not the node's bind-mounted file,
    which `down` must be able to unmount)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            return os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
    raise AssertionError(f"none of {pids} is running")


def describe_processes(pids: list[int]) -> str:
    """What leftover processes are: state (Z: exited, not yet reaped), parent, command line,
    mount namespace and cgroups."""
    lines = []
    for pid in pids:
        proc = Path(f"/proc/{pid}")
        try:
            status = dict(line.split(":\t", 1) for line in (proc / "status").read_text().splitlines() if ":\t" in line)
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            cgroups = ", ".join(
                line
                for line in (proc / "cgroup").read_text().splitlines()
                if ":cpu," in line or ":memory:" in line or line.startswith("0::")
            )
        except OSError as err:
            lines.append(f"pid {pid}: gone ({err})")
            continue
        try:
            mnt = os.readlink(proc / "ns" / "mnt")
        except OSError:
            mnt = "no mount namespace"
        lines.append(
            f"pid {pid} {status.get('Name', '?').strip()} (state {status.get('State', '?').strip()}, "
            f"ppid {status.get('PPid', '?').strip()}, {mnt}): {cmdline[:300] or '(no cmdline)'}; "
            f"cgroups {cgroups}"
        )
    return "\n".join(lines)


def cgroup_dirs(name: str) -> list[Path]:
    return [d for d in CGROUP.glob(f"*/{name}")] + [d for d in CGROUP.glob(name)]


def mounts_under(directory: Path) -> list[str]:
    prefix = os.path.realpath(directory)
    return [
        line.split()[4]
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if line.split()[4] == prefix or line.split()[4].startswith(prefix + "/")
    ]


def test_down_removes_everything_the_real_node_created(tmp_path: Path) -> None:
    """A cluster of its own: up, a real node running a pod, down; then nothing it made is left."""
    state_dir = tmp_path / "cluster"
    env = {**os.environ, "WR_CLUSTER_DIR": str(state_dir)}
    before = machine_snapshot()

    def cluster(*args: str) -> str:
        proc = subprocess.run([str(HACK_CLUSTER), *args], env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"hack/cluster {' '.join(args)}: {proc.stderr[-3000:]}"
        return proc.stdout

    try:
        exports = dict(
            line.removeprefix("export ").split("=", 1)
            for line in cluster("up").splitlines()
            if line.startswith("export ")
        )
        cluster("add-node", "down-check", "--real", "--family", "n4")
        node = read_real_node("down-check", state_dir)
        kube = Kube(exports["KUBECONFIG"])
        kube.create(
            "/apis/apps/v1/namespaces/default/deployments",
            real_deployment("down-check", node, [guaranteed(cpu="100m", memory="64Mi")]),
        )
        pod = wait_for(
            "a running pod on the real node",
            lambda: next(
                (p for p in kube.pods("default", "app=down-check") if p["status"].get("phase") == "Running"), None
            ),
            timeout=START_TIMEOUT,
        )
        processes = processes_in(node.ns_inode)
        started = {pid: start for pid in processes if (start := process_start(pid)) is not None}
        # Held open past `down`: a freed namespace's inode number goes at once to the next one
        # created on the machine (another cluster's container), whose processes are not ours.
        namespace = hold_namespace(processes)
        cgroups = cgroup_dirs(node.cgroup)
        mounts = mounts_under(node.directory)
        assert len(processes) >= 3, processes  # containerd, the kubelet, the runc shim(s)
        assert container_cgroups(node, container_id(pod)) and cgroups and mounts
    finally:
        cluster("down")
    try:
        left = processes_in(node.ns_inode)
    finally:
        os.close(namespace)
    assert left == [], describe_processes(left)
    # Gone means reaped too (a zombie still holds its pid); a pid since reused by another process is not ours.
    survivors = [pid for pid, start in started.items() if process_start(pid) == start]
    assert survivors == [], describe_processes(survivors)
    assert cgroup_dirs(node.cgroup) == []
    assert mounts_under(state_dir) == []
    assert not state_dir.exists()
    after = machine_snapshot()
    assert after["links"] - before["links"] == set()
    assert after["netns"] - before["netns"] == set()


def test_remove_node_returns_once_the_nodes_processes_are_reaped(cluster: Any) -> None:
    """containerd and the kubelet are orphans (the add-node call that started them has exited):
    killed, they stay in the process table until init reaps them. remove-node waits for that."""
    name = f"gone-{uuid.uuid4().hex[:6]}"
    try:
        subprocess.run(
            [str(HACK_CLUSTER), "add-node", name, "--real"],
            env=cluster.env(),
            check=True,
            capture_output=True,
            timeout=600,
        )
        node = read_real_node(name)
        started = {pid: start for pid in processes_in(node.ns_inode) if (start := process_start(pid)) is not None}
        assert len(started) >= 2, started  # containerd, the kubelet
    finally:
        proc = subprocess.run(
            [str(HACK_CLUSTER), "remove-node", name], env=cluster.env(), capture_output=True, text=True, timeout=600
        )
    assert proc.returncode == 0, proc.stderr
    survivors = [pid for pid, start in started.items() if process_start(pid) == start]
    assert survivors == [], describe_processes(survivors)


def processes_mentioning(text: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                found.append(f"{entry.name}: {cmdline[:200]}")
    return found


def test_a_failed_start_names_the_step_and_leaves_nothing(cluster: Any) -> None:
    """The kubelet refuses a kubernetes.io/ label it may not set on itself and exits:
    add-node says so (with the kubelet's own words) and removes what it had started."""
    name = f"bad-{uuid.uuid4().hex[:6]}"
    proc = subprocess.run(
        [str(HACK_CLUSTER), "add-node", name, "--real", "--label", "kubernetes.io/forbidden=x"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1
    assert f"error: real node {name}: kubelet@{name} exited during startup" in proc.stderr, proc.stderr
    assert "kubernetes.io/forbidden" in proc.stderr, proc.stderr  # the kubelet's own message
    assert f"real node {name}: start failed, removing everything it created" in proc.stderr
    directory = cluster_state_dir() / "nodes" / name
    assert not directory.exists()
    assert mounts_under(directory) == []
    assert [d for d in CGROUP.glob(f"*/wr-*-{name}")] == []
    assert processes_mentioning(f"/nodes/{name}/") == []
    with pytest.raises(ApiError) as err:
        cluster.kube.get(f"/api/v1/nodes/{name}")
    assert err.value.status == 404
