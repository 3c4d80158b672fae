"""Render the ``webhook-config/`` templates: ``${NAME}`` placeholders, nothing else.

``render(text, values)`` substitutes every ``${NAME}`` and refuses to return a
manifest with a placeholder left, a value that would break the YAML (newlines,
quotes, ``#``...), or a result that is not a MutatingWebhookConfiguration whose
substituted fields read back exactly as given.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import yaml

from certs.errors import CertsError

PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SAFE_VALUE = re.compile(r"[A-Za-z0-9+/=:._\-\[\]@%?&~]+")


class RenderError(CertsError, ValueError):
    pass


def placeholders(text: str) -> set[str]:
    return set(PLACEHOLDER.findall(text))


def render(text: str, values: Mapping[str, str]) -> str:
    wanted = placeholders(text)
    if missing := sorted(wanted - set(values)):
        raise RenderError(f"no value for placeholder(s): {', '.join(missing)}")
    if unused := sorted(set(values) - wanted):
        raise RenderError(f"template has no placeholder(s): {', '.join(unused)}")
    for name, value in values.items():
        if not isinstance(value, str) or not _SAFE_VALUE.fullmatch(value):
            raise RenderError(f"value of {name} is empty or has characters not allowed in a plain YAML scalar")
    out = PLACEHOLDER.sub(lambda m: values[m.group(1)], text)
    left = placeholders(out)
    if left or "${" in out:
        raise RenderError(f"placeholder(s) left after rendering: {', '.join(sorted(left)) or '${'}")
    doc = yaml.safe_load(out)
    _check(doc, values)
    return out


def _check(doc: Any, values: Mapping[str, str]) -> None:
    if not isinstance(doc, dict) or doc.get("kind") != "MutatingWebhookConfiguration":
        raise RenderError("rendered document is not a MutatingWebhookConfiguration")
    for hook in doc.get("webhooks") or []:
        cc = hook.get("clientConfig") or {}
        if "CA_BUNDLE" in values and cc.get("caBundle") != values["CA_BUNDLE"]:
            raise RenderError("caBundle does not read back as given")
        if "WEBHOOK_URL" in values:
            if cc.get("url") != values["WEBHOOK_URL"]:
                raise RenderError("url does not read back as given")
            if not values["WEBHOOK_URL"].startswith("https://"):
                raise RenderError("WEBHOOK_URL must be an https:// URL")


def render_file(path: str, values: Mapping[str, str]) -> str:
    with open(path, encoding="utf-8") as f:
        return render(f.read(), values)
