"""The reconciler is not ready before it has its originals keys: a standby included."""

from __future__ import annotations

import asyncio
from pathlib import Path

from reconciler.options import parse
from reconciler.run import Reconciler
from resizer import KeyRing
from tests.unit.test_reconciler_startup import kubeconfig


class SecretRead:
    """Stands in for the Secret reader: ensure() is where the Secret is read or created."""

    where = "Secret ops/originals-keys"

    def __init__(self) -> None:
        self.keys: dict[str, bytes] = {}

    async def ensure(self) -> None:
        self.keys = {"k0001": b"k" * 32}


def test_not_ready_until_the_keys_secret_is_read_even_as_a_standby(tmp_path: Path) -> None:
    async def scenario() -> None:
        reconciler = Reconciler(
            parse(
                [f"--kubeconfig={kubeconfig(tmp_path)}", "--leader-elect", "--originals-keys-secret=ops/originals-keys"]
            )
        )
        try:
            checks = reconciler.checks()
            assert checks["config"]() == (True, "standby (not leader)")
            ready, why = checks["keys"]()
            assert not ready and "originals keys (Secret ops/originals-keys)" in why
            reconciler.secret_keys = SecretRead()  # type: ignore[assignment]
            assert await reconciler._load_secret_keys()
            assert checks["keys"]() == (True, "loaded") and reconciler.keyring == KeyRing({"k0001": b"k" * 32})
        finally:
            await reconciler.client.close()

    asyncio.run(scenario())


def test_ready_as_to_keys_when_no_secret_is_configured(tmp_path: Path) -> None:
    async def scenario() -> None:
        reconciler = Reconciler(parse([f"--kubeconfig={kubeconfig(tmp_path)}"]))
        try:
            assert reconciler.checks()["keys"]() == (True, "loaded")
        finally:
            await reconciler.client.close()

    asyncio.run(scenario())
