"""What the webhook needs to size pods at admission: the node types and the config, from watches.

:class:`ClusterView` lists and watches the nodes (their node-type label only) and the config
ConfigMap, and the LimitRanges (a size one would refuse is not given at CREATE), through
``reconciler.kube`` (the product's Kubernetes client; the one import of the
reconciler package the webhook makes, see pyproject.toml). An invalid config keeps the last
good one in force, as in the reconciler. :class:`SizingContext` is an immutable snapshot of
both, versioned: the review workers receive it only when its version changed, so a review never
costs an API call nor a copy of the node table. Any failure here leaves reviews on today's path
(stamp only): a missing view never blocks a pod.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from reconciler.kube import KubeClient
from reconciler.kube.informer import Informer
from resizer import CompiledConfig, ConfigError, load_config

log = logging.getLogger("workload_resizer.webhook")

CONFIG_KEY = "config.yaml"


class SizingContext:
    """The node table (node name -> node-type label value), the LimitRanges by namespace and the
    config in force, as of ``version``.

    Pickled as its config text (a compiled config holds read-only mappings pickle refuses) and
    compiled again once per version by the receiving review worker."""

    __slots__ = ("version", "label", "nodes", "config_text", "config", "dry_run", "limit_ranges")

    def __init__(self, version: int, label: str, nodes: Mapping[str, str | None], config_text: str,
                 config: CompiledConfig | None = None, dry_run: bool = False,
                 limit_ranges: Mapping[str, tuple[dict[str, Any], ...]] | None = None) -> None:
        self.version = version
        self.label = label
        self.nodes = nodes
        self.config_text = config_text
        self.config = config if config is not None else load_config(config_text)
        self.dry_run = dry_run
        self.limit_ranges = limit_ranges if limit_ranges is not None else {}    # namespace -> its LimitRanges

    def __getstate__(self) -> tuple[Any, ...]:
        return self.version, self.label, dict(self.nodes), self.config_text, self.dry_run, dict(self.limit_ranges)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        version, label, nodes, text, dry_run, limit_ranges = state
        self.__init__(version, label, MappingProxyType(nodes), text, None, dry_run,  # type: ignore[misc]
                      MappingProxyType(limit_ranges))


def slim_limit_range(limit_range: dict[str, Any]) -> dict[str, Any]:
    meta = limit_range.get("metadata") or {}
    return {"metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                         "resourceVersion": meta.get("resourceVersion")}, "spec": limit_range.get("spec") or {}}


def slim_node_labels(node: dict[str, Any]) -> dict[str, Any]:
    """A node reduced to its name, resourceVersion and labels (what the webhook reads)."""
    meta = node.get("metadata") or {}
    return {"metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion"),
                         "labels": meta.get("labels") or {}}}


class ClusterView:
    """Nodes and the config ConfigMap, watched; :attr:`context` is None until both are known."""

    def __init__(self, client: KubeClient, config_namespace: str, config_name: str, label: str,
                 dry_run: bool = False, idle_timeout: float = 90.0) -> None:
        self.label = label
        self.dry_run = dry_run
        self.config_namespace = config_namespace
        self.config_name = config_name
        self._client = client
        self._types: dict[str, str | None] = {}
        self._config: CompiledConfig | None = None
        self._config_text = ""
        self._config_digest: str | None = None
        self._version = 0
        self._context: SizingContext | None = None
        self._dirty = True
        self.nodes = Informer(client, "nodes", "/api/v1/nodes", slim_node_labels, self._on_node,
                              idle_timeout=idle_timeout)
        self.limitranges = Informer(client, "limitranges", "/api/v1/limitranges", slim_limit_range,
                                    lambda kind, obj, old: self._changed(), idle_timeout=idle_timeout)
        self.configmaps = Informer(
            client, "configmaps", f"/api/v1/namespaces/{config_namespace}/configmaps", slim=lambda cm: cm,
            handler=self._on_configmap, params={"fieldSelector": f"metadata.name={config_name}"},
            idle_timeout=idle_timeout)

    @property
    def context(self) -> SizingContext | None:
        """The current snapshot (rebuilt after a change, at most once per change)."""
        if self._dirty:
            self._dirty = False
            if self._config is None or not self.nodes.synced.is_set() or not self.limitranges.synced.is_set():
                self._context = None
            else:
                self._version += 1
                by_namespace: dict[str, list[dict[str, Any]]] = {}
                for limit_range in self.limitranges.store.values():
                    by_namespace.setdefault(str(limit_range["metadata"].get("namespace")), []).append(limit_range)
                self._context = SizingContext(self._version, self.label, MappingProxyType(dict(self._types)),
                                              self._config_text, self._config, self.dry_run,
                                              MappingProxyType({ns: tuple(lrs) for ns, lrs in by_namespace.items()}))
        return self._context

    async def run(self) -> None:
        """Watch until cancelled (the informers resume and re-list on their own)."""
        await asyncio.gather(self.nodes.run(), self.limitranges.run(), self.configmaps.run())

    def _changed(self) -> None:
        self._dirty = True

    def _on_node(self, kind: str, node: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED":
            self._types.pop(name, None)
        else:
            node_type = node["metadata"]["labels"].get(self.label)
            if name in self._types and self._types[name] == node_type:
                return
            self._types[name] = node_type if isinstance(node_type, str) else None
        self._dirty = True

    def _on_configmap(self, kind: str, configmap: dict[str, Any], old: dict[str, Any] | None) -> None:
        self.apply_config(None if kind == "DELETED" else configmap)

    def apply_config(self, configmap: dict[str, Any] | None) -> None:
        """Take a new ConfigMap content into force if it is valid; else keep the last good config."""
        data = (configmap or {}).get("data") or {}
        text = data.get(CONFIG_KEY) if isinstance(data, dict) else None
        where = f"{self.config_namespace}/{self.config_name}"
        if not isinstance(text, str):
            log.warning("no config to size pods at admission with; keeping the last good one",
                        extra={"configmap": where, "present": configmap is not None})
            return
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest == self._config_digest:
            return
        self._config_digest = digest
        try:
            config = load_config(text)
        except ConfigError as err:
            log.error("invalid config; sizing at admission keeps the last good one", extra={
                "configmap": where, "errors": [{"field": p, "error": m} for p, m in err.errors]})
            return
        self._config, self._config_text, self._dirty = config, text, True
        log.info("config loaded for sizing at admission", extra={"configmap": where,
                                                                  "nodeTypes": sorted(config.node_types)})


async def watch_cluster(view: ClusterView) -> None:
    """Run the view; a failure of the watches is logged and retried, never raised."""
    delay = 1.0
    while True:
        try:
            await view.run()
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - sizing at admission is best effort: never ends the webhook
            log.error("cluster view for sizing at admission failed; retrying", extra={"error": repr(err)})
            await asyncio.sleep(delay)
            delay = min(delay * 2, 30.0)
