"""Structured log lines: one per event, JSON or key=value text (rsc/common/logs.py)."""

from __future__ import annotations

import argparse
import io
import json
import logging

import pytest

from rsc.common.logs import (
    add_logging_arguments,
    configure_logging,
    format_json_line,
    format_text_line,
    format_text_value,
    log_event,
    parse_level,
    utc_timestamp,
)


@pytest.fixture
def restore_root_logger():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_text_line_is_event_then_key_value_fields():
    line = format_text_line("2025-01-02T03:04:05.678Z", "INFO", "member.joined",
                            {"prefix": "orders", "member": "10.0.0.7-1-0-ab", "group_epoch": 5})
    assert line == ("2025-01-02T03:04:05.678Z INFO member.joined prefix=orders "
                    "member=10.0.0.7-1-0-ab group_epoch=5")


@pytest.mark.parametrize(("value", "shown"), [
    ("plain", "plain"),
    ("two words", '"two words"'),
    ("a=b", '"a=b"'),
    ("", '""'),
    (None, "null"),
    (True, "true"),
    (1.5, "1.5"),
    (["{o:v1:0}", "{o:v1:1}"], '["{o:v1:0}","{o:v1:1}"]'),
    ({"b", "a"}, '["a","b"]'),
])
def test_text_values_are_bare_only_when_unambiguous(value, shown):
    assert format_text_value(value) == shown


def test_json_line_keeps_ts_level_event_ahead_of_fields():
    line = format_json_line("T", "INFO", "group.epoch", {"group_epoch": 3, "event": "spoof"})
    assert json.loads(line) == {"ts": "T", "level": "INFO", "event": "group.epoch",
                                "group_epoch": 3}
    assert list(json.loads(line))[:3] == ["ts", "level", "event"]


def test_timestamp_is_utc_with_milliseconds():
    assert utc_timestamp(0.25) == "1970-01-01T00:00:00.250Z"


def test_parse_level_accepts_names_and_refuses_others():
    assert parse_level("DEBUG") == logging.DEBUG
    assert parse_level("warning") == logging.WARNING
    with pytest.raises(ValueError, match="unknown log level"):
        parse_level("loud")


@pytest.mark.usefixtures("restore_root_logger")
def test_json_format_writes_one_object_per_event():
    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    logger = logging.getLogger("rsc.test")
    log_event(logger, "member.expired", prefix="orders", group="billing", member="m1")
    log_event(logger, "noise", level=logging.DEBUG, detail=1)
    logger.info("plain message")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first["event"] == "member.expired" and first["level"] == "INFO"
    assert (first["prefix"], first["group"], first["member"]) == ("orders", "billing", "m1")
    assert json.loads(lines[1])["event"] == "plain message"


@pytest.mark.usefixtures("restore_root_logger")
def test_text_format_and_reconfiguring_replaces_the_handler():
    first, second = io.StringIO(), io.StringIO()
    configure_logging("info", "json", stream=first)
    configure_logging("debug", "text", stream=second)
    log_event(logging.getLogger("rsc.test"), "member.left", member="m1", level=logging.DEBUG)
    assert first.getvalue() == ""
    assert second.getvalue().strip().endswith("DEBUG member.left member=m1")


@pytest.mark.usefixtures("restore_root_logger")
def test_exceptions_stay_on_one_line_in_both_formats():
    for fmt in ("text", "json"):
        stream = io.StringIO()
        configure_logging("info", fmt, stream=stream)
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logging.getLogger("rsc.test").exception("store.unavailable")
        assert len(stream.getvalue().splitlines()) == 1
        assert "RuntimeError: boom" in stream.getvalue()


def test_configure_logging_refuses_unknown_format():
    with pytest.raises(ValueError, match="unknown log format"):
        configure_logging("info", "xml")  # type: ignore[arg-type]


def test_logging_flags_and_defaults():
    parser = argparse.ArgumentParser()
    add_logging_arguments(parser)
    assert vars(parser.parse_args([])) == {"log_level": "info", "log_format": "text"}
    assert vars(parser.parse_args(["--log-level", "DEBUG", "--log-format", "json"])) == {
        "log_level": "debug", "log_format": "json"}


@pytest.mark.usefixtures("restore_root_logger")
def test_s2_s3_s5_static_member_events_have_their_own_names():
    from rsc.actors.core.group import Event
    from rsc.actors.delivery import _log_group_event as _log_event

    stream = io.StringIO()
    configure_logging("info", "json", stream=stream)
    _log_event("orders", "billing", Event("away", "m1", {"instanceId": "pod-0",
                                                         "reason": "temporary_leave"}))
    _log_event("orders", "billing", Event("returned", "m2", {"instanceId": "pod-0",
                                                             "replaced": "m1"}))
    _log_event("orders", "billing", Event("expired", "m2", {"instanceId": "pod-0",
                                                            "reason": "session_timeout"}))
    away, returned, expired = (json.loads(line) for line in stream.getvalue().splitlines())
    assert (away["event"], away["instanceId"], away["reason"]) == (
        "member.away", "pod-0", "temporary_leave")
    assert (returned["event"], returned["member"], returned["replaced"]) == (
        "member.returned", "m2", "m1")
    assert (expired["event"], expired["reason"]) == ("member.expired", "session_timeout")
