"""The real node's generated pieces (hack/cluster): OCI archives, containerd and kubelet configs.

Pure functions of their inputs; the real node itself is tested in tests/cluster/test_real_node.py.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.hack_cluster import load_hack_cluster


@pytest.fixture(scope="module")
def cluster() -> ModuleType:
    return load_hack_cluster()


def read_archive(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]


def test_oci_archive_is_a_content_addressed_layout_named_for_ctr(cluster: ModuleType, tmp_path: Path) -> None:
    program = tmp_path / "prog"
    program.write_bytes(b"\x7fELF not really")
    files = read_archive(cluster.oci_archive(program, "prog", "workload-resizer.local/x:1", tmp_path / "x.tar"))

    def blob(descriptor: dict) -> bytes:
        data = files[f"blobs/sha256/{descriptor['digest'].removeprefix('sha256:')}"]
        assert hashlib.sha256(data).hexdigest() == descriptor["digest"].removeprefix("sha256:")
        assert len(data) == descriptor["size"]
        return data

    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    [entry] = json.loads(files["index.json"])["manifests"]
    assert entry["annotations"]["io.containerd.image.name"] == "workload-resizer.local/x:1"
    assert entry["platform"] == {"architecture": "amd64", "os": "linux"}
    manifest = json.loads(blob(entry))
    config = json.loads(blob(manifest["config"]))
    assert config["config"]["Entrypoint"] == ["/prog"]
    [layer_descriptor] = manifest["layers"]
    layer = blob(layer_descriptor)
    assert config["rootfs"]["diff_ids"] == [layer_descriptor["digest"]]  # uncompressed: diff ID = digest
    with tarfile.open(fileobj=io.BytesIO(layer)) as tar:
        [member] = tar.getmembers()
        assert (member.name, member.mode) == ("prog", 0o755)
        assert tar.extractfile(member).read() == program.read_bytes()  # type: ignore[union-attr]


def test_oci_archive_is_reproducible(cluster: ModuleType, tmp_path: Path) -> None:
    program = tmp_path / "prog"
    program.write_bytes(b"same bytes")
    first = cluster.oci_archive(program, "prog", "workload-resizer.local/x:1", tmp_path / "a.tar")
    second = cluster.oci_archive(program, "prog", "workload-resizer.local/x:1", tmp_path / "b.tar")
    assert read_archive(first) == read_archive(second)


@pytest.mark.parametrize("cap_sys_resource", [True, False])
def test_containerd_config(cluster: ModuleType, monkeypatch: pytest.MonkeyPatch, cap_sys_resource: bool) -> None:
    monkeypatch.setattr(cluster, "has_cap_sys_resource", lambda: cap_sys_resource)
    node = cluster.RealNode("n1")
    config = tomllib.loads(cluster.containerd_config(node))
    assert config["version"] == 3
    assert config["state"] == "/run/containerd"  # the node's own /run inside its namespace
    assert config["root"].startswith(str(node.dir))
    assert "io.containerd.internal.v1.opt" in config["disabled_plugins"]  # would create /opt/containerd
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["restrict_oom_score_adj"] is (not cap_sys_resource)
    runc = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert runc == {"BinaryName": "/usr/sbin/runc", "SystemdCgroup": False}
    assert runtime["cni"]["conf_dir"] == str(node.dir / "cni")
    assert config["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == cluster.PAUSE_IMAGE
    assert config["plugins"]["io.containerd.grpc.v1.cri"]["stream_server_address"] == "127.0.0.1"


def test_kubelet_config(cluster: ModuleType, tmp_path: Path) -> None:
    node = cluster.RealNode("n1")
    config = json.loads(
        cluster.kubelet_config(node, "198.18.0.2", {"kubelet": 4001, "kubelet_healthz": 4002}, tmp_path, "100m")
    )
    # The node's IP exists only in its own network namespace: the apiserver reaches it through
    # the egress proxy (logs, exec); nothing on the machine's network can.
    assert (config["address"], config["port"], config["readOnlyPort"]) == ("198.18.0.2", 4001, 0)
    assert (config["healthzBindAddress"], config["healthzPort"]) == ("127.0.0.1", 4002)
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == f"/{node.cgroup}"
    assert config["failCgroupV1"] is False
    assert config["makeIPTablesUtilChains"] is False
    assert config["containerRuntimeEndpoint"] == "unix:///run/containerd/containerd.sock"
    assert config["registerWithTaints"] == [
        {"key": "workload-resizer.io/real-node", "value": "true", "effect": "NoSchedule"}
    ]
    assert config["kubeReserved"]["cpu"] == "100m"


def test_loopback_only_cni_config(cluster: ModuleType) -> None:
    config = json.loads(cluster.LOOPBACK_CNI)
    assert [plugin["type"] for plugin in config["plugins"]] == ["loopback"]


def test_cgroup_name_is_per_cluster_and_node(
    cluster: ModuleType, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    first = cluster.RealNode("n1").cgroup
    assert first.startswith("wr-") and first.endswith("-n1")
    assert cluster.RealNode("n2").cgroup != first
    monkeypatch.setattr(cluster, "STATE", tmp_path)
    assert cluster.RealNode("n1").cgroup != first


def test_node_cpu_flags(cluster: ModuleType) -> None:
    cpu = cluster.NodeCpu.parse("50000/100000", 8192)
    assert (cpu.quota_us, cpu.period_us, cpu.shares) == (50000, 100000, 8192)
    assert cluster.NodeCpu.parse(None, None) == cluster.NodeCpu()
    for quota, shares in (
        ("half", None),
        ("50000", None),
        ("500/100000", None),
        ("50000/100", None),
        (None, 1),
        (None, 300000),
    ):
        with pytest.raises(cluster.ClusterError):
            cluster.NodeCpu.parse(quota, shares)


def test_kubelet_of_a_quota_node_sets_no_container_quotas_on_cgroup_v1(
    cluster: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    quota = cluster.NodeCpu.parse("50000/100000", None)
    monkeypatch.setattr(cluster, "cgroup_version", lambda: 1)
    assert not quota.kubelet_may_set_quotas and cluster.NodeCpu().kubelet_may_set_quotas
    monkeypatch.setattr(cluster, "cgroup_version", lambda: 2)
    assert quota.kubelet_may_set_quotas
    ports = {"kubelet": 1, "kubelet_healthz": 2}
    node = cluster.RealNode("n1")
    assert json.loads(cluster.kubelet_config(node, "198.18.0.2", ports, tmp_path, "0"))["cpuCFSQuota"] is True
    assert (
        json.loads(cluster.kubelet_config(node, "198.18.0.2", ports, tmp_path, "0", cpu_cfs_quota=False))["cpuCFSQuota"]
        is False
    )


def test_node_images_include_the_calibrate_benchmark(cluster: ModuleType) -> None:
    spec = cluster.node_images_spec()
    assert "./calibrate" in spec.packages and "calibrate/main.go" in spec.files


def test_node_ips_are_distinct_and_never_a_real_networks(cluster: ModuleType) -> None:
    state: dict = {"real_nodes": {}}
    first = cluster.node_ip(state)
    assert first == "198.18.0.2"  # RFC 2544 benchmarking range
    state["real_nodes"]["a"] = {"ip": first}
    state["real_nodes"]["b"] = {"ip": "198.18.0.3"}
    assert cluster.node_ip(state) == "198.18.0.4"
    del state["real_nodes"]["a"]
    assert cluster.node_ip(state) == "198.18.0.2"  # freed by remove-node, reused


def test_egress_selector_sends_only_cluster_traffic_to_the_proxy(cluster: ModuleType, tmp_path: Path) -> None:
    config = json.loads(cluster.egress_selector_config(tmp_path / "egress.sock"))
    assert config["kind"] == "EgressSelectorConfiguration"
    by_name = {s["name"]: s["connection"] for s in config["egressSelections"]}
    assert by_name["cluster"] == {
        "proxyProtocol": "HTTPConnect",
        "transport": {"uds": {"udsName": str(tmp_path / "egress.sock")}},
    }
    assert by_name["controlplane"] == by_name["etcd"] == {"proxyProtocol": "Direct"}


def test_feature_gates_follow_the_minor_in_every_component(cluster: ModuleType, tmp_path: Path) -> None:
    """KEP-5836's alpha gate on 1.37 only: the control plane's flag and the kubelet's config agree."""
    gate = "InPlacePodVerticalScalingSchedulerPreemption"
    assert cluster.feature_gate_flags("1.37.2") == [f"--feature-gates={gate}=true"]
    assert cluster.feature_gate_flags("1.36.4") == [] and cluster.feature_gate_flags("1.35.8") == []
    ports = {"kubelet": 1, "kubelet_healthz": 2}
    node = cluster.RealNode("n1")
    gated = cluster.kubelet_config(node, "198.18.0.2", ports, tmp_path, "0", gates=cluster.feature_gates("1.37.2"))
    assert json.loads(gated)["featureGates"] == {gate: True}
    plain = cluster.kubelet_config(node, "198.18.0.2", ports, tmp_path, "0", gates=cluster.feature_gates("1.36.4"))
    assert "featureGates" not in json.loads(plain)
