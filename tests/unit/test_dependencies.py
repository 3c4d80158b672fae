"""pyproject's runtime dependencies are exactly the third-party distributions the product
(app, reconciler, resizer, ops, certs) imports: none missing (the image would fail at the
first import) and none unused (the image would carry it for nothing)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("app", "reconciler", "kube", "commands", "resizer", "ops", "certs")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_dependencies() -> set[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = {normalized(re.match(r"[A-Za-z0-9._-]+", requirement).group()) for requirement in project["dependencies"]}
    assert names, "no runtime dependencies found in pyproject.toml"
    return names


def imported_modules(packages: tuple[str, ...] = PRODUCT, root: Path = REPO) -> dict[str, set[str]]:
    """Top-level third-party modules imported anywhere in ``packages`` (lazy imports included),
    with the files that import each."""
    found: dict[str, set[str]] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for name in names:
                    top = name.split(".")[0]
                    if top not in sys.stdlib_module_names and top not in PRODUCT and top != "__future__":
                        found.setdefault(top, set()).add(str(path.relative_to(root)))
    return found


def distributions_of(modules: dict[str, set[str]]) -> dict[str, set[str]]:
    """Normalized distribution name -> the product files that import it."""
    installed = packages_distributions()
    by_distribution: dict[str, set[str]] = {}
    for module, files in modules.items():
        assert module in installed, f"{module} (imported by {sorted(files)}) is not installed by any distribution"
        for distribution in installed[module]:
            by_distribution.setdefault(normalized(distribution), set()).update(files)
    return by_distribution


def test_every_third_party_import_of_the_product_is_a_runtime_dependency() -> None:
    missing = {
        name: sorted(files)
        for name, files in distributions_of(imported_modules()).items()
        if name not in runtime_dependencies()
    }
    assert not missing, f"imported by the product but not in [project] dependencies: {missing}"


def test_every_runtime_dependency_is_imported_by_the_product() -> None:
    unused = runtime_dependencies() - set(distributions_of(imported_modules()))
    assert not unused, f"in [project] dependencies but imported by no product module: {sorted(unused)}"


def test_the_walk_sees_lazy_imports_and_skips_the_standard_library_and_relative_imports(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "x.py").write_text(
        "import os, json\nfrom . import sibling\nfrom app import y\n"
        "def f():\n    import kubernetes.config\n    from yaml import safe_load\n"
    )
    assert imported_modules(("app",), tmp_path) == {"kubernetes": {"app/x.py"}, "yaml": {"app/x.py"}}
