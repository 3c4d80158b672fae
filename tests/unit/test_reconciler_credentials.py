"""kube.credentials: in-cluster and kubeconfig credentials, proven by a TLS handshake.

Each kubeconfig shape is loaded and then used for a real request to a local TLS
server that requires a client certificate (tests/unit/kube_server.py), so a wrong CA
or a missing client certificate fails the test, not only a wrong field.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import sys
from pathlib import Path

import pytest

from kube import credentials
from kube.client import KubeClient, TransportError
from kube.credentials import Credentials, FileToken, load_credentials
from tests.unit.kube_server import KubeServer, Reply, TLSPair, tls_pair

pytestmark = pytest.mark.timeout(30)


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _kubeconfig(path: Path, cluster: dict, user: dict, **extra: object) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "main",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "main", "context": {"cluster": "c", "user": "u"}}],
        **extra,
    }
    path.write_text(json.dumps(config))
    return path


def _roundtrip(pair: TLSPair, load: callable) -> tuple[dict, KubeServer]:
    """Serve TLS with `pair`, load credentials for its URL with `load(url)`, GET once."""

    async def body() -> tuple[dict, KubeServer]:
        server = KubeServer(lambda req: Reply(200, b'{"ok": true}'), tls=pair)
        await server.start()
        client = KubeClient(load(server.url), qps=0, burst=1, max_connections=1)
        try:
            return await client.get("/api/v1/nodes"), server
        finally:
            await client.close()
            await server.stop()

    return asyncio.run(body())


def test_kubeconfig_with_inline_ca_and_client_certificate_data(tmp_path):
    pair = tls_pair()
    d = pair.directory
    result, server = _roundtrip(
        pair,
        lambda url: load_credentials(
            str(
                _kubeconfig(
                    tmp_path / "config",
                    {"server": url, "certificate-authority-data": _b64(d / "ca.crt")},
                    {"client-certificate-data": _b64(d / "client.crt"), "client-key-data": _b64(d / "client.key")},
                )
            )
        ),
    )
    assert result == {"ok": True}
    assert server.peer_certificates == ["reconciler-client"]
    assert "authorization" not in server.seen[0].headers


def test_kubeconfig_with_file_paths_relative_to_the_kubeconfig(tmp_path):
    pair = tls_pair()
    config_dir = pair.directory  # the kubeconfig sits next to the files it names
    result, server = _roundtrip(
        pair,
        lambda url: load_credentials(
            str(
                _kubeconfig(
                    config_dir / "config",
                    {"server": url, "certificate-authority": "ca.crt"},
                    {"client-certificate": "client.crt", "client-key": "client.key", "token": "abc"},
                )
            )
        ),
    )
    assert result == {"ok": True}
    assert server.peer_certificates == ["reconciler-client"]
    assert server.seen[0].headers["authorization"] == "Bearer abc"


def test_kubeconfig_whose_ca_does_not_vouch_for_the_server_fails_the_handshake(tmp_path):
    pair, other = tls_pair(), tls_pair()
    d = pair.directory
    with pytest.raises(TransportError):
        _roundtrip(
            pair,
            lambda url: load_credentials(
                str(
                    _kubeconfig(
                        tmp_path / "config",
                        {"server": url, "certificate-authority-data": _b64(other.directory / "ca.crt")},
                        {"client-certificate-data": _b64(d / "client.crt"), "client-key-data": _b64(d / "client.key")},
                    )
                )
            ),
        )


def test_kubeconfig_context_selects_cluster_and_user(tmp_path):
    path = _kubeconfig(
        tmp_path / "config",
        {"server": "https://a.example:6443/"},
        {"token": "a"},
        contexts=[
            {"name": "main", "context": {"cluster": "c", "user": "u"}},
            {"name": "other", "context": {"cluster": "c2", "user": "u2"}},
        ],
    )
    config = json.loads(path.read_text())
    config["clusters"].append({"name": "c2", "cluster": {"server": "https://b.example:6443"}})
    config["users"].append({"name": "u2", "user": {"token": "b"}})
    path.write_text(json.dumps(config))
    main, other = load_credentials(str(path)), load_credentials(str(path), context="other")
    assert (main.server, main.token()) == ("https://a.example:6443", "a")
    assert (other.server, other.token()) == ("https://b.example:6443", "b")


def test_kubeconfig_token_file_is_re_read_when_it_rotates(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("one\n")
    creds = load_credentials(
        str(_kubeconfig(tmp_path / "config", {"server": "https://k:6443"}, {"tokenFile": str(token_file)}))
    )
    assert creds.token() == "one"
    token_file.write_text("two\n")
    creds.token._read_at -= credentials.TOKEN_REFRESH_SECONDS  # a minute later
    assert creds.token() == "two"


def test_insecure_skip_tls_verify_turns_verification_off(tmp_path):
    creds = load_credentials(
        str(_kubeconfig(tmp_path / "config", {"server": "https://k:6443", "insecure-skip-tls-verify": True}, {}))
    )
    assert isinstance(creds.ssl_context, ssl.SSLContext)
    assert creds.ssl_context.verify_mode == ssl.CERT_NONE and creds.token() is None


def test_exec_and_auth_provider_users_go_through_the_official_loader(tmp_path, monkeypatch):
    used: list[str | None] = []

    def library(kubeconfig, context):
        used.append(kubeconfig)
        return Credentials("https://from-library", False, lambda: None)

    monkeypatch.setattr(credentials, "_library_credentials", library)
    for user in (
        {"exec": {"command": "get-token", "apiVersion": "client.authentication.k8s.io/v1"}},
        {"auth-provider": {"name": "oidc"}},
        {"username": "u", "password": "p"},
    ):
        path = _kubeconfig(tmp_path / "config", {"server": "https://k:6443"}, user)
        assert load_credentials(str(path)).server == "https://from-library"
    assert len(used) == 3


def test_an_exec_plugin_user_without_the_kubeconfig_extra_is_one_clear_error(tmp_path, monkeypatch):
    """The image leaves the kubernetes package out: a kubeconfig that needs it names the extra."""
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # as if not installed: its import fails
    path = _kubeconfig(
        tmp_path / "config",
        {"server": "https://k:6443"},
        {"exec": {"command": "get-token", "apiVersion": "client.authentication.k8s.io/v1"}},
    )
    with pytest.raises(credentials.CredentialsError, match=r"pip install 'workload-resizer\[kubeconfig\]'"):
        load_credentials(str(path))


def test_several_kubeconfig_files_in_the_environment_go_through_the_official_loader(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    monkeypatch.setattr(
        credentials,
        "_library_credentials",
        lambda kubeconfig, context: Credentials("https://merged", False, lambda: None),
    )
    assert load_credentials(None).server == "https://merged"


def test_a_kubeconfig_without_the_current_context_is_a_clear_error(tmp_path):
    path = _kubeconfig(tmp_path / "config", {"server": "https://k:6443"}, {}, **{"current-context": "gone"})
    with pytest.raises(credentials.CredentialsError, match="no context named 'gone'"):
        load_credentials(str(path))


def _service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pair: TLSPair, port: int) -> Path:
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text("sa-token-1")
    (account / "ca.crt").write_bytes((pair.directory / "ca.crt").read_bytes())
    monkeypatch.setattr(credentials, "SERVICE_ACCOUNT_DIR", account)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(port))
    return account


def test_in_cluster_service_account_with_its_ca_and_a_rotating_token(tmp_path, monkeypatch):
    pair = tls_pair()
    server_side = pair.server_context()
    server_side.verify_mode = ssl.CERT_NONE  # a ServiceAccount has no client certificate
    pair.server_context = lambda: server_side  # type: ignore[method-assign]

    async def body() -> KubeServer:
        server = KubeServer(lambda req: Reply(200, b"{}"), tls=pair)
        await server.start()
        account = _service_account(tmp_path, monkeypatch, pair, int(server.url.rsplit(":", 1)[1]))
        creds = load_credentials(None)
        client = KubeClient(creds, qps=0, burst=1, max_connections=1)
        try:
            await client.get("/a")
            (account / "token").write_text("sa-token-2")  # the kubelet rotated the projected token
            creds.token._read_at -= credentials.TOKEN_REFRESH_SECONDS
            await client.get("/b")
        finally:
            await client.close()
            await server.stop()
        return server

    server = asyncio.run(body())
    assert [s.headers["authorization"] for s in server.seen] == ["Bearer sa-token-1", "Bearer sa-token-2"]


def test_an_explicit_kubeconfig_wins_over_the_in_cluster_account(tmp_path, monkeypatch):
    _service_account(tmp_path, monkeypatch, tls_pair(), 443)
    path = _kubeconfig(tmp_path / "config", {"server": "https://elsewhere:6443"}, {"token": "t"})
    assert load_credentials(str(path)).server == "https://elsewhere:6443"
    assert load_credentials(None).server == "https://127.0.0.1:443"


def test_file_token_keeps_the_last_good_token_when_the_file_vanishes(tmp_path):
    path = tmp_path / "token"
    path.write_text("good")
    token = FileToken(path, refresh=0)
    assert token() == "good"
    path.unlink()
    assert token() == "good"
