"""Serving certificate: one live ``ssl.SSLContext``, reloaded in place on rotation.

New connections build their SSL object from the context uvicorn was given, so loading a new
pair into that *same* context makes new handshakes present it while established connections
carry on: no restart, no dropped request. ``CertReloader.poll`` reads the pair consistently
across a kubelet's ``..data`` symlink swap and validates a private copy on a scratch context
(key matches, not expired) before loading it into the live one: a bad pair is never served, the
previous one stays, the failure is logged and counted once. It runs on the event loop's thread,
as handshakes do, so none starts between ``load_cert_chain`` setting certificate and key.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import logging
import os
import shutil
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from app.errors import WebhookError
from app.metrics import Metrics

log = logging.getLogger("workload_resizer.webhook.tls")

TLS_VERSIONS = {"1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}
# TLS 1.2: forward-secret key exchange (ECDHE) with AEAD ciphers only: no CBC, DHE or static RSA.
# TLS 1.3's suites are all ECDHE/AEAD, preferred when the client has it (the highest common version).
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20"


def new_server_context(min_version: str = "1.2") -> ssl.SSLContext:
    """A server context with no certificate yet: TLS >= ``min_version``, HTTP/1.1, ECDHE+AEAD
    suites only, no renegotiation, no compression."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[min_version]
    ctx.maximum_version = ssl.TLSVersion.TLSv1_3
    ctx.set_ciphers(TLS12_CIPHERS)
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE | ssl.OP_NO_RENEGOTIATION
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


@dataclass(frozen=True)
class CertInfo:
    subject: str
    serial: str
    not_before: dt.datetime
    not_after: dt.datetime
    sha256: str  # fingerprint of the leaf certificate (DER)
    dns_names: tuple[str, ...]


def _cert_info(pem: bytes) -> CertInfo:
    cert = x509.load_pem_x509_certificate(pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = (*san.get_values_for_type(x509.DNSName), *map(str, san.get_values_for_type(x509.IPAddress)))
    except x509.ExtensionNotFound:
        dns = ()
    return CertInfo(
        subject=cert.subject.rfc4514_string(),
        serial=format(cert.serial_number, "x"),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        sha256=cert.fingerprint(hashes.SHA256()).hex(),
        dns_names=dns,
    )


class CertError(WebhookError):
    """A certificate/key pair that must not be served."""


class CertReloader:
    """Owns the live SSLContext and keeps it in step with the files on disk."""

    def __init__(
        self,
        cert_file: str,
        key_file: str,
        min_version: str = "1.2",
        interval: float = 10.0,
        metrics: Metrics | None = None,
        private_dir: str | None = None,
    ) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.min_version = min_version
        self.interval = interval
        self.metrics = metrics if metrics is not None else Metrics(process_metrics=False)
        self.context = new_server_context(min_version)
        self.info: CertInfo | None = None
        self._current_hash: str | None = None
        self._rejected_hash: str | None = None
        self._current_files: tuple[str, str] | None = None
        self._generation = 0
        self._private_dir = private_dir
        self._own_private_dir = private_dir is None
        self._task: asyncio.Task[None] | None = None

    @property
    def loaded(self) -> bool:
        return self.info is not None

    def poll(self) -> bool | None:
        """Check the files once. True: a new pair is served; False: a bad pair was refused; None:
        nothing to do (unchanged, already refused, or mid-swap)."""
        try:
            cert_pem, key_pem = self._read_pair()
        except _InFlux:
            return None
        except OSError as exc:
            digest = "oserror:" + repr(exc)
            if digest == self._rejected_hash:
                return None
            return self._refuse(f"cannot read certificate files: {exc}", digest)
        digest = hashlib.sha256(cert_pem + b"\0" + key_pem).hexdigest()
        if digest == self._current_hash or digest == self._rejected_hash:
            return None
        try:
            info = self._install(cert_pem, key_pem)
        except CertError as exc:
            return self._refuse(str(exc), digest)
        self._current_hash = digest
        self._rejected_hash = None
        self.info = info
        self.metrics.reloads_by_result["success"].inc()
        self.metrics.cert_not_after.set(info.not_after.timestamp())
        log.info(
            "serving certificate loaded",
            extra={
                "subject": info.subject,
                "serial": info.serial,
                "sha256": info.sha256,
                "not_after": info.not_after.isoformat(),
                "sans": list(info.dns_names),
                "cert_file": self.cert_file,
            },
        )
        return True

    def _refuse(self, reason: str, digest: str) -> bool:
        self._rejected_hash = digest
        self.metrics.reloads_by_result["error"].inc()
        log.error(
            "certificate not loaded; %s",
            "keeping the current one" if self.loaded else "no certificate served yet",
            extra={"reason": reason, "cert_file": self.cert_file, "key_file": self.key_file},
        )
        return False

    def _read_pair(self) -> tuple[bytes, bytes]:
        before = (os.path.realpath(self.cert_file), os.path.realpath(self.key_file))
        cert_pem, key_pem = (Path(path).read_bytes() for path in before)
        after = (os.path.realpath(self.cert_file), os.path.realpath(self.key_file))
        if after != before:
            raise _InFlux
        return cert_pem, key_pem

    def _install(self, cert_pem: bytes, key_pem: bytes) -> CertInfo:
        try:
            info = _cert_info(cert_pem)
        except ValueError as exc:
            raise CertError(f"certificate does not parse: {exc}") from None
        now = dt.datetime.now(dt.timezone.utc)
        if info.not_after <= now and self.loaded:
            raise CertError(f"certificate expired at {info.not_after.isoformat()}")
        cert_path, key_path = self._write_private(cert_pem, key_pem)
        try:
            scratch = new_server_context(self.min_version)
            scratch.load_cert_chain(cert_path, key_path)  # also checks the key matches the cert
        except (ssl.SSLError, OSError, ValueError) as exc:
            _remove(cert_path, key_path)
            raise CertError(f"certificate/key pair is unusable: {exc}") from None
        try:
            self.context.load_cert_chain(cert_path, key_path)
        except (ssl.SSLError, OSError, ValueError) as exc:  # should not happen after the scratch load
            _remove(cert_path, key_path)
            if self._current_files is not None:
                try:
                    self.context.load_cert_chain(*self._current_files)
                except (ssl.SSLError, OSError, ValueError):  # pragma: no cover
                    log.exception("could not restore the previous certificate")
            raise CertError(f"loading into the live context failed: {exc}") from None
        if self._current_files is not None:
            _remove(*self._current_files)
        self._current_files = (cert_path, key_path)
        if info.not_after <= now or info.not_before > now:
            log.warning(
                "serving certificate is outside its validity period",
                extra={"not_before": info.not_before.isoformat(), "not_after": info.not_after.isoformat()},
            )
        return info

    def _write_private(self, cert_pem: bytes, key_pem: bytes) -> tuple[str, str]:
        if self._private_dir is None:
            base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
            try:
                self._private_dir = tempfile.mkdtemp(prefix="workload-resizer-tls-", dir=base)
            except OSError:
                self._private_dir = tempfile.mkdtemp(prefix="workload-resizer-tls-")
        self._generation += 1
        prefix = os.path.join(self._private_dir, str(self._generation))
        paths = (f"{prefix}-tls.crt", f"{prefix}-tls.key")
        for path, data in zip(paths, (cert_pem, key_pem), strict=True):
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
                f.write(data)
        return paths

    async def run(self) -> None:
        """Poll every ``interval`` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.poll()
            except Exception:  # never let the reloader die
                log.exception("certificate poll failed")

    def start(self) -> None:
        if self._task is None and self.interval > 0:
            self._task = asyncio.get_running_loop().create_task(self.run(), name="cert-reloader")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def close(self) -> None:
        """Remove the private copies (the live context keeps what it loaded)."""
        if self._own_private_dir and self._private_dir is not None:
            shutil.rmtree(self._private_dir, ignore_errors=True)
            self._private_dir = None
            self._current_files = None


class _InFlux(WebhookError):
    """The certificate files changed while we read them; try again next tick."""


def _remove(*paths: str) -> None:
    for p in paths:
        with contextlib.suppress(OSError):
            os.unlink(p)
