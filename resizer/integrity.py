"""Tamper-evident originals: an HMAC over the baseline values and the pod's identity.

The ``original-*`` annotations are the baseline every resize is computed from, so whoever can
choose them can make the reconciler raise a pod with its own credentials. Their integrity rests on
a MAC (the ``originals-mac`` annotation) that only the webhook and the reconciler can compute (key
ring from a Secret both mount) over every ``original-*`` key and value of the pod plus what
identifies the pod and its controller; and on ``metadata.generation``, which the apiserver sets to
1 at creation and bumps on every spec change (a resize included) and no client can set: a pod at
generation 1 still has exactly the spec its author wrote.

Three scopes of MAC, because the webhook does not know a generated pod's name or any pod's uid:

``admission`` (written by the webhook): namespace, the name as sent (empty for ``generateName``
    pods), ``generateName`` and the controller reference (kind, apiVersion, name, uid). Siblings of
    one ReplicaSet share it, and a made-up AdmissionReview obtains one for any values (the webhook
    signs whatever it is sent): so such originals are only trusted where they cannot raise
    anything, equal to the spec of a never-changed pod. On a changed pod they may only explain a
    spec already at their plan, even where they equal it (a tenant can mint the values of a spec
    the product resized). A pod whose spec changes before the reconciler can bind it (a scheduling
    gate removed) gets its originals bound at generation 1 instead (:func:`early_binding`).
``pod`` (written by the reconciler, steps 1 and 3, or by :func:`early_binding`): also the pod's
    name and uid, so it verifies on that one pod only. The webhook never signs it, whatever a
    review asks: anything it signs can be minted through a made-up review.
``sized`` (written by the webhook when it sized the pod at CREATE, :mod:`resizer.pinning`): the
    admission identity over the originals, the ``sized-at-admission`` record AND the spec values
    it wrote. It verifies only while the spec holds exactly those values, and on a never-changed
    pod it is trusted although the originals differ from the spec: whoever mints one through a
    made-up review gets exactly the pod an honest author who wrote those originals with that pin
    gets (docs/security.md). The reconciler binds the originals with a pod MAC at once.

Pod-level (``original-pod-*``) and sidecar originals came later: a pod stamped before lacks them.
Under a pod MAC a missing key means that value was never resized by us, and on a never-changed pod
an admission MAC over originals equal to the spec except for those keys is trusted; either way
their baseline is the spec, recorded (with a pod MAC over every key) at step 1 before any resize.

:func:`baseline` is the one baseline authority: the reconciler, ``plan``, ``restore`` and the
re-alignment check take what they may scale from (or put back) from it. Nothing unsigned vouches
(the resize-state annotation included): only a pod MAC, or this process's own memory of a resize
it requested, vouches for originals on a changed pod. No I/O: the processes read the keys (``ops.keys``).
"""

from __future__ import annotations

import base64
import enum
import functools
import hashlib
import hmac
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from resizer.eligibility import controller_reference
from resizer.errors import ResizerError
from resizer.originals import (
    missing_original_annotations,
    only_container_values,
    original_keys,
    originals_from_spec_annotations,
    sidecar_original_keys,
)
from resizer.podstate import (
    Mac,
    PodState,
    Scope,
    mac_patch,
    originals_removal,
    pod_level_keys,
    read_mac,
    read_state,
    sized_record_patch,
)

_VERSION = "v1"  # of the message a MAC covers (:func:`_message`)
# Prefix of the sized values' entries in what a sized MAC covers (never an annotation key).
_SIZED_VALUE = "sized:"
_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}", re.ASCII)
MIN_KEY_BYTES = 32
_VOUCHED = "verified before this reconciler's resize"
_MAC_CHARS = 43  # HMAC-SHA256, unpadded URL-safe base64
_MAC_FORM = re.compile(r"[A-Za-z0-9_-]{43}", re.ASCII)


class KeyRingError(ResizerError):
    """A key ring that cannot be used (bad key id, key too short)."""


@dataclass(frozen=True)
class KeyRing:
    """HMAC-SHA256 keys by id. Verification accepts any; signing uses the newest: the greatest id
    in natural order (digit runs compared as numbers, ``k10`` > ``k9``; ``k01`` and ``k1`` as plain
    strings). Ids count up with age: rotating is adding a greater id, retiring removing an old one."""

    keys: Mapping[str, bytes]

    def __post_init__(self) -> None:
        for key_id, secret in self.keys.items():
            if not _KEY_ID.fullmatch(key_id):
                raise KeyRingError(f"key id {key_id!r} must be 1-63 letters, digits, '-' or '_'")
            if len(secret) < MIN_KEY_BYTES:
                raise KeyRingError(f"key {key_id!r} has {len(secret)} bytes; at least {MIN_KEY_BYTES} needed")

    @property
    def newest(self) -> str | None:
        return max(self.keys, key=key_id_order) if self.keys else None

    @functools.cached_property
    def fingerprint(self) -> str:
        """Names the signing key by its id and content ("" without keys), e.g. to key a cache of
        MACs: a key recreated under the same id signs differently. Reveals nothing of the key."""
        key_id = self.newest
        if key_id is None:
            return ""
        return hashlib.sha256(key_id.encode() + b"\0" + bytes(self.keys[key_id])).hexdigest()

    def __bool__(self) -> bool:
        return bool(self.keys)


EMPTY_KEYRING = KeyRing({})
_DIGIT_RUNS = re.compile(r"([0-9]+)", re.ASCII)


def key_id_order(key_id: str) -> tuple[list[str | int], str]:
    # re.split with a capturing group alternates text (even places) and digits (odd
    # places), so two ids never compare a number with text.
    runs: list[str | int] = [int(run) if i % 2 else run for i, run in enumerate(_DIGIT_RUNS.split(key_id))]
    return runs, key_id


@dataclass(frozen=True)
class PodIdentity:
    """What a MAC binds besides the values. ``uid`` is empty for the admission scope."""

    namespace: str
    name: str
    generate_name: str
    uid: str
    owner_kind: str
    owner_api_version: str
    owner_name: str
    owner_uid: str

    @classmethod
    def of(cls, pod: Mapping[str, Any], namespace: str | None = None, scope: Scope = "pod") -> PodIdentity:
        """Identity of ``pod`` for ``scope`` (``namespace`` overrides metadata's: at admission
        the namespace comes from the request)."""
        meta = pod.get("metadata") or {}
        owner = controller_reference(meta) or {}
        return cls(
            namespace=_text(namespace if namespace is not None else meta.get("namespace")),
            name=_text(meta.get("name")),
            generate_name=_text(meta.get("generateName")),
            uid=_text(meta.get("uid")) if scope == "pod" else "",
            owner_kind=_text(owner.get("kind")),
            owner_api_version=_text(owner.get("apiVersion")),
            owner_name=_text(owner.get("name")),
            owner_uid=_text(owner.get("uid")),
        )


class Trust(enum.Enum):
    """What the reconciler may do with a pod's ``original-*`` annotations."""

    TRUSTED = "Trusted"  # use them: resize from them, bind them to the pod
    # Signed at admission only, on a changed spec: they may explain a spec that already matches
    # their plan (a resize of ours whose record a crash cut off), never drive or sign anything.
    TRUSTED_IF_ALIGNED = "IfAligned"
    RECAPTURE = "Recapture"  # never-changed pod: take the originals from its spec
    REFUSE = "Refuse"  # changed pod, unverifiable originals: do not resize


@dataclass(frozen=True)
class OriginalsCheck:
    trust: Trust
    reason: str  # why, for events and logs
    scope: Scope | None = None  # of the MAC that verified
    key_id: str | None = None  # of the key that verified
    tampered: bool = False  # originals or a MAC were present but rejected


def original_annotations(pod: Mapping[str, Any]) -> dict[str, str]:
    return dict(read_state(pod).originals)


def sign_originals(keyring: KeyRing, originals: Mapping[str, str], identity: PodIdentity, scope: Scope) -> str:
    """The ``originals-mac`` annotation value for ``originals`` on the pod ``identity`` names."""
    key_id = keyring.newest
    if key_id is None:
        raise KeyRingError("no key to sign with")
    return Mac(scope, key_id, _mac(keyring.keys[key_id], originals, identity, scope)).encode()


def key_id_of(value: Any) -> str | None:
    parsed = Mac.parse(value)
    return parsed.key_id if parsed else None


def check_originals(
    pod: Mapping[str, Any],
    keyring: KeyRing,
    spec_originals: Mapping[str, str] | None = None,
    vouched: Mapping[str, str] | None = None,
) -> OriginalsCheck:
    """May the product trust this pod's ``original-*`` annotations? ``spec_originals``:
    ``originals_from_spec_annotations(pod)`` (computed only if the verdict needs it). ``vouched``: the
    originals this process verified and resized the pod from (a resize in flight), vouching only
    while the pod carries exactly those. Raises :class:`OriginalsError` / :class:`QuantityError` for
    a spec it cannot read, :class:`KeyCollisionError` for two containers on one key, whatever the MAC."""
    original_keys(pod)
    verdict = _check(pod, keyring, spec_originals)
    if (
        verdict.trust in (Trust.REFUSE, Trust.TRUSTED_IF_ALIGNED)
        and vouched is not None
        and dict(vouched) == original_annotations(pod)
    ):
        return OriginalsCheck(Trust.TRUSTED, _VOUCHED, verdict.scope, verdict.key_id)
    return verdict


def _check(pod: Mapping[str, Any], keyring: KeyRing, spec_originals: Mapping[str, str] | None) -> OriginalsCheck:
    state = read_state(pod)  # its keys are not refused: check_originals raised for those

    def spec() -> dict[str, str]:  # under the keys the pod's originals use (legacy ones included)
        return state.as_recorded(spec_originals if spec_originals is not None else originals_from_spec_annotations(pod))

    originals = dict(state.originals)
    generation = (pod.get("metadata") or {}).get("generation")
    # No generation (an apiserver older than 1.35): whether the spec changed cannot be known.
    changed = generation > 1 if isinstance(generation, int) else True
    changed_text = f"generation {generation}" if isinstance(generation, int) else "no metadata.generation"

    problem = _verify(state, keyring, originals, pod, spec)
    if isinstance(problem, str):
        present = bool(originals) or state.mac_value is not None
        if not changed and originals and state.mac_value is None and _equal_or_upgraded(pod, originals, spec()):
            # Unsigned (e.g. no keys configured) but exactly what a re-capture would write.
            return OriginalsCheck(Trust.TRUSTED, "equal to the unchanged spec")
        lost = _lost_key(state.mac, keyring)
        if not changed and lost is not None and originals and not _equal_or_upgraded(pod, originals, spec()):
            # Signed with a key that is gone: the spec may be a size we gave (sized at admission),
            # and re-capturing it would make that size the baseline for good.
            return OriginalsCheck(
                Trust.REFUSE,
                f"originals MAC signed with unknown key {lost!r}; put the key back in the Secret (the original "
                "resources differ from the spec: taking them from it would lose them)",
                key_id=lost,
            )
        if not changed:
            why = f"{problem}; " if present else ""
            return OriginalsCheck(
                Trust.RECAPTURE, f"{why}original resources taken from the unchanged spec", tampered=present
            )
        return OriginalsCheck(
            Trust.REFUSE,
            f"{problem}, and the pod's spec has changed since creation "
            f"({changed_text}): its original resources cannot be known",
            tampered=present,
        )
    scope, key_id = problem
    if scope == "pod":
        return OriginalsCheck(Trust.TRUSTED, "verified", scope, key_id)
    if scope == "sized" and not changed:
        # The MAC covers the spec values it verified against: the pod is exactly as the webhook sized it.
        why = f"verified, sized at admission for node type {state.sized_at_admission!r}"
        return OriginalsCheck(Trust.TRUSTED, why, scope, key_id)
    if changed:  # (a made-up review obtains an admission MAC for any values: see Trust)
        why = f"original resources signed at admission only and the spec has changed since ({changed_text})"
        return OriginalsCheck(Trust.TRUSTED_IF_ALIGNED, why, scope, key_id)
    # Admission scope: valid on every look-alike sibling too.
    current = spec()
    if originals == current:
        return OriginalsCheck(Trust.TRUSTED, "verified, equal to the unchanged spec", scope, key_id)
    if _equal_or_upgraded(pod, originals, current):
        why = "verified, equal to the unchanged spec (stamped before pod-level and sidecar originals were recorded)"
        return OriginalsCheck(Trust.TRUSTED, why, scope, key_id)
    return OriginalsCheck(
        Trust.RECAPTURE,
        "original resources signed for another pod of the same owner "
        "differ from this unchanged pod's spec; taken from the spec",
        scope,
        key_id,
        tampered=True,
    )


def _late_keys(pod: Mapping[str, Any]) -> frozenset[str]:
    """The ``original-*`` keys older versions did not stamp."""
    return pod_level_keys() | sidecar_original_keys(pod)


def _equal_or_upgraded(pod: Mapping[str, Any], originals: Mapping[str, str], spec: Mapping[str, str]) -> bool:
    """Every recorded key equals the spec and only :func:`_late_keys` are missing: what a pod
    stamped before those were recorded carries."""
    equal = all(spec.get(key) == value for key, value in originals.items())
    return equal and set(spec) - set(originals) <= _late_keys(pod)


def _lost_key(parsed: Mac | None, keyring: KeyRing) -> str | None:
    """The key id a MAC of the form we write names when the ring lacks it, else None."""
    if parsed is None or parsed.key_id in keyring.keys:
        return None
    well_formed = _KEY_ID.fullmatch(parsed.key_id) and _MAC_FORM.fullmatch(parsed.digest)
    return parsed.key_id if well_formed else None


def _verify(
    state: PodState,
    keyring: KeyRing,
    originals: Mapping[str, str],
    pod: Mapping[str, Any],
    spec: Callable[[], Mapping[str, str]],
) -> tuple[Scope, str] | str:
    """(scope, key id) of a MAC that verifies, else why not."""
    if state.mac_value is None:
        return "no originals MAC" if originals else "no original resources recorded"
    parsed = state.mac
    if parsed is None:
        return "malformed originals MAC"
    scope, key_id, mac = parsed.scope, parsed.key_id, parsed.digest
    if not keyring:
        return "no key configured to verify the originals MAC"
    secret = keyring.keys.get(key_id)
    if secret is None:
        return f"originals MAC signed with unknown key {key_id!r}"
    if scope == "sized":
        record = state.sized_at_admission
        if record is None:
            return "sized-at-admission MAC without its record"
        originals = _sized_cover(originals, record, spec())
    if _matches(secret, originals, PodIdentity.of(pod, scope=scope), scope, mac):
        return scope, key_id
    return "originals MAC does not match the values and the pod"


def _matches(secret: bytes, covered: Mapping[str, str], identity: PodIdentity, scope: Scope, mac: str) -> bool:
    candidates = [identity]
    if scope != "pod":
        # The webhook saw no name for a generateName pod: try that form too.
        candidates.append(PodIdentity(**{**identity.__dict__, "name": ""}))
    return any(hmac.compare_digest(_mac(secret, covered, candidate, scope), mac) for candidate in candidates)


def _mac(secret: bytes, originals: Mapping[str, str], identity: PodIdentity, scope: Scope) -> str:
    digest = hmac.digest(secret, _message(originals, identity, scope), "sha256")
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def _message(originals: Mapping[str, str], identity: PodIdentity, scope: Scope) -> bytes:
    """What a MAC covers: compact JSON, keys sorted, non-ASCII escaped (the format MACs
    on existing pods were signed over, so it must never change)."""
    parts = [_VERSION, scope, identity.__dict__, sorted((str(k), str(v)) for k, v in originals.items())]
    # orjson writes the same bytes as json.dumps below whenever the result is ASCII (it never
    # escapes non-ASCII, so that case takes the slow path), and much cheaper per MAC.
    fast = orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)
    if fast.isascii():
        return fast
    return json.dumps(parts, separators=(",", ":"), sort_keys=True, ensure_ascii=True).encode()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


@dataclass(frozen=True)
class Baseline:
    """The baseline authority's decision: what the product may scale from, and why. ``pod``: the
    pod to plan from (recaptured: without its ``original-*`` annotations, so the spec is the
    baseline). ``stamp``: step 1's annotations merge patch (None: nothing to write; ``None`` values
    delete rejected keys); a trusted pod stamped before pod-level or sidecar originals were
    recorded gets those from the spec, with a pod MAC over all of them."""

    check: OriginalsCheck
    pod: Mapping[str, Any]
    stamp: dict[str, str | None] | None

    @property
    def may_resize(self) -> bool:
        return self.check.trust in (Trust.TRUSTED, Trust.RECAPTURE)

    @property
    def may_sign(self) -> bool:
        """Whether the pod's own ``original-*`` annotations may be bound to it with a pod MAC
        (recaptured ones are in ``stamp``, signed already)."""
        return self.check.trust is Trust.TRUSTED

    @property
    def refused(self) -> bool:
        return self.check.trust is Trust.REFUSE


def baseline(
    pod: Mapping[str, Any],
    keyring: KeyRing,
    spec_originals: Mapping[str, str] | None = None,
    vouched: Mapping[str, str] | None = None,
) -> Baseline:
    """The one baseline authority: the originals decision for ``pod`` (see :func:`check_originals`)."""
    result = check_originals(pod, keyring, spec_originals, vouched)
    if result.scope == "sized" and result.trust is Trust.TRUSTED:
        # Trusted only while the spec is unchanged: bind the originals, and the spec's values lacking
        # one (a container a later webhook added), to this pod before any write to its spec (step 1,
        # conditional on the pod as read), so no container is left without originals.
        missing = missing_original_annotations(pod)
        return Baseline(result, pod, {**missing, **pod_mac(pod, keyring, missing)})
    if result.trust is Trust.TRUSTED:
        # (Vouched originals are those step 1 recorded: the spec holds our resize, not a baseline.)
        return Baseline(result, pod, None if result.reason == _VOUCHED else _completion(pod, keyring))
    if result.trust is not Trust.RECAPTURE:
        return Baseline(result, pod, None)
    if spec_originals is None:
        spec_originals = originals_from_spec_annotations(pod)
    meta = pod.get("metadata") or {}
    stamp: dict[str, str | None] = dict(originals_removal(read_state(pod)))
    kept = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in stamp}
    view = {**pod, "metadata": {**meta, "annotations": kept}}
    stamp.update(spec_originals)
    if keyring:
        stamp.update(mac_patch(sign_originals(keyring, spec_originals, PodIdentity.of(pod), "pod")))
    return Baseline(result, view, stamp)


def early_binding(pod: Mapping[str, Any], keyring: KeyRing) -> dict[str, str | None] | None:
    """The annotations merge patch binding a never-changed pod's originals to it with a pod MAC before
    its spec changes other than by our resize (a scheduling gate removed; see the module docstring):
    step 1's stamp, else a pod MAC over the trusted originals. None: changed or bound already, no key,
    or untrusted originals (the bound pod's step 1 replaces and reports them). Raises as :func:`check_originals`."""
    if (pod.get("metadata") or {}).get("generation") != 1 or not keyring:
        return None
    decided = baseline(pod, keyring)
    check = decided.check
    if check.trust is Trust.TRUSTED and check.scope != "pod":
        return decided.stamp or dict(pod_mac(pod, keyring))
    if check.trust is Trust.RECAPTURE and not check.tampered:
        return decided.stamp
    return None


def _completion(pod: Mapping[str, Any], keyring: KeyRing) -> dict[str, str | None] | None:
    """Trusted originals lacking the pod-level or a sidecar's keys, never resized by us (older versions
    left them alone; newer ones record first, a pod MAC binding every key): step 1 records them
    from the spec, with a pod MAC over all the originals."""
    if only_container_values(pod):
        return None  # asked on every pass of a trusted pod: skip reading the whole spec
    late = _late_keys(pod)
    missing = {key: value for key, value in missing_original_annotations(pod).items() if key in late}
    return {**missing, **pod_mac(pod, keyring, missing)} if missing else None


def admission_stamp(
    pod: Mapping[str, Any], namespace: str, keyring: KeyRing, spec_originals: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The authority's rule at admission: the spec as sent is the baseline, whatever the pod
    carries. The ``original-*`` annotations to stamp with their admission MAC (none without keys);
    every other controller-owned key the client sent is to be removed."""
    originals = dict(spec_originals) if spec_originals is not None else originals_from_spec_annotations(pod)
    if not originals or not keyring:
        return originals
    identity = PodIdentity.of(pod, namespace, "admission")
    return {**originals, **mac_patch(sign_originals(keyring, originals, identity, "admission"))}


def admitted_originals(
    pod: Mapping[str, Any], namespace: str, keyring: KeyRing, spec_originals: Mapping[str, str] | None = None
) -> dict[str, str] | None:
    """The ``original-*`` annotations of a pod at admission carrying the webhook's own sized record,
    verified as :func:`sized_stamp` wrote it; else None. Such a pod is the webhook's own answer,
    called again (``reinvocationPolicy: IfNeeded``) after a later mutating webhook changed it: its
    author wrote the originals, not the spec's sized values."""
    state = read_state(pod)
    record, parsed = state.sized_at_admission, state.mac
    if record is None or parsed is None or parsed.scope != "sized":
        return None
    secret = keyring.keys.get(parsed.key_id)
    originals = dict(state.originals)
    if secret is None or not originals:
        return None
    spec = spec_originals if spec_originals is not None else originals_from_spec_annotations(pod)
    if state.keys_refused is not None:  # colliding keys: no record of ours can describe this pod
        return None
    # (signed under the keys the pod carries: legacy ones too, from a webhook before an upgrade)
    covered = _sized_cover(originals, record, state.as_recorded(spec))
    if not _matches(secret, covered, PodIdentity.of(pod, namespace, "sized"), "sized", parsed.digest):
        return None
    return state.as_written(originals)


def sized_stamp(
    pod: Mapping[str, Any],
    namespace: str,
    keyring: KeyRing,
    originals: Mapping[str, str],
    node_type: str,
    sized: Mapping[str, str],
) -> dict[str, str]:
    """The authority's rule for a pod the webhook sizes at admission: ``originals`` (of the spec as
    sent), the ``sized-at-admission`` record and a sized MAC over both and ``sized``
    (``originals_from_spec_annotations`` of the pod as sized). Empty without keys: nothing could
    vouch for originals that differ from the spec."""
    if not originals or not keyring:
        return {}
    identity = PodIdentity.of(pod, namespace, "sized")
    mac = sign_originals(keyring, _sized_cover(originals, node_type, sized), identity, "sized")
    return {**originals, **sized_record_patch(node_type), **mac_patch(mac)}


def _sized_cover(originals: Mapping[str, str], record: str, sized: Mapping[str, str]) -> dict[str, str]:
    """What a sized MAC covers besides the identity: the originals, the record and the spec's values
    of the keys the originals have. The webhook records every value it sizes, so a container another
    webhook adds afterwards (never sized by us: the spec is its baseline) does not void the record."""
    return {
        **originals,
        **sized_record_patch(record),
        **{_SIZED_VALUE + k: v for k, v in sized.items() if k in originals},
    }


def pod_mac(pod: Mapping[str, Any], keyring: KeyRing, added: Mapping[str, str] | None = None) -> dict[str, str]:
    """The MAC patch binding the pod's originals, with ``added`` ones, to this pod (empty without keys)."""
    if not keyring:
        return {}
    originals = {**original_annotations(pod), **(added or {})}
    return mac_patch(sign_originals(keyring, originals, PodIdentity.of(pod), "pod"))


def pod_mac_stand_in(keyring: KeyRing) -> dict[str, str]:
    """A MAC patch of exactly :func:`pod_mac`'s size, for a size check, without computing a MAC."""
    key_id = keyring.newest
    if key_id is None:
        return {}
    return mac_patch(Mac("pod", key_id, "-" * _MAC_CHARS))


def needs_resign(pod: Mapping[str, Any], keyring: KeyRing) -> bool:
    """A MAC signed with a key other than the newest (rotation): re-sign while it still verifies."""
    parsed = read_mac(pod)
    return parsed is not None and parsed.key_id in keyring.keys and parsed.key_id != keyring.newest
