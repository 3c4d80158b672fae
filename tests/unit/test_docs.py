"""The documentation stays true: every flag of the programs is documented, README.md stays a
front door (at most 250 lines), chart values named in the docs exist, links resolve.

The flags come from the argparse parsers the programs really build, so a flag added to a
program without a row in docs/configuration.md (or a row left for a flag that is gone) fails.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from app.__main__ import build_parser as webhook_parser
from certs.__main__ import build_parser as certs_parser
from commands.cli import build_parser as commands_parser
from reconciler.options import build_parser as reconciler_parser
from resizer.runtime_hints import HintReason

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = REPO / "docs"
CONFIGURATION = DOCS / "configuration.md"
README_MAX_LINES = 250

_FLAG = re.compile(r"`(--?[a-z0-9][a-z0-9-]*)`")
_VALUE_PATH = re.compile(r"`([a-zA-Z]+(?:\.[a-zA-Z]+)+)`")


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def programs() -> dict[str, argparse.ArgumentParser]:
    """Section heading (as docs/configuration.md writes it) -> the parser the program uses."""
    found = {
        "`python -m reconciler --help`": reconciler_parser(),
        "`python -m app --help`": webhook_parser(),
        "`python -m certs --help`": certs_parser(),
    }
    commands = subcommands(commands_parser())
    assert commands, "the admin commands' parser has no subcommands"
    for name, parser in commands.items():
        found[f"`workload-resizer {name} --help`"] = parser
    return found


def option_strings(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings} - {"-h", "--help"}


def sections(text: str) -> dict[str, list[str]]:
    """Heading line -> the lines under it, up to the next heading of any level."""
    result: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("#"):
            current = result.setdefault(line, [])
        elif current is not None:
            current.append(line)
    return result


def table_rows(lines: list[str]) -> Iterator[list[str]]:
    """Cells of each body row of the Markdown tables in ``lines`` (header and rule skipped)."""
    in_table = False
    for line in lines:
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not in_table:
            in_table, header = True, cells
            yield ["__header__", *header]
            continue
        if set("".join(cells)) <= set("-: "):
            continue
        yield cells


def documented_flags(lines: list[str]) -> set[str]:
    """Flags named in the first column of the section's tables."""
    return {flag for cells in table_rows(lines) if cells[0] != "__header__" for flag in _FLAG.findall(cells[0])}


def section_for(heading_text: str, doc: dict[str, list[str]]) -> list[str]:
    matches = [heading for heading in doc if heading_text in heading]
    assert len(matches) == 1, (
        f"docs/configuration.md needs exactly one heading with {heading_text} "
        f"(the flags table of that program); found {matches}"
    )
    return doc[matches[0]]


@pytest.mark.parametrize("heading", list(programs()))
def test_every_flag_is_documented(heading: str) -> None:
    doc = sections(CONFIGURATION.read_text())
    flags = option_strings(programs()[heading])
    documented = documented_flags(section_for(heading, doc))
    assert not flags - documented, (
        f"flags of {heading} missing from docs/configuration.md (one table row each, "
        f"the flag in the first column): {sorted(flags - documented)}"
    )
    assert not documented - flags, (
        f"docs/configuration.md documents flags that {heading} does not have: {sorted(documented - flags)}"
    )


def _values() -> dict[str, Any]:
    values = yaml.safe_load((REPO / "chart" / "values.yaml").read_text())
    assert isinstance(values, dict)
    return values


def _resolves(values: dict[str, Any], path: str) -> bool:
    node: Any = values
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_chart_values_named_for_flags_exist() -> None:
    """Every chart value in a *chart value* column is a key of chart/values.yaml."""
    values = _values()
    named = []
    for lines in sections(CONFIGURATION.read_text()).values():
        column = None
        for cells in table_rows(lines):
            if cells[0] == "__header__":
                column = cells.index("chart value") - 1 if "chart value" in cells else None
                continue
            if column is not None and column < len(cells):
                named += [p for p in _VALUE_PATH.findall(cells[column]) if p.split(".")[0] in values]
    assert len(named) > 40, f"found only {len(named)} chart values in docs/configuration.md"
    missing = sorted({path for path in named if not _resolves(values, path)})
    assert not missing, f"docs/configuration.md names chart values that chart/values.yaml does not have: {missing}"


def test_readme_is_a_front_door() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail to docs/"
    )


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = heading.lstrip("#").strip().lower()
    return "".join(ch for ch in text if ch.isalnum() or ch in "-_ ").replace(" ", "-")


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _markdown_files() -> list[Path]:
    return [README, REPO / "chart" / "README.md", *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", _markdown_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in _LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md":
            anchors = {_slug(line) for line in file.read_text().splitlines() if line.startswith("#")}
            if anchor not in anchors:
                broken.append(target)
    assert not broken, f"{page.relative_to(REPO)}: links to missing files or headings: {broken}"


def test_the_docs_test_sees_a_missing_flag() -> None:
    """The check above is not vacuous: with one row removed, that flag is reported missing."""
    heading = "`python -m reconciler --help`"
    lines = section_for(heading, sections(CONFIGURATION.read_text()))
    without = [line for line in lines if not line.startswith("| `--concurrency`")]
    assert len(without) == len(lines) - 1
    assert "--concurrency" in option_strings(programs()[heading]) - documented_flags(without)


# ---------------------------------------------------------------- docs/security.md: the routes and their proofs

SECURITY = DOCS / "security.md"
_TEST_REFERENCE = re.compile(r"`(tests/[\w/]+\.py)(?:::(\w+))?`")


def missing_tests(text: str) -> list[str]:
    """Every ``tests/...py`` or ``tests/...py::test_name`` named in ``text`` that does not exist."""
    missing = []
    for path, name in _TEST_REFERENCE.findall(text):
        file = REPO / path
        if not file.is_file():
            missing.append(path)
        elif name and not re.search(rf"^(async )?def {name}\(", file.read_text(), re.MULTILINE):
            missing.append(f"{path}::{name}")
    return missing


def route_rows(text: str) -> list[list[str]]:
    """The body rows of the routes table (route, what happens, proven by)."""
    tables = [cells for cells in table_rows(text.splitlines()) if cells[0] == "__header__"]
    assert [header[1:] for header in tables].count(["route", "what happens", "proven by"]) == 1, (
        "docs/security.md needs exactly one table of routes (route | what happens | proven by)"
    )
    lines = sections(text)["### Routes"]
    return [cells for cells in table_rows(lines) if cells[0] != "__header__"]


def test_every_test_docs_security_names_exists() -> None:
    assert not missing_tests(SECURITY.read_text()), "docs/security.md names tests that do not exist"


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_every_test_a_docs_page_names_exists(page: Path) -> None:
    """A rule's proof named in docs/ (e.g. how-it-works.md's horizontal autoscaling) is a real test."""
    assert not missing_tests(page.read_text()), f"docs/{page.name} names tests that do not exist"


def test_security_has_one_routes_table_each_route_once_and_proven() -> None:
    rows = route_rows(SECURITY.read_text())
    assert all(len(cells) == 3 for cells in rows), [cells[0] for cells in rows if len(cells) != 3]
    routes = [cells[0] for cells in rows]
    assert len(routes) == len(set(routes)), f"routes listed twice: {sorted({r for r in routes if routes.count(r) > 1})}"
    unproven = [cells[0] for cells in rows if not _TEST_REFERENCE.search(cells[2])]
    assert not unproven, f"routes without a test: {unproven}"


def test_the_docs_test_sees_a_missing_test() -> None:
    """The check above is not vacuous: a renamed test or a missing file is reported."""
    text = (
        "`tests/unit/test_docs.py::test_every_test_docs_security_names_exists`, "
        "`tests/unit/test_docs.py::test_no_such_thing`, `tests/unit/no_such_file.py`"
    )
    assert missing_tests(text) == ["tests/unit/test_docs.py::test_no_such_thing", "tests/unit/no_such_file.py"]


OPERATIONS = DOCS / "operations.md"


def documented_hint_reasons(text: str) -> set[str]:
    """The reasons in the first column of the tables under docs/operations.md's "## Runtime hints"."""
    rows = table_rows(sections(text).get("## Runtime hints", []))
    return {cells[0].strip("`") for cells in rows if cells[0] != "__header__" and len(cells) == 3}


def test_every_runtime_hint_reason_is_documented_with_what_to_do() -> None:
    assert documented_hint_reasons(OPERATIONS.read_text()) == {reason.value for reason in HintReason}


def test_the_docs_test_sees_an_undocumented_hint_reason() -> None:
    text = "## Runtime hints\n\n| reason | when | what to do |\n|---|---|---|\n| `GoMaxProcsAtStart` | a | b |\n"
    assert documented_hint_reasons(text) == {"GoMaxProcsAtStart"} != {reason.value for reason in HintReason}


def webhook_reasons_documented() -> list[tuple[str, str]]:
    """The rows of the webhook's reason table in docs/operations.md: (reason, decision)."""
    text = (DOCS / "operations.md").read_text()
    table = text[text.index('<a id="webhook-reasons"></a>') :].split("\n\n")[1]
    cells = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    return [(reason.strip().strip("`"), decision.strip()) for reason, decision in cells]


def test_every_reason_the_webhook_gives_is_documented_once() -> None:
    from app.review import Decision, Reason

    rows = webhook_reasons_documented()
    assert sorted(reason for reason, _ in rows) == sorted(reason.value for reason in Reason)
    assert {decision for _, decision in rows} <= {decision.value for decision in Decision} | {"—"}


def test_every_path_in_where_to_change_what_exists() -> None:
    text = (DOCS / "development.md").read_text()
    table = text[text.index('<a id="where-to-change-what"></a>') :].split("\n\n")[1]
    paths = set(re.findall(r"`((?:resizer|reconciler|app|kube|commands|ops|chart|docs|tests)/[\w./-]+)`", table))
    assert len(paths) >= 10
    missing = sorted(path for path in paths if not (REPO / path).exists())
    assert not missing, f"docs/development.md names files that do not exist: {missing}"
