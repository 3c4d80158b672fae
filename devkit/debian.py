"""Debian packages a test needs, installed on first use as hack/cluster installs runc and the
CNI plugins: `apt-get install` as root, waiting for dpkg's lock (another apt run, e.g.
unattended-upgrades), its output on the terminal. Anything else gets an error that says
which package, why, and the command to run."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence

from devkit.progress import run_shown

# Wait up to 10 minutes for dpkg's lock rather than fail at once.
WAIT_FOR_LOCK = ("-o", "DPkg::Lock::Timeout=600")


class PackageError(RuntimeError):
    """A needed Debian package is missing and cannot be installed here."""


def install(packages: Sequence[str], purpose: str) -> None:
    """apt-get install `packages` (`purpose`: what needs them, for the messages)."""
    names = " ".join(packages)
    if shutil.which("apt-get") is None:
        raise PackageError(
            f"{purpose} needs the Debian package(s) {names}, and this machine has no apt-get: "
            f"install them by other means"
        )
    if os.geteuid() != 0:
        raise PackageError(
            f"{purpose} needs the Debian package(s) {names}: run `apt-get install -y {names}` "
            f"as root (make test installs them itself when run as root)"
        )
    print(
        f"[devkit] {purpose} needs the Debian package(s) {names}: apt-get install {names} ...",
        file=sys.stderr,
        flush=True,
    )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    run_shown(["apt-get", *WAIT_FOR_LOCK, "update", "-q"], env=env)  # stale lists: install says which
    proc = run_shown(["apt-get", *WAIT_FOR_LOCK, "install", "-y", "-q", "--no-install-recommends", *packages], env=env)
    if proc.returncode != 0:
        raise PackageError(
            f"apt-get install {names} failed (exit {proc.returncode}; its output is above); {purpose} needs it"
        )
