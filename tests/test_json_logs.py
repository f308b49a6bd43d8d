"""Under RSC_LOG_FORMAT=json every stderr line of every tool is a JSON object with a UTC
timestamp and a level (rsc/common/logs.py); each tool is started briefly as a real process,
against a real coordinator on a real redis-server, and every line it wrote to stderr is parsed.
"""

from __future__ import annotations

import datetime
import json
import re
import subprocess

import trio

from tests.test_env_processes import RSC, clean_environment, free_port, run, start_coordinator, stop


def json_records(stderr: bytes) -> list[dict]:
    """Every stderr line as a JSON object with `ts` (UTC, RFC 3339) and `level`; fails otherwise."""
    records = []
    for line in stderr.decode().splitlines():
        record = json.loads(line)
        assert isinstance(record, dict), line
        assert record["level"] in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"), line
        assert record["ts"].endswith("Z"), line
        datetime.datetime.fromisoformat(record["ts"].replace("Z", "+00:00"))
        records.append(record)
    return records


async def test_the_coordinator_admin_and_demo_write_only_json_lines(redis_url):
    env = clean_environment(RSC_LOG_FORMAT="json", RSC_REDIS_URL=redis_url,
                            RSC_PORT=str(await free_port()), RSC_TICK_INTERVAL_MS="50")
    coordinator, url = await start_coordinator(env)
    try:
        admin_env = clean_environment(RSC_LOG_FORMAT="json", RSC_COORDINATOR_URL=url)
        listed = await run(["admin", "list"], admin_env)
        assert listed.returncode == 0 and json_records(listed.stderr) == []
        unknown = await run(["admin", "describe", "orders", "nobody"], admin_env)
        [failed] = json_records(unknown.stderr)
        assert unknown.returncode == 1 and failed["status"] == "UNKNOWN_GROUP"
        usage = await run(["admin", "descibe"], admin_env)
        [bad] = json_records(usage.stderr)
        assert usage.returncode == 1 and "descibe" in bad["message"]
    finally:
        err = await stop(coordinator)
    events = [record["event"] for record in json_records(err)]
    assert "coordinator.started" in events and "coordinator.stopped" in events
    embedded = await trio.lowlevel.open_process(  # no URL: a private redis-server, said in JSON
        [*RSC, "coordinator", "--port", "0"], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env=clean_environment(RSC_LOG_FORMAT="json"))
    assert embedded.stdout is not None
    with trio.fail_after(30):
        seen = b""
        while b"listening on" not in seen:
            chunk = await embedded.stdout.receive_some(4096)
            assert chunk, "the coordinator exited"
            seen += chunk
    records = json_records(await stop(embedded))
    assert any("private redis-server" in record["event"] for record in records)
    refused = await run(["coordinator", "--no-embedded-redis"], clean_environment(RSC_LOG_FORMAT="json"))
    [line] = json_records(refused.stderr)
    assert refused.returncode == 1 and line["level"] == "ERROR" and "no Redis URL" in line["event"]
    bad = await run(["coordinator"], clean_environment(RSC_LOG_FORMAT="json", RSC_PORT="eighty"))
    [line] = json_records(bad.stderr)
    assert bad.returncode == 2 and "RSC_PORT" in line["event"]
    demo = await run(["demo", "--duration", "1"],
                     clean_environment(RSC_LOG_FORMAT="json", RSC_LOG_LEVEL="info"))
    assert demo.returncode == 0, demo.stderr
    assert json_records(demo.stderr), "the demo at level info logs its coordinator's events"


TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) ")


async def test_text_lines_carry_a_utc_timestamp_and_a_level_too():
    refused = await run(["coordinator", "--no-embedded-redis"], clean_environment())
    [line] = refused.stderr.decode().splitlines()
    assert TEXT_LINE.match(line) and "no Redis URL" in line, line
    bad = await run(["coordinator"], clean_environment(RSC_MAX_GROUPS="0"))
    [line] = bad.stderr.decode().splitlines()
    assert TEXT_LINE.match(line) and "RSC_MAX_GROUPS='0'" in line, line
