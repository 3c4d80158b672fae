"""reconciler.originals_keys: pods signed with a key the reconciler does not have are counted
(workload_resizer_originals_unknown_key_pods) and each such key id is logged once."""
from __future__ import annotations

import logging
from typing import Any

import pytest

from ops.prometheus import REGISTRY
from reconciler.options import parse
from reconciler.originals_keys import MAX_WARNED_KEY_IDS, UnknownKeyWatch
from resizer import ORIGINALS_MAC, KeyRing

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
    pods = [pod("a", mac("k0001")), pod("b", mac("k0001", "a")), pod("c", mac("k0002")), pod("d", None),
            pod("e", "garbage"), pod("f", mac("old"))]
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
    pods.append(pod("bad-id", "v1.p.-bad.x"))           # not a key id resizer accepts: not counted
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
