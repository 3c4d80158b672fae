"""The test-only crash hook: read once from the environment at the edge (run.py), injected."""

from __future__ import annotations

import signal

from reconciler import run
from reconciler.ports import no_fault


def test_no_environment_value_means_no_fault():
    assert run.crash_hook(None) is no_fault
    assert run.crash_hook("") is no_fault


def test_the_hook_kills_the_process_only_after_the_named_step(monkeypatch):
    kills = []
    monkeypatch.setattr(run.os, "kill", lambda pid, sig: kills.append((pid, sig)))
    hook = run.crash_hook("resize")
    hook("originals")
    assert kills == []
    hook("resize")
    assert kills == [(run.os.getpid(), signal.SIGKILL)]
