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
