"""The webhook's ASGI application.

``POST /mutate``, the only hot path (the apiserver calls it synchronously for every pod CREATE),
is served by :class:`MutateApp`, a raw ASGI app, because a FastAPI route costs several times the
decision itself; ``/healthz``, ``/readyz``, ``/metrics`` and lifespan go to FastAPI behind it.
Only cheap reviews are decided on the event loop (``app.review.INLINE_MAX_*``); the others go to
a review worker (``app.worker``), or without workers to the large lane (one at a time, after
the waiting ones).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.connections import GuardedConnection, current_connection
from app.metrics import Metrics
from app.review import (
    INLINE_MAX_BYTES,
    INLINE_MAX_VALUES,
    Answer,
    Decision,
    Reason,
    Sizing,
    encode,
    handle_review,
    handle_review_inline,
    refused,
    too_large,
    undecided,
)
from app.sizing import ClusterView, SizingContext
from app.worker import ReviewWorkers, WorkerFailure, WorkersBusy
from ops.jsonlog import log_fields
from ops.probes import Check, probe_routes
from resizer import EMPTY_KEYRING, KeyRing
from resizer.scope import NamespaceScope

decision_log = logging.getLogger("workload_resizer.webhook")

MUTATE_PATH = "/mutate"
DEFAULT_MAX_REQUEST_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_INFLIGHT = 32
# Request bodies held in memory at once, all together: beyond it, the overload answer, not more buffering.
DEFAULT_MAX_BUFFERED_BYTES = 16 * 1024 * 1024
# How long a large body's sender may keep the read lane waiting for its next chunk before the next one's turn.
READ_TURN_SECONDS = 0.05

_JSON_HEADER = (b"content-type", b"application/json")
_CLOSE_HEADER = (b"connection", b"close")
_perf = time.perf_counter


class MutateApp:
    """Raw ASGI app: ``POST /mutate`` here, anything else to ``fallback``."""

    def __init__(
        self,
        fallback: ASGIApp,
        metrics: Metrics,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        scope: NamespaceScope | None = None,
    ) -> None:
        self.fallback = fallback
        self.scope = scope
        self.metrics = metrics
        self.max_request_bytes = max_request_bytes
        # Overload: more costly reviews waiting than this, or a large body beyond max_buffered_bytes,
        # get "allowed, no patch". Bodies still arriving do not count (app.connections bounds those).
        self.max_inflight = max_inflight
        self.max_buffered_bytes = max(DEFAULT_MAX_BUFFERED_BYTES, max_request_bytes)
        self.draining = False  # SIGTERM received: readiness fails, connections are closed after each answer
        self._inflight = 0
        self._buffered = 0
        self.keyring: KeyRing = EMPTY_KEYRING  # signs the originals; replaced when the keys rotate
        self._by_result = metrics.by_result
        self._observe = metrics.duration.observe
        self._large_lane = asyncio.Lock()
        self._read_lane = asyncio.Lock()
        # Set by the lifespan when --large-review-workers > 0; None: large reviews are decided here.
        self.review_workers: ReviewWorkers | None = None
        # Nodes and config for sizing at admission (--size-at-admission); None: stamp only.
        self.cluster: ClusterView | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # The connection's read deadline (app.connections) runs until the request is read.
        connection = current_connection()
        if scope["type"] == "http" and scope["path"] == MUTATE_PATH:
            try:
                await self._mutate(scope, receive, send, connection)
            except Exception:  # a bug here must not turn into uvicorn's 500
                self._by_result["error"].inc()
                decision_log.exception("webhook request failed")
                # No response sent yet: a 400, which failurePolicy Ignore admits; else the connection is lost.
                with contextlib.suppress(Exception):
                    await self._respond(send, 400, b'{"error":"internal error","code":400}', close=True)
            finally:
                if connection is not None:
                    connection.responded()
        elif connection is not None:  # probes and metrics: bodiless GETs
            connection.request_read()
            try:
                await self.fallback(scope, receive, send)
            finally:
                connection.responded()
        else:
            await self.fallback(scope, receive, send)

    async def _overloaded(
        self, send: Send, start: float, head: bytes, why: str, reason: Reason = Reason.OVERLOADED
    ) -> None:
        """Answer without deciding (:func:`app.review.undecided`); the connection closes, its body unread."""
        await self._answer(send, start, undecided(head, why, reason), close=True)

    async def _answer(self, send: Send, start: float, answer: Answer, close: bool = False) -> None:
        await self._respond(send, answer.status, encode(answer), close=close)
        self._account(start, answer)

    async def _mutate(
        self, scope: Scope, receive: Receive, send: Send, connection: GuardedConnection | None = None
    ) -> None:
        start = _perf()
        if scope["method"] != "POST":
            if connection is not None:
                connection.request_read()
            await self._respond(send, 405, b'{"error":"use POST","code":405}', extra=((b"allow", b"POST"),))
            self._account(start, _METHOD_NOT_ALLOWED)
            return

        limit = self.max_request_bytes
        declared = next((value for name, value in scope["headers"] if name == b"content-length"), b"-1")
        try:
            too_long = int(declared) > limit
        except ValueError:
            await self._answer(send, start, _INVALID_CONTENT_LENGTH, close=True)
            return
        if too_long:
            await self._answer(send, start, too_large(limit), close=True)
            return

        message = await receive()
        if message["type"] != "http.request":  # client went away
            return
        body = message.get("body", b"")
        parts = [body]
        size = len(body)
        if message.get("more_body", False):
            try:
                self._buffered += size
                while True:
                    message = await (receive() if size <= INLINE_MAX_BYTES else self._receive_in_turn(receive))
                    if message["type"] != "http.request":  # client went away
                        return
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        await self._answer(send, start, too_large(limit), close=True)
                        return
                    # Small bodies are bounded by --max-connections: they never wait for room.
                    if size > INLINE_MAX_BYTES and self._buffered + len(chunk) > self.max_buffered_bytes:
                        await self._overloaded(
                            send, start, parts[0], f"more than {self.max_buffered_bytes} body bytes buffered"
                        )
                        return
                    self._buffered += len(chunk)
                    parts.append(chunk)
                    if not message.get("more_body", False):
                        break
            finally:
                self._buffered -= sum(map(len, parts))
        elif size > limit:
            await self._answer(send, start, too_large(limit), close=True)
            return
        del body
        if connection is not None:
            connection.request_read()

        answer = None
        if size <= INLINE_MAX_BYTES:
            small = parts[0] if len(parts) == 1 else b"".join(parts)
            # Values beyond the first of each object or array follow a comma; nesting without
            # commas is cut short by orjson's depth limit (1,024), so commas bound the parse.
            if small.count(b",") <= INLINE_MAX_VALUES:
                answer = handle_review_inline(small, self.keyring, self.scope, self._sizing())
            del small
        if answer is None:
            if self._inflight >= self.max_inflight:
                await self._overloaded(
                    send, start, parts[0], f"{self.max_inflight} reviews already waiting for a review worker"
                )
                return
            self._inflight += 1
            try:
                answer = await self._decide_costly(parts, start)
            except WorkersBusy as busy:
                await self._overloaded(send, start, parts[0], str(busy))
                return
            except WorkerFailure as failure:
                await self._overloaded(send, start, parts[0], str(failure), Reason.INTERNAL_ERROR)
                return
            finally:
                self._inflight -= 1
        del parts
        await self._answer(send, start, answer, close=self.draining)

    async def _receive_in_turn(self, receive: Receive) -> Message:
        """The next body chunk of a large review, read in turn with the other large ones: reading one
        (TLS decryption of up to 256 KiB) holds the event loop a few tenths of a millisecond, so one
        large body is read at a time (uvicorn's flow control pauses the others at 64 KiB ahead of
        ``receive``) and a small review waits for one chunk at most. A sender slower than
        ``READ_TURN_SECONDS`` gives its turn away."""
        while True:
            async with self._read_lane:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(READ_TURN_SECONDS):
                        return await receive()

    async def _decide_costly(self, parts: list[bytes], start: float) -> Answer:
        """Decide a review too costly for the event loop (raises as :meth:`ReviewWorkers.decide`)."""
        workers = self.review_workers
        if workers is not None:
            # Off the loop (small reviews and probes go on), the parts piped as they are: joining 4 MiB holds it.
            deadline = time.monotonic() + workers.timeout - (_perf() - start)
            return await workers.decide(parts, self.keyring.keys, self.scope, deadline, self._sizing())
        # Deciding holds the loop: one costly review at a time, after those waiting, so a flood cannot
        # stack up in front of small ones.
        async with self._large_lane:
            await asyncio.sleep(0)
            return handle_review(b"".join(parts), self.keyring, self.scope, self._sizing())

    def _sizing(self) -> SizingContext | None:
        cluster = self.cluster
        return cluster.context if cluster is not None else None

    async def _respond(
        self, send: Send, status: int, payload: bytes, close: bool = False, extra: tuple[tuple[bytes, bytes], ...] = ()
    ) -> None:
        headers = [_JSON_HEADER, (b"content-length", _content_length(len(payload))), *extra]
        if close:
            headers.append(_CLOSE_HEADER)
        connection = current_connection()
        if connection is not None:
            connection.cork()  # head and body in one write
        try:
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": payload})
        finally:
            if connection is not None:
                connection.uncork()

    def _account(self, start: float, answer: Answer) -> None:
        elapsed = _perf() - start
        self._observe(elapsed)
        fields = _log_fields(answer, round(elapsed * 1000.0, 3))
        reason = answer.reason
        if reason is Reason.OVERLOADED:
            self._by_result["overloaded"].inc()
            log_fields(decision_log, logging.WARNING, "admission review answered without a decision", fields)
        elif reason is Reason.INTERNAL_ERROR:
            self._by_result["error"].inc()
            log_fields(decision_log, logging.ERROR, "admission decision", fields)
        elif answer.status != 200:
            self._by_result["rejected"].inc()
            log_fields(decision_log, logging.WARNING, "admission review rejected", fields)
        else:
            self._by_result[answer.decision].inc()
            sizing = answer.sizing
            # (a pod sized at admission counts once it is given its size, not when the size fails to fit)
            if sizing is not None and (sizing.result is not Sizing.SIZED or reason is Reason.SIZED_AT_ADMISSION):
                self.metrics.sized[sizing.result].inc()
            log_fields(decision_log, logging.INFO, "admission decision", fields)


@functools.lru_cache(maxsize=4096)  # most responses share a few sizes
def _content_length(n: int) -> bytes:
    return str(n).encode()


_METHOD_NOT_ALLOWED = Answer(405, "", Decision.REJECTED, Reason.METHOD_NOT_ALLOWED, reviewed=False)
_INVALID_CONTENT_LENGTH = refused(400, "invalid content-length")


def _log_fields(answer: Answer, duration_ms: float) -> dict[str, Any]:
    """The fields of the decision's log line: a reviewed pod's always, then those that apply."""
    if answer.reviewed:
        fields: dict[str, Any] = {
            "uid": answer.uid,
            "pod": answer.pod,
            "namespace": answer.namespace,
            "owner": answer.owner,
            "decision": answer.decision,
            "reason": answer.reason,
            "originals": answer.originals,
        }
        if answer.authored_from:
            fields["authoredFrom"] = answer.authored_from
        if answer.stripped:
            fields["stripped"] = answer.stripped
        sizing = answer.sizing
        if sizing is not None:
            if sizing.result is Sizing.HELD:
                fields["sizingHeld"] = sizing.text
            elif sizing.result is Sizing.ERROR:
                fields["sizingError"] = sizing.text
            else:
                fields["sizedFor"] = sizing.node_type
                fields["wouldResize" if sizing.result is Sizing.WOULD_RESIZE else "sized"] = sizing.text
    else:
        fields = {"decision": answer.decision, "reason": answer.reason}
        if answer.uid:
            fields["uid"] = answer.uid
    if answer.error:
        fields["error"] = answer.error
    if answer.stack:
        fields["stack"] = answer.stack
    fields["duration_ms"] = duration_ms
    return fields


def create_app(
    metrics: Metrics | None = None,
    is_ready: Callable[[], bool] = lambda: True,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    lifespan: Any = None,
    max_inflight: int = DEFAULT_MAX_INFLIGHT,
    scope: NamespaceScope | None = None,
    sizing_ready: Check | None = None,
) -> MutateApp:
    """The full ASGI app: raw ``/mutate`` in front of the FastAPI ops endpoints. ``/readyz`` fails
    once the app is draining (SIGTERM), before anything stops serving, and while ``sizing_ready`` does."""
    metrics = metrics if metrics is not None else Metrics()

    def certificate() -> tuple[bool, str]:
        return (True, "serving certificate loaded") if is_ready() else (False, "no serving certificate loaded")

    def shutdown() -> tuple[bool, str]:
        return (False, "shutting down") if app.draining else (True, "serving")

    api = FastAPI(
        title="workload-resizer webhook",
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        lifespan=lifespan,
        routes=probe_routes(
            {"certificate": certificate, "shutdown": shutdown, **({"sizing": sizing_ready} if sizing_ready else {})},
            metrics.registry,
        ),
    )
    app = MutateApp(api, metrics, max_request_bytes, max_inflight, scope=scope)
    return app
