"""One error tree per product package: every exception class the product defines derives from its
package's base (``<package>.errors``), and the tree drawn in that module's docstring is the real one."""

from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType

import pytest

PACKAGES = {
    "resizer": "ResizerError",
    "kube": "KubeError",
    "app": "WebhookError",
    "reconciler": "ReconcilerError",
    "commands": "CommandError",
    "ops": "OpsError",
    "certs": "CertsError",
}

# Built-in bases callers rely on (``except ValueError`` on input, ``except OSError`` on transport).
BUILTIN_BASES = [
    ("resizer.errors", "ResizerError", ValueError),
    ("kube.client", "TransportError", ConnectionError),
    ("kube.transport", "ServerClosed", ConnectionError),
    ("kube.credentials", "CredentialsError", ValueError),
    ("ops.keys", "KeyDirectoryError", ValueError),
    ("certs.manifest", "RenderError", ValueError),
]

# One line of the drawing: the base at the margin, each subclass after its branch (├── or └──).
_TREE_LINE = re.compile(r"^    (?P<branch>(?:│   |    )*(?:├── |└── ))?(?P<name>[A-Z_]\w*)\b")


def modules(package: str) -> list[ModuleType]:
    root = importlib.import_module(package)
    names = [info.name for info in pkgutil.walk_packages(root.__path__, f"{package}.")]
    return [root, *(importlib.import_module(name) for name in names)]


def exception_classes(package: str) -> dict[str, type[BaseException]]:
    """Every exception class defined (not imported) in one of the package's modules, by name."""
    found: dict[str, type[BaseException]] = {}
    for module in modules(package):
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseException) and value.__module__ == module.__name__:
                assert value.__name__ not in found, f"{package} defines two exceptions named {value.__name__}"
                found[value.__name__] = value
    return found


def drawn_tree(docstring: str, base: str) -> dict[str, str | None]:
    """The tree drawn in an errors module's docstring: class name -> its drawn parent (None: the base)."""
    lines = docstring.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"    {base} ") or line == f"    {base}")
    parents: dict[str, str | None] = {}
    path: list[str] = []
    for line in lines[start:]:
        match = _TREE_LINE.match(line)
        if match is None or (path and not match["branch"]):
            break
        depth = len(match["branch"] or "") // 4
        path[depth:] = [match["name"]]
        parents[match["name"]] = path[depth - 1] if depth else None
    return parents


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exception_the_package_defines_derives_from_its_base(package: str) -> None:
    base = getattr(importlib.import_module(f"{package}.errors"), PACKAGES[package])
    strays = [
        f"{cls.__module__}.{name}" for name, cls in exception_classes(package).items() if not issubclass(cls, base)
    ]
    assert not strays, f"derive these from {package}.errors.{base.__name__}: {strays}"


@pytest.mark.parametrize("package", PACKAGES)
def test_the_errors_module_draws_the_package_s_tree(package: str) -> None:
    errors = importlib.import_module(f"{package}.errors")
    base = PACKAGES[package]
    classes = exception_classes(package)
    tree = drawn_tree(errors.__doc__ or "", base)
    public = {name for name in classes if not name.startswith("_")}
    assert set(tree) == public, f"{package}/errors.py's tree: draw {public - set(tree)}, drop {set(tree) - public}"
    for name, parent in tree.items():
        if parent is not None:
            assert classes[parent] in classes[name].__bases__, f"{name} is drawn under {parent}"


@pytest.mark.parametrize(("module", "name", "builtin"), BUILTIN_BASES)
def test_errors_keep_the_builtin_bases_callers_catch(module: str, name: str, builtin: type[BaseException]) -> None:
    assert issubclass(getattr(importlib.import_module(module), name), builtin)


def test_the_tree_reader_sees_depth_and_the_end_of_the_drawing() -> None:
    doc = "Title.\n\n    Base   all\n    ├── A   a\n    │   └── B   b\n    └── C   c\n\n    Later   text\n"
    assert drawn_tree(doc, "Base") == {"Base": None, "A": "Base", "B": "A", "C": "Base"}
