"""ops.malloc: glibc's thresholds fixed from inside the process (the webhook's RSS bound)."""

from __future__ import annotations

import ctypes
import platform

import pytest

from ops.malloc import bound_heap_retention


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_accepts_the_thresholds() -> None:
    assert bound_heap_retention() is True


def test_without_a_loadable_libc_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_libc(*_a: object, **_k: object) -> None:
        raise OSError("no libc here")

    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    assert bound_heap_retention() is False


def test_the_mmap_threshold_keeps_the_tls_read_buffer_on_the_heap():
    """uvloop's TLS transport allocates a 256 KiB bytes object for every read: at or under the
    threshold each one went through mmap/munmap and its page faults (a quarter of the webhook's
    throughput); request bodies beyond it still come from mmap and go back to the OS on free."""
    from ops.malloc import MMAP_THRESHOLD, TRIM_THRESHOLD

    read_buffer = 256 * 1024 + 64  # PyBytes header included
    assert read_buffer < MMAP_THRESHOLD <= 1024 * 1024
    assert TRIM_THRESHOLD >= 2 * read_buffer
