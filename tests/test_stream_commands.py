"""The data plane's command builders and reply parsers (rsc/member/redis_io/stream_commands.py) and the
one NOSCRIPT fallback plan (rsc/common/lua.py's `ScriptPlan`), without a Redis."""

from __future__ import annotations

import pytest
from redis.exceptions import NoScriptError, ResponseError

from rsc.common.lua import Script
from rsc.member.pure.producer_core import Refused
from rsc.member.redis_io import stream_commands as sc
from rsc.protocol.routing import owner_key, seal_key

SHARD, GROUP, MEMBER = "{orders:v1:0}", "billing", "member-a"


def test_read_command_names_every_shard_once_with_its_new_entries_marker():
    assert sc.read_command(GROUP, MEMBER, ["{a}", "{b}"], count=10, block_ms=250) == (
        "XREADGROUP", "GROUP", GROUP, MEMBER, "COUNT", 10, "BLOCK", 250, "STREAMS",
        "{a}", "{b}", ">", ">")
    assert sc.read_command(GROUP, MEMBER, [SHARD], count=5, block_ms=None) == (
        "XREADGROUP", "GROUP", GROUP, MEMBER, "COUNT", 5, "STREAMS", SHARD, ">")


def test_autoclaim_command_claims_from_idle_0_and_justid_on_request():
    assert sc.autoclaim_command(SHARD, GROUP, MEMBER, "0-0", count=3) == (
        "XAUTOCLAIM", SHARD, GROUP, MEMBER, 0, "0-0", "COUNT", 3)
    assert sc.autoclaim_command(SHARD, GROUP, MEMBER, "5-1", count=3, justid=True)[-1] == "JUSTID"


def test_pending_command_spans_the_ids_in_stream_order():
    assert sc.pending_command(SHARD, GROUP, ["10-2", "9-7", "10-10"]) == (
        SHARD, ("XPENDING", SHARD, GROUP, "9-7", "10-10", 3))


def test_ack_calls_are_owner_keyed_and_chunked(monkeypatch):
    monkeypatch.setattr(sc, "ACK_CHUNK", 2)
    calls = sc.ack_calls({SHARD: ["1-0", "2-0", "3-0"], "{b}": []}, MEMBER, GROUP, True)
    assert calls == [([SHARD, owner_key(SHARD, GROUP)], [MEMBER, GROUP, "1", "1-0", "2-0"]),
                     ([SHARD, owner_key(SHARD, GROUP)], [MEMBER, GROUP, "1", "3-0"])]
    assert sc.ack_calls({SHARD: ["1-0"]}, MEMBER, GROUP, False)[0][1][2] == "0"


def test_produce_and_attempt_calls():
    assert sc.produce_calls([(SHARD, [b"value", b"v"])]) == [([SHARD, seal_key(SHARD)],
                                                              [b"value", b"v"])]
    assert sc.attempt_call(SHARD, GROUP, MEMBER, "7-0", 2) == (
        [SHARD, owner_key(SHARD, GROUP)], [MEMBER, GROUP, "7-0", "2"])


def test_by_stream_reads_resp2_resp3_and_a_timed_out_read():
    entries = [[b"1-0", [b"value", b"v"]]]
    assert sc.by_stream([[b"{a}", entries]]) == [("{a}", entries)]
    assert sc.by_stream({"{a}": entries}) == [("{a}", entries)]
    assert sc.by_stream(None) == [] and sc.by_stream([]) == []


def test_autoclaimed_skips_deleted_entries_and_reads_the_cursor():
    assert sc.autoclaimed([b"5-0", [[b"1-0", [b"k", b"v"]], None], []]) == (
        "5-0", [[b"1-0", [b"k", b"v"]]])
    with pytest.raises(TypeError):
        sc.autoclaimed([None, []])


def test_acked_counts_sum_per_shard_and_not_owner_sticks():
    calls = [([SHARD], []), ([SHARD], []), (["{b}"], []), (["{b}"], [])]
    assert sc.acked_counts(calls, [2, "3", sc.NOT_OWNER, 4]) == {SHARD: 5, "{b}": sc.NOT_OWNER}
    with pytest.raises(ResponseError):
        sc.acked_counts(calls[:1], [ResponseError("NOPERM")])


def test_write_result_tells_ids_refusals_and_errors():
    assert sc.write_result("1-0") == "1-0"
    assert sc.write_result(ResponseError(f"{sc.SEALED_ERROR} shard sealed")) is Refused.SEALED
    assert sc.write_result(ResponseError(f"{sc.MISSING_ERROR} no stream")) is Refused.MISSING
    other = ResponseError("OOM")
    assert sc.write_result(other) is other
    with pytest.raises(ValueError):
        sc.write_result(ValueError("not a Redis reply"))


def test_a_claim_plan_reads_counts_and_bodies_and_finds_the_trimmed():
    plan = sc.claim_plan(SHARD, GROUP, [b"9-0", [b"1-0", b"2-0"], [b"0-5"]])
    assert plan.cursor == "9-0" and plan.ids == ["1-0", "2-0"] and plan.gone == ["0-5"]
    assert plan.commands == [(SHARD, ("XPENDING", SHARD, GROUP, "1-0", "2-0", 2)),
                             (SHARD, ("XRANGE", SHARD, "1-0", "1-0")),
                             (SHARD, ("XRANGE", SHARD, "2-0", "2-0"))]
    claimed = plan.claimed([[[b"1-0", b"m", 5, 3], [b"2-0", b"m", 5, 1]],
                            [[b"1-0", [b"value", b"v"]]], []])
    assert claimed == sc.Claimed("9-0", [[b"1-0", [b"value", b"v"]]], {"1-0": 3, "2-0": 1},
                                 ["0-5", "2-0"])
    empty = sc.claim_plan(SHARD, GROUP, ["0-0", []])
    assert empty.commands == [] and empty.claimed([]) == sc.Claimed("0-0", [], {}, [])


def test_pending_of_keeps_only_the_ids_asked_and_reads_parsed_rows():
    reply = [[b"1-0", b"m", 1, 4], {"message_id": "2-0", "times_delivered": 2}, ["3-0", "m", 1, 1]]
    assert sc.pending_of(reply, ["1-0", "2-0"]) == {"1-0": 4, "2-0": 2}
    assert sc.delivery_counts(reply) == {"1-0": 4, "2-0": 2, "3-0": 1}


def test_words_pairs_and_id_order():
    assert sc.word(b"x") == "x" and sc.word("y") == "y"
    with pytest.raises(TypeError):
        sc.word(3)
    assert sc.pairs(["key", "k", "value", "v"]) == {"key": "k", "value": "v"}
    assert sc.pairs(None) == {} and sc.pairs({"a": "b"}) == {"a": "b"}
    assert sc.id_order("12-3") == (12, 3) and sc.id_order("12") == (12, 0)


def test_script_plan_resends_only_the_noscript_calls_and_merges_in_place():
    script = Script("ack")
    plan = script.plan([([SHARD, "o1"], ["a"]), (["{b}", "o2"], ["b"]), (["{c}", "o3"], ["c"])])
    assert plan.text == script.text
    assert plan.commands[1] == ("{b}", ("EVALSHA", script.sha, 2, "{b}", "o2", "b"))
    results: list[object] = [1, NoScriptError("NOSCRIPT"), NoScriptError("NOSCRIPT")]
    again = plan.resend(results)
    assert again == plan.commands[1:]
    plan.merge(results, [2, ResponseError("NOPERM")])
    assert results[:2] == [1, 2] and isinstance(results[2], ResponseError)
    assert plan.resend([1, 2, 3]) == []


def test_script_run_loads_once_and_sends_again_only_what_noscript_refused():
    script = Script("ack")
    sent: list[list[object]] = []
    loaded: list[str] = []

    def execute(commands):
        sent.append(list(commands))
        if len(sent) == 1:
            return [NoScriptError("NOSCRIPT"), 7]
        return [5]

    results = script.run([([SHARD, "o"], ["x"]), (["{b}", "o"], ["y"])], execute, loaded.append)
    assert results == [5, 7] and loaded == [script.text]
    assert sent[1] == [sent[0][0]]


def test_native_settings_come_from_the_options_connect_kept():
    from rsc.common.trio_redis import CONNECT_TIMEOUT_S, Settings, settings_from

    options = {"host": "h", "port": 7000, "db": 2, "username": "u", "password": "p",
               "socket_timeout": 0.5}
    assert settings_from(options, tls=False) == Settings(
        host="h", port=7000, db=2, username="u", password="p", tls=None,
        connect_timeout_s=CONNECT_TIMEOUT_S, reply_timeout_s=0.5)
    assert settings_from({}, tls=False) == Settings(host="localhost", port=6379)
