"""The originals HMAC keys from a Secret in the reconciler's namespace, created when absent,
and the pods whose MAC names a key that is not in it.

The chart renders no key material (``helm template``, Argo CD, Flux and ``--dry-run`` cannot
look up the cluster, so a rendered key would be a new one at every render): the reconciler
creates the Secret at its first start, with one random key under a new id
(:func:`ops.keys.new_key_id`), and never writes it again. The webhook mounts the same Secret
(``optional: true``) and picks the key up when the kubelet projects it. A Secret that later
disappears or turns unusable keeps the last good keys in this process; a restart then creates a
new key under another id, so the pods signed with the old one name a key the ring lacks: they
show up in ``workload_resizer_originals_unknown_key_pods`` and the log, and are held
(resizer.integrity) until the old key is put back. Secrets of earlier versions (``k0001``) are
read as they are.
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Iterable
from typing import Any

from kube import ApiError, KubeClient
from ops.keys import KeyDirectoryError, generate_key, keys_digest, keys_from_secret_data, new_key_id
from reconciler import metrics
from reconciler.errors import ReconcilerError
from resizer import KeyRing
from resizer.podstate import description_patch, read_mac

log = logging.getLogger("reconciler")

# Key ids as resizer.integrity accepts them: anything else in a MAC is not a key that went missing.
_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}", re.ASCII)
MAX_WARNED_KEY_IDS = 32  # the ids come from pod annotations: bound what gets logged


class KeySecretError(ReconcilerError):
    """The key Secret cannot be read, created or used."""


class SecretKeys:
    """The keys of Secret ``namespace/name``: :meth:`ensure` at startup, :meth:`poll` after."""

    def __init__(self, client: KubeClient, namespace: str, name: str) -> None:
        self._client = client
        self.namespace, self.name = namespace, name
        self.path = f"/api/v1/namespaces/{namespace}/secrets/{name}"
        self.keys: dict[str, bytes] = {}
        self._digest = keys_digest({})
        self.error: str | None = None

    @property
    def where(self) -> str:
        return f"Secret {self.namespace}/{self.name}"

    async def ensure(self) -> None:
        """Read the Secret, creating it with one new key when it does not exist."""
        try:
            secret = await self._client.get(self.path)
        except (ApiError, OSError) as err:
            if not (isinstance(err, ApiError) and err.status == 404):
                raise KeySecretError(f"cannot read {self.where}: {err}") from None
            secret = await self._create()
        try:
            self.keys = self._keys_of(secret)
        except (KeyDirectoryError, ValueError) as err:
            raise KeySecretError(str(err)) from None
        self._digest = keys_digest(self.keys)

    def _keys_of(self, secret: dict[str, Any]) -> dict[str, bytes]:
        """The keys `secret` holds; raises when they are no usable ring."""
        keys = keys_from_secret_data(secret.get("data"), self.where)
        KeyRing(keys)
        return keys

    async def _create(self) -> dict[str, Any]:
        key_id = new_key_id()
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {
                    "app.kubernetes.io/part-of": "workload-resizer",
                    "app.kubernetes.io/component": "originals-keys",
                },
                "annotations": description_patch(
                    "HMAC keys of the pods' original-* annotations, created by the reconciler. "
                    "Never delete or replace a key that signed pods; rotate by adding a greater id."
                ),
            },
            "data": {key_id: base64.b64encode(generate_key()).decode("ascii")},
        }
        try:
            created = await self._client.create(f"/api/v1/namespaces/{self.namespace}/secrets", body)
        except ApiError as err:
            if err.status != 409:  # 409: another replica created it first: use that one
                raise KeySecretError(f"cannot create {self.where}: {err}") from None
            return await self._client.get(self.path)
        log.warning(
            "created the originals key Secret with a new key (a first start; otherwise the Secret "
            "was lost: pods signed with an earlier key are held until it is put back)",
            extra={"secret": self.where, "keyId": key_id},
        )
        return created

    async def poll(self) -> bool:
        """Re-read the Secret; True when the keys changed. Any error keeps the last good keys."""
        try:
            keys = self._keys_of(await self._client.get(self.path))
        except (ApiError, OSError, KeyDirectoryError, ValueError) as err:
            if self.error != str(err):
                extra = {"secret": self.where, "error": str(err)}
                log.error("originals keys unreadable; keeping the last good ones", extra=extra)
            self.error = str(err)
            return False
        self.error = None
        digest = keys_digest(keys)
        if digest == self._digest:
            return False
        log.info("originals keys reloaded", extra={"secret": self.where, "keyIds": sorted(keys)})
        self.keys, self._digest = keys, digest
        return True


class UnknownKeyWatch:
    """Counts the pods whose originals-mac names a key id the ring lacks (gauge) and logs each such id
    once: their originals no longer verify (OriginalsUnverified at their next re-alignment)."""

    def __init__(self) -> None:
        self._warned: set[str] = set()

    def update(self, pods: Iterable[dict[str, Any]], keyring: KeyRing) -> int:
        by_key: dict[str, list[str]] = {}
        for pod in pods:
            mac = read_mac(pod)
            if mac is not None and mac.key_id not in keyring.keys and _KEY_ID.fullmatch(mac.key_id):
                meta = pod["metadata"]
                by_key.setdefault(mac.key_id, []).append(f"{meta.get('namespace')}/{meta.get('name')}")
        total = sum(map(len, by_key.values()))
        metrics.ORIGINALS_UNKNOWN_KEY_PODS.set(total)
        for key_id in sorted(by_key):
            if key_id in self._warned or len(self._warned) >= MAX_WARNED_KEY_IDS:
                continue
            self._warned.add(key_id)
            log.warning(
                "pods signed with an originals key the reconciler does not have: their original-* "
                "annotations no longer verify and they are not re-aligned; put the key back into the "
                "key Secret (never re-sign the pods' current values)",
                extra={
                    "keyId": key_id,
                    "pods": len(by_key[key_id]),
                    "example": by_key[key_id][0],
                    "keyIds": sorted(keyring.keys),
                },
            )
        return total
