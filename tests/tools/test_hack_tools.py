"""hack/tools on a fresh machine: prometheus and promtool come from Debian's `prometheus`
package (apt-get download); apt's package lists of a new machine may not know it yet, and
`make test` must not depend on CI having run `apt-get update` first.

Fake `apt-cache` and `apt-get` on a PATH of their own: the lists know the package only after
`apt-get update`.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

HACK_TOOLS = Path(__file__).resolve().parents[2] / "hack" / "tools"

FAKE_APT_CACHE = """#!/bin/sh
[ -e {lists} ] && echo " prometheus | 2.42.0+ds-5+deb12u1 | http://deb.debian.org/debian bookworm/main amd64 Packages"
exit 0
"""
FAKE_APT_GET = """#!/bin/sh
printf '%s\\n' "$*" >> {log}
case " $* " in *" update "*) : > {lists};; esac
exit 0
"""


def load_hack_tools() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("hack_tools", str(HACK_TOOLS))
    spec = importlib.util.spec_from_loader("hack_tools", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hack_tools"] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


@pytest.fixture
def tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, Path]:
    bin_dir, log, lists = tmp_path / "bin", tmp_path / "apt-get.log", tmp_path / "lists-updated"
    bin_dir.mkdir()
    for name, text in (("apt-cache", FAKE_APT_CACHE), ("apt-get", FAKE_APT_GET)):
        (bin_dir / name).write_text(text.format(log=log, lists=lists))
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    module = load_hack_tools()
    monkeypatch.setattr(module.os, "geteuid", lambda: 0)
    return module, log


def test_lists_that_do_not_know_the_package_are_updated_first(tools) -> None:
    module, log = tools
    assert module.debian_version(module.PROMETHEUS) == "2.42.0+ds-5+deb12u1"
    assert log.read_text().splitlines() == ["-o DPkg::Lock::Timeout=600 update -q"]


def test_not_root_names_the_update_to_run(tools, monkeypatch: pytest.MonkeyPatch) -> None:
    module, log = tools
    monkeypatch.setattr(module.os, "geteuid", lambda: 1000)
    with pytest.raises(module.ToolError, match="apt-get update"):
        module.debian_version(module.PROMETHEUS)
    assert not log.exists()


def test_lists_that_know_it_are_left_alone(tools, tmp_path: Path) -> None:
    module, log = tools
    (tmp_path / "lists-updated").touch()
    assert module.debian_version(module.PROMETHEUS) == "2.42.0+ds-5+deb12u1"
    assert not log.exists()
