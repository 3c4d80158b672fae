"""Long first-use steps (building Kubernetes, helm, cert-manager) shown as they happen.

The tools print their progress on stderr. Under pytest that would be captured and
shown only for a failed test, so a first `make test` would sit silent for minutes:
tests/conftest.py registers pytest's "capture off" switch here, and every such step
runs with stderr on the terminal.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Mapping
from typing import ContextManager

_uncaptured: Callable[[], ContextManager[object]] = contextlib.nullcontext


def show_through(uncaptured: Callable[[], ContextManager[object]]) -> None:
    """Run visible steps inside `uncaptured()` (e.g. pytest's capture manager, disabled)."""
    global _uncaptured
    _uncaptured = uncaptured


def run_visible(
    argv: list[str], env: Mapping[str, str] | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `argv` with its stderr on the terminal; its stdout is captured and returned."""
    with _uncaptured():
        return subprocess.run(argv, stdout=subprocess.PIPE, stderr=None, text=True, env=env, timeout=timeout)


def run_shown(
    argv: list[str], env: Mapping[str, str] | None = None, timeout: float | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `argv` with both its stdout and stderr on the terminal (stderr's)."""
    with _uncaptured():
        return subprocess.run(argv, stdout=2, stderr=None, text=True, env=env, timeout=timeout)
