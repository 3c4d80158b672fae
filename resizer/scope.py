"""Which namespaces workload-resizer works in: one scope for the webhook and the reconciler.

A namespace is in scope when its name is not excluded (``kube-system`` and the product's own namespace
always are, ``--exclude-namespaces`` adds more) and its labels match the selector (``--namespace-selector``,
kubectl syntax; empty matches every namespace). The reconciler evaluates :meth:`NamespaceScope.includes`
per pod; the webhook cannot see namespace labels, so the apiserver applies the same scope for it
through the webhook configuration's ``namespaceSelector`` (:meth:`NamespaceScope.webhook_namespace_selector`),
and the webhook checks the names itself as a second line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from resizer.errors import ResizerError

ALWAYS_EXCLUDED = ("kube-system",)
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"

Operator = Literal["In", "NotIn", "Exists", "DoesNotExist"]

_KEY = r"(?:[a-z0-9A-Z](?:[-a-z0-9A-Z_.]*[a-z0-9A-Z])?/)?[a-z0-9A-Z](?:[-a-z0-9A-Z_.]{0,61}[a-z0-9A-Z])?"
_VALUE = r"(?:[a-z0-9A-Z](?:[-a-z0-9A-Z_.]{0,61}[a-z0-9A-Z])?)?"
_SET = re.compile(rf"\s*({_KEY})\s+(in|notin)\s+\(([^)]*)\)\s*")
_EQUALITY = re.compile(rf"\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*")
_EXISTS = re.compile(rf"\s*(!?)\s*({_KEY})\s*")
_VALUE_ONLY = re.compile(_VALUE)


class ScopeError(ResizerError):
    """A namespace list or selector that cannot be used."""


@dataclass(frozen=True)
class Requirement:
    """One label requirement, as in a Kubernetes ``matchExpressions`` entry."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "Exists":
            return self.key in labels
        if self.operator == "DoesNotExist":
            return self.key not in labels
        present = self.key in labels and labels[self.key] in self.values
        return present if self.operator == "In" else not present

    def expression(self) -> dict[str, Any]:
        entry: dict[str, Any] = {"key": self.key, "operator": self.operator}
        if self.operator in ("In", "NotIn"):
            entry["values"] = list(self.values)
        return entry

    def text(self) -> str:
        if self.operator == "Exists":
            return self.key
        if self.operator == "DoesNotExist":
            return f"!{self.key}"
        return f"{self.key} {self.operator.lower()} ({','.join(self.values)})"


@dataclass(frozen=True)
class NamespaceScope:
    """Excluded namespace names plus a selector the namespace's labels must match."""

    excluded: frozenset[str] = frozenset(ALWAYS_EXCLUDED)
    selector: tuple[Requirement, ...] = ()

    @property
    def needs_labels(self) -> bool:
        """Whether deciding needs the namespace's labels (a selector is set)."""
        return bool(self.selector)

    def includes(self, namespace: str, labels: Mapping[str, str] | None = None) -> bool:
        """Whether pods in ``namespace`` (with these labels) may be touched."""
        return self.exclusion(namespace, labels) is None

    def exclusion(self, namespace: str, labels: Mapping[str, str] | None = None) -> str | None:
        """Why ``namespace`` is out of scope (None: in scope)."""
        if namespace in self.excluded:
            return f"namespace {namespace} is excluded"
        if self.selector:
            if labels is None:
                return f"labels of namespace {namespace} unknown"
            full = {**labels, NAMESPACE_NAME_LABEL: namespace}
            for requirement in self.selector:
                if not requirement.matches(full):
                    return f"namespace {namespace} does not match {requirement.text()!r}"
        return None

    def webhook_namespace_selector(self) -> dict[str, Any]:
        """The MutatingWebhookConfiguration ``namespaceSelector`` for the same scope."""
        names = Requirement(NAMESPACE_NAME_LABEL, "NotIn", tuple(sorted(self.excluded)))
        return {"matchExpressions": [names.expression(), *(r.expression() for r in self.selector)]}

    def selector_text(self) -> str:
        """The selector in kubectl syntax (round-trips through :func:`parse_label_selector`)."""
        return ",".join(requirement.text() for requirement in self.selector)


def namespace_scope(
    own_namespace: str | None, exclude_namespaces: Iterable[str] = (), selector: str = ""
) -> NamespaceScope:
    """The scope from the programs' flags: kube-system and ``own_namespace`` are always excluded."""
    names = {name.strip() for name in exclude_namespaces if name.strip()}
    for name in names:
        if not _VALUE_ONLY.fullmatch(name) or len(name) > 63:
            raise ScopeError(f"invalid namespace name {name!r}")
    excluded = set(ALWAYS_EXCLUDED) | names | ({own_namespace} if own_namespace else set())
    return NamespaceScope(frozenset(excluded), parse_label_selector(selector))


def parse_label_selector(text: str) -> tuple[Requirement, ...]:
    """Parse a label selector in kubectl syntax: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``,
    ``a notin (x)``, ``a`` (exists), ``!a`` (does not exist), comma-separated (AND); raises :class:`ScopeError`."""
    return tuple(_requirement(part) for part in _split(text))


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise ScopeError(f"invalid selector {text!r}: unbalanced parentheses")
        elif char == "," and depth == 0:
            parts.append(text[start:index])
            start = index + 1
    if depth:
        raise ScopeError(f"invalid selector {text!r}: unbalanced parentheses")
    parts.append(text[start:])
    if len(parts) == 1 and not parts[0].strip():
        return []
    if any(not part.strip() for part in parts):
        raise ScopeError(f"invalid selector {text!r}: empty requirement")
    return parts


def _requirement(part: str) -> Requirement:
    if match := _SET.fullmatch(part):
        key, operator, raw = match.groups()
        values = tuple(value.strip() for value in raw.split(","))
        if any(not value or not _VALUE_ONLY.fullmatch(value) for value in values):
            raise ScopeError(f"invalid values in {part.strip()!r}")
        return Requirement(key, "In" if operator == "in" else "NotIn", values)
    if match := _EQUALITY.fullmatch(part):
        key, operator, value = match.groups()
        return Requirement(key, "NotIn" if operator == "!=" else "In", (value,))
    if match := _EXISTS.fullmatch(part):
        negated, key = match.groups()
        return Requirement(key, "DoesNotExist" if negated else "Exists")
    raise ScopeError(f"invalid label requirement {part.strip()!r}")
