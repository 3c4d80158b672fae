"""Which VerticalPodAutoscaler, if any, also writes a pod's requests.

A VPA whose ``spec.updatePolicy.updateMode`` updates running pods (Recreate, InPlaceOrRecreate,
InPlace, Auto, the default) sets the requests of the pods of its ``spec.targetRef``; resizing them
too makes two controllers fight over the same fields. ``Off`` and ``Initial`` never touch a
running pod, so they compose: what VPA set at admission is what the webhook stamps as the originals.

The target is matched against the pod's chain of controller owners (a Deployment's pod is owned
by a ReplicaSet, owned by the Deployment), resolved from the caller's caches (:func:`managing_vpa`,
the reconciler's, after binding). At admission the webhook has no owner cache:
:func:`admission_vpa_hold` decides from the pod alone, a superset of what the reconciler finds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from resizer.eligibility import controller_reference

# Where VPAs are served (discovery) and listed.
GROUP_VERSION_PATH = "/apis/autoscaling.k8s.io/v1"
RESOURCE = "verticalpodautoscalers"

DEFAULT_MODE = "Auto"
NON_UPDATING_MODES = frozenset({"Off", "Initial"})
MAX_CHAIN = 4
# The kinds VPA itself knows; any other kind of target is a custom (scalable) resource, which may
# own any of these.
WELL_KNOWN_KINDS = frozenset(
    {"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob", "ReplicationController"}
)
# Owners whose own controller owner is worth looking up (any other kind ends the chain), and the
# kinds it may be besides custom ones (a ReplicationController's: custom ones only, e.g. an
# OpenShift DeploymentConfig).
PARENT_KINDS = {
    "ReplicaSet": frozenset({"Deployment"}),
    "Job": frozenset({"CronJob"}),
    "ReplicationController": frozenset(),
}
TEMPLATE_HASH_LABEL = "pod-template-hash"


@dataclass(frozen=True)
class Owner:
    kind: str
    name: str


NO_OWNER = Owner("", "")  # what a lookup answers for an object it knows and that has no controller owner
# (namespace, owner) -> its controller owner, NO_OWNER if it has none, None if it is not known (yet).
OwnerLookup = Callable[[str, Owner], "Owner | None"]


@dataclass(frozen=True)
class VpaVerdict:
    """An updating VPA that targets one of the pod's owners."""

    vpa: str
    mode: str
    target: Owner

    def message(self) -> str:
        return f"left alone: {_manages(self.vpa, self.mode, self.target)}"


def _manages(vpa: str, mode: str, target: Owner) -> str:
    return (
        f"VerticalPodAutoscaler {vpa} (updateMode {mode}) manages the requests of "
        f"{target.kind} {target.name}; two controllers writing requests would fight"
    )


def controller_owner(metadata: Mapping[str, Any]) -> Owner | None:
    ref = controller_reference(metadata)
    return None if ref is None else Owner(str(ref.get("kind")), str(ref.get("name")))


# namespace -> target -> (vpa name, mode), updating VPAs only.
VpaIndex = Mapping[str, Mapping[Owner, tuple[str, str]]]


def _mapping(value: Any) -> Mapping[str, Any]:
    """`value` if it is a mapping, else empty: a VPA is a custom resource, its schema is whatever
    the installed CRD says, and a malformed one must match nothing rather than break the cache."""
    return value if isinstance(value, Mapping) else {}


def update_mode(vpa: Mapping[str, Any]) -> str:
    """The VPA's update mode, ``Auto`` when unset (as VPA itself defaults it)."""
    mode = _mapping(_mapping(_mapping(vpa).get("spec")).get("updatePolicy")).get("updateMode")
    return mode if isinstance(mode, str) and mode else DEFAULT_MODE


def slim_vpa(vpa: Mapping[str, Any]) -> dict[str, Any]:
    """A VPA reduced to what the decision reads: its name, namespace, target and update mode."""
    meta = _mapping(vpa.get("metadata"))
    target = _mapping(_mapping(vpa.get("spec")).get("targetRef"))
    return {
        "metadata": {k: meta.get(k) for k in ("name", "namespace", "resourceVersion")},
        "spec": {
            "targetRef": {k: target.get(k) for k in ("apiVersion", "kind", "name")},
            "updatePolicy": {"updateMode": update_mode(vpa)},
        },
    }


def vpa_index(vpas: Iterable[Mapping[str, Any]]) -> dict[str, dict[Owner, tuple[str, str]]]:
    """The targets of the VPAs that update running pods, by namespace (a VPA without a usable
    targetRef matches nothing). Several VPAs on one target: the first name in order wins."""
    index: dict[str, dict[Owner, tuple[str, str]]] = {}
    for vpa in sorted(vpas, key=lambda v: str(_mapping(_mapping(v).get("metadata")).get("name"))):
        meta = _mapping(vpa.get("metadata"))
        mode = update_mode(vpa)
        target = _mapping(_mapping(vpa.get("spec")).get("targetRef"))
        kind, name = target.get("kind"), target.get("name")
        if mode in NON_UPDATING_MODES or not isinstance(kind, str) or not isinstance(name, str) or not kind or not name:
            continue
        index.setdefault(str(meta.get("namespace") or ""), {}).setdefault(
            Owner(kind, name), (str(meta.get("name")), mode)
        )
    return index


def owner_chain(pod: Mapping[str, Any], lookup: OwnerLookup) -> tuple[tuple[Owner, ...], bool]:
    """The pod's controller owners, nearest first, and whether the chain is complete (False when
    an intermediate owner, e.g. the ReplicaSet, is not known to the lookup yet)."""
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    owner = controller_owner(meta)
    if owner is None:
        return (), True
    chain = [owner]
    while chain[-1].kind in PARENT_KINDS and len(chain) < MAX_CHAIN:
        parent = lookup(namespace, chain[-1])
        if parent is None:
            return tuple(chain), False
        if parent == NO_OWNER:
            break
        chain.append(parent)
    return tuple(chain), True


@dataclass(frozen=True)
class Unresolved:
    """Whether an updating VPA manages the pod cannot be told yet: an owner an updating VPA in the
    namespace might target is missing from the caches (decide later, never resize meanwhile)."""

    owner: Owner


def managing_vpa(pod: Mapping[str, Any], lookup: OwnerLookup, index: VpaIndex) -> VpaVerdict | Unresolved | None:
    """The updating VPA managing the pod, None if there is none, or Unresolved."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "")
    targets = index.get(namespace)
    if not targets:
        return None
    chain, complete = owner_chain(pod, lookup)
    for owner in chain:
        found = targets.get(owner)
        if found is not None:
            return VpaVerdict(found[0], found[1], owner)
    return None if complete else Unresolved(chain[-1])


def deployment_of(pod: Mapping[str, Any], owner: Owner) -> str | None:
    """The Deployment a ReplicaSet-owned pod belongs to, read from the pod alone: the ReplicaSet of
    a Deployment is named ``<deployment>-<pod-template-hash>`` and stamps that hash on its pods.
    None when the pod does not say (no hash label, or a name that does not end with it)."""
    template_hash = _mapping(_mapping(pod.get("metadata")).get("labels")).get(TEMPLATE_HASH_LABEL)
    if owner.kind != "ReplicaSet" or not isinstance(template_hash, str) or not template_hash:
        return None
    suffix = "-" + template_hash
    return owner.name[: -len(suffix)] if owner.name.endswith(suffix) and len(owner.name) > len(suffix) else None


def _may_own(owner: Owner, target: Owner) -> bool:
    """Whether ``target`` may sit above ``owner``, an intermediate controller whose own owner the
    pod does not name, in the chain the reconciler follows after binding."""
    return target.kind in PARENT_KINDS[owner.kind] or target.kind not in WELL_KNOWN_KINDS


def admission_vpa_hold(pod: Mapping[str, Any], namespace: str, index: VpaIndex) -> str | None:
    """Why the pod, as sent at admission, is not to be sized there (None: no updating VPA may
    manage it). The webhook sees no owner but the pod's controller: an updating VPA in the
    namespace holds the pod when it targets that owner, the Deployment :func:`deployment_of`
    names, or a kind only an API call would tell may own the controller (a CronJob above a Job,
    a Deployment above a ReplicaSet the pod does not name, a custom kind above either). The
    reconciler decides precisely after binding: a pod held here but not managed is resized then."""
    targets = index.get(namespace)
    if not targets:
        return None
    owner = controller_owner(_mapping(pod.get("metadata")))
    if owner is None:
        return None
    derived = deployment_of(pod, owner)
    for target in (owner, *([Owner("Deployment", derived)] if derived is not None else [])):
        found = targets.get(target)
        if found is not None:
            return _manages(found[0], found[1], target)
    if owner.kind not in PARENT_KINDS or derived is not None:
        return None  # the reconciler matches such an owner itself only; a derived chain is known
    for target, (vpa, mode) in targets.items():
        if _may_own(owner, target):
            return (
                f"VerticalPodAutoscaler {vpa} (updateMode {mode}) targets {target.kind} {target.name}, which "
                f"may own the pod's {owner.kind} {owner.name} (not known at admission; decided after binding)"
            )
    return None
