"""The chart's release metadata: Artifact Hub's annotations parse as Artifact Hub reads them and
agree with the chart and CHANGELOG.md."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHANGE_KINDS = {"added", "changed", "deprecated", "removed", "fixed", "security"}


def chart() -> dict[str, Any]:
    return dict(yaml.safe_load((ROOT / "chart" / "Chart.yaml").read_text()))


def annotation(name: str) -> Any:
    return yaml.safe_load(chart()["annotations"][f"artifacthub.io/{name}"])


def test_version_and_app_version_move_together_and_have_a_changelog_section() -> None:
    meta = chart()
    assert meta["version"] == meta["appVersion"]
    sections = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert sections and sections[0] == meta["version"], "the newest CHANGELOG section is the chart's version"


def test_the_changes_are_artifact_hub_change_entries() -> None:
    changes = annotation("changes")
    assert changes and all(set(c) == {"kind", "description"} and c["kind"] in CHANGE_KINDS for c in changes)


def test_the_image_listed_is_the_one_the_chart_installs_by_default() -> None:
    values = yaml.safe_load((ROOT / "chart" / "values.yaml").read_text())
    (image,) = annotation("images")
    assert image["image"] == f"{values['image']['repository']}:{chart()['appVersion']}"


def test_license_and_links() -> None:
    licence = (ROOT / "LICENSE").read_text()
    assert chart()["annotations"]["artifacthub.io/license"] == "Apache-2.0"
    assert "Apache License" in licence and "Version 2.0" in licence
    assert all(link["url"].startswith("https://") for link in annotation("links"))


def test_the_chart_ships_the_package_version() -> None:
    project = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{chart()["appVersion"]}"' in project
