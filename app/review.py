"""AdmissionReview in, AdmissionReview out: the webhook's decision, free of I/O.

:func:`parse` turns the body into a :class:`Review` (or the 400 :class:`Answer`), :func:`decide`
a review and its :class:`Context` into an :class:`Answer` (what the server counts and logs),
:func:`encode` that into bytes; :func:`handle_review` runs the three.

Every review answer is ``allowed: true``. An eligible pod CREATE gets a JSONPatch setting the
``original-*`` annotations (:mod:`resizer`); every CREATE loses the controller-owned annotations
the client sent (a copied manifest must not carry stale state, a tenant must not pick its own
baseline). With ``--size-at-admission`` a pod whose node type is known is also given its size
(:mod:`resizer.pinning`); one carrying our own verified sized record (reinvoked after a later
webhook changed it) is decided on the values its author wrote. Any unexpected exception allows
the pod unchanged (``InternalError``): our bug must never block pod creation.
"""

from __future__ import annotations

import enum
import re
import traceback
from base64 import b64encode
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from orjson import dumps, loads

import resizer
from resizer import podstate
from resizer.scope import NamespaceScope
from resizer.vpa import admission_vpa_hold

if TYPE_CHECKING:
    from app.sizing import SizingContext

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"


class Decision(enum.StrEnum):
    """What the webhook did with a review (the ``decision`` log field)."""

    PATCHED = "patched"
    SKIPPED = "skipped"
    REJECTED = "rejected"


class Reason(enum.StrEnum):
    """Why (the ``reason`` log field); docs/operations.md describes each one."""

    # The core's eligibility verdict (resizer.eligibility), the reason of a stamped pod.
    ELIGIBLE = "Eligible"
    MIRROR_POD = "MirrorPod"
    SKIP_ANNOTATION = "SkipAnnotation"
    NO_CONTROLLER = "NoController"
    UNSUPPORTED_OWNER_KIND = "UnsupportedOwnerKind"
    SIZED_AT_ADMISSION = "SizedAtAdmission"  # created at its size for the node type it is pinned to
    ALREADY_SIZED = "AlreadySized"  # our own sized answer, called again: nothing to change
    ALREADY_STAMPED = "AlreadyStamped"
    NOTHING_TO_STAMP = "NothingToStamp"
    WOULD_RESIZE = "WouldResize"  # --dry-run: named in the warning giving the size it would have had
    NOT_POD_CREATE = "NotPodCreate"
    NO_METADATA = "NoMetadata"
    NAMESPACE_EXCLUDED = "NamespaceExcluded"
    TOO_MANY_CONTAINERS = "TooManyContainers"
    ANNOTATIONS_TOO_LARGE = "AnnotationsTooLarge"
    # Two resizable containers would share an original-* key (e.g. one name twice: the apiserver
    # validates names after admission): admitted as sent, forged keys stripped, nothing stamped.
    COLLIDING_CONTAINER_KEYS = "CollidingContainerKeys"
    OVERLOADED = "Overloaded"
    INTERNAL_ERROR = "InternalError"
    BAD_REQUEST = "BadRequest"
    TOO_LARGE = "TooLarge"
    METHOD_NOT_ALLOWED = "MethodNotAllowed"


_REASON_OF = {reason.value: reason for reason in Reason}


class Sizing(enum.StrEnum):
    """What sizing at admission came to (the label of the sized-at-admission metric)."""

    SIZED = "sized"
    WOULD_RESIZE = "would_resize"
    HELD = "held"
    ERROR = "error"


class SizingNote(NamedTuple):
    """Sizing at admission of a review: ``text`` is the plan's summary, why it is held, or the error."""

    result: Sizing
    text: str
    node_type: str = ""


class Review(NamedTuple):
    """A parsed AdmissionReview request, what :func:`decide` needs of it."""

    uid: str
    pod_create: bool  # a CREATE of a core Pod (no subresource)
    name: str  # the pod's name as the log shows it (else generateName, else the request's name)
    namespace: str
    pod: dict[str, Any]  # the object the apiserver sent ({} when not a pod CREATE)
    metadata: dict[str, Any] | None
    annotations: dict[str, Any] | None  # None: absent, null or not a map
    body_size: int


class Context(NamedTuple):
    """What a decision depends on besides the review (``sizing`` None: stamp only)."""

    keyring: resizer.KeyRing = resizer.EMPTY_KEYRING
    scope: NamespaceScope | None = None
    sizing: SizingContext | None = None


_NO_ORIGINALS: Mapping[str, str] = {}  # shared, never mutated


class Answer(NamedTuple):
    """The answer to one request, and what its metrics and log line say: ``status`` 200 answers
    ``allowed: true`` for ``uid`` with ``patch`` (base64 JSONPatch) and ``warnings``; 400/413
    refuse it; 503 is the overload answer, without a uid. ``reviewed``: a review was decided (its
    log line has the pod's fields)."""

    status: int
    uid: str
    decision: Decision
    reason: Reason
    patch: str | None = None
    warnings: tuple[str, ...] = ()
    pod: str = ""
    namespace: str = ""
    owner: str = ""
    originals: Mapping[str, str] = _NO_ORIGINALS
    authored_from: str = ""  # AUTHORED_FROM_RECORD when decided on the pod as its author wrote it
    sizing: SizingNote | None = None
    reviewed: bool = True
    error: str = ""
    stack: str = ""
    stripped: int = 0  # forged controller-owned keys removed


# JSON objects + arrays beyond which a review is not parsed ("allowed, no patch"): parse time and
# memory grow with objects, not bytes. Counted where it is decided, off the loop, not per chunk.
MAX_JSON_CONTAINERS = 20_000
TOO_MANY_OBJECTS = f"more than {MAX_JSON_CONTAINERS} JSON objects/arrays"
_UID = re.compile(rb'"uid"\s*:\s*"([A-Za-z0-9._:-]{1,128})"')
_UID_SEARCH_BYTES = 64 * 1024
# Pods with more spec containers are admitted unstamped (forged keys stripped): their originals
# cost a worker's CPU and would not fit the 256 KiB annotation limit anyway.
MAX_STAMPED_CONTAINERS = 256
# A review decided on the event loop holds all others up: only those well under a millisecond are
# (docs/performance.md; the caller checks the byte bounds before parsing, handle_review_inline the rest).
INLINE_MAX_BYTES = 16 * 1024
INLINE_MAX_VALUES = 2048  # commas: JSON values after the first of each object/array
INLINE_MAX_CONTAINERS = 4  # spec.containers whose originals are not memoised
INLINE_MAX_ANNOTATIONS = 64


# -- memo of the core's originals ---------------------------------------------------
# resizer.originals_from_spec_annotations (exact Fraction arithmetic) is most of a request's CPU.
# Its result depends only on the containers' names and resources, which a workload's replicas
# share (tests/unit/test_webhook_review.py checks): memoised on those. Every cache is byte-bounded.
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
        data = self._data
        old = data.pop(key, None)
        if old is not None:
            self.size -= old[1]
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
    return _originals_and_key(pod)[0]


def _originals_and_key(pod: dict[str, Any]) -> tuple[dict[str, str], bytes | None]:
    key = _memo_key(pod.get("spec"))
    hit = _originals_cache.get(key) if key is not None else None
    if hit is not None:
        return hit, key
    result = resizer.originals_from_spec_annotations(pod)  # (odd shapes: the core decides, and raises)
    if key is not None:
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


def _encode(ops: list[dict[str, Any]]) -> str:
    return b64encode(dumps(ops)).decode("ascii")


# A pod straight from its controller (no controller-owned annotation yet) gets the same patch
# as every replica of its workload, memoised on the originals' memo key, what the MAC binds and
# the signing key's content (a key recreated under the same id must never get the old key's MAC).
_fresh_patch_cache = ByteBoundedCache(2 * 1024 * 1024)


def fresh_patch(stamp: dict[str, str], create_map: bool, memo_key: bytes | None = None) -> str:
    """Base64 JSONPatch stamping ``stamp`` on a pod with no controller-owned annotation; ``memo_key``
    must identify ``stamp`` exactly (None: not memoised)."""
    key = (memo_key, create_map)
    encoded: str | None = _fresh_patch_cache.get(key) if memo_key is not None else None
    if encoded is None:
        encoded = _encode(build_patch(None if create_map else {}, stamp))
        if memo_key is not None:
            _fresh_patch_cache.put(key, encoded, len(memo_key) + len(encoded))
    return encoded


def build_patch(annotations: Any, originals: dict[str, str]) -> list[dict[str, Any]]:
    """JSONPatch ops turning ``annotations`` (None: absent) into a map whose controller-owned keys
    are exactly ``originals``; keys already holding the wanted value produce no op."""
    ops: list[dict[str, Any]] = []
    if not isinstance(annotations, dict):
        if not originals:
            return ops
        ops.append({"op": "add", "path": _ANNOTATIONS_PATH, "value": {}})
        annotations = {}
    else:
        owned = podstate.is_controller_owned_key
        for key in annotations:
            if key not in originals and owned(key):
                # Not memoised: removed keys are the client's choice, and a forged pod may carry thousands.
                ops.append({"op": "remove", "path": _ANNOTATIONS_PATH + "/" + json_pointer_escape(key)})
    get = annotations.get
    for key, value in originals.items():
        if get(key) != value:
            ops.append({"op": "add", "path": annotation_path(key), "value": value})
    return ops


# -- the pipeline: parse, decide, encode ---------------------------------------------------


def refused(status: int, error: str, uid: str = "", reason: Reason = Reason.BAD_REQUEST) -> Answer:
    return Answer(status, uid, Decision.REJECTED, reason, error=error, reviewed=False)


def too_large(limit: int) -> Answer:
    """The 413 answer for a body over ``limit`` bytes (used by the HTTP layer)."""
    return refused(413, f"request body exceeds the {limit}-byte limit", reason=Reason.TOO_LARGE)


def undecided(head: bytes, why: str, reason: Reason = Reason.OVERLOADED) -> Answer:
    """The answer to a review not decided: allowed without a patch for the uid found in the first
    64 KiB of ``head`` (the reconciler captures the originals later); without a findable uid, 503,
    which ``failurePolicy: Ignore`` admits."""
    match = _UID.search(head, 0, _UID_SEARCH_BYTES)
    uid = "" if match is None else match.group(1).decode("ascii")
    return Answer(200 if uid else 503, uid, Decision.SKIPPED, reason, error=why, reviewed=False)


_OVERLOADED_BODY = b'{"error":"overloaded","code":503}'


def encode(answer: Answer) -> bytes:
    """The response body of ``answer``: an AdmissionReview, or the JSON error of a refusal."""
    if answer.status == 503:
        return _OVERLOADED_BODY
    if answer.status != 200:
        return dumps({"error": answer.error, "code": answer.status})
    response: dict[str, Any] = {"uid": answer.uid, "allowed": True}
    if answer.patch is not None:
        response["patchType"] = "JSONPatch"
        response["patch"] = answer.patch
    if answer.warnings:
        response["warnings"] = answer.warnings
    return dumps({"apiVersion": API_VERSION, "kind": KIND, "response": response})


def handle_review(
    body: bytes,
    keyring: resizer.KeyRing = resizer.EMPTY_KEYRING,
    scope: NamespaceScope | None = None,
    sizing: SizingContext | None = None,
) -> Answer:
    """Decide on one AdmissionReview; never raises. ``scope`` excludes namespaces by name only (the
    apiserver applies its label part through the webhook configuration's namespaceSelector). A
    body of more than ``MAX_JSON_CONTAINERS`` brackets (strings' too) is not parsed."""
    if body.count(b"{") + body.count(b"[") > MAX_JSON_CONTAINERS:
        return undecided(body, TOO_MANY_OBJECTS)
    review = parse(body)
    return review if isinstance(review, Answer) else decide(review, Context(keyring, scope, sizing))


def handle_review_inline(
    body: bytes,
    keyring: resizer.KeyRing = resizer.EMPTY_KEYRING,
    scope: NamespaceScope | None = None,
    sizing: SizingContext | None = None,
) -> Answer | None:
    """:func:`handle_review` for the event loop; None, undecided, when the review is too costly there."""
    document = _load(body)
    if isinstance(document, Answer):
        return document
    if _costly(document):
        return None
    review = _review_of(document, len(body))
    return review if isinstance(review, Answer) else decide(review, Context(keyring, scope, sizing))


def parse(body: bytes) -> Review | Answer:
    """The review in ``body``, or the 400 answer when it is not a usable AdmissionReview."""
    document = _load(body)
    return document if isinstance(document, Answer) else _review_of(document, len(body))


def _load(body: bytes) -> dict[str, Any] | Answer:
    try:
        document = loads(body)
    except Exception as exc:  # orjson.JSONDecodeError, and anything odd about the input
        return refused(400, f"body is not valid JSON: {exc}")
    if not isinstance(document, dict):
        return refused(400, f"AdmissionReview must be a JSON object, got {type(document).__name__}")
    return document


def _review_of(document: dict[str, Any], body_size: int) -> Review | Answer:
    if document.get("apiVersion") != API_VERSION or document.get("kind") != KIND:
        return refused(
            400,
            f"expected apiVersion {API_VERSION!r} and kind {KIND!r}, "
            f"got {str(document.get('apiVersion'))[:100]!r} and {str(document.get('kind'))[:100]!r}",
        )
    request = document.get("request")
    if not isinstance(request, dict):
        return refused(400, "AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        return refused(400, "AdmissionReview request has no uid")
    obj = request.get("object")
    create = request.get("operation") == "CREATE"
    if create and not isinstance(obj, dict):
        return refused(400, "CREATE AdmissionReview request has no object", uid)
    namespace = _str(request.get("namespace"))
    if not create or not _is_pod(request) or not isinstance(obj, dict):
        return Review(uid, False, _str(request.get("name")), namespace, {}, None, None, body_size)
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):  # (the apiserver always sends it): nothing to patch
        return Review(uid, True, _str(request.get("name")), namespace, obj, None, None, body_size)
    annotations = metadata.get("annotations")
    name = _str(metadata.get("name")) or _str(metadata.get("generateName")) or _str(request.get("name"))
    namespace = namespace or _str(metadata.get("namespace"))
    return Review(
        uid, True, name, namespace, obj, metadata, annotations if isinstance(annotations, dict) else None, body_size
    )


def _is_pod(request: dict[str, Any]) -> bool:
    resource = request.get("resource")
    if isinstance(resource, dict):
        return resource.get("resource") == "pods" and not resource.get("group") and not request.get("subResource")
    kind = request.get("kind")
    return isinstance(kind, dict) and kind.get("kind") == "Pod" and not kind.get("group")


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _costly(document: dict[str, Any]) -> bool:
    """Whether the review is too costly for the event loop (counted on the document as sent)."""
    request = document.get("request")
    pod = request.get("object") if isinstance(request, dict) else None
    if not isinstance(pod, dict):
        return False
    metadata, spec = pod.get("metadata"), pod.get("spec")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if isinstance(annotations, dict) and len(annotations) > INLINE_MAX_ANNOTATIONS:
        return True
    containers = spec.get("containers") if isinstance(spec, dict) else None
    if not isinstance(containers, list) or len(containers) <= INLINE_MAX_CONTAINERS:
        return False
    key = _memo_key(spec)  # replicas of a workload stay cheap
    return key is None or _originals_cache.get(key) is None


def decide(review: Review, context: Context) -> Answer:
    """The answer to ``review``; never raises (our bug allows the pod unchanged: InternalError)."""
    try:
        return _decide(review, context)
    except Exception as exc:  # our bug: allow the pod unchanged, log and count it
        return Answer(
            200,
            review.uid,
            Decision.SKIPPED,
            Reason.INTERNAL_ERROR,
            pod=review.name,
            namespace=review.namespace,
            error=repr(exc),
            stack=traceback.format_exc(),
        )


def _decide(review: Review, context: Context) -> Answer:
    uid, name, namespace = review.uid, review.name, review.namespace
    if not review.pod_create:  # (nothing to strip: no annotations read)
        return _stripped(review, Reason.NOT_POD_CREATE)
    if review.metadata is None:
        return _stripped(review, Reason.NO_METADATA)
    obj, annotations, keyring = review.pod, review.annotations, context.keyring

    # (Decoded text is never longer than its JSON: a review under the limit cannot hold more.)
    if review.body_size > podstate.TOTAL_ANNOTATION_SIZE_LIMIT and annotations is not None and _oversized(annotations):
        # The apiserver rejects this pod anyway: answer at once, not with a patch as large as the input.
        return Answer(200, uid, Decision.SKIPPED, Reason.ANNOTATIONS_TOO_LARGE, None, (), name, namespace)
    # Our own sized answer, reinvoked: decided on the pod its author wrote, patched as sent.
    carries_owned = annotations is not None and any(map(podstate.is_controller_owned_key, annotations))
    authored = _as_authored(obj, carries_owned, namespace, keyring)
    scope = context.scope
    if scope is not None and namespace in scope.excluded:
        # Controller-owned keys still go: the scope may change later.
        return _stripped(review, Reason.NAMESPACE_EXCLUDED, "", authored)

    verdict = resizer.eligibility(obj)
    owner = f"{verdict.owner_kind}/{verdict.owner_name or ''}" if verdict.owner_kind else ""
    if not verdict.eligible:
        # Controller-owned keys go on every CREATE: an ineligible pod may become eligible later.
        return _stripped(review, _REASON_OF[verdict.reason], owner, authored)

    spec = obj.get("spec")
    containers = spec.get("containers") if isinstance(spec, dict) else None
    if isinstance(containers, list) and len(containers) > MAX_STAMPED_CONTAINERS:
        return _stripped(review, Reason.TOO_MANY_CONTAINERS, owner, authored)

    subject = obj if authored is None else authored
    try:
        originals, memo_key = _originals_and_key(subject)
    except resizer.KeyCollisionError as error:  # never one baseline for two containers
        return _stripped(review, Reason.COLLIDING_CONTAINER_KEYS, owner, authored, str(error))
    # The baseline authority's rule: the spec authored is the baseline, whatever the pod carries.
    stamp = resizer.admission_stamp(subject, namespace, keyring, originals)
    if memo_key is not None and podstate.carries_mac(stamp):
        identity = resizer.PodIdentity.of(subject, namespace, "admission")
        memo_key = b"\0".join((memo_key, dumps(identity.__dict__), keyring.fingerprint.encode()))
    existing = annotations if annotations is not None else {}
    source = "" if authored is None else AUTHORED_FROM_RECORD
    warnings: tuple[str, ...] = ()
    note: SizingNote | None = None

    def stamped(decision: Decision, reason: Reason, patch: str | None) -> Answer:
        return Answer(200, uid, decision, reason, patch, warnings, name, namespace, owner, originals, source, note)

    sizing = context.sizing
    if sizing is not None and stamp:
        outcome = _sized_at_admission(subject, namespace, keyring, originals, sizing)
        if isinstance(outcome, Sized):
            result = Sizing.WOULD_RESIZE if sizing.dry_run else Sizing.SIZED
            note = SizingNote(result, outcome.summary, outcome.node_type)
            if sizing.dry_run:
                warnings = (
                    f"workload-resizer (dry run): {Reason.WOULD_RESIZE} at admission for node type "
                    f"{outcome.node_type}: {outcome.summary}",
                )
            elif podstate.fits_annotation_limit(existing, outcome.stamp):
                ops = list(outcome.ops) if authored is None else resizer.values_patch(obj, outcome.values)
                ops = build_patch(annotations, outcome.stamp) + ops
                if not ops:
                    return stamped(Decision.SKIPPED, Reason.ALREADY_SIZED, None)
                return stamped(Decision.PATCHED, Reason.SIZED_AT_ADMISSION, _encode(ops))
        elif isinstance(outcome, SizingNote):
            note = outcome
    fresh = fresh_patch(stamp, annotations is None, memo_key) if stamp and not carries_owned else None
    if stamp and not _fits(review.body_size, existing, stamp, fresh):
        # Stamping would push the pod over the annotation size limit and block its creation:
        # admitted unstamped (the reconciler will not resize a pod without originals).
        return _stripped(review, Reason.ANNOTATIONS_TOO_LARGE, owner, authored, sizing=note)
    if fresh is not None:
        return stamped(Decision.PATCHED, Reason.ELIGIBLE, fresh)
    ops = build_patch(annotations, stamp) + _restoring(obj, authored)
    if not ops:
        return stamped(Decision.SKIPPED, Reason.ALREADY_STAMPED if stamp else Reason.NOTHING_TO_STAMP, None)
    return stamped(Decision.PATCHED, Reason.ELIGIBLE, _encode(ops))


# The annotations' bytes as the size limit counts them (a non-string value by its str()) are at
# most 4.5 times their JSON text (1e15 is 1000000000000000.0), the stamp's at most its patch's:
# within the limit together, they need no exact count.
_TEXT_GROWTH = 5


def _fits(body_size: int, annotations: dict[str, Any], stamp: dict[str, str], patch: str | None) -> bool:
    if patch is not None and _TEXT_GROWTH * body_size + len(patch) <= podstate.TOTAL_ANNOTATION_SIZE_LIMIT:
        return True
    return podstate.fits_annotation_limit(annotations, stamp)


def _stripped(
    review: Review,
    reason: Reason,
    owner: str = "",
    authored: dict[str, Any] | None = None,
    error: str = "",
    sizing: SizingNote | None = None,
) -> Answer:
    """Allowed unstamped, the client's controller-owned keys removed, the authored values put back."""
    annotations = review.annotations
    stripped = build_patch(annotations, {}) if annotations is not None else []
    ops = stripped + _restoring(review.pod, authored)
    return Answer(
        200,
        review.uid,
        Decision.SKIPPED,
        reason,
        _encode(ops) if ops else None,
        (),
        review.name,
        review.namespace,
        owner,
        error=error,
        stripped=len(stripped),
        authored_from="" if authored is None else AUTHORED_FROM_RECORD,
        sizing=sizing,
    )


# -- sizing at admission -------------------------------------------------------------------


class Sized(NamedTuple):
    """The pod's size for its pinned node type: the ops setting it, the annotations to stamp with
    them (originals, record, sized-scope MAC), and the sized spec's values."""

    ops: tuple[dict[str, Any], ...]
    stamp: dict[str, str]
    node_type: str
    summary: str
    values: dict[str, str]


# A SizingNote when held or when sizing raised (stamped only); NOT_SIZED: no node type pinned, or nothing to change.
SizingOutcome = Sized | SizingNote | tuple[()]
NOT_SIZED: tuple[()] = ()


def _sized_at_admission(
    pod: dict[str, Any], namespace: str, keyring: resizer.KeyRing, originals: dict[str, str], sizing: SizingContext
) -> SizingOutcome:
    """:func:`_size`, memoised; never raises: sizing is best effort."""
    if not keyring:
        return NOT_SIZED  # nothing could vouch for originals that differ from the spec
    key = _sized_key(pod, namespace, keyring, sizing)
    hit: SizingOutcome | None = _sized_cache.get(key) if key is not None else None
    if hit is None:
        try:
            hit = _size(pod, namespace, keyring, originals, sizing)
        except Exception as exc:  # our bug or an odd spec: the pod is stamped only
            return SizingNote(Sizing.ERROR, repr(exc))
        if key is not None:
            _sized_cache.put(key, hit, len(key) + len(dumps(tuple(hit))))
    return hit


# Replicas of one workload get the same sized patch: memoised on the whole pod as sent (any rule
# may read any field), the namespace, the signing key and the sizing context's version.
_sized_cache = ByteBoundedCache(2 * 1024 * 1024)
_SIZED_KEY_MAX = 16 * 1024


def _sized_key(pod: dict[str, Any], namespace: str, keyring: resizer.KeyRing, sizing: SizingContext) -> bytes | None:
    try:
        key = dumps((namespace, sizing.version, keyring.fingerprint, pod))
    except Exception:  # odd shapes (e.g. integers beyond 64 bits): not memoised
        return None
    return key if len(key) <= _SIZED_KEY_MAX else None


def _size(
    pod: dict[str, Any], namespace: str, keyring: resizer.KeyRing, originals: dict[str, str], sizing: SizingContext
) -> SizingOutcome:
    node_type = resizer.pinned_node_type(pod, sizing.nodes, sizing.config, sizing.label)
    if node_type is None:
        return NOT_SIZED
    decided = resizer.admission_sizing(pod, sizing.config, node_type)
    if decided is None:
        return NOT_SIZED
    held = admission_vpa_hold(pod, namespace, sizing.vpas) or resizer.admission_hold(
        pod, decided, sizing.limit_ranges.get(namespace, ())
    )
    if held is not None:
        return SizingNote(Sizing.HELD, held)
    stamp = resizer.sized_stamp(pod, namespace, keyring, originals, node_type, decided.sized)
    if not stamp:
        return NOT_SIZED
    return Sized(tuple(decided.ops), stamp, node_type, decided.plan.summary(), dict(decided.sized))


def _memo_key(spec: Any) -> bytes | None:
    """What a spec's originals depend on: the names and resources of its containers, sidecars
    (restartable init containers) and pod level. None: an odd shape, or too large to memoise."""
    try:
        key = [(c["name"], c.get("resources")) for c in spec["containers"]]
        sidecars = [(c["name"], c.get("resources")) for c in spec.get("initContainers") or () if podstate.is_sidecar(c)]
        memo_key = dumps([key, sidecars, spec.get("resources") or None])
    except Exception:
        return None
    return memo_key if len(memo_key) <= _ORIGINALS_KEY_MAX else None


def _oversized(annotations: dict[str, Any]) -> bool:
    limit = podstate.TOTAL_ANNOTATION_SIZE_LIMIT
    if len(annotations) > limit // 2:  # each entry takes >= 2 bytes
        return True
    size = sum(map(len, annotations))  # JSON object keys are always strings
    return size > limit or size + sum(len(v) for v in annotations.values() if isinstance(v, str)) > limit


# -- the webhook called again on its own answer -------------------------------------------
AUTHORED_FROM_RECORD = "sized-at-admission"  # the ``authoredFrom`` log field: the pod as authored came from it


def _as_authored(
    obj: dict[str, Any], carries_owned: bool, namespace: str, keyring: resizer.KeyRing
) -> dict[str, Any] | None:
    """The pod as its author wrote it when ``obj`` carries our own verified sized record, else None
    (``reinvocationPolicy: IfNeeded``: the apiserver calls us again after a later webhook's change)."""
    if not carries_owned or not keyring or podstate.read_state(obj).sized_at_admission is None:
        return None
    originals = resizer.admitted_originals(obj, namespace, keyring, originals_of(obj))
    return None if originals is None else resizer.as_authored(obj, originals)


def _restoring(obj: dict[str, Any], authored: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The ops putting the authored values back into the pod as sent."""
    if authored is None:
        return []
    return resizer.values_patch(obj, resizer.originals_from_spec_annotations(authored))
