"""Keep glibc's malloc from holding on to freed memory (the webhook's RSS bound).

glibc serves blocks of 128 KiB and more with mmap and gives them back on free, but its
*dynamic* threshold rises to the size of the largest such block freed (up to 32 MiB): after
one 4 MiB request body the next ones come from the heap, where freed space is fragmented
between small long-lived objects and never returned (docs/performance.md has what that cost).
Fixing the thresholds (what ``MALLOC_MMAP_THRESHOLD_`` and ``MALLOC_TRIM_THRESHOLD_`` do,
from inside the process however it is started) keeps large buffers out of the heap and lets
its free top go back to the OS. Not glibc (musl, macOS): the call says so, changes nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util

# <malloc.h>
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

# Above the 256 KiB buffer uvloop's TLS transport allocates for every read (a threshold at
# glibc's default 128 KiB put each read through mmap/munmap and its page faults, a large share
# of the webhook's throughput); request bodies past it still come from mmap and go back on free.
MMAP_THRESHOLD = 512 * 1024
TRIM_THRESHOLD = 1024 * 1024


def bound_heap_retention(arena_max: int = 2) -> bool:
    """Fix glibc's mmap/trim thresholds and cap the arenas; False when this is not glibc."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
        if not hasattr(libc, "gnu_get_libc_version"):  # glibc only
            return False
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    return all(
        mallopt(option, value) == 1
        for option, value in (
            (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
            (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
            (M_ARENA_MAX, arena_max),
        )
    )
