"""ops.keys: the key ring from a mounted Secret directory, rotation and bad input."""

from __future__ import annotations

import base64
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from ops.keys import (
    KeyDirectory,
    KeyDirectoryError,
    generate_key,
    keys_from_secret_data,
    new_key_id,
    read_key_directory,
)
from resizer import KeyRing
from resizer.integrity import key_id_order


def test_reads_one_key_per_file_and_skips_kubelet_dot_entries(tmp_path: Path) -> None:
    (tmp_path / "2026-01").write_bytes(b"a" * 40 + b"\n")
    (tmp_path / "..data").mkdir()
    (tmp_path / ".hidden").write_bytes(b"x" * 40)
    assert read_key_directory(tmp_path) == {"2026-01": b"a" * 40}


@pytest.mark.parametrize(
    "setup, message",
    [
        (lambda d: None, "holds no key"),
        (lambda d: (d / "k").write_bytes(b"short"), "at least 32"),
    ],
)
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


def test_an_optional_directory_may_start_empty_or_absent_and_its_keys_count_when_they_appear(tmp_path: Path) -> None:
    (tmp_path / "..data").mkdir()  # what the kubelet leaves for a missing optional Secret
    keys = KeyDirectory(tmp_path, optional=True)
    assert keys.keys == {} and not keys.poll()
    (tmp_path / "k0001").write_bytes(b"1" * 64)
    assert keys.poll() and keys.keys == {"k0001": b"1" * 64}
    assert KeyDirectory(tmp_path / "absent", optional=True).keys == {}


def test_an_optional_directory_with_an_unusable_key_still_fails_fast(tmp_path: Path) -> None:
    (tmp_path / "k0001").write_bytes(b"short")
    with pytest.raises(KeyDirectoryError, match="at least 32"):
        KeyDirectory(tmp_path, optional=True)


def test_secret_data_follows_the_directory_rules() -> None:
    data = {"k0001": base64.b64encode(b"a" * 40 + b"\n").decode()}
    assert keys_from_secret_data(data, "Secret ns/keys") == {"k0001": b"a" * 40}
    for bad, message in [
        ({}, "Secret ns/keys holds no key"),
        (None, "holds no key"),
        ({"k1": base64.b64encode(b"short").decode()}, "at least 32"),
        ({"k1": "not base64!"}, "not valid base64"),
    ]:
        with pytest.raises(KeyDirectoryError, match=message):
            keys_from_secret_data(bad, "Secret ns/keys")


def test_generated_keys_are_long_printable_and_distinct() -> None:
    first, second = generate_key(), generate_key()
    assert len(first) == 64 and first.isascii() and first.strip() == first and first != second
    assert keys_from_secret_data({"k0001": base64.b64encode(first).decode()}, "s") == {"k0001": first}


def test_a_generated_key_id_is_new_and_sorts_after_every_earlier_one() -> None:
    """A lost Secret recreated by the reconciler must never reuse an id: pods signed with the old
    key then show up as signed with an unknown key (counted, alerted, held), not as forged."""
    times = [
        datetime(2026, 11, 27, 0, 2, 14, tzinfo=timezone.utc),
        datetime(2026, 11, 27, 0, 2, 15, tzinfo=timezone.utc),
        datetime(2026, 12, 1, tzinfo=timezone.utc),
        datetime(2099, 1, 1, tzinfo=timezone.utc),
    ]
    generated = [new_key_id(t) for t in times]
    assert generated[0].startswith("k20261127000214-")
    # Ids of earlier versions (k0001, counted-up rotations) and of the documented date form.
    earlier = ["k0001", "k0002", "k0010", "k9999", "2026-11-23"]
    for i, key_id in enumerate(generated):
        assert all(key_id_order(key_id) > key_id_order(before) for before in earlier + generated[:i]), key_id
        assert KeyRing({k: b"x" * 32 for k in earlier + generated[: i + 1]}).newest == key_id
    same_second = {new_key_id(times[0]) for _ in range(64)}
    assert len(same_second) == 64, "new even within one second"
    now = new_key_id()
    assert key_id_order(now) > key_id_order(new_key_id(datetime.now(timezone.utc) - timedelta(seconds=2)))
    assert KeyRing({now: b"x" * 32}).newest == now, "an id the key ring accepts"
