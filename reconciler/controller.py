"""The pod resizer: decide from the pure core, write in the recovery-safe order.

Per pod, writes happen in this order, and the order is the recovery contract:

1. original-* annotations (only the missing keys, with a resourceVersion
   precondition so they describe the spec we read);
2. the pods/resize patch, computed from the originals (never from the spec);
3. applied-instance-type / applied-at.

A crash between any two steps leaves a state from which the next pass reaches
the same end state: after 1 the originals are read back, after 2 the plan finds
the spec already aligned and only step 3 runs, after 3 the pod is filtered out.
Reordering these steps re-introduces compounding resizes.
"""
from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from reconciler import metrics
from reconciler.config_source import ConfigSource
from reconciler.events import EventRecorder, object_reference
from reconciler.informer import Informer, object_key
from reconciler.kube import MERGE_PATCH, STRATEGIC_MERGE_PATCH, ApiError, KubeClient, TokenBucket
from reconciler.namespaces import ScopedNamespaces
from reconciler.slim import slim_node, slim_pod, status_fingerprint
from reconciler.workqueue import WorkQueue
from resizer import (
    APPLIED_AT,
    APPLIED_INSTANCE_TYPE,
    PREFIX,
    OriginalsError,
    PlanError,
    ResizePlan,
    eligibility,
    fits_annotation_limit,
    missing_original_annotations,
    plan_resize,
    resolve_policy,
)
from resizer.realign import realignment
from resizer.scope import NamespaceScope

log = logging.getLogger("reconciler.controller")
audit = logging.getLogger("reconciler.decision")

UNSUPPORTED_MESSAGE = "without support for resize"
TERMINAL_PHASES = ("Succeeded", "Failed")
# Test-only fault hook: SIGKILL ourselves right after the named write step.
CRASH_AFTER_ENV = "WORKLOAD_RESIZER_TEST_CRASH_AFTER"


@dataclass(frozen=True)
class Options:
    node_type_label: str
    dry_run: bool = False
    resize_restart_containers: bool = False
    scope: NamespaceScope = NamespaceScope()
    realign: bool = True
    max_resizes_per_second: float = 10.0


@dataclass(frozen=True)
class Result:
    requeue_after: float | None = None


DONE = Result()


class PodResizer:
    def __init__(self, client: KubeClient, recorder: EventRecorder, config: ConfigSource,
                 queue: WorkQueue, options: Options, idle_timeout: float = 90.0) -> None:
        self._client = client
        self._recorder = recorder
        self._config = config
        self._queue = queue
        self._options = options
        # Terminal decisions that wrote nothing (UnknownNodeType, ResizeUnsupported,
        # ...), by pod uid: the same situation is not decided (and reported) twice.
        self._decided: dict[str, tuple[Any, ...]] = {}
        # Pods we finished (uid -> node type) whose applied annotation the watch has
        # not delivered yet: a lagging cache must not cause a second pass.
        self._finished: dict[str, str] = {}
        self._pods_on_node: dict[str, set[str]] = {}
        # Re-alignment: the config version each sized pod was last re-planned for (uid ->
        # generation), and the limiter of resizes of pods already sized.
        self._realign_checked: dict[str, int] = {}
        self._realign_limiter = TokenBucket(options.max_resizes_per_second, 1)
        self._crash_after = os.environ.get(CRASH_AFTER_ENV)
        self.pods = Informer(client, "pods", "/api/v1/pods", slim_pod, self._on_pod,
                             params={"fieldSelector": "spec.nodeName!="}, idle_timeout=idle_timeout)
        self.nodes = Informer(client, "nodes", "/api/v1/nodes", slim_node, self._on_node,
                              idle_timeout=idle_timeout)
        self.namespaces = ScopedNamespaces(client, options.scope, self._on_namespace, idle_timeout)

    # ------------------------------------------------------------------ events in

    def _on_pod(self, kind: str, pod: dict[str, Any], old: dict[str, Any] | None) -> None:
        key = object_key(pod)
        node = pod["spec"].get("nodeName") or ""
        uid = pod["metadata"].get("uid") or key
        if kind == "DELETED":
            self._queue.drop(key)
            self._decided.pop(uid, None)
            self._finished.pop(uid, None)
            self._realign_checked.pop(uid, None)
            self._pods_on_node.get(node, set()).discard(key)
            return
        if uid in self._finished and \
                pod["metadata"]["annotations"].get(APPLIED_INSTANCE_TYPE) == self._finished[uid]:
            del self._finished[uid]
        self._pods_on_node.setdefault(node, set()).add(key)
        if self._needs_work(pod):
            self._queue.add(key)

    def _on_node(self, kind: str, node: dict[str, Any], old: dict[str, Any] | None) -> None:
        name = node["metadata"]["name"]
        if kind == "DELETED":
            return
        label = self._options.node_type_label
        if old is not None and old["metadata"]["labels"].get(label) == node["metadata"]["labels"].get(label):
            return
        for key in self._pods_on_node.get(name, ()):
            pod = self.pods.store.get(key)
            if pod is not None and self._needs_work(pod):
                self._queue.add(key)

    def _on_namespace(self, namespace: str) -> None:
        for key, pod in self.pods.store.items():
            if pod["metadata"]["namespace"] == namespace and self._needs_work(pod):
                self._queue.add(key)

    def on_config_change(self) -> None:
        for key, pod in self.pods.store.items():
            if self._needs_work(pod):
                self._queue.add(key)

    def _needs_work(self, pod: dict[str, Any]) -> bool:
        if not _live_and_bound(pod) or not eligibility(pod).eligible or not self.namespaces.includes(pod):
            return False
        node = self.nodes.store.get(pod["spec"]["nodeName"])
        if node is None:
            return True     # a node we have not seen yet: reconcile looks it up
        node_type = node["metadata"]["labels"].get(self._options.node_type_label)
        if node_type is None:
            return False    # untyped node: nothing to do until it is labelled (_on_node)
        done = (pod["metadata"]["annotations"].get(APPLIED_INSTANCE_TYPE),
                self._finished.get(pod["metadata"].get("uid") or ""))
        return node_type not in done or self._needs_realignment(pod, node_type)

    def _needs_realignment(self, pod: dict[str, Any], node_type: str) -> bool:
        """A pod already sized is re-planned once per config version; queued only if that changes it."""
        config, generation = self._config.config, self._config.generation
        uid = pod["metadata"].get("uid") or object_key(pod)
        if not self._options.realign or config is None or self._realign_checked.get(uid) == generation:
            return False
        self._realign_checked[uid] = generation
        return realignment(pod, config, node_type, self._options.resize_restart_containers) is not None

    async def _node_type(self, node_name: str) -> tuple[bool, str | None]:
        """(node exists, its type label). A cache miss (node created a moment ago) is a GET."""
        node = self.nodes.store.get(node_name)
        if node is None:
            try:
                node = slim_node(await self._client.get(f"/api/v1/nodes/{node_name}"))
            except ApiError as err:
                if err.status == 404:
                    return False, None
                raise
        return True, node["metadata"]["labels"].get(self._options.node_type_label)

    # ------------------------------------------------------------------ reconcile

    async def reconcile(self, key: str) -> Result:
        pod = self.pods.store.get(key)
        if pod is None or not _live_and_bound(pod) or not eligibility(pod).eligible \
                or not self.namespaces.includes(pod):
            return DONE
        node_name = pod["spec"]["nodeName"]
        exists, node_type = await self._node_type(node_name)
        if not node_type:
            log.debug("node has no type label; skipping", extra={
                "pod": key, "node": node_name, "nodeExists": exists, "label": self._options.node_type_label})
            return DONE
        uid = pod["metadata"].get("uid") or key
        config = self._config.config
        if node_type in (pod["metadata"]["annotations"].get(APPLIED_INSTANCE_TYPE), self._finished.get(uid)) and (
                not self._options.realign or config is None
                or realignment(pod, config, node_type, self._options.resize_restart_containers) is None):
            return DONE
        if config is None:
            return Result(requeue_after=5.0)
        signature = _situation(pod, node_type, self._config.generation)
        if self._decided.get(uid) == signature:
            return DONE
        return await self._decide(pod, node_type, signature)

    async def _decide(self, pod: dict[str, Any], node_type: str, signature: tuple[Any, ...]) -> Result:
        config = self._config.config
        assert config is not None
        policy = resolve_policy(config, pod)
        try:
            plan = plan_resize(pod, policy, node_type, self._options.resize_restart_containers)
        except OriginalsError as err:
            return await self._terminal(pod, signature, None, "Warning", "ResizeFailed",
                                        f"cannot read the pod's original resources: {err}")
        except PlanError as err:        # reported once, like a corrupt original: a retry cannot help
            return await self._terminal(pod, signature, None, "Warning", "ResizeFailed", f"cannot size the pod: {err}")
        context = f"node type {node_type} (baseline {plan.baseline_node_type}, rule {plan.rule})"
        if plan.outcome == "UnknownNodeType":
            return await self._terminal(pod, signature, plan, "Warning", "UnknownNodeType",
                                        f"node type {node_type!r} of node {pod['spec']['nodeName']} is not in "
                                        f"the config's nodeTypes (rule {plan.rule}); pod left unchanged")
        if plan.outcome == "QoSChange":
            return await self._terminal(pod, signature, plan, "Warning", "ResizeFailed",
                                        f"not resized for {context}: {plan.summary()}")
        if self._options.dry_run:
            reason = "WouldResize" if plan.patch else "AlreadyAligned"
            return await self._terminal(pod, signature, plan, "Normal", reason,
                                        f"dry run, {context}: {plan.summary()}")
        return await self._write(pod, node_type, signature, plan, context)

    async def _write(self, pod: dict[str, Any], node_type: str, signature: tuple[Any, ...],
                     plan: ResizePlan, context: str) -> Result:
        policy_config = self._config.config
        assert policy_config is not None
        # Step 1: originals, if the webhook did not stamp them.
        missing = missing_original_annotations(pod)
        if missing:
            if not fits_annotation_limit(pod["metadata"]["annotations"], missing):
                return await self._terminal(pod, signature, plan, "Warning", "ResizeFailed",
                                            "the original resources do not fit in the pod's annotations "
                                            "(256 KiB limit), so they cannot be recorded; not resized")
            try:
                pod = await self._stamp_originals(pod, missing)
            except ApiError as err:
                if err.retryable:
                    raise
                return await self._terminal(pod, signature, plan, "Warning", "ResizeFailed",
                                            f"cannot record the original resources ({err.message}); not resized")
            self._fault("originals")
            # The stamp changed the annotations the signature covers: a terminal decision
            # below must be keyed on the pod as it is now, or the watch event of our own
            # write looks like a new situation and the pod is decided (and reported) again.
            signature = _situation(pod, node_type, self._config.generation)
            plan = plan_resize(pod, resolve_policy(policy_config, pod), node_type,
                               self._options.resize_restart_containers)
        # Step 2: the resize itself, only if something changes.
        realigned = APPLIED_INSTANCE_TYPE in pod["metadata"]["annotations"]
        if plan.patch:
            if realigned:
                await self._realign_limiter.take()      # --max-resizes-per-second
            try:
                await self._client.patch(_pod_path(pod, "resize"), plan.patch, STRATEGIC_MERGE_PATCH)
            except ApiError as err:
                if err.retryable:
                    raise
                return await self._rejected(pod, signature, plan, context, err)
            self._fault("resize")
        # Step 3: record what was done.
        await self._client.patch(_pod_path(pod), {"metadata": {"annotations": {
            APPLIED_INSTANCE_TYPE: node_type, APPLIED_AT: _now()}}}, MERGE_PATCH)
        self._finished[pod["metadata"].get("uid") or object_key(pod)] = node_type
        self._fault("applied")
        if plan.patch:
            reason = "BoundsClamped" if plan.clamped else "Resized"
            message = f"{'re-aligned' if realigned else 'resized'} for {context}: {plan.summary()}"
        else:
            reason = "AlreadyAligned"
            message = f"already aligned for {context}" + (f": {plan.summary()}" if plan.changes else "")
        await self._report(pod, plan, "Normal", reason, message)
        return DONE

    async def _stamp_originals(self, pod: dict[str, Any], missing: dict[str, str]) -> dict[str, Any]:
        """Merge-patch the missing original-* keys, conditional on the resourceVersion we read.

        On a conflict the pod is read again once; its originals are recomputed from
        that fresh spec (if they are still missing).
        """
        for attempt in range(2):
            patch = {"metadata": {"resourceVersion": pod["metadata"]["resourceVersion"],
                                  "annotations": missing}}
            try:
                return slim_pod(await self._client.patch(_pod_path(pod), patch, MERGE_PATCH))
            except ApiError as err:
                if err.status != 409 or attempt == 1:
                    raise
            pod = slim_pod(await self._client.get(_pod_path(pod)))
            missing = missing_original_annotations(pod)
            if not missing:
                return pod
        raise AssertionError("unreachable")

    async def _rejected(self, pod: dict[str, Any], signature: tuple[Any, ...], plan: ResizePlan,
                        context: str, err: ApiError) -> Result:
        if err.status == 404:
            return DONE     # deleted meanwhile: nothing to report; the watch's DELETED event cleans up
        if UNSUPPORTED_MESSAGE in err.message:
            # A soft skip: the node's kubelet does not advertise in-place resize.
            # Tried again when the pod's status changes (see status_fingerprint).
            return await self._terminal(pod, signature, plan, "Warning", "ResizeUnsupported",
                                        f"node {pod['spec']['nodeName']} does not support in-place resize; "
                                        f"wanted for {context}: {plan.summary()}")
        if "NodeCapacity" in err.causes:
            return await self._terminal(pod, signature, plan, "Warning", "ResizeFailed",
                                        f"node {pod['spec']['nodeName']} cannot fit the new size "
                                        f"({err.message}); wanted for {context}: {plan.summary()}")
        return await self._terminal(pod, signature, plan, "Warning", "ResizeFailed",
                                    f"apiserver rejected the resize for {context}: {err.message}")

    async def _terminal(self, pod: dict[str, Any], signature: tuple[Any, ...], plan: ResizePlan | None,
                        event_type: str, reason: str, message: str) -> Result:
        """A decision that writes nothing to the pod: report it once per situation."""
        self._decided[pod["metadata"].get("uid") or object_key(pod)] = signature
        await self._report(pod, plan, event_type, reason, message)
        return DONE

    async def _report(self, pod: dict[str, Any], plan: ResizePlan | None, event_type: str, reason: str,
                      message: str) -> None:
        metrics.OUTCOMES.labels(reason).inc()
        audit.info("decision", extra=_decision_record(pod, plan, reason, self._options.dry_run))
        await self._recorder.emit(object_reference(pod, "Pod"), event_type, reason, message)

    def _fault(self, step: str) -> None:
        if self._crash_after == step:
            log.warning("test fault hook: crashing", extra={"after": step})
            os.kill(os.getpid(), signal.SIGKILL)


def _live_and_bound(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName")) and "deletionTimestamp" not in pod["metadata"] \
        and pod["status"].get("phase") not in TERMINAL_PHASES


def _situation(pod: dict[str, Any], node_type: str, config_generation: int) -> tuple[Any, ...]:
    """What a terminal decision depended on; the same situation is not decided twice."""
    ours = tuple(sorted((k, v) for k, v in pod["metadata"]["annotations"].items() if k.startswith(PREFIX)))
    return node_type, config_generation, status_fingerprint(pod), ours


def _pod_path(pod: dict[str, Any], subresource: str | None = None) -> str:
    meta = pod["metadata"]
    path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
    return f"{path}/{subresource}" if subresource else path


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _decision_record(pod: dict[str, Any], plan: ResizePlan | None, outcome: str, dry_run: bool) -> dict[str, Any]:
    record: dict[str, Any] = {
        "pod": pod["metadata"]["name"], "namespace": pod["metadata"]["namespace"],
        "node": pod["spec"].get("nodeName"), "outcome": outcome, "dryRun": dry_run,
    }
    if plan is not None:
        record.update({"nodeType": plan.node_type, "baseline": plan.baseline_node_type, "rule": plan.rule,
                       "changes": [_change_record(c) for c in plan.changes]})
    return record


def _change_record(change: Any) -> dict[str, Any]:
    record = {"container": change.container, "resource": change.resource,
              "original": change.original_request, "desired": change.desired_request,
              "current": change.current_request, "unit": "millicores" if change.resource == "cpu" else "bytes"}
    if change.original_limit is not None or change.desired_limit is not None:
        record.update({"originalLimit": change.original_limit, "desiredLimit": change.desired_limit})
    if change.clamped:
        record["clamped"] = change.clamped
    if change.skipped:
        record["skipped"] = change.skipped
    return record
