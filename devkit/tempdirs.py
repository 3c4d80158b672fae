"""Temporary directories that go when the process that made them exits.

Under pytest they land in the session's directory (tests/conftest.py), removed at its end;
the drills, the benchmarks and the demo's helpers used to leave them in /tmp (originals
HMAC keys and serving keys included). Whoever makes one here stops the processes that use
it before exiting; what must outlive the process (the demo's) lives in its state directory.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path


def temporary_directory(prefix: str) -> Path:
    """A new private directory under tempfile's directory, removed when this process exits."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, path, True)
    return path
