"""python -m app: flags and their parsing."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.__main__ import build_parser
from ops.flags import byte_size as parse_size
from ops.flags import duration as parse_duration

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10), ("500ms", 0.5), ("1m30s", 90), ("2h", 7200), ("1.5s", 1.5), ("0", 0), ("3", 3), ("250us", 0.00025)],
)
def test_durations_parse_go_style(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["s", "10 s", "-1s", "1d", "ms10", "abc", ""])
def test_bad_durations_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("3MiB", 3 << 20),
        ("3Mi", 3 << 20),
        ("512KiB", 512 << 10),
        ("4194304", 4194304),
        ("3MB", 3_000_000),
        ("1 GiB", 1 << 30),
    ],
)
def test_sizes_parse(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "0", "3XB", "-1", "lots"])
def test_bad_sizes_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size(text)


def test_defaults():
    args = build_parser().parse_args(["--tls-cert-file", "c", "--tls-key-file", "k"])
    assert args.bind_address == "0.0.0.0" and args.port == 8443 and args.tls_min_version == "1.2"
    assert args.cert_reload_interval == 10 and args.max_request_bytes == 4 << 20
    assert args.log_format == "json" and args.log_level == "info" and args.log_flush_interval == 0.1
    assert args.http_keep_alive_timeout == 120 and args.shutdown_timeout == 20
    assert args.large_review_workers == 1 and args.large_review_timeout == 2
    assert args.http_read_timeout == 3 and args.max_connections == 1024 and args.max_inflight_reviews == 32


@pytest.mark.parametrize(
    "flags", [["--large-review-workers", "-1"], ["--large-review-timeout", "0"], ["--large-review-workers", "two"]]
)
def test_bad_large_review_flags_fail_fast(flags):
    r = subprocess.run(
        [sys.executable, "-m", "app", "--tls-cert-file", "c", "--tls-key-file", "k", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "--large-review" in r.stderr


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--http-read-timeout", "0"], "--http-read-timeout"),
        (["--max-connections", "0"], "--max-connections"),
        (["--max-inflight-reviews", "-1"], "--max-inflight-reviews"),
    ],
)
def test_bad_connection_limits_fail_fast(flags, named):
    r = subprocess.run(
        [sys.executable, "-m", "app", "--tls-cert-file", "c", "--tls-key-file", "k", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and named in r.stderr


def test_help_documents_every_flag():
    r = subprocess.run([sys.executable, "-m", "app", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0
    for flag in (
        "--bind-address",
        "--port",
        "--tls-cert-file",
        "--tls-key-file",
        "--tls-min-version",
        "--cert-reload-interval",
        "--max-request-bytes",
        "--log-level",
        "--log-format",
        "--http-keep-alive-timeout",
        "--shutdown-timeout",
        "--log-flush-interval",
        "--large-review-workers",
        "--large-review-timeout",
        "--http-read-timeout",
        "--max-connections",
    ):
        assert flag in r.stdout


def test_certificate_flags_are_required():
    with pytest.raises(SystemExit):
        build_parser().parse_args([])


def test_sizes_at_admission_by_default_as_the_chart_does():
    """One default for the webhook and the chart's webhook.sizeAtAdmission: on."""
    args = build_parser().parse_args(["--tls-cert-file", "c", "--tls-key-file", "k"])
    assert args.size_at_admission is True
    assert (
        build_parser()
        .parse_args(["--tls-cert-file", "c", "--tls-key-file", "k", "--size-at-admission=false"])
        .size_at_admission
        is False
    )


def _without_apiserver(tmp_path: Path) -> dict[str, str]:
    """No in-cluster service account, no $KUBECONFIG, a home without ~/.kube/config."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
    }
    return {**env, "HOME": str(tmp_path)}


def test_sizing_without_the_apiserver_fails_fast_naming_the_way_out(tmp_path):
    """Sizing at admission (the default) needs the apiserver: without a kubeconfig or an
    in-cluster service account the webhook refuses to start, and says how to stamp only."""
    r = subprocess.run(
        [sys.executable, "-m", "app", "--tls-cert-file", "c", "--tls-key-file", "k"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=_without_apiserver(tmp_path),
    )
    assert r.returncode == 2, r.stderr
    assert "--size-at-admission=false" in r.stderr and "--kubeconfig" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_kubeconfig_that_cannot_be_read_fails_fast(tmp_path):
    missing = tmp_path / "nowhere.kubeconfig"
    r = subprocess.run(
        [sys.executable, "-m", "app", "--tls-cert-file", "c", "--tls-key-file", "k", f"--kubeconfig={missing}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=_without_apiserver(tmp_path),
    )
    assert r.returncode == 2 and str(missing) in r.stderr and "--size-at-admission=false" in r.stderr
    assert "Traceback" not in r.stderr
