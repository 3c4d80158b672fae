"""Command-line value types and the flag families the programs share (the only place for them)."""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Mapping
from typing import Any

_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION = re.compile(f"(?:{_DURATION_PART.pattern})+")


def duration(text: str) -> float:
    """Seconds from a Go-style duration (`10s`, `500ms`, `1m30s`) or a plain number of seconds.
    Negative, NaN and infinite values are rejected (they would only fail later, at use)."""
    s = text.strip()
    try:
        value = float(s)
    except ValueError:
        if not _DURATION.fullmatch(s):
            raise argparse.ArgumentTypeError(f"invalid duration {text!r} (examples: 10s, 500ms, 1m)") from None
        value = sum(float(number) * _DURATION_UNITS[unit] for number, unit in _DURATION_PART.findall(s))
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (examples: 10s, 500ms, 1m)")
    if value < 0:
        raise argparse.ArgumentTypeError(f"duration {text!r} must not be negative")
    return value


_SIZE_UNITS = {"": 1, "b": 1} | {  # k, kb, ki, kib, m, ... (matched lowercased)
    prefix + suffix: base**power
    for power, letter in enumerate("kmg", 1)
    for base, prefix in ((1000, letter), (1024, letter + "i"))
    for suffix in ("", "b")
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")


def byte_size(text: str) -> int:
    """A positive byte size: ``3145728``, ``3MiB``, ``3Mi``, ``512KiB``, ``3MB`` -> bytes."""
    m = _SIZE.fullmatch(text)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (examples: 3MiB, 4194304, 512KiB)")
    value = int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    if value <= 0:
        raise argparse.ArgumentTypeError("size must be positive")
    return value


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def positive_float(text: str) -> float:
    """A finite number greater than 0 (rates)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a positive number")
    return value


def boolean(text: str) -> bool:
    """Go-style boolean flag value: true/false (also 1/0, yes/no)."""
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a boolean (true or false)")


def string_list(text: str) -> list[str]:
    """``a,b,c`` -> ["a", "b", "c"] (blanks dropped)."""
    return [item.strip() for item in text.split(",") if item.strip()]


def scope_flags(group: argparse._ActionsContainer, helps: Mapping[str, str], **namespace: Any) -> None:
    """Add the namespace scope's flags to `group`, in the order of `helps` (flag -> help text: each
    program says what the scope means to it). `--namespace` defaults to $POD_NAMESPACE, read now;
    `namespace` overrides its arguments (its default, its metavar)."""
    specs: dict[str, dict[str, Any]] = {
        "--namespace": {"default": os.environ.get("POD_NAMESPACE", ""), "metavar": "NS", **namespace},
        "--exclude-namespaces": {"type": string_list, "default": [], "metavar": "NS[,NS...]"},
        "--namespace-selector": {"default": "", "metavar": "SELECTOR"},
    }
    for flag, text in helps.items():
        group.add_argument(flag, help=text, **specs[flag])


def log_flags(
    group: argparse._ActionsContainer, level: str, fmt: str, level_help: str | None = None, fmt_help: str | None = None
) -> None:
    """Add `--log-level` and `--log-format` (what :func:`ops.jsonlog.configure_logging` takes) to `group`."""
    group.add_argument("--log-level", default=level, choices=("debug", "info", "warning", "error"), help=level_help)
    group.add_argument("--log-format", default=fmt, choices=("json", "text"), help=fmt_help)


def is_namespaced_name(text: str) -> bool:
    return text.count("/") == 1 and all(text.split("/"))
