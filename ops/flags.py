"""Command-line value types shared by the webhook's and the reconciler's flags."""
from __future__ import annotations

import argparse
import math
import re

_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def duration(text: str) -> float:
    """Seconds from a Go-style duration (`10s`, `500ms`, `1m30s`) or a plain number of seconds.

    Negative, NaN and infinite values are rejected (they would only fail later, at use).
    """
    s = text.strip()
    try:
        value = float(s)
    except ValueError:
        pos, value = 0, 0.0
        for match in _DURATION_PART.finditer(s):
            if match.start() != pos:
                break
            value += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
            pos = match.end()
        if pos != len(s) or not s:
            raise argparse.ArgumentTypeError(f"invalid duration {text!r} (examples: 10s, 500ms, 1m)") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (examples: 10s, 500ms, 1m)")
    if value < 0:
        raise argparse.ArgumentTypeError(f"duration {text!r} must not be negative")
    return value
