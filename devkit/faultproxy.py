"""A fault-injecting HTTP proxy in front of the apiserver, for one client under test.

    proxy = FaultProxy(cluster.kube)          # plain HTTP on 127.0.0.1:<free port>
    kubeconfig = proxy.kubeconfig(token)      # the client talks to the proxy with this token
    proxy.fault = "hang"                      # lease requests never answer
    proxy.fault = "html503"                   # lease requests get an HTML 503 page
    proxy.hold_resizes = True                 # PATCHes to pods/<name>/resize are read, then held
    proxy.held                                # paths of the requests held so far
    proxy.release()                           # forward the held requests (and stop holding)
    proxy.writes                              # every non-GET request: (arrival time, method, path, status)

Requests (watches included, streamed) are forwarded to the real apiserver with the
client's own Authorization header, so the apiserver's RBAC and admission judge them; the
proxy only records what arrives and, for lease requests, injects the fault. A held resize
is a write already on the wire: its bytes were sent, the apiserver sees them only on
release(), even after the client gave up or exited. Times are time.monotonic() of this
process, comparable with the test's own clock.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from devkit.processes import free_port
from devkit.tempdirs import temporary_directory

HTML_503 = b"<html><head><title>503 Service Unavailable</title></head><body>upstream unavailable</body></html>"
_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "content-encoding"}


class FaultProxy:
    def __init__(self, kube: Any) -> None:
        self.upstream = kube.server
        self.tls = kube.tls
        self.port = free_port()
        self.fault: str | None = None
        self.writes: list[tuple[float, str, str, int]] = []
        self.lease_renewals: list[tuple[float, int]] = []  # (start, status) of lease PUT/POST
        self.hold_resizes = False
        self.held: list[str] = []
        self._released: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: uvicorn.Server | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not (self._server and self._server.started):
            if time.monotonic() > deadline:
                raise AssertionError("fault proxy did not start")
            time.sleep(0.05)

    def kubeconfig(self, token: str) -> str:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "proxy", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "proxy", "user": "u"}}],
            "current-context": "c",
        }
        path = temporary_directory("proxy-kubeconfig-") / "kubeconfig"
        path.write_text(json.dumps(config))
        return str(path)

    def release(self) -> None:
        """Forward every held resize and hold no more."""
        self.hold_resizes = False
        assert self._loop is not None and self._released is not None
        self._loop.call_soon_threadsafe(self._released.set)

    def close(self) -> None:
        if self._server is not None:
            # force_exit: a request held by the "hang" fault never ends, and a graceful
            # shutdown would wait for it, leaving this thread's loop running after the test.
            self._server.should_exit = self._server.force_exit = True
        self._thread.join(10)
        if self._thread.is_alive():
            raise AssertionError("fault proxy did not stop")

    # ---------------------------------------------------------------- serving

    def _run(self) -> None:
        app = Starlette(
            routes=[Route("/{path:path}", self._forward, methods=["GET", "POST", "PUT", "PATCH", "DELETE"])]
        )
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_config=None, access_log=False, lifespan="off"
        )
        self._server = uvicorn.Server(config)
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop, self._released = asyncio.get_running_loop(), asyncio.Event()
        self._client = httpx.AsyncClient(base_url=self.upstream, verify=self.tls, timeout=httpx.Timeout(30, read=None))
        assert self._server is not None
        try:
            await self._server.serve()
        finally:
            await self._client.aclose()

    async def _forward(self, request: Request) -> Response:
        arrived = time.monotonic()
        path = request.url.path
        lease = "/leases" in path
        if lease and self.fault == "hang":
            await asyncio.Event().wait()
        if lease and self.fault == "html503":
            return Response(HTML_503, status_code=503, media_type="text/html")
        body = await request.body()
        if self.hold_resizes and request.method == "PATCH" and path.endswith("/resize"):
            assert self._released is not None
            self.held.append(path)
            await self._released.wait()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        upstream = self._client.build_request(
            request.method, path, params=request.url.query or None, content=body or None, headers=headers
        )
        resp = await self._client.send(upstream, stream=True)
        if request.method != "GET":
            self.writes.append((arrived, request.method, path, resp.status_code))
            if lease and request.method in ("PUT", "POST"):
                self.lease_renewals.append((arrived, resp.status_code))
        out_headers = {k: v for k, v in resp.headers.items() if k.lower() not in _HOP}

        async def stream() -> Any:
            try:
                async for chunk in resp.aiter_bytes():
                    yield chunk
            finally:
                await resp.aclose()

        return StreamingResponse(stream(), status_code=resp.status_code, headers=out_headers)
