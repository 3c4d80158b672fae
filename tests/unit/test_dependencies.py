"""pyproject's runtime dependencies are exactly the third-party distributions the product
(app, reconciler, resizer, ops, certs) imports: none missing (the image would fail at the
first import) and none unused (the image would carry it for nothing). A distribution the
product imports only inside functions may instead be an optional extra's (the image, which
installs none, never needs it)."""

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


def optional_dependencies() -> set[str]:
    """The distributions of the optional extras meant for users (all but `test`)."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    return {
        normalized(re.match(r"[A-Za-z0-9._-]+", requirement).group())
        for extra, requirements in extras.items()
        if extra != "test"
        for requirement in requirements
    }


def imported_modules(
    packages: tuple[str, ...] = PRODUCT, root: Path = REPO, where: str = "anywhere"
) -> dict[str, set[str]]:
    """Top-level third-party modules imported in ``packages`` (`where`: "anywhere", lazy imports
    included; "in functions"; or "at module level"), with the files that import each."""
    found: dict[str, set[str]] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            functions = [node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))]
            in_functions = {id(node) for function in functions for node in ast.walk(function)}
            for node in ast.walk(tree):
                if where != "anywhere" and (id(node) in in_functions) != (where == "in functions"):
                    continue
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
    eager = distributions_of(imported_modules(where="at module level"))
    missing = {
        name: sorted(files)
        for name, files in distributions_of(imported_modules()).items()
        if name not in runtime_dependencies() and (name in eager or name not in optional_dependencies())
    }
    assert not missing, f"imported by the product but not in [project] dependencies: {missing}"


def test_an_extra_serves_only_imports_made_inside_functions() -> None:
    """An optional extra is not installed in the image: a module-level import of it would fail there."""
    lazy = distributions_of(imported_modules(where="in functions"))
    eager = distributions_of(imported_modules(where="at module level"))
    for name in optional_dependencies():
        assert name not in runtime_dependencies(), f"{name} is both a dependency and an extra's"
        assert name in lazy, f"{name} is an extra's, but no product function imports it"
        assert name not in eager, f"{name} is an extra's, but imported at module level"


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
    (tmp_path / "app" / "z.py").write_text("import yaml\n")
    assert imported_modules(("app",), tmp_path, where="in functions") == {
        "kubernetes": {"app/x.py"},
        "yaml": {"app/x.py"},
    }
    assert imported_modules(("app",), tmp_path, where="at module level") == {"yaml": {"app/z.py"}}
