"""The real server over TLS on 127.0.0.1, certificate reloading and rotation."""

from __future__ import annotations

import base64
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import orjson
import pytest
from cryptography.hazmat.primitives import hashes

import certs
from app.metrics import Metrics
from app.tls import CertReloader
from devkit.metrics import metric_sum
from devkit.ports import free_port
from ops.prometheus import exposition

ROOT = Path(__file__).resolve().parents[2]
REVIEW_2C = (ROOT / "bench" / "data" / "review-2c.json").read_bytes()


# -- helpers ----------------------------------------------------------------------------
def issue(ca: certs.Issued | None = None) -> tuple[certs.Issued, certs.Issued]:
    ca = ca or certs.generate_ca()
    return ca, certs.issue_serving_cert(ca, dns_names=["localhost"], ips=["127.0.0.1"])


def write_version(secret_dir: Path, version: str, cert_pem: bytes, key_pem: bytes) -> None:
    """Lay out a Secret volume the way the kubelet's atomic writer does, then swap ..data."""
    vdir = secret_dir / version
    vdir.mkdir()
    (vdir / "tls.crt").write_bytes(cert_pem)
    (vdir / "tls.key").write_bytes(key_pem)
    tmp = secret_dir / "..data_tmp"
    os.symlink(version, tmp)
    os.replace(tmp, secret_dir / "..data")  # the atomic swap
    for name in ("tls.crt", "tls.key"):
        link = secret_dir / name
        if not link.is_symlink():
            os.symlink(f"..data/{name}", link)


def client_context(*cas: certs.Issued) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata="".join(certs.pem_cert(c.cert).decode() for c in cas))
    return ctx


class Server:
    def __init__(self, cert: Path, key: Path, *extra: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "app",
                "--bind-address",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--tls-cert-file",
                str(cert),
                "--tls-key-file",
                str(key),
                "--log-level",
                "warning",
                "--shutdown-delay",
                "0",
                "--size-at-admission=false",
                *extra,
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        self.url = f"https://127.0.0.1:{self.port}"

    def wait_listening(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited: {self.stop()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise AssertionError("server did not start listening")

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            out, _ = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return out.decode()


@pytest.fixture
def secret_dir(tmp_path: Path) -> Path:
    d = tmp_path / "secret"
    d.mkdir()
    return d


def peer_cert_der(port: int, ctx: ssl.SSLContext) -> bytes:
    """The leaf certificate a fresh handshake presents."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        with ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
            return tls.getpeercert(binary_form=True)


def der(issued: certs.Issued) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding

    return issued.cert.public_bytes(Encoding.DER)


# -- the real server --------------------------------------------------------------------
@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tls")
    ca, serving = issue()
    paths = certs.write_pair(str(tmp), serving, ca)
    srv = Server(
        Path(paths["tls.crt"]), Path(paths["tls.key"]), "--max-request-bytes", "64KiB", "--tls-min-version", "1.3"
    )
    srv.ca, srv.serving = ca, serving
    try:
        srv.wait_listening()
        yield srv
    finally:
        srv.stop()


def test_real_server_answers_over_tls_verified_against_the_ca(tls_server):
    with httpx.Client(verify=client_context(tls_server.ca), base_url=tls_server.url, timeout=5) as c:
        assert c.get("/readyz").status_code == 200
        assert c.get("/healthz").text == "ok"
        r = c.post("/mutate", content=REVIEW_2C, headers={"content-type": "application/json"})
        assert r.status_code == 200
        resp = r.json()["response"]
        assert resp["allowed"] is True and resp["patchType"] == "JSONPatch"
        assert orjson.loads(base64.b64decode(resp["patch"]))
        assert 'workload_resizer_webhook_requests_total{result="patched"}' in c.get("/metrics").text


def test_keep_alive_connection_serves_many_reviews(tls_server):
    with httpx.Client(verify=client_context(tls_server.ca), base_url=tls_server.url, timeout=5) as c:
        peers = set()
        for i in range(50):
            r = c.post("/mutate", content=REVIEW_2C.replace(b"705ab4f5", f"{i:08x}".encode()))
            assert r.status_code == 200 and r.json()["response"]["uid"].startswith(f"{i:08x}")
            peers.add(id(r.extensions["network_stream"]))
        assert len(peers) == 1  # one connection, one response per request, nothing left over


def test_oversize_body_over_the_wire_is_413_and_closes(tls_server):
    with httpx.Client(verify=client_context(tls_server.ca), base_url=tls_server.url, timeout=5) as c:
        r = c.post("/mutate", content=b"{" + b" " * (65 * 1024) + b"}")
        assert r.status_code == 413 and r.headers["connection"] == "close"
        assert c.post("/mutate", content=REVIEW_2C).status_code == 200  # a new connection works


def test_tls_below_minimum_version_is_refused(tls_server):
    ctx = client_context(tls_server.ca)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    with pytest.raises(ssl.SSLError):
        peer_cert_der(tls_server.port, ctx)
    assert peer_cert_der(tls_server.port, client_context(tls_server.ca)) == der(tls_server.serving)


def test_sigterm_stops_the_server_gracefully(tmp_path):
    ca, serving = issue()
    paths = certs.write_pair(str(tmp_path), serving, ca)
    srv = Server(Path(paths["tls.crt"]), Path(paths["tls.key"]), "--log-level", "info")
    srv.wait_listening()
    srv.proc.send_signal(signal.SIGTERM)
    # uvicorn drains and runs the lifespan shutdown; app.run turns the re-raised signal into exit 0
    assert srv.proc.wait(10) == 0
    out = srv.stop()
    assert '"msg":"webhook stopped"' in out and "Traceback" not in out


def test_rotation_through_data_symlink_swap_serves_new_cert_without_failed_requests(secret_dir):
    ca_a, cert_a = issue()
    ca_b, cert_b = issue()  # a new CA too
    write_version(secret_dir, "..v1", certs.pem_cert(cert_a.cert), certs.pem_key(cert_a.key))
    srv = Server(secret_dir / "tls.crt", secret_dir / "tls.key", "--cert-reload-interval", "100ms")
    ctx = client_context(ca_a, ca_b)
    failures: list[str] = []
    seen: list[bytes] = []
    stop = threading.Event()

    def client_loop() -> None:
        n = 0
        while not stop.is_set() and n < 5000:
            with httpx.Client(verify=ctx, base_url=srv.url, timeout=5) as c:  # fresh connection...
                for _ in range(3):  # ...every 3 requests
                    n += 1
                    try:
                        r = c.post("/mutate", content=REVIEW_2C)
                        if r.status_code != 200 or "patch" not in r.json()["response"]:
                            failures.append(f"HTTP {r.status_code}")
                        stream = r.extensions["network_stream"]
                        seen.append(stream.get_extra_info("ssl_object").getpeercert(True))
                    except Exception as exc:  # noqa: BLE001 - every failure counts
                        failures.append(repr(exc))

    try:
        srv.wait_listening()
        assert peer_cert_der(srv.port, ctx) == der(cert_a)
        worker = threading.Thread(target=client_loop)
        worker.start()
        time.sleep(0.5)
        write_version(secret_dir, "..v2", certs.pem_cert(cert_b.cert), certs.pem_key(cert_b.key))
        shutil.rmtree(secret_dir / "..v1")  # the kubelet removes the old version right away
        deadline = time.monotonic() + 10
        while peer_cert_der(srv.port, ctx) != der(cert_b):
            assert time.monotonic() < deadline, "new handshakes never presented cert B"
            time.sleep(0.05)
        time.sleep(0.5)
        stop.set()
        worker.join(30)
        assert failures == []
        assert seen[0] == der(cert_a) and seen[-1] == der(cert_b)
        first_b = seen.index(der(cert_b))
        assert der(cert_a) not in seen[first_b + 3 :]  # a kept-alive connection may finish its 3 requests
        assert peer_cert_der(srv.port, client_context(ca_b)) == der(cert_b)  # verifies against the new CA alone
    finally:
        stop.set()
        srv.stop()


def wait_for_metric(client: httpx.Client, sample: str, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        text = client.get("/metrics").text
        if sample in text:
            return text
        assert time.monotonic() < deadline, f"{sample!r} never appeared"
        time.sleep(0.05)


def test_bad_certificate_swapped_in_keeps_serving_the_current_one(secret_dir):
    ca, cert_b = issue()
    _, other = issue(ca)
    write_version(secret_dir, "..v1", certs.pem_cert(cert_b.cert), certs.pem_key(cert_b.key))
    srv = Server(
        secret_dir / "tls.crt", secret_dir / "tls.key", "--cert-reload-interval", "100ms", "--log-level", "info"
    )
    ctx = client_context(ca)
    try:
        srv.wait_listening()
        assert peer_cert_der(srv.port, ctx) == der(cert_b)
        with httpx.Client(verify=ctx, base_url=srv.url, timeout=5) as c:
            # a certificate with someone else's key
            write_version(secret_dir, "..v2", certs.pem_cert(other.cert), certs.pem_key(cert_b.key))
            wait_for_metric(c, 'workload_resizer_webhook_cert_reloads_total{result="error"} 1.0')
            assert peer_cert_der(srv.port, ctx) == der(cert_b)
            # garbage
            write_version(secret_dir, "..v3", b"-----BEGIN CERTIFICATE-----\nnope\n", b"nope")
            metrics = wait_for_metric(c, 'workload_resizer_webhook_cert_reloads_total{result="error"} 2.0')
            assert 'workload_resizer_webhook_cert_reloads_total{result="success"} 1.0' in metrics
            assert peer_cert_der(srv.port, ctx) == der(cert_b)
            assert c.post("/mutate", content=REVIEW_2C).status_code == 200
            assert c.get("/readyz").status_code == 200
    finally:
        out = srv.stop()
    assert "certificate not loaded; keeping the current one" in out


# -- CertReloader on its own ------------------------------------------------------------
def test_reloader_is_not_ready_until_certificate_files_appear(tmp_path):
    ca, serving = issue()
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    metrics = Metrics(process_metrics=False)
    r = CertReloader(str(cert), str(key), metrics=metrics, private_dir=str(tmp_path / "private"))
    os.mkdir(tmp_path / "private")
    assert r.poll() is False and not r.loaded
    assert r.poll() is None  # the same failure is reported once
    certs.write_pair(str(tmp_path), serving, ca)
    assert r.poll() is True and r.loaded
    assert r.info.sha256 == serving.cert.fingerprint(hashes.SHA256()).hex()
    assert (
        metric_sum(exposition(metrics.registry).decode(), "workload_resizer_webhook_cert_not_after_timestamp_seconds")
        > time.time()
    )


def test_reloader_ignores_unchanged_files(tmp_path):
    ca, serving = issue()
    paths = certs.write_pair(str(tmp_path), serving, ca)
    r = CertReloader(paths["tls.crt"], paths["tls.key"])
    try:
        assert r.poll() is True
        assert r.poll() is None
        os.utime(paths["tls.crt"])  # touched, same content
        assert r.poll() is None
    finally:
        r.close()


def test_reloader_refuses_expired_replacement(tmp_path):
    import datetime as dt

    ca, serving = issue()
    paths = certs.write_pair(str(tmp_path), serving, ca)
    r = CertReloader(paths["tls.crt"], paths["tls.key"])
    try:
        assert r.poll() is True
        old = certs.issue_serving_cert(
            ca, ips=["127.0.0.1"], days=1, not_before=dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=10)
        )
        certs.write_pair(str(tmp_path), old)
        assert r.poll() is False
        assert r.info.serial == format(serving.cert.serial_number, "x")
    finally:
        r.close()


def test_reloader_keeps_private_copies_readable_only_by_owner(tmp_path):
    ca, serving = issue()
    paths = certs.write_pair(str(tmp_path), serving, ca)
    r = CertReloader(paths["tls.crt"], paths["tls.key"])
    try:
        r.poll()
        for p in r._current_files:
            assert os.stat(p).st_mode & 0o077 == 0
    finally:
        r.close()
    assert r._private_dir is None


# -- cipher suites ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def tls12_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tls12")
    ca, serving = issue()
    paths = certs.write_pair(str(tmp), serving, ca)
    srv = Server(Path(paths["tls.crt"]), Path(paths["tls.key"]), "--tls-min-version", "1.2")
    srv.ca, srv.serving = ca, serving
    try:
        srv.wait_listening()
        yield srv
    finally:
        srv.stop()


def negotiated(port: int, ctx: ssl.SSLContext) -> tuple[str, str]:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        with ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls:
            return tls.version() or "", tls.cipher()[0]


def test_tls13_is_preferred_when_the_client_has_it(tls12_server):
    assert negotiated(tls12_server.port, client_context(tls12_server.ca))[0] == "TLSv1.3"


def test_tls12_offers_only_ecdhe_with_aead(tls12_server):
    ctx = client_context(tls12_server.ca)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    version, cipher = negotiated(tls12_server.port, ctx)
    assert version == "TLSv1.2" and cipher.startswith("ECDHE") and ("GCM" in cipher or "CHACHA20" in cipher)


@pytest.mark.parametrize(
    "client_ciphers",
    ["DHE+AESGCM:!ECDHE", "ECDHE+AES:!AESGCM:!CHACHA20", "RSA+AESGCM:!ECDHE:!DHE"],
    ids=["DHE", "CBC", "static-RSA"],
)
def test_tls12_refuses_dhe_cbc_and_static_rsa_suites(tls12_server, client_ciphers):
    ctx = client_context(tls12_server.ca)
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_ciphers(client_ciphers)
    with pytest.raises(ssl.SSLError):
        negotiated(tls12_server.port, ctx)


def test_server_context_forbids_renegotiation_and_compression():
    from app.tls import new_server_context

    ctx = new_server_context("1.2")
    assert ctx.options & ssl.OP_NO_RENEGOTIATION and ctx.options & ssl.OP_NO_COMPRESSION
    tls12 = [c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"]
    assert tls12 and all(n.startswith("ECDHE") and ("GCM" in n or "CHACHA20" in n) for n in tls12)


# -- graceful drain -----------------------------------------------------------------------
def test_sigterm_fails_readiness_first_keeps_serving_then_finishes_in_flight_requests(tmp_path):
    """The rollout sequence: SIGTERM -> /readyz 503 at once while /mutate still answers (closing
    each connection) for --shutdown-delay; then no new connections, and a request whose body
    was still arriving is answered before the process exits 0."""
    ca, serving = issue()
    paths = certs.write_pair(str(tmp_path), serving, ca)
    # The slow request below takes ~2 s to arrive: a read timeout above that.
    srv = Server(
        Path(paths["tls.crt"]), Path(paths["tls.key"]), "--shutdown-delay", "1.5s", "--http-read-timeout", "10s"
    )
    srv.wait_listening()
    ctx = client_context(ca)
    # A request in flight across the whole drain: headers and half the body now.
    raw = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    slow = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    slow.sendall(
        b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(REVIEW_2C) + REVIEW_2C[:100]
    )
    with httpx.Client(verify=ctx, base_url=srv.url, timeout=5) as c:
        assert c.get("/readyz").status_code == 200
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        assert c.get("/readyz").status_code == 503
        r = c.post("/mutate", content=REVIEW_2C)
        assert r.status_code == 200 and "patch" in r.json()["response"]
        assert r.headers["connection"] == "close"
    time.sleep(1.7)  # past the delay: the listener is closed
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=1).close()
    slow.sendall(REVIEW_2C[100:])
    answer = b""
    while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
        chunk = slow.recv(65536)
        if not chunk:
            break
        answer += chunk
    slow.close()
    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert srv.proc.wait(15) == 0
