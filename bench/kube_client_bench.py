#!/usr/bin/env python3
"""CPU per apiserver request of candidate HTTP clients for the reconciler, side by side.

Against the local control plane (hack/cluster up), the same request mix the reconciler
sends per pod — a GET, a strategic-merge PATCH and a POST-sized merge PATCH of a
ConfigMap — over TLS with the kubeconfig's client certificate, `--concurrency`
requests in flight, for each client:

- httpx.AsyncClient (what the reconciler used until issue 15);
- aiohttp.ClientSession (if installed: `.venv/bin/pip install aiohttp`);
- kube.KubeClient (keep-alive HTTP/1.1 on asyncio protocols + httptools).

Prints CPU milliseconds of this process per request (time.process_time, so the
apiserver's share of the shared cores does not count) and requests/s.

    .venv/bin/python bench/kube_client_bench.py [--requests 3000] [--concurrency 16] [--rounds 3]

`--go-server` measures the clients against the Go net/http server of bench/gowebhook
instead (POST of a 4 KB AdmissionReview, TLS, no client certificate): no cluster
needed, and a server that answers in microseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from devkit.ports import free_port  # noqa: E402
from kube.client import KubeClient  # noqa: E402
from kube.credentials import Credentials, load_credentials  # noqa: E402

REVIEW = REPO / "bench" / "data" / "review-2c.json"
NAMESPACE = "default"
NAME = "kube-client-bench"
PATH = f"/api/v1/namespaces/{NAMESPACE}/configmaps/{NAME}"
Send = Callable[[int], Awaitable[None]]


GO_SERVER = False


def _mix(i: int) -> tuple[str, str, dict | None, str | None]:
    """(method, path, body object, content type): every client serialises the body, as the reconciler does."""
    if GO_SERVER:
        return "POST", "/mutate", _REVIEW, "application/json"
    kind = i % 3
    if kind == 0:
        return "GET", PATH, None, None
    if kind == 1:
        return "PATCH", PATH, {"data": {"k": str(i)}}, "application/strategic-merge-patch+json"
    return "PATCH", PATH, {"metadata": {"annotations": {"a": str(i)}}}, "application/merge-patch+json"


async def run_httpx(creds: Credentials, n: int, concurrency: int) -> tuple[float, float]:
    import httpx

    async with httpx.AsyncClient(
        base_url=creds.server,
        verify=creds.ssl_context,
        limits=httpx.Limits(max_connections=concurrency + 8, max_keepalive_connections=concurrency + 8),
        headers={"Accept": "application/json"},
    ) as client:

        async def send(i: int) -> None:
            method, path, body, ctype = _mix(i)
            resp = await client.request(
                method,
                path,
                content=orjson.dumps(body) if body else None,
                headers={"Content-Type": ctype} if ctype else None,
            )
            assert resp.status_code < 300, resp.text
            orjson.loads(resp.content)

        return await _drive(send, n, concurrency)


async def run_aiohttp(creds: Credentials, n: int, concurrency: int) -> tuple[float, float]:
    import aiohttp

    connector = aiohttp.TCPConnector(ssl=creds.ssl_context, limit=concurrency + 8)
    async with aiohttp.ClientSession(
        base_url=creds.server, connector=connector, headers={"Accept": "application/json"}
    ) as session:

        async def send(i: int) -> None:
            method, path, body, ctype = _mix(i)
            async with session.request(
                method,
                path,
                data=orjson.dumps(body) if body else None,
                headers={"Content-Type": ctype} if ctype else None,
            ) as resp:
                raw = await resp.read()
                assert resp.status < 300, raw
                orjson.loads(raw)

        return await _drive(send, n, concurrency)


async def run_kube(creds: Credentials, n: int, concurrency: int) -> tuple[float, float]:
    client = KubeClient(creds, qps=0, burst=1, max_connections=concurrency + 8)
    try:

        async def send(i: int) -> None:
            method, path, body, ctype = _mix(i)
            await client.request(method, path, body, content_type=ctype or "application/json")

        return await _drive(send, n, concurrency)
    finally:
        await client.close()


async def _drive(send: Send, n: int, concurrency: int) -> tuple[float, float]:
    for i in range(concurrency):  # warm up: connections open, code paths hot
        await send(i)
    queue = iter(range(n))

    async def worker() -> None:
        for i in queue:
            await send(i)

    cpu, wall = time.process_time(), time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return (time.process_time() - cpu) * 1000 / n, n / (time.monotonic() - wall)


_REVIEW = orjson.loads(REVIEW.read_bytes())

CLIENTS = {"httpx": run_httpx, "aiohttp": run_aiohttp, "kube": run_kube}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--kubeconfig", help="default: the one `hack/cluster up` prints")
    parser.add_argument("--go-server", action="store_true", help="against bench/gowebhook's server, no cluster")
    args = parser.parse_args()
    global GO_SERVER
    server = None
    if args.go_server:
        GO_SERVER = True
        creds, server = _go_server()
    else:
        creds = load_credentials(args.kubeconfig or _cluster_up())
    try:
        return _measure(args, creds)
    finally:
        if server is not None:
            server.terminate()
            server.wait(10)


def _go_server() -> tuple[Credentials, subprocess.Popen]:
    import ssl
    import tempfile

    import certs
    from bench.webhook_bench import build_go, wait_ready

    server_bin, _ = build_go(Path(tempfile.gettempdir()) / "workload-resizer-bench")
    work = Path(tempfile.mkdtemp(prefix="kube-client-bench-"))
    ca = certs.generate_ca()
    paths = certs.write_pair(str(work), certs.issue_serving_cert(ca, ips=["127.0.0.1"]), ca)
    port = free_port()
    proc = subprocess.Popen(
        [
            str(server_bin),
            "-addr",
            f"127.0.0.1:{port}",
            "-cert",
            paths["tls.crt"],
            "-key",
            paths["tls.key"],
            "-log=false",
        ],
        env={"GOMAXPROCS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_ready(proc, port, Path(paths["ca.crt"]))
    ctx = ssl.create_default_context(cafile=paths["ca.crt"])
    return Credentials(f"https://127.0.0.1:{port}", ctx, lambda: None), proc


def _measure(args: argparse.Namespace, creds: Credentials) -> int:
    import uvloop

    try:
        import aiohttp  # noqa: F401
    except ImportError:
        print("aiohttp not installed: skipped (.venv/bin/pip install aiohttp)")
        CLIENTS.pop("aiohttp")
    if not GO_SERVER:
        asyncio.run(_ensure_configmap(creds))
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in CLIENTS}
    for _ in range(args.rounds):
        for name, run in CLIENTS.items():
            results[name].append(uvloop.run(run(creds, args.requests, args.concurrency)))
    what = (
        "POSTs of a 4 KB AdmissionReview to the Go server"
        if GO_SERVER
        else "requests (GET / strategic PATCH / merge PATCH of a ConfigMap), TLS + client certificate"
    )
    print(f"\n{args.requests} {what}, {args.concurrency} in flight, uvloop; median of {args.rounds} rounds")
    print(f"  {'client':18} {'CPU ms/request':>15} {'requests/s':>11}")
    for name, rows in results.items():
        print(
            f"  {name:18} {statistics.median(r[0] for r in rows):15.3f} {statistics.median(r[1] for r in rows):11.0f}"
        )
    return 0


async def _ensure_configmap(creds: Credentials) -> None:
    client = KubeClient(creds, qps=0, burst=1, max_connections=1)
    try:
        await client.create(
            f"/api/v1/namespaces/{NAMESPACE}/configmaps",
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": NAME}, "data": {}},
        )
    except Exception as err:  # noqa: BLE001 - already there is fine
        if getattr(err, "status", None) != 409:
            raise
    finally:
        await client.close()


def _cluster_up() -> str:
    proc = subprocess.run([str(REPO / "hack" / "cluster"), "up"], stdout=subprocess.PIPE, text=True, check=True)
    return next(line.split("=", 1)[1] for line in proc.stdout.splitlines() if line.startswith("export KUBECONFIG="))


if __name__ == "__main__":
    sys.exit(main())
