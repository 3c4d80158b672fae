"""`workload-resizer plan|restore` command lines (also `python -m reconciler plan|restore`)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from reconciler.commands import parse


def test_plan_flags_mirror_the_reconcilers_and_build_the_same_scope() -> None:
    args = parse(["plan", "--namespace=wr", "--exclude-namespaces=a,b", "--namespace-selector=!skip",
                  "--config-file=c.yaml", "-o", "json", "--no-realign"])
    assert args.scope.excluded == {"kube-system", "wr", "a", "b"}
    assert (args.config_file, args.output, args.realign) == ("c.yaml", "json", False)


def test_restore_is_rate_limited_by_default() -> None:
    args = parse(["restore"])
    assert args.max_resizes_per_second == 10.0 and not args.dry_run


@pytest.mark.parametrize("argv", [["plan", "--namespace-selector=a in ("], ["restore", "--max-resizes-per-second=0"],
                                  ["nope"]])
def test_bad_command_lines_fail_fast(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(argv)


def test_python_m_reconciler_dispatches_the_commands() -> None:
    out = subprocess.run([sys.executable, "-m", "reconciler", "plan", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "--config-file" in out.stdout
