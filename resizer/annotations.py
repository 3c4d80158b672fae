"""Every annotation key workload-resizer reads or writes, in one place."""

from __future__ import annotations

import hashlib
import re
from typing import Literal

__all__ = [
    "APPLIED_AT",
    "APPLIED_INSTANCE_TYPE",
    "MIRROR_POD",
    "PREFIX",
    "SKIP",
    "is_controller_owned_key",
    "original_key",
]

PREFIX = "workload-resizer.io/"
SKIP = PREFIX + "skip"
APPLIED_INSTANCE_TYPE = PREFIX + "applied-instance-type"
APPLIED_AT = PREFIX + "applied-at"
# Set by the kubelet on the API copy of a static pod.
MIRROR_POD = "kubernetes.io/config.mirror"

_ORIGINAL_PREFIX = PREFIX + "original-"
_APPLIED_PREFIX = PREFIX + "applied-"
_MAX_NAME_LENGTH = 63
_HASH_LENGTH = 8
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", re.ASCII)


def original_key(
    container: str,
    resource: Literal["cpu", "memory"],
    kind: Literal["request", "limit"],
) -> str:
    """Annotation key holding a container's baseline request or limit.

    ``workload-resizer.io/original-cpu.<container>`` (request) or
    ``workload-resizer.io/original-cpu-limit.<container>`` (limit), likewise for memory.
    The part after ``/`` must be a qualified name of at most 63 characters, so a name
    that would reach 63 characters becomes ``<stem>.<truncated container>-<8 hex of
    sha256(container)>``, exactly 63 long. Keys that fit verbatim are at most 62
    characters, so a hashed key can never equal another container's verbatim key.
    """
    if resource not in ("cpu", "memory") or kind not in ("request", "limit"):
        raise ValueError(f"unsupported original key {resource!r}/{kind!r}")
    stem = f"original-{resource}" + ("-limit" if kind == "limit" else "")
    name = f"{stem}.{container}"
    if len(name) >= _MAX_NAME_LENGTH:
        digest = hashlib.sha256(container.encode()).hexdigest()[:_HASH_LENGTH]
        keep = _MAX_NAME_LENGTH - len(stem) - len(".-") - _HASH_LENGTH
        name = f"{stem}.{container[:keep]}-{digest}"
    if not _QUALIFIED_NAME.fullmatch(name):
        raise ValueError(f"container name {container!r} cannot form a valid annotation key")
    return PREFIX + name


def is_controller_owned_key(key: str) -> bool:
    """True for the ``original-*`` and ``applied-*`` keys only the controller may set."""
    return key.startswith(_ORIGINAL_PREFIX) or key.startswith(_APPLIED_PREFIX)
