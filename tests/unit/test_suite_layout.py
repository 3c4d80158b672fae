"""tests/unit stays pure: what needs a tool, root or a cluster lives in tests/tools or tests/cluster.

A static look at the unit tests' sources for the ways such a need comes in (the suite also
runs as a non-root user with PATH stripped of the tools; this catches the usual slips early).
"""

from __future__ import annotations

import re
from pathlib import Path

UNIT = Path(__file__).resolve().parent

NEEDS = {
    r"\bensure_(helm|tool)\(|hack/tools": "builds a tool (hack/tools): tests/tools",
    r"\bhadolint\b": "runs hadolint: tests/tools",
    r"[\"']pip[\"'],\s*[\"']install": "installs packages with pip: tests/tools",
    r"\bgeteuid\(\)|\bsetns\(|\bunshare\(": "needs root or namespaces: tests/cluster",
    r"\bLocalCluster\(|\bcluster: Cluster\b|\bh: Harness\b": "needs a cluster: tests/cluster",
}


def needs_of(source: str) -> list[str]:
    return [need for pattern, need in NEEDS.items() if re.search(pattern, source)]


def test_no_unit_test_needs_a_tool_root_or_a_cluster() -> None:
    found = {
        path.name: needs
        for path in sorted(UNIT.glob("*.py"))
        if path.name != Path(__file__).name and (needs := needs_of(path.read_text()))
    }
    assert found == {}


def test_the_layout_check_sees_each_need() -> None:
    assert needs_of("helm = ensure_helm()") == ["builds a tool (hack/tools): tests/tools"]
    assert needs_of('subprocess.run([sys.executable, "-m", "pip", "install", req])') == [
        "installs packages with pip: tests/tools"
    ]
    assert needs_of("skipif(os.geteuid() != 0)") == ["needs root or namespaces: tests/cluster"]
    assert needs_of("def test_x(cluster: Cluster) -> None:") == ["needs a cluster: tests/cluster"]
    assert needs_of("def test_x(h: Harness) -> None:") == ["needs a cluster: tests/cluster"]
    assert needs_of("def test_x(tmp_path: Path) -> None:") == []
