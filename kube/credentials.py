"""Where the apiserver is and how to authenticate to it: in-cluster or from a kubeconfig.

The common cases are read here directly: the in-cluster ServiceAccount (token file re-read every
minute, as projected tokens rotate; CA file), and a kubeconfig whose user has client certificates
and/or a token or tokenFile (paths or inline -data). Anything else (exec plugins, auth-providers,
basic auth, several files merged through $KUBECONFIG) goes through the official `kubernetes`
package's loaders, an optional extra (`workload-resizer[kubeconfig]`): the image leaves it out,
since in-cluster programs never need it, and importing it (all its API models) costs about half
a second of CPU.
"""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kube.errors import KubeError

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REFRESH_SECONDS = 60.0


@dataclass
class Credentials:
    server: str
    ssl_context: ssl.SSLContext | bool
    token: Callable[[], str | None]


class CredentialsError(KubeError, ValueError):
    """The configuration names no usable apiserver or credentials."""


def load_credentials(kubeconfig: str | None, context: str | None = None) -> Credentials:
    """Credentials from --kubeconfig, else the in-cluster service account, else $KUBECONFIG/~/.kube/config."""
    if not kubeconfig:
        if (in_cluster := _in_cluster()) is not None:
            return in_cluster
        paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
        if len(paths) > 1:
            return _library_credentials(None, context)  # merged kubeconfigs: the library merges
        kubeconfig = paths[0] if paths else str(Path.home() / ".kube" / "config")
    creds = _from_kubeconfig(Path(kubeconfig).expanduser(), context)
    return creds if creds is not None else _library_credentials(kubeconfig, context)


def _in_cluster() -> Credentials | None:
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    token_file, ca_file = SERVICE_ACCOUNT_DIR / "token", SERVICE_ACCOUNT_DIR / "ca.crt"
    if not host or not port or not token_file.is_file() or not ca_file.is_file():
        return None
    if ":" in host:
        host = f"[{host}]"  # IPv6
    token = FileToken(token_file)
    if not token():
        return None  # like the official loader: then try a kubeconfig
    return Credentials(f"https://{host}:{port}", ssl.create_default_context(cafile=str(ca_file)), token)


class FileToken:
    """A bearer token read from a file, re-read at most every `refresh` seconds (tokens rotate)."""

    def __init__(self, path: Path, refresh: float = TOKEN_REFRESH_SECONDS) -> None:
        self._path = path
        self._refresh = refresh
        self._value: str | None = None
        self._read_at = float("-inf")

    def __call__(self) -> str | None:
        now = time.monotonic()
        if now - self._read_at >= self._refresh:
            with contextlib.suppress(OSError):  # keep the last good token; the apiserver says 401 if it expired
                self._value = self._path.read_text().strip() or self._value
            self._read_at = now
        return self._value


def _from_kubeconfig(path: Path, context_name: str | None) -> Credentials | None:
    """Credentials for the plain cases; None when the user needs the library (exec, auth-provider, ...)."""
    try:
        config = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    except OSError as err:
        raise CredentialsError(f"cannot read kubeconfig {path}: {err}") from err
    name = context_name or config.get("current-context")
    context = _named(config, "contexts", name, "context")
    cluster = _named(config, "clusters", context.get("cluster"), "cluster")
    user = _named(config, "users", context.get("user"), "user") if context.get("user") else {}
    if any(user.get(k) for k in ("exec", "auth-provider", "username", "password")):
        return None
    server = cluster.get("server")
    if not server:
        raise CredentialsError(f"kubeconfig {path}: cluster {context.get('cluster')!r} has no server")
    base = path.parent
    if cluster.get("insecure-skip-tls-verify"):
        ctx = unverified_context()
    elif cluster.get("certificate-authority-data"):
        ctx = ssl.create_default_context(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    elif cluster.get("certificate-authority"):
        ctx = ssl.create_default_context(cafile=str(base / cluster["certificate-authority"]))
    else:
        ctx = ssl.create_default_context()
    _load_client_certificate(ctx, user, base)
    return Credentials(str(server).rstrip("/"), ctx, _user_token(user, base))


def unverified_context() -> ssl.SSLContext:
    """A client context that checks neither the server's certificate nor its name."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _named(config: dict[str, Any], section: str, name: str | None, key: str) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            return entry.get(key) or {}
    raise CredentialsError(f"kubeconfig: no {key} named {name!r} in {section}")


def _load_client_certificate(ctx: ssl.SSLContext, user: dict[str, Any], base: Path) -> None:
    cert_data, key_data = user.get("client-certificate-data"), user.get("client-key-data")
    if cert_data or key_data:
        # ssl loads a chain only from files: private ones, removed right after loading.
        with tempfile.TemporaryDirectory(prefix="reconciler-client-cert-") as tmp:
            cert_file, key_file = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            for file, data, plain in (
                (cert_file, cert_data, user.get("client-certificate")),
                (key_file, key_data, user.get("client-key")),
            ):
                content = base64.b64decode(data) if data else (base / plain).read_bytes() if plain else b""
                file.touch(mode=0o600)
                file.write_bytes(content)
            ctx.load_cert_chain(str(cert_file), str(key_file))
    elif user.get("client-certificate"):
        ctx.load_cert_chain(str(base / user["client-certificate"]), str(base / user["client-key"]))


def _user_token(user: dict[str, Any], base: Path) -> Callable[[], str | None]:
    if user.get("token"):
        value = str(user["token"]).strip()
        return lambda: value
    if user.get("tokenFile"):
        return FileToken(base / user["tokenFile"])
    return lambda: None


def _library_credentials(kubeconfig: str | None, context: str | None) -> Credentials:
    try:
        from kubernetes import client as k8s_client
        from kubernetes import config as k8s_config
    except ImportError:
        raise CredentialsError(
            f"{kubeconfig or '$KUBECONFIG'}: this kubeconfig needs the kubernetes package (exec plugins, "
            "auth-providers, basic auth or several merged files): pip install 'workload-resizer[kubeconfig]'"
        ) from None

    cfg = k8s_client.Configuration()
    if kubeconfig:
        k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    else:
        try:
            k8s_config.load_incluster_config(client_configuration=cfg)
        except k8s_config.ConfigException:
            k8s_config.load_kube_config(context=context, client_configuration=cfg)
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert) if cfg.verify_ssl else unverified_context()
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return Credentials(server=cfg.host.rstrip("/"), ssl_context=ctx, token=_library_token(cfg))


def _library_token(cfg: Any) -> Callable[[], str | None]:
    """Bearer token, refreshed through the loader's hook (exec plugins and auth-providers rotate)."""
    state = {"checked": 0.0}

    def token() -> str | None:
        hook = getattr(cfg, "refresh_api_key_hook", None)
        if hook is not None and time.monotonic() - state["checked"] > 60:
            hook(cfg)
            state["checked"] = time.monotonic()
        value = (cfg.api_key or {}).get("authorization") or (cfg.api_key or {}).get("BearerToken")
        return str(value).removeprefix("Bearer ").strip() if value else None

    return token
