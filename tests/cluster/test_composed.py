"""The acceptance matrix: every capability at once, under the chart's defaults (issue 34).

One world per module: the chart rendered by `helm template` with its default values
(devkit.localchart) and applied to the real apiserver: its RBAC, its config ConfigMap, its two
ValidatingAdmissionPolicies with their bindings (Deny) and its MutatingWebhookConfiguration
(reinvocationPolicy IfNeeded, failurePolicy Ignore, the namespaceSelector of its scope). The
webhook and the reconciler run as local processes with the arguments the chart's Deployments
give them, as the chart's ServiceAccounts (TokenRequest tokens); only listen addresses, file
paths and the webhook configuration's clientConfig differ. Nodes: KWOK nodes of the families
n2d, n4 and c3 (the pool label of this module), and an n4 whose fake kubelet defers resizes.

Each row is a test of its own, in a namespace of its own; the pods are created by their
controllers (the kube-controller-manager's own ServiceAccounts, which the policies judge like
any tenant). A row that edits the config does so through the chart's values, with a `podLabels`
rule block for its own pods, and the world gets the chart's config back afterwards.

Every row ends with the sweep, over every version of every pod of the row the apiserver stored
(a watch): no container, sidecar or pod level is ever above its own admitted value x ratio (the
admitted value is what the author wrote, where every pod starts; the ratio is baselinePerf /
nodePerf for the node the pod runs on, bounds applied, the largest of the row's configs), no
`OriginalsUnverified`/`OriginalsReplaced` Event for an honest pod, and exactly one `Resized` or
`SizedAtAdmission` Event per sizing (`AlreadyAligned` on the baseline family), with the
reconciler's outcome metric (and the webhook's sized metric) counting them.
"""

from __future__ import annotations

import base64
import copy
import json
import math
import os
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import pytest
import yaml

from devkit.cluster import FAMILY_LABEL, POOL_LABEL, NodeSpec
from devkit.kube import ApiError, Kube, container, install_crd, remove_crd, wait_for
from devkit.labeller import LabellingWebhook
from devkit.localchart import ChartReconciler, ChartWebhook, LocalChart, flag_value
from devkit.metrics import samples
from devkit.processes import MUTATING_WEBHOOKS, REPO, wait_webhook_active, wait_webhook_inactive, webhook_decisions
from devkit.rbac import tenant_kubeconfig
from devkit.watch import PodHistory
from ops.keys import new_key_id
from reconciler.outcome import spec_size
from resizer import key_id_of, original_key
from resizer.podstate import (
    APPLIED_AT,
    APPLIED_INSTANCE_TYPE,
    APPLIED_SIZE,
    ORIGINALS_MAC,
    RESIZE_STATE,
    SIZED_AT_ADMISSION,
)
from tests.cluster.test_admission_policy import _denied_now, bare_pod, wait_create_policy_active
from tests.cluster.test_preflight import VPA_CRD
from tests.cluster.test_reconciler import COMPONENT, guaranteed, make_namespace, ours, q

ROW_LABEL = "composed.workload-resizer.io/row"
OUTCOME_LABEL = "fake-kubelet.workload-resizer.io/resize-outcome"
HONESTY = ("OriginalsUnverified", "OriginalsReplaced")
SIZINGS = ("Resized", "SizedAtAdmission")
ORIGINAL_CPU = original_key("app", "cpu", "request")
GATE = "example.com/composed-gate"
UNITS = {"cpu": Fraction(1, 1000), "memory": Fraction(1)}  # whole millicores, whole bytes
PERF = {"cpu": "cpuPerf", "memory": "memPerf"}


# ---------------------------------------------------------------- the world


@dataclass
class World:
    cluster: Any
    kube: Kube
    chart: LocalChart
    reconciler: ChartReconciler
    webhook: ChartWebhook
    pool: str
    nodes: dict[str, str]  # n2d, n4, c3 -> node; "deferring" -> an untyped node that defers resizes
    config: dict[str, Any]  # the chart's config.yaml
    scratch: str  # a namespace in scope without pods, for dry-run probes

    def node_type(self, node: str | None) -> str | None:
        """The node's type label now (None: no such node, or untyped)."""
        if node is None:
            return None
        try:
            return (self.kube.get(f"/api/v1/nodes/{node}")["metadata"].get("labels") or {}).get(FAMILY_LABEL)
        except ApiError:
            return None

    def label_node_type(self, node: str, node_type: str | None) -> None:
        self.kube.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {FAMILY_LABEL: node_type}}})

    def resizes_served(self) -> float:
        """pods/resize requests the apiserver answered (any code) since it started."""
        return sum(self.cluster.local.resize_patches_served().values())

    def restart_reconciler(self) -> None:
        """As a Deployment's pod replaced: the old process stops (releasing its Lease), a new one starts."""
        self.reconciler.terminate()
        self.reconciler = self.chart.start_reconciler(name=f"reconciler-{len(self.chart.processes)}")

    def stop_reconciler(self) -> None:
        self.reconciler.terminate()

    def restart_webhook(self) -> None:
        """A new webhook process on the same address (it reads its keys directory at start)."""
        self.webhook = self.chart.start_webhook(name=f"webhook-{len(self.chart.processes)}", replacing=self.webhook)
        wait_webhook_active(self.kube, self.scratch)

    def apply_config(self, values: dict[str, Any] | None) -> None:
        """The chart's ConfigMap rendered with `values` (None: the defaults), in use by the reconciler."""
        before = self.reconciler.metric("workload_resizer_config_reloads_total") if self.reconciler.alive else None
        self.kube.apply(self.chart.config_map(values), self.chart.ns)
        if before is not None:
            wait_for(
                "the reconciler to take the config into use",
                lambda: self.reconciler.metric("workload_resizer_config_reloads_total") > before,
                timeout=30,
            )

    def probe(self, ns: str, spec: dict[str, Any], labels: dict[str, str] | None = None) -> dict[str, Any]:
        """A pod of a ReplicaSet created with dryRun=All (nothing stored): what admission makes of it."""
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "generateName": "composed-probe-",
                "labels": {"app": "probe", **(labels or {})},
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "ReplicaSet",
                        "name": "probe",
                        "uid": str(uuid.uuid4()),
                        "controller": True,
                    }
                ],
            },
            "spec": spec,
        }
        return self.kube.request("POST", f"/api/v1/namespaces/{ns}/pods", pod, params={"dryRun": "All"})

    def pin(self, family: str) -> dict[str, str]:
        """A nodeSelector on the node-type label (and this world's pool): known at admission."""
        return {FAMILY_LABEL: family, POOL_LABEL: self.pool}

    def signing_key(self) -> str | None:
        """The key id the webhook signs with now (a dry-run pod's originals-mac)."""
        pod = self.probe(self.scratch, {"containers": [container("app", {"cpu": "100m"})]})
        return key_id_of((pod["metadata"].get("annotations") or {}).get(ORIGINALS_MAC))

    def reconciler_idle(self) -> bool:
        """Nothing queued, nothing being decided."""
        return (
            self.reconciler.metric("workqueue_depth") == 0
            and self.reconciler.metric("controller_runtime_active_workers") == 0
        )

    def decisions(self) -> float:
        return self.reconciler.metric("controller_runtime_reconcile_total", controller="pod-resizer")

    def reconciler_key_reloads(self) -> int:
        return sum(1 for line in self.reconciler.log_lines() if "originals keys reloaded" in line)


def wait_sizing_active(world: World, ns: str) -> None:
    """Until a dry-run pod pinned to n4 comes back sized (the webhook's node and config watches synced)."""
    spec = {"nodeSelector": world.pin("n4"), "containers": [guaranteed()]}
    wait_for(
        "the webhook to size at admission",
        lambda: SIZED_AT_ADMISSION in (world.probe(ns, spec)["metadata"].get("annotations") or {}),
        timeout=60,
    )


@pytest.fixture(scope="module")
def world(cluster: Any) -> Iterator[World]:
    kube: Kube = cluster.kube
    release = make_namespace(kube, "wr-composed")
    scratch = make_namespace(kube, "composed-scratch")  # in scope: probes of the world's readiness
    pool = f"composed-{uuid.uuid4().hex[:6]}"
    nodes = {family: f"{pool}-{family}" for family in ("n2d", "n4", "c3")}
    nodes["deferring"] = f"{pool}-deferring"
    chart = LocalChart(kube, cluster.kubeconfig, release)
    tenant: Kube | None = None
    try:
        assert flag_value(chart.args("reconciler"), "--node-type-label") == FAMILY_LABEL
        install_crd(kube, yaml.safe_load(VPA_CRD.read_text()))  # found by the reconciler at its start
        chart.apply()
        tenant = Kube(tenant_kubeconfig(kube, cluster, scratch))
        wait_create_policy_active(tenant, scratch)  # before the webhook, which strips the probe's key
        cluster.local.add_nodes(
            [NodeSpec(node, family, pool) for family, node in nodes.items() if family != "deferring"]
            + [NodeSpec(nodes["deferring"], None, f"{pool}-deferring", labels={OUTCOME_LABEL: "deferred"})]
        )
        reconciler = chart.start_reconciler()  # creates the originals keys Secret
        projection = chart.project_keys()
        projection.wait_for("the key the reconciler created", lambda data: len(data) == 1)
        webhook = chart.start_webhook()
        chart.register(webhook)
        registered = kube.get(f"{MUTATING_WEBHOOKS}/{chart.fullname}")["webhooks"]
        rendered = chart.webhook_configuration(webhook)["webhooks"]
        assert len(registered) == len(rendered) and all(
            registered_hook.get(k) == v
            for registered_hook, hook in zip(registered, rendered, strict=True)
            for k, v in hook.items()
            if k != "clientConfig"
        ), "as the chart renders it"
        assert {hook["reinvocationPolicy"] for hook in registered} == {"IfNeeded"}
        wait_webhook_active(kube, scratch)
        config = yaml.safe_load(chart.config_map()["data"]["config.yaml"])
        w = World(
            cluster=cluster,
            kube=kube,
            chart=chart,
            reconciler=reconciler,
            webhook=webhook,
            pool=pool,
            nodes=nodes,
            config=config,
            scratch=scratch,
        )
        wait_sizing_active(w, scratch)
        yield w
    finally:
        for proc in chart.processes:
            lines = proc.log_lines()
            print(f"===== {proc.name} {proc.log_path}: last {min(len(lines), 40)} of {len(lines)} log lines")
            print("\n".join(lines[-40:]))
        chart.close()
        if tenant is not None:  # the next modules' pods must not meet the webhook or the policies
            wait_webhook_inactive(kube, scratch)
            wait_for(
                "the chart's policies to be unloaded",
                lambda: (
                    not _denied_now(
                        lambda: tenant.request(
                            "POST",
                            f"/api/v1/namespaces/{scratch}/pods",
                            bare_pod("unloaded", {APPLIED_INSTANCE_TYPE: "n4"}),
                            params={"dryRun": "All"},
                        )
                    )
                ),
                timeout=60,
            )
        for node in nodes.values():
            kube.delete(f"/api/v1/nodes/{node}")
        for ns in (scratch, release):
            kube.delete(f"/api/v1/namespaces/{ns}")
        remove_crd(kube, yaml.safe_load(VPA_CRD.read_text())["metadata"]["name"])


# ---------------------------------------------------------------- a row


def ceiling(admitted: Fraction, ratio: Fraction, bounds: tuple[Fraction, Fraction], unit: Fraction) -> Fraction:
    """admitted x ratio in whole units (half away from zero), the bounds stopping the ratio
    (docs/how-it-works.md "The bounds rule"), written here independently of resizer/."""
    if ratio == 1:
        return admitted
    scaled = math.floor(admitted * ratio / unit + Fraction(1, 2)) * unit
    low, high = bounds
    return max(scaled, min(low, admitted)) if ratio < 1 else min(scaled, max(high, admitted))


def parsed(resources: dict[str, Any] | None) -> dict[tuple[str, str], Fraction]:
    return {
        (kind, name): q(str(value))
        for kind in ("requests", "limits")
        for name, value in ((resources or {}).get(kind) or {}).items()
    }


def parts(spec: dict[str, Any]) -> dict[str, tuple[bool, dict[tuple[str, str], Fraction]]]:
    """Each container's, sidecar's, plain init container's and the pod level's resources, and
    whether the product may size them (a plain init container: never)."""
    found = {c["name"]: (True, parsed(c.get("resources"))) for c in spec.get("containers") or []}
    found.update(
        {
            f"{c['name']} (init)": (c.get("restartPolicy") == "Always", parsed(c.get("resources")))
            for c in spec.get("initContainers") or []
        }
    )
    if spec.get("resources"):
        found["(pod level)"] = (True, parsed(spec["resources"]))
    return found


def cpu(pod: dict[str, Any], name: str = "app") -> tuple[Fraction, Fraction]:
    res = parsed(next(c for c in pod["spec"]["containers"] if c["name"] == name)["resources"])
    return res[("requests", "cpu")], res[("limits", "cpu")]


@dataclass
class Row:
    world: World
    ns: str
    history: PodHistory
    reconciler: ChartReconciler  # the one that ran when the row started (its metrics' baseline)
    outcomes: Counter[str]
    sized_by_webhook: float
    authored: dict[str, dict[str, Any]] = field(default_factory=dict)  # app -> pod spec as written
    perf: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # (node type, cpu|memory) -> perfs
    config_edited: bool = False
    failures: list[str] = field(default_factory=list)

    @property
    def kube(self) -> Kube:
        return self.world.kube

    # ---- workloads

    def template(
        self, app: str, containers: list[dict[str, Any]], node_selector: dict[str, str], **spec: Any
    ) -> dict[str, Any]:
        body = {"containers": containers, "nodeSelector": node_selector, "terminationGracePeriodSeconds": 0, **spec}
        self.authored[app] = copy.deepcopy(body)
        return {"metadata": {"labels": {"app": app, ROW_LABEL: self.ns}}, "spec": body}

    def deploy(
        self, app: str, containers: list[dict[str, Any]], node_selector: dict[str, str], replicas: int = 1, **spec: Any
    ) -> None:
        self.kube.create(
            f"/apis/apps/v1/namespaces/{self.ns}/deployments",
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": app},
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app": app}},
                    "template": self.template(app, containers, node_selector, **spec),
                },
            },
        )

    def daemonset(self, app: str, containers: list[dict[str, Any]], node_selector: dict[str, str]) -> None:
        self.kube.create(
            f"/apis/apps/v1/namespaces/{self.ns}/daemonsets",
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {"name": app},
                "spec": {
                    "selector": {"matchLabels": {"app": app}},
                    "template": self.template(app, containers, node_selector),
                },
            },
        )

    def pods(self, app: str) -> list[dict[str, Any]]:
        return [p for p in self.kube.pods(self.ns, f"app={app}") if "deletionTimestamp" not in p["metadata"]]

    def pod(self, name: str) -> dict[str, Any]:
        return self.kube.pod(self.ns, name)

    def refusals(self, app: str) -> str:
        """Why the controller of `app` (a DaemonSet, or a Deployment's ReplicaSet) could not create
        pods: its FailedCreate Events."""
        events = self.kube.get(f"/api/v1/namespaces/{self.ns}/events", fieldSelector="reason=FailedCreate")["items"]
        owner = re.compile(rf"{re.escape(app)}(-[a-z0-9]+)?")
        messages = {
            re.sub(r'^\(combined from similar events\): |pods "[^"]*" ', "", e["message"])
            for e in events
            if owner.fullmatch(e["involvedObject"]["name"])
        }
        return "; ".join(sorted(messages))

    def wait_created(self, app: str, count: int = 1, running: bool = True, timeout: float = 60) -> list[dict[str, Any]]:
        """`count` pods of `app`, created by their controller (and Running). A pod creation
        refused even once fails at once: nothing of the product may block one."""

        def check() -> list[dict[str, Any]] | None:
            refused = self.refusals(app)
            if refused:
                raise AssertionError(f"pods of {app}: {refused}")
            pods = self.pods(app)
            ok = len(pods) == count and all(p["status"].get("phase") == "Running" or not running for p in pods)
            return pods if ok else None

        return wait_for(f"{count} pod(s) of {app} created{' and Running' if running else ''}", check, timeout=timeout)

    def expect_created(self, app: str, count: int = 1) -> list[dict[str, Any]]:
        """As wait_created, but a row goes on with what was created; the row fails at its sweep."""
        try:
            return self.wait_created(app, count)
        except AssertionError as err:
            self.failures.append(str(err))
            return self.pods(app)

    # ---- what the product said

    def events(self, name: str) -> Counter[str]:
        counts: Counter[str] = Counter()
        for event in self.kube.events_for(self.ns, name):
            if (event.get("source") or {}).get("component") == COMPONENT:
                counts[event["reason"]] += event.get("count") or 1
        return counts

    def explain(self, name: str) -> str:
        """What a failed wait on pod `name` shows: its size, generation, our annotations and Events."""
        pod = self.pod(name)
        conditions = [
            (c["type"], c.get("reason"))
            for c in pod["status"].get("conditions") or []
            if c["type"].startswith("PodResize")
        ]
        return (
            f"pod {name}: cpu {tuple(str(v) for v in cpu(pod))}, generation {pod['metadata']['generation']}, "
            f"resize conditions {conditions}, annotations {ours(pod)}, Events {dict(self.events(name))}"
        )

    def wait_pod(self, name: str, what: str, ok: Any, timeout: float = 60) -> dict[str, Any]:
        """Pod `name` once ok(pod) holds."""
        try:
            return wait_for(f"pod {name} {what}", lambda: (p := self.pod(name)) and ok(p) and p, timeout=timeout)
        except AssertionError as err:
            raise AssertionError(f"{err}; {self.explain(name)}") from None

    def wait_event(self, name: str, *reasons: str, timeout: float = 60) -> str:
        """The first of `reasons` recorded on pod `name`."""
        try:
            return wait_for(
                f"{' or '.join(reasons)} on pod {name}",
                lambda: next((r for r in reasons if self.events(name)[r]), None),
                timeout=timeout,
            )
        except AssertionError as err:
            raise AssertionError(f"{err}; {self.explain(name)}") from None

    def wait_sizings(self, name: str, count: int, timeout: float = 60) -> None:
        """Until pod `name` has `count` sizing Events (a re-alignment's comes once it is actuated)."""
        try:
            wait_for(
                f"{count} sizing Events on pod {name}",
                lambda: sum(self.events(name)[r] for r in SIZINGS) >= count,
                timeout=timeout,
            )
        except AssertionError as err:
            raise AssertionError(f"{err}; {self.explain(name)}") from None

    def wait_cpu(self, name: str, want: str, timeout: float = 60) -> dict[str, Any]:
        return self.wait_pod(name, f"at cpu {want}", lambda p: cpu(p) == (q(want), q(want)), timeout=timeout)

    def retire(self) -> None:
        """The row's namespace deleted and its pods terminating (never resized again), now."""
        self.kube.delete(f"/api/v1/namespaces/{self.ns}")
        self.kube.delete(f"/api/v1/namespaces/{self.ns}/pods", gracePeriodSeconds=0)
        wait_for(
            "the row's pods terminating",
            lambda: all("deletionTimestamp" in p["metadata"] for p in self.kube.pods(self.ns)),
            timeout=60,
        )

    # ---- config

    def edit_config(self, block: dict[str, Any]) -> None:
        """A config edit through the chart's values: a rule block for this row's pods."""
        for node_type, perf in (block.get("nodeTypes") or {}).items():
            for resource in ("cpu", "memory"):
                self.perf.setdefault((node_type, resource), []).append(float(perf[PERF[resource]]))
        self.config_edited = True
        self.world.apply_config({"config": {"podLabels": {ROW_LABEL: {self.ns: block}}}})

    # ---- the sweep

    def ratio(self, node_type: str, resource: str) -> Fraction:
        """The largest baselinePerf / nodePerf of the node type for `resource` in the row's configs."""
        types, key = self.world.config["nodeTypes"], PERF[resource]
        base = Fraction(str(types[self.world.config["baselineNodeType"]][key]))
        perfs = [float(types[node_type][key]), *self.perf.get((node_type, resource), [])]
        return base / Fraction(str(min(perfs)))

    def never_above(self, name: str, versions: list[dict[str, Any]]) -> list[str]:
        """Every value of every version is the admitted one, or at most admitted x ratio."""
        app = versions[-1]["metadata"]["labels"]["app"]
        node = next((v["spec"]["nodeName"] for v in reversed(versions) if v["spec"].get("nodeName")), None)
        node_type = self.world.node_type(node)
        bounds = self.world.config["bounds"]
        admitted = parts(self.authored[app])
        found = []
        for version in versions:
            for part, (sized, values) in parts(version["spec"]).items():
                own = admitted.get(part, (False, {}))[1]
                for (kind, resource), value in values.items():
                    if (kind, resource) not in own:
                        found.append(f"{name} {part} {kind}.{resource} = {value}: its author wrote none")
                        continue
                    ratio = self.ratio(node_type, resource) if sized and node_type else Fraction(1)
                    limit = ceiling(
                        own[(kind, resource)],
                        ratio,
                        (q(str(bounds[resource]["min"])), q(str(bounds[resource]["max"]))),
                        UNITS[resource],
                    )
                    if kind == "limits" and ratio != 1 and own[(kind, resource)] != own.get(("requests", resource)):
                        limit += UNITS[resource]  # a Burstable limit stays a unit above its request
                    if value != own[(kind, resource)] and value > limit:
                        found.append(
                            f"{name} {part} {kind}.{resource} = {value} at generation "
                            f"{version['metadata'].get('generation')} (admitted {own[(kind, resource)]}, "
                            f"at most {limit} on {node_type})"
                        )
        return found

    def sweep(self, sizings: int | None = 1, honest: bool = True, final: bool = True) -> None:
        """The promises every row keeps (the module's docstring); `sizings`: the sizing Events
        each pod gets (None: not counted); `final`: also what the row noted on its way
        (expect_created), else the row goes on with what it has."""
        self.history.settle(self.kube)
        problems = list(self.failures) if final else []
        reasons: Counter[str] = Counter()
        for name in self.history.names():
            versions = self.history.versions(name)
            problems += self.never_above(name, versions)
            if "deletionTimestamp" in versions[-1]["metadata"]:
                continue
            events = self.events(name)
            reasons += events
            if honest and any(events[r] for r in HONESTY):
                problems.append(f"{name}: {dict(events)} (an honest pod's originals)")
            node_type = self.world.node_type(versions[-1]["spec"].get("nodeName"))
            counted = sum(events[r] for r in SIZINGS) + (events["AlreadyAligned"] if node_type == "n2d" else 0)
            if sizings is not None and counted != sizings:
                problems.append(f"{name}: {counted} sizing Events, want {sizings}: {dict(events)}")
        problems += self.metrics_count(reasons)
        assert not problems, "\n".join(problems)

    def metrics_count(self, reasons: Counter[str]) -> list[str]:
        """The reconciler's outcome metric counts the row's Events (by the process that ran them)."""
        if self.world.reconciler is not self.reconciler or not self.reconciler.alive:
            return []  # restarted within the row: the row checked them before
        problems = []
        for reason, count in reasons.items():
            now = self.reconciler.metric("workload_resizer_outcomes_total", reason=reason)
            if now - self.outcomes[reason] < count:
                problems.append(
                    f"workload_resizer_outcomes_total{{reason={reason!r}}} rose by "
                    f"{now - self.outcomes[reason]}, {count} {reason} Events"
                )
        sized = self.world.webhook.metric("workload_resizer_webhook_sized_at_admission_total", result="sized")
        if sized - self.sized_by_webhook < reasons["SizedAtAdmission"]:
            problems.append(
                f"the webhook's sized metric rose by {sized - self.sized_by_webhook}, "
                f"{reasons['SizedAtAdmission']} pods SizedAtAdmission"
            )
        return problems


def outcome_counts(proc: ChartReconciler) -> Counter[str]:
    counts: Counter[str] = Counter()
    for labels, value in samples(proc.metrics(), "workload_resizer_outcomes_total"):
        counts[labels.get("reason", "")] += int(value)
    return counts


@pytest.fixture
def row(world: World, namespace: str) -> Iterator[Row]:
    history = PodHistory(world.kube, namespace)
    r = Row(
        world=world,
        ns=namespace,
        history=history,
        reconciler=world.reconciler,
        outcomes=outcome_counts(world.reconciler),
        sized_by_webhook=world.webhook.metric("workload_resizer_webhook_sized_at_admission_total", result="sized"),
    )
    try:
        yield r
    finally:
        history.close()
        if r.config_edited:
            # Its pods go first (terminating pods are never resized), then the chart's config is back.
            r.retire()
            world.apply_config(None)


def pin_node(node: str) -> dict[str, str]:
    """A nodeSelector on the node's name: its type is not known at admission (sized after binding)."""
    return {"kubernetes.io/hostname": node}


def sidecar(name: str, cpu: str) -> dict[str, Any]:
    return {**guaranteed(name, cpu=cpu, memory="64Mi"), "restartPolicy": "Always"}


# ---------------------------------------------------------------- the rows


def test_01_a_later_webhook_reinvokes_ours_and_the_pod_is_sized_once(world: World, row: Row) -> None:
    """A second mutating webhook changes pods after ours (a configuration ordered after the
    chart's, whose reinvocationPolicy IfNeeded stays): a 1-CPU pod pinned to n4 is created at
    800m with original-cpu 1 at generation 1 (sized once, not again on reinvocation), is
    labelled by the other webhook, and gets no pods/resize; one SizedAtAdmission Event."""
    labeller = LabellingWebhook("example.com/labelled", "yes")
    configuration = f"zz-composed-labeller-{row.ns}"
    assert configuration > world.chart.fullname, "called after ours"
    world.kube.create(MUTATING_WEBHOOKS, labeller.configuration(configuration, [row.ns]))
    try:
        wait_for(
            "the other webhook to be called",
            lambda: (
                world.probe(row.ns, {"containers": [guaranteed()]})["metadata"]["labels"].get("example.com/labelled")
                == "yes"
            ),
            timeout=30,
        )
        before = world.resizes_served()
        row.deploy("reinvoked", [guaranteed(cpu="1")], world.pin("n4"))
        (pod,) = row.wait_created("reinvoked")
        name = pod["metadata"]["name"]
        assert pod["metadata"]["labels"]["example.com/labelled"] == "yes"
        seen = [p for p in labeller.reviewed if (p["metadata"].get("labels") or {}).get("app") == "reinvoked"]
        assert seen and all(ORIGINAL_CPU in (p["metadata"].get("annotations") or {}) for p in seen), (
            "the other webhook is called after ours"
        )
        assert ours(pod)[ORIGINAL_CPU] == "1" and ours(pod)[SIZED_AT_ADMISSION] == "n4", ours(pod)
        assert cpu(pod) == (q("800m"), q("800m")) and pod["metadata"]["generation"] == 1
        row.wait_event(name, "SizedAtAdmission")
        assert world.resizes_served() == before, "no pods/resize"
        assert row.pod(name)["metadata"]["generation"] == 1
        wait_for(
            "our webhook's second decision on the pod (reinvoked)",
            lambda: (
                len(
                    [
                        r
                        for r in webhook_decisions(world.webhook, row.ns)
                        if r.get("msg") == "admission decision" and str(r.get("pod")).startswith("reinvoked-")
                    ]
                )
                >= 2
            ),
            timeout=10,
        )
    finally:
        world.kube.delete(f"{MUTATING_WEBHOOKS}/{configuration}")
        labeller.close()
    row.sweep()


def test_02_a_daemonset_across_three_families_is_created_at_their_sizes(world: World, row: Row) -> None:
    """A DaemonSet over n2d, n4 and c3 nodes: its pods pass the chart's admission policies and
    are created at their sizes at generation 1 (n4 800m, c3 769m, n2d 1), with no pods/resize:
    SizedAtAdmission on n4 and c3, AlreadyAligned on n2d."""
    before = world.resizes_served()
    row.daemonset("ds", [guaranteed(cpu="1")], {POOL_LABEL: world.pool})
    pods = row.wait_created("ds", 3)
    want = {"n4": ("800m", "SizedAtAdmission"), "c3": ("769m", "SizedAtAdmission"), "n2d": ("1", "AlreadyAligned")}
    for pod in pods:
        node_type = world.node_type(pod["spec"]["nodeName"])
        size, reason = want[node_type]
        assert (cpu(pod), pod["metadata"]["generation"]) == ((q(size), q(size)), 1), (node_type, cpu(pod))
        row.wait_event(pod["metadata"]["name"], reason)
    assert world.resizes_served() == before, "no pods/resize"
    row.sweep()


def test_03_a_family_pinned_deployment_is_created_at_its_size(world: World, row: Row) -> None:
    """A Deployment with a nodeSelector on the node-type label (n4): every replica is created at
    800m at generation 1, one SizedAtAdmission Event each, no pods/resize."""
    before = world.resizes_served()
    row.deploy("pinned", [guaranteed(cpu="1")], world.pin("n4"), replicas=2)
    for pod in row.wait_created("pinned", 2):
        assert cpu(pod) == (q("800m"), q("800m")) and pod["metadata"]["generation"] == 1, cpu(pod)
        row.wait_event(pod["metadata"]["name"], "SizedAtAdmission")
    assert world.resizes_served() == before, "no pods/resize"
    row.sweep()


def test_04_a_gated_pinned_pod_is_trusted_and_re_aligned(world: World, row: Row) -> None:
    """A pod pinned to n4 held by a scheduling gate: created, its originals bound to it by the
    reconciler while gated (generation 1), its gate removed (a spec change: generation 2), it ends
    at 800m, trusted (no OriginalsUnverified); a config edit later re-aligns it from its originals
    (1 CPU / 2 = 500m; from its spec it would be 400m)."""
    row.deploy("gated", [guaranteed(cpu="1")], world.pin("n4"), schedulingGates=[{"name": GATE}])
    (pod,) = row.wait_created("gated", running=False)
    name = pod["metadata"]["name"]
    bound = row.wait_pod(name, "with its originals bound", lambda p: ours(p)[ORIGINALS_MAC].startswith("v1.p."))
    assert bound["metadata"]["generation"] == 1 and bound["spec"].get("schedulingGates")
    row.kube.patch(
        f"/api/v1/namespaces/{row.ns}/pods/{name}", [{"op": "remove", "path": "/spec/schedulingGates"}], kind="json"
    )
    row.wait_created("gated")
    row.wait_event(name, *SIZINGS)
    row.wait_cpu(name, "800m")
    row.edit_config({"nodeTypes": {"n4": {"cpuPerf": 2.0, "memPerf": 1.0}}})
    row.wait_cpu(name, "500m")
    row.wait_sizings(name, 2)
    assert ours(row.pod(name))[ORIGINAL_CPU] == "1"
    row.sweep(sizings=2)


def test_05_pod_level_resources_are_sized_at_both_levels(world: World, row: Row) -> None:
    """A pod with pod-level resources (spec.resources) pinned to n4: created at its size at both
    levels (pod 1 -> 800m, limit 2 -> 1600m; its container 400m -> 320m, limit 800m -> 640m;
    memory unchanged) at generation 1, no pods/resize, one SizedAtAdmission Event."""
    before = world.resizes_served()
    row.deploy(
        "podlevel",
        [container("app", {"cpu": "400m", "memory": "256Mi"}, {"cpu": "800m", "memory": "512Mi"})],
        world.pin("n4"),
        resources={"requests": {"cpu": "1", "memory": "512Mi"}, "limits": {"cpu": "2", "memory": "1Gi"}},
    )
    (pod,) = row.wait_created("podlevel")
    assert parsed(pod["spec"]["resources"]) == {
        ("requests", "cpu"): q("800m"),
        ("requests", "memory"): q("512Mi"),
        ("limits", "cpu"): q("1600m"),
        ("limits", "memory"): q("1Gi"),
    }
    assert cpu(pod) == (q("320m"), q("640m")) and pod["metadata"]["generation"] == 1
    row.wait_event(pod["metadata"]["name"], "SizedAtAdmission")
    assert world.resizes_served() == before, "no pods/resize"
    row.sweep()


def test_06_opted_in_sidecars_are_sized_with_their_pod(world: World, row: Row) -> None:
    """With the config's `sidecars: true` for them, a sidecar (500m) is sized like its container
    (1 CPU) on n4: 400m and 800m, at admission for a pod pinned to the family (generation 1, no
    pods/resize) and in the same one resize for a pod whose node is known after binding."""
    row.edit_config({"sidecars": True})
    spec = {"nodeSelector": world.pin("n4"), "containers": [guaranteed()], "initContainers": [sidecar("proxy", "500m")]}
    wait_for(
        "the webhook to size sidecars",
        lambda: (
            parsed(world.probe(row.ns, spec, {ROW_LABEL: row.ns})["spec"]["initContainers"][0]["resources"])[
                ("requests", "cpu")
            ]
            == q("400m")
        ),
        timeout=30,
    )
    before = world.resizes_served()
    for app, selector in (("pinned", world.pin("n4")), ("bound", pin_node(world.nodes["n4"]))):
        row.deploy(app, [guaranteed(cpu="1")], selector, initContainers=[sidecar("proxy", "500m")])
    (bound,) = row.wait_created("bound")
    row.wait_event(bound["metadata"]["name"], "Resized")
    pinned = row.expect_created("pinned")
    for pod in [row.pod(bound["metadata"]["name"]), *pinned]:
        assert cpu(pod) == (q("800m"), q("800m")), cpu(pod)
        assert parsed(pod["spec"]["initContainers"][0]["resources"])[("limits", "cpu")] == q("400m")
    for pod in pinned:
        row.wait_event(pod["metadata"]["name"], "SizedAtAdmission")
        assert row.pod(pod["metadata"]["name"])["metadata"]["generation"] == 1
    assert world.resizes_served() == before + 1, "one resize: the bound pod's containers and sidecar together"
    row.sweep()


def test_07_pods_an_updating_vpa_manages_are_left_alone(world: World, row: Row) -> None:
    """A VerticalPodAutoscaler in InPlaceOrRecreate mode targets two Deployments (one pinned to
    n4, one whose node is known after binding): their pods keep the author's 1 CPU (generation 1,
    no pods/resize, not sized at admission: the webhook's decision names the VPA), one VPAManaged
    Event each."""
    before = world.resizes_served()
    held_before = world.webhook.metric("workload_resizer_webhook_sized_at_admission_total", result="held")
    apps = (("vpa-bound", pin_node(world.nodes["n4"])), ("vpa-pinned", world.pin("n4")))
    for app, _ in apps:
        row.kube.create(
            f"/apis/autoscaling.k8s.io/v1/namespaces/{row.ns}/verticalpodautoscalers",
            {
                "apiVersion": "autoscaling.k8s.io/v1",
                "kind": "VerticalPodAutoscaler",
                "metadata": {"name": app},
                "spec": {
                    "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": app},
                    "updatePolicy": {"updateMode": "InPlaceOrRecreate"},
                },
            },
        )
    # The probe's ReplicaSet names no Deployment: held once the webhook has seen an updating VPA here.
    probe = {"nodeSelector": world.pin("n4"), "containers": [guaranteed()]}
    wait_for(
        "the webhook to see the VPAs",
        lambda: SIZED_AT_ADMISSION not in (world.probe(row.ns, probe)["metadata"].get("annotations") or {}),
        timeout=60,
    )
    for app, selector in apps:
        row.deploy(app, [guaranteed(cpu="1")], selector)
    (bound,) = row.wait_created("vpa-bound")
    row.wait_event(bound["metadata"]["name"], "VPAManaged")
    for pod in row.expect_created("vpa-pinned"):
        row.wait_event(pod["metadata"]["name"], "VPAManaged")
    for app in ("vpa-bound", "vpa-pinned"):
        for pod in row.pods(app):
            assert cpu(pod) == (q("1"), q("1")) and pod["metadata"]["generation"] == 1, (app, cpu(pod))
            assert SIZED_AT_ADMISSION not in ours(pod), (app, "sized at admission although a VPA manages it")
    # The webhook writes its log lines in batches: wait for the pinned pods' decision lines to reach the file.
    decisions = wait_for(
        "the webhook's decision lines of the pinned pods",
        lambda: [r for r in webhook_decisions(world.webhook, row.ns) if str(r.get("pod")).startswith("vpa-pinned-")],
        timeout=30,
    )
    assert decisions and all(
        "VerticalPodAutoscaler vpa-pinned (updateMode InPlaceOrRecreate) manages the requests of Deployment "
        "vpa-pinned" in str(r.get("sizingHeld"))
        for r in decisions
    ), decisions
    assert world.webhook.metric("workload_resizer_webhook_sized_at_admission_total", result="held") >= held_before + 2
    assert world.resizes_served() == before, "no pods/resize"
    row.sweep(sizings=0)


def test_08_a_size_a_limit_range_would_refuse_is_held_and_never_blocks(world: World, row: Row) -> None:
    """A LimitRange (cpu min 900m) would refuse the n4 size (800m): the pods are created at the
    author's 1 CPU, never blocked (pinned to n4, and known after binding), get no pods/resize and
    one ResizeHeld Event naming the LimitRange each; the held-resizes gauge counts them."""
    row.kube.create(
        f"/api/v1/namespaces/{row.ns}/limitranges",
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": {"name": "floor"},
            "spec": {"limits": [{"type": "Container", "min": {"cpu": "900m"}}]},
        },
    )
    spec = {"nodeSelector": world.pin("n4"), "containers": [guaranteed()]}

    def held() -> bool:  # the webhook has seen the LimitRange: a pinned pod is no longer sized
        try:
            return SIZED_AT_ADMISSION not in (world.probe(row.ns, spec)["metadata"].get("annotations") or {})
        except ApiError:  # sized, and refused by the LimitRange
            return False

    wait_for("the webhook to hold the size for the LimitRange", held, timeout=60)
    before = world.resizes_served()
    for app, selector in (("held-pinned", world.pin("n4")), ("held-bound", pin_node(world.nodes["n4"]))):
        row.deploy(app, [guaranteed(cpu="1")], selector)
    for app in ("held-pinned", "held-bound"):
        (pod,) = row.wait_created(app)
        name = pod["metadata"]["name"]
        row.wait_event(name, "ResizeHeld")
        event = next(e for e in row.kube.events_for(row.ns, name) if e["reason"] == "ResizeHeld")
        assert "LimitRange floor" in event["message"], event["message"]
        assert cpu(row.pod(name)) == (q("1"), q("1")) and row.pod(name)["metadata"]["generation"] == 1
    assert world.resizes_served() == before, "no pods/resize"
    assert world.reconciler.metric("workload_resizer_resizes_held", constraint="LimitRange") >= 2
    row.sweep(sizings=0)


def test_08b_a_held_size_is_resized_once_the_limit_range_allows_it(world: World, row: Row) -> None:
    """A LimitRange (cpu min 900m) holds the n4 size (800m) of a pod known after binding; lowered
    to 500m, it lets the pod be resized to 800m, once, with no ResizeFailed (a refusal by the
    apiserver's LimitRanger, whose cache may still hold the old floor, is tried again)."""
    path = f"/api/v1/namespaces/{row.ns}/limitranges"
    floor = {"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "floor"}}
    row.kube.create(path, {**floor, "spec": {"limits": [{"type": "Container", "min": {"cpu": "900m"}}]}})
    row.deploy("raised", [guaranteed(cpu="1")], pin_node(world.nodes["n4"]))
    (pod,) = row.wait_created("raised")
    name = pod["metadata"]["name"]
    row.wait_event(name, "ResizeHeld")
    assert cpu(row.pod(name)) == (q("1"), q("1")) and row.pod(name)["metadata"]["generation"] == 1
    row.kube.patch(f"{path}/floor", {"spec": {"limits": [{"type": "Container", "min": {"cpu": "500m"}}]}})
    now = row.wait_cpu(name, "800m")
    row.wait_event(name, "Resized")
    assert now["metadata"]["generation"] == 2, "one resize"
    assert not row.events(name)["ResizeFailed"], row.explain(name)
    row.sweep(sizings=1)


def test_09_a_config_edit_re_aligns_from_the_originals(world: World, row: Row) -> None:
    """n4 sized pods (one resized after binding, one sized at admission) and then n4 twice the
    baseline: both re-aligned from their originals, 1 CPU / 2 = 500m (from their spec it would
    be 400m), one resize each, trusted."""
    row.deploy("bound", [guaranteed(cpu="1")], pin_node(world.nodes["n4"]))
    row.deploy("pinned", [guaranteed(cpu="1")], world.pin("n4"))
    (bound,) = row.wait_created("bound")
    row.wait_event(bound["metadata"]["name"], "Resized")
    pinned = row.expect_created("pinned")
    for pod in pinned:
        row.wait_event(pod["metadata"]["name"], "SizedAtAdmission")
    row.edit_config({"nodeTypes": {"n4": {"cpuPerf": 2.0, "memPerf": 1.0}}})
    for pod, generation in [(bound, 3), *((p, 2) for p in pinned)]:
        now = row.wait_cpu(pod["metadata"]["name"], "500m")
        row.wait_sizings(pod["metadata"]["name"], 2)
        assert now["metadata"]["generation"] == generation, (pod["metadata"]["name"], "one resize")
        assert ours(now)[ORIGINAL_CPU] == "1"
    row.sweep(sizings=2)


def key_data() -> str:
    return base64.b64encode(os.urandom(48)).decode()


def test_10a_a_newer_key_signs_and_both_keys_verify(world: World, row: Row) -> None:
    """A second, newer key added to the Secret: once both programs reloaded it, new pods are
    signed with it, and a config edit re-aligns the pods of both keys (no OriginalsUnverified,
    no pod counted as signed with an unknown key)."""
    ns_secret, secret = world.chart.keys_secret
    path = f"/api/v1/namespaces/{ns_secret}/secrets/{secret}"
    row.deploy("old", [guaranteed(cpu="1")], pin_node(world.nodes["n4"]))
    row.deploy("old-pinned", [guaranteed(cpu="1")], world.pin("n4"))
    (old,) = row.wait_created("old")
    row.wait_event(old["metadata"]["name"], "Resized")
    reloads = world.reconciler_key_reloads()
    (first,) = world.kube.get(path)["data"]
    newer = new_key_id()  # sorts after the one the reconciler created
    world.kube.patch(path, {"data": {newer: key_data()}})
    try:
        # As docs/operations.md says: new pods once both programs have the key.
        wait_for(
            "the reconciler to reload the keys (every --config-refresh-interval)",
            lambda: world.reconciler_key_reloads() > reloads,
            timeout=60,
        )
        wait_for("the webhook to sign with the newer key", lambda: world.signing_key() == newer, timeout=60)
        row.deploy("new", [guaranteed(cpu="1")], pin_node(world.nodes["n4"]))
        (new,) = row.wait_created("new")
        row.wait_event(new["metadata"]["name"], "Resized")
        assert key_id_of(ours(row.pod(new["metadata"]["name"]))[ORIGINALS_MAC]) == newer
        pinned = row.expect_created("old-pinned")
        for pod in pinned:
            row.wait_event(pod["metadata"]["name"], "SizedAtAdmission")
        row.edit_config({"nodeTypes": {"n4": {"cpuPerf": 2.0, "memPerf": 1.0}}})
        for pod in [old, new, *pinned]:
            row.wait_cpu(pod["metadata"]["name"], "500m")
            row.wait_sizings(pod["metadata"]["name"], 2)
        assert world.reconciler.metric("workload_resizer_originals_unknown_key_pods") == 0
        row.sweep(sizings=2)
    finally:
        # The world's one key again (this row's pods are gone first: no pod carries the newer key).
        row.retire()
        world.kube.patch(path, {"data": {newer: None}})
        world.restart_reconciler()
        wait_for("the webhook to sign with the first key again", lambda: world.signing_key() == first, timeout=60)


def test_10b_a_lost_key_is_counted_and_nothing_is_recaptured(world: World, row: Row) -> None:
    """The keys Secret deleted and the reconciler restarted (it creates a new Secret): the
    unknown-key gauge counts the pods signed with the lost key, and none of them is re-captured
    (their original-* annotations and MAC stay), resized or raised, not even when a config edit
    has them planned again."""
    ns_secret, secret = world.chart.keys_secret
    path = f"/api/v1/namespaces/{ns_secret}/secrets/{secret}"
    row.deploy("bound", [guaranteed(cpu="1")], pin_node(world.nodes["n4"]))
    row.deploy("baseline", [guaranteed(cpu="1")], pin_node(world.nodes["n2d"]))
    row.deploy("pinned", [guaranteed(cpu="1")], world.pin("n4"))
    for app, reason in (("bound", "Resized"), ("baseline", "AlreadyAligned")):
        (pod,) = row.wait_created(app)
        row.wait_event(pod["metadata"]["name"], reason)
    for pod in row.expect_created("pinned"):
        row.wait_event(pod["metadata"]["name"], "SizedAtAdmission")
    row.sweep(final=False)
    before = {p["metadata"]["name"]: p for app in ("bound", "baseline", "pinned") for p in row.pods(app)}
    saved = world.kube.get(path)
    try:
        world.kube.delete(path)
        world.restart_reconciler()
        assert world.kube.get(path)["data"] != saved["data"], "a new key"
        wait_for(
            "the unknown-key gauge to count the pods signed with the lost key",
            lambda: world.reconciler.metric("workload_resizer_originals_unknown_key_pods") >= len(before),
            timeout=60,
        )
        wait_for("the reconciler idle", world.reconciler_idle, timeout=30)
        # A config edit makes it plan every one of them again: still nothing to take from the spec.
        row.edit_config({"nodeTypes": {"n4": {"cpuPerf": 2.0, "memPerf": 1.0}}})
        wait_for("the reconciler to decide on the edited config", world.reconciler_idle, timeout=30)
        for name, pod in before.items():
            now = row.pod(name)
            assert ours(now) == ours(pod), (name, "re-captured", ours(pod), ours(now))
            assert (cpu(now), now["metadata"]["generation"]) == (cpu(pod), pod["metadata"]["generation"]), name
            assert not row.events(name)["OriginalsReplaced"], name
        row.sweep(honest=False)
    finally:
        row.retire()
        world.kube.delete(path)
        world.kube.create(
            f"/api/v1/namespaces/{ns_secret}/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": secret,
                    "labels": saved["metadata"].get("labels") or {},
                    "annotations": saved["metadata"].get("annotations") or {},
                },
                "type": saved.get("type", "Opaque"),
                "data": saved["data"],
            },
        )
        world.restart_reconciler()
        world.chart.project_keys().wait_for(
            "the lost key back", lambda data: data == {k: base64.b64decode(v) for k, v in saved["data"].items()}
        )
        world.restart_webhook()


def test_11_restore_puts_every_pod_back_to_its_originals(world: World, row: Row) -> None:
    """README's uninstall: the reconciler stopped, `workload-resizer restore` as a principal the
    chart's admissionPolicy.exemptGroups names (system:masters) puts every pod back to what its
    author wrote (sized after binding, sized at admission, aligned) and removes our annotations."""
    row.deploy("bound", [guaranteed(cpu="1")], pin_node(world.nodes["n4"]))
    row.deploy("baseline", [guaranteed(cpu="1")], pin_node(world.nodes["n2d"]))
    row.deploy("pinned", [guaranteed(cpu="1")], world.pin("n4"))
    for app, reason in (("bound", "Resized"), ("baseline", "AlreadyAligned")):
        (pod,) = row.wait_created(app)
        row.wait_event(pod["metadata"]["name"], reason)
    for pod in row.expect_created("pinned"):
        row.wait_event(pod["metadata"]["name"], "SizedAtAdmission")
    row.sweep(final=False)
    args = world.chart.args("reconciler")
    world.stop_reconciler()
    try:
        restored = subprocess.run(
            [
                sys.executable,
                "-m",
                "commands",
                "restore",
                f"--kubeconfig={world.cluster.kubeconfig}",
                f"--only-namespace={row.ns}",
                f"--namespace={flag_value(args, '--namespace')}",
                f"--exclude-namespaces={flag_value(args, '--exclude-namespaces')}",
                f"--originals-keys-secret={flag_value(args, '--originals-keys-secret')}",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert restored.returncode == 0, restored.stdout + restored.stderr
        for app in ("bound", "baseline", "pinned"):
            for pod in row.pods(app):
                assert cpu(pod) == (q("1"), q("1")), (app, cpu(pod), restored.stdout)
                assert ours(pod) == {}, (app, ours(pod))
        row.sweep()
    finally:
        row.retire()
        world.restart_reconciler()


# Two container names whose annotation keys collided (a 41-character common prefix, then
# names whose sha256 share their first 8 hex digits: what the keys kept of a long name).
COLLIDING = ("a" * 41 + "-000000000047221", "a" * 41 + "-000000000055813")


def test_12a_containers_whose_keys_would_collide_keep_their_own_originals(world: World, row: Row) -> None:
    """A tenant names two containers so that their original-* keys would be the same (1 CPU and
    4 CPU): neither container is ever sized from the other's value; each ends at its own
    admitted value x ratio (800m, 3200m on n4) or is left as its author wrote it."""
    first, second = COLLIDING
    pods = [guaranteed(first, cpu="1"), guaranteed(second, cpu="4")]
    row.deploy("collide-bound", copy.deepcopy(pods), pin_node(world.nodes["n4"]))
    row.deploy("collide-pinned", copy.deepcopy(pods), world.pin("n4"))
    (bound,) = row.wait_created("collide-bound")
    wait_for("the reconciler to decide the pod", lambda: row.events(bound["metadata"]["name"]), timeout=60)
    for pod in [row.pod(bound["metadata"]["name"]), *row.expect_created("collide-pinned")]:
        assert cpu(pod, first)[0] in (q("800m"), q("1")), (pod["metadata"]["name"], first, cpu(pod, first))
        assert cpu(pod, second)[0] in (q("3200m"), q("4")), (pod["metadata"]["name"], second, cpu(pod, second))
    row.sweep(sizings=None, honest=False)


def test_12b_a_binding_carries_no_product_annotations(world: World, row: Row) -> None:
    """A tenant who may schedule its pods (pods/binding) binds one with workload-resizer.io
    annotations claiming it is already sized for n4: those never reach the pod (the chart's
    policy refuses them); bound without them, the pod is sized from what its author wrote (800m)."""
    tenant = Kube(
        tenant_kubeconfig(
            row.kube,
            world.cluster,
            row.ns,
            rules=[{"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]}],
        )
    )
    row.deploy("self-scheduled", [guaranteed(cpu="1")], {POOL_LABEL: world.pool}, schedulerName="tenant-scheduler")
    (pod,) = row.wait_created("self-scheduled", running=False)
    name = pod["metadata"]["name"]
    # (A time the product never writes: its own applied-* after the resize may have the same keys.)
    forged = {APPLIED_INSTANCE_TYPE: "n4", APPLIED_SIZE: spec_size(pod), APPLIED_AT: "2000-01-01T00:00:00Z"}
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "annotations": forged},
        "target": {"apiVersion": "v1", "kind": "Node", "name": world.nodes["n4"]},
    }
    bind = f"/api/v1/namespaces/{row.ns}/pods/{name}/binding"
    try:
        tenant.create(bind, binding)
    except ApiError as err:
        assert err.status in (403, 422), err
        tenant.create(bind, {**binding, "metadata": {"name": name}})
    row.wait_created("self-scheduled")
    landed = {
        k: v for k, v in ours(row.pod(name)).items() if k in forged and v == forged[k] and k != APPLIED_INSTANCE_TYPE
    }
    assert not landed, f"the Binding's annotations reached the pod: {landed}"
    row.wait_event(name, "Resized")
    row.wait_cpu(name, "800m")
    row.sweep(honest=False)


def test_12c_a_forged_status_never_steers_a_revert_above_the_admitted_size(world: World, row: Row) -> None:
    """While its resize is in flight (deferred by the node's kubelet), a tenant who may write
    pods/status reports the resize infeasible and the container at 4 CPU: the reconciler's
    revert never sets the pod above the 1 CPU its author wrote."""
    tenant = Kube(
        tenant_kubeconfig(
            row.kube,
            world.cluster,
            row.ns,
            rules=[{"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]}],
        )
    )
    node = world.nodes["deferring"]
    row.deploy("inflight", [guaranteed(cpu="1")], pin_node(node))
    (pod,) = row.wait_created("inflight")
    name = pod["metadata"]["name"]
    # Typed once the pod runs, so its resize goes to running containers (a resize that lands
    # before they start is simply where they start): the node's fake kubelet defers it.
    world.label_node_type(node, "n4")
    try:
        deferred = row.wait_pod(
            name,
            "with its resize deferred",
            lambda p: json.loads(ours(p).get(RESIZE_STATE) or "{}").get("state") == "deferred",
        )
        assert cpu(deferred) == (q("800m"), q("800m"))
        statuses = copy.deepcopy(deferred["status"]["containerStatuses"])
        for status in statuses:
            status["resources"] = {
                "requests": {"cpu": "4", "memory": "256Mi"},
                "limits": {"cpu": "4", "memory": "256Mi"},
            }
        # A kubelet reports at its own pace (the fake one at once, which would overwrite the
        # forgery before the reconciler reads it): it is held while the tenant's status stands.
        world.cluster.local.signal("kwok-capable", "STOP")
        try:
            wait_for("the reconciler idle", world.reconciler_idle, timeout=30)
            decided = world.decisions()
            tenant.patch(
                f"/api/v1/namespaces/{row.ns}/pods/{name}/status",
                {
                    "status": {
                        "containerStatuses": statuses,
                        "conditions": [
                            {
                                "type": "PodResizePending",
                                "status": "True",
                                "reason": "Infeasible",
                                "message": "forged",
                                "observedGeneration": deferred["metadata"]["generation"],
                                "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                            }
                        ],
                    }
                },
                "strategic",
            )
            wait_for(
                "the reconciler to decide on the forged status",
                lambda: world.decisions() > decided and world.reconciler_idle(),
                timeout=60,
            )
        finally:
            world.cluster.local.signal("kwok-capable", "CONT")
        now = row.pod(name)
        assert cpu(now)[0] <= q("1") and cpu(now)[1] <= q("1"), f"reverted above the admitted 1 CPU: {cpu(now)}"
        row.sweep(sizings=None, honest=False)
    finally:
        world.label_node_type(node, None)
