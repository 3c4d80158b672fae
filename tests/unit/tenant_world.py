"""A tenant and the product around one pod, on the programs' real decisions (no cluster).

The product: the webhook (:func:`app.review.handle_review` on a real AdmissionReview, its JSON
patch applied as the apiserver applies it), the reconciler's three writes and its revert
(:func:`resizer.baseline`, :func:`resizer.plan_bound_pod`, :func:`reconciler.revert.decide_revert`,
in the order and on the conditions of reconciler.controller / writes / follow), ``plan``
(:func:`resizer.forecast.forecast_fleet`) and ``restore`` (:func:`resizer.restore.restore_decision`).

The tenant may do anything the admission policies would refuse (they are off): write any
``workload-resizer.io/*`` annotation at any generation (a Binding's annotations included), mint
admission MACs and sized records through made-up reviews, copy a sibling's, bump the generation,
create pods from any content (the webhook called again on its own answer is one), write the pod's
status. The world keeps what the author wrote (``admitted``) apart from the product's view, and
:meth:`World.check` holds every program to it after each step.

Every pod of the world shares one admission identity (namespace, generateName, controller):
they are replicas of one ReplicaSet, so whatever the webhook signs for one verifies on all.
"""

from __future__ import annotations

import base64
import copy
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import orjson

from app.review import encode, handle_review
from app.sizing import SizingContext
from devkit.jsonpatch import apply_patch as apply_json_patch
from ops.keys import generate_key, new_key_id
from reconciler.outcome import ERROR, IN_PROGRESS, INFEASIBLE, PENDING, Stage, observe, spec_size
from reconciler.pods import recorded_state, resized_from_originals
from reconciler.revert import decide_revert, size_of_originals, sizes_before
from resizer import (
    APPLIED_INSTANCE_TYPE,
    APPLIED_SIZE,
    ORIGINALS_MAC,
    RESIZE_STATE,
    SIZED_AT_ADMISSION,
    SKIP,
    Baseline,
    KeyRing,
    OriginalsError,
    PlanError,
    QuantityError,
    Trust,
    baseline,
    coerce_quantity,
    early_binding,
    eligibility,
    is_controller_owned_key,
    is_original_key,
    key_id_of,
    load_config,
    original_annotations,
    original_key,
    originals_from_spec_annotations,
    plan_bound_pod,
    pod_mac,
    read_originals,
    resolve_policy,
)
from resizer.forecast import forecast_fleet
from resizer.plan import ResizePlan, plan_resize
from resizer.podstate import legacy_original_key, read_state
from resizer.preflight import apply_patch as apply_resize
from resizer.restore import restore_decision
from resizer.scope import namespace_scope

PREFIX = "workload-resizer.io/"
LABEL = "example.com/node-type"
CONFIG_TEXT = """
baselineNodeType: n2d
nodeTypes:
  n2d: {cpuPerf: 1.0, memPerf: 1.0}
  n4: {cpuPerf: 1.25, memPerf: 1.0}
  e2: {cpuPerf: 0.5, memPerf: 1.0}
bounds:
  cpu: {min: "1m", max: "64"}
  memory: {min: "1Mi", max: "64Gi"}
"""
CONFIG = load_config(CONFIG_TEXT)
NODE_OF = {"n2d": "n2d-a", "n4": "n4-a", "e2": "e2-a"}  # node type -> the one node of that type
# (A version of its own: the webhook memoises sizings per context version and signing key.)
SIZING = SizingContext(34_001, LABEL, {node: node_type for node_type, node in NODE_OF.items()}, CONFIG_TEXT)
SCOPE = namespace_scope("workload-resizer-system")
RING = KeyRing({"k0001": b"k" * 32})
# What the reconciler writes when it recreates a lost keys Secret (a new key, a new id).
RECREATED = KeyRing({new_key_id(): generate_key()})
OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9f", "uid": "rs-uid", "controller": True}
# Two valid container names whose 8-hex legacy keys are equal (tests/unit/test_resizer_original_keys.py).
COLLIDING = ("payments-api-with-a-really-long-name-for-z41osl3f8", "payments-api-with-a-really-long-name-for-qhtejfsi8")
INJECTED = "proxy"
SLOTS = tuple((resource, kind) for resource in ("cpu", "memory") for kind in ("request", "limit"))
_SPEC_FIELD = {"request": "requests", "limit": "limits"}

Slot = tuple[str, str, str]  # (container, resource, kind)
Values = dict[Slot, Fraction]  # cpu in cores, memory in bytes


class Violation(AssertionError):
    """A program set or trusted a value the author never admitted."""


def resources(cpu_milli: int, memory_mi: int) -> dict[str, Any]:
    """Guaranteed: limits equal requests."""
    values = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mi}Mi"}
    return {"requests": dict(values), "limits": dict(values)}


def spec_values(pod: Mapping[str, Any]) -> Values:
    return {
        (c["name"], resource, kind): coerce_quantity(value)
        for c in pod["spec"].get("containers") or []
        for resource, kind in SLOTS
        if (value := ((c.get("resources") or {}).get(_SPEC_FIELD[kind]) or {}).get(resource)) is not None
    }


def annotations(pod: Mapping[str, Any]) -> dict[str, Any]:
    return pod["metadata"].setdefault("annotations", {})


def ours(pod: Mapping[str, Any]) -> dict[str, str]:
    return {k: v for k, v in annotations(pod).items() if k.startswith(PREFIX)}


def reference_plan(admitted: Values, node_type: str) -> Values:
    """admitted x baselinePerf / nodePerf of ``node_type``, bounds applied: the plan of each of the
    author's containers as written (alone in a never-changed pod, no annotation), by the product's
    own planner."""
    planned = dict(admitted)
    for name in sorted({name for name, _, _ in admitted}):
        pod = {
            "metadata": {"namespace": "shop", "annotations": {}},
            "spec": {
                "containers": [
                    {
                        "name": name,
                        "resources": {
                            _SPEC_FIELD[kind]: {
                                resource: quantity(resource, admitted[(name, resource, kind)])
                                for resource, k in SLOTS
                                if k == kind and (name, resource, kind) in admitted
                            }
                            for kind in ("request", "limit")
                        },
                    }
                ]
            },
        }
        plan = plan_resize(pod, resolve_policy(CONFIG, pod), node_type)
        for change in plan.changes:
            unit = 1000 if change.resource == "cpu" else 1
            planned[(name, change.resource, "request")] = Fraction(change.desired_request, unit)
            if change.desired_limit is not None:
                planned[(name, change.resource, "limit")] = Fraction(change.desired_limit, unit)
    return planned


def quantity(resource: str, value: Fraction) -> str:
    """A Kubernetes quantity for a value (cores or bytes) in whole millicores or bytes."""
    return f"{value * 1000}m" if resource == "cpu" else f"{value}"


@dataclass(frozen=True)
class Record:
    """A sized record the webhook wrote: its originals, node type and the spec values it sized."""

    originals: Mapping[str, str]
    node_type: str
    sized: Mapping[str, str]


@dataclass
class InFlight:
    """The reconciler's memory of its resize of the pod (reconciler.memory.InFlight)."""

    originals: dict[str, str]
    before: tuple[Any, ...]


@dataclass
class World:
    pod: dict[str, Any]
    node_type: str
    admitted: Values
    ring: KeyRing = RING
    honest: bool = True  # no tenant move on the pod since it was admitted
    flight: InFlight | None = None
    # A restart cut a resize of ours off before its record (step 3): docs/security.md, Limits.
    cut_off: bool = False
    # The reconciler bound the originals of the gated pod at generation 1 (reconciler.gated), and
    # whether the gate went before it did (docs/how-it-works.md, gated pods: refused, never raised).
    bound_at_the_gate: bool = False
    raced: bool = False
    types_seen: set[str] = field(default_factory=set)  # the node types the pod ran on
    ledger: dict[str, Record] = field(default_factory=dict)  # sized MAC -> the record it signs
    uids: itertools.count[int] = field(default_factory=itertools.count)
    story: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ the webhook

    def webhook(self, obj: dict[str, Any]) -> dict[str, Any]:
        """One AdmissionReview (CREATE) through the real webhook; the pod as it patches it. Every
        sized record it answers goes to the ledger."""
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "review-uid",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "shop",
                "operation": "CREATE",
                "object": obj,
            },
        }
        answer = handle_review(orjson.dumps(review), self.ring, SCOPE, SIZING)
        status, body = answer.status, encode(answer)
        assert status == 200
        response = orjson.loads(body)["response"]
        ops = orjson.loads(base64.b64decode(response["patch"])) if "patch" in response else []
        patched = apply_json_patch(copy.deepcopy(obj), ops)
        answer = ours(patched)
        mac = answer.get(ORIGINALS_MAC)
        if SIZED_AT_ADMISSION in answer and isinstance(mac, str):
            self.ledger[mac] = Record(
                {k: v for k, v in answer.items() if is_original_key(k)},
                answer[SIZED_AT_ADMISSION],
                originals_from_spec_annotations(patched),
            )
        return patched

    def authors_values(self, pod: Mapping[str, Any]) -> tuple[Values, bool]:
        """What the author of ``pod`` wrote: the originals of a sized record the webhook gave for them
        when the pod holds exactly that record and the values it sized (True), else the spec."""
        values = spec_values(pod)
        found = ours(pod)
        mac = found.get(ORIGINALS_MAC)
        record = self.ledger.get(str(mac))
        # (The webhook recognises only a record it can verify: one signed with a key it still has.)
        if (
            record is None
            or key_id_of(mac) not in self.ring.keys
            or found.get(SIZED_AT_ADMISSION) != record.node_type
            or {k: v for k, v in found.items() if is_original_key(k)} != dict(record.originals)
        ):
            return values, False
        try:
            spec = originals_from_spec_annotations(pod)
        except OriginalsError:
            return values, False
        if any(spec.get(key) != value for key, value in record.sized.items()):
            return values, False
        slots = {
            original_key(c["name"], resource, kind): (c["name"], resource, kind)
            for c in pod["spec"]["containers"]
            for resource, kind in SLOTS
        }
        return {**values, **{slots[k]: coerce_quantity(v) for k, v in record.originals.items()}}, True

    def create(self, obj: dict[str, Any], through_webhook: bool = True) -> None:
        """A new pod from ``obj`` (the webhook down: stored as sent), scheduled where its pin says."""
        sent = copy.deepcopy(obj)
        sent["metadata"] = {
            k: v for k, v in sent["metadata"].items() if k not in ("name", "uid", "generation", "resourceVersion")
        }
        sent["spec"].pop("nodeName", None)
        sent.pop("status", None)
        admitted, _ = self.authors_values(sent)
        stored = self.webhook(sent) if through_webhook else sent
        pin = (stored["spec"].get("nodeSelector") or {}).get(LABEL)
        self.node_type = pin if pin in NODE_OF else self.node_type
        uid = next(self.uids)
        stored["metadata"].update(name=f"web-7d9f-{uid:05d}", uid=f"pod-uid-{uid}", generation=1)
        stored["metadata"].setdefault("annotations", {})
        stored["status"] = {"phase": "Running", "qosClass": "Guaranteed"}
        if not stored["spec"].get("schedulingGates"):
            stored["spec"]["nodeName"] = NODE_OF[self.node_type]
        self.pod, self.admitted, self.honest, self.flight, self.cut_off = stored, admitted, True, None, False
        self.bound_at_the_gate = self.raced = False
        self.types_seen = {self.node_type}
        self.program_set("webhook", spec_values(stored), with_authors_own=True)

    def adopt_an_honest_author(self) -> None:
        """A never-changed pod holding exactly a record the webhook gave (minted through a made-up
        review, copied from a sibling) is the pod an author of its originals gets: theirs from now on."""
        if self.pod["metadata"]["generation"] == 1:
            values, recorded = self.authors_values(self.pod)
            if recorded and values != self.admitted:
                self.story.append("an honest author's pod")
                self.admitted = values

    # ------------------------------------------------------------------ the reconciler

    def decide(self) -> tuple[Baseline, ResizePlan] | None:
        """The reconciler's decision for the pod as it is (reconciler.controller._plan)."""
        pod = self.pod
        if not pod["spec"].get("nodeName") or not eligibility(pod).eligible:
            return None
        try:
            base = baseline(pod, self.ring, vouched=self.flight.originals if self.flight else None)
            if base.refused:
                return None
            plan = plan_bound_pod(
                base.pod, resolve_policy(CONFIG, pod), self.node_type, False, False, base.check.scope == "sized"
            )
        except (OriginalsError, QuantityError, PlanError):
            return None
        if base.check.trust is Trust.TRUSTED_IF_ALIGNED and plan.patch:
            return None
        if plan.outcome not in ("Resize", "AlreadyAligned"):
            return None
        return base, plan

    def reconcile(self) -> None:
        """What the reconciler does on the pod's next event: step 1 (the authority's stamp), step 2
        (the resize) or, when the spec holds its plan, step 3 (the kubelet actuated it); on a pod
        still held by its scheduling gates, the binding of its originals (reconciler.gated)."""
        if not self.pod["spec"].get("nodeName"):
            self.bind_at_the_gate()
            return
        decided = self.decide()
        if decided is None:
            return
        base, plan = decided
        pod = self.pod
        if base.stamp:  # step 1
            for key, value in base.stamp.items():
                if value is None:
                    annotations(pod).pop(key, None)
                else:
                    annotations(pod)[key] = value
            decided = self.decide()
            if decided is None:
                return
            base, plan = decided
        if plan.patch:  # step 2
            self.program_set("reconciler", self.resized(plan))
            before = sizes_before(pod, self.flight.before if self.flight else ())
            pod["spec"] = apply_resize(pod, plan.patch)
            pod["metadata"]["generation"] += 1
            pod["status"].pop("conditions", None)
            self.flight = InFlight(original_annotations(pod), before)
            return
        annotations(pod).update({APPLIED_INSTANCE_TYPE: self.node_type, APPLIED_SIZE: spec_size(pod)})
        annotations(pod).pop(RESIZE_STATE, None)
        self.bind()  # step 3
        self.flight = None

    def bind_at_the_gate(self) -> None:
        """An eligible pod at generation 1 held by scheduling gates: the authority's early binding
        written as one merge patch (reconciler.gated)."""
        pod = self.pod
        if not pod["spec"].get("schedulingGates") or not eligibility(pod).eligible:
            return
        try:
            patch = early_binding(pod, self.ring)
        except (OriginalsError, QuantityError):
            return
        for key, value in (patch or {}).items():
            if value is None:
                annotations(pod).pop(key, None)
            else:
                annotations(pod)[key] = value
        self.bound_at_the_gate = self.bound_at_the_gate or bool(patch)

    def ungate(self) -> None:
        """The pod's scheduling gates removed (a spec change: generation 2), then it is scheduled."""
        self.raced = self.raced or not self.bound_at_the_gate
        self.pod["spec"].pop("schedulingGates")
        self.pod["spec"]["nodeName"] = NODE_OF[self.node_type]
        self.pod["metadata"]["generation"] += 1

    def bind(self) -> None:
        """The pod MAC the reconciler's writes carry when the authority lets it sign (reconciler.act.binding)."""
        try:
            if baseline(self.pod, self.ring, vouched=self.flight.originals if self.flight else None).may_sign:
                annotations(self.pod).update(pod_mac(self.pod, self.ring))
                self.cut_off = False
        except (OriginalsError, QuantityError):
            pass

    def resized(self, plan: ResizePlan) -> Values:
        return {
            slot: value
            for slot, value in spec_values({"spec": apply_resize(self.pod, plan.patch)}).items()
            if spec_values(self.pod).get(slot) != value
        }

    def stalled(self, reported_cpu_milli: int | None, condition: str) -> None:
        """The pod's status says the resize in its spec is infeasible or failing, the containers
        reporting ``reported_cpu_milli`` for the first container (None: the size before our resize);
        the reconciler follows it (reconciler.act): records it, and sets the spec back if it may."""
        pod = self.pod
        if reported_cpu_milli is None:
            if self.flight is None:
                return
            first = pod["spec"]["containers"][0]["name"]
            reported_cpu = self.flight.before[0].get(("containers", first, "requests", "cpu"))
        else:
            reported_cpu = Fraction(reported_cpu_milli, 1000)
        statuses = []
        for index, container in enumerate(pod["spec"]["containers"]):
            reported = copy.deepcopy(container.get("resources") or {})
            if index == 0 and reported_cpu is not None:
                for kind in ("requests", "limits"):
                    reported.setdefault(kind, {})["cpu"] = f"{int(reported_cpu * 1000)}m"
            statuses.append({"name": container["name"], "running": True, "resources": reported})
        generation = pod["metadata"]["generation"]
        conditions = (
            [{"type": PENDING, "status": "True", "reason": INFEASIBLE, "observedGeneration": generation}]
            if condition == "infeasible"
            else [{"type": IN_PROGRESS, "status": "True", "reason": ERROR}]
        )
        pod["status"].update(containerStatuses=statuses, conditions=conditions, observedGeneration=generation)
        decided = self.decide()
        if decided is None or observe(pod).stage not in (Stage.INFEASIBLE, Stage.ERROR):
            return
        base, plan = decided
        if plan.patch or (
            self.flight is None
            and not resized_from_originals(plan)
            and recorded_state(read_state(pod), self.node_type) is None
        ):
            return  # the reconciler resizes, or records the pod aligned: no resize of ours to set back
        before = self.flight.before if self.flight else ()
        revert = decide_revert(
            pod, before, None if before else size_of_originals(base.pod), base.check.trust is Trust.TRUSTED
        )
        annotations(pod)[RESIZE_STATE] = f'{{"state":"{condition}","nodeType":"{self.node_type}"}}'
        self.bind()
        if revert.refused or not revert.patch:
            return
        self.program_set(
            "revert",
            {
                slot: value
                for slot, value in spec_values({"spec": apply_resize(pod, revert.patch)}).items()
                if spec_values(pod).get(slot) != value
            },
            with_authors_own=True,
        )
        pod["spec"] = apply_resize(pod, revert.patch)
        pod["metadata"]["generation"] += 1
        pod["status"].pop("conditions", None)
        self.flight = None

    def restart(self) -> None:
        """The reconciler restarts: it forgets its resizes in flight."""
        self.cut_off = self.cut_off or self.flight is not None
        self.flight = None

    def relabel(self, node_type: str) -> None:
        """The pod's node gets another node-type label (a running pod stays where it is)."""
        self.node_type = node_type
        self.types_seen.add(node_type)

    # ------------------------------------------------------------------ the invariant

    def program_set(self, program: str, values: Values, with_authors_own: bool = False) -> None:
        """A program sets ``values``: never above the admitted value x the ratio of the pod's node
        type (or, ``with_authors_own``, the admitted value itself: the webhook's spec as authored, a
        revert to the size before our resize)."""
        ceiling = reference_plan(self.admitted, self.node_type)
        earlier = [reference_plan(self.admitted, t) for t in self.types_seen] if with_authors_own else []
        for slot, value in values.items():
            allowed = ceiling.get(slot)
            if with_authors_own and slot in self.admitted:
                # (a revert: the size before our resize, maybe one we gave on the type the node had before)
                allowed = max([allowed or 0, self.admitted[slot], *(plan[slot] for plan in earlier if slot in plan)])
            if allowed is None and program == "webhook":
                continue  # (a container the author's review did not have: none)
            if allowed is None or value > allowed:
                raise Violation(
                    f"{program} set {slot} to {value} (admitted {self.admitted.get(slot)}, "
                    f"at most {allowed} on {self.node_type}); story: {self.story}"
                )

    def key_known(self) -> bool:
        key_id = key_id_of(annotations(self.pod).get(ORIGINALS_MAC))
        return key_id is not None and key_id in self.ring.keys

    def check(self) -> None:
        """After every step: the authority (as the reconciler sees the pod, and as a restarted one
        would), plan and restore use only the admitted values; an honest pod whose key is known is
        trusted at exactly them by the reconciler."""
        views = [self.flight.originals] if self.flight else []
        for vouched in [*views, None]:
            self.check_authority(vouched, as_the_reconciler_sees_it=vouched is (views or [None])[0])
        self.check_plan()
        self.check_restore()

    def check_authority(self, vouched: Mapping[str, str] | None, as_the_reconciler_sees_it: bool) -> None:
        # (An honest pod is to be trusted when its MAC's key is known, or unsigned and never changed.)
        unsigned = ORIGINALS_MAC not in annotations(self.pod) and self.pod["metadata"]["generation"] == 1
        honest = self.honest and (self.key_known() or unsigned) and eligibility(self.pod).eligible
        try:
            decision = baseline(self.pod, self.ring, vouched=vouched)
            trusted = self.trusted(decision)
        except OriginalsError as error:
            if honest:
                raise Violation(f"an honest pod refused: {error}; story: {self.story}") from None
            return
        for slot, value in trusted.items():
            if (
                slot not in self.admitted
                or value > self.admitted[slot]
                or (self.honest and value != self.admitted[slot])
            ):
                raise Violation(
                    f"the authority trusts {slot} = {value} (admitted {self.admitted.get(slot)}, "
                    f"{decision.check}); story: {self.story}"
                )
        cut_off = self.cut_off or not as_the_reconciler_sees_it  # (a restarted reconciler's view)
        if (
            honest
            and as_the_reconciler_sees_it
            and not decision.may_resize
            and not ((cut_off or self.raced) and decision.check.trust is Trust.TRUSTED_IF_ALIGNED)
        ):
            raise Violation(f"an honest pod is not trusted: {decision.check}; story: {self.story}")

    def trusted(self, decision: Baseline) -> Values:
        """The values the product may scale from or bind (none when it may neither; for an honest pod
        also those it may only explain an aligned spec with)."""
        if not (
            decision.may_resize
            or decision.may_sign
            or (self.honest and decision.check.trust is Trust.TRUSTED_IF_ALIGNED)
        ):
            return {}
        originals = read_originals(decision.pod)
        return {
            (name, resource, kind): value
            for name, o in originals.items()
            for resource, kind in SLOTS
            if (value := getattr(o.of(resource), kind)) is not None
        }  # type: ignore[arg-type]

    def check_plan(self) -> None:
        if not self.pod["spec"].get("nodeName"):
            return
        forecast = forecast_fleet(
            [self.pod], {self.pod["spec"]["nodeName"]: self.node_type}, CONFIG, SCOPE, keyring=self.ring
        )
        for group in forecast.workloads:
            for pod in group.pods:
                if pod.outcome == "Resize" and pod.plan is not None:
                    self.program_set(
                        "plan",
                        {
                            (c.container, c.resource, kind): Fraction(amount, 1000 if c.resource == "cpu" else 1)
                            for c in pod.plan.changes
                            for kind, amount in (("request", c.desired_request), ("limit", c.desired_limit))
                            if amount is not None
                        },
                    )

    def check_restore(self) -> None:
        try:
            decision = restore_decision(self.pod, self.ring, SCOPE)
        except OriginalsError:
            return
        if decision.patch:
            self.program_set(
                "restore",
                {
                    slot: value
                    for slot, value in spec_values({"spec": apply_resize(self.pod, decision.patch)}).items()
                    if spec_values(self.pod).get(slot) != value
                },
                with_authors_own=True,
            )


# ---------------------------------------------------------------------- what the tenant sends


def authored(
    cpu_milli: Mapping[str, int], memory_mi: int, pin: str | None = None, gated: bool = False
) -> dict[str, Any]:
    """The pod its author sends (a generated name, unknown at admission)."""
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": "shop",
            "generateName": "web-7d9f-",
            "ownerReferences": [dict(OWNER)],
            "annotations": {},
        },
        "spec": {
            "containers": [
                {"name": name, "image": "example.com/app:1", "resources": resources(cpu, memory_mi)}
                for name, cpu in cpu_milli.items()
            ]
        },
    }
    if pin is not None:
        obj["spec"]["nodeSelector"] = {LABEL: pin}
    if gated:
        obj["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    return obj


def made_up_review(pod: Mapping[str, Any], cpu_milli: Mapping[str, int], pin: str | None) -> dict[str, Any]:
    """A review of a pod like ``pod`` (its containers, memory as they are) with ``cpu_milli``."""
    obj = copy.deepcopy(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "namespace": "shop",
                "generateName": "web-7d9f-",
                "ownerReferences": [dict(OWNER)],
                "annotations": {},
            },
            "spec": {"containers": pod["spec"]["containers"]},
        }
    )
    for container in obj["spec"]["containers"]:
        cpu = cpu_milli.get(container["name"])
        if cpu is not None:
            for kind in ("requests", "limits"):
                container["resources"][kind]["cpu"] = f"{cpu}m"
    if pin is not None:
        obj["spec"]["nodeSelector"] = {LABEL: pin}
    return obj


def milli(text: str) -> int:
    return int(coerce_quantity(text) * 1000)


def first_cpu(pod: Mapping[str, Any]) -> int:
    return milli(pod["spec"]["containers"][0]["resources"]["requests"]["cpu"])


def controller_owned(pod: Mapping[str, Any]) -> list[str]:
    return [k for k in annotations(pod) if is_controller_owned_key(k)]


def legacy_stamp(pod: Mapping[str, Any], last: str) -> dict[str, str]:
    """What an earlier webhook stamped, unsigned: each container's spec (canonical, as the webhook
    writes it) under its legacy key, in one dict (under a legacy key two names share, the container
    written last wins; ``last`` is written last)."""
    stamp: dict[str, str] = {}
    for container in sorted(pod["spec"]["containers"], key=lambda c: c["name"] == last):
        written = originals_from_spec_annotations({"spec": {"containers": [container]}})
        for resource, kind in SLOTS:
            key = original_key(container["name"], resource, kind)  # type: ignore[arg-type]
            if key in written:
                stamp[legacy_original_key(container["name"], resource, kind)] = written[key]  # type: ignore[arg-type]
    return stamp


__all__ = [
    "COLLIDING",
    "INJECTED",
    "LABEL",
    "NODE_OF",
    "PREFIX",
    "RECREATED",
    "RING",
    "SKIP",
    "Violation",
    "World",
    "authored",
    "controller_owned",
    "first_cpu",
    "legacy_stamp",
    "made_up_review",
    "resources",
]
