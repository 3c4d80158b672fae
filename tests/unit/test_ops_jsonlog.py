"""ops.jsonlog: one line per record, JSON or text, extra= fields merged."""

from __future__ import annotations

import io
import logging

import orjson
import pytest

from ops.jsonlog import configure_logging, log_fields


@pytest.fixture
def restore_root():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
        if h not in handlers:
            h.close()  # stops a BatchingStreamHandler's flusher thread
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def lines(stream: io.StringIO) -> list[str]:
    return stream.getvalue().splitlines()


def test_json_line_has_standard_fields_and_extras(restore_root):
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    logging.getLogger("t.json").info("hello %s", "world", extra={"pod": "web-1", "originals": {"k": "v"}, "n": 3})
    (line,) = lines(out)
    rec = orjson.loads(line)
    assert rec["msg"] == "hello world" and rec["level"] == "info" and rec["logger"] == "t.json"
    assert rec["pod"] == "web-1" and rec["originals"] == {"k": "v"} and rec["n"] == 3
    assert rec["ts"].endswith("Z") and "T" in rec["ts"]
    assert not {"args", "levelno", "pathname", "thread", "processName"} & rec.keys()


def test_json_line_carries_exception(restore_root):
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    try:
        raise ZeroDivisionError("division by zero")
    except ZeroDivisionError:
        logging.getLogger("t.exc").exception("failed")
    rec = orjson.loads(lines(out)[0])
    assert "ZeroDivisionError" in rec["error"] and "Traceback" in rec["stack"]


def test_json_line_survives_unserialisable_fields(restore_root):
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    logging.getLogger("t.odd").info("odd", extra={"obj": object(), "big": 2**70, "tags": {"a"}})
    rec = orjson.loads(lines(out)[0])
    assert rec["msg"] == "odd" and "object" in rec["obj"]


def test_level_filters_lines(restore_root):
    out = io.StringIO()
    configure_logging("warning", "json", stream=out)
    log = logging.getLogger("t.level")
    log.info("hidden")
    log_fields(log, logging.INFO, "hidden too", {"a": 1})
    log.warning("shown")
    assert [orjson.loads(line)["msg"] for line in lines(out)] == ["shown"]


def test_log_fields_matches_extra(restore_root):
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    log = logging.getLogger("t.fast")
    log.info("decision", extra={"pod": "p", "decision": "patched"})
    log_fields(log, logging.INFO, "decision", {"pod": "p", "decision": "patched"})
    a, b = (orjson.loads(line) for line in lines(out))
    a.pop("ts"), b.pop("ts")
    assert a == b


ODD = object()


@pytest.mark.parametrize(
    "fields",
    [
        {"uid": "u", "pod": "p", "originals": {"k": "v"}, "duration_ms": 0.25},
        {"error": "boom", "stack": "Traceback ...", "reason": "InternalError", "after": 1},
        {"stack": None, "n": 2**70, "tags": {"a"}, "obj": ODD, "raw": b"\xff"},
        {"ts": "forged", "level": "forged", "logger": "forged", "_private": 1, "kept": True},
        {"name": "x", "msg": "y", "args": 3, "message": "z"},
        {},
    ],
)
def test_log_fields_writes_the_line_the_formatter_writes_for_extra(restore_root, fields):
    """The direct line of a log_fields record is the one python-json-logger writes for the same
    fields given as ``extra`` (renamed as log_fields renames them), byte for byte but the time."""
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    log = logging.getLogger("t.same")
    log_fields(log, logging.WARNING, "decision %s", fields)
    renamed = {("field_" + k if k in ("name", "msg", "args", "message") else k): v for k, v in fields.items()}
    log.warning("decision %s", extra=renamed)
    fast, slow = lines(out)
    assert fast.split(",", 1)[1] == slow.split(",", 1)[1]


def test_log_fields_renames_reserved_keys(restore_root):
    out = io.StringIO()
    configure_logging("info", "json", stream=out)
    log_fields(logging.getLogger("t.reserved"), logging.INFO, "m", {"name": "x", "msg": "y"})
    rec = orjson.loads(lines(out)[0])
    assert rec["msg"] == "m" and rec["field_name"] == "x" and rec["field_msg"] == "y"


def test_text_format_is_one_readable_line(restore_root):
    out = io.StringIO()
    configure_logging("debug", "text", stream=out)
    logging.getLogger("t.text").debug("hi", extra={"pod": "web 1", "n": 2})
    (line,) = lines(out)
    assert " DEBUG t.text hi " in line and 'pod="web 1"' in line and "n=2" in line


def test_configure_twice_does_not_duplicate_lines(restore_root):
    out = io.StringIO()
    configure_logging("info", "json", stream=io.StringIO())
    configure_logging("info", "json", stream=out)
    logging.getLogger("t.twice").info("once")
    assert len(lines(out)) == 1


def test_unknown_level_or_format_is_rejected(restore_root):
    with pytest.raises(ValueError):
        configure_logging("loud", "json")
    with pytest.raises(ValueError):
        configure_logging("info", "xml")


@pytest.fixture
def logfile(tmp_path):
    path = tmp_path / "log"
    stream = open(path, "w", buffering=1 << 16)
    yield path, stream
    stream.close()


def test_batched_lines_wait_for_a_flush_but_warnings_do_not(restore_root, logfile):
    from ops.jsonlog import flush_logging

    path, stream = logfile
    configure_logging("info", "json", stream=stream, flush_interval=3600)
    log = logging.getLogger("t.batch")
    log.info("first")
    assert path.read_text() == ""  # still in the buffer
    log.warning("urgent")
    assert [orjson.loads(line)["msg"] for line in path.read_text().splitlines()] == ["first", "urgent"]
    log_fields(log, logging.INFO, "later", {"k": 1})
    flush_logging()
    assert orjson.loads(path.read_text().splitlines()[-1]) | {"ts": None} == {
        "ts": None,
        "level": "info",
        "logger": "t.batch",
        "msg": "later",
        "k": 1,
    }


def test_batched_lines_are_flushed_by_the_timer(restore_root, logfile):
    import time

    path, stream = logfile
    configure_logging("info", "json", stream=stream, flush_interval=0.05)
    logging.getLogger("t.timer").info("tick")
    deadline = time.monotonic() + 5
    while "tick" not in path.read_text():
        assert time.monotonic() < deadline
        time.sleep(0.02)
