"""Whether a stalled resize may be set back to what the containers report (pure, no I/O).

What the containers have (``status.containerStatuses[].resources``, the sidecars' and the pod
level's ``status.resources``) is written by the kubelet, and by anyone else who may update
``pods/status``: a claim, not a fact. An infeasible or finally failing resize is set back to it
(reconciler.act) only when it is a size the product itself knows the pod had:

- the spec as it was right before this process's resize of it (and before any earlier resize
  of it the kubelet never answered), from memory;
- when this process did not send the resize (it restarted): the pod's originals, or the size
  whose digest ``applied-size`` records (what the last applied step saw).

The match is whole-pod: every value the revert would set equals that one size. And, whatever
matched, no value is set above the larger of the size before the resize and the plan (after a
restart: the originals the baseline authority trusts, else the plan alone), because neither
``applied-size`` nor originals it does not trust are credentials.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from reconciler.outcome import KINDS, RESOURCES, revert_patch, spec_size
from reconciler.ports import Obj
from resizer import QuantityError, ResizerError, parse_quantity, read_originals, sidecars
from resizer.originals import ContainerOriginals, read_pod_originals
from resizer.podstate import read_state
from resizer.preflight import apply_patch

# (spec field, container name, kind, resource); the pod level is ("resources", "", kind, resource).
Key = tuple[str, str, str, str]
Size = Mapping[Key, Fraction]

POD_LEVEL = "resources"


@dataclass(frozen=True)
class Revert:
    """The decision: ``patch`` sets the spec back ({} for nothing to do), unless ``refused``
    says why what the containers report is not a size to set it back to."""

    patch: Obj
    refused: str = ""
    reported: str = ""  # the values the containers report where they differ from the spec


def decide_revert(pod: Obj, before: Sequence[Size], originals: Size | None, originals_trusted: bool) -> Revert:
    """``before``: the sizes the spec held before this process's resizes of it, newest first (empty:
    this process did not send the resize); ``originals``: the pod's originals as the baseline authority
    reads them (consulted only without ``before``), which also bound the revert if ``originals_trusted``."""
    patch = revert_patch(pod)
    if not patch:
        return Revert({})
    try:
        target = size_of(patch["spec"])
    except QuantityError:
        return Revert({}, "an unreadable quantity", describe(patch))
    references = list(before) if before else ([originals] if originals is not None and originals_trusted else [])
    if not _within(target, [size_of(pod["spec"]), *references]):
        return Revert({}, "above both what the pod had before the resize and the planned size", describe(patch))
    if before:
        if any(_holds(size, target) for size in before):
            return Revert(patch)
        return Revert({}, "not the size the pod had before the resize", describe(patch))
    if (originals is not None and _holds(originals, target)) or _recorded_as_applied(pod, patch):
        return Revert(patch)
    return Revert({}, "neither the pod's originals nor the size recorded as applied", describe(patch))


def sizes_before(pod: Obj, earlier: Sequence[Size]) -> tuple[Size, ...]:
    """What a resize of ``pod`` remembers as the sizes before it: the spec it was sent for, then
    those before our ``earlier`` resizes of it the kubelet never answered (each size once)."""
    sizes: list[Size] = [size_of(pod["spec"])]  # readable: it was planned from
    for size in earlier:
        if size not in sizes:
            sizes.append(size)
    return tuple(sizes)


def size_of(spec: Obj) -> dict[Key, Fraction]:
    """Every cpu/memory request and limit a pod spec (or a pods/resize patch's spec) sets, by value:
    its containers', its sidecars' (a patch names only those) and its pod level's."""
    values: dict[Key, Fraction] = {}
    for field in ("containers", "initContainers"):
        for container in spec.get(field) or []:
            values.update(_values(field, container["name"], container.get("resources")))
    values.update(_values(POD_LEVEL, "", spec.get(POD_LEVEL)))
    return values


def size_of_originals(pod: Mapping[str, Any]) -> dict[Key, Fraction] | None:
    """The pod's originals as a size (each from its annotation, else the spec); None when one is unreadable."""
    try:
        containers = read_originals(pod)
        pod_level = read_pod_originals(pod)
    except ResizerError:
        return None
    values: dict[Key, Fraction] = {}
    fields = {
        **{c["name"]: "containers" for c in pod["spec"].get("containers") or []},
        **{c["name"]: "initContainers" for c in sidecars(pod)},
    }
    for name, originals in containers.items():
        values.update(_original_values(fields[name], name, originals))
    if pod_level is not None:
        values.update(_original_values(POD_LEVEL, "", pod_level))
    return values


def describe(patch: Obj) -> str:
    """``app: requests cpu 7, memory 16Gi; limits cpu 7`` for each container (``pod`` for the pod level)."""
    spec = patch.get("spec") or {}
    entries = [(c["name"], c["resources"]) for f in ("containers", "initContainers") for c in spec.get(f) or []]
    if spec.get(POD_LEVEL):
        entries.append(("pod", spec[POD_LEVEL]))
    return "; ".join(
        f"{name}: "
        + "; ".join(
            f"{kind} " + ", ".join(f"{r} {v}" for r, v in resources[kind].items())
            for kind in KINDS
            if resources.get(kind)
        )
        for name, resources in entries
    )


def _values(field: str, name: str, resources: Obj | None) -> dict[Key, Fraction]:
    return {
        (field, name, kind, resource): parse_quantity(str(text))
        for kind in KINDS
        for resource, text in ((resources or {}).get(kind) or {}).items()
        if resource in RESOURCES
    }


def _original_values(field: str, name: str, originals: ContainerOriginals) -> dict[Key, Fraction]:
    values: dict[Key, Fraction] = {}
    for resource, original in (("cpu", originals.cpu), ("memory", originals.memory)):
        for kind, value in (("requests", original.request), ("limits", original.limit)):
            if value is not None:
                values[(field, name, kind, resource)] = value
    return values


def _within(target: Size, references: Sequence[Size]) -> bool:
    """No value above the largest any reference holds for it (none holds it: above)."""
    for key, value in target.items():
        ceiling = [size[key] for size in references if key in size]
        if not ceiling or value > max(ceiling):
            return False
    return True


def _holds(size: Size, target: Size) -> bool:
    return all(size.get(key) == value for key, value in target.items())


def _recorded_as_applied(pod: Obj, patch: Obj) -> bool:
    """The spec the patch leaves is the one the last applied step recorded (by digest)."""
    recorded = read_state(pod).applied.size
    return recorded is not None and spec_size({**pod, "spec": apply_patch(pod, patch)}) == recorded
