"""hack/cluster and hack/karpenter (scripts without a .py name) loaded as modules, for their unit tests."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HACK = Path(__file__).resolve().parents[2] / "hack"
HACK_CLUSTER = HACK / "cluster"


def load_hack_script(name: str) -> ModuleType:
    """hack/<name> as the module hack_<name>."""
    module_name = f"hack_{name}"
    loader = importlib.machinery.SourceFileLoader(module_name, str(HACK / name))
    spec = importlib.util.spec_from_loader(module_name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module


def load_hack_cluster() -> ModuleType:
    return load_hack_script("cluster")
