"""The controller manager: caches, event-to-key mapping, workers.

Shaped like controller-runtime's: the manager owns the pod and node informers and the work
queue, maps each watch event to the pod keys worth a reconcile (a pod event to its own key, a
node relabel to the keys of the pods on it, a config change to every cached pod, an unbound
pod's event to its key only when it is held by scheduling gates with originals to bind), and
runs the workers that call `PodResizeReconciler.reconcile(key)`. The reconciler never sees the
informers: it reads and writes through reconciler.ports.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from kube import ApiError, KubeClient, KubeError
from kube import metrics as kube_metrics
from kube.informer import Handler, Informer, object_key
from kube.slim import slim_node, slim_pod, slim_unbound_pod
from kube.workqueue import WorkQueue
from reconciler import metrics
from reconciler.controller import PodResizeReconciler
from reconciler.pods import mac_key_known
from reconciler.ports import ApiWriter, CachedReader, ConfigView, EventSink, FaultHook, Obj, no_fault
from reconciler.preflight import Preflight
from reconciler.settings import ControllerSettings, PreflightSettings
from reconciler.vpa import VpaWatch
from resizer import EMPTY_KEYRING, KeyRing
from resizer.podstate import read_state

log = logging.getLogger("reconciler")

# Tests and embedders that do not ask for them get no preflight and no VPA watch.
NO_PREFLIGHT = PreflightSettings(checks=(), skip_vpa_managed=False)

# A pod-event filter: False means the manager never queues the pod (e.g. a namespace scope).
PodFilter = Callable[[Obj], bool]


class Manager:
    def __init__(
        self,
        client: KubeClient,
        events: EventSink,
        config: ConfigView,
        queue: WorkQueue,
        options: ControllerSettings,
        idle_timeout: float = 90.0,
        fault: FaultHook = no_fault,
        pod_filters: tuple[PodFilter, ...] = (),
        keyring: Callable[[], KeyRing] = lambda: EMPTY_KEYRING,
        preflight: PreflightSettings = NO_PREFLIGHT,
        recheck_interval: float = 30.0,
    ) -> None:
        self.queue = queue
        self._options = options
        self._pod_filters = pod_filters
        self._pods_on_node: dict[str, set[str]] = {}

        def pods(resource: str, slim: Callable[[Obj], Obj], handler: Handler, selector: str) -> Informer:
            params = {"fieldSelector": selector}
            return Informer(client, resource, "/api/v1/pods", slim, handler, params, idle_timeout=idle_timeout)

        self.pods = pods("pods", slim_pod, self._on_pod, "spec.nodeName!=")
        # Pods not bound yet, for one thing only: binding the originals of those held by scheduling
        # gates while they are at generation 1 (reconciler.gated).
        self.unbound = pods("unbound-pods", slim_unbound_pod, self._on_unbound_pod, "spec.nodeName=")
        self.nodes = Informer(client, "nodes", "/api/v1/nodes", slim_node, self._on_node, idle_timeout=idle_timeout)
        # Other controllers' VPAs and the constraints a resize is judged against before it is sent.
        self.vpa = (
            VpaWatch(client, self._queue_wanted, idle_timeout, recheck_interval) if preflight.skip_vpa_managed else None
        )
        self.preflight = Preflight(client, preflight, self._node_pods, self._requeue, self.vpa, idle_timeout)
        self.reconciler = PodResizeReconciler(
            CachedReader(client, self.pods, self.nodes, self.unbound),
            ApiWriter(client),
            events,
            config,
            options,
            fault,
            keyring=keyring,
            gate=self.preflight,
        )
        self._keyring = keyring

    # ------------------------------------------------------------------ lifecycle

    @property
    def informers(self) -> tuple[Informer, ...]:
        return self.nodes, self.pods, self.unbound, *self.preflight.informers

    @property
    def synced(self) -> bool:
        return all(informer.synced.is_set() for informer in self.informers) and (self.vpa is None or self.vpa.synced)

    async def wait_synced(self) -> None:
        for informer in self.informers:
            await informer.synced.wait()
        if self.vpa is not None:
            await self.vpa.wait_synced()

    async def worker(self) -> None:
        """Reconcile queued keys until the queue shuts down; errors are retried with backoff."""
        controller = metrics.CONTROLLER
        active = metrics.ACTIVE_WORKERS.labels(controller)
        success = metrics.RECONCILE_TOTAL.labels(controller, "success")
        requeued = metrics.RECONCILE_TOTAL.labels(controller, "requeue_after")
        reconcile_time = metrics.RECONCILE_TIME.labels(controller)
        work_time = kube_metrics.QUEUE_WORK.labels(self.queue.name)
        while (key := await self.queue.get()) is not None:
            started = time.monotonic()
            active.inc()
            try:
                result = await self.reconciler.reconcile(key)
            except Exception as err:
                delay = self.queue.add_rate_limited(key)
                metrics.RECONCILE_TOTAL.labels(metrics.CONTROLLER, "error").inc()
                metrics.RECONCILE_ERRORS.labels(metrics.CONTROLLER).inc()
                if isinstance(err, KubeError):
                    level = logging.INFO if isinstance(err, ApiError) and err.retryable else logging.WARNING
                    extra = {"pod": key, "error": str(err) or repr(err), "retryIn": round(delay, 2)}
                    log.log(level, "reconcile failed; will retry", extra=extra)
                else:
                    log.exception("reconcile crashed; will retry", extra={"pod": key, "retryIn": round(delay, 2)})
            else:
                if result.requeue_after is not None:
                    self.queue.add_after(key, result.requeue_after)
                    requeued.inc()
                else:
                    self.queue.forget(key)
                    success.inc()
            finally:
                elapsed = time.monotonic() - started
                reconcile_time.observe(elapsed)
                work_time.observe(elapsed)
                active.dec()
                self.queue.done(key)

    # ------------------------------------------------------------------ events to keys

    def _on_pod(self, kind: str, pod: Obj, old: Obj | None) -> None:
        key = object_key(pod)
        node = pod["spec"].get("nodeName") or ""
        if old is not None and old["metadata"].get("uid") != pod["metadata"].get("uid"):
            self.reconciler.forget(old)  # a re-list replaced a same-named pod: drop the old uid's entries
        if kind == "DELETED":
            self.queue.drop(key)
            self.reconciler.forget(pod)
            self.preflight.forget(pod)
            pods = self._pods_on_node.get(node)
            if pods is not None:
                pods.discard(key)
                if not pods:
                    del self._pods_on_node[node]
            self.preflight.pod_changed(node)
            return
        self.reconciler.observe(pod)
        self._pods_on_node.setdefault(node, set()).add(key)
        if self._wants(pod):
            self.queue.add(key)
        self.preflight.pod_changed(node, pod)  # room freed (or taken) on the node

    def _on_unbound_pod(self, kind: str, pod: Obj, old: Obj | None) -> None:
        """Only a pod held at a scheduling gate whose originals are to be bound is queued; a bound
        or deleted one leaves this watch (its DELETED event) and is the pod watch's."""
        if kind != "DELETED" and self._wants_binding(pod):
            self.queue.add(object_key(pod))

    def _queue_gated(self) -> None:
        for key, pod in self.unbound.store.items():
            if self._wants_binding(pod):
                self.queue.add(key)

    def _on_node(self, kind: str, node: Obj, old: Obj | None) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED":
            self._pods_on_node.pop(name, None)
            return
        label = self._options.node_type_label
        if (
            old is not None
            and old["metadata"]["labels"].get(label) == node["metadata"]["labels"].get(label)
            and old.get("status") == node.get("status")
        ):
            return  # neither the type nor the allocatable (which un-parks an infeasible size) changed
        for key in self._pods_on_node.get(name, ()):
            pod = self.pods.store.get(key)
            if pod is not None and self._wants(pod):
                self.queue.add(key)

    def on_config_change(self) -> None:
        """The config or the namespace scope changed: every pod that needs work is queued."""
        self._queue_wanted(None)
        self._queue_gated()

    def _node_pods(self, node: str) -> list[Obj]:
        store = self.pods.store
        return [pod for key in self._pods_on_node.get(node, ()) if (pod := store.get(key)) is not None]

    def _requeue(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.queue.add(key)

    def _queue_wanted(self, namespace: str | None) -> None:
        """Queue the pods of `namespace` (None: of all) that need work, e.g. its VPAs changed."""
        for key, pod in self.pods.store.items():
            if (namespace is None or pod["metadata"].get("namespace") == namespace) and self._wants(pod):
                self.queue.add(key)

    def on_keys_change(self) -> None:
        """The keys changed: queue the pods signed with a key of the ring: those signed with an older
        one are re-signed while it verifies, those held while their key was missing (put back, or
        reaching the webhook first) are decided again."""
        keyring = self._keyring()
        for key, pod in self.pods.store.items():
            if mac_key_known(read_state(pod), keyring) and all(accept(pod) for accept in self._pod_filters):
                self.queue.add(key)
        self._queue_gated()

    def _wants_binding(self, pod: Obj) -> bool:
        return self.reconciler.needs_binding(pod) and all(accept(pod) for accept in self._pod_filters)

    def _wants(self, pod: Obj) -> bool:
        if not all(accept(pod) for accept in self._pod_filters):
            return False
        return self.reconciler.needs_work(pod, self.nodes.store.get(pod["spec"]["nodeName"]))
