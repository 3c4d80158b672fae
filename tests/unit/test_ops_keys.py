"""ops.keys: the key ring from a mounted Secret directory, rotation and bad input."""
from __future__ import annotations

from pathlib import Path

import pytest

from ops.keys import KeyDirectory, KeyDirectoryError, read_key_directory


def test_reads_one_key_per_file_and_skips_kubelet_dot_entries(tmp_path: Path) -> None:
    (tmp_path / "2026-01").write_bytes(b"a" * 40 + b"\n")
    (tmp_path / "..data").mkdir()
    (tmp_path / ".hidden").write_bytes(b"x" * 40)
    assert read_key_directory(tmp_path) == {"2026-01": b"a" * 40}


@pytest.mark.parametrize("setup, message", [
    (lambda d: None, "holds no key"),
    (lambda d: (d / "k").write_bytes(b"short"), "at least 32"),
])
def test_unusable_directories_fail_with_a_clear_message(tmp_path: Path, setup, message: str) -> None:
    setup(tmp_path)
    with pytest.raises(KeyDirectoryError, match=message):
        read_key_directory(tmp_path)


def test_missing_directory_fails_fast(tmp_path: Path) -> None:
    with pytest.raises(KeyDirectoryError, match="cannot list"):
        KeyDirectory(tmp_path / "absent")


def test_poll_picks_up_a_rotation_and_keeps_the_last_good_keys_on_error(tmp_path: Path) -> None:
    (tmp_path / "k1").write_bytes(b"1" * 32)
    keys = KeyDirectory(tmp_path)
    assert not keys.poll()
    (tmp_path / "k2").write_bytes(b"2" * 32)
    assert keys.poll() and set(keys.keys) == {"k1", "k2"}
    (tmp_path / "k1").unlink()
    (tmp_path / "k2").unlink()
    assert not keys.poll() and set(keys.keys) == {"k1", "k2"} and "no key" in (keys.error or "")
