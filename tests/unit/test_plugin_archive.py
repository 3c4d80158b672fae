"""hack/plugin.py's pure parts: the archive krew unpacks, the split of the libraries, the
launcher and the manifest (tests/tools/test_plugin.py builds and installs the real thing)."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from hack import plugin


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_archive_is_reproducible_whatever_the_files_times(tmp_path: Path) -> None:
    root = tree(tmp_path / "root", {"kubectl-workload_resizer": "#!/usr/bin/env python3\n", "lib/common/a.py": "x"})
    (root / "kubectl-workload_resizer").chmod(0o755)
    first = plugin.write_archive(root, tmp_path / "one.tar.gz")
    os.utime(root / "lib" / "common" / "a.py", (1e9, 1e9))
    assert plugin.write_archive(root, tmp_path / "two.tar.gz") == first


def test_the_archive_holds_what_krew_unpacks_regular_files_and_directories(tmp_path: Path) -> None:
    root = tree(tmp_path / "root", {"kubectl-workload_resizer": "#!", "lib/cp311/m.so": "elf", "lib/common/a.py": ""})
    (root / "kubectl-workload_resizer").chmod(0o755)
    plugin.write_archive(root, tmp_path / "a.tar.gz")
    data = (tmp_path / "a.tar.gz").read_bytes()
    assert data[:2] == b"\x1f\x8b"  # krew picks its extractor by the content type: application/x-gzip
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == [
        "kubectl-workload_resizer",
        "lib",
        "lib/common",
        "lib/common/a.py",
        "lib/cp311",
        "lib/cp311/m.so",
    ]
    assert all(m.isfile() or m.isdir() for m in members.values())
    assert members["kubectl-workload_resizer"].mode == 0o755 and members["lib/common/a.py"].mode == 0o644
    assert {(m.uid, m.gid, m.mtime) for m in members.values()} == {(0, 0, plugin.ARCHIVE_MTIME)}


@pytest.mark.parametrize("name", ["link", "a..b"])
def test_entries_krew_would_refuse_fail_the_build(tmp_path: Path, name: str) -> None:
    root = tree(tmp_path / "root", {"lib/a.py": ""})
    if name == "link":
        (root / "lib" / name).symlink_to("a.py")
    else:
        (root / "lib" / name).write_text("")
    with pytest.raises(plugin.PluginError, match="krew"):
        plugin.write_archive(root, tmp_path / "a.tar.gz")


def test_what_every_python_shares_is_stored_once(tmp_path: Path) -> None:
    trees = {
        "cp311": tree(tmp_path / "cp311", {"pure/__init__.py": "same", "fast/_x.cpython-311.so": "a", "only.py": ""}),
        "cp312": tree(tmp_path / "cp312", {"pure/__init__.py": "same", "fast/_x.cpython-312.so": "b"}),
    }
    plugin.split_common(trees, tmp_path / "common")
    assert sorted(p.name for p in (tmp_path / "common").iterdir()) == ["pure"]
    assert sorted(p.name for p in trees["cp311"].iterdir()) == ["fast", "only.py"]
    assert sorted(p.name for p in trees["cp312"].iterdir()) == ["fast"]


def test_the_launcher_runs_the_command_with_its_own_libraries_first(tmp_path: Path) -> None:
    own = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    root = tree(
        tmp_path / "plugin",
        {
            f"lib/{own}/commands/__init__.py": "import sys\n"
            "def main():\n    print('commands from', __file__, sys.argv[1:])\n    return 3\n",
            "lib/common/shared.py": "",
        },
    )
    (root / plugin.BINARY).write_text(plugin.launcher([f"{sys.version_info[0]}.{sys.version_info[1]}"]))
    proc = subprocess.run(
        [sys.executable, str(root / plugin.BINARY), "plan", "-o", "json"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == f"commands from {root / 'lib' / own / 'commands' / '__init__.py'} ['plan', '-o', 'json']\n"


def test_the_manifest_is_one_krew_accepts() -> None:
    text = plugin.manifest("0.1.0", "https://example.invalid/a.tar.gz", "ab" * 32, plugin.PYTHONS)
    document = yaml.safe_load(text)
    assert (document["apiVersion"], document["kind"], document["metadata"]["name"]) == (
        "krew.googlecontainertools.github.com/v1alpha2",
        "Plugin",
        "workload-resizer",
    )
    spec = document["spec"]
    assert spec["version"] == "v0.1.0" and "\n" not in spec["shortDescription"]
    assert "CPython 3.11, 3.12, 3.13 or 3.14" in spec["description"] + spec["caveats"]
    (platform,) = spec["platforms"]
    assert platform["bin"] == "kubectl-workload_resizer" and platform["sha256"] == "ab" * 32
    assert platform["files"] == [{"from": "kubectl-workload_resizer", "to": "."}, {"from": "lib", "to": "lib"}]


def test_the_committed_manifest_is_the_one_the_script_writes() -> None:
    """plugins/workload-resizer.yaml is `make plugin`'s, for this version, with some archive's sha256."""
    committed = plugin.MANIFEST.read_text()
    sha256 = yaml.safe_load(committed)["spec"]["platforms"][0]["sha256"]
    version = plugin.version()
    uri = plugin.RELEASE_URI.format(version=version, archive=plugin.archive_name(version))
    assert committed == plugin.manifest(version, uri, sha256, plugin.PYTHONS), "run `make plugin` and commit it"


def test_the_manifest_describes_every_command() -> None:
    from commands.cli import COMMANDS

    description = yaml.safe_load(plugin.MANIFEST.read_text())["spec"]["description"]
    listed = [line.split()[0] for line in description.splitlines() if line.startswith("  ")]
    assert listed == list(COMMANDS)
