"""The sizing config from its ConfigMap: watched, polled, validated, last good kept.

A missing or invalid ConfigMap never crashes the reconciler and is never used: the last valid config
stays in force, the validation error is logged with its field path, a Warning Event `InvalidConfig`
is recorded on the ConfigMap, and the `workload_resizer_config_valid` metric and /readyz say so.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from typing import Any

from kube import ApiError, KubeClient
from kube.events import EventRecorder, object_reference
from kube.informer import object_informer
from reconciler import metrics
from reconciler.reasons import EventType, Reason
from reconciler.settings import CONFIG_KEY
from resizer import CompiledConfig, ConfigError, load_config
from resizer.config import config_text

log = logging.getLogger("reconciler.config")


class ConfigSource:
    def __init__(
        self,
        client: KubeClient,
        recorder: EventRecorder,
        namespace: str,
        name: str,
        refresh_interval: float,
        on_change: Callable[[], None],
        idle_timeout: float = 90.0,
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.config: CompiledConfig | None = None  # the config in force (last good)
        self.generation = 0  # bumped whenever a new config takes force
        self.valid = False  # whether the latest content is valid
        self.error: str | None = None
        self._client = client
        self._recorder = recorder
        self._refresh = refresh_interval
        self._on_change = on_change
        self._last_digest: str | None = None
        self._good_digest: str | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self.informer = object_informer(client, "configmaps", namespace, name, self._on_event, idle_timeout)

    async def run(self) -> None:
        try:
            await asyncio.gather(self.informer.run(), self._poll())
        finally:  # config applications still in flight end with the source
            for task in self._pending:
                task.cancel()
            await asyncio.gather(*self._pending, return_exceptions=True)

    async def wait_first_read(self) -> None:
        """Until the ConfigMap's first list has been applied (or found nothing): a worker that
        started before would find no config and put each pod off for a retry."""
        await self.informer.synced.wait()
        await asyncio.gather(*self._pending, return_exceptions=True)

    async def _poll(self) -> None:
        while True:
            await asyncio.sleep(self._refresh)
            try:
                cm = await self._client.get(f"/api/v1/namespaces/{self.namespace}/configmaps/{self.name}")
            except ApiError as err:
                if err.status == 404:
                    await self.apply(None)
                else:
                    log.warning("config poll failed", extra={"error": str(err)})
            except OSError as err:
                log.warning("config poll failed", extra={"error": repr(err)})
            else:
                await self._apply_safely(cm)

    async def _apply_safely(self, configmap: dict[str, Any] | None) -> None:
        """apply(), but whatever the apiserver sent, the config source keeps running."""
        try:
            await self.apply(configmap)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            log.error("config update failed; keeping the config in force", extra={"error": repr(err)})

    def _on_event(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
        task = asyncio.get_running_loop().create_task(self._apply_safely(None if kind == "DELETED" else obj))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def apply(self, configmap: dict[str, Any] | None) -> None:
        text = config_text(configmap)
        digest = "missing" if configmap is None else hashlib.sha256((text or "").encode()).hexdigest()
        if digest == self._last_digest:
            return
        self._last_digest = digest
        if configmap is None or text is None:
            where = f"ConfigMap {self.namespace}/{self.name}"
            problem = f"{where} not found" if configmap is None else f"{where} has no key {CONFIG_KEY}"
            await self._reject(configmap, problem, [("(root)", problem)])
            return
        try:
            config = load_config(text)
        except ConfigError as err:
            await self._reject(configmap, str(err), err.errors)
            return
        self.valid, self.error = True, None
        metrics.CONFIG_VALID.set(1)
        if digest == self._good_digest:
            return
        self.config, self._good_digest = config, digest
        self.generation += 1
        metrics.CONFIG_LOADED.set(1)
        metrics.CONFIG_RELOADS.inc()
        log.info(
            "config loaded",
            extra={
                "configmap": f"{self.namespace}/{self.name}",
                "resourceVersion": configmap["metadata"].get("resourceVersion"),
                "baselineNodeType": config.baseline_node_type,
                "nodeTypes": sorted(config.node_types),
            },
        )
        self._on_change()

    async def _reject(self, configmap: dict[str, Any] | None, problem: str, errors: list[tuple[str, str]]) -> None:
        self.valid, self.error = False, problem
        metrics.CONFIG_VALID.set(0)
        metrics.CONFIG_ERRORS.inc()
        keeping = "keeping the last good config" if self.config is not None else "no valid config yet"
        log.error(
            "invalid config, %s",
            keeping,
            extra={
                "configmap": f"{self.namespace}/{self.name}",
                "errors": [{"field": path, "error": message} for path, message in errors],
            },
        )
        if configmap is not None:
            ref = object_reference(configmap, "ConfigMap")
            await self._recorder.emit(ref, EventType.WARNING, Reason.INVALID_CONFIG, f"{problem}; {keeping}")
