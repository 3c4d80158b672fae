"""The real webhook (`python -m app`, default flags) accepts TLS 1.2 and 1.3 only.

A TLS 1.0/1.1-only client must fail the handshake, and the failure must come from the
server: the client is first shown to really offer TLS 1.1 (OpenSSL 3 refuses to at its
default security level, so the client lowers it) by completing a TLS 1.1 handshake with
a permissive local server. If this machine's OpenSSL cannot speak TLS 1.1 at all, the
`openssl s_client -tls1_1` fallback is tried, and a refusal of either kind is accepted.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

import certs
from tests.unit.test_webhook_tls import Server, issue

OLD = {"1.0": "TLSv1", "1.1": "TLSv1_1"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict[str, str]:
    ca, serving = issue()
    return certs.write_pair(str(tmp_path_factory.mktemp("tls-versions")), serving, ca)


@pytest.fixture(scope="module")
def webhook(pki) -> Iterator[Server]:
    srv = Server(Path(pki["tls.crt"]), Path(pki["tls.key"]))  # default --tls-min-version (1.2)
    try:
        srv.wait_listening()
        yield srv
    finally:
        srv.stop()


def client(pki: dict[str, str], maximum: ssl.TLSVersion, minimum: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=pki["ca.crt"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = minimum or ssl.TLSVersion.MINIMUM_SUPPORTED
        ctx.maximum_version = maximum
    if maximum < ssl.TLSVersion.TLSv1_2:
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # let OpenSSL 3 offer the old protocol at all
    return ctx


def handshake(port: int, ctx: ssl.SSLContext) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            return tls.version() or ""


def old_protocol_server(pki: dict[str, str], version: ssl.TLSVersion) -> tuple[int, threading.Thread]:
    """A one-shot local TLS server that accepts exactly `version` (the control)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ctx.maximum_version = version
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    ctx.load_cert_chain(pki["tls.crt"], pki["tls.key"])
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve() -> None:
        with listener:
            listener.settimeout(5)
            try:
                conn, _ = listener.accept()
                with ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (OSError, ssl.SSLError):
                pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return port, thread


@pytest.mark.parametrize("old", sorted(OLD))
def test_a_tls_1_0_or_1_1_only_client_is_refused(webhook, pki, old: str) -> None:
    version = getattr(ssl.TLSVersion, OLD[old])
    port, thread = old_protocol_server(pki, version)
    try:
        can_offer = handshake(port, client(pki, version)) == ("TLSv1" if old == "1.0" else "TLSv1.1")
    except ssl.SSLError:
        can_offer = False
    thread.join(5)
    if can_offer:
        with pytest.raises(ssl.SSLError) as refused:
            handshake(webhook.port, client(pki, version))
        # not a local "cannot offer" error: the server ended the handshake
        assert "NO_PROTOCOLS_AVAILABLE" not in str(refused.value) and "NO_CIPHERS_AVAILABLE" not in str(refused.value)
        return
    if shutil.which("openssl") is None:
        pytest.skip(f"neither Python's ssl nor an openssl binary can offer TLS {old} here")
    flag = "-tls1" if old == "1.0" else "-tls1_1"
    proc = subprocess.run(
        [
            "openssl",
            "s_client",
            "-connect",
            f"127.0.0.1:{webhook.port}",
            flag,
            "-cipher",
            "DEFAULT@SECLEVEL=0",
            "-CAfile",
            pki["ca.crt"],
        ],
        input="",
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert proc.returncode != 0, f"openssl s_client {flag} completed a handshake:\n{proc.stdout[-1000:]}"


@pytest.mark.parametrize("version", ["TLSv1_2", "TLSv1_3"])
def test_tls_1_2_and_1_3_clients_succeed(webhook, pki, version: str) -> None:
    exact = getattr(ssl.TLSVersion, version)
    assert handshake(webhook.port, client(pki, exact, minimum=exact)) == version.replace("_", ".")
