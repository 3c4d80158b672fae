"""What `make test` installs itself when a test needs it (devkit/debian.py): Debian packages
with apt-get, as root, waiting for dpkg's lock, the output shown; a clear error otherwise.

A fake `apt-get` on a PATH of its own stands in for apt: it records its arguments and, on
`install`, puts the package's command on that PATH, as the real package would.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from devkit import browser, debian, progress

FAKE_APT_GET = """#!/bin/sh
printf '%s\\n' "$*" >> {log}
case " $* " in
  *" install "*)
    [ -n "{fail}" ] && {{ echo "E: Unable to locate package chromium" >&2; exit 100; }}
    printf '#!/bin/sh\\necho fake chromium\\n' > {bin}/chromium
    /bin/chmod +x {bin}/chromium
    echo "Setting up chromium (fake) ...";;
esac
exit 0
"""


@pytest.fixture
def fake_apt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A PATH holding only a fake apt-get (no chromium, whatever this machine has)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "apt-get.log"

    def install(fail: bool = False) -> Path:
        script = bin_dir / "apt-get"
        script.write_text(FAKE_APT_GET.format(log=log, bin=bin_dir, fail="yes" if fail else ""))
        script.chmod(0o755)
        return log

    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(debian.os, "geteuid", lambda: 0)
    monkeypatch.setattr(progress, "_uncaptured", contextlib.nullcontext)  # shown: to capfd here
    return bin_dir, install


def test_a_missing_chromium_is_installed_with_apt_get(fake_apt, capfd) -> None:
    bin_dir, install = fake_apt
    log = install()
    assert browser.chromium() == str(bin_dir / "chromium")
    calls = log.read_text().splitlines()
    assert calls[0] == "-o DPkg::Lock::Timeout=600 update -q"
    assert calls[1] == "-o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends chromium"
    shown = capfd.readouterr().err
    assert "apt-get install chromium" in shown and "Setting up chromium (fake)" in shown  # progress shown


def test_chromium_already_there_installs_nothing(fake_apt) -> None:
    bin_dir, install = fake_apt
    log = install()
    (bin_dir / "chromium").write_text("#!/bin/sh\n")
    (bin_dir / "chromium").chmod(0o755)
    assert browser.chromium() == str(bin_dir / "chromium")
    assert not log.exists()


def test_a_failed_install_says_what_failed(fake_apt) -> None:
    _, install = fake_apt
    install(fail=True)
    with pytest.raises(debian.PackageError, match=r"apt-get install chromium failed \(exit 100"):
        browser.chromium()


def test_not_root_names_the_command_to_run(fake_apt, monkeypatch: pytest.MonkeyPatch) -> None:
    _, install = fake_apt
    log = install()
    monkeypatch.setattr(debian.os, "geteuid", lambda: 1000)
    with pytest.raises(debian.PackageError) as refused:
        browser.chromium()
    assert "as root" in str(refused.value) and "apt-get install -y chromium" in str(refused.value)
    assert "render" in str(refused.value)  # and why it is needed
    assert not log.exists()


def test_without_apt_get_says_to_install_it_by_other_means(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(debian.PackageError, match="no apt-get"):
        debian.install(["chromium"], "a test")
