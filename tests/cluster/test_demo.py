"""`make demo` (hack/demo.py) runs the programs as the chart does, and the admin commands it
prints at the end work against it as printed.

The demo runs in its own cluster (`.cluster-demo`, $WR_DEMO_CLUSTER_DIR), never the tests'
one: its webhook is registered for every namespace. A demo already running there is run
again (the demo is idempotent) and left running; one this test started is stopped.

As the chart runs them: the webhook sizes at admission, so the DaemonSet's pods (each pinned
to its node) are created at their size; the originals keys are the Secret the reconciler
creates, which `workload-resizer plan|report` read by default, so no pod is held back as
OriginalsUnverified and the report shows what was freed.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.cluster import REPO, LocalCluster, cluster_dir_for_demo

DEMO = REPO / "hack" / "demo.py"

pytestmark = pytest.mark.timeout(1800)  # a first run builds the cluster's binaries


def printed_commands(output: str) -> tuple[str, list[str]]:
    """The `export ...` line and the `workload-resizer ...` lines of the demo's "Look around"."""
    block = output.split("Look around", 1)[1].split("Stop everything:", 1)[0]
    lines = [line.strip() for line in block.splitlines()]
    (export,) = [line for line in lines if line.startswith("export ")]
    return export, [line for line in lines if line.startswith("workload-resizer ")]


@pytest.fixture(scope="module")
def demo() -> Iterator[str]:
    """The demo's output, from a run in its own cluster directory."""
    running_before = LocalCluster(cluster_dir_for_demo()).running()
    proc = subprocess.run([sys.executable, str(DEMO)], cwd=REPO, capture_output=True, text=True, timeout=1500)
    try:
        assert proc.returncode == 0, (
            f"hack/demo.py failed (exit {proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
        yield proc.stdout
    finally:
        if not running_before:
            subprocess.run([sys.executable, str(DEMO), "down"], cwd=REPO, capture_output=True, timeout=300)


def run_printed(export: str, command: str) -> str:
    proc = subprocess.run(["bash", "-c", f"{export}\n{command}"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"`{command}` failed (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout + proc.stderr


def test_the_pinned_pods_are_created_at_their_size(demo: str) -> None:
    """The DaemonSet's rows of the demo's table: NAME NODE TYPE cpu -> cpu memory -> memory LIMIT QOS HOW."""
    rows = [line.split(maxsplit=11) for line in demo.splitlines() if line.startswith("agent-")]
    assert len(rows) == 6, demo
    for row in rows:
        node_type, cpu_now, how = row[2], row[5], row[11].strip()
        assert (cpu_now, how) == {
            "n2d": ("500m", "unchanged"),
            "n4": ("400m", "created at its size"),
            "c3": ("385m", "created at its size"),
        }[node_type], row
    assert re.search(r"agent-\S+\s+Normal\s+SizedAtAdmission\s+created at its size for node type n4", demo), demo


def test_the_printed_admin_commands_show_what_was_freed(demo: str) -> None:
    export, commands = printed_commands(demo)
    assert commands == [
        "workload-resizer report",
        f"workload-resizer report -o html > {html_path(demo)}",
        "workload-resizer plan",
    ]
    outputs = {command: run_printed(export, command) for command in commands}

    report = outputs["workload-resizer report"]
    assert "OriginalsUnverified" not in report and "Warning" not in report, report
    total = re.search(r"Total: (\d+) managed pods; CPU requests \S+ as authored -> \S+ now \((\S+) freed\)", report)
    assert total, report
    assert int(total.group(1)) == 13 and total.group(2) != "0", report  # web 6, agent 6, real 1

    page = Path(html_path(demo)).read_text()
    assert "OriginalsUnverified" not in page and "<h2>Held back (0)</h2>" in page
    assert re.search(
        rf"13 managed pods: CPU requests \S+ as authored, \S+ now \({re.escape(total.group(2))} "
        r"freed\)",
        page,
    ), page[:2000]

    plan = outputs["workload-resizer plan"]
    assert "OriginalsUnverified" not in plan and "Warning" not in plan, plan


def html_path(demo: str) -> str:
    match = re.search(r"workload-resizer report -o html > (\S+)", demo)
    assert match, demo
    return match.group(1)
