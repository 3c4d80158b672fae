"""One-line-per-record logging shared by the webhook and the reconciler.

:func:`configure_logging` installs one root handler writing a JSON object (:class:`JSONFormatter`)
or a ``key=value`` text line per record. Hot paths (the webhook logs one line per admission
decision) use :func:`log_fields` and ``flush_interval`` (:class:`BatchingStreamHandler`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sys
import threading
import time
from typing import IO, Any, Iterable, Mapping

import orjson
from pythonjsonlogger.orjson import OrjsonFormatter

from ops.timestamps import rfc3339_millis

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}

# The fields a log_fields record was given (keys as set on the record), kept on the record.
_FIELDS = "_log_fields"
# Attributes every LogRecord has; anything else on a record came from ``extra=``.
# ``color_message`` is uvicorn's ANSI-coloured duplicate of ``msg``.
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("x", logging.INFO, "", 0, "", None, None)).keys()) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
    _FIELDS,
}

_LEVEL_NAMES = {levelno: name for name, levelno in LEVELS.items() if name != "warn"}


def _level_name(levelno: int) -> str:
    return _LEVEL_NAMES.get(levelno) or logging.getLevelName(levelno).lower()


def _default(obj: Any) -> Any:
    """orjson fallback for values it cannot serialise natively."""
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    if isinstance(obj, BaseException):
        return repr(obj)
    return str(obj)


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=_default, option=orjson.OPT_NON_STR_KEYS)


def _line(
    record: logging.LogRecord, message: str, fields: Iterable[tuple[str, Any]], error: str | None, keep_private: bool
) -> dict[str, Any]:
    """The fields of a JSON line, in the order :class:`JSONFormatter` writes them; an extra whose key
    starts with ``_`` only with ``keep_private``, as python-json-logger drops those of ``extra``."""
    log_data = {
        "ts": rfc3339_millis(record.created),
        "level": _level_name(record.levelno),
        "logger": record.name,
        "msg": message,
    }
    stack = None
    for key, value in fields:
        if key == "stack":
            stack = value
        elif key not in log_data and (keep_private or not key.startswith("_")):
            log_data[key] = value
    if error is not None:
        log_data["error"] = error
    if stack is not None:
        log_data["stack"] = stack
    return log_data


class JSONFormatter(OrjsonFormatter):
    """One compact JSON object per record (no trailing newline): python-json-logger's orjson
    formatter writing ``ts`` (RFC 3339, UTC, ms), ``level``, ``logger``, ``msg``, the ``extra``
    fields, then ``error``/``stack`` for an exception. An extra field never replaces one of the
    first four, and an odd value (a >64-bit int) is written as its repr rather than losing the
    line. A :func:`log_fields` record without an exception is written straight from its fields:
    the same line without the formatter's scan of every record attribute."""

    def __init__(self) -> None:
        super().__init__(
            "%(message)s",
            rename_fields={"message": "msg", "exc_info": "stack"},
            reserved_attrs=list(_STANDARD_ATTRS),
            json_default=_default,
        )

    def format(self, record: logging.LogRecord) -> str:
        fields: Mapping[str, Any] | None = record.__dict__.get(_FIELDS)
        if fields is None or record.exc_info or record.exc_text or record.stack_info or isinstance(record.msg, dict):
            return super().format(record)
        # What add_fields makes of such a record: its extras are exactly ``fields``.
        record.message = message = record.getMessage()
        return self.jsonify_log_record(_line(record, message, fields.items(), None, keep_private=False))

    def add_fields(self, log_data: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        fields: dict[str, Any] = {}
        super().add_fields(fields, record, message_dict)
        error = repr(record.exc_info[1]) if record.exc_info and record.exc_info[0] is not None else None
        log_data.update(_line(record, fields.pop("msg"), fields.items(), error, keep_private=True))

    def jsonify_log_record(self, log_data: dict[str, Any]) -> str:
        try:
            return _dumps(log_data).decode()
        except (TypeError, orjson.JSONEncodeError):
            safe = {}
            for key, value in log_data.items():
                try:
                    _dumps(value)
                    safe[key] = value
                except (TypeError, orjson.JSONEncodeError):
                    safe[key] = repr(value)
            return _dumps(safe).decode()


class TextFormatter(logging.Formatter):
    """``ts LEVEL logger msg key=value ...`` for humans at a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        parts = [rfc3339_millis(record.created), _level_name(record.levelno).upper(), record.name, record.getMessage()]
        for key, value in record.__dict__.items():
            if key in _STANDARD_ATTRS:
                continue
            if isinstance(value, str) and value and " " not in value and "=" not in value and '"' not in value:
                text = value
            elif isinstance(value, str):
                text = orjson.dumps(value).decode()
            else:
                try:
                    text = _dumps(value).decode()
                except (TypeError, orjson.JSONEncodeError):
                    text = repr(value)
            parts.append(f"{key}={text}")
        line = " ".join(parts)
        if record.exc_info and record.exc_info[0] is not None:
            line += "\n" + self.formatException(record.exc_info)
        return line


class BatchingStreamHandler(logging.StreamHandler):
    """A StreamHandler that does not flush after every record: lines reach the file descriptor
    when the buffer fills, every ``flush_interval`` seconds (a daemon thread), at once for WARNING
    and above, and on :func:`flush_logging` / interpreter exit. Trades up to ``flush_interval`` of
    lines on a hard kill (SIGKILL, OOM) for one ``write`` per batch instead of per line, which
    matters at thousands of lines a second."""

    def __init__(self, stream: IO[str], flush_interval: float) -> None:
        super().__init__(stream)
        self.flush_interval = flush_interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._flusher, name="log-flusher", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.stream.write(self.format(record) + self.terminator)
            if record.levelno >= logging.WARNING:
                self.flush()
        except RecursionError:  # pragma: no cover - as logging.StreamHandler
            raise
        except Exception:
            self.handleError(record)

    def _flusher(self) -> None:
        while not self._stop.wait(self.flush_interval):
            try:
                self.flush()
            except Exception:  # pragma: no cover - stream gone at shutdown
                return

    def close(self) -> None:
        self._stop.set()
        try:
            with contextlib.suppress(ValueError):  # the stream was closed under us
                self.flush()
        finally:
            super().close()


def flush_logging() -> None:
    """Flush every handler of the root logger (call before exiting on a signal)."""
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):  # one broken stream must not keep the others unflushed
            handler.flush()


def configure_logging(
    level: str = "info", fmt: str = "json", stream: IO[str] | None = None, flush_interval: float = 0.0
) -> logging.Handler:
    """Route all logging, uvicorn's loggers included, through one handler writing one line per
    record to ``stream`` (default: standard error), and return it. ``flush_interval`` > 0 (seconds):
    batched (:class:`BatchingStreamHandler`). Replaces the root logger's handlers (calling it twice
    does not double every line)."""
    try:
        levelno = LEVELS[level.lower()]
    except KeyError:
        raise ValueError(f"unknown log level {level!r}; expected one of {sorted(LEVELS)}") from None
    formatter = {"json": JSONFormatter, "text": TextFormatter}.get(fmt)
    if formatter is None:
        raise ValueError(f"unknown log format {fmt!r}; expected 'json' or 'text'")

    # Fields we never print; skipping them makes every LogRecord cheaper.
    logging.logMultiprocessing = logging.logProcesses = logging.logThreads = False

    handler: logging.StreamHandler
    if flush_interval > 0:
        if stream is None:
            # stderr is line-buffered (a write per line): use a block-buffered duplicate of its fd.
            stream = open(
                os.dup(sys.stderr.fileno()), "w", buffering=1 << 16, encoding="utf-8", errors="backslashreplace"
            )
        handler = BatchingStreamHandler(stream, flush_interval)
    else:
        handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(formatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
        if isinstance(old, BatchingStreamHandler):
            old.close()
    root.addHandler(handler)
    root.setLevel(levelno)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
        lg.setLevel(logging.NOTSET)
    return handler


@functools.cache
def _template(name: str, level: int) -> dict[str, Any]:
    """The attributes of a LogRecord for (logger, level) that do not change between calls."""
    attrs = vars(logging.LogRecord(name, level, "", 0, "", None, None))
    return {key: value for key, value in attrs.items() if key not in ("created", "msecs", "relativeCreated")}


_LogRecord = logging.LogRecord
_time = time.time


def log_fields(logger: logging.Logger, level: int, msg: str, fields: Mapping[str, Any]) -> None:
    """Cheap ``logger.log(level, msg, extra=fields)`` for hot paths: the LogRecord comes from a
    cached template, without the caller lookup (``findCaller`` walks the stack) or the per-key
    ``extra`` collision checks, and still goes through the logger's level, filters and handlers
    (``pathname``/``lineno``/``funcName`` empty, as with ``logging._srcfile = None``). A field that
    would shadow a standard LogRecord attribute is prefixed with ``field_`` instead of raising."""
    if not logger.isEnabledFor(level):
        return
    record = _LogRecord.__new__(_LogRecord)
    d = record.__dict__
    d.update(_template(logger.name, level))
    now = _time()
    d["created"] = now
    d["msecs"] = (now - int(now)) * 1000.0
    d["relativeCreated"] = (now - logging._startTime) * 1000.0  # type: ignore[attr-defined]  # as LogRecord does
    d["msg"] = msg
    if not _STANDARD_ATTRS.isdisjoint(fields):
        fields = {("field_" + key if key in _STANDARD_ATTRS else key): value for key, value in fields.items()}
    d.update(fields)
    d[_FIELDS] = fields
    logger.handle(record)
