"""The pinned tools of hack/tools (prometheus, promtool, ...), fetched into the shared cache on first use."""
from __future__ import annotations

import functools
from pathlib import Path

from devkit.progress import run_visible

HACK_TOOLS = Path(__file__).resolve().parents[1] / "hack" / "tools"


@functools.cache
def ensure_tool(name: str) -> str:
    """Path of the pinned `name` binary; `hack/tools build <name>` makes it the first time."""
    proc = run_visible([str(HACK_TOOLS), "build", name])
    if proc.returncode != 0:
        raise RuntimeError(f"hack/tools build {name} failed (exit {proc.returncode})")
    return proc.stdout.strip().splitlines()[-1]
