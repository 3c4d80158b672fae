"""Resources the apiserver may or may not serve (a CRD installed or removed at any time): whether
it serves one now (discovery), and informers that run only while it does.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kube.client import ApiError, KubeClient
from kube.errors import KubeError
from kube.informer import Handler, Informer
from kube.slim import Obj

FIRST_RETRY = 2.0  # seconds between discoveries until one answers


async def serves(client: KubeClient, group_version_path: str, resource: str) -> bool:
    """Whether the discovery document at ``group_version_path`` lists ``resource`` (a group version
    not served at all answers 404: False). Any other failure raises."""
    try:
        return served_in(await client.get(group_version_path), resource)
    except ApiError as err:
        if err.status == 404:
            return False
        raise


def served_in(discovery: Mapping[str, Any], resource: str) -> bool:
    resources = discovery.get("resources")
    return isinstance(resources, list) and any(isinstance(r, Mapping) and r.get("name") == resource for r in resources)


@dataclass(eq=False)
class ServedInformers:
    """An informer of ``resource`` (and those ``others()`` makes), running only while the apiserver
    serves it, by discovery every ``recheck_interval`` (``FIRST_RETRY`` until it first answers).
    Each change of :attr:`served` is logged (``found``, ``gone``), then passed on as
    ``on_served_change(was)``; a failed discovery is logged and the last answer stands.
    ``crashed``: what to log should an informer ever end by an error."""

    client: KubeClient
    group_version_path: str
    resource: str
    slim: Callable[[Obj], Obj]
    handler: Handler
    on_served_change: Callable[[bool | None], None]
    log: logging.Logger
    kind: str  # of the resource, as its log lines name it
    found: str
    gone: str
    crashed: str | None = None
    others: Callable[[], list[Informer]] = list
    recheck_interval: float = 30.0
    idle_timeout: float = 90.0
    served: bool | None = field(default=None, init=False)  # None: discovery has not answered yet
    answered: asyncio.Event = field(default_factory=asyncio.Event, init=False)  # discovery answered once
    informers: list[Informer] = field(default_factory=list, init=False)  # the resource's first
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, init=False)

    @property
    def informer(self) -> Informer | None:
        return self.informers[0] if self.informers else None

    @property
    def synced(self) -> bool:
        """Discovery answered and, where the resource is served, every informer holds a full list."""
        return self.served is False or (self.served is True and all(i.synced.is_set() for i in self.informers))

    async def wait_synced(self) -> None:
        await self.answered.wait()
        for informer in self.informers:
            await informer.synced.wait()

    async def run(self) -> None:
        """Discover until cancelled; the informers stop with it and the answer is forgotten."""
        try:
            while True:
                await self.check()
                await asyncio.sleep(self.recheck_interval if self.answered.is_set() else FIRST_RETRY)
        finally:
            await self._stop()
            self.served = None

    async def check(self) -> None:
        """Discovery again: start or stop the informers if the resource came or went."""
        try:
            served = await serves(self.client, self.group_version_path, self.resource)
        except KubeError as err:
            self.log.warning(
                "cannot tell whether %ss are served; keeping the last answer",
                self.kind,
                extra={"error": str(err) or repr(err), "served": self.served},
            )
            return
        was, self.served = self.served, served
        if served != was:
            if served:
                self.log.info(self.found)
            elif was:
                self.log.info(self.gone)
            await self._stop()
            if served:
                self._start()
            self.on_served_change(was)
        self.answered.set()  # (once the informers of the answer exist: wait_synced waits for them)

    def _start(self) -> None:
        path = f"{self.group_version_path}/{self.resource}"
        own = Informer(self.client, self.resource, path, self.slim, self.handler, idle_timeout=self.idle_timeout)
        self.informers = [own, *self.others()]
        self._tasks = [asyncio.create_task(i.run(), name=f"served {i.resource}") for i in self.informers]
        for task in self._tasks:
            task.add_done_callback(self._log_crash)

    async def _stop(self) -> None:
        tasks, self._tasks, self.informers = self._tasks, [], []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _log_crash(self, task: asyncio.Task[None]) -> None:
        if self.crashed is not None and not task.cancelled() and task.exception() is not None:
            self.log.error(self.crashed, extra={"task": task.get_name(), "error": repr(task.exception())})
