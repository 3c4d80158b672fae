"""The flag families the programs share: each parses alike wherever a program adds it."""

from __future__ import annotations

import argparse

import pytest

from app.__main__ import build_parser as webhook_parser
from commands.cli import build_parser as commands_parser
from ops.flags import is_namespaced_name, log_flags, scope_flags
from ops.jsonlog import LEVELS
from reconciler.options import build_parser as reconciler_parser

HELPS = {"--namespace-selector": "selector", "--namespace": "own", "--exclude-namespaces": "excluded"}


def options(parser: argparse.ArgumentParser) -> list[str]:
    return [option for action in parser._actions for option in action.option_strings if option != "-h"]


def test_scope_flags_come_in_the_order_of_their_help_texts() -> None:
    parser = argparse.ArgumentParser(add_help=False)
    scope_flags(parser, HELPS)
    assert options(parser) == list(HELPS)
    assert [action.help for action in parser._actions] == list(HELPS.values())


def test_the_own_namespace_defaults_to_pod_namespace_when_the_flags_are_added(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "first")
    parser = argparse.ArgumentParser()
    scope_flags(parser, HELPS)
    monkeypatch.setenv("POD_NAMESPACE", "second")
    args = parser.parse_args([])
    assert (args.namespace, args.exclude_namespaces, args.namespace_selector) == ("first", [], "")


def test_the_own_namespace_takes_a_program_s_default_and_metavar() -> None:
    parser = argparse.ArgumentParser()
    scope_flags(parser, HELPS, default="resizer", metavar=None)
    assert parser.parse_args([]).namespace == "resizer"
    assert "--namespace NAMESPACE" in parser.format_help()


def test_every_program_parses_the_scope_alike() -> None:
    scope = ["--namespace", "own", "--exclude-namespaces", "a, b,,c", "--namespace-selector", "team=x"]
    parsed = [
        reconciler_parser().parse_args(scope),
        webhook_parser().parse_args(["--tls-cert-file=c", "--tls-key-file=k", *scope]),
        commands_parser().parse_args(["plan", *scope]),
        commands_parser().parse_args(["restore", *scope]),
    ]
    assert {(a.namespace, tuple(a.exclude_namespaces), a.namespace_selector) for a in parsed} == {
        ("own", ("a", "b", "c"), "team=x")
    }


def test_every_log_level_offered_is_one_configure_logging_takes() -> None:
    parser = argparse.ArgumentParser()
    log_flags(parser, "info", "json")
    (level,) = [action for action in parser._actions if action.dest == "log_level"]
    assert level.choices and set(level.choices) <= set(LEVELS)
    with pytest.raises(SystemExit):
        parser.parse_args(["--log-format", "yaml"])


@pytest.mark.parametrize(
    ("text", "namespaced"),
    [("ns/name", True), ("name", False), ("/name", False), ("ns/", False), ("a/b/c", False), ("", False)],
)
def test_a_namespaced_name_has_both_parts(text: str, namespaced: bool) -> None:
    assert is_namespaced_name(text) is namespaced
