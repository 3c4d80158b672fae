#!/usr/bin/env python3
"""Render a webhook-config template: ``render.py TEMPLATE NAME=VALUE ...`` -> stdout.

    python webhook-config/render.py webhook-config/static-cabundle.yaml CA_BUNDLE="$(cat ca.b64)" | kubectl apply -f -

Fails (exit 1) if a placeholder is left, a value is missing or unused, or the
result is not a valid MutatingWebhookConfiguration. The logic is
``certs.manifest.render`` (importable, tested).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from certs.manifest import RenderError, render_file  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) < 1 or argv[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    values = {}
    for arg in argv[1:]:
        name, sep, value = arg.partition("=")
        if not sep:
            print(f"error: expected NAME=VALUE, got {arg!r}", file=sys.stderr)
            return 2
        values[name] = value.strip()
    try:
        sys.stdout.write(render_file(argv[0], values))
    except (OSError, RenderError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
