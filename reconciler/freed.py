"""What the product freed, as metrics: the managed pods' requests summed per node type, as
authored (their baseline's originals) and as now, computed from the caches when scraped.

One series per resource x node type x state (no per-pod series). The pods counted are those the
reconciler manages with a trusted baseline: the same decisions as `plan` and `report`
(:func:`resizer.forecast.forecast_fleet`), over the pods and nodes the reconciler has cached.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import fields

from reconciler.ports import Obj
from resizer import KeyRing, node_resizes_pod_level
from resizer.config import CompiledConfig
from resizer.forecast import RequestTotals, forecast_fleet, managed_requests
from resizer.scope import NamespaceScope

EVERY_NAMESPACE = NamespaceScope(excluded=frozenset())  # the pods given are already in scope


def requests_by_node_type(
    pods: Iterable[Obj],
    node_types: Mapping[str, str | None],
    config: CompiledConfig,
    keyring: KeyRing,
    resize_restart_containers: bool = False,
    pod_level_nodes: Collection[str] = frozenset(),
) -> dict[str, RequestTotals]:
    """The managed pods' requests per node type (``pods``: bound pods already in the namespace scope;
    ``pod_level_nodes``: the nodes that resize pod-level resources)."""
    forecast = forecast_fleet(
        pods,
        node_types,
        config,
        EVERY_NAMESPACE,
        None,
        resize_restart_containers,
        keyring=keyring,
        pod_level_nodes=pod_level_nodes,
    )
    return managed_requests(forecast, key=lambda pod: pod.node_type)


class FreedRequests:
    """The source of the ``workload_resizer_managed_*`` gauges: the totals, computed at most once per
    ``ttl`` seconds (one scrape reads both gauges; short, so the next scrape never sees an older
    state). Each pod's share is kept until what it depends on changes (its resourceVersion, its
    node's type, the config, the keys): a steady cluster's scrape costs a lookup per pod, not a
    plan and a MAC."""

    def __init__(
        self,
        pods: Callable[[], Iterable[Obj]],
        nodes: Callable[[], Iterable[Obj]],
        config: Callable[[], CompiledConfig | None],
        keyring: Callable[[], KeyRing],
        node_type_label: str,
        resize_restart_containers: bool = False,
        ttl: float = 0.25,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pods, self._nodes, self._config, self._keyring = pods, nodes, config, keyring
        self._label = node_type_label
        self._restart = resize_restart_containers
        self._ttl = ttl
        self._clock = clock
        self._cached: tuple[float, dict[str, RequestTotals]] | None = None
        # pod uid -> (what its share was computed from, its share: node type and totals, or None)
        self._shares: dict[str, tuple[tuple[object, ...], tuple[str, RequestTotals] | None]] = {}

    def totals(self) -> dict[str, RequestTotals]:
        now = self._clock()
        if self._cached is not None and now - self._cached[0] < self._ttl:
            return self._cached[1]
        config = self._config()
        if config is None:
            self._cached = (now, {})
            return self._cached[1]
        nodes = list(self._nodes())
        node_types = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(self._label) for n in nodes}
        pod_level = frozenset(n["metadata"]["name"] for n in nodes if node_resizes_pod_level(n))
        pods, keyring = self._pods(), self._keyring()
        shares: dict[str, tuple[tuple[object, ...], tuple[str, RequestTotals] | None]] = {}
        totals: dict[str, RequestTotals] = {}
        for pod in pods:
            meta = pod["metadata"]
            uid = meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}"
            node = (pod.get("spec") or {}).get("nodeName")
            key = (
                meta.get("resourceVersion"),
                node_types.get(node) if node else None,
                id(config),
                keyring,
                node in pod_level,
            )
            known = self._shares.get(uid)
            if known is None or known[0] != key:
                computed = requests_by_node_type([pod], node_types, config, keyring, self._restart, pod_level)
                known = (key, next(iter(computed.items()), None))
            shares[uid] = known
            if known[1] is not None:
                node_type, share = known[1]
                total = totals.setdefault(node_type, RequestTotals())
                for field in fields(RequestTotals):
                    setattr(total, field.name, getattr(total, field.name) + getattr(share, field.name))
        self._shares = shares  # pods gone are dropped
        self._cached = (now, {k: totals[k] for k in sorted(totals)})
        return self._cached[1]
