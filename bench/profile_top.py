#!/usr/bin/env python3
"""Top entries of a py-spy raw profile (collapsed stacks: `frame;frame;... count` per line).

    .venv/bin/python bench/profile_top.py PROFILE [--top 25]

Prints the share of samples by self frame (where the CPU was spent) and by inclusive
frame (what it was spent under), plus a few named groups (HTTP client, imports at run
time, Events, the watch path, logging, the pure core).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

GROUPS = {
    "HTTP client (kube/client.py + library)": re.compile(
        r"\((?:kube/client\.py|kube/transport\.py|.*httpx/|.*httpcore/|.*anyio/|.*h11/|.*aiohttp/)"
    ),
    "importlib at run time": re.compile(r"<frozen importlib"),
    "Events (kube/events.py)": re.compile(r"\(kube/events\.py"),
    "watch path (informer + slim)": re.compile(r"\(kube/(?:informer|slim)\.py"),
    "logging": re.compile(r"logging/__init__\.py|ops/jsonlog\.py"),
    "pure core (resizer/)": re.compile(r"\(resizer/"),
    "TLS (ssl / sslproto)": re.compile(r"ssl\.py|sslproto\.py"),
}

_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^:()]*)(?::(?P<line>\d+))?\)$")


def _short(frame: str) -> str:
    match = _FRAME.match(frame.strip())
    if not match:
        return frame.strip()
    path = match["file"]
    for marker in ("site-packages/", "lib/python3.11/", "/i15/", "/wt/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{match['func']} ({path})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("profile")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    groups: Counter[str] = Counter()
    total = 0
    for line in Path(args.profile).read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f and not f.startswith("process ") and not f.startswith("thread ")]
        if not frames:
            continue
        total += count
        own[_short(frames[-1])] += count
        for frame in {_short(f) for f in frames}:
            inclusive[frame] += count
        for name, pattern in GROUPS.items():
            if any(pattern.search(f) for f in frames):
                groups[name] += count
    if not total:
        print("no samples", file=sys.stderr)
        return 1
    print(f"{total} samples")
    print("\ngroups (inclusive):")
    for name, count in groups.most_common():
        print(f"  {100 * count / total:5.1f}%  {name}")
    print(f"\ntop {args.top} self frames:")
    for frame, count in own.most_common(args.top):
        print(f"  {100 * count / total:5.1f}%  {frame}")
    print(f"\ntop {args.top} inclusive frames:")
    for frame, count in inclusive.most_common(args.top):
        print(f"  {100 * count / total:5.1f}%  {frame}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
