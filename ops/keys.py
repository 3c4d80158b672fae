"""The originals-integrity key ring, read from a mounted Secret directory.

One file per key: the file name is the key id, the content the key (surrounding
whitespace stripped, at least 32 bytes). Names starting with ``.`` are skipped
(the kubelet's ``..data`` symlinks of a Secret volume). The directory is re-read
by :meth:`KeyDirectory.poll`, so a rotated Secret takes effect without a restart;
a directory that becomes unreadable or empty keeps the last good keys.
"""
from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

log = logging.getLogger("workload_resizer.keys")

MIN_KEY_BYTES = 32


class KeyDirectoryError(ValueError):
    """The key directory holds no usable key."""


def read_key_directory(directory: str | os.PathLike[str]) -> dict[str, bytes]:
    """Key id -> key bytes; raises KeyDirectoryError if none is usable or one is malformed."""
    path = Path(directory)
    try:
        names = sorted(entry.name for entry in path.iterdir() if not entry.name.startswith("."))
    except OSError as err:
        raise KeyDirectoryError(f"cannot list key directory {path}: {err.strerror or err}") from None
    keys: dict[str, bytes] = {}
    for name in names:
        file = path / name
        if not file.is_file():
            continue
        try:
            secret = file.read_bytes().strip()
        except OSError as err:
            raise KeyDirectoryError(f"cannot read key {file}: {err.strerror or err}") from None
        if len(secret) < MIN_KEY_BYTES:
            raise KeyDirectoryError(f"key {name!r} in {path} has {len(secret)} bytes; at least {MIN_KEY_BYTES} needed")
        keys[name] = secret
    if not keys:
        raise KeyDirectoryError(f"key directory {path} holds no key")
    return keys


class KeyDirectory:
    """The current keys of a directory; :meth:`poll` re-reads it and reports a change."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.keys: dict[str, bytes] = read_key_directory(self.directory)   # fail fast at startup
        self._digest = _digest(self.keys)
        self.error: str | None = None

    def poll(self) -> bool:
        """Re-read the directory; True when the keys changed. Errors keep the last good keys."""
        try:
            keys = read_key_directory(self.directory)
        except KeyDirectoryError as err:
            if self.error != str(err):
                log.error("originals keys unreadable; keeping the last good ones", extra={"error": str(err)})
            self.error = str(err)
            return False
        self.error = None
        digest = _digest(keys)
        if digest == self._digest:
            return False
        log.info("originals keys reloaded", extra={"keyIds": sorted(keys)})
        self.keys, self._digest = keys, digest
        return True


def _digest(keys: dict[str, bytes]) -> str:
    h = hashlib.sha256()
    for key_id in sorted(keys):
        h.update(key_id.encode() + b"\0" + hashlib.sha256(keys[key_id]).digest())
    return h.hexdigest()
