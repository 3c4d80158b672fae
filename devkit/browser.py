"""Headless Chromium (Debian's `chromium` package) rendering a local HTML file: its DOM as the
browser built it, and a screenshot. Nothing is fetched: a fresh profile, no network features."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from devkit.debian import PackageError, install
from devkit.tempdirs import temporary_directory

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)


def chromium() -> str:
    """The browser's path; Debian's `chromium` is installed the first time (as root, see devkit.debian)."""
    path = _installed()
    if path is None:
        install(["chromium"], "rendering `workload-resizer report -o html` in a browser")
        path = _installed()
    if path is None:
        raise PackageError("apt-get installed chromium, and no `chromium` is on PATH")
    return path


def _installed() -> str | None:
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _run(page: Path, *flags: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    profile = temporary_directory("chromium-profile-")  # a new, empty profile every time
    proc = subprocess.run(
        [chromium(), *FLAGS, f"--user-data-dir={profile}", *flags, page.resolve().as_uri()],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    shutil.rmtree(profile, ignore_errors=True)
    if proc.returncode != 0:
        raise AssertionError(f"chromium exited {proc.returncode}: {proc.stderr[-3000:]}")
    return proc


def dump_dom(page: Path) -> str:
    """The page's DOM after the browser parsed and laid it out, serialised."""
    return _run(page, "--dump-dom").stdout


def screenshot(page: Path, png: Path, width: int = 1280, height: int = 1600) -> Path:
    _run(page, f"--window-size={width},{height}", f"--screenshot={png.resolve()}")
    if not png.exists() or png.stat().st_size == 0:
        raise AssertionError(f"chromium wrote no screenshot to {png}")
    return png
