"""AdmissionReview in, AdmissionReview out: the webhook's decision, free of I/O.

``handle_review(body)`` returns ``(status_code, response_bytes, record)``: 200 with an
AdmissionReview that is always ``allowed: true`` (for an eligible pod CREATE with a JSONPatch
that sets the ``original-*`` annotations the shared core, :mod:`resizer`, computes, and removes
every controller-owned annotation the client sent: a copied manifest must not carry stale
state, a tenant must not pick its own baseline), or 400 when the body is not a usable review.
Eligibility and originals are the core's decisions only. With a sizing context
(:mod:`app.sizing`, ``--size-at-admission``) a pod whose node type is known at admission is also
given its size there (:mod:`resizer.pinning`), with the sized-scope MAC instead of the admission
one. A pod that carries the webhook's own verified sized record (its answer, called again after a
later webhook changed the pod) is decided on the values its author wrote, the recorded originals
(:func:`resizer.admitted_originals`), and patched from what it is now. A pod two of whose
resizable containers would share an ``original-*`` key is allowed unstamped, forged keys stripped
(``reason: CollidingContainerKeys``). Any unexpected exception allows the pod unchanged (our bug
must never block pod creation) with ``reason: InternalError``; a failure of the sizing alone
leaves the pod stamped only.
``record`` holds the log fields (``uid``, ``pod``, ``namespace``, ``owner``, ``decision``,
``reason``, ``originals``; ``error``/``stack`` on errors); the caller adds ``duration_ms``.
"""

from __future__ import annotations

import base64
import re
import traceback
from typing import TYPE_CHECKING, Any

import orjson

import resizer
from resizer.scope import NamespaceScope
from resizer.vpa import admission_vpa_hold

if TYPE_CHECKING:
    from app.sizing import SizingContext

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"

# Decisions (the ``decision`` log field); metrics map InternalError to "error".
PATCHED = "patched"
SKIPPED = "skipped"
REJECTED = "rejected"

REASON_INTERNAL_ERROR = "InternalError"
REASON_SIZED = "SizedAtAdmission"  # created at its size for the node type it is pinned to
REASON_ALREADY_SIZED = "AlreadySized"  # our own sized answer, called again: nothing to change
REASON_WOULD_RESIZE = "WouldResize"  # --dry-run: the size it would have been created at
REASON_OVERLOADED = "Overloaded"
# Two resizable containers would share an original-* key (e.g. one name twice: the apiserver
# validates names after admission): admitted as sent, forged keys stripped, nothing stamped.
REASON_COLLIDING_KEYS = "CollidingContainerKeys"
# JSON objects + arrays in one review beyond which it is not parsed (answered "allowed, no
# patch", as under overload). A pod of MAX_STAMPED_CONTAINERS (256) containers, each with
# resources, ports, probes, a few mounts and twenty env vars, has ~10,000. Parsing time and
# memory grow with objects, not bytes: a 4 MiB review of tiny objects parses to many times its
# size. Counted where the review is decided, off the event loop: counting on the loop, chunk
# by chunk as the body arrived, held every other review up.
MAX_JSON_CONTAINERS = 20_000
TOO_MANY_OBJECTS = f"more than {MAX_JSON_CONTAINERS} JSON objects/arrays"
_UID = re.compile(rb'"uid"\s*:\s*"([A-Za-z0-9._:-]{1,128})"')
_UID_SEARCH_BYTES = 64 * 1024
# Pods with more spec containers are admitted with forged keys stripped but unstamped:
# every container's originals cost CPU to compute, sign and patch when not memoised (a
# review worker's time), and a few hundred containers' originals would not fit the 256 KiB
# annotation limit anyway.
MAX_STAMPED_CONTAINERS = 256
# A review decided on the webhook's event loop holds every other review up meanwhile, so
# only reviews that cost well under a millisecond are decided there (the caller checks the
# byte bounds before parsing, handle_review_inline the rest); the bounds follow what parsing
# per JSON value, originals per unmemoised container and stripping per forged key cost
# (docs/performance.md). Costlier reviews are decided by a review worker (app.worker), else
# one at a time in the large lane (app.server).
INLINE_MAX_BYTES = 16 * 1024
INLINE_MAX_VALUES = 2048  # commas: JSON values after the first of each object/array
INLINE_MAX_CONTAINERS = 4  # spec.containers whose originals are not memoised
INLINE_MAX_ANNOTATIONS = 64

_NO_ORIGINALS: dict[str, str] = {}  # shared, never mutated

_JSON = orjson.loads
_DUMPS = orjson.dumps
_b64 = base64.b64encode


# -- memo of the core's originals ---------------------------------------------------
# resizer.originals_from_spec_annotations parses and canonicalises every quantity
# exactly (Fractions), most of a request's CPU. Its result depends only on each spec
# container's name and resources (its contract: "the spec as it is now";
# tests/unit/test_webhook_review.py checks that varying anything else leaves it
# unchanged), and replicas of one workload share those, so the result is memoised on
# exactly that projection.
# The rules stay in the core: a miss calls it, a hit returns what it returned.
# Every cache here is bounded in bytes (keys and values as counted by
# ByteBoundedCache), whatever the input; huge pods are answered without caching.
_ORIGINALS_KEY_MAX = 4096  # bytes of key; bigger pods are not memoised
_ENTRY_OVERHEAD = 200  # bytes a dict entry and its objects cost beyond the counted text


class ByteBoundedCache:
    """A dict whose entries' declared sizes add up to at most ``max_bytes`` (oldest evicted first)."""

    __slots__ = ("max_bytes", "size", "_data")

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.size = 0
        self._data: dict[Any, tuple[Any, int]] = {}

    def get(self, key: Any) -> Any:
        hit = self._data.get(key)
        return None if hit is None else hit[0]

    def put(self, key: Any, value: Any, nbytes: int) -> None:
        nbytes += _ENTRY_OVERHEAD
        if nbytes > self.max_bytes // 8:  # one entry never takes a large share
            return
        old = self._data.pop(key, None)
        if old is not None:
            self.size -= old[1]
        data = self._data
        while data and self.size + nbytes > self.max_bytes:
            self.size -= data.pop(next(iter(data)))[1]
        data[key] = (value, nbytes)
        self.size += nbytes

    def clear(self) -> None:
        self._data.clear()
        self.size = 0

    def __len__(self) -> int:
        return len(self._data)


_originals_cache = ByteBoundedCache(2 * 1024 * 1024)


def originals_of(pod: dict[str, Any]) -> dict[str, str]:
    """``resizer.originals_from_spec_annotations(pod)``, memoised. Treat the result as read-only."""
    result, _ = _originals_and_key(pod)
    return result


def _originals_and_key(pod: dict[str, Any]) -> tuple[dict[str, str], bytes | None]:
    """The originals and the memo key they are cached under (None: not cacheable)."""
    try:
        key = _memo_key(pod["spec"])
    except Exception:  # odd shapes: let the core decide (and raise) uncached
        return resizer.originals_from_spec_annotations(pod), None
    if len(key) > _ORIGINALS_KEY_MAX:  # unusually many containers: not worth the memory
        return resizer.originals_from_spec_annotations(pod), None
    hit = _originals_cache.get(key)
    if hit is not None:
        return hit, key
    result = resizer.originals_from_spec_annotations(pod)
    _originals_cache.put(key, result, len(key) + sum(len(k) + len(v) + 100 for k, v in result.items()))
    return result, key


def json_pointer_escape(key: str) -> str:
    """RFC 6901 escaping of one reference token: ``~`` -> ``~0``, ``/`` -> ``~1``."""
    return key.replace("~", "~0").replace("/", "~1")


_ANNOTATIONS_PATH = "/metadata/annotations"
_path_cache = ByteBoundedCache(1024 * 1024)


def annotation_path(key: str) -> str:
    """JSON pointer of ``metadata.annotations[key]`` (memoised: the same keys recur)."""
    path: str | None = _path_cache.get(key)
    if path is None:
        path = _ANNOTATIONS_PATH + "/" + json_pointer_escape(key)
        _path_cache.put(key, path, 2 * len(key) + 40)
    return path


def _error(status: int, message: str, uid: str = "") -> tuple[int, bytes, dict[str, Any]]:
    record: dict[str, Any] = {"decision": REJECTED, "reason": "BadRequest", "error": message}
    if uid:
        record["uid"] = uid
    return status, _DUMPS({"error": message, "code": status}), record


def too_large(limit: int) -> tuple[int, bytes, dict[str, Any]]:
    """The 413 answer for a body over ``limit`` bytes (used by the HTTP layer)."""
    status, body, record = _error(413, f"request body exceeds the {limit}-byte limit")
    record["reason"] = "TooLarge"
    return status, body, record


def allowed_response(uid: str) -> bytes:
    """``allowed: true`` without a patch, for ``uid``."""
    return _allowed(uid)


def undecided(head: bytes, why: str, reason: str = REASON_OVERLOADED) -> tuple[int, bytes, dict[str, Any]]:
    """The answer to a review not decided (overload, too many objects, a review worker's fault):
    allowed without a patch for the uid found in the first 64 KiB of ``head`` (the reconciler
    captures the originals from the spec later, as when the webhook is down); without a
    findable uid, 503, which ``failurePolicy: Ignore`` admits."""
    record: dict[str, Any] = {"decision": SKIPPED, "reason": reason, "error": why}
    match = _UID.search(head, 0, _UID_SEARCH_BYTES)
    if match is None:
        return 503, b'{"error":"overloaded","code":503}', record
    return 200, _allowed(match.group(1).decode("ascii")), record


def _allowed(uid: str, patch_b64: str | None = None, warnings: list[str] | None = None) -> bytes:
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch_b64 is not None:
        response["patchType"] = "JSONPatch"
        response["patch"] = patch_b64
    if warnings:
        response["warnings"] = warnings
    return _DUMPS({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def _encode(ops: list[dict[str, Any]]) -> str:
    return _b64(_DUMPS(ops)).decode("ascii")


# The common case, a pod straight from its controller (no controller-owned
# annotation yet), gets the same patch as every replica of its workload: all
# ``add``s (the originals and their admission-scope MAC), plus creating the map
# when absent. That encoded patch is memoised on the originals' memo key, what
# the MAC binds (the replicas of one workload share both) and the signing key's
# content (a key recreated under the same id must never get the old key's MAC).
_fresh_patch_cache = ByteBoundedCache(2 * 1024 * 1024)


def fresh_patch(stamp: dict[str, str], create_map: bool, memo_key: bytes | None = None) -> str:
    """Base64 JSONPatch stamping ``stamp`` on a pod with no controller-owned annotation.

    ``memo_key`` must identify ``stamp`` exactly (None: not memoised).
    """
    if memo_key is None:
        return _encode(build_patch(None if create_map else {}, stamp))
    key = (memo_key, create_map)
    hit: str | None = _fresh_patch_cache.get(key)
    if hit is not None:
        return hit
    encoded = _encode(build_patch(None if create_map else {}, stamp))
    _fresh_patch_cache.put(key, encoded, len(memo_key) + len(encoded))
    return encoded


def build_patch(annotations: Any, originals: dict[str, str]) -> list[dict[str, Any]]:
    """JSONPatch ops turning ``annotations`` into one whose controller-owned keys are exactly ``originals``.

    ``annotations`` is the pod's ``metadata.annotations`` (None when absent).
    Keys already holding the wanted value produce no op, so a reinvocation on a
    stamped pod yields an empty list. ``add`` on an existing member replaces it.
    """
    ops: list[dict[str, Any]] = []
    if not isinstance(annotations, dict):
        if not originals:
            return ops
        # Absent (or null) map: create it, then add into it.
        ops.append({"op": "add", "path": _ANNOTATIONS_PATH, "value": {}})
        annotations = {}
    else:
        owned = resizer.is_controller_owned_key
        for key in annotations:
            if key not in originals and owned(key):
                # Not memoised: removed keys are the client's choice, and a forged pod may carry thousands.
                ops.append({"op": "remove", "path": _ANNOTATIONS_PATH + "/" + json_pointer_escape(key)})
    get = annotations.get
    for key, value in originals.items():
        if get(key) != value:
            ops.append({"op": "add", "path": annotation_path(key), "value": value})
    return ops


def _is_pod(request: dict[str, Any]) -> bool:
    resource = request.get("resource")
    if isinstance(resource, dict):
        return resource.get("resource") == "pods" and not resource.get("group") and not request.get("subResource")
    kind = request.get("kind")
    return isinstance(kind, dict) and kind.get("kind") == "Pod" and not kind.get("group")


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def handle_review(
    body: bytes,
    keyring: resizer.KeyRing = resizer.EMPTY_KEYRING,
    scope: NamespaceScope | None = None,
    sizing: SizingContext | None = None,
) -> tuple[int, bytes, dict[str, Any]]:
    """Decide on one AdmissionReview; never raises. ``keyring`` signs the originals (none: unsigned).
    Pods in a namespace ``scope`` excludes by name are skipped (``NamespaceExcluded``; forged
    controller-owned keys still stripped): the apiserver applies the label part of the scope
    through the webhook configuration's namespaceSelector. A body of more than
    ``MAX_JSON_CONTAINERS`` brackets is not parsed (an upper bound: brackets inside strings count
    too)."""
    if body.count(b"{") + body.count(b"[") > MAX_JSON_CONTAINERS:
        return undecided(body, TOO_MANY_OBJECTS)
    review = _parse(body)
    if isinstance(review, tuple):
        return review
    return _handle(review, len(body), keyring, scope, sizing)


def handle_review_inline(
    body: bytes,
    keyring: resizer.KeyRing = resizer.EMPTY_KEYRING,
    scope: NamespaceScope | None = None,
    sizing: SizingContext | None = None,
) -> tuple[int, bytes, dict[str, Any]] | None:
    """:func:`handle_review` for the event loop: None, without deciding, when the review is
    too costly to decide there (more than ``INLINE_MAX_ANNOTATIONS`` annotations, or more
    than ``INLINE_MAX_CONTAINERS`` containers whose originals are not memoised); the caller
    decides it elsewhere. ``sizing``: what sizing at admission needs (None: stamp only)."""
    review = _parse(body)
    if isinstance(review, tuple):
        return review
    if _costly(review):
        return None
    return _handle(review, len(body), keyring, scope, sizing)


def _parse(body: bytes) -> dict[str, Any] | tuple[int, bytes, dict[str, Any]]:
    """The decoded AdmissionReview object, or the 400 answer when the body is not one."""
    try:
        review = _JSON(body)
    except Exception as exc:  # orjson.JSONDecodeError, and anything odd about the input
        return _error(400, f"body is not valid JSON: {exc}")
    if not isinstance(review, dict):
        return _error(400, f"AdmissionReview must be a JSON object, got {type(review).__name__}")
    return review


def _costly(review: dict[str, Any]) -> bool:
    request = review.get("request")
    pod = request.get("object") if isinstance(request, dict) else None
    if not isinstance(pod, dict):
        return False
    metadata, spec = pod.get("metadata"), pod.get("spec")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if isinstance(annotations, dict) and len(annotations) > INLINE_MAX_ANNOTATIONS:
        return True
    if not isinstance(spec, dict):
        return False
    containers = spec.get("containers")
    if isinstance(containers, list) and len(containers) > INLINE_MAX_CONTAINERS:
        return not _originals_memoised(spec)  # replicas of a workload stay cheap
    return False


def _originals_memoised(spec: dict[str, Any]) -> bool:
    try:
        key = _memo_key(spec)
    except Exception:
        return False
    return _originals_cache.get(key) is not None


def _memo_key(spec: dict[str, Any]) -> bytes:
    """What the originals of a spec depend on: the names and resources of the containers and of
    the restartable init containers (sidecars, which have originals too), and the pod level
    (spec.resources)."""
    key = [(c["name"], c.get("resources")) for c in spec["containers"]]
    sidecars = [
        (c["name"], c.get("resources")) for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"
    ]
    return _DUMPS([key, sidecars, spec.get("resources") or None])


def _handle(
    review: dict[str, Any],
    body_size: int,
    keyring: resizer.KeyRing,
    scope: NamespaceScope | None,
    sizing: SizingContext | None = None,
) -> tuple[int, bytes, dict[str, Any]]:
    if review.get("apiVersion") != API_VERSION or review.get("kind") != KIND:
        return _error(
            400,
            f"expected apiVersion {API_VERSION!r} and kind {KIND!r}, "
            f"got {str(review.get('apiVersion'))[:100]!r} and {str(review.get('kind'))[:100]!r}",
        )
    request = review.get("request")
    if not isinstance(request, dict):
        return _error(400, "AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        return _error(400, "AdmissionReview request has no uid")
    operation = request.get("operation")
    obj = request.get("object")
    if operation == "CREATE" and not isinstance(obj, dict):
        return _error(400, "CREATE AdmissionReview request has no object", uid)

    # Every decision line has the same fields, whatever the outcome.
    record: dict[str, Any] = {
        "uid": uid,
        "pod": "",
        "namespace": "",
        "owner": "",
        "decision": SKIPPED,
        "reason": "",
        "originals": _NO_ORIGINALS,
    }
    try:
        status, out = _decide(request, operation, obj, uid, record, keyring, scope, body_size, sizing)
    except Exception as exc:  # our bug: allow the pod unchanged, log and count it
        record["decision"] = SKIPPED
        record["reason"] = REASON_INTERNAL_ERROR
        record["error"] = repr(exc)
        record["stack"] = traceback.format_exc()
        record["originals"] = _NO_ORIGINALS
        try:
            return 200, _allowed(uid), record
        except Exception:  # uid that cannot be echoed (e.g. lone surrogates)
            return _error(400, "AdmissionReview request uid cannot be echoed", "")
    return status, out, record


def _decide(
    request: dict[str, Any],
    operation: Any,
    obj: Any,
    uid: str,
    record: dict[str, Any],
    keyring: resizer.KeyRing,
    scope: NamespaceScope | None = None,
    body_size: int | None = None,
    sizing: SizingContext | None = None,
) -> tuple[int, bytes]:
    if operation != "CREATE" or not _is_pod(request):
        record["decision"] = SKIPPED
        record["reason"] = "NotPodCreate"
        record["namespace"] = _str(request.get("namespace"))
        record["pod"] = _str(request.get("name"))
        return 200, _allowed(uid)

    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        # The apiserver always sends metadata; without it no owner and no
        # annotations map could be patched, so there is nothing to do.
        record["decision"] = SKIPPED
        record["reason"] = "NoMetadata"
        record["namespace"] = _str(request.get("namespace"))
        record["pod"] = _str(request.get("name"))
        return 200, _allowed(uid)
    record["pod"] = _str(metadata.get("name")) or _str(metadata.get("generateName")) or _str(request.get("name"))
    namespace = _str(request.get("namespace")) or _str(metadata.get("namespace"))
    record["namespace"] = namespace
    annotations = metadata.get("annotations")

    # (Decoded text is never longer than its JSON: a review under the limit cannot hold more.)
    could_be_oversized = body_size is None or body_size > resizer.TOTAL_ANNOTATION_SIZE_LIMIT
    if could_be_oversized and isinstance(annotations, dict) and _oversized(annotations):
        # The apiserver rejects this pod anyway (annotations over 256 KiB, checked after
        # admission): answer at once instead of building a patch as large as the input.
        record["decision"] = SKIPPED
        record["reason"] = "AnnotationsTooLarge"
        return 200, _allowed(uid)
    # Our own sized answer, called again after a later webhook changed the pod: decided on the
    # pod its author wrote, the patch computed against the pod as sent.
    authored = _as_authored(obj, annotations, namespace, keyring)
    if authored is not None:
        record["authoredFrom"] = AUTHORED_FROM_RECORD
    if scope is not None and namespace in scope.excluded:
        # Controller-owned keys still go: the scope may change later.
        record["decision"] = SKIPPED
        record["reason"] = "NamespaceExcluded"
        return 200, _allowed(uid, _strip(annotations, record, _restoring(obj, authored)))

    verdict = resizer.eligibility(obj)
    owner_kind = verdict.owner_kind
    if owner_kind:
        record["owner"] = f"{owner_kind}/{verdict.owner_name or ''}"
    if not verdict.eligible:
        # Controller-owned keys go on every CREATE, eligible or not: a pod admitted
        # ineligible (skip annotation, odd owner) may become eligible later.
        record["decision"] = SKIPPED
        record["reason"] = verdict.reason
        return 200, _allowed(uid, _strip(annotations, record, _restoring(obj, authored)))

    spec = obj.get("spec")
    containers = spec.get("containers") if isinstance(spec, dict) else None
    if isinstance(containers, list) and len(containers) > MAX_STAMPED_CONTAINERS:
        record["decision"] = SKIPPED
        record["reason"] = "TooManyContainers"
        return 200, _allowed(uid, _strip(annotations, record, _restoring(obj, authored)))

    subject = obj if authored is None else authored
    try:
        originals, memo_key = _originals_and_key(subject)
    except resizer.KeyCollisionError as error:  # never one baseline for two containers
        record["decision"] = SKIPPED
        record["reason"] = REASON_COLLIDING_KEYS
        record["error"] = str(error)
        return 200, _allowed(uid, _strip(annotations, record, _restoring(obj, authored)))
    # The baseline authority's rule at admission: the spec authored is the baseline, whatever the pod carries.
    stamp = resizer.admission_stamp(subject, namespace, keyring, originals)
    if memo_key is not None and resizer.ORIGINALS_MAC in stamp:
        identity = resizer.PodIdentity.of(subject, namespace, "admission")
        memo_key = b"\0".join((memo_key, _DUMPS(identity.__dict__), keyring.fingerprint.encode()))
    record["originals"] = originals
    warnings: list[str] | None = None
    if sizing is not None and stamp:
        sized = _sized_at_admission(subject, namespace, keyring, originals, sizing, record)
        if sized is not None and not sizing.dry_run:
            ops, sized_stamp, sized_values = sized
            if resizer.fits_annotation_limit(annotations if isinstance(annotations, dict) else {}, sized_stamp):
                if authored is not None:
                    ops = resizer.values_patch(obj, sized_values)
                ops = build_patch(annotations, sized_stamp) + ops
                if not ops:
                    record["decision"] = SKIPPED
                    record["reason"] = REASON_ALREADY_SIZED
                    return 200, _allowed(uid)
                record["decision"] = PATCHED
                record["reason"] = REASON_SIZED
                return 200, _allowed(uid, _encode(ops))
        elif sized is not None:
            warnings = [
                f"workload-resizer (dry run): {REASON_WOULD_RESIZE} at admission for node type "
                f"{record['sizedFor']}: {record['wouldResize']}"
            ]
    if stamp and not resizer.fits_annotation_limit(annotations if isinstance(annotations, dict) else {}, stamp):
        # Stamping would push the pod over the apiserver's annotation size limit and so
        # block its creation. Admit it unstamped (forged keys still stripped); the
        # reconciler will not resize a pod whose originals cannot be recorded.
        record["decision"] = SKIPPED
        record["reason"] = "AnnotationsTooLarge"
        record["originals"] = _NO_ORIGINALS
        return 200, _allowed(uid, _strip(annotations, record, _restoring(obj, authored)))
    if stamp and (not isinstance(annotations, dict) or not any(map(resizer.is_controller_owned_key, annotations))):
        patch = fresh_patch(stamp, not isinstance(annotations, dict), memo_key)
    else:
        ops = build_patch(annotations, stamp) + _restoring(obj, authored)
        if not ops:
            record["decision"] = SKIPPED
            record["reason"] = "AlreadyStamped" if stamp else "NothingToStamp"
            return 200, _allowed(uid, None, warnings)
        patch = _encode(ops)
    record["decision"] = PATCHED
    record["reason"] = verdict.reason
    return 200, _allowed(uid, patch, warnings)


def _sized_at_admission(
    pod: dict[str, Any],
    namespace: str,
    keyring: resizer.KeyRing,
    originals: dict[str, str],
    sizing: SizingContext,
    record: dict[str, Any],
) -> tuple[list[dict[str, Any]], dict[str, str], dict[str, str]] | None:
    """The ops setting the pod's size for the node type it is pinned to, the annotations to
    stamp with them (originals, record, sized-scope MAC) and the sized spec's values
    (``originals_from_spec_annotations`` form); None: not determined at admission, or nothing to
    change (stamp only). Never raises: sizing is best effort."""
    if not keyring:
        return None  # nothing could vouch for originals that differ from the spec
    key = _sized_key(pod, namespace, keyring, sizing)
    hit = _sized_cache.get(key) if key is not None else None
    if hit is None:
        try:
            hit = _size(pod, namespace, keyring, originals, sizing)
        except Exception as exc:  # our bug or an odd spec: the pod is stamped as today
            record["sizingError"] = repr(exc)
            return None
        if key is not None:
            _sized_cache.put(key, hit, len(key) + (len(_DUMPS(hit)) if hit else 0))
    if len(hit) == 1:
        record["sizingHeld"] = hit[0]
        return None
    if not hit:
        return None
    ops, stamp, node_type, summary, sized_values = hit
    record["sizedFor"] = node_type
    record["wouldResize" if sizing.dry_run else "sized"] = summary
    return list(ops), stamp, sized_values


# The sized patch of replicas of one workload is the same: memoised on the whole pod as sent
# (every field any rule may read), the namespace, the signing key and the sizing context's
# version (node labels and config). Pods too large to key are decided unmemoised.
_sized_cache = ByteBoundedCache(2 * 1024 * 1024)
_SIZED_KEY_MAX = 16 * 1024
_NOT_SIZED: tuple[()] = ()


def _sized_key(pod: dict[str, Any], namespace: str, keyring: resizer.KeyRing, sizing: SizingContext) -> bytes | None:
    try:
        key = _DUMPS((namespace, sizing.version, keyring.fingerprint, pod))
    except Exception:  # odd shapes (e.g. integers beyond 64 bits): not memoised
        return None
    return key if len(key) <= _SIZED_KEY_MAX else None


def _size(
    pod: dict[str, Any], namespace: str, keyring: resizer.KeyRing, originals: dict[str, str], sizing: SizingContext
) -> tuple[Any, ...]:
    """(ops, stamp, node type, summary, sized values) of the pod's sizing at admission, ``(why,)``
    when it is held (an updating VerticalPodAutoscaler may manage it,
    :func:`resizer.vpa.admission_vpa_hold`, or :func:`resizer.admission_hold`), or ``_NOT_SIZED``."""
    node_type = resizer.pinned_node_type(pod, sizing.nodes, sizing.config, sizing.label)
    if node_type is None:
        return _NOT_SIZED
    decided = resizer.admission_sizing(pod, sizing.config, node_type)
    if decided is None:
        return _NOT_SIZED
    held = admission_vpa_hold(pod, namespace, sizing.vpas) or resizer.admission_hold(
        pod, decided, sizing.limit_ranges.get(namespace, ())
    )
    if held is not None:
        return (held,)
    stamp = resizer.sized_stamp(pod, namespace, keyring, originals, node_type, decided.sized)
    if not stamp:
        return _NOT_SIZED
    return tuple(decided.ops), stamp, node_type, decided.plan.summary(), dict(decided.sized)


def _oversized(annotations: dict[str, Any]) -> bool:
    limit = resizer.TOTAL_ANNOTATION_SIZE_LIMIT
    if len(annotations) > limit // 2:  # each entry takes >= 2 bytes
        return True
    size = sum(map(len, annotations))  # JSON object keys are always strings
    if size > limit:
        return True
    return size + sum(len(v) for v in annotations.values() if isinstance(v, str)) > limit


def _strip(annotations: Any, record: dict[str, Any], restoring: list[dict[str, Any]]) -> str | None:
    """The patch removing every client-supplied controller-owned key, with the ``restoring`` ops
    (None: nothing to change)."""
    ops = build_patch(annotations, {}) if isinstance(annotations, dict) else []
    if ops:
        record["stripped"] = len(ops)
    ops += restoring
    return _encode(ops) if ops else None


# -- the webhook called again on its own answer -------------------------------------------
AUTHORED_FROM_RECORD = "sized-at-admission"  # the ``authoredFrom`` log field: the pod as authored came from it


def _as_authored(
    obj: dict[str, Any], annotations: Any, namespace: str, keyring: resizer.KeyRing
) -> dict[str, Any] | None:
    """The pod as its author wrote it when ``obj`` carries our own sized record, verified by the
    baseline authority (:func:`resizer.admitted_originals`); None for any other pod (a fresh pod
    costs one dict lookup). With ``reinvocationPolicy: IfNeeded`` the apiserver calls the webhook
    again with its own answer after a later webhook changed the pod."""
    if not isinstance(annotations, dict) or resizer.SIZED_AT_ADMISSION not in annotations or not keyring:
        return None
    originals = resizer.admitted_originals(obj, namespace, keyring, originals_of(obj))
    return None if originals is None else resizer.as_authored(obj, originals)


def _restoring(obj: dict[str, Any], authored: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The ops putting the authored values back into the pod as sent (none for a pod as authored)."""
    if authored is None:
        return []
    return resizer.values_patch(obj, resizer.originals_from_spec_annotations(authored))
