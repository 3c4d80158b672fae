"""The webhook's key reload: a rotation is picked up, an unusable key never stops the loop."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from app.run import reloaded_keyring
from ops.keys import KeyDirectory
from resizer import KeyRing


def test_a_rotation_replaces_the_ring_and_no_change_keeps_it(tmp_path: Path) -> None:
    (tmp_path / "k1").write_bytes(b"1" * 32)
    keys = KeyDirectory(tmp_path)
    ring = KeyRing(keys.keys)
    assert reloaded_keyring(keys, ring) is ring
    (tmp_path / "k2").write_bytes(b"2" * 32)
    rotated = reloaded_keyring(keys, ring)
    assert rotated.newest == "k2" and set(rotated.keys) == {"k1", "k2"}


def test_an_invalid_key_id_keeps_the_last_good_ring_and_logs(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "k1").write_bytes(b"1" * 32)
    keys = KeyDirectory(tmp_path)
    ring = KeyRing(keys.keys)
    (tmp_path / "not a key id").write_bytes(b"2" * 32)
    with caplog.at_level(logging.ERROR, logger="workload_resizer.webhook"):
        assert reloaded_keyring(keys, ring) is ring
    assert "keeping the last good ones" in caplog.text
    (tmp_path / "not a key id").unlink()
    (tmp_path / "k3").write_bytes(b"3" * 32)
    assert reloaded_keyring(keys, ring).newest == "k3"
