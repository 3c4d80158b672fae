"""Progress of the long admin commands: a counter on a terminal's stderr, nothing anywhere else.

The terminal is an io.StringIO whose isatty() says True; a plain StringIO is a pipe.
"""

from __future__ import annotations

import asyncio
import io
import os
import sys
from typing import Any

import pytest

from commands.cli import parse
from commands.errors import CommandError
from commands.plan import list_all
from commands.progress import ERASE_LINE, Progress
from commands.restore import Restorer
from resizer.podstate import applied_patch


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def screen(written: str) -> str:
    """What a terminal shows on the counter's line at the end: the text after the last erase."""
    return written.rsplit(ERASE_LINE, 1)[-1]


def test_a_terminal_sees_the_counter_redrawn_in_place_and_erased_at_the_end() -> None:
    terminal, clock = Terminal(), Clock()
    progress = Progress("restore", "pods", stream=terminal, clock=clock)
    progress.start(500)
    for done in (1, 120):
        clock.now += 1
        progress.update(done)
    assert screen(terminal.getvalue()) == "restore: 120/500 pods"
    assert "\n" not in terminal.getvalue()  # one line, rewritten
    progress.finish()
    assert terminal.getvalue().endswith(ERASE_LINE) and screen(terminal.getvalue()) == ""


def test_redraws_are_throttled_but_the_last_count_is_always_drawn() -> None:
    terminal, clock = Terminal(), Clock()
    progress = Progress("restore", "pods", stream=terminal, clock=clock)
    progress.start(1000)
    for done in range(1, 1001):
        progress.update(done)  # no time passes: only the final count is worth drawing
    assert terminal.getvalue().count(ERASE_LINE) == 2
    assert screen(terminal.getvalue()) == "restore: 1000/1000 pods"


def test_an_unknown_total_is_a_plain_count() -> None:
    terminal = Terminal()
    progress = Progress("plan", "pods read", stream=terminal)
    progress.start()
    progress.update(1500)
    progress.redraw()
    assert screen(terminal.getvalue()) == "plan: 1500 pods read"


@pytest.mark.parametrize(
    "stream, enabled", [(io.StringIO(), True), (Terminal(), False)], ids=["not a terminal", "-o json"]
)
def test_nothing_is_written_to_a_pipe_or_for_machine_output(stream: io.StringIO, enabled: bool) -> None:
    progress = Progress("plan", "pods read", stream=stream, enabled=enabled)
    progress.start(3)
    progress.advance(3)
    progress.clear()
    progress.redraw()
    progress.finish()
    assert stream.getvalue() == "" and not progress.shown


def test_a_closed_stream_is_not_a_terminal() -> None:
    stream = open(os.devnull, "w")  # noqa: SIM115
    stream.close()
    assert not Progress("restore", "pods", stream=stream).shown


def test_nothing_is_drawn_before_start_or_after_finish() -> None:
    terminal = Terminal()
    progress = Progress("restore", "pods", stream=terminal)
    progress.redraw()
    progress.start(2)
    progress.finish()
    progress.advance()
    progress.redraw()
    assert screen(terminal.getvalue()) == ""


def test_work_that_will_not_be_done_leaves_the_total() -> None:
    terminal = Terminal()
    progress = Progress("calibrate", "benchmark runs", stream=terminal)
    progress.start(10)
    progress.advance()
    progress.shrink(4)  # a node type failed its first run: its other four never run
    progress.redraw()
    assert screen(terminal.getvalue()) == "calibrate: 1/6 benchmark runs"


class PagedPods:
    """A client whose LIST answers in pages (continue tokens) and whose writes all succeed."""

    def __init__(self, pods: list[dict[str, Any]], page: int) -> None:
        self.pods, self.page = pods, page

    async def get(self, path: str, **query: Any) -> dict[str, Any]:
        start = int(query.get("continue") or 0)
        end = start + min(self.page, int(query["limit"]))
        return {
            "items": self.pods[start:end],
            "metadata": {"continue": str(end) if end < len(self.pods) else ""},
        }

    async def request(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {}


def managed_pod(index: int) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "shop",
            "name": f"web-{index}",
            "uid": str(index),
            "resourceVersion": "1",
            "annotations": {k: v for k, v in applied_patch("n4", "2026-01-01T00:00:00Z", "1").items() if v},
        },
        "spec": {"nodeName": "n4-a", "containers": [{"name": "app", "resources": {"requests": {"cpu": "800m"}}}]},
        "status": {"phase": "Running"},
    }


def test_list_all_counts_the_items_as_their_pages_arrive() -> None:
    terminal = Terminal()
    progress = Progress("plan", "pods read", stream=terminal)
    progress.start()
    client = PagedPods([managed_pod(i) for i in range(5)], page=2)
    items = asyncio.run(list_all(client, "/api/v1/pods", 2, on_page=progress.update))  # type: ignore[arg-type]
    assert len(items) == 5
    assert screen(terminal.getvalue()) == "plan: 0 pods read"  # the pages came within one redraw interval
    progress.redraw()
    assert screen(terminal.getvalue()) == "plan: 5 pods read"


@pytest.mark.parametrize("stderr_is_terminal", [True, False])
def test_restore_counts_pods_on_stderr_and_keeps_stdout_to_its_lines(stderr_is_terminal: bool) -> None:
    pods = [managed_pod(i) for i in range(3)]
    stdout, stderr = io.StringIO(), Terminal() if stderr_is_terminal else io.StringIO()
    restorer = Restorer(
        PagedPods(pods, page=2),  # type: ignore[arg-type]
        rate=1000.0,
        dry_run=True,
        out=stdout,
        progress=Progress("restore", "pods", stream=stderr),
    )
    summary = asyncio.run(restorer.run(page_size=2))
    assert summary.managed == 3
    lines = stdout.getvalue().splitlines()
    assert lines[0].startswith("3 pods carry") and [line.split(":")[0] for line in lines[1:]] == [
        "shop/web-0",
        "shop/web-1",
        "shop/web-2",
    ]
    assert "restore:" not in stdout.getvalue() and "\r" not in stdout.getvalue()
    if stderr_is_terminal:
        drawn = [part for part in stderr.getvalue().split(ERASE_LINE) if part]
        assert drawn[0] == "restore: 0/3 pods" and "restore: 3/3 pods" in drawn
        assert screen(stderr.getvalue()) == ""  # erased before the summary is printed
    else:
        assert stderr.getvalue() == ""


@pytest.mark.parametrize(
    "command, output, shown",
    [
        ("plan", "table", True),
        ("plan", "json", False),
        ("report", "table", True),
        ("report", "json", False),
        ("report", "html", False),
    ],
)
def test_plan_and_report_count_only_for_output_meant_for_a_person(
    monkeypatch: pytest.MonkeyPatch, command: str, output: str, shown: bool
) -> None:
    import commands.plan
    import commands.report

    module = commands.plan if command == "plan" else commands.report
    given: list[Progress] = []

    class NoClient:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        async def close(self) -> None:
            pass

    async def gather_forecast(*args: Any, progress: Progress, **kwargs: Any) -> Any:
        given.append(progress)
        raise CommandError("read nothing")

    monkeypatch.setattr(sys, "stderr", Terminal())
    monkeypatch.setattr(commands.plan, "load_credentials", lambda *args: None)
    monkeypatch.setattr(commands.plan, "KubeClient", NoClient)
    monkeypatch.setattr(module, "gather_forecast", gather_forecast)
    settings = parse([command, "-o", output])
    run = commands.plan.run_plan if command == "plan" else commands.report.run_report
    assert run(settings, out=io.StringIO()) == 2  # type: ignore[arg-type]
    assert [p.shown for p in given] == [shown]
