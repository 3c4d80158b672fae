#!/usr/bin/env python3
"""The admin command as a kubectl plugin that krew installs (`kubectl workload-resizer plan`).

    python hack/plugin.py [--out DIR] [--manifest FILE] [--uri URL]    (make plugin)

builds DIR/workload-resizer-v<version>-linux-amd64.tar.gz (default DIR: dist/plugin) from this
checkout and writes krew's manifest for it (default: plugins/workload-resizer.yaml) with the
archive's sha256; it prints the archive's path. Install it without an index:

    kubectl krew install --manifest=plugins/workload-resizer.yaml --archive=dist/plugin/<archive>

The archive holds what `pip install '.[kubeconfig]'` installs (the kubeconfig extra: laptops'
kubeconfigs use exec plugins), without a virtualenv:

    kubectl-workload_resizer   the launcher (`#!/usr/bin/env python3`), krew's `bin`
    lib/common/                the pure-Python packages: the product's and its dependencies'
    lib/cp311/ ... lib/cp314/  the packages with extension modules (pydantic-core, orjson, PyYAML,
                               uvloop, httptools, cryptography, ...), one tree per CPython version

Not a zipapp: extension modules cannot be imported from inside a zip. One tree per CPython
version because a cp311 extension module loads only in CPython 3.11; a package whose files are
the same for every version is stored once, in lib/common. The wheels are manylinux2014 x86_64
(glibc >= 2.17), hence the manifest's single platform, linux/amd64. Each tree is
`pip install --target --only-binary=:all: --platform manylinux2014_x86_64 --python-version 3.X`
of this checkout's wheel; the archive itself is reproducible (sorted entries, fixed times and
owners), so the same resolved packages give the same sha256.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLUGIN = "workload-resizer"
BINARY = "kubectl-workload_resizer"  # krew's name for the plugin `workload-resizer`
PYTHONS = ("3.11", "3.12", "3.13", "3.14")
PLATFORM = "manylinux2014_x86_64"
EXTRAS = "kubeconfig"
HOMEPAGE = "https://github.com/workload-resizer/workload-resizer"
RELEASE_URI = HOMEPAGE + "/releases/download/v{version}/{archive}"
MANIFEST = REPO / "plugins" / f"{PLUGIN}.yaml"
OUT = REPO / "dist" / "plugin"
# Every entry's time in the archive (1980-01-01, the oldest a zip can hold too): reproducible.
ARCHIVE_MTIME = 315532800


class PluginError(RuntimeError):
    """A failure with a message meant for the person running the script."""


def log(message: str) -> None:
    print(f"[plugin] {message}", file=sys.stderr, flush=True)


def version() -> str:
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def archive_name(plugin_version: str) -> str:
    return f"{PLUGIN}-v{plugin_version}-linux-amd64.tar.gz"


def tag(python: str) -> str:
    return "cp" + python.replace(".", "")


# --------------------------------------------------------------------------- the launcher

LAUNCHER = '''#!/usr/bin/env python3
"""kubectl workload-resizer: workload-resizer's admin command, as krew installs it.

Runs the command with this plugin's libraries for the running CPython (lib/cpXY and
lib/common beside this file, ahead of anything else on sys.path). Under a Python it has no
libraries for, it runs itself again with one it has, found on PATH as python3.X.
"""
import os
import shutil
import subprocess
import sys

SUPPORTED = {supported!r}
HERE = os.path.dirname(os.path.realpath(__file__))
TRIED = "WORKLOAD_RESIZER_PLUGIN_REEXEC"


def main():
    lib = os.path.join(HERE, "lib")
    own = os.path.join(lib, "cp%d%d" % sys.version_info[:2])
    if sys.implementation.name == "cpython" and os.path.isdir(own):
        sys.path[:0] = [own, os.path.join(lib, "common")]
        from commands import main as command

        return command()
    if not os.environ.get(TRIED):
        for version in reversed(SUPPORTED):
            python = shutil.which("python" + version)
            # A version manager's shim may be on PATH for a version it will not run.
            if python and subprocess.run([python, "-c", ""], capture_output=True).returncode == 0:
                os.environ[TRIED] = "1"
                os.execv(python, [python, os.path.realpath(__file__), *sys.argv[1:]])
    sys.stderr.write(
        "kubectl workload-resizer needs CPython %s (python3 or python3.X on PATH); this is %s %s\\n"
        % (" or ".join(SUPPORTED), sys.implementation.name, sys.version.split()[0])
    )
    return 1


if __name__ == "__main__":
    sys.exit(main())
'''


def launcher(pythons: Sequence[str]) -> str:
    return LAUNCHER.format(supported=tuple(pythons))


# --------------------------------------------------------------------------- the manifest

MANIFEST_TEXT = """\
# krew's manifest of the kubectl plugin `workload-resizer`, written by hack/plugin.py (make plugin)
# with the sha256 of the archive it built; publish that archive at the uri below.
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: {plugin}
spec:
  version: v{version}
  homepage: {homepage}
  shortDescription: Preview, report and undo in-place right-sizing of pods
  description: |
    The admin command of workload-resizer, the add-on that resizes pods in place
    (pods/resize) for the machine family of the node they run on:
      plan       what the product would resize, and the requests freed, per workload
      report     what it has freed so far, and the pods it holds back and why
      restore    every managed pod back to its original requests and limits
      calibrate  each node type's cpuPerf measured with a benchmark pod
      selftest   whether the installed webhook answers and a reconciler leads
    It reads your kubeconfig like kubectl (--kubeconfig, --context, $KUBECONFIG).
    Written in Python: needs CPython {pythons} on linux/amd64.
  caveats: |
    Needs CPython {pythons} on PATH as python3 (or python3.X).
    restore and calibrate change the cluster: read `kubectl workload-resizer restore --help`
    and `kubectl workload-resizer calibrate --help` first.
  platforms:
  - selector:
      matchLabels:
        os: linux
        arch: amd64
    uri: {uri}
    sha256: {sha256}
    files:
    - from: {binary}
      to: .
    - from: lib
      to: lib
    bin: {binary}
"""


def manifest(plugin_version: str, uri: str, sha256: str, pythons: Sequence[str]) -> str:
    return MANIFEST_TEXT.format(
        plugin=PLUGIN,
        version=plugin_version,
        homepage=HOMEPAGE,
        pythons=", ".join(pythons[:-1]) + " or " + pythons[-1] if len(pythons) > 1 else pythons[0],
        uri=uri,
        sha256=sha256,
        binary=BINARY,
    )


# --------------------------------------------------------------------------- building


def pip(*args: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise PluginError(f"pip {' '.join(args)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-4000:]}")


def build_wheel(into: Path) -> Path:
    pip("wheel", "--quiet", "--no-deps", "--wheel-dir", str(into), str(REPO))
    wheels = list(into.glob("workload_resizer-*.whl"))
    if len(wheels) != 1:
        raise PluginError(f"expected one workload_resizer wheel in {into}, found {wheels}")
    return wheels[0]


def install_tree(wheel: Path, python: str, target: Path) -> Path:
    """What `pip install wheel[extras]` gives a CPython `python` on manylinux x86_64, in `target`."""
    pip(
        "install",
        "--quiet",
        "--no-compile",  # the first run compiles what it imports, beside the sources
        "--target",
        str(target),
        "--only-binary=:all:",
        "--platform",
        PLATFORM,
        "--implementation",
        "cp",
        "--python-version",
        python,
        f"{wheel}[{EXTRAS}]",
    )
    shutil.rmtree(target / "bin", ignore_errors=True)  # console scripts with the builder's shebang
    for direct_url in target.glob("*.dist-info/direct_url.json"):  # names the builder's temporary wheel
        direct_url.unlink()
        record = direct_url.parent / "RECORD"
        lines = record.read_text().splitlines(keepends=True)
        record.write_text(
            "".join(line for line in lines if not line.startswith(f"{direct_url.parent.name}/direct_url"))
        )
    return target


def tree_digest(path: Path) -> str:
    digest = hashlib.sha256()
    for item in sorted([path] if path.is_file() else path.rglob("*")):
        if item.is_file():
            digest.update(str(item.relative_to(path.parent)).encode() + b"\0" + item.read_bytes() + b"\0")
    return digest.hexdigest()


def split_common(trees: dict[str, Path], common: Path) -> None:
    """Move each top-level entry (package, module, dist-info) whose files are the same in every
    tree into `common`, once; what differs (extension modules, their dist-info) stays per tree."""
    common.mkdir(parents=True)
    names = sorted({entry.name for tree in trees.values() for entry in tree.iterdir()})
    for name in names:
        paths = [tree / name for tree in trees.values()]
        if all(p.exists() for p in paths) and len({tree_digest(p) for p in paths}) == 1:
            shutil.move(str(paths[0]), common / name)
            for duplicate in paths[1:]:
                shutil.rmtree(duplicate) if duplicate.is_dir() else duplicate.unlink()


def stage(pythons: Sequence[str], work: Path) -> Path:
    """The plugin's files in `work`/plugin, laid out as the archive holds them."""
    wheel = build_wheel(work / "wheel")
    root = work / "plugin"
    lib = root / "lib"
    with ThreadPoolExecutor(max_workers=len(pythons)) as pool:
        trees = dict(
            zip(
                (tag(p) for p in pythons),
                pool.map(lambda p: install_tree(wheel, p, lib / tag(p)), pythons),
                strict=True,
            )
        )
    split_common(trees, lib / "common")
    (root / BINARY).write_text(launcher(pythons))
    (root / BINARY).chmod(0o755)
    return root


def _entries(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise PluginError(f"{path}: krew unpacks only regular files and directories")
        if ".." in path.name:
            raise PluginError(f"{path}: krew refuses archive entries whose name holds '..'")
        yield path


def write_archive(root: Path, archive: Path) -> str:
    """A reproducible .tar.gz of `root`'s contents (entries relative to it); its sha256."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in _entries(root):
            info = tarfile.TarInfo(path.relative_to(root).as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = ARCHIVE_MTIME, 0, 0, "", ""
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            data = path.read_bytes()
            info.size, info.mode = len(data), 0o755 if path.stat().st_mode & 0o111 else 0o644
            tar.addfile(info, io.BytesIO(data))
    archive.parent.mkdir(parents=True, exist_ok=True)
    with open(archive, "wb") as out, gzip.GzipFile(filename="", fileobj=out, mode="wb", mtime=0, compresslevel=9) as gz:
        gz.write(buffer.getvalue())
    return hashlib.sha256(archive.read_bytes()).hexdigest()


def build(out: Path, manifest_path: Path, uri: str = "", pythons: Sequence[str] = PYTHONS) -> Path:
    """Build the archive into `out` and write its manifest; returns the archive."""
    plugin_version = version()
    archive = out / archive_name(plugin_version)
    with tempfile.TemporaryDirectory(prefix="workload-resizer-plugin-") as work:
        log(f"installing the package for CPython {', '.join(pythons)} ({PLATFORM}) ...")
        root = stage(pythons, Path(work))
        sha256 = write_archive(root, archive)
    uri = uri or RELEASE_URI.format(version=plugin_version, archive=archive.name)
    manifest_path.parent.mkdir(parents=True, exist_ok=True)
    manifest_path.write_text(manifest(plugin_version, uri, sha256, pythons))
    log(f"{archive} ({archive.stat().st_size / 1e6:.1f} MB, sha256 {sha256}); manifest {manifest_path}")
    return archive


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hack/plugin.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT, help="directory of the archive (default: %(default)s)")
    parser.add_argument("--manifest", type=Path, default=MANIFEST, help="the krew manifest to write")
    parser.add_argument("--uri", default="", help="the archive's URL in the manifest (default: the release's)")
    parser.add_argument(
        "--python", action="append", choices=PYTHONS, help="CPython version to ship libraries for (default: all)"
    )
    args = parser.parse_args(argv)
    try:
        print(build(args.out, args.manifest, args.uri, tuple(args.python or PYTHONS)))
    except PluginError as err:
        log(f"error: {err}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
