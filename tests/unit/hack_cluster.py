"""hack/cluster (a script without a .py name) loaded as a module, for its unit tests."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HACK_CLUSTER = Path(__file__).resolve().parents[2] / "hack" / "cluster"


def load_hack_cluster() -> ModuleType:
    loader = importlib.machinery.SourceFileLoader("hack_cluster", str(HACK_CLUSTER))
    spec = importlib.util.spec_from_loader("hack_cluster", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["hack_cluster"] = module  # dataclasses look their module up
    loader.exec_module(module)
    return module
