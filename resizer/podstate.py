"""The pod as the product sees it: every ``workload-resizer.io/*`` annotation, read and written here.

:func:`read_state` parses a pod's annotations once into a frozen :class:`PodState`; the writes
are patch builders (``*_patch``): annotation changes (``None`` removing a key) or metadata merge
patches. Every other module gets a key only through this module's functions, so the names and the key
derivation (verbatim, 130-bit digest, legacy 8-hex digest) are decided in one place.

A forged or odd value never crashes a reader: an unreadable resize state or MAC reads as none, a
non-string record as absent; originals that cannot be attributed to one container (two containers
sharing a key, a container without a name) are refused with :class:`OriginalsError` /
:class:`KeyCollisionError` when they are asked for (:meth:`PodState.original_keys`), never guessed.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from resizer.errors import ResizerError
from resizer.quantity import RESOURCES, Resource

Kind = Literal["request", "limit"]
Slot = tuple[Resource, Kind]
Scope = Literal["admission", "pod", "sized"]
_KINDS: tuple[Kind, ...] = ("request", "limit")
SPEC_FIELD: Mapping[Kind, str] = {"request": "requests", "limit": "limits"}  # a container's resources.<field>
_SLOTS: tuple[Slot, ...] = tuple((resource, kind) for resource in RESOURCES for kind in _KINDS)

PREFIX = "workload-resizer.io/"
SKIP = PREFIX + "skip"
APPLIED_INSTANCE_TYPE = PREFIX + "applied-instance-type"
APPLIED_AT = PREFIX + "applied-at"
# A digest of the containers' cpu/memory when applied-* was recorded: a spec that differs from
# it (and equals the plan) holds a re-alignment an earlier reconciler requested but did not report.
APPLIED_SIZE = PREFIX + "applied-size"
# HMAC over the original-* values and the pod's identity (resizer.integrity).
ORIGINALS_MAC = PREFIX + "originals-mac"
# The webhook's record that it sized the pod at CREATE for this node type (resizer.pinning);
# covered by the sized-scope MAC (resizer.integrity) until the reconciler binds the originals.
SIZED_AT_ADMISSION = PREFIX + "sized-at-admission"
# The reconciler's record of a resize that has not ended actuated (deferred, infeasible, ...).
RESIZE_STATE = PREFIX + "resize-state"
# Set by the kubelet on the API copy of a static pod.
MIRROR_POD = "kubernetes.io/config.mirror"
# The apiserver rejects an object whose annotation keys and values add up to more bytes.
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * 1024

_ORIGINAL_PREFIX = PREFIX + "original-"
_APPLIED_PREFIX = PREFIX + "applied-"
_CONTROLLER_OWNED_RECORDS = frozenset({ORIGINALS_MAC, RESIZE_STATE, SIZED_AT_ADMISSION})
_MAX_NAME_LENGTH = 63
_DIGEST_LENGTH = 26  # lowercase base32 characters of sha256: 130 bits
_LEGACY_DIGEST_LENGTH = 8  # hex characters of sha256: 32 bits
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", re.ASCII)


def original_key(container: str, resource: Resource, kind: Kind) -> str:
    """Key of a container's baseline request or limit: ``workload-resizer.io/original-cpu.<container>``
    or ``original-cpu-limit.<container>``, likewise for memory. The part after ``/`` must be a
    qualified name of at most 63 characters, so one that would reach 63 becomes ``<stem>.<truncated
    container>_<26 lowercase base32 characters of sha256(container)>``, exactly 63 long. Verbatim
    keys have at most 62 and legacy keys (:func:`legacy_original_key`) ``-`` ninth from the end where
    a hashed key has a digest character: two names share a key only if sha256 collides on 130 bits.
    Which annotation holds a pod's original is :meth:`PodState.original_keys`' answer, not the caller's."""
    return _original_key(container, resource, kind, False)


def legacy_original_key(container: str, resource: Resource, kind: Kind) -> str:
    """The key earlier versions wrote: :func:`original_key` for names whose key fits verbatim,
    else ``<stem>.<truncated container>-<8 hex of sha256(container)>``, 63 long. 32 bits: two
    valid names sharing it are found in under a second. Read (where unambiguous), never written."""
    return _original_key(container, resource, kind, True)


# Every pod event of every sized pod looks up its containers' keys: memoise (pure;
# bounded, since container names are tenant input; errors are not cached).
@functools.lru_cache(maxsize=8192)
def _original_key(container: str, resource: str, kind: str, legacy: bool) -> str:
    stem = _stem(resource, kind)
    name = f"{stem}.{container}"
    if len(name) >= _MAX_NAME_LENGTH:
        digest = hashlib.sha256(container.encode())
        if legacy:
            separator, text = "-", digest.hexdigest()[:_LEGACY_DIGEST_LENGTH]
        else:
            separator, text = "_", base64.b32encode(digest.digest()).decode("ascii")[:_DIGEST_LENGTH].lower()
        keep = _MAX_NAME_LENGTH - len(stem) - len(".") - len(separator) - len(text)
        name = f"{stem}.{container[:keep]}{separator}{text}"
    if not _QUALIFIED_NAME.fullmatch(name):
        raise ValueError(f"container name {container!r} cannot form a valid annotation key")
    return PREFIX + name


def pod_original_key(resource: Resource, kind: Kind) -> str:
    """Key of the pod-level (``spec.resources``) baseline: ``workload-resizer.io/original-pod-cpu``,
    ``original-pod-cpu-limit``, likewise for memory (never a container's: those end ``.<container>``)."""
    return PREFIX + _stem(resource, kind, "pod-")


def _stem(resource: str, kind: str, level: str = "") -> str:
    if resource not in ("cpu", "memory") or kind not in ("request", "limit"):
        raise ValueError(f"unsupported original key {resource!r}/{kind!r}")
    return f"original-{level}{resource}" + ("-limit" if kind == "limit" else "")


def is_controller_owned_key(key: str) -> bool:
    """The keys only the controller may set: ``original-*``, ``applied-*``, MAC, resize-state, sized-at-admission."""
    return key.startswith((_ORIGINAL_PREFIX, _APPLIED_PREFIX)) or key in _CONTROLLER_OWNED_RECORDS


def is_original_key(key: str) -> bool:
    return key.startswith(_ORIGINAL_PREFIX)


def fits_annotation_limit(annotations: Mapping[str, Any], originals: Mapping[str, str]) -> bool:
    """Whether ``annotations`` with every controller-owned key replaced by ``originals`` stays within
    the apiserver's total size limit (a pod over it cannot be stored: stamping would block it)."""
    size = sum(
        _bytes(k) + _bytes(v) for k, v in annotations.items() if k not in originals and not is_controller_owned_key(k)
    )
    size += sum(_bytes(k) + _bytes(v) for k, v in originals.items())
    return size <= TOTAL_ANNOTATION_SIZE_LIMIT


def _bytes(text: Any) -> int:
    if isinstance(text, str):  # isascii() is O(1) on str: no encoding for the usual ASCII text
        return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
    return len(str(text))


class OriginalsError(ResizerError):
    """An ``original-*`` annotation is present but does not hold a usable quantity, or the pod's
    originals cannot be attributed to its containers."""


class KeyCollisionError(OriginalsError):
    """Two of a pod's resizable containers map to the same ``original-*`` key: whose original it
    holds cannot be known, so the pod is not stamped, sized nor restored."""


class Stage(StrEnum):
    """What the kubelet says about the pod's current spec."""

    REQUESTED = "requested"  # not observed yet, being actuated, or containers not running yet
    DEFERRED = "deferred"
    INFEASIBLE = "infeasible"
    ERROR = "error"
    UNSUPPORTED = "unsupported"  # containers run but report no resources: the node cannot resize
    ACTUATED = "actuated"


# The fields a resize-state record holds only when set: (attribute, record key, type).
_OPTIONAL_RECORD: tuple[tuple[str, str, type], ...] = (
    ("size", "size", str),
    ("allocatable", "allocatable", str),
    ("requested_at", "requestedAt", str),
    ("warned", "warned", bool),
    ("reverted", "reverted", bool),
    ("kept", "kept", bool),
)


@dataclass(frozen=True)
class ResizeState:
    """What the reconciler recorded about a resize that did not (yet) end actuated, so that a
    restarted reconciler neither reports a state twice nor retries a size the node cannot take."""

    state: Stage  # deferred | infeasible | error | unsupported
    node_type: str
    generation: int | None  # the metadata.generation the state was reported for
    size: str = ""  # fingerprint of the planned size (infeasible, error)
    allocatable: str = ""  # the node's allocatable cpu/memory when it was recorded
    requested_at: str = ""  # RFC 3339, when the resize was requested (if known)
    warned: bool = False  # deferred: the too-long Warning was reported
    reverted: bool = False  # infeasible/error: the spec was set back to the actual size
    # infeasible/error: the containers report a size the product never set, so the spec was kept
    # at the planned size (the RevertRefused Warning was reported)
    kept: bool = False

    def encode(self) -> str:
        record = {"state": str(self.state), "nodeType": self.node_type, "generation": self.generation}
        record.update((key, getattr(self, name)) for name, key, _ in _OPTIONAL_RECORD if getattr(self, name))
        return json.dumps(record, separators=(",", ":"), sort_keys=True)

    @staticmethod
    def decode(text: str | None) -> ResizeState | None:
        """None for an absent or unreadable annotation (a forged one is ignored, never trusted)."""
        if not text:
            return None
        try:
            record = json.loads(text)
            state = Stage(record["state"])
            generation = record.get("generation")
            if not isinstance(record["nodeType"], str) or not (generation is None or isinstance(generation, int)):
                return None
            optional = {name: kind(record.get(key, "")) for name, key, kind in _OPTIONAL_RECORD}
            return ResizeState(state, record["nodeType"], generation, **optional)
        except (ValueError, KeyError, TypeError):
            return None


_MAC_VERSION = "v1"
_SCOPE_CODES: Mapping[str, Scope] = {"a": "admission", "p": "pod", "s": "sized"}
_CODE_OF: Mapping[Scope, str] = {"admission": "a", "pod": "p", "sized": "s"}


@dataclass(frozen=True, slots=True)
class Mac:
    """An originals MAC as the annotation holds it: ``v1.<a|p|s>.<key id>.<digest>``, parsed for its
    form only (whether key id and digest are well formed and verify is :mod:`resizer.integrity`'s)."""

    scope: Scope
    key_id: str
    digest: str

    def encode(self) -> str:
        return f"{_MAC_VERSION}.{_CODE_OF[self.scope]}.{self.key_id}.{self.digest}"

    @staticmethod
    def parse(value: object) -> Mac | None:
        """The MAC ``value`` holds, None for anything not of that form (absent, forged, not a string)."""
        if not isinstance(value, str):
            return None
        parts = value.split(".")
        if len(parts) != 4 or parts[0] != _MAC_VERSION or parts[1] not in _SCOPE_CODES:
            return None
        return Mac(_SCOPE_CODES[parts[1]], parts[2], parts[3])


@dataclass(frozen=True, slots=True)
class Applied:
    """The record of the size the reconciler last gave the pod (None: not recorded)."""

    instance_type: str | None = None  # the node type it was sized for
    at: str | None = None  # RFC 3339
    size: str | None = None  # the digest :data:`APPLIED_SIZE` holds

    @property
    def recorded(self) -> bool:
        return self.instance_type is not None


@dataclass(frozen=True, slots=True)
class Original:
    """One baseline value's annotation: its key on the pod (today's, or a long name's legacy key
    where only that is present) and its value."""

    key: str
    recorded: bool  # whether the pod carries ``key``
    value: Any = None  # the annotation's value (a string from the apiserver), None if not recorded


_NO_ORIGINALS: Mapping[str, Mapping[Slot, Original]] = {}


@dataclass(frozen=True, slots=True)
class _KeyMap:
    containers: Mapping[str, Mapping[Slot, Original]]
    legacy: Mapping[str, str]
    refused: OriginalsError | None


@dataclass(frozen=True, slots=True)
class PodState:
    """Everything the product reads off a pod's annotations (see :func:`read_state`)."""

    # Every ``original-*`` annotation, key -> value: what an originals MAC covers.
    originals: Mapping[str, Any]
    # The pod level's (``spec.resources``) originals by (resource, kind).
    pod_level: Mapping[Slot, Original]
    mac_value: Any  # the originals-mac annotation as found (None: absent)
    mac: Mac | None  # ``mac_value`` parsed; None when absent or not of the MAC form
    sized_at_admission: str | None  # the node type the webhook sized the pod for at CREATE
    resize_state_recorded: bool  # whether the pod carries a resize-state annotation (readable or not)
    resize_state: ResizeState | None  # that annotation decoded; None when absent or unreadable
    applied: Applied
    skip: bool  # the skip annotation says "true" (any case)
    mirror: bool  # the kubelet's mirror-pod annotation is present
    # Every ``workload-resizer.io/*`` annotation (key, value), sorted: what a decision depended on.
    owned: tuple[tuple[str, Any], ...]
    # The pod read: its containers' names key their originals, mapped on first use (most reads
    # of a hot path want a record, not the originals), then kept in ``_memo``.
    _pod: Mapping[str, Any] = field(repr=False, compare=False)
    _memo: list[_KeyMap] = field(default_factory=list, repr=False, compare=False)

    @property
    def containers(self) -> Mapping[str, Mapping[Slot, Original]]:
        """Per resizable container by name, its originals by (resource, kind); empty when refused."""
        return self._key_map().containers

    @property
    def legacy(self) -> Mapping[str, str]:
        """Key written today -> the legacy key that holds that original on this pod instead."""
        return self._key_map().legacy

    @property
    def keys_refused(self) -> OriginalsError | None:
        """Why the containers' originals cannot be attributed (raised by :meth:`original_keys`)."""
        return self._key_map().refused

    def _key_map(self) -> _KeyMap:
        if not self._memo:
            try:
                self._memo.append(_KeyMap(*_key_map(self._pod, self.originals), None))
            except OriginalsError as error:
                self._memo.append(_KeyMap(_NO_ORIGINALS, {}, error))
        return self._memo[0]

    def container_originals(self) -> Mapping[str, Mapping[Slot, Original]]:
        """:attr:`containers`, or the refusal in :attr:`keys_refused` raised."""
        if self.keys_refused is not None:
            raise type(self.keys_refused)(*self.keys_refused.args)
        return self.containers

    def original_keys(self) -> dict[str, dict[Slot, str]]:
        """The one answer to "which annotation holds this original": per resizable container, the key
        of each (resource, kind) on this pod (:func:`original_key`'s, or a long name's legacy key when
        only that is present). Raises :class:`KeyCollisionError` when two containers would share a key
        or a legacy key read is another container's too; :class:`OriginalsError` for one without a name."""
        return {
            name: {slot: original.key for slot, original in slots.items()}
            for name, slots in self.container_originals().items()
        }

    def as_recorded(self, originals: Mapping[str, str]) -> dict[str, str]:
        """``originals`` (keyed as written today) under the keys that hold them on this pod: what
        compares with, or was signed with, its annotations."""
        held = self.legacy
        return {held.get(key, key): value for key, value in originals.items()}

    def as_written(self, originals: Mapping[str, Any]) -> dict[str, Any]:
        """The inverse of :meth:`as_recorded`: the pod's ``originals`` under the keys written today."""
        today = {held: written for written, held in self.legacy.items()}
        return {today.get(key, key): value for key, value in originals.items()}

    def holds(self, written_key: str) -> bool:
        """Whether the pod holds the original written under ``written_key`` (under it or its legacy key)."""
        return self.legacy.get(written_key, written_key) in self.originals


# One decision reads the same pod object's state many times: a pod object read lately gets its
# record again while its annotations and resizable containers' names (keying the originals) are
# unchanged. Holding the pods keeps their ids from being reused while remembered; a reset bounds it.
_RECENT: dict[int, tuple[Mapping[str, Any], dict[Any, Any], tuple[Any, ...], PodState]] = {}
_RECENT_MAX = 64


def read_state(pod: Mapping[str, Any]) -> PodState:
    """The pod's state parsed once from ``metadata.annotations`` (and the container names, which key
    the originals). Never raises for what the annotations hold (see the module docstring)."""
    annotations = _annotations(pod)
    try:  # what of the spec a state depends on (None: a spec too odd to remember a state by)
        names: tuple[Any, ...] | None = tuple(container.get("name") for container in resizable_containers(pod))
    except (AttributeError, TypeError):
        names = None
    recent = _RECENT.get(id(pod))
    if recent is not None and recent[0] is pod and recent[2] == names and recent[1] == annotations:
        return recent[3]
    state = _read_state(pod, annotations)
    if names is not None:
        if len(_RECENT) >= _RECENT_MAX:
            _RECENT.clear()
        _RECENT[id(pod)] = (pod, dict(annotations), names, state)
    return state


def read_mac(pod: Mapping[str, Any]) -> Mac | None:
    """:attr:`PodState.mac` of ``pod``, read alone (asked of every cached pod: which key signed it)."""
    return Mac.parse(_annotations(pod).get(ORIGINALS_MAC))


def mirror_and_skip(pod: Mapping[str, Any]) -> tuple[bool, bool]:
    """:attr:`PodState.mirror` and :attr:`PodState.skip`, read alone (asked of every review)."""
    annotations = _annotations(pod)
    return MIRROR_POD in annotations, _skip(annotations)


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {} if isinstance(metadata, Mapping) else {}
    return annotations if isinstance(annotations, Mapping) else {}


def _skip(annotations: Mapping[str, Any]) -> bool:
    return str(annotations.get(SKIP, "")).lower() == "true"


def _read_state(pod: Mapping[str, Any], annotations: Mapping[str, Any]) -> PodState:
    originals = {k: v for k, v in annotations.items() if isinstance(k, str) and k.startswith(_ORIGINAL_PREFIX)}
    mac_value = annotations.get(ORIGINALS_MAC)
    resize_state = annotations.get(RESIZE_STATE)
    return PodState(
        originals=originals,
        pod_level=_pod_level(originals),
        mac_value=mac_value,
        mac=Mac.parse(mac_value),
        sized_at_admission=_text(annotations.get(SIZED_AT_ADMISSION)),
        resize_state_recorded=RESIZE_STATE in annotations,
        resize_state=ResizeState.decode(resize_state) if isinstance(resize_state, str) else None,
        applied=Applied(
            _text(annotations.get(APPLIED_INSTANCE_TYPE)),
            _text(annotations.get(APPLIED_AT)),
            _text(annotations.get(APPLIED_SIZE)),
        ),
        skip=_skip(annotations),
        mirror=MIRROR_POD in annotations,
        owned=tuple(sorted((k, v) for k, v in annotations.items() if isinstance(k, str) and k.startswith(PREFIX))),
        _pod=pod,
    )


def _pod_level(originals: Mapping[str, Any]) -> Mapping[Slot, Original]:
    if not originals.keys() & POD_ORIGINAL_KEYS:
        return _UNRECORDED_POD_LEVEL
    return {slot: Original(key, key in originals, originals.get(key)) for slot, key in _POD_LEVEL_KEYS.items()}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# ---------------------------------------------------------------- which key holds which original

_POD_LEVEL_KEYS: Mapping[Slot, str] = {slot: pod_original_key(*slot) for slot in _SLOTS}
# The pod-level (spec.resources) keys, which pods stamped before pod-level sizing lack.
POD_ORIGINAL_KEYS: frozenset[str] = frozenset(_POD_LEVEL_KEYS.values())
_UNRECORDED_POD_LEVEL: Mapping[Slot, Original] = {slot: Original(key, False) for slot, key in _POD_LEVEL_KEYS.items()}


def pod_level_keys() -> frozenset[str]:
    """:data:`POD_ORIGINAL_KEYS`, for modules that must not import a key constant."""
    return POD_ORIGINAL_KEYS


def is_sidecar(init: Mapping[str, Any]) -> bool:
    """A restartable init container (``restartPolicy: Always``): a sidecar, which the kubelet
    resizes in place like a container (Kubernetes 1.33+). A plain init container is not."""
    return init.get("restartPolicy") == "Always"


def sidecars(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The pod's sidecars (:func:`is_sidecar`), in spec order."""
    return [init for init in (pod.get("spec") or {}).get("initContainers") or [] if is_sidecar(init)]


def resizable_containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """``spec.containers`` and the sidecars, in that order: the containers that have originals."""
    return [*((pod.get("spec") or {}).get("containers") or []), *sidecars(pod)]


def written_keys(containers: Sequence[Mapping[str, Any]]) -> list[Mapping[Slot, str]]:
    """Per container, the keys its originals are written under; raises :class:`KeyCollisionError`
    when two (or one and the pod level) would share one, :class:`OriginalsError` for no name."""
    owners: dict[str, tuple[int, str]] = {key: (-1, "the pod level") for key in POD_ORIGINAL_KEYS}
    written = []
    for index, container in enumerate(containers):
        name = container.get("name") if isinstance(container, Mapping) else None
        if not isinstance(name, str):
            raise OriginalsError(f"resizable container #{index} has no name: its originals cannot be keyed")
        keys = _keys_of(name)
        for key in keys.values():
            owner, other = owners.setdefault(key, (index, name))
            if owner != index:
                what = (
                    f"two resizable containers are named {name!r}"
                    if other == name
                    else f"containers {other!r} and {name!r}"
                )
                raise KeyCollisionError(f"{what}: their original resources would share the annotation {key}")
        written.append(keys)
    return written


def _key_map(
    pod: Mapping[str, Any], originals: Mapping[str, Any]
) -> tuple[dict[str, Mapping[Slot, Original]], dict[str, str]]:
    """Per resizable container, its originals as the pod holds them; and the legacy keys in use."""
    try:
        containers = resizable_containers(pod)
    except (AttributeError, TypeError):
        raise OriginalsError("the pod's containers are not a list of objects") from None
    legacy_owners: dict[str, list[int]] | None = None
    result: dict[str, Mapping[Slot, Original]] = {}
    legacy_in_use: dict[str, str] = {}
    for index, (container, written) in enumerate(zip(containers, written_keys(containers), strict=True)):
        name = container["name"]
        held: dict[Slot, Original] = {}
        for slot, key in written.items():
            if key in originals:
                held[slot] = Original(key, True, originals[key])
                continue
            # Nothing recorded (a pod before its stamp): no legacy key to look for.
            legacy = legacy_original_key(name, *slot) if originals else key
            if legacy == key or legacy not in originals:
                held[slot] = Original(key, False)
                continue
            legacy_owners = legacy_owners if legacy_owners is not None else _legacy_owners(containers)
            other = next((i for i in legacy_owners[legacy] if i != index), None)
            if other is not None:
                first, second = (containers[i]["name"] for i in sorted((index, other)))
                raise KeyCollisionError(
                    f"containers {first!r} and {second!r} share the annotation {legacy} (the key earlier "
                    f"versions wrote for long names): whose original resources it holds cannot be known"
                )
            held[slot] = Original(legacy, True, originals[legacy])
            legacy_in_use[key] = legacy
        result[name] = held
    return result, legacy_in_use


# Memoised like _original_key; callers never mutate the mapping returned.
@functools.lru_cache(maxsize=4096)
def _keys_of(name: str) -> Mapping[Slot, str]:
    return {(resource, kind): original_key(name, resource, kind) for resource, kind in _SLOTS}


def _legacy_owners(containers: list[Mapping[str, Any]]) -> dict[str, list[int]]:
    """Legacy key -> the positions of the containers it is the legacy key of."""
    owners: dict[str, list[int]] = {}
    for index, container in enumerate(containers):
        for resource, kind in _SLOTS:
            owners.setdefault(legacy_original_key(container["name"], resource, kind), []).append(index)
    return owners


# ---------------------------------------------------------------- writes: patch builders
# Annotation patches map a key to its new value, None removing it (a merge patch's annotations).


def mac_patch(mac: Mac | str) -> dict[str, str]:
    return {ORIGINALS_MAC: mac.encode() if isinstance(mac, Mac) else mac}


def carries_mac(patch: Mapping[str, Any]) -> bool:
    return patch.get(ORIGINALS_MAC) is not None


def sized_record_patch(node_type: str) -> dict[str, str]:
    """The sized-at-admission record: the webhook sized the pod at CREATE for ``node_type``."""
    return {SIZED_AT_ADMISSION: node_type}


def originals_removal(state: PodState) -> dict[str, None]:
    """Removes every ``original-*`` annotation and the MAC the pod carries (rejected originals)."""
    removal: dict[str, None] = dict.fromkeys(state.originals)
    if state.mac_value is not None:
        removal[ORIGINALS_MAC] = None
    return removal


def applied_patch(instance_type: str, at: str, size: str, state: PodState | None = None) -> dict[str, str | None]:
    """The applied record: the pod has its size for ``instance_type`` since ``at`` (RFC 3339),
    ``size`` the digest of its cpu/memory; with ``state``, a resize-state it carries is removed."""
    patch: dict[str, str | None] = {APPLIED_INSTANCE_TYPE: instance_type, APPLIED_AT: at, APPLIED_SIZE: size}
    if state is not None and state.resize_state_recorded:
        patch[RESIZE_STATE] = None
    return patch


def resize_state_patch(record: ResizeState | None) -> dict[str, str | None]:
    return {RESIZE_STATE: None if record is None else record.encode()}


def controller_owned_keys(state: PodState) -> list[str]:
    """The controller-owned annotations the pod carries (:func:`is_controller_owned_key`), sorted."""
    return [key for key, _value in state.owned if is_controller_owned_key(key)]


def strip_controller_owned(state: PodState, resource_version: str | None = None) -> dict[str, Any]:
    """The metadata merge patch removing every controller-owned annotation (``restore``'s last
    write), conditional on ``resource_version`` when given."""
    metadata: dict[str, Any] = {} if resource_version is None else {"resourceVersion": resource_version}
    return {"metadata": {**metadata, "annotations": dict.fromkeys(controller_owned_keys(state))}}


def without_controller_owned(annotations: Mapping[str, Any]) -> dict[str, Any]:
    """``annotations`` without the controller-owned keys (what the pod's author wrote)."""
    return {k: v for k, v in annotations.items() if not is_controller_owned_key(k)}


def skip_patch() -> dict[str, str]:
    """The skip annotation: neither the webhook nor the reconciler sizes the pod."""
    return {SKIP: "true"}


_CALIBRATION_RUN = PREFIX + "calibration-run"
_CALIBRATION_NODE_TYPE = PREFIX + "calibration-node-type"
_DESCRIPTION = PREFIX + "description"


def calibration_labels(run_id: str, node_type: str) -> dict[str, str]:
    return {_CALIBRATION_RUN: run_id, _CALIBRATION_NODE_TYPE: node_type}


def calibration_selector(run_id: str) -> str:
    return f"{_CALIBRATION_RUN}={run_id}"


def described_keys(pattern: str = "*") -> str:
    """The keys matching ``pattern`` as an admin reads them in a help text or message
    (``workload-resizer.io/original-*``); never a key to read or write."""
    return PREFIX + pattern


def description_patch(text: str) -> dict[str, str]:
    """The description annotation of an object the product creates (e.g. the keys Secret)."""
    return {_DESCRIPTION: text}
