"""Wiring: credentials, caches, leader election, workers, probes, shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import signal
import socket
import sys
from typing import Any

from kube import KubeClient, load_credentials
from kube.events import EventRecorder
from kube.leader import FencedClient, LeaderElector, LeadershipLost
from kube.workqueue import WorkQueue
from ops.jsonlog import configure_logging
from ops.keys import KeyDirectory, KeyDirectoryError
from ops.probes import Check
from reconciler import http, metrics
from reconciler.config_source import ConfigSource
from reconciler.freed import FreedRequests
from reconciler.manager import Manager
from reconciler.namespaces import ScopedNamespaces
from reconciler.originals_keys import KeySecretError, SecretKeys, UnknownKeyWatch
from reconciler.ports import FaultHook, no_fault
from reconciler.settings import ReconcilerSettings
from resizer import EMPTY_KEYRING, KeyRing, KeyRingError

log = logging.getLogger("reconciler")

# Test-only fault hook: SIGKILL ourselves right after the named write step
# (originals, resize, applied). Read here, once; the reconciler gets it injected.
CRASH_AFTER_ENV = "WORKLOAD_RESIZER_TEST_CRASH_AFTER"


def crash_hook(step_name: str | None) -> FaultHook:
    if not step_name:
        return no_fault

    def crash_after(step: str) -> None:
        if step == step_name:
            log.warning("test fault hook: crashing", extra={"after": step})
            os.kill(os.getpid(), signal.SIGKILL)

    return crash_after


class Reconciler:
    def __init__(self, settings: ReconcilerSettings, keys: KeyDirectory | None = None) -> None:
        self.settings = settings
        self.keys = keys
        self.keyring = KeyRing(keys.keys) if keys is not None else EMPTY_KEYRING
        api, election = settings.api, settings.leader_election
        creds = load_credentials(api.kubeconfig)
        self.client = KubeClient(
            creds, qps=api.qps, burst=api.burst, max_connections=settings.concurrency + 8, drop_managed_fields=True
        )
        secret = settings.originals_keys_secret
        self.secret_keys = SecretKeys(self.client, *secret.split("/", 1)) if secret else None
        if keys is None and self.secret_keys is None:
            log.warning(
                "no --originals-key-dir or --originals-keys-secret: original-* annotations cannot be "
                "verified; only pods whose spec never changed are resized"
            )
        self.unknown_keys = UnknownKeyWatch()
        # The lease gets its own connections, outside the workers' rate limit and pool: a
        # renewal must never queue behind a burst of resizes.
        self.lease_client: KubeClient | None = None
        self.elector: LeaderElector | None = None
        if election.enabled:
            self.lease_client = KubeClient(creds, qps=0, burst=1, max_connections=2)
            self.elector = LeaderElector(
                self.lease_client,
                election.namespace,
                election.name,
                election.identity,
                election.lease_duration,
                election.renew_deadline,
                election.retry_period,
            )
        # Workers and events write through the fence: nothing is sent once the lease may be lost.
        writer: Any = FencedClient(self.client, self.elector.may_write) if self.elector else self.client
        self.recorder = EventRecorder(writer)
        self.queue = WorkQueue("pod-resizer")
        self.config = ConfigSource(
            self.client,
            self.recorder,
            settings.config_namespace,
            settings.config_name,
            settings.config_refresh_interval,
            on_change=lambda: self.manager.on_config_change(),
            idle_timeout=api.watch_idle_timeout,
        )
        # The namespace scope; a namespace whose labels change re-evaluates every cached pod.
        self.namespaces = ScopedNamespaces(
            self.client, settings.scope, lambda _: self.manager.on_config_change(), api.watch_idle_timeout
        )
        self.manager = Manager(
            writer,
            self.recorder,
            self.config,
            self.queue,
            settings.controller,
            idle_timeout=api.watch_idle_timeout,
            fault=crash_hook(os.environ.get(CRASH_AFTER_ENV)),
            pod_filters=(self.namespaces.includes,),
            keyring=lambda: self.keyring,
            preflight=settings.preflight,
            recheck_interval=settings.config_refresh_interval,
        )
        # What was freed (the workload_resizer_managed_* gauges), from the caches when scraped.
        freed = FreedRequests(
            pods=lambda: (pod for pod in self.manager.pods.store.values() if self.namespaces.includes(pod)),
            nodes=lambda: self.manager.nodes.store.values(),
            config=lambda: self.config.config,
            keyring=lambda: self.keyring,
            node_type_label=settings.controller.node_type_label,
            resize_restart_containers=settings.controller.resize_restart_containers,
        )
        metrics.freed_source[:] = [freed.totals]
        self.stop = asyncio.Event()
        self.active = False
        # --originals-keys-secret: not ready before the Secret is read (or created), standby included.
        self.keys_loaded = self.secret_keys is None

    async def _load_secret_keys(self) -> bool:
        """--originals-keys-secret: read the Secret (created when absent) before any work."""
        if self.secret_keys is None:
            return True
        try:
            await self.secret_keys.ensure()
        except KeySecretError as err:
            log.error("originals keys unusable; exiting", extra={"error": str(err)})
            return False
        self.keyring = KeyRing(self.secret_keys.keys)
        self.keys_loaded = True
        log.info(
            "originals keys loaded", extra={"secret": self.secret_keys.where, "keyIds": sorted(self.secret_keys.keys)}
        )
        return True

    async def _poll_keys(self) -> None:
        """Re-read the keys every --config-refresh-interval (a rotation re-signs the pods signed with
        older keys), and count the pods signed with a key that is not there."""
        await self.manager.wait_synced()
        while True:
            try:
                if self.keys is not None and self.keys.poll():
                    self.keyring = KeyRing(self.keys.keys)
                    self.manager.on_keys_change()
                if self.secret_keys is not None and await self.secret_keys.poll():
                    self.keyring = KeyRing(self.secret_keys.keys)
                    self.manager.on_keys_change()
            except KeyRingError as err:
                log.error("originals keys unusable; keeping the last good ones", extra={"error": str(err)})
            if self.keys is not None or self.secret_keys is not None:
                self.unknown_keys.update(
                    (pod for pod in self.manager.pods.store.values() if self.namespaces.includes(pod)), self.keyring
                )
            await asyncio.sleep(self.settings.config_refresh_interval)

    # ---- probes

    def checks(self) -> dict[str, Check]:
        def config() -> tuple[bool, str]:
            if not self.active:
                return True, "standby (not leader)"
            if self.config.config is None:
                return False, f"no valid config: {self.config.error or 'not loaded yet'}"
            if not self.config.valid:
                return True, f"latest config invalid, using last good: {self.config.error}"
            return True, "valid"

        def caches() -> tuple[bool, str]:
            if not self.active:
                return True, "standby (not leader)"
            synced = self.manager.synced
            return synced, "synced" if synced else "syncing"

        def keys() -> tuple[bool, str]:
            if self.keys_loaded:
                return True, "loaded"
            where = self.secret_keys.where if self.secret_keys is not None else "?"
            return False, f"reading the originals keys ({where})"

        return {"keys": keys, "config": config, "caches": caches}

    # ---- main loop

    async def run(self) -> int:
        try:
            listeners = self._listen()
        except OSError as err:
            log.error("cannot listen for metrics/health probes; exiting", extra={"error": str(err)})
            return 1
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        servers = self._start_http(listeners)
        code = 0
        try:
            code = await self._lead_and_work() if await self._load_secret_keys() else 2
        finally:
            await self._stop_http(servers)
            await self.client.close()
            if self.lease_client is not None:
                await self.lease_client.close()
        return code

    async def _lead_and_work(self) -> int:
        if self.elector is not None:
            acquired = asyncio.create_task(self.elector.acquire())
            stopped = asyncio.create_task(self.stop.wait())
            await asyncio.wait({acquired, stopped}, return_when=asyncio.FIRST_COMPLETED)
            became_leader = acquired.done()
            for task in (acquired, stopped):
                task.cancel()
            await asyncio.gather(acquired, stopped, return_exceptions=True)
            if not became_leader:
                log.info("stopped before becoming leader")
                return 0
            error = acquired.exception() if not acquired.cancelled() else None
            if error is not None or not self.elector.is_leader:  # never work without the lease
                log.error("leader election failed; not starting work", extra={"error": repr(error)})
                return 1
        self.active = True
        background = [
            asyncio.create_task(c, name=n)
            for n, c in (
                ("config", self.config.run()),
                ("keys", self._poll_keys()),
                *((informer.resource, informer.run()) for informer in self.manager.informers),
            )
        ]
        if self.namespaces.informer is not None:
            background.append(asyncio.create_task(self.namespaces.informer.run(), name="namespaces"))
        if self.manager.vpa is not None:
            background.append(asyncio.create_task(self.manager.vpa.run(), name="vpa"))
        if self.elector is not None:
            background.append(asyncio.create_task(self.elector.hold(), name="lease"))
        workers: list[asyncio.Task[None]] = []
        stopped = asyncio.create_task(self.stop.wait())
        try:
            synced = asyncio.create_task(self._wait_synced())
            done, _ = await asyncio.wait({stopped, synced, *background}, return_when=asyncio.FIRST_COMPLETED)
            if synced in done:
                log.info("caches synced; starting workers", extra={"workers": self.settings.concurrency})
                metrics.MAX_WORKERS.labels(metrics.CONTROLLER).set(self.settings.concurrency)
                workers = [
                    asyncio.create_task(self.manager.worker(), name=f"worker-{i}")
                    for i in range(self.settings.concurrency)
                ]
                # A worker only ends by crashing: that must stop the process, not go unnoticed.
                done, _ = await asyncio.wait({stopped, *background, *workers}, return_when=asyncio.FIRST_COMPLETED)
            synced.cancel()
            await asyncio.gather(synced, return_exceptions=True)
            return self._exit_code(done, stopped)
        finally:
            await self._shutdown(workers, background, stopped)

    def _exit_code(self, done: set[asyncio.Task[Any]], stopped: asyncio.Task[Any]) -> int:
        if stopped in done:
            log.info("shutting down (signal)")
            return 0
        for task in done:
            err = task.exception() if not task.cancelled() else None
            if isinstance(err, LeadershipLost):
                log.error("leadership lost; stopping all work", extra={"error": str(err)})
            else:
                log.error("background task ended unexpectedly", extra={"task": task.get_name(), "error": repr(err)})
        return 1

    async def _wait_synced(self) -> None:
        if self.namespaces.informer is not None:
            await self.namespaces.informer.synced.wait()
        await self.manager.wait_synced()
        await self.config.wait_first_read()

    async def _shutdown(
        self, workers: list[asyncio.Task[None]], background: list[asyncio.Task[Any]], stopped: asyncio.Task[Any]
    ) -> None:
        await self.queue.shutdown()
        if self.elector is not None and not self.elector.may_write():
            # Leadership lost (or about to be): in-flight requests are cancelled, not awaited.
            for task in workers:
                task.cancel()
        if workers:
            _, pending = await asyncio.wait(workers, timeout=self.settings.shutdown_timeout)
            for task in pending:
                task.cancel()
        for task in [*background, stopped]:
            task.cancel()
        await asyncio.gather(*background, stopped, return_exceptions=True)
        if self.elector is not None:
            await self.elector.release()
        self.active = False

    def _listen(self) -> dict[str, socket.socket]:
        """Bind every metrics/probe address now: a port already taken is a startup error, not a
        reconciler running without health or metrics endpoints."""
        addresses = {self.settings.metrics_bind_address, self.settings.health_probe_bind_address} - {"0"}
        listeners: dict[str, socket.socket] = {}
        try:
            for address in sorted(addresses):
                listeners[address] = http.bind(address)
        except OSError:
            for sock in listeners.values():
                sock.close()
            raise
        return listeners

    def _start_http(self, listeners: dict[str, socket.socket]) -> dict[asyncio.Task[None], Any]:
        app = http.ProbeApp(self.checks())
        servers = {}
        for address, sock in listeners.items():
            server = http.ProbeServer(app, address)
            servers[asyncio.create_task(server.serve(sockets=[sock]), name=f"http {address}")] = server
        return servers

    @staticmethod
    async def _stop_http(servers: dict[asyncio.Task[None], Any]) -> None:
        for server in servers.values():
            server.stop()
        if servers:
            _, pending = await asyncio.wait(servers, timeout=5)
            for task in pending:
                task.cancel()
            await asyncio.gather(*servers, return_exceptions=True)


def main(settings: ReconcilerSettings) -> int:
    configure_logging(settings.log_level, settings.log_format)
    try:
        keys = KeyDirectory(settings.originals_key_dir) if settings.originals_key_dir else None
        if keys is not None:
            KeyRing(keys.keys)
    except (KeyDirectoryError, KeyRingError) as err:
        print(f"error: --originals-key-dir: {err}", file=sys.stderr)
        return 2
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    try:
        import uvloop

        runner: Any = uvloop.run
    except ImportError:
        runner = asyncio.run

    async def _run() -> int:
        return await Reconciler(settings, keys).run()

    # The modules loaded so far live as long as the process: out of the cyclic GC's sight, each
    # full collection while pods stream in scans the cache and the passes, not the code.
    gc.freeze()
    with contextlib.suppress(KeyboardInterrupt):
        code: int = runner(_run())
        return code
    return 130
