"""JSON patches (RFC 6902) as the webhook writes them, applied the way the apiserver would."""

from __future__ import annotations

import copy
from typing import Any


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """Minimal RFC 6902 add/remove on objects (and on list members by index, e.g. a container's
    resources), strict like the apiserver's."""
    doc = copy.deepcopy(doc)
    for op in ops:
        tokens = [_unescape(t) for t in op["path"].split("/")[1:]]
        parent = doc
        for t in tokens[:-1]:
            # KeyError/IndexError = patch would fail in the apiserver
            parent = parent[int(t)] if isinstance(parent, list) else parent[t]
        last: Any = int(tokens[-1]) if isinstance(parent, list) else tokens[-1]
        if op["op"] == "add" and isinstance(parent, list):
            parent.insert(last, copy.deepcopy(op["value"]))
        elif op["op"] == "add":
            parent[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del parent[last]
        else:
            raise AssertionError(f"unexpected patch operation: {op}")
    return doc
