"""Self-signed CA and serving certificates for the webhook (``python -m certs``).

For development, tests and benchmarks, and for clusters without cert-manager:
generate a CA, issue a serving certificate for the webhook Service's DNS names
(and any extra DNS names / IPs), write ``ca.crt``, ``tls.crt`` and ``tls.key``,
and hand out the base64 ``caBundle`` for the MutatingWebhookConfiguration.
Keys are ECDSA P-256.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_CLOCK_SKEW = dt.timedelta(minutes=5)
_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


@dataclass(frozen=True)
class Issued:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def service_dns_names(service: str, namespace: str, cluster_domain: str = "cluster.local") -> list[str]:
    """The names the apiserver may use for a Service: ``svc``, ``svc.ns``, ``svc.ns.svc``, ``svc.ns.svc.<domain>``."""
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.{cluster_domain}",
    ]


def _issue(
    common_name: str,
    issuer: Issued | None,
    days: float,
    not_before: dt.datetime | None,
    extensions: Sequence[x509.ExtensionType] = (),
) -> Issued:
    """A new key and its certificate, signed by ``issuer``; without one, a self-signed CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    start = (not_before or dt.datetime.now(dt.timezone.utc)) - _CLOCK_SKEW
    is_ca = issuer is None
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject if issuer is None else issuer.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + _CLOCK_SKEW + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=0 if is_ca else None), critical=True)
        .add_extension(  # ECDSA signatures; a CA also signs certificates and CRLs
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=is_ca,
                crl_sign=is_ca,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    extensions = [*extensions, x509.SubjectKeyIdentifier.from_public_key(key.public_key())]
    if issuer is not None:
        extensions.append(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer.key.public_key()))
    for extension in extensions:
        builder = builder.add_extension(extension, critical=False)
    return Issued(builder.sign(key if issuer is None else issuer.key, hashes.SHA256()), key)


def generate_ca(
    common_name: str = "workload-resizer-webhook-ca", days: float = 3650, not_before: dt.datetime | None = None
) -> Issued:
    return _issue(common_name, None, days, not_before)


def issue_serving_cert(
    ca: Issued,
    dns_names: Sequence[str] = (),
    ips: Sequence[str] = (),
    days: float = 365,
    not_before: dt.datetime | None = None,
) -> Issued:
    """A TLS server certificate signed by ``ca`` with the given SANs (at least one)."""
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    if not sans:
        raise ValueError("a serving certificate needs at least one DNS name or IP address")
    cn = dns_names[0] if dns_names else ips[0]
    server_auth = x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])
    return _issue(cn[:64], ca, days, not_before, [server_auth, x509.SubjectAlternativeName(sans)])


def pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def ca_bundle(ca_cert: x509.Certificate) -> str:
    """Base64 of the CA PEM: the ``caBundle`` field of a webhook clientConfig."""
    return base64.b64encode(pem_cert(ca_cert)).decode("ascii")


def load_ca(cert_path: str, key_path: str) -> Issued:
    cert = x509.load_pem_x509_certificate(Path(cert_path).read_bytes())
    key = serialization.load_pem_private_key(Path(key_path).read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{key_path} is not an EC private key")
    if cert.public_key().public_bytes(*_SPKI) != key.public_key().public_bytes(*_SPKI):
        raise ValueError(f"{key_path} is not the key of {cert_path}")
    return Issued(cert, key)


def _write(path: str, data: bytes, mode: int) -> None:
    """Write atomically (temp file + rename) with ``mode`` from the start."""
    tmp = f"{path}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_pair(out_dir: str, serving: Issued, ca: Issued | None = None, ca_key_file: bool = False) -> dict[str, str]:
    """Write ``tls.crt`` (the cert alone), ``tls.key`` (0600), ``ca.crt`` and with ``ca_key_file``
    ``ca.key`` (0600, to issue more certificates later) into ``out_dir``; the paths by name."""
    os.makedirs(out_dir, exist_ok=True)
    files = [("tls.crt", pem_cert(serving.cert), 0o644), ("tls.key", pem_key(serving.key), 0o600)]
    if ca is not None:
        files.append(("ca.crt", pem_cert(ca.cert), 0o644))
        if ca_key_file:
            files.append(("ca.key", pem_key(ca.key), 0o600))
    for name, data, mode in files:
        _write(os.path.join(out_dir, name), data, mode)
    return {name: os.path.join(out_dir, name) for name, _, _ in files}


def dedupe(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))
