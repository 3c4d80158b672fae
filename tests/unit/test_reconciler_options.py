"""reconciler.options: Go-style durations and command-line validation."""

from __future__ import annotations

import argparse
import dataclasses
import socket

import pytest

from ops.flags import duration, positive_int
from reconciler.options import parse
from reconciler.settings import ReconcilerSettings


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1m30s", 90.0),
        ("500ms", 0.5),
        ("30", 30.0),
        ("30s", 30.0),
        ("2.5", 2.5),
        ("1.5s", 1.5),
        ("1h", 3600.0),
        ("1h2m3s", 3723.0),
        ("1s500ms", 1.5),
        ("0", 0.0),
        ("0s", 0.0),
        (" 2m ", 120.0),
    ],
)
def test_duration_parses_go_style_and_plain_seconds(text, seconds):
    assert duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", " ", "abc", "s", "1x", "1m30", "m1", "1 m", "1m 30s", "-1s", "-5", "1d", "30sec"])
def test_duration_rejects_malformed_or_negative_text(text):
    with pytest.raises(argparse.ArgumentTypeError):
        duration(text)


@pytest.mark.parametrize("text", ["nan", "inf", "infinity", "-nan", "1e999"])
def test_duration_rejects_non_finite_values(text):
    """float() accepts these, a Go duration does not; an infinite or NaN timeout is never meant."""
    with pytest.raises(argparse.ArgumentTypeError):
        duration(text)


def test_positive_int_accepts_one():
    assert positive_int("1") == 1


@pytest.mark.parametrize("text", ["0", "-3"])
def test_positive_int_rejects_less_than_one(text):
    with pytest.raises(argparse.ArgumentTypeError):
        positive_int(text)


def test_duration_flags_are_parsed_into_seconds():
    settings = parse(
        ["--watch-idle-timeout", "1m30s", "--config-refresh-interval", "500ms", "--shutdown-timeout", "45"]
    )
    assert (settings.api.watch_idle_timeout, settings.config_refresh_interval, settings.shutdown_timeout) == (
        90.0,
        0.5,
        45.0,
    )


def test_lease_namespace_defaults_to_the_config_namespace():
    settings = parse(["--config-namespace", "resizer"])
    assert settings.leader_election.namespace == "resizer"


def test_explicit_lease_namespace_is_kept():
    settings = parse(["--config-namespace", "resizer", "--leader-election-namespace", "leases"])
    assert settings.leader_election.namespace == "leases"


def test_default_identity_is_hostname_with_a_random_suffix(monkeypatch):
    monkeypatch.delenv("POD_NAME", raising=False)
    first, second = parse([]).leader_election.identity, parse([]).leader_election.identity
    assert first.startswith(socket.gethostname() + "_")
    assert first != second


def test_default_identity_names_the_pod_when_the_chart_says_which(monkeypatch):
    """With hostNetwork the hostname is the node's: $POD_NAME (the chart's env) names the pod."""
    monkeypatch.setenv("POD_NAME", "workload-resizer-reconciler-5d8f-abcde")
    identity = parse([]).leader_election.identity
    assert identity.startswith("workload-resizer-reconciler-5d8f-abcde_") and len(identity.rsplit("_", 1)[1]) == 8


def test_renew_deadline_must_be_shorter_than_the_lease_duration(capsys):
    with pytest.raises(SystemExit) as exc:
        parse(["--leader-election-lease-duration", "10s", "--leader-election-renew-deadline", "10s"])
    assert exc.value.code == 2
    assert "renew-deadline" in capsys.readouterr().err


def test_renew_deadline_shorter_than_the_lease_duration_is_accepted():
    settings = parse(["--leader-election-lease-duration", "1m", "--leader-election-renew-deadline", "40s"])
    assert (settings.leader_election.lease_duration, settings.leader_election.renew_deadline) == (60.0, 40.0)


def test_a_malformed_duration_flag_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        parse(["--watch-idle-timeout", "soon"])
    assert exc.value.code == 2
    assert "invalid duration" in capsys.readouterr().err


def test_zero_concurrency_is_a_usage_error(capsys):
    with pytest.raises(SystemExit):
        parse(["--concurrency", "0"])
    assert "--concurrency" in capsys.readouterr().err


def test_defaults_describe_a_usable_configuration():
    settings = parse([])
    assert settings.leader_election.renew_deadline < settings.leader_election.lease_duration
    assert settings.api.qps > 0 and settings.api.burst >= 1 and settings.concurrency >= 1
    assert not settings.controller.dry_run and not settings.leader_election.enabled


def test_a_nan_lease_duration_is_a_usage_error_not_a_crash_at_election_time(capsys):
    """NaN slips past `renew deadline >= lease duration` and would only blow up in
    int(lease_duration) when the Lease is written."""
    with pytest.raises(SystemExit):
        parse(["--leader-election-lease-duration", "nan"])
    assert "invalid duration" in capsys.readouterr().err


def test_scope_flags_build_the_shared_namespace_scope(monkeypatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "wr-system")
    settings = parse(["--exclude-namespaces", "monitoring, batch", "--namespace-selector", "!skip"])
    assert settings.scope.excluded == {"kube-system", "wr-system", "monitoring", "batch"}
    assert settings.scope.selector_text() == "!skip"


def test_a_bad_namespace_selector_fails_fast(capsys) -> None:
    import pytest

    with pytest.raises(SystemExit):
        parse(["--namespace-selector", "a in ("])
    assert "unbalanced parentheses" in capsys.readouterr().err


def test_realignment_is_on_by_default_and_rate_limited() -> None:
    settings = parse([])
    assert settings.controller.realign is True and settings.controller.max_resizes_per_second == 10.0
    settings = parse(["--realign=false", "--max-resizes-per-second=0.5"])
    assert settings.controller.realign is False and settings.controller.max_resizes_per_second == 0.5


@pytest.mark.parametrize("flag", ["--realign=maybe", "--max-resizes-per-second=0", "--max-resizes-per-second=x"])
def test_bad_realignment_flags_fail_fast(flag: str) -> None:
    with pytest.raises(SystemExit):
        parse([flag])


def test_every_flag_defaults_to_the_settings_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flags' defaults are the settings' own: a default changed in one place is changed in both."""
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    parsed = parse([])
    default = ReconcilerSettings()
    assert dataclasses.replace(parsed, leader_election=dataclasses.replace(parsed.leader_election, identity="")) == (
        default
    )
