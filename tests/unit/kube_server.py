"""A small HTTP/1.1 server in the test's event loop, answering like an apiserver would (or would not).

Each request is recorded (`Seen`) and answered with the `Reply` the test's handler
returns: a body with Content-Length, or chunks (chunked encoding, one write each,
like a watch); and the misbehaviours a client must survive: a slow answer, no answer,
a connection closed before the answer, a truncated body, a stream broken or left
silent mid-way. Optionally over TLS that requires a client certificate.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

import certs


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


@dataclass
class Reply:
    status: int
    body: bytes | list[bytes]  # a list is sent chunked, one write per chunk
    delay: float = 0.0
    hang: bool = False  # bytes: never answer; chunks: never end the stream
    abort: bool = False  # chunks: drop the connection instead of ending the stream
    close_before_answer: bool = False
    truncate: bool = False  # announce more bytes than are sent, then close


Handler = Callable[[Seen], Reply]


@dataclass
class TLSPair:
    """A CA, a serving certificate for 127.0.0.1 and a client certificate, in files."""

    directory: Path
    ca: certs.Issued

    def server_context(self) -> ssl.SSLContext:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.directory / "server.crt", self.directory / "server.key")
        ctx.load_verify_locations(self.directory / "ca.crt")
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def client_context(self) -> ssl.SSLContext:
        """What kube.load_credentials builds from a kubeconfig with client certificates."""
        ctx = ssl.create_default_context(cafile=str(self.directory / "ca.crt"))
        ctx.load_cert_chain(self.directory / "client.crt", self.directory / "client.key")
        return ctx


def tls_pair() -> TLSPair:
    directory = Path(tempfile.mkdtemp(prefix="kube-server-tls-"))
    ca = certs.generate_ca("kube-server-test-ca")
    serving = certs.issue_serving_cert(ca, ips=["127.0.0.1"])
    client = _client_cert(ca, "reconciler-client")
    for name, issued in (("ca", ca), ("server", serving), ("client", client)):
        (directory / f"{name}.crt").write_bytes(certs.pem_cert(issued.cert))
        (directory / f"{name}.key").write_bytes(certs.pem_key(issued.key))
    return TLSPair(directory, ca)


def _client_cert(ca: certs.Issued, common_name: str) -> certs.Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return certs.Issued(cert, key)


@dataclass
class KubeServer:
    handler: Handler
    tls: TLSPair | None = None
    seen: list[Seen] = field(default_factory=list)
    connections: int = 0
    max_concurrent: int = 0
    peer_certificates: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._server: asyncio.base_events.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._active = 0
        self._stopped = asyncio.Event()
        self.url = ""

    async def start(self) -> None:
        ssl_ctx = self.tls.server_context() if self.tls else None
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=ssl_ctx)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"

    def client_context(self) -> ssl.SSLContext | bool:
        return self.tls.client_context() if self.tls else False

    async def stop(self) -> None:
        self._stopped.set()
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.add(writer)
        peer = writer.get_extra_info("peercert")
        if peer:
            self.peer_certificates += [v for rdn in peer["subject"] for k, v in rdn if k == "commonName"]
        try:
            while await self._exchange(reader, writer):
                pass
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request; False when the connection is done."""
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            return False
        request_line, *header_lines = head.decode("latin-1").split("\r\n")
        method, target, _ = request_line.split(" ", 2)
        headers = {}
        for line in header_lines:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        url = urlsplit(target)
        seen = Seen(method, url.path, dict(parse_qsl(url.query, keep_blank_values=True)), headers, body)
        self.seen.append(seen)
        reply = self.handler(seen)
        self._active += 1
        self.max_concurrent = max(self.max_concurrent, self._active)
        try:
            return await self._answer(reply, writer)
        finally:
            self._active -= 1

    async def _answer(self, reply: Reply, writer: asyncio.StreamWriter) -> bool:
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.close_before_answer:
            return False
        status_line = f"HTTP/1.1 {reply.status} X\r\nContent-Type: application/json\r\n".encode()
        if isinstance(reply.body, bytes):
            if reply.hang:
                await self._stopped.wait()
                return False
            length = len(reply.body) + (10 if reply.truncate else 0)
            writer.write(status_line + f"Content-Length: {length}\r\n\r\n".encode() + reply.body)
            await writer.drain()
            return not reply.truncate
        writer.write(status_line + b"Transfer-Encoding: chunked\r\n\r\n")
        for chunk in reply.body:
            if chunk:
                writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                await writer.drain()
                await asyncio.sleep(0)
        if reply.hang:
            await self._stopped.wait()
            return False
        if reply.abort:
            writer.transport.abort()
            return False
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True
