"""The originals MAC keys for the admin commands: a key directory, or the chart's Secret."""

from __future__ import annotations

from kube import ApiError, KubeClient
from ops.keys import KeyDirectoryError, keys_from_secret_data, read_key_directory
from reconciler.settings import KeySettings
from resizer import EMPTY_KEYRING, KeyRing, KeyRingError


async def load_keyring(client: KubeClient, settings: KeySettings) -> tuple[KeyRing, str | None]:
    """The key ring, and a warning when there is none (then only pods whose spec never changed, or
    equals their originals, verify). Raises KeyRingError/KeyDirectoryError for unusable keys."""
    if settings.key_dir:
        return KeyRing(read_key_directory(settings.key_dir)), None
    namespace, name = settings.secret.split("/", 1)
    try:
        secret = await client.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")
    except ApiError as err:
        if err.status in (403, 404):
            return EMPTY_KEYRING, (
                f"cannot read the originals keys (Secret {settings.secret}: {err.status} "
                f"{err.reason}); pass --originals-key-dir or --originals-keys-secret"
            )
        raise
    if not secret.get("data"):
        return EMPTY_KEYRING, f"the Secret {settings.secret} holds no originals key"
    return KeyRing(keys_from_secret_data(secret["data"], f"Secret {settings.secret}")), None


__all__ = ["KeyDirectoryError", "KeyRingError", "load_keyring"]
