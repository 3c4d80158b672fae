"""What the webhook needs to size pods at admission, from watches.

:class:`ClusterView` watches the nodes (their node-type label only), the config ConfigMap (an
invalid one keeps the last good one in force), the LimitRanges (a size one would refuse is not
given at CREATE) and, where served, the VerticalPodAutoscalers (a pod an updating one may manage
is not sized). :class:`SizingContext` is an immutable snapshot, sent to the review workers only
when its version changed: a review never costs an API call. Any failure leaves pods stamped only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from kube import KubeClient
from kube.discovery import ServedInformers
from kube.informer import Informer, object_informer
from kube.slim import slim_limit_range, slim_node
from ops.probes import Check
from resizer import CompiledConfig, ConfigError, load_config
from resizer.config import config_text
from resizer.vpa import GROUP_VERSION_PATH, RESOURCE, Owner, VpaIndex, slim_vpa, vpa_index

log = logging.getLogger("workload_resizer.webhook")

# How often the VPA CRD is looked up again (the reconciler's default --config-refresh-interval).
VPA_RECHECK_INTERVAL = 30.0


class SizingContext:
    """The node table (node name -> node-type label value), LimitRanges and updating VPAs' targets
    (:func:`resizer.vpa.vpa_index`) by namespace, and the config in force, as of ``version``.
    Pickled as its config text (pickle refuses a compiled config's read-only mappings), compiled
    again once per version by the receiving review worker."""

    __slots__ = ("version", "label", "nodes", "config_text", "config", "dry_run", "limit_ranges", "vpas")

    def __init__(
        self,
        version: int,
        label: str,
        nodes: Mapping[str, str | None],
        config_text: str,
        config: CompiledConfig | None = None,
        dry_run: bool = False,
        limit_ranges: Mapping[str, tuple[dict[str, Any], ...]] | None = None,
        vpas: VpaIndex | None = None,
    ) -> None:
        self.version = version
        self.label = label
        self.nodes = nodes
        self.config_text = config_text
        self.config = config if config is not None else load_config(config_text)
        self.dry_run = dry_run
        self.limit_ranges = limit_ranges if limit_ranges is not None else {}  # namespace -> its LimitRanges
        self.vpas: VpaIndex = vpas if vpas is not None else {}

    def __getstate__(self) -> tuple[Any, ...]:
        return (
            self.version,
            self.label,
            dict(self.nodes),
            self.config_text,
            self.dry_run,
            dict(self.limit_ranges),
            {namespace: dict(targets) for namespace, targets in self.vpas.items()},
        )

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        version, label, nodes, text, dry_run, limit_ranges, vpas = state
        init = SizingContext.__init__
        init(self, version, label, MappingProxyType(nodes), text, None, dry_run, MappingProxyType(limit_ranges), vpas)


class ClusterView:
    """Nodes, LimitRanges, the config ConfigMap and (``skip_vpa_managed``) the VerticalPodAutoscalers,
    watched; :attr:`context` is None until all are known. As in the reconciler, the VPA CRD is looked
    up at start and every ``VPA_RECHECK_INTERVAL`` (installed later, its VPAs are watched from then
    on; removed, none holds a pod); until discovery answers and a served CRD's VPAs are listed,
    there is no context: pods are stamped only, never sized past a VPA."""

    def __init__(
        self,
        client: KubeClient,
        config_namespace: str,
        config_name: str,
        label: str,
        dry_run: bool = False,
        skip_vpa_managed: bool = True,
    ) -> None:
        self.label = label
        self.dry_run = dry_run
        self._configmap_name = f"{config_namespace}/{config_name}"  # (for the log)
        self.skip_vpa_managed = skip_vpa_managed
        self._types: dict[str, str | None] = {}
        self._config: CompiledConfig | None = None
        self._config_text = ""
        self._config_seen: str | None = None  # the last text read, valid or not
        self._version = 0
        self._context: SizingContext | None = None
        self._dirty = True
        self.nodes = Informer(client, "nodes", "/api/v1/nodes", slim_node, self._on_node)
        self.limitranges = Informer(client, "limitranges", "/api/v1/limitranges", slim_limit_range, self._changed)
        self.configmaps = object_informer(client, "configmaps", config_namespace, config_name, self._on_configmap)
        self.vpa_discovery = ServedInformers(
            client,
            GROUP_VERSION_PATH,
            RESOURCE,
            slim_vpa,
            self._on_vpa,
            self._vpas_served_changed,
            log,
            "VerticalPodAutoscaler",
            found="VerticalPodAutoscaler CRD found: pods an updating VPA may manage are not sized at admission",
            gone="VerticalPodAutoscaler CRD gone: no pod is held from sizing at admission for a VPA any more",
            recheck_interval=VPA_RECHECK_INTERVAL,
        )
        if not skip_vpa_managed:
            self.vpa_discovery.served = False  # nothing to look up: known at once, never served
        self._vpa_index: dict[str, dict[Owner, tuple[str, str]]] = {}
        self._vpas_changed = False  # the index is rebuilt with the next context, not per event

    @property
    def context(self) -> SizingContext | None:
        """The current snapshot (rebuilt at most once per change, once the watches have listed)."""
        if self._context is not None and not self._dirty:
            return self._context
        self._dirty = False
        if self._config is None or not self._synced():
            self._context = None
            return None
        vpas = self.vpa_discovery.informer
        if self._vpas_changed and vpas is not None:
            self._vpa_index, self._vpas_changed = vpa_index(vpas.store.values()), False
        self._version += 1
        by_namespace: dict[str, list[dict[str, Any]]] = {}
        for limit_range in self.limitranges.store.values():
            by_namespace.setdefault(str(limit_range["metadata"].get("namespace")), []).append(limit_range)
        self._context = SizingContext(
            self._version,
            self.label,
            MappingProxyType(dict(self._types)),
            self._config_text,
            self._config,
            self.dry_run,
            MappingProxyType({ns: tuple(lrs) for ns, lrs in by_namespace.items()}),
            self._vpa_index,
        )
        return self._context

    def _synced(self) -> bool:
        return self.nodes.synced.is_set() and self.limitranges.synced.is_set() and self.vpa_discovery.synced

    @property
    def listed(self) -> bool:
        """Every watch has listed: what the cluster holds (a config, or that none is valid) is known."""
        return self._synced() and self.configmaps.synced.is_set()

    async def run(self) -> None:
        """Watch until cancelled (the informers resume and re-list on their own)."""
        await asyncio.gather(
            self.nodes.run(),
            self.limitranges.run(),
            self.configmaps.run(),
            *([self.vpa_discovery.run()] if self.skip_vpa_managed else []),
        )

    def _vpas_served_changed(self, was: bool | None) -> None:
        if not self.vpa_discovery.served:
            self._vpa_index, self._vpas_changed = {}, False
        self._dirty = True

    def _on_vpa(self, kind: str, vpa: dict[str, Any], old: dict[str, Any] | None) -> None:
        if old is not None and kind != "DELETED" and old["spec"] == vpa["spec"]:
            return  # (a VPA's recommendation is in its status, updated often)
        self._vpas_changed = self._dirty = True

    def _changed(self, kind: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
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
        text = config_text(configmap)
        if text is None:
            log.warning(
                "no config to size pods at admission with; keeping the last good one",
                extra={"configmap": self._configmap_name, "present": configmap is not None},
            )
            return
        if text == self._config_seen:
            return
        self._config_seen = text
        try:
            config = load_config(text)
        except ConfigError as err:
            log.error(
                "invalid config; sizing at admission keeps the last good one",
                extra={"configmap": self._configmap_name, "errors": [{"field": p, "error": m} for p, m in err.errors]},
            )
            return
        self._config, self._config_text, self._dirty = config, text, True
        log.info(
            "config loaded for sizing at admission",
            extra={"configmap": self._configmap_name, "nodeTypes": sorted(config.node_types)},
        )


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


def sizing_readiness(
    view: Callable[[], ClusterView | None], timeout: float, clock: Callable[[], float] = time.monotonic
) -> Check:
    """/readyz's ``sizing`` check: failing until every watch of ``view()`` has listed, for at most
    ``timeout`` seconds from now, so a replica starting in a rolling update takes reviews once it
    can size pods, yet a view that never lists (RBAC, the network) cannot keep it out of service."""
    deadline = clock() + timeout
    warned = False

    def check() -> tuple[bool, str]:
        nonlocal warned
        cluster = view()
        if cluster is not None and cluster.listed:
            return True, "nodes, config, LimitRanges and VPAs listed"
        if clock() < deadline:
            return False, "nodes, config, LimitRanges and VPAs not all listed yet"
        if not warned:
            warned = True
            log.warning(
                "sizing at admission not ready; serving anyway: pods are stamped only until it is",
                extra={"sizing_ready_timeout_s": timeout},
            )
        return True, f"not all listed after {timeout:g}s: pods are stamped only until they are"

    return check
