"""Run the webhook under uvicorn, programmatically, with a reloadable TLS context."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.util
import logging
import signal
from typing import Any, AsyncIterator

import uvicorn

from app.connections import ConnectionGuard, guarded_protocol
from app.metrics import Metrics
from app.server import create_app
from app.sizing import ClusterView, sizing_readiness, watch_cluster
from app.tls import CertReloader
from app.worker import ReviewWorkers
from kube import Credentials, KubeClient
from ops.jsonlog import flush_logging
from ops.keys import KeyDirectory
from ops.malloc import bound_heap_retention
from resizer import KeyRing, KeyRingError
from resizer.scope import NamespaceScope

log = logging.getLogger("workload_resizer.webhook")


def reloaded_keyring(keys: KeyDirectory, current: KeyRing) -> KeyRing:
    """The key ring after re-reading ``keys``: ``current`` when nothing changed or the new keys are
    unusable (a bad key must not stop the reload loop, or a retired key signs until a restart)."""
    if not keys.poll():
        return current
    try:
        return KeyRing(keys.keys)
    except KeyRingError as err:
        log.error("originals keys unusable; keeping the last good ones", extra={"error": str(err)})
        return current


def build_server(
    args: argparse.Namespace, scope: NamespaceScope | None, sizing: Credentials | None
) -> "DrainingServer":
    """A loaded ``uvicorn.Server`` whose ``config.ssl`` is the reloader's live context."""
    metrics = Metrics()
    reloader = CertReloader(
        args.tls_cert_file, args.tls_key_file, args.tls_min_version, args.cert_reload_interval, metrics
    )
    reloader.poll()  # first load; on failure we still start, not ready, and keep polling
    if not reloader.loaded:
        log.error(
            "no usable serving certificate yet; not ready until one is loaded",
            extra={"cert_file": args.tls_cert_file, "key_file": args.tls_key_file},
        )

    # Fails fast on a bad directory (on an empty one too, unless optional).
    keys = KeyDirectory(args.originals_key_dir, args.originals_keys_optional) if args.originals_key_dir else None
    if keys is None:
        log.warning("no --originals-key-dir: original-* annotations are stamped unsigned")

    async def poll_keys() -> None:
        assert keys is not None
        while True:
            await asyncio.sleep(max(args.cert_reload_interval, 1.0))
            app.keyring = reloaded_keyring(keys, app.keyring)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        reloader.start()
        if args.large_review_workers > 0:  # before serving: a worker that cannot start fails startup
            workers = ReviewWorkers(
                args.large_review_workers,
                args.large_review_timeout,
                restarts=lambda reason: metrics.worker_restarts.labels(reason).inc(),
            )
            await workers.start()
            app.review_workers = workers
        loop = asyncio.get_running_loop()
        key_task = loop.create_task(poll_keys()) if keys is not None else None
        client, view_task = None, None
        if sizing is not None:
            client = KubeClient(sizing, qps=20.0, burst=40, max_connections=4, drop_managed_fields=True)
            app.cluster = ClusterView(
                client,
                args.config_namespace,
                args.config_name,
                args.node_type_label,
                args.dry_run,
                skip_vpa_managed=args.skip_vpa_managed,
            )
            view_task = loop.create_task(watch_cluster(app.cluster))
        log.info(
            "webhook started",
            extra={
                "address": args.bind_address,
                "port": args.port,
                "tls_min_version": args.tls_min_version,
                "cert_reload_interval_s": args.cert_reload_interval,
                "max_request_bytes": args.max_request_bytes,
                "large_review_workers": args.large_review_workers,
                "max_connections": args.max_connections,
                "http_read_timeout_s": args.http_read_timeout,
                "size_at_admission": sizing is not None,
                "dry_run": sizing is not None and args.dry_run,
                "skip_vpa_managed": sizing is not None and args.skip_vpa_managed,
            },
        )
        try:
            yield
        finally:
            if key_task is not None:
                key_task.cancel()
            if view_task is not None:
                view_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await view_task
            if client is not None:
                await client.close()
            if app.review_workers is not None:  # in-flight reviews have finished (uvicorn drained)
                await app.review_workers.stop()
            await reloader.stop()
            reloader.close()
            log.info("webhook stopped")

    app = create_app(
        metrics,
        lambda: reloader.loaded,
        args.max_request_bytes,
        lifespan,
        args.max_inflight_reviews,
        scope,
        sizing_readiness(lambda: app.cluster, args.sizing_ready_timeout) if sizing is not None else None,
    )
    if keys is not None:
        app.keyring = KeyRing(keys.keys)
    config = uvicorn.Config(
        app,
        host=args.bind_address,
        port=args.port,
        # uvloop + httptools when installed (they roughly double throughput), else pure asyncio + h11.
        loop="uvloop" if importlib.util.find_spec("uvloop") else "asyncio",
        http="httptools" if importlib.util.find_spec("httptools") else "h11",
        ws="none",
        lifespan="on",
        interface="asgi3",
        log_config=None,  # logging is ops.jsonlog's, configured by the caller
        access_log=False,  # one decision line per review instead (app.server)
        server_header=False,
        # uvicorn annotates these as int but uses them as asyncio delays: fractions of a second work.
        timeout_keep_alive=args.http_keep_alive_timeout,
        timeout_graceful_shutdown=args.shutdown_timeout,
        ssl_context_factory=lambda _config, _default: reloader.context,
        proxy_headers=False,
    )
    config.load()
    # Each connection: uvicorn's protocol, unmodified, behind the read deadline and the cap.
    config.http_protocol_class = guarded_protocol(
        config.http_protocol_class, ConnectionGuard(args.max_connections, args.http_read_timeout, metrics)
    )
    if config.ssl is not reloader.context:  # reloads must go into the context uvicorn serves with
        raise RuntimeError("uvicorn did not take the reloadable SSLContext")
    return DrainingServer(config, app, args.shutdown_delay)


class DrainingServer(uvicorn.Server):
    """On the first SIGTERM/SIGINT: /readyz fails and every answer closes its connection while
    serving goes on for ``shutdown_delay`` (endpoints and the apiserver move to other replicas),
    then uvicorn's graceful shutdown (--shutdown-timeout). A second signal stops at once."""

    def __init__(self, config: uvicorn.Config, app: Any, shutdown_delay: float) -> None:
        super().__init__(config)
        self.mutate_app = app
        self.shutdown_delay = shutdown_delay

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self.mutate_app.draining or self.shutdown_delay <= 0 or not self.started:
            super().handle_exit(sig, frame)
            return
        self.mutate_app.draining = True
        log.info("draining: not ready, still serving", extra={"shutdown_delay_s": self.shutdown_delay})
        loop = asyncio.get_event_loop()
        loop.call_soon_threadsafe(loop.call_later, self.shutdown_delay, self._stop_serving)

    def _stop_serving(self) -> None:
        log.info("drain delay over; stopping (in-flight requests finish)")
        self.should_exit = True


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def run(args: argparse.Namespace, scope: NamespaceScope | None, sizing: Credentials | None) -> int:
    """Serve as the flags say; ``sizing``: the credentials sizing at admission watches with (None: stamp only)."""
    # Freed request bodies go back to the OS instead of fragmenting the heap (RSS bound).
    if not bound_heap_retention():
        log.debug("not glibc: malloc thresholds left as they are")
    server = build_server(args, scope, sizing)
    # uvicorn re-raises SIGTERM after its shutdown, with the previous handler restored: Python's
    # default would kill the process before atexit flushes the batched log lines.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    # What is allocated so far (FastAPI, pydantic, uvicorn) lives as long as the process: out of
    # the cyclic GC's sight, a full collection scans thousands of objects, not tens of thousands.
    gc.collect()
    gc.freeze()
    try:
        server.run()
    finally:
        workers = server.mutate_app.review_workers
        if workers is not None:  # lifespan shutdown did not run (e.g. a second signal)
            workers.kill_all()
        flush_logging()
    return 0 if server.started else 1
