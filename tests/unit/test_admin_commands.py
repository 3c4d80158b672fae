"""`workload-resizer plan|restore` command lines (also `python -m commands plan|restore`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from commands.cli import main, parse
from reconciler import options
from reconciler.settings import PlanSettings, RestoreSettings


def test_plan_flags_mirror_the_reconcilers_and_build_the_same_scope() -> None:
    settings = parse(
        [
            "plan",
            "--namespace=wr",
            "--exclude-namespaces=a,b",
            "--namespace-selector=!skip",
            "--config-file=c.yaml",
            "-o",
            "json",
            "--no-realign",
        ]
    )
    assert settings.scope.excluded == {"kube-system", "wr", "a", "b"}
    assert (settings.config_file, settings.output, settings.realign) == ("c.yaml", "json", False)


def test_plan_plans_with_the_reconcilers_defaults() -> None:
    plan, reconciler = parse(["plan"]), options.parse([])
    assert isinstance(plan, PlanSettings)
    assert (plan.node_type_label, plan.config_namespace, plan.config_name, plan.realign) == (
        reconciler.controller.node_type_label,
        reconciler.config_namespace,
        reconciler.config_name,
        reconciler.controller.realign,
    )


def test_restore_is_rate_limited_by_default() -> None:
    settings = parse(["restore"])
    assert isinstance(settings, RestoreSettings)
    assert settings.max_resizes_per_second == 10.0 and not settings.dry_run


@pytest.mark.parametrize(
    "argv", [["plan", "--namespace-selector=a in ("], ["restore", "--max-resizes-per-second=0"], ["nope"]]
)
def test_bad_command_lines_fail_fast(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)


def test_python_m_reconciler_dispatches_the_commands() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "commands", "plan", "--help"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and "--config-file" in out.stdout


def test_restore_gives_the_pod_in_progress_at_most_the_shutdown_timeout_after_a_signal() -> None:
    import asyncio
    import time

    from commands.restore import Restorer, Summary, _bounded

    async def scenario(finishes_in: float) -> tuple[Summary, float]:
        restorer = Restorer(client=None, rate=1.0, dry_run=True, out=None)  # type: ignore[arg-type]

        async def work() -> Summary:
            await asyncio.sleep(finishes_in)
            return Summary(managed=7)

        asyncio.get_running_loop().call_later(0.05, restorer.stop.set)  # SIGTERM
        started = time.monotonic()
        summary = await _bounded(restorer, work(), grace=0.2)
        return summary, time.monotonic() - started

    stuck, took = asyncio.run(scenario(finishes_in=30))
    assert stuck.interrupted and took < 2, "cut off after the grace period"
    done, _ = asyncio.run(scenario(finishes_in=0.1))
    assert done.managed == 7 and not done.interrupted, "the pod in progress finishes within the grace"


@pytest.mark.parametrize("command", ["plan", "report", "restore", "calibrate"])
def test_an_unusable_kubeconfig_is_one_error_line_not_a_traceback(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\ncurrent-context: gone\n")
    assert main([command, f"--kubeconfig={kubeconfig}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot ") and err.endswith(": kubeconfig: no context named 'gone' in contexts\n")
    assert err.count("\n") == 1


def test_restore_fails_only_the_pod_it_cannot_read_again_after_a_conflict() -> None:
    import asyncio
    import io

    from commands.restore import Restorer, _Conflict
    from kube import ApiError

    class Unreadable:
        async def get(self, path: str) -> dict[str, Any]:
            raise ApiError(500, {"message": "etcdserver: request timed out"})

    restorer = Restorer(client=Unreadable(), rate=1.0, dry_run=False, out=io.StringIO())  # type: ignore[arg-type]

    async def conflicts(pod: dict[str, Any]) -> str | None:
        raise _Conflict()

    restorer._restore_once = conflicts  # type: ignore[method-assign]
    asyncio.run(restorer._restore({"metadata": {"namespace": "team", "name": "web", "uid": "u1"}}))
    assert restorer.summary.failed == {"team/web": "500 etcdserver: request timed out"}
