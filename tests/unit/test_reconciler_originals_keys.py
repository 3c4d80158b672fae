"""reconciler.originals_keys: pods signed with a key the reconciler does not have are counted
(workload_resizer_originals_unknown_key_pods) and each such key id is logged once."""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

import pytest

from kube import ApiError
from ops.prometheus import REGISTRY
from reconciler.options import parse
from reconciler.originals_keys import MAX_WARNED_KEY_IDS, SecretKeys, UnknownKeyWatch
from resizer import KeyRing
from resizer.integrity import key_id_order
from resizer.podstate import ORIGINALS_MAC

RING = KeyRing({"k0002": b"2" * 32})


def gauge_value() -> float | None:
    return REGISTRY.get_sample_value("workload_resizer_originals_unknown_key_pods")


def pod(name: str, mac: str | None) -> dict[str, Any]:
    annotations = {ORIGINALS_MAC: mac} if mac is not None else {}
    return {"metadata": {"namespace": "shop", "name": name, "annotations": annotations}}


def mac(key_id: str, scope: str = "p") -> str:
    return f"v1.{scope}.{key_id}.{'A' * 43}"


def test_counts_pods_whose_mac_names_a_missing_key_and_logs_each_id_once(caplog: pytest.LogCaptureFixture) -> None:
    watch = UnknownKeyWatch()
    pods = [
        pod("a", mac("k0001")),
        pod("b", mac("k0001", "a")),
        pod("c", mac("k0002")),
        pod("d", None),
        pod("e", "garbage"),
        pod("f", mac("old")),
    ]
    with caplog.at_level(logging.WARNING, logger="reconciler"):
        assert watch.update(pods, RING) == 3
        assert gauge_value() == 3
        assert watch.update(pods, RING) == 3
    warnings = [r for r in caplog.records if "does not have" in r.getMessage()]
    assert sorted(r.__dict__["keyId"] for r in warnings) == ["k0001", "old"], "once per key id"
    assert {r.__dict__["example"] for r in warnings} == {"shop/a", "shop/f"}
    assert "put the key back" in warnings[0].getMessage()


def test_the_key_coming_back_clears_the_gauge() -> None:
    watch = UnknownKeyWatch()
    pods = [pod("a", mac("k0001"))]
    assert watch.update(pods, RING) == 1
    assert watch.update(pods, KeyRing({**RING.keys, "k0001": b"1" * 32})) == 0
    assert gauge_value() == 0


def test_tenant_chosen_ids_cannot_flood_the_log(caplog: pytest.LogCaptureFixture) -> None:
    watch = UnknownKeyWatch()
    pods = [pod(f"p{i}", mac(f"x{i}")) for i in range(MAX_WARNED_KEY_IDS * 3)]
    pods.append(pod("bad-id", "v1.p.-bad.x"))  # not a key id resizer accepts: not counted
    with caplog.at_level(logging.WARNING, logger="reconciler"):
        assert watch.update(pods, RING) == MAX_WARNED_KEY_IDS * 3
    assert len([r for r in caplog.records if "does not have" in r.getMessage()]) == MAX_WARNED_KEY_IDS


def test_the_key_secret_flag_and_the_key_directory_are_alternatives(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse(["--originals-keys-secret=wr/wr-originals-keys"]).originals_keys_secret == "wr/wr-originals-keys"
    with pytest.raises(SystemExit):
        parse(["--originals-keys-secret=wr/s", "--originals-key-dir=/keys"])
    assert "alternatives" in capsys.readouterr().err
    for bad in ("s", "a/b/c", "/s", "wr/"):
        with pytest.raises(SystemExit):
            parse([f"--originals-keys-secret={bad}"])
        assert "NAMESPACE/NAME" in capsys.readouterr().err


class SecretStore:
    """The apiserver's answers for one Secret: get, create (409 if it exists)."""

    def __init__(self) -> None:
        self.secret: dict[str, Any] | None = None

    async def get(self, path: str) -> dict[str, Any]:
        if self.secret is None:
            raise ApiError(404, {"reason": "NotFound"})
        return self.secret

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.secret is not None:
            raise ApiError(409, {"reason": "AlreadyExists"})
        self.secret = body
        return body


def test_a_recreated_secret_gets_a_new_key_id_so_pods_of_the_lost_key_are_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = SecretStore()
    first = SecretKeys(store, "wr", "wr-originals-keys")  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="reconciler"):
        asyncio.run(first.ensure())
    (old_id,) = first.keys
    assert old_id != "k0001" and len(base64.b64decode(store.secret["data"][old_id])) == 64  # type: ignore[index]
    assert any(r.__dict__.get("keyId") == old_id for r in caplog.records if "created" in r.getMessage())
    asyncio.run(SecretKeys(store, "wr", "wr-originals-keys").ensure())  # type: ignore[arg-type]
    assert list(store.secret["data"]) == [old_id], "an existing Secret is only read"  # type: ignore[index]

    store.secret = None  # the Secret is lost
    again = SecretKeys(store, "wr", "wr-originals-keys")  # type: ignore[arg-type]
    asyncio.run(again.ensure())
    (new_id,) = again.keys
    # (Later in time sorts later: tests/unit/test_ops_keys.py; here both come within one second.)
    assert new_id != old_id and key_id_order(new_id) > key_id_order("k0001"), "after the ids of earlier versions"
    assert UnknownKeyWatch().update([pod("sized", mac(old_id))], KeyRing(again.keys)) == 1


def test_a_secret_of_an_earlier_version_is_read_as_it_is() -> None:
    store = SecretStore()
    store.secret = {"data": {"k0001": base64.b64encode(b"1" * 64).decode()}}
    keys = SecretKeys(store, "wr", "wr-originals-keys")  # type: ignore[arg-type]
    asyncio.run(keys.ensure())
    assert keys.keys == {"k0001": b"1" * 64}
