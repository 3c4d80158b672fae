"""Every annotation key workload-resizer reads or writes, in one place."""

from __future__ import annotations

import base64
import functools
import hashlib
import re
from collections.abc import Mapping
from typing import Any, Literal

__all__ = [
    "APPLIED_AT",
    "APPLIED_INSTANCE_TYPE",
    "APPLIED_SIZE",
    "MIRROR_POD",
    "ORIGINALS_MAC",
    "PREFIX",
    "RESIZE_STATE",
    "SIZED_AT_ADMISSION",
    "SKIP",
    "TOTAL_ANNOTATION_SIZE_LIMIT",
    "fits_annotation_limit",
    "is_controller_owned_key",
    "is_original_key",
    "legacy_original_key",
    "original_key",
    "pod_original_key",
]

PREFIX = "workload-resizer.io/"
SKIP = PREFIX + "skip"
APPLIED_INSTANCE_TYPE = PREFIX + "applied-instance-type"
APPLIED_AT = PREFIX + "applied-at"
# A digest of the containers' cpu/memory when applied-* was recorded: a spec that differs from
# it (and equals the plan) holds a re-alignment an earlier reconciler requested but did not report.
APPLIED_SIZE = PREFIX + "applied-size"
# HMAC over the original-* values and the pod's identity (resizer.integrity).
ORIGINALS_MAC = PREFIX + "originals-mac"
# The webhook's record that it sized the pod at CREATE for this node type (resizer.pinning);
# covered by the sized-scope MAC (resizer.integrity) until the reconciler binds the originals.
SIZED_AT_ADMISSION = PREFIX + "sized-at-admission"
# The reconciler's record of a resize that has not ended actuated (deferred, infeasible, ...).
RESIZE_STATE = PREFIX + "resize-state"
# Set by the kubelet on the API copy of a static pod.
MIRROR_POD = "kubernetes.io/config.mirror"
# The apiserver rejects an object whose annotation keys and values add up to more bytes.
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024

_ORIGINAL_PREFIX = PREFIX + "original-"
_APPLIED_PREFIX = PREFIX + "applied-"
_MAX_NAME_LENGTH = 63
_DIGEST_LENGTH = 26  # lowercase base32 characters of sha256: 130 bits
_LEGACY_DIGEST_LENGTH = 8  # hex characters of sha256: 32 bits
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", re.ASCII)


def original_key(
    container: str,
    resource: Literal["cpu", "memory"],
    kind: Literal["request", "limit"],
) -> str:
    """Annotation key the product writes a container's baseline request or limit under.

    ``workload-resizer.io/original-cpu.<container>`` (request) or
    ``workload-resizer.io/original-cpu-limit.<container>`` (limit), likewise for memory.
    The part after ``/`` must be a qualified name of at most 63 characters, so a name
    that would reach 63 characters becomes ``<stem>.<truncated container>_<26 lowercase
    base32 characters of sha256(container)>``, exactly 63 long: 130 bits, so no search
    finds two container names sharing a key.

    Three forms, never equal to one another: a verbatim key is at most 62 characters; a
    hashed key and a legacy key (:func:`legacy_original_key`) are 63, and a legacy key has
    ``-`` ninth from the end where a hashed key has a digest character. So a hashed key never
    equals another container's verbatim or legacy key, and two names share a key only if
    sha256 collides on 130 bits. Which annotation holds a given pod's original (a pod stamped
    before may hold it under the legacy key) is :func:`resizer.originals.original_keys`'
    answer, never the caller's.
    """
    return _original_key(container, resource, kind, False)


def legacy_original_key(
    container: str,
    resource: Literal["cpu", "memory"],
    kind: Literal["request", "limit"],
) -> str:
    """The key earlier versions wrote: :func:`original_key` for names whose key fits verbatim,
    else ``<stem>.<truncated container>-<8 hex of sha256(container)>``, 63 long. 32 bits: two
    valid names sharing it are found in under a second. Read (where unambiguous), never written."""
    return _original_key(container, resource, kind, True)


# Every pod event of every sized pod looks up its containers' keys: memoise (pure;
# bounded, since container names are tenant input; errors are not cached).
@functools.lru_cache(maxsize=8192)
def _original_key(container: str, resource: str, kind: str, legacy: bool) -> str:
    if resource not in ("cpu", "memory") or kind not in ("request", "limit"):
        raise ValueError(f"unsupported original key {resource!r}/{kind!r}")
    stem = f"original-{resource}" + ("-limit" if kind == "limit" else "")
    name = f"{stem}.{container}"
    if len(name) >= _MAX_NAME_LENGTH:
        digest = hashlib.sha256(container.encode())
        if legacy:
            separator, text = "-", digest.hexdigest()[:_LEGACY_DIGEST_LENGTH]
        else:
            separator, text = "_", base64.b32encode(digest.digest()).decode("ascii")[:_DIGEST_LENGTH].lower()
        keep = _MAX_NAME_LENGTH - len(stem) - len(".") - len(separator) - len(text)
        name = f"{stem}.{container[:keep]}{separator}{text}"
    if not _QUALIFIED_NAME.fullmatch(name):
        raise ValueError(f"container name {container!r} cannot form a valid annotation key")
    return PREFIX + name


def pod_original_key(resource: Literal["cpu", "memory"], kind: Literal["request", "limit"]) -> str:
    """Annotation key holding the pod-level (``spec.resources``) baseline request or limit:
    ``workload-resizer.io/original-pod-cpu``, ``original-pod-cpu-limit``, likewise for memory.
    Never equal to a container's key (those have a ``.<container>`` suffix)."""
    if resource not in ("cpu", "memory") or kind not in ("request", "limit"):
        raise ValueError(f"unsupported original key {resource!r}/{kind!r}")
    return f"{_ORIGINAL_PREFIX}pod-{resource}" + ("-limit" if kind == "limit" else "")


def is_controller_owned_key(key: str) -> bool:
    """True for the ``original-*``, ``applied-*``, integrity, resize-state and sized-at-admission keys
    only the controller may set."""
    return key.startswith((_ORIGINAL_PREFIX, _APPLIED_PREFIX)) or key in (
        ORIGINALS_MAC,
        RESIZE_STATE,
        SIZED_AT_ADMISSION,
    )


def is_original_key(key: str) -> bool:
    """True for an ``original-*`` key (a baseline value)."""
    return key.startswith(_ORIGINAL_PREFIX)


def fits_annotation_limit(annotations: Mapping[str, Any], originals: Mapping[str, str]) -> bool:
    """Whether ``annotations`` with every controller-owned key replaced by ``originals``
    stays within the apiserver's total size limit (a pod over it cannot be stored, so
    stamping it would block its creation)."""
    size = sum(
        _bytes(k) + _bytes(v) for k, v in annotations.items() if k not in originals and not is_controller_owned_key(k)
    )
    size += sum(_bytes(k) + _bytes(v) for k, v in originals.items())
    return size <= TOTAL_ANNOTATION_SIZE_LIMIT


def _bytes(text: Any) -> int:
    if isinstance(text, str):  # isascii() is O(1) on str: no encoding for the usual ASCII text
        return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return len(str(text))
