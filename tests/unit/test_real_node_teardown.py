"""How hack/cluster's real-node teardown tells a process is gone, and which namespace is the node's.

The teardown itself is tested on a real node in tests/cluster/test_real_node.py; these pin the two
rules it rests on with processes this test starts.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.hack_cluster import load_hack_cluster


@pytest.fixture(scope="module")
def cluster() -> ModuleType:
    return load_hack_cluster()


def zombie() -> subprocess.Popen[bytes]:
    """A child that has exited and is not reaped yet (what an orphaned kubelet is until init reaps it)."""
    child = subprocess.Popen(["true"])
    while Path(f"/proc/{child.pid}/status").read_text().split("State:\t", 1)[1][0] != "Z":
        time.sleep(0.01)
    return child


def test_an_exited_process_is_released_only_once_reaped(cluster: ModuleType) -> None:
    child = zombie()
    killed = {child.pid: cluster.process_start(child.pid)}
    assert killed[child.pid] is not None
    assert cluster.wait_released(killed, 0.3) == [child.pid]
    assert "state Z" in cluster.describe_pid(child.pid)
    threading.Timer(0.3, child.wait).start()
    started = time.monotonic()
    assert cluster.wait_released(killed, 10) == []
    assert 0.2 < time.monotonic() - started < 5


def test_a_reused_pid_is_not_the_killed_process(cluster: ModuleType) -> None:
    with subprocess.Popen(["sleep", "30"]) as other:
        try:
            start = cluster.process_start(other.pid)
            assert cluster.wait_released({other.pid: start - 1}, 5) == []  # same pid, another process
            assert cluster.wait_released({other.pid: start}, 0.2) == [other.pid]
        finally:
            other.kill()


def test_a_namespace_is_swept_only_while_its_file_pins_it(cluster: ModuleType, tmp_path: Path) -> None:
    own = os.stat("/proc/self/ns/mnt").st_ino
    assert cluster.namespace_pinned(Path("/proc/self/ns/mnt"), own)
    plain = tmp_path / "mnt"  # what nodes/NAME/ns/mnt is once unmounted
    plain.touch()
    assert not cluster.namespace_pinned(plain, own)
    assert not cluster.namespace_pinned(plain, os.stat(plain).st_ino)  # same number, not a namespace
    assert not cluster.namespace_pinned(tmp_path / "missing", own)


def test_its_own_children_are_reaped_by_the_teardown(cluster: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed add-node removes processes it started itself: nobody else would reap them."""
    child = zombie()
    monkeypatch.setitem(cluster._STARTED, "containerd@x", child)
    assert cluster.wait_released({child.pid: cluster.process_start(child.pid)}, 5) == []
    assert child.returncode == 0
