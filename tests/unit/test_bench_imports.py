"""Every benchmark and drill still imports: they run outside the test suite, so a renamed product
name would otherwise break them unnoticed."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.parametrize("module", sorted(p.stem for p in BENCH.glob("*.py") if p.stem != "__init__"))
def test_the_benchmark_imports(module: str) -> None:
    importlib.import_module(f"bench.{module}")
