"""The originals-integrity key ring, read from a mounted Secret directory or a Secret's data.

One file (Secret data entry) per key: the name is the key id, the content the key (surrounding
whitespace stripped, at least 32 bytes). Names starting with ``.`` are skipped (the kubelet's
``..data`` symlinks of a Secret volume). :meth:`KeyDirectory.poll` re-reads the directory, so a
rotated Secret takes effect without a restart; a directory that becomes unreadable or empty
keeps the last good keys. An ``optional`` directory (a Secret volume mounted ``optional: true``
whose Secret the reconciler creates at its first start) may be empty or absent at startup.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import secrets
import string
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

from ops.errors import OpsError

log = logging.getLogger("workload_resizer.keys")

MIN_KEY_BYTES = 32
GENERATED_KEY_CHARS = 64
_KEY_ID_SUFFIX_LETTERS = 6


class KeyDirectoryError(OpsError, ValueError):
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
            secret = file.read_bytes()
        except OSError as err:
            raise KeyDirectoryError(f"cannot read key {file}: {err.strerror or err}") from None
        keys[name] = _usable(name, secret, str(path))
    if not keys:
        raise KeyDirectoryError(f"key directory {path} holds no key")
    return keys


def keys_from_secret_data(data: Mapping[str, str] | None, where: str) -> dict[str, bytes]:
    """Key id -> key bytes of a Secret's ``data`` (base64 values), by the directory's rules."""
    keys: dict[str, bytes] = {}
    for name, encoded in sorted((data or {}).items()):
        if name.startswith("."):
            continue
        try:
            secret = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise KeyDirectoryError(f"key {name!r} in {where} is not valid base64") from None
        keys[name] = _usable(name, secret, where)
    if not keys:
        raise KeyDirectoryError(f"{where} holds no key")
    return keys


def generate_key() -> bytes:
    """A new random key: 64 URL-safe characters (384 bits), printable for `kubectl get -o yaml`."""
    return secrets.token_urlsafe(GENERATED_KEY_CHARS * 3 // 4).encode("ascii")


def new_key_id(now: datetime | None = None) -> str:
    """The id of a key the reconciler generates, e.g. ``k20261127000214-qhxzvb`` (UTC time, random
    letters). Never an id used before, so the pods signed with a lost key name a key the ring lacks
    (counted and held) instead of one whose MAC "does not match"; and later in time sorts later in
    resizer.KeyRing's natural order (the time is one digit run), after the ``k0001`` ... ``k9999``
    of earlier versions too, so a key put back beside it never becomes the signing one."""
    stamp = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y%m%d%H%M%S")
    suffix = "".join(secrets.choice(string.ascii_lowercase) for _ in range(_KEY_ID_SUFFIX_LETTERS))
    return f"k{stamp}-{suffix}"


def keys_digest(keys: Mapping[str, bytes]) -> str:
    """Changes whenever a key id or key does; reveals nothing of the keys."""
    h = hashlib.sha256()
    for key_id in sorted(keys):
        h.update(key_id.encode() + b"\0" + hashlib.sha256(keys[key_id]).digest())
    return h.hexdigest()


def _has_entries(directory: Path) -> bool:
    try:
        return any(not entry.name.startswith(".") for entry in directory.iterdir())
    except FileNotFoundError:
        return False
    except OSError:
        return True  # unreadable: not "no key yet"


def _usable(name: str, secret: bytes, where: str) -> bytes:
    secret = secret.strip()
    if len(secret) < MIN_KEY_BYTES:
        raise KeyDirectoryError(f"key {name!r} in {where} has {len(secret)} bytes; at least {MIN_KEY_BYTES} needed")
    return secret


class KeyDirectory:
    """The current keys of a directory; :meth:`poll` re-reads it and reports a change."""

    def __init__(self, directory: str | os.PathLike[str], optional: bool = False) -> None:
        self.directory = Path(directory)
        self.error: str | None = None
        try:
            self.keys: dict[str, bytes] = read_key_directory(self.directory)  # fail fast at startup
        except KeyDirectoryError as err:
            if not optional or _has_entries(self.directory):
                raise  # a key that is there but unusable is an error even when optional
            log.warning(
                "no originals key yet; original-* annotations are stamped unsigned until one appears",
                extra={"directory": str(self.directory)},
            )
            self.keys, self.error = {}, str(err)
        self._digest = keys_digest(self.keys)

    def poll(self) -> bool:
        """Re-read the directory; True when the keys changed. Errors keep the last good keys."""
        try:
            keys = read_key_directory(self.directory)
        except KeyDirectoryError as err:
            if self.error != str(err) and self.keys:
                log.error("originals keys unreadable; keeping the last good ones", extra={"error": str(err)})
            self.error = str(err)
            return False
        self.error = None
        digest = keys_digest(keys)
        if digest == self._digest:
            return False
        log.info("originals keys reloaded", extra={"keyIds": sorted(keys)})
        self.keys, self._digest = keys, digest
        return True
