"""Costly reviews decided in worker processes, off the event loop.

Deciding a review holds the webhook's one event loop (threads would not help: orjson and the
review code hold the GIL), so reviews too costly for it (``app.review.INLINE_MAX_*``) go to
``python -m app.worker`` processes, at SCHED_IDLE, dying with their parent. A worker that dies,
errs or overruns the time box is replaced and its review answered "allowed, no patch".
Frames carry pickles written only by the parent; the review body travels as raw bytes and
is parsed by orjson only, so pickle never sees untrusted input.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import ctypes
import ctypes.util
import gc
import logging
import os
import pickle
import signal
import struct
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, BinaryIO, Callable

from app.errors import WebhookError
from ops.malloc import bound_heap_retention

if TYPE_CHECKING:
    from app.review import Answer

log = logging.getLogger("workload_resizer.webhook")

# Request frame: (meta length, body length) + pickle of (keys, scope, sizing version, sizing
# context: sent only when its version is new to the worker, which keeps the last; else None) +
# the raw body. Reply frame: length + pickle of the Answer, or of a str (the error deciding raised).
REQUEST_HEADER = struct.Struct(">II")
REPLY_HEADER = struct.Struct(">I")
READY = b"R"
DEFAULT_WORKER_TIMEOUT = 2.0
WORKER_NICENESS = 19
_PR_SET_PDEATHSIG = 1
_PARENT_ENV = "WR_WORKER_PARENT_PID"

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])


class WorkerFailure(WebhookError):
    """The worker could not decide: ``reason`` is ``crash``, ``timeout`` or ``error``."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"review worker {reason}: {detail}")
        self.reason = reason


class WorkersBusy(WebhookError):
    """No worker became free within the time box (or the workers are stopped)."""


# ---------------------------------------------------------------- parent side


# Workers are spawned from this thread, not the event loop's: uvloop forks on the loop's thread,
# copying the whole heap's page tables while no review is answered (a stall an attacker could
# trigger by timeouts); subprocess.Popen uses vfork. Long-lived: PR_SET_PDEATHSIG follows it.
_SPAWNER = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="review-worker-spawner")


@dataclass(eq=False)
class ReviewWorker:
    """A worker process spawned by ``_SPAWNER``, its pipes as asyncio streams; one review at a time."""

    _popen: subprocess.Popen[bytes]
    stdin: asyncio.StreamWriter
    stdout: asyncio.StreamReader
    _stdout_transport: asyncio.BaseTransport
    sizing_version: int | None = None  # of the sizing context this worker holds

    @classmethod
    async def spawn(cls, argv: list[str], env: dict[str, str]) -> ReviewWorker:
        loop = asyncio.get_running_loop()
        popen = await loop.run_in_executor(_SPAWNER, _popen, argv, env)
        assert popen.stdin is not None and popen.stdout is not None
        read_end, write_end = _PipeEnd(loop, popen.stdout), _PipeEnd(loop, popen.stdin)
        popen.stdout = popen.stdin = None
        try:
            stdout = asyncio.StreamReader(limit=2**20)
            stdout_transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdout), read_end)
            transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, write_end)
            stdin = asyncio.StreamWriter(transport, protocol, None, loop)
        except BaseException:
            popen.kill()
            await loop.run_in_executor(_SPAWNER, popen.wait)
            raise
        return cls(popen, stdin, stdout, stdout_transport)

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()  # reaps it once it has exited

    def kill(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._popen.kill()

    async def stop(self) -> None:
        self.kill()
        await self.wait()

    async def decide(self, parts: list[bytes], meta: bytes) -> Answer:
        """Decide on the review whose body is the concatenation of ``parts``."""
        self.stdin.write(REQUEST_HEADER.pack(len(meta), sum(map(len, parts))))
        self.stdin.write(meta)
        self.stdin.writelines(parts)
        await self.stdin.drain()
        (length,) = REPLY_HEADER.unpack(await self.stdout.readexactly(REPLY_HEADER.size))
        answer: Answer | str = pickle.loads(await self.stdout.readexactly(length))
        if isinstance(answer, str):
            raise WorkerFailure("error", answer)
        return answer

    async def wait(self) -> int:
        """Its exit code, once it has exited (reaped through a pidfd, not a thread per wait)."""
        try:
            return await self._exited()
        finally:
            self.stdin.close()
            self._stdout_transport.close()

    async def _exited(self) -> int:
        if (code := self._popen.poll()) is not None:
            return code
        loop = asyncio.get_running_loop()
        try:
            pidfd = os.pidfd_open(self._popen.pid)
        except (AttributeError, OSError):  # no pidfd (old kernel) or already gone
            return await loop.run_in_executor(None, self._popen.wait)
        exited = asyncio.Event()  # (set idempotently: the reader fires until it is removed)
        try:
            loop.add_reader(pidfd, exited.set)
            await exited.wait()
        finally:
            loop.remove_reader(pidfd)  # (False, not an error, if add_reader failed)
            os.close(pidfd)
        return self._popen.wait()


class _PipeEnd:
    """One end of a worker's pipe for ``connect_*_pipe`` (a duplicate of ``file``'s descriptor;
    ``file`` is closed), closed exactly once whichever loop takes it: uvloop closes the descriptor
    itself, then calls ``close()`` too (asyncio only calls ``close()``), and a second ``close(2)``
    can hit a descriptor the spawner thread was given meanwhile (a new worker's pipe)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, file: IO[bytes]) -> None:
        self._fd = os.dup(file.fileno())
        file.close()
        self._closes = not type(loop).__module__.startswith("uvloop")

    def fileno(self) -> int:
        return self._fd

    def close(self) -> None:
        fd, self._fd = self._fd, -1
        if self._closes and fd >= 0:
            os.close(fd)


def _popen(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)


async def start_worker(command: list[str] | None = None, start_timeout: float = 60.0) -> ReviewWorker:
    """Spawn a worker and wait for its ready byte (it has imported the review code)."""
    env = {**os.environ, _PARENT_ENV: str(os.getpid())}
    # The worker must import this package however the webhook was started (installed, or a checkout).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    worker = await ReviewWorker.spawn(command or [sys.executable, "-m", "app.worker"], env)
    try:
        async with asyncio.timeout(start_timeout):
            ready = await worker.stdout.readexactly(len(READY))
        if ready != READY:
            raise RuntimeError(f"review worker sent {ready!r} instead of its ready byte")
    except BaseException:
        await worker.stop()
        raise
    return worker


class ReviewWorkers:
    """A fixed number of review workers; a faulty one is killed and replaced (``restarts(reason)``)."""

    def __init__(
        self,
        count: int = 1,
        timeout: float = DEFAULT_WORKER_TIMEOUT,
        command: list[str] | None = None,
        restarts: Callable[[str], None] = lambda reason: None,
    ) -> None:
        if count < 1:
            raise ValueError("at least one review worker")
        self.count = count
        self.timeout = timeout
        self.command = command
        self._on_restart = restarts
        self._idle: asyncio.Queue[ReviewWorker] = asyncio.Queue()
        self._all: set[ReviewWorker] = set()
        self._replacing: set[asyncio.Task[None]] = set()
        self._stopped = False
        self._meta_cache: dict[bool, tuple[Any, Any, Any, bytes]] = {}

    @property
    def pids(self) -> list[int]:
        return sorted(w.pid for w in self._all)

    @property
    def free(self) -> int:
        """Workers waiting for a review."""
        return self._idle.qsize()

    async def start(self) -> None:
        started = await asyncio.gather(*(start_worker(self.command) for _ in range(self.count)), return_exceptions=True)
        workers = [w for w in started if isinstance(w, ReviewWorker)]
        failed = [e for e in started if not isinstance(e, ReviewWorker)]
        if failed:
            for worker in workers:
                await worker.stop()
            raise RuntimeError(f"review worker did not start: {failed[0]!r}") from failed[0]
        for worker in workers:
            self._all.add(worker)
            self._idle.put_nowait(worker)
        log.info("review workers started", extra={"workers": self.count, "pids": self.pids, "timeout_s": self.timeout})

    def _meta(self, keys: Any, scope: Any, sizing: Any, worker: ReviewWorker) -> bytes:
        version = getattr(sizing, "version", None)
        full = sizing is not None and worker.sizing_version != version
        worker.sizing_version = version
        cached = self._meta_cache.get(full)
        if cached is not None and cached[0] is keys and cached[1] is scope and cached[2] is sizing:
            return cached[3]
        meta = pickle.dumps((dict(keys), scope, version, sizing if full else None), protocol=pickle.HIGHEST_PROTOCOL)
        self._meta_cache[full] = (keys, scope, sizing, meta)
        return meta

    async def decide(
        self, body: bytes | list[bytes], keys: Any, scope: Any, deadline: float, sizing: Any = None
    ) -> Answer:
        """Decide on ``body`` (or its parts) in a worker by ``deadline`` (``time.monotonic()``). Raises
        :class:`WorkersBusy` when no worker is free in time or the decision still runs at the deadline
        (it goes on, killed only past ``timeout``), :class:`WorkerFailure` on a worker fault."""
        if self._stopped:
            raise WorkersBusy("review workers stopped")
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                worker = await self._idle.get()
        except TimeoutError:
            raise WorkersBusy(f"no review worker free within {self.timeout:g}s") from None
        parts = [body] if isinstance(body, bytes) else body
        task = asyncio.get_running_loop().create_task(self._run(worker, parts, self._meta(keys, scope, sizing, worker)))
        task.add_done_callback(_consume)
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                return await asyncio.shield(task)
        except TimeoutError:
            raise WorkersBusy(f"no decision within {self.timeout:g}s") from None

    async def _run(self, worker: ReviewWorker, parts: list[bytes], meta: bytes) -> Answer:
        try:
            async with asyncio.timeout(self.timeout):
                result = await worker.decide(parts, meta)
        except TimeoutError:
            failure = WorkerFailure("timeout", f"no answer within {self.timeout:g}s")
        except WorkerFailure as reported:
            failure = reported
        except (asyncio.IncompleteReadError, ConnectionError) as err:
            failure = WorkerFailure("crash", f"worker pid {worker.pid} gone ({err!r}, exit code {worker.returncode})")
        except asyncio.CancelledError:  # only at loop teardown: the pipe is mid-frame
            self._replace(worker, "cancelled")
            raise
        except Exception as err:  # e.g. an unpicklable reply: our bug
            failure = WorkerFailure("error", repr(err))
        else:
            self._idle.put_nowait(worker)
            return result
        self._replace(worker, failure.reason)
        raise failure

    def _replace(self, worker: ReviewWorker, reason: str) -> None:
        worker.kill()
        self._all.discard(worker)
        log.error("review worker replaced", extra={"reason": reason, "pid": worker.pid})
        self._on_restart(reason)
        if not self._stopped:
            task = asyncio.get_running_loop().create_task(self._start_replacement(worker))
            self._replacing.add(task)
            task.add_done_callback(self._replacing.discard)

    async def _start_replacement(self, old: ReviewWorker) -> None:
        await old.wait()  # reap it
        delay = 0.1
        while not self._stopped:
            try:
                worker = await start_worker(self.command)
            except Exception as err:
                log.error("review worker failed to start; retrying", extra={"error": repr(err)})
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            if self._stopped:
                await worker.stop()
            else:
                self._all.add(worker)
                self._idle.put_nowait(worker)
            return

    async def stop(self, grace: float = 5.0) -> None:
        """Close every worker's stdin (it exits after its current review), reap; kill any left after ``grace``."""
        self._stopped = True
        for task in list(self._replacing):
            task.cancel()
        workers = list(self._all)
        for worker in workers:
            worker.stdin.close()
        waits = [asyncio.ensure_future(w.wait()) for w in workers]
        if waits:
            _, pending = await asyncio.wait(waits, timeout=grace)
            for worker in workers:
                worker.kill()
            if pending:
                await asyncio.wait(pending, timeout=grace)
        self._all.clear()
        log.info("review workers stopped")

    def kill_all(self) -> None:
        """Last resort (the loop is gone): SIGKILL every worker still running."""
        self._stopped = True
        for worker in self._all:
            worker.kill()


def _consume(task: asyncio.Task[Answer]) -> None:
    """Retrieve the outcome of a decision nobody waits for any more (past its deadline)."""
    if not task.cancelled():
        task.exception()


# ---------------------------------------------------------------- worker side


def _die_with_parent() -> None:
    """SIGKILL this process when its parent exits, however it exits (Linux only)."""
    # Without prctl (no libc to load): the parent's exit still closes our stdin, which ends serve().
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    parent = os.environ.get(_PARENT_ENV)
    if parent and os.getppid() != int(parent):  # the parent died before prctl took effect
        os._exit(0)


def _yield_cpu_to_the_event_loop() -> None:
    """Run only when the webhook's event loop does not: SCHED_IDLE (a waking normal task
    preempts it at once; allowed unprivileged), else the lowest niceness we may take."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        with contextlib.suppress(OSError):
            os.nice(WORKER_NICENESS)


def _read_exactly(stream: BinaryIO, n: int) -> bytes | None:
    data = stream.read(n)
    return data if len(data) == n else None


def serve(decide: Callable[..., Answer] | None = None) -> int:
    """The worker's main loop: frames from stdin, answers on stdout, until EOF."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent drains; it closes our stdin
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    bound_heap_retention(arena_max=1)
    import resizer
    from app.review import handle_review

    decision: Callable[..., Answer] = decide or handle_review
    sizing: Any = None  # the last sizing context received
    keyring = resizer.EMPTY_KEYRING  # kept while the keys sent are the same (its fingerprint once per ring)

    # Replies go to a private copy of stdout; fd 1 goes to stderr: no stray print corrupts a frame.
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    requests = sys.stdin.buffer
    gc.collect()
    gc.freeze()
    # Only now: at SCHED_IDLE the imports above took 35 s, not 1 s, on a busy node; the webhook waits for them.
    _yield_cpu_to_the_event_loop()
    replies.write(READY)
    replies.flush()
    while True:
        header = _read_exactly(requests, REQUEST_HEADER.size)
        if header is None:
            return 0
        meta_len, body_len = REQUEST_HEADER.unpack(header)
        meta = _read_exactly(requests, meta_len)
        body = _read_exactly(requests, body_len)
        if meta is None or body is None:
            return 0
        try:
            keys, scope, version, sent = pickle.loads(meta)
            if sent is not None:
                sizing = sent
            context = sizing if version is not None and getattr(sizing, "version", None) == version else None
            if keys != keyring.keys:
                keyring = resizer.KeyRing(keys)
            args = (body, keyring, scope) + ((context,) if context is not None else ())
            reply = pickle.dumps(decision(*args), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as err:
            reply = pickle.dumps(f"{err!r}\n{traceback.format_exc()}", protocol=pickle.HIGHEST_PROTOCOL)
        del body, meta
        replies.write(REPLY_HEADER.pack(len(reply)))
        replies.write(reply)
        replies.flush()


if __name__ == "__main__":
    sys.exit(serve())
