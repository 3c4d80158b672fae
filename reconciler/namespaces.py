"""The namespace scope on the reconciler's side: names from the flags, labels from a
namespace informer (started only when the scope has a label selector)."""

from __future__ import annotations

from collections.abc import Callable

from kube import KubeClient
from kube.informer import Informer
from kube.slim import Obj
from resizer.scope import NamespaceScope


def slim_namespace(namespace: Obj) -> Obj:
    meta = namespace.get("metadata") or {}
    return {"metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {}}}


class ScopedNamespaces:
    """Answers "may this pod be touched?" with :class:`resizer.scope.NamespaceScope`; calls
    ``on_labels_changed(namespace)`` when a namespace appears or its labels change."""

    def __init__(
        self,
        client: KubeClient,
        scope: NamespaceScope,
        on_labels_changed: Callable[[str], None],
        idle_timeout: float = 90.0,
    ) -> None:
        self.scope = scope
        self._on_labels_changed = on_labels_changed
        self.informer: Informer | None = None
        if scope.needs_labels:
            self.informer = Informer(
                client, "namespaces", "/api/v1/namespaces", slim_namespace, self._on_event, idle_timeout=idle_timeout
            )

    def includes(self, pod: Obj) -> bool:
        namespace = pod["metadata"].get("namespace") or ""
        if namespace in self.scope.excluded:
            return False
        if self.informer is None:
            return True
        cached = self.informer.store.get(namespace)
        return cached is not None and self.scope.includes(namespace, cached["metadata"]["labels"])

    def _on_event(self, kind: str, namespace: Obj, old: Obj | None) -> None:
        if kind != "DELETED" and (old is None or old["metadata"]["labels"] != namespace["metadata"]["labels"]):
            self._on_labels_changed(namespace["metadata"]["name"])
