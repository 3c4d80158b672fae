"""reconciler.config_source.ConfigSource: the first read that workers wait for (fake client)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from reconciler.config_source import ConfigSource

pytestmark = pytest.mark.timeout(10)

CONFIG = """\
baselineNodeType: n2d
nodeTypes:
  n2d: {cpuPerf: 1.0, memPerf: 1.0}
bounds:
  cpu: {min: 50m, max: "16"}
  memory: {min: 64Mi, max: 32Gi}
"""


class SlowList:
    """Serves one list page after `delay`; its watch never ends."""

    def __init__(self, items: list[dict[str, Any]], delay: float = 0.05) -> None:
        self.items, self.delay = items, delay

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        await asyncio.sleep(self.delay)
        return {"items": self.items, "metadata": {"resourceVersion": "7"}}

    async def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[dict[str, Any]]:
        await asyncio.Event().wait()
        yield {}


class Recorder:
    def __init__(self) -> None:
        self.emitted: list[tuple[Any, ...]] = []

    async def emit(self, *args: Any) -> None:
        self.emitted.append(args)


def _configmap(text: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "cfg", "namespace": "ns", "resourceVersion": "5", "uid": "u"},
        "data": {"config.yaml": text},
    }


async def _first_read(items: list[dict[str, Any]]) -> tuple[ConfigSource, list[str]]:
    changes: list[str] = []
    source = ConfigSource(
        SlowList(items),  # type: ignore[arg-type]
        Recorder(),  # type: ignore[arg-type]
        "ns",
        "cfg",
        refresh_interval=3600,
        on_change=lambda: changes.append("changed"),
    )
    running = asyncio.create_task(source.run())
    try:
        await asyncio.wait_for(source.wait_first_read(), 5)
        return source, changes
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


def test_the_first_read_ends_with_the_config_in_force():
    source, changes = asyncio.run(_first_read([_configmap(CONFIG)]))
    assert source.config is not None and source.config.baseline_node_type == "n2d"
    assert source.valid and changes == ["changed"]


def test_the_first_read_of_an_invalid_config_ends_with_none_in_force():
    source, changes = asyncio.run(_first_read([_configmap("baselineNodeType: [")]))
    assert source.config is None and not source.valid and source.error
    assert changes == []


def test_the_first_read_of_no_configmap_ends_too():
    source, changes = asyncio.run(_first_read([]))
    assert source.config is None and changes == []
