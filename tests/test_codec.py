"""Pure tests of the wire codec against docs/protocol.md (Transport, Names, every message)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rsc.protocol import messages as m
from rsc.protocol.codec import (
    ADMIN_REQUESTS,
    MEMBER_REQUESTS,
    MESSAGE_TYPES,
    decode,
    decode_object,
    encode,
    to_wire,
)
from rsc.protocol.errors import ProtocolError, Status
from rsc.protocol.vocabulary import Cutover, GroupState, MemberState, MigrationState, RetentionMode

# --- 1. every JSON example of docs/protocol.md ------------------------------------------------------
#
# Copied from docs/protocol.md; placeholders ("...", "<memberId>", "<id or null>") are concrete here.
# `extra` is what re-encoding adds to the example: fields the example leaves out, at their defaults.

MEMBER = "10.0.0.7-4242-0-k3f9"

EXAMPLES: list[tuple[str, str, type[m.Message], dict[str, Any]]] = [
    ("heartbeat", """
{"type": "heartbeat", "requestId": 7,
 "streamPrefix": "orders", "consumerGroup": "billing",
 "memberId": "10.0.0.7-4242-0-k3f9", "memberEpoch": 0,
 "capacity": 8,
 "ownedShards": [],
 "revokingShards": []}
""", m.Heartbeat, {"instanceId": None, "deadLetterStream": None}),
    ("heartbeatResponse", """
{"type": "heartbeatResponse", "requestId": 7, "status": "OK",
 "memberId": "10.0.0.7-4242-0-k3f9", "memberEpoch": 5,
 "groupEpoch": 5, "assignmentEpoch": 5,
 "heartbeatIntervalMs": 3000, "leaseTtlMs": 10000,
 "maxConcurrency": 4,
 "routing": {"version": 1, "shardCount": 4},
 "assignment": {"assignedShards": ["orders:v1:0", "orders:v1:2"],
                "pendingShards": ["orders:v1:3"]}}
""", m.HeartbeatResponse, {"error": None,
                           "routing": {"version": 1, "shardCount": 4, "storeId": None,
                                       "retention": None}}),
    ("heartbeatResponse with storeId and retention", """
{"type": "heartbeatResponse", "requestId": 7, "status": "OK",
 "memberId": "10.0.0.7-4242-0-k3f9", "memberEpoch": 5,
 "groupEpoch": 5, "assignmentEpoch": 5,
 "heartbeatIntervalMs": 3000, "leaseTtlMs": 10000,
 "maxConcurrency": 4,
 "routing": {"version": 1, "shardCount": 4, "storeId": "5f0c",
             "retention": {"mode": "acked", "maxLength": null, "maxAgeMs": null}},
 "assignment": {"assignedShards": ["orders:v1:0"], "pendingShards": []}}
""", m.HeartbeatResponse, {"error": None}),
    ("getRouting", """
{"type": "getRouting", "requestId": 1, "streamPrefix": "orders", "subscribe": true}
""", m.GetRouting, {}),
    ("routing", """
{"type": "routing", "requestId": 1, "status": "OK", "streamPrefix": "orders",
 "version": 2, "shardCount": 8, "hash": "crc32",
 "streams": ["orders:v2:0", "orders:v2:1", "orders:v2:2", "orders:v2:3",
             "orders:v2:4", "orders:v2:5", "orders:v2:6", "orders:v2:7"]}
""", m.Routing, {"error": None, "storeId": None, "retention": None}),
    ("routing with storeId and retention", """
{"type": "routing", "requestId": 1, "status": "OK", "streamPrefix": "orders",
 "version": 2, "shardCount": 1, "hash": "crc32", "streams": ["orders:v2:0"],
 "storeId": "5f0c", "retention": {"mode": "none", "maxLength": 100000, "maxAgeMs": 86400000}}
""", m.Routing, {"error": None}),
    ("routing push (no requestId)", """
{"type": "routing", "status": "OK", "streamPrefix": "orders",
 "version": 3, "shardCount": 2, "hash": "crc32", "streams": ["orders:v3:0", "orders:v3:1"]}
""", m.Routing, {"requestId": None, "error": None, "storeId": None, "retention": None}),
    ("routing UNKNOWN_STREAM", """
{"type": "routing", "requestId": 1, "status": "UNKNOWN_STREAM", "streamPrefix": "orders"}
""", m.Routing, {"version": None, "shardCount": None, "hash": None, "streams": None, "error": None,
                 "storeId": None, "retention": None}),
    ("error", """
{"type": "error", "requestId": 7, "status": "INVALID_REQUEST",
 "error": "field 'memberEpoch' must be >= -2, got -3"}
""", m.ErrorResponse, {}),
    ("error without readable requestId", """
{"type": "error", "requestId": null, "status": "INVALID_REQUEST",
 "error": "frame is not valid JSON"}
""", m.ErrorResponse, {}),
    ("heartbeatResponse FENCED_MEMBER_EPOCH", """
{"type": "heartbeatResponse", "requestId": 8, "status": "FENCED_MEMBER_EPOCH",
 "error": "epoch 3 is not the member's epoch 5", "memberId": "10.0.0.7-4242-0-k3f9"}
""", m.HeartbeatResponse, {"memberEpoch": None, "groupEpoch": None, "assignmentEpoch": None,
                           "heartbeatIntervalMs": None, "leaseTtlMs": None, "maxConcurrency": None,
                           "routing": None, "assignment": None}),
    ("assignmentChanged push (H10)", """
{"type": "assignmentChanged", "streamPrefix": "orders", "consumerGroup": "billing",
 "memberId": "10.0.0.7-4242-0-k3f9", "groupEpoch": 6}
""", m.AssignmentChanged, {}),
    ("heartbeat revoking, capacity absent", """
{"type": "heartbeat", "requestId": 9,
 "streamPrefix": "orders", "consumerGroup": "billing",
 "memberId": "10.0.0.7-4242-0-k3f9", "memberEpoch": 5,
 "ownedShards": ["orders:v1:0", "orders:v1:2"],
 "revokingShards": [{"shard": "orders:v1:2", "state": "REVOKED"},
                    {"shard": "orders:v1:0", "state": "REVOKING"}]}
""", m.Heartbeat, {"capacity": None, "instanceId": None, "deadLetterStream": None}),
    ("heartbeat leave, ownedShards null, revokingShards absent", """
{"type": "heartbeat", "requestId": 10,
 "streamPrefix": "orders", "consumerGroup": "billing",
 "memberId": "10.0.0.7-4242-0-k3f9", "memberEpoch": -1, "ownedShards": null}
""", m.Heartbeat, {"capacity": None, "revokingShards": [], "instanceId": None,
                  "deadLetterStream": None}),
    ("heartbeat static join (S1)", """
{"type": "heartbeat", "requestId": 7,
 "streamPrefix": "orders", "consumerGroup": "billing",
 "memberId": "10.0.0.7-4242-0-k3f9", "memberEpoch": 0, "instanceId": "billing-0",
 "capacity": 8, "ownedShards": [], "revokingShards": []}
""", m.Heartbeat, {"deadLetterStream": None}),
    ("heartbeat temporary leave (S2)", """
{"type": "heartbeat", "requestId": 11,
 "streamPrefix": "orders", "consumerGroup": "billing",
 "memberId": "10.0.0.7-4242-0-k3f9", "memberEpoch": -2, "ownedShards": []}
""", m.Heartbeat, {"capacity": None, "revokingShards": [], "instanceId": None,
                  "deadLetterStream": None}),
    ("heartbeatResponse UNRELEASED_INSTANCE_ID (S4)", """
{"type": "heartbeatResponse", "requestId": 7, "status": "UNRELEASED_INSTANCE_ID",
 "memberId": "10.0.0.9-77-0-zz01", "error": "instanceId 'billing-0' is held by a live member"}
""", m.HeartbeatResponse, {"memberEpoch": None, "groupEpoch": None, "assignmentEpoch": None,
                           "heartbeatIntervalMs": None, "leaseTtlMs": None, "maxConcurrency": None,
                           "routing": None, "assignment": None}),
    ("groupDescription", """
{"type": "groupDescription", "requestId": 3, "status": "OK",
 "streamPrefix": "orders", "consumerGroup": "billing",
 "state": "RECONCILING", "groupEpoch": 9, "assignmentEpoch": 9,
 "maxConcurrency": null,
 "routing": {"version": 2, "shardCount": 8},
 "migration": {"state": "DRAINING", "fromVersion": 1, "toVersion": 2,
               "cutover": "parallel",
               "drainedShards": ["orders:v1:0"], "remainingShards": ["orders:v1:1"],
               "blockingGroups": [{"consumerGroup": "audit", "undelivered": 120, "pending": 3}]},
 "members": [{"memberId": "10.0.0.7-4242-0-k3f9", "memberEpoch": 8, "state": "UNREVOKED_SHARDS",
              "capacity": 8, "lastHeartbeatMsAgo": 420,
              "assignedShards": ["orders:v2:0"], "pendingShards": [],
              "revokingShards": ["orders:v1:1"], "targetShards": ["orders:v2:0"]}],
 "targetAssignment": {"10.0.0.7-4242-0-k3f9": ["orders:v2:0"]},
 "currentAssignment": {"10.0.0.7-4242-0-k3f9": ["orders:v2:0", "orders:v1:1"]}}
""", m.GroupDescription, {
        "error": None, "shards": [], "retention": None, "storeWentBackAtMs": None,
        "expiresAtMs": None, "oldestUndeliveredAgeMs": None, "oldestPendingEntryAgeMs": None,
        "routing": {"version": 2, "shardCount": 8, "storeId": None, "retention": None},
        "members": [{"memberId": "10.0.0.7-4242-0-k3f9", "memberEpoch": 8,
                     "state": "UNREVOKED_SHARDS", "capacity": 8, "lastHeartbeatMsAgo": 420,
                     "assignedShards": ["orders:v2:0"], "pendingShards": [],
                     "revokingShards": ["orders:v1:1"], "targetShards": ["orders:v2:0"],
                     "overdue": False, "instanceId": None, "awayMs": None,
                     "deadLetterStream": None}]}),
    ("groupDescription with shards, an overdue member and retention", """
{"type": "groupDescription", "requestId": 3, "status": "OK",
 "streamPrefix": "orders", "consumerGroup": "billing",
 "state": "STABLE", "groupEpoch": 9, "assignmentEpoch": 9, "maxConcurrency": null,
 "routing": {"version": 2, "shardCount": 1, "storeId": "5f0c",
             "retention": {"mode": "acked", "maxLength": null, "maxAgeMs": null}},
 "migration": null,
 "members": [{"memberId": "m1", "memberEpoch": 9, "state": "STABLE", "capacity": 1,
              "lastHeartbeatMsAgo": 4800, "assignedShards": ["orders:v2:0"],
              "pendingShards": [], "revokingShards": [], "targetShards": ["orders:v2:0"],
              "overdue": true, "instanceId": null, "awayMs": null,
              "deadLetterStream": null}],
 "targetAssignment": {"m1": ["orders:v2:0"]}, "currentAssignment": {"m1": ["orders:v2:0"]},
 "shards": [{"shard": "orders:v2:0", "version": 2, "owner": "m1",
             "length": 1204, "lastDeliveredId": "1733040000000-3",
             "lag": 17, "pending": 4, "oldestPendingMs": 820, "damage": null, "maxDeliveryCount": 12,
             "oldestUndeliveredAgeMs": 5200, "oldestPendingEntryAgeMs": 9100},
            {"shard": "orders:v1:0", "version": 1, "owner": null, "length": 0,
             "lastDeliveredId": null, "lag": null, "pending": 0, "oldestPendingMs": null, "damage": null,
             "maxDeliveryCount": null, "oldestUndeliveredAgeMs": null, "oldestPendingEntryAgeMs": null}],
 "retention": {"mode": "acked", "maxLength": null, "maxAgeMs": null},
 "oldestUndeliveredAgeMs": 5200, "oldestPendingEntryAgeMs": 9100}
""", m.GroupDescription, {"error": None, "storeWentBackAtMs": None, "expiresAtMs": None}),
    ("groupDescription with an AWAY static member (S6)", """
{"type": "groupDescription", "requestId": 3, "status": "OK",
 "streamPrefix": "orders", "consumerGroup": "billing",
 "state": "STABLE", "groupEpoch": 9, "assignmentEpoch": 9, "maxConcurrency": null,
 "routing": null, "migration": null,
 "members": [{"memberId": "m1", "memberEpoch": 9, "state": "AWAY", "capacity": 1,
              "lastHeartbeatMsAgo": 4800, "assignedShards": [],
              "pendingShards": ["orders:v1:0"], "revokingShards": [],
              "targetShards": ["orders:v1:0"], "overdue": false,
              "instanceId": "billing-0", "awayMs": 4800, "deadLetterStream": null}],
 "targetAssignment": {"m1": ["orders:v1:0"]}, "currentAssignment": {"m1": []},
 "shards": [{"shard": "orders:v1:0", "version": 1, "owner": null,
             "length": 1204, "lastDeliveredId": "1733040000000-3",
             "lag": 17, "pending": 0, "oldestPendingMs": null, "damage": null,
             "maxDeliveryCount": null, "oldestUndeliveredAgeMs": 61000, "oldestPendingEntryAgeMs": null}],
 "retention": null, "oldestUndeliveredAgeMs": 61000, "oldestPendingEntryAgeMs": null}
""", m.GroupDescription, {"error": None, "storeWentBackAtMs": None, "expiresAtMs": None}),
    # The admin table's requests and responses, with concrete values.
    ("listGroups", '{"type": "listGroups", "requestId": 2}', m.ListGroups, {}),
    ("groups", """
{"type": "groups", "requestId": 2, "status": "OK",
 "groups": [{"streamPrefix": "orders", "consumerGroup": "billing", "groupEpoch": 9,
             "members": 2, "shards": 8, "state": "RECONCILING", "lag": 17, "pending": 4,
             "expiresAtMs": null}]}
""", m.Groups, {"error": None}),
    ("describeGroup", """
{"type": "describeGroup", "requestId": 3, "streamPrefix": "orders", "consumerGroup": "billing"}
""", m.DescribeGroup, {"watch": False}),
    ("describeGroup watch", """
{"type": "describeGroup", "requestId": 3, "streamPrefix": "orders", "consumerGroup": "billing",
 "watch": true}
""", m.DescribeGroup, {}),
    ("setRetention", """
{"type": "setRetention", "requestId": 13, "streamPrefix": "orders",
 "retention": {"mode": "acked", "maxLength": 1000000, "maxAgeMs": null}}
""", m.SetRetention, {"deadLettersOf": None}),
    ("setRetention of dead letters", """
{"type": "setRetention", "requestId": 13, "streamPrefix": "orders",
 "retention": {"mode": "none", "maxLength": 10000, "maxAgeMs": 604800000},
 "deadLettersOf": "billing"}
""", m.SetRetention, {}),
    ("retentionChanged", """
{"type": "retentionChanged", "requestId": 13, "status": "OK", "streamPrefix": "orders",
 "retention": {"mode": "none", "maxLength": null, "maxAgeMs": 604800000}}
""", m.RetentionChanged, {"error": None, "deadLettersOf": None}),
    ("retentionChanged of dead letters", """
{"type": "retentionChanged", "requestId": 13, "status": "OK", "streamPrefix": "orders",
 "retention": {"mode": "none", "maxLength": 10000, "maxAgeMs": null},
 "deadLettersOf": "billing", "error": null}
""", m.RetentionChanged, {}),
    ("retentionChanged UNKNOWN_STREAM", """
{"type": "retentionChanged", "requestId": 13, "status": "UNKNOWN_STREAM", "streamPrefix": "orders",
 "error": "stream prefix 'orders' has no routing yet"}
""", m.RetentionChanged, {"retention": None, "deadLettersOf": None}),
    ("getFormatVersion", """
{"type": "getFormatVersion", "requestId": 14}
""", m.GetFormatVersion, {}),
    ("formatVersion", """
{"type": "formatVersion", "requestId": 14, "status": "OK", "formatVersion": 1,
 "latestFormatVersion": 2}
""", m.FormatVersion, {"error": None}),
    ("setFormatVersion", """
{"type": "setFormatVersion", "requestId": 15, "formatVersion": 2}
""", m.SetFormatVersion, {}),
    ("formatVersionChanged", """
{"type": "formatVersionChanged", "requestId": 15, "status": "OK", "formatVersion": 2,
 "previousFormatVersion": 1}
""", m.FormatVersionChanged, {"error": None}),
    ("formatVersionChanged UNSUPPORTED_FORMAT_VERSION", """
{"type": "formatVersionChanged", "requestId": 15, "status": "UNSUPPORTED_FORMAT_VERSION",
 "error": "format 3 is unknown to this coordinator, which writes formats 1 to 2"}
""", m.FormatVersionChanged, {"formatVersion": None, "previousFormatVersion": None}),
    ("readAudit (C3)", """
{"type": "readAudit", "requestId": 16, "count": 20, "beforeId": "1733040000000-0"}
""", m.ReadAudit, {}),
    ("auditEntries (C3)", """
{"type": "auditEntries", "requestId": 16, "status": "OK",
 "entries": [{"id": "1733040000001-0", "timeMs": 1733040000001, "endpoint": "/v1/admin",
              "peer": "10.0.0.9:51000", "via": "console", "role": "admin",
              "request": {"type": "deleteGroup", "requestId": 3, "streamPrefix": "orders",
                          "consumerGroup": "billing"},
              "status": "OK", "error": null,
              "before": {"groupEpoch": 9, "members": [], "shards": []}}]}
""", m.AuditEntries, {"error": None}),
    ("readShard (C2)", """
{"type": "readShard", "requestId": 17, "streamPrefix": "orders", "shard": "orders:v1:0",
 "newestFirst": false, "fromId": null, "fromMs": 1733040000000, "count": 50}
""", m.ReadShard, {}),
    ("shardEntries (C2)", """
{"type": "shardEntries", "requestId": 17, "status": "OK", "streamPrefix": "orders",
 "shard": "orders:v1:0", "length": 3, "nextId": "1733040000002-0",
 "entries": [{"id": "1733040000001-0",
              "key": {"text": "customer-7", "base64": null, "size": 10, "cut": false},
              "value": {"text": null, "base64": "AP8=", "size": 2, "cut": false},
              "headers": [{"name": "<b>trace</b>",
                           "value": {"text": "t-1", "base64": null, "size": 3, "cut": false}}],
              "fields": []}]}
""", m.ShardEntries, {"error": None}),
    ("findKey (C2)", """
{"type": "findKey", "requestId": 18, "streamPrefix": "orders", "key": "customer-7",
 "continueId": "1733040000000-5", "count": 20}
""", m.FindKey, {}),
    ("keyEntries (C2)", """
{"type": "keyEntries", "requestId": 18, "status": "OK", "streamPrefix": "orders",
 "key": "customer-7", "shard": "orders:v2:3", "scanned": 10000, "entries": [],
 "continueId": "1733039990000-0", "shards": ["orders:v2:3", "orders:v1:1"]}
""", m.KeyEntries, {"error": None}),
    ("listPending (C2)", """
{"type": "listPending", "requestId": 19, "streamPrefix": "orders", "consumerGroup": "billing",
 "shard": "orders:v1:0", "afterId": null, "count": 50}
""", m.ListPending, {}),
    ("pendingEntries (C2)", """
{"type": "pendingEntries", "requestId": 19, "status": "OK", "streamPrefix": "orders",
 "consumerGroup": "billing", "shard": "orders:v1:0", "pending": 1, "nextId": null,
 "entries": [{"id": "1733040000001-0", "owner": "member-1", "idleMs": 5000, "deliveries": 2}]}
""", m.PendingEntries, {"error": None}),
    ("setShardCount", """
{"type": "setShardCount", "requestId": 4, "streamPrefix": "orders", "consumerGroup": "billing",
 "shardCount": 8, "cutover": "ordered"}
""", m.SetShardCount, {}),
    ("setShardCount default cutover", """
{"type": "setShardCount", "requestId": 4, "streamPrefix": "orders", "consumerGroup": "billing",
 "shardCount": 4096}
""", m.SetShardCount, {"cutover": "parallel"}),
    ("shardCountChanged", """
{"type": "shardCountChanged", "requestId": 4, "status": "OK",
 "streamPrefix": "orders", "consumerGroup": "billing",
 "routing": {"version": 2, "shardCount": 2, "hash": "crc32", "streams": ["orders:v2:0", "orders:v2:1"]},
 "migration": {"state": "DRAINING", "fromVersion": 1, "toVersion": 2, "cutover": "ordered",
               "drainedShards": [], "remainingShards": ["orders:v1:0"], "blockingGroups": []}}
""", m.ShardCountChanged, {"error": None}),
    ("shardCountChanged, no migration", """
{"type": "shardCountChanged", "requestId": 4, "status": "OK",
 "streamPrefix": "orders", "consumerGroup": "billing",
 "routing": {"version": 1, "shardCount": 1, "hash": "crc32", "streams": ["orders:v1:0"]},
 "migration": null}
""", m.ShardCountChanged, {"error": None}),
    ("shardCountChanged MIGRATION_IN_PROGRESS", """
{"type": "shardCountChanged", "requestId": 4, "status": "MIGRATION_IN_PROGRESS",
 "streamPrefix": "orders", "consumerGroup": "billing", "error": "a migration is in progress"}
""", m.ShardCountChanged, {"routing": None, "migration": None}),
    ("setMaxConcurrency", """
{"type": "setMaxConcurrency", "requestId": 5, "streamPrefix": "orders", "consumerGroup": "billing",
 "maxConcurrency": 4}
""", m.SetMaxConcurrency, {}),
    ("setMaxConcurrency clear", """
{"type": "setMaxConcurrency", "requestId": 5, "streamPrefix": "orders", "consumerGroup": "billing",
 "maxConcurrency": null}
""", m.SetMaxConcurrency, {}),
    ("maxConcurrencyChanged", """
{"type": "maxConcurrencyChanged", "requestId": 5, "status": "OK",
 "streamPrefix": "orders", "consumerGroup": "billing", "maxConcurrency": 4, "groupEpoch": 10}
""", m.MaxConcurrencyChanged, {"error": None}),
    ("maxConcurrencyChanged UNKNOWN_GROUP", """
{"type": "maxConcurrencyChanged", "requestId": 5, "status": "UNKNOWN_GROUP",
 "streamPrefix": "orders", "consumerGroup": "billing", "error": "no such group"}
""", m.MaxConcurrencyChanged, {"maxConcurrency": None, "groupEpoch": None}),
    ("removeMember", """
{"type": "removeMember", "requestId": 6, "streamPrefix": "orders", "consumerGroup": "billing",
 "memberId": "10.0.0.7-4242-0-k3f9"}
""", m.RemoveMember, {"instanceId": None}),
    ("removeMember by instanceId (S5)", """
{"type": "removeMember", "requestId": 6, "streamPrefix": "orders", "consumerGroup": "billing",
 "instanceId": "billing-0"}
""", m.RemoveMember, {"memberId": None}),
    ("memberRemoved", """
{"type": "memberRemoved", "requestId": 6, "status": "OK", "streamPrefix": "orders",
 "consumerGroup": "billing", "memberId": "10.0.0.7-4242-0-k3f9", "groupEpoch": 11}
""", m.MemberRemoved, {"error": None}),
    ("setShardCount without a group", """
{"type": "setShardCount", "requestId": 4, "streamPrefix": "orders", "shardCount": 8}
""", m.SetShardCount, {"consumerGroup": None, "cutover": "parallel"}),
    ("shardCountChanged without a group, blocking groups", """
{"type": "shardCountChanged", "requestId": 4, "status": "OK",
 "streamPrefix": "orders", "consumerGroup": null,
 "routing": {"version": 2, "shardCount": 2, "hash": "crc32", "streams": ["orders:v2:0", "orders:v2:1"]},
 "migration": {"state": "DRAINING", "fromVersion": 1, "toVersion": 2, "cutover": "parallel",
               "drainedShards": [], "remainingShards": ["orders:v1:0"],
               "blockingGroups": [{"consumerGroup": "audit", "undelivered": 120, "pending": 3},
                                  {"consumerGroup": "old", "undelivered": null, "pending": 0}]}}
""", m.ShardCountChanged, {"error": None}),
    ("deleteGroup", """
{"type": "deleteGroup", "requestId": 7, "streamPrefix": "orders", "consumerGroup": "billing"}
""", m.DeleteGroup, {}),
    ("deleteGroup confirmed at a group epoch and routing version (C1)", """
{"type": "deleteGroup", "requestId": 7, "streamPrefix": "orders", "consumerGroup": "billing",
 "ifGroupEpoch": 9, "ifRoutingVersion": 2}
""", m.DeleteGroup, {}),
    ("setRetention confirmed at no routing (C1)", """
{"type": "setRetention", "requestId": 12, "streamPrefix": "orders",
 "retention": {"mode": "acked", "maxLength": null, "maxAgeMs": null}, "deadLettersOf": null,
 "ifRoutingVersion": 0}
""", m.SetRetention, {}),
    ("groupDeleted", """
{"type": "groupDeleted", "requestId": 7, "status": "OK", "streamPrefix": "orders",
 "consumerGroup": "billing"}
""", m.GroupDeleted, {"error": None}),
    ("resetOffsets to a timestamp", """
{"type": "resetOffsets", "requestId": 8, "streamPrefix": "orders", "consumerGroup": "billing",
 "to": "timestamp", "timestampMs": 1733040000000}
""", m.ResetOffsets, {"dryRun": False}),
    ("resetOffsets to earliest", """
{"type": "resetOffsets", "requestId": 8, "streamPrefix": "orders", "consumerGroup": "billing",
 "to": "earliest"}
""", m.ResetOffsets, {"timestampMs": None, "dryRun": False}),
    ("resetOffsets dry run (C1)", """
{"type": "resetOffsets", "requestId": 8, "streamPrefix": "orders", "consumerGroup": "billing",
 "to": "latest", "timestampMs": null, "dryRun": true}
""", m.ResetOffsets, {}),
    ("offsetsReset", """
{"type": "offsetsReset", "requestId": 8, "status": "OK", "streamPrefix": "orders",
 "consumerGroup": "billing",
 "shards": [{"shard": "orders:v2:0", "lastDeliveredId": "1733040000000-3"}]}
""", m.OffsetsReset, {"error": None, "dryRun": False}),
    ("listDeadLetters", """
{"type": "listDeadLetters", "requestId": 9, "streamPrefix": "orders", "consumerGroup": "billing",
 "count": 20, "after": null}
""", m.ListDeadLetters, {}),
    ("deadLetters", """
{"type": "deadLetters", "requestId": 9, "status": "OK", "streamPrefix": "orders",
 "consumerGroup": "billing", "stream": "{orders}:dead:billing", "count": 1,
 "oldestMs": 1733040000000, "newestMs": 1733040000000, "errorsByType": {"crashed": 1},
 "entries": [{"id": "1733040000000-0", "sourceStream": "{orders:v1:0}",
              "sourceId": "1733039999000-0", "consumerGroup": "billing", "deliveries": 3,
              "error": "crashed", "memberId": "m1", "deadAtMs": 1733040000000,
              "key": "customer-7", "value": "paid", "redriven": 0}],
 "retention": {"mode": "none", "maxLength": 10000, "maxAgeMs": null}, "error": null}
""", m.DeadLetters, {}),
    ("redriveDeadLetters", """
{"type": "redriveDeadLetters", "requestId": 10, "streamPrefix": "orders",
 "consumerGroup": "billing", "dryRun": true, "max": 10, "ids": ["1733040000000-0"]}
""", m.RedriveDeadLetters, {"force": False}),
    ("deadLettersRedriven", """
{"type": "deadLettersRedriven", "requestId": 10, "status": "OK", "streamPrefix": "orders",
 "consumerGroup": "billing", "stream": "{orders}:dead:billing", "dryRun": false,
 "redriven": [{"id": "1733040000000-0", "shard": "{orders:v1:0}",
               "newId": "1733040100000-0"}],
 "skipped": [{"id": "1733040000001-0", "reason": "sent back 3 times already"}],
 "error": null}
""", m.DeadLettersRedriven, {}),
    ("groupDeleted GROUP_NOT_EMPTY", """
{"type": "groupDeleted", "requestId": 7, "status": "GROUP_NOT_EMPTY", "streamPrefix": "orders",
 "consumerGroup": "billing", "error": "group 'billing' of 'orders' has 2 live member(s)"}
""", m.GroupDeleted, {}),
]


def _endpoint(cls: type[m.Message]) -> frozenset[str] | None:
    if cls.TYPE in MEMBER_REQUESTS:
        return MEMBER_REQUESTS
    if cls.TYPE in ADMIN_REQUESTS:
        return ADMIN_REQUESTS
    return None


@pytest.mark.parametrize(("text", "cls", "extra"), [e[1:] for e in EXAMPLES], ids=[e[0] for e in EXAMPLES])
def test_protocol_example_decodes_and_reencodes(text: str, cls: type[m.Message], extra: dict) -> None:
    example = json.loads(text)
    message = decode(text, _endpoint(cls))
    assert type(message) is cls
    reencoded = json.loads(encode(message))
    assert reencoded == {**example, **extra}
    assert list(reencoded)[0] == "type"
    # Decoding the re-encoded form gives the same message again.
    assert decode(encode(message)) == message


def test_examples_cover_every_message_class() -> None:
    assert {cls for _, _, cls, _ in EXAMPLES} == set(MESSAGE_TYPES.values())


def test_example_heartbeat_fields() -> None:
    message = decode(EXAMPLES[0][1], MEMBER_REQUESTS)
    assert message == m.Heartbeat(request_id=7, stream_prefix="orders", consumer_group="billing",
                                  member_id=MEMBER, member_epoch=0, capacity=8,
                                  owned_shards=(), revoking_shards=())


def test_example_heartbeat_response_fields() -> None:
    message = decode(EXAMPLES[1][1])
    assert isinstance(message, m.HeartbeatResponse)
    assert message.status is Status.OK
    assert message.routing == m.RoutingSummary(version=1, shard_count=4)
    assert message.assignment == m.Assignment(assigned_shards=("orders:v1:0", "orders:v1:2"),
                                              pending_shards=("orders:v1:3",))


def test_example_group_description_fields() -> None:
    text = next(t for name, t, _, _ in EXAMPLES if name == "groupDescription")
    message = decode(text)
    assert isinstance(message, m.GroupDescription)
    assert message.migration is not None and message.migration.drained_shards == ("orders:v1:0",)
    assert message.members[0].last_heartbeat_ms_ago == 420
    assert message.target_assignment == {MEMBER: ("orders:v2:0",)}
    assert message.current_assignment == {MEMBER: ("orders:v2:0", "orders:v1:1")}


def test_routing_push_has_no_request_id() -> None:
    push = m.Routing(status=Status.OK, stream_prefix="orders", version=1, shard_count=1,
                     hash="crc32", streams=("orders:v1:0",))
    assert push.request_id is None
    assert decode(encode(push)) == push


def test_encode_is_compact_utf8_json_with_camel_case_names() -> None:
    message = m.Heartbeat(request_id=1, stream_prefix="zürich", consumer_group="g", member_id="m",
                          member_epoch=0, owned_shards=None)
    text = encode(message)
    assert "zürich" in text  # UTF-8, not \u escapes
    assert " " not in text
    assert set(json.loads(text)) == {"type", "requestId", "streamPrefix", "consumerGroup", "memberId",
                                     "memberEpoch", "capacity", "ownedShards", "revokingShards",
                                     "instanceId", "deadLetterStream"}
    assert to_wire(message)["ownedShards"] is None


# --- 2. round trips of generated valid instances ------------------------------------------------

NAME_CHARS = st.characters(exclude_categories=("Cc", "Cs"), exclude_characters="{}")
names = st.text(NAME_CHARS, min_size=1, max_size=200)
member_ids = st.text(st.characters(exclude_categories=("Cc", "Cs")), min_size=1, max_size=200)
texts = st.text(max_size=40)
ints = st.integers(min_value=-(2**63), max_value=2**63)
request_ids = ints
maybe_request_ids = st.none() | ints
statuses = st.sampled_from(Status)
shard_lists = st.lists(st.text(max_size=30), max_size=5).map(tuple)


def opt(strategy: st.SearchStrategy) -> st.SearchStrategy:
    return st.none() | strategy


entry_ids = st.builds(lambda ms, seq: f"{ms}-{seq}", st.integers(0, 2**44), st.integers(0, 99))
blobs = st.builds(m.Blob, text=opt(texts), base64=opt(texts), size=st.integers(0, 2**20),
                  cut=st.booleans())
stream_entries = st.lists(st.builds(
    m.StreamEntry, id=texts, key=st.none() | blobs, value=st.none() | blobs,
    headers=st.lists(st.builds(m.FieldBlob, name=texts, value=blobs), max_size=2).map(tuple),
    fields=st.lists(st.builds(m.FieldBlob, name=texts, value=blobs), max_size=2).map(tuple)),
    max_size=2).map(tuple)


retentions = st.builds(m.Retention, mode=st.sampled_from(RetentionMode),
                       max_length=opt(st.integers(1, 2**63)), max_age_ms=opt(st.integers(1, 2**63)))
routing_summaries = st.builds(m.RoutingSummary, version=ints, shard_count=ints,
                              store_id=opt(texts), retention=opt(retentions))
shard_descriptions = st.builds(
    m.ShardDescription, shard=texts, version=ints, owner=opt(texts), length=ints,
    last_delivered_id=opt(texts), lag=opt(ints), pending=ints, oldest_pending_ms=opt(ints))
assignments = st.builds(m.Assignment, assigned_shards=shard_lists, pending_shards=shard_lists)
revoking = st.builds(m.RevokingShard, shard=st.text(max_size=30),
                     state=st.sampled_from(["REVOKING", "REVOKED"]))
blocking_groups = st.builds(m.BlockingGroup, consumer_group=texts, undelivered=opt(ints),
                            pending=ints)
migrations = st.builds(m.MigrationDescription, state=st.sampled_from(MigrationState),
                       from_version=ints, to_version=ints, cutover=st.sampled_from(Cutover),
                       drained_shards=shard_lists, remaining_shards=shard_lists,
                       blocking_groups=st.lists(blocking_groups, max_size=2).map(tuple))
member_descriptions = st.builds(
    m.MemberDescription, member_id=texts, member_epoch=ints, state=st.sampled_from(MemberState),
    capacity=opt(ints),
    last_heartbeat_ms_ago=opt(ints), assigned_shards=shard_lists, pending_shards=shard_lists,
    revoking_shards=shard_lists, target_shards=shard_lists, overdue=st.booleans(),
    instance_id=opt(texts), away_ms=opt(ints))
routing_descriptions = st.builds(m.RoutingDescription, version=ints, shard_count=ints, hash=texts,
                                 streams=shard_lists)
group_summaries = st.builds(m.GroupSummary, stream_prefix=texts, consumer_group=texts,
                            group_epoch=ints, members=ints, shards=ints,
                            state=st.sampled_from(GroupState), lag=opt(ints), pending=ints)
assignment_maps = st.dictionaries(texts, shard_lists, max_size=3)

STRATEGIES: dict[type[m.Message], st.SearchStrategy] = {
    m.Heartbeat: st.builds(
        m.Heartbeat, request_id=request_ids, stream_prefix=names, consumer_group=names,
        member_id=member_ids, member_epoch=st.integers(min_value=-2, max_value=2**63),
        capacity=opt(st.integers(min_value=1, max_value=2**63)), owned_shards=opt(shard_lists),
        revoking_shards=st.lists(revoking, max_size=4).map(tuple), instance_id=opt(member_ids)),
    m.HeartbeatResponse: st.builds(
        m.HeartbeatResponse, request_id=maybe_request_ids, status=statuses, member_id=texts,
        member_epoch=opt(ints), group_epoch=opt(ints), assignment_epoch=opt(ints),
        heartbeat_interval_ms=opt(ints), lease_ttl_ms=opt(ints), max_concurrency=opt(ints),
        routing=opt(routing_summaries), assignment=opt(assignments), error=opt(texts)),
    m.AssignmentChanged: st.builds(m.AssignmentChanged, stream_prefix=texts, consumer_group=texts,
                                   member_id=texts, group_epoch=ints),
    m.GetRouting: st.builds(m.GetRouting, request_id=request_ids, stream_prefix=names,
                            subscribe=st.booleans()),
    m.Routing: st.builds(m.Routing, request_id=maybe_request_ids, status=statuses, stream_prefix=texts,
                         version=opt(ints), shard_count=opt(ints), hash=opt(texts),
                         streams=opt(shard_lists), store_id=opt(texts), retention=opt(retentions),
                         error=opt(texts)),
    m.ListGroups: st.builds(m.ListGroups, request_id=request_ids),
    m.DescribeGroup: st.builds(m.DescribeGroup, request_id=request_ids, stream_prefix=names,
                               consumer_group=names, watch=st.booleans()),
    m.SetShardCount: st.builds(m.SetShardCount, request_id=request_ids, stream_prefix=names,
                               consumer_group=opt(names), shard_count=st.integers(1, 4096),
                               cutover=st.sampled_from(["parallel", "ordered"])),
    m.SetMaxConcurrency: st.builds(m.SetMaxConcurrency, request_id=request_ids, stream_prefix=names,
                                   consumer_group=names,
                                   max_concurrency=opt(st.integers(min_value=1, max_value=2**63)),
                                   if_group_epoch=opt(st.integers(0, 2**63)),
                                   if_routing_version=opt(st.integers(0, 2**63))),
    m.RemoveMember: st.one_of(
        st.builds(m.RemoveMember, request_id=request_ids, stream_prefix=names,
                  consumer_group=names, member_id=member_ids),
        st.builds(m.RemoveMember, request_id=request_ids, stream_prefix=names,
                  consumer_group=names, instance_id=member_ids)),
    m.Groups: st.builds(m.Groups, request_id=maybe_request_ids, status=statuses,
                        groups=st.lists(group_summaries, max_size=3).map(tuple), error=opt(texts)),
    m.GroupDescription: st.builds(
        m.GroupDescription, request_id=maybe_request_ids, status=statuses, stream_prefix=texts,
        consumer_group=texts, state=opt(st.sampled_from(GroupState)), group_epoch=opt(ints),
        assignment_epoch=opt(ints), max_concurrency=opt(ints), routing=opt(routing_summaries),
        migration=opt(migrations),
        members=st.lists(member_descriptions, max_size=2).map(tuple),
        target_assignment=assignment_maps, current_assignment=assignment_maps,
        shards=st.lists(shard_descriptions, max_size=2).map(tuple), retention=opt(retentions),
        error=opt(texts)),
    m.ShardCountChanged: st.builds(
        m.ShardCountChanged, request_id=maybe_request_ids, status=statuses, stream_prefix=texts,
        consumer_group=opt(texts), routing=opt(routing_descriptions), migration=opt(migrations),
        error=opt(texts)),
    m.MaxConcurrencyChanged: st.builds(
        m.MaxConcurrencyChanged, request_id=maybe_request_ids, status=statuses, stream_prefix=texts,
        consumer_group=texts, max_concurrency=opt(ints), group_epoch=opt(ints), error=opt(texts)),
    m.MemberRemoved: st.builds(
        m.MemberRemoved, request_id=maybe_request_ids, status=statuses, stream_prefix=texts,
        consumer_group=texts, member_id=opt(texts), group_epoch=opt(ints), error=opt(texts)),
    m.DeleteGroup: st.builds(m.DeleteGroup, request_id=request_ids, stream_prefix=names,
                             consumer_group=names, if_group_epoch=opt(st.integers(0, 2**63)),
                             if_routing_version=opt(st.integers(0, 2**63))),
    m.GroupDeleted: st.builds(m.GroupDeleted, request_id=maybe_request_ids, status=statuses,
                              stream_prefix=texts, consumer_group=texts, error=opt(texts)),
    m.ResetOffsets: st.one_of(
        st.builds(m.ResetOffsets, request_id=request_ids, stream_prefix=names, consumer_group=names,
                  to=st.sampled_from(["earliest", "latest"])),
        st.builds(m.ResetOffsets, request_id=request_ids, stream_prefix=names, consumer_group=names,
                  to=st.just("timestamp"), timestamp_ms=st.integers(0, 2**63))),
    m.OffsetsReset: st.builds(
        m.OffsetsReset, request_id=maybe_request_ids, status=statuses, stream_prefix=texts,
        consumer_group=texts, error=opt(texts),
        shards=st.lists(st.builds(m.ShardOffset, shard=texts, last_delivered_id=texts),
                        max_size=3).map(tuple)),
    m.ErrorResponse: st.builds(m.ErrorResponse, request_id=maybe_request_ids, status=statuses,
                               error=texts),
    m.SetRetention: st.builds(m.SetRetention, request_id=request_ids, stream_prefix=names,
                              retention=retentions, dead_letters_of=opt(names)),
    m.RetentionChanged: st.builds(m.RetentionChanged, request_id=maybe_request_ids, status=statuses,
                                  stream_prefix=texts, retention=opt(retentions),
                                  dead_letters_of=opt(texts), error=opt(texts)),
    m.GetFormatVersion: st.builds(m.GetFormatVersion, request_id=request_ids),
    m.FormatVersion: st.builds(m.FormatVersion, request_id=maybe_request_ids, status=statuses,
                               format_version=opt(st.integers(1, 2**31)),
                               latest_format_version=opt(st.integers(1, 2**31)), error=opt(texts)),
    m.SetFormatVersion: st.builds(m.SetFormatVersion, request_id=request_ids,
                                  format_version=st.integers(1, 2**63)),
    m.FormatVersionChanged: st.builds(m.FormatVersionChanged, request_id=maybe_request_ids,
                                      status=statuses, format_version=opt(st.integers(1, 2**31)),
                                      previous_format_version=opt(st.integers(1, 2**31)),
                                      error=opt(texts)),
    m.ListDeadLetters: st.builds(m.ListDeadLetters, request_id=request_ids, stream_prefix=names,
                                 consumer_group=names, count=st.integers(1, 1000),
                                 after=opt(texts)),
    m.DeadLetters: st.builds(
        m.DeadLetters, request_id=maybe_request_ids, status=statuses, stream_prefix=texts,
        consumer_group=texts, stream=opt(texts), count=st.integers(0, 2**31),
        oldest_ms=opt(ints), newest_ms=opt(ints),
        errors_by_type=st.dictionaries(texts, st.integers(0, 2**31), max_size=3),
        retention=opt(retentions),
        entries=st.lists(st.builds(
            m.DeadLetterEntry, id=texts, source_stream=opt(texts), source_id=opt(texts),
            consumer_group=opt(texts), deliveries=opt(ints), error=opt(texts),
            member_id=opt(texts), dead_at_ms=opt(ints), key=opt(texts), value=texts,
            redriven=st.integers(0, 100)), max_size=3).map(tuple),
        error=opt(texts)),
    m.RedriveDeadLetters: st.builds(
        m.RedriveDeadLetters, request_id=request_ids, stream_prefix=names, consumer_group=names,
        dry_run=st.booleans(), max=st.integers(1, 1_000_000), ids=shard_lists,
        force=st.booleans()),
    m.DeadLettersRedriven: st.builds(
        m.DeadLettersRedriven, request_id=maybe_request_ids, status=statuses, stream_prefix=texts,
        consumer_group=texts, stream=opt(texts), dry_run=st.booleans(),
        redriven=st.lists(st.builds(m.RedrivenEntry, id=texts, shard=texts, new_id=opt(texts)),
                          max_size=3).map(tuple),
        skipped=st.lists(st.builds(m.SkippedDeadLetter, id=texts, reason=texts),
                         max_size=3).map(tuple),
        error=opt(texts)),
    m.ReadAudit: st.builds(m.ReadAudit, request_id=request_ids, count=st.integers(1, 1000),
                           before_id=opt(texts)),
    m.AuditEntries: st.builds(
        m.AuditEntries, request_id=maybe_request_ids, status=statuses, error=opt(texts),
        entries=st.lists(st.dictionaries(texts, st.none() | st.integers(0, 2**53) | texts,
                                         max_size=4), max_size=3).map(tuple)),
    m.ReadShard: st.builds(m.ReadShard, request_id=request_ids, stream_prefix=names, shard=names,
                           newest_first=st.booleans(), from_id=opt(entry_ids),
                           count=st.integers(1, 50)),
    m.ShardEntries: st.builds(m.ShardEntries, request_id=maybe_request_ids, status=statuses,
                              stream_prefix=texts, shard=texts, length=opt(ints),
                              entries=stream_entries, next_id=opt(texts), error=opt(texts)),
    m.FindKey: st.builds(m.FindKey, request_id=request_ids, stream_prefix=names, key=texts,
                         continue_id=opt(entry_ids), count=st.integers(1, 50)),
    m.KeyEntries: st.builds(m.KeyEntries, request_id=maybe_request_ids, status=statuses,
                            stream_prefix=texts, key=texts, shard=opt(texts),
                            scanned=st.integers(0, 10_000), entries=stream_entries,
                            continue_id=opt(texts), shards=st.tuples(texts) | st.just(()),
                            error=opt(texts)),
    m.ListPending: st.builds(m.ListPending, request_id=request_ids, stream_prefix=names,
                             consumer_group=names, shard=names, after_id=opt(entry_ids),
                             count=st.integers(1, 50)),
    m.PendingEntries: st.builds(
        m.PendingEntries, request_id=maybe_request_ids, status=statuses, stream_prefix=texts,
        consumer_group=texts, shard=texts, pending=st.integers(0, 2**31),
        entries=st.lists(st.builds(m.PendingEntry, id=texts, owner=texts,
                                   idle_ms=st.integers(0, 2**40), deliveries=st.integers(0, 100)),
                         max_size=3).map(tuple),
        next_id=opt(texts), error=opt(texts)),
}


def test_strategies_cover_every_message_class() -> None:
    assert set(STRATEGIES) == set(MESSAGE_TYPES.values())
    assert {cls.TYPE for cls in STRATEGIES} == set(MESSAGE_TYPES)


@pytest.mark.parametrize("cls", list(STRATEGIES), ids=lambda cls: cls.TYPE)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip(cls: type[m.Message], data: st.DataObject) -> None:
    message = data.draw(STRATEGIES[cls])
    text = encode(message)
    text.encode("utf-8")  # a valid UTF-8 text frame
    decoded = decode(text, _endpoint(cls))
    assert decoded == message
    assert type(decoded) is cls
    if hasattr(decoded, "status"):
        assert type(decoded.status) is Status
    assert json.loads(text)["type"] == cls.TYPE
    assert decode_object(json.loads(text)) == message


# --- 3. malformed input: one ProtocolError naming the wire field ---------------------------------

HEARTBEAT: dict[str, Any] = {
    "type": "heartbeat", "requestId": 7, "streamPrefix": "orders", "consumerGroup": "billing",
    "memberId": MEMBER, "memberEpoch": 0, "capacity": 8, "ownedShards": [], "revokingShards": []}
GET_ROUTING: dict[str, Any] = {"type": "getRouting", "requestId": 1, "streamPrefix": "orders",
                               "subscribe": True}
LIST_GROUPS: dict[str, Any] = {"type": "listGroups", "requestId": 2}
DESCRIBE_GROUP: dict[str, Any] = {"type": "describeGroup", "requestId": 3, "streamPrefix": "orders",
                                  "consumerGroup": "billing"}
SET_SHARD_COUNT: dict[str, Any] = {"type": "setShardCount", "requestId": 4, "streamPrefix": "orders",
                                   "consumerGroup": "billing", "shardCount": 8, "cutover": "ordered"}
SET_MAX_CONCURRENCY: dict[str, Any] = {"type": "setMaxConcurrency", "requestId": 5,
                                       "streamPrefix": "orders", "consumerGroup": "billing",
                                       "maxConcurrency": 4}
REMOVE_MEMBER: dict[str, Any] = {"type": "removeMember", "requestId": 6, "streamPrefix": "orders",
                                 "consumerGroup": "billing", "memberId": MEMBER}
DELETE_GROUP: dict[str, Any] = {"type": "deleteGroup", "requestId": 7, "streamPrefix": "orders",
                                "consumerGroup": "billing"}
RESET_OFFSETS: dict[str, Any] = {"type": "resetOffsets", "requestId": 8, "streamPrefix": "orders",
                                 "consumerGroup": "billing", "to": "timestamp",
                                 "timestampMs": 1733040000000}

SET_RETENTION: dict[str, Any] = {"type": "setRetention", "requestId": 9, "streamPrefix": "orders",
                                 "retention": {"mode": "none", "maxLength": 5, "maxAgeMs": None}}

REQUESTS = [HEARTBEAT, GET_ROUTING, LIST_GROUPS, DESCRIBE_GROUP, SET_SHARD_COUNT, SET_MAX_CONCURRENCY,
            REMOVE_MEMBER, DELETE_GROUP, RESET_OFFSETS, SET_RETENTION]
OPTIONAL = {"capacity", "ownedShards", "revokingShards", "subscribe", "cutover", "dryRun"}


def endpoint_of(obj: dict[str, Any]) -> frozenset[str]:
    return MEMBER_REQUESTS if obj["type"] in MEMBER_REQUESTS else ADMIN_REQUESTS


def reject(obj: Any, allowed: frozenset[str] | None = None) -> ProtocolError:
    """Decode `obj` (a JSON value, or raw text/bytes) and return the ProtocolError it must raise."""
    if isinstance(obj, dict) and allowed is None:
        allowed = endpoint_of(obj) if obj.get("type") in MEMBER_REQUESTS | ADMIN_REQUESTS else None
    text = obj if isinstance(obj, (str, bytes)) else json.dumps(obj)
    with pytest.raises(ProtocolError) as caught:
        decode(text, allowed)
    error = caught.value
    assert error.message and str(error) == error.message
    error.message.encode("utf-8")  # fits in an error response
    return error


def assert_names(error: ProtocolError, field: str, request_id: int | None) -> None:
    assert f"field '{field}'" in error.message, error.message
    assert error.request_id == request_id


def with_(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


def test_requests_are_valid() -> None:
    for obj in REQUESTS:
        decode(json.dumps(obj), endpoint_of(obj))


@pytest.mark.parametrize("text", ["nope", "{", "", "   ", '{"type": "listGroups", "requestId": 1,}',
                                  "{'type': 'listGroups'}", '{"type": "listGroups"} {}',
                                  '{"requestId": 1' + "1" * 5000 + "}", "[" * 100_000])
def test_not_json(text: str) -> None:
    error = reject(text, ADMIN_REQUESTS)
    assert "JSON" in error.message
    assert error.request_id is None


@pytest.mark.parametrize("text", ["[]", "[{\"type\": \"listGroups\", \"requestId\": 1}]", "7", "7.5",
                                  '"listGroups"', "null", "true", "NaN"])
def test_not_an_object(text: str) -> None:
    error = reject(text, ADMIN_REQUESTS)
    assert "object" in error.message
    assert error.request_id is None


def test_binary_frame() -> None:
    error = reject(json.dumps(LIST_GROUPS).encode(), ADMIN_REQUESTS)
    assert "binary" in error.message
    assert error.request_id is None


@pytest.mark.parametrize("type_", ["fooBar", "Heartbeat", "heart_beat", "", "HEARTBEAT"])
def test_unknown_type(type_: str) -> None:
    for allowed in (MEMBER_REQUESTS, ADMIN_REQUESTS, None):
        assert_names(reject(with_(HEARTBEAT, type=type_), allowed), "type", 7)


@pytest.mark.parametrize("type_", [None, 5, True, ["heartbeat"], {"name": "heartbeat"}])
def test_type_not_a_string(type_: Any) -> None:
    assert_names(reject(with_(HEARTBEAT, type=type_), MEMBER_REQUESTS), "type", 7)


def test_type_missing() -> None:
    obj = dict(HEARTBEAT)
    del obj["type"]
    assert_names(reject(obj, MEMBER_REQUESTS), "type", 7)


@pytest.mark.parametrize("obj", [HEARTBEAT, GET_ROUTING], ids=lambda o: o["type"])
def test_member_request_on_admin_endpoint(obj: dict[str, Any]) -> None:
    error = reject(obj, ADMIN_REQUESTS)
    assert_names(error, "type", obj["requestId"])
    assert repr(obj["type"]) in error.message


@pytest.mark.parametrize("obj", [LIST_GROUPS, DESCRIBE_GROUP, SET_SHARD_COUNT, SET_MAX_CONCURRENCY,
                                 REMOVE_MEMBER, DELETE_GROUP, RESET_OFFSETS], ids=lambda o: o["type"])
def test_admin_request_on_member_endpoint(obj: dict[str, Any]) -> None:
    assert_names(reject(obj, MEMBER_REQUESTS), "type", obj["requestId"])


@pytest.mark.parametrize("type_", sorted(set(MESSAGE_TYPES) - MEMBER_REQUESTS - ADMIN_REQUESTS))
def test_responses_and_pushes_are_no_requests(type_: str) -> None:
    for allowed in (MEMBER_REQUESTS, ADMIN_REQUESTS):
        assert_names(reject({"type": type_, "requestId": 9}, allowed), "type", 9)


@pytest.mark.parametrize(("to", "timestamp", "problem"), [
    ("timestamp", None, "required"), ("latest", 5, "only allowed"), ("earliest", 0, "only allowed"),
    ("timestamp", -1, ">= 0")])
def test_reset_offsets_timestamp_goes_with_to_timestamp(to: str, timestamp: int | None,
                                                        problem: str) -> None:
    obj = {k: v for k, v in with_(RESET_OFFSETS, to=to, timestampMs=timestamp).items()
           if v is not None}
    error = reject(obj, ADMIN_REQUESTS)
    assert_names(error, "timestampMs", 8)
    assert problem in error.message


@pytest.mark.parametrize(("retention", "field", "problem"), [
    ({"mode": "forever", "maxLength": None, "maxAgeMs": None}, "retention.mode", "unknown value"),
    ({"mode": "none", "maxLength": 0, "maxAgeMs": None}, "maxLength", ">= 1"),
    ({"mode": "acked", "maxLength": None, "maxAgeMs": -5}, "maxAgeMs", ">= 1"),
    ({"mode": "acked", "maxLength": "10", "maxAgeMs": None}, "retention.maxLength", "integer")])
def test_set_retention_rejects_bad_retention_naming_the_field(retention: dict[str, Any], field: str,
                                                              problem: str) -> None:
    error = reject(with_(SET_RETENTION, retention=retention), ADMIN_REQUESTS)
    assert_names(error, field, 9)
    assert problem in error.message


def test_endpoint_sets() -> None:
    assert MEMBER_REQUESTS == {"heartbeat", "getRouting"}
    assert ADMIN_REQUESTS == {"listGroups", "describeGroup", "setShardCount", "setMaxConcurrency",
                              "removeMember", "deleteGroup", "resetOffsets", "setRetention",
                              "getFormatVersion", "setFormatVersion", "listDeadLetters",
                              "redriveDeadLetters", "readAudit", "readShard", "findKey",
                              "listPending"}


OPTIONAL_IN = {"setShardCount": {"consumerGroup"}}  # G1: optional there, required elsewhere
MISSING = [(obj, key) for obj in REQUESTS for key in obj
           if key not in OPTIONAL | OPTIONAL_IN.get(obj["type"], set()) | {"type"}]


@pytest.mark.parametrize(("obj", "key"), MISSING, ids=[f"{o['type']}.{k}" for o, k in MISSING])
def test_missing_field(obj: dict[str, Any], key: str) -> None:
    incomplete = {k: v for k, v in obj.items() if k != key}
    error = reject(incomplete)
    assert_names(error, key, None if key == "requestId" else obj["requestId"])
    assert "missing" in error.message


def test_optional_fields_may_be_absent() -> None:
    for obj in REQUESTS:
        decode(json.dumps({k: v for k, v in obj.items() if k not in OPTIONAL}), endpoint_of(obj))
    bare = decode(json.dumps({k: v for k, v in HEARTBEAT.items() if k not in OPTIONAL}))
    assert isinstance(bare, m.Heartbeat)
    assert (bare.capacity, bare.owned_shards, bare.revoking_shards) == (None, None, ())
    bare_set = decode(json.dumps({k: v for k, v in SET_SHARD_COUNT.items() if k != "cutover"}))
    assert isinstance(bare_set, m.SetShardCount) and bare_set.cutover == "parallel"
    routing = decode(json.dumps({k: v for k, v in GET_ROUTING.items() if k != "subscribe"}))
    assert isinstance(routing, m.GetRouting) and routing.subscribe is False


ILL_TYPED: list[tuple[dict[str, Any], str, Any, str]] = [
    # string for int
    (HEARTBEAT, "memberEpoch", "0", "memberEpoch"),
    (HEARTBEAT, "capacity", "8", "capacity"),
    (SET_SHARD_COUNT, "shardCount", "8", "shardCount"),
    (SET_MAX_CONCURRENCY, "maxConcurrency", "4", "maxConcurrency"),
    (LIST_GROUPS, "requestId", "2", "requestId"),
    # bool for int
    (HEARTBEAT, "memberEpoch", False, "memberEpoch"),
    (HEARTBEAT, "capacity", True, "capacity"),
    (SET_SHARD_COUNT, "shardCount", True, "shardCount"),
    (SET_MAX_CONCURRENCY, "maxConcurrency", True, "maxConcurrency"),
    (HEARTBEAT, "requestId", True, "requestId"),
    # float for int, also integral floats
    (HEARTBEAT, "memberEpoch", 1.5, "memberEpoch"),
    (HEARTBEAT, "memberEpoch", 0.0, "memberEpoch"),
    (HEARTBEAT, "capacity", 8.0, "capacity"),
    (SET_SHARD_COUNT, "shardCount", 8.0, "shardCount"),
    (SET_MAX_CONCURRENCY, "maxConcurrency", 4.0, "maxConcurrency"),
    (DESCRIBE_GROUP, "requestId", 3.0, "requestId"),
    (HEARTBEAT, "memberEpoch", 1e300, "memberEpoch"),
    # int (and others) for string
    (HEARTBEAT, "streamPrefix", 1, "streamPrefix"),
    (HEARTBEAT, "consumerGroup", 2, "consumerGroup"),
    (HEARTBEAT, "memberId", 3, "memberId"),
    (GET_ROUTING, "streamPrefix", 1, "streamPrefix"),
    (REMOVE_MEMBER, "memberId", 42, "memberId"),
    (DESCRIBE_GROUP, "consumerGroup", True, "consumerGroup"),
    (SET_SHARD_COUNT, "streamPrefix", ["orders"], "streamPrefix"),
    (SET_MAX_CONCURRENCY, "consumerGroup", {"name": "billing"}, "consumerGroup"),
    # null where a value is required
    (HEARTBEAT, "memberId", None, "memberId"),
    (HEARTBEAT, "memberEpoch", None, "memberEpoch"),
    (SET_SHARD_COUNT, "shardCount", None, "shardCount"),
    (REMOVE_MEMBER, "streamPrefix", None, "streamPrefix"),
    (HEARTBEAT, "requestId", None, "requestId"),
    (HEARTBEAT, "revokingShards", None, "revokingShards"),
    # bool fields
    (GET_ROUTING, "subscribe", "yes", "subscribe"),
    (GET_ROUTING, "subscribe", 1, "subscribe"),
    (GET_ROUTING, "subscribe", None, "subscribe"),
    # arrays and their items, with the index in the path
    (HEARTBEAT, "ownedShards", "orders:v1:0", "ownedShards"),
    (HEARTBEAT, "ownedShards", {"0": "orders:v1:0"}, "ownedShards"),
    (HEARTBEAT, "ownedShards", ["orders:v1:0", 1], "ownedShards[1]"),
    (HEARTBEAT, "ownedShards", [None], "ownedShards[0]"),
    (HEARTBEAT, "ownedShards", ["a", "b", ["c"]], "ownedShards[2]"),
    (HEARTBEAT, "revokingShards", {"shard": "a", "state": "REVOKED"}, "revokingShards"),
    (HEARTBEAT, "revokingShards", [{"shard": "a", "state": "REVOKED"}, "b"], "revokingShards[1]"),
    (HEARTBEAT, "revokingShards", [7], "revokingShards[0]"),
    (HEARTBEAT, "revokingShards", [None], "revokingShards[0]"),
    (HEARTBEAT, "revokingShards", [["a", "REVOKED"]], "revokingShards[0]"),
    (HEARTBEAT, "revokingShards", [{"shard": 3, "state": "REVOKED"}], "revokingShards[0].shard"),
    (HEARTBEAT, "revokingShards", [{"state": "REVOKED"}], "revokingShards[0].shard"),
    (HEARTBEAT, "revokingShards", [{"shard": "a", "state": "REVOKED"}, {"shard": "b"}],
     "revokingShards[1].state"),
    (HEARTBEAT, "revokingShards", [{"shard": "a", "state": None}], "revokingShards[0].state"),
    # unknown enum strings
    (HEARTBEAT, "revokingShards", [{"shard": "a", "state": "DONE"}], "revokingShards[0].state"),
    (HEARTBEAT, "revokingShards", [{"shard": "a", "state": "revoked"}], "revokingShards[0].state"),
    (HEARTBEAT, "revokingShards", [{"shard": "a", "state": ""}], "revokingShards[0].state"),
    (HEARTBEAT, "revokingShards", [{"shard": "a", "state": 1}], "revokingShards[0].state"),
    (SET_SHARD_COUNT, "cutover", "serial", "cutover"),
    (SET_SHARD_COUNT, "cutover", "PARALLEL", "cutover"),
    (SET_SHARD_COUNT, "cutover", "", "cutover"),
    (SET_SHARD_COUNT, "cutover", None, "cutover"),
    (SET_SHARD_COUNT, "cutover", 0, "cutover"),
    # out-of-range numbers
    (HEARTBEAT, "memberEpoch", -3, "memberEpoch"),
    (HEARTBEAT, "instanceId", 7, "instanceId"),
    (HEARTBEAT, "instanceId", ["a"], "instanceId"),
    (HEARTBEAT, "memberEpoch", -(2**63), "memberEpoch"),
    (HEARTBEAT, "capacity", 0, "capacity"),
    (HEARTBEAT, "capacity", -1, "capacity"),
    (SET_SHARD_COUNT, "shardCount", 0, "shardCount"),
    (SET_SHARD_COUNT, "shardCount", -8, "shardCount"),
    (SET_SHARD_COUNT, "shardCount", 4097, "shardCount"),
    (SET_SHARD_COUNT, "shardCount", 2**64, "shardCount"),
    (SET_MAX_CONCURRENCY, "maxConcurrency", 0, "maxConcurrency"),
    (SET_MAX_CONCURRENCY, "maxConcurrency", -3, "maxConcurrency"),
]


@pytest.mark.parametrize(("obj", "key", "value", "path"), ILL_TYPED,
                         ids=[f"{o['type']}.{k}={v!r}"[:60] for o, k, v, _ in ILL_TYPED])
def test_ill_typed_or_out_of_range(obj: dict[str, Any], key: str, value: Any, path: str) -> None:
    error = reject(with_(obj, **{key: value}))
    assert_names(error, path, None if key == "requestId" else obj["requestId"])


def test_messages_use_wire_names_not_attribute_names() -> None:
    for obj, key, value, _ in ILL_TYPED:
        error = reject(with_(obj, **{key: value}))
        for attribute in ("member_epoch", "shard_count", "max_concurrency", "request_id",
                          "owned_shards", "revoking_shards", "stream_prefix", "consumer_group",
                          "member_id"):
            assert attribute not in error.message


def test_range_boundaries_are_accepted() -> None:
    for obj in (with_(HEARTBEAT, memberEpoch=-1), with_(HEARTBEAT, memberEpoch=-2),
                with_(HEARTBEAT, capacity=1), with_(HEARTBEAT, instanceId=None),
                with_(HEARTBEAT, memberEpoch=2**62, capacity=2**40),
                with_(SET_SHARD_COUNT, shardCount=1), with_(SET_SHARD_COUNT, shardCount=4096),
                with_(SET_MAX_CONCURRENCY, maxConcurrency=1),
                with_(SET_MAX_CONCURRENCY, maxConcurrency=None),
                with_(HEARTBEAT, ownedShards=None), with_(HEARTBEAT, capacity=None),
                with_(LIST_GROUPS, requestId=-5), with_(LIST_GROUPS, requestId=0)):
        decode(json.dumps(obj), endpoint_of(obj))


def test_unknown_extra_fields_are_ignored() -> None:
    message = decode(json.dumps(with_(HEARTBEAT, rackId="eu-1", future={"x": [1]})), MEMBER_REQUESTS)
    assert message == decode(json.dumps(HEARTBEAT), MEMBER_REQUESTS)


BAD_NAMES = ["", "x" * 201, "a\x00b", "a\nb", "\t", "orders\r", "\x1b[31m", "\x7f", "a\x85b", "\x9f",
             "a{b", "b}", "{orders}", "{", "}"]
BAD_MEMBER_IDS = ["", "x" * 201, "a\x00b", "m\n", "\x7f", "\x85", "\u0001{x}"]
NAME_FIELDS = [(obj, key) for obj in REQUESTS for key in ("streamPrefix", "consumerGroup") if key in obj]


@pytest.mark.parametrize(("obj", "key"), NAME_FIELDS, ids=[f"{o['type']}.{k}" for o, k in NAME_FIELDS])
def test_bad_stream_prefix_and_consumer_group(obj: dict[str, Any], key: str) -> None:
    for name in BAD_NAMES:
        assert_names(reject(with_(obj, **{key: name})), key, obj["requestId"])


@pytest.mark.parametrize("obj", [HEARTBEAT, REMOVE_MEMBER], ids=lambda o: o["type"])
def test_bad_member_id(obj: dict[str, Any]) -> None:
    for name in BAD_MEMBER_IDS:
        assert_names(reject(with_(obj, memberId=name)), "memberId", obj["requestId"])


@pytest.mark.parametrize("obj", [HEARTBEAT, REMOVE_MEMBER], ids=lambda o: o["type"])
def test_member_id_may_contain_braces(obj: dict[str, Any]) -> None:
    for name in ("{x}", "a{b", "}", "pod-{1}-{2}"):
        message = decode(json.dumps(with_(obj, memberId=name)), endpoint_of(obj))
        assert isinstance(message, (m.Heartbeat, m.RemoveMember)) and message.member_id == name


REMOVE_BY_INSTANCE: dict[str, Any] = {"type": "removeMember", "requestId": 6, "streamPrefix": "orders",
                                      "consumerGroup": "billing", "instanceId": "billing-0"}


@pytest.mark.parametrize("obj", [with_(HEARTBEAT, instanceId="billing-0"), REMOVE_BY_INSTANCE],
                         ids=lambda o: o["type"])
def test_s1_instance_id_follows_the_member_id_rules(obj: dict[str, Any]) -> None:
    for name in BAD_MEMBER_IDS:
        assert_names(reject(with_(obj, instanceId=name)), "instanceId", obj["requestId"])
    for name in ("{x}", "pod-{1}", "billing-0", "x" * 200):
        message = decode(json.dumps(with_(obj, instanceId=name)), endpoint_of(obj))
        assert isinstance(message, (m.Heartbeat, m.RemoveMember)) and message.instance_id == name


def test_s5_remove_member_names_exactly_one_of_member_id_and_instance_id() -> None:
    both = reject(with_(REMOVE_MEMBER, instanceId="billing-0"))
    assert both.message == "field 'memberId' and field 'instanceId' are both set; name exactly one"
    assert both.request_id == 6
    neither = reject({k: v for k, v in REMOVE_MEMBER.items() if k != "memberId"})
    assert neither.message == ("field 'memberId' or field 'instanceId' is missing "
                               "(removeMember names exactly one)")
    by_instance = decode(json.dumps(REMOVE_BY_INSTANCE), ADMIN_REQUESTS)
    assert by_instance == m.RemoveMember(request_id=6, stream_prefix="orders",
                                         consumer_group="billing", instance_id="billing-0")
    with pytest.raises(ValueError):
        m.RemoveMember(request_id=1, stream_prefix="o", consumer_group="g")


def test_good_names_are_accepted() -> None:
    for name in ("o", "x" * 200, "orders.eu-1", "訂單", "zürich", "with space", "a:b:c", "🙂" * 200,
                 "line\u2028sep"):  # U+2028 is Zl, not Cc
        for obj, key in NAME_FIELDS:
            decode(json.dumps(with_(obj, **{key: name})), endpoint_of(obj))
        decode(json.dumps(with_(HEARTBEAT, memberId=name)), MEMBER_REQUESTS)


def test_lone_surrogate_is_rejected() -> None:
    """A "\\ud800" escape is valid JSON syntax but no UTF-8 string: it could not be sent or stored."""
    text = json.dumps(HEARTBEAT).replace('"orders"', '"ord\\ud800ers"')
    assert_names(reject(text, MEMBER_REQUESTS), "streamPrefix", 7)
    text = json.dumps(with_(HEARTBEAT, ownedShards=["x"])).replace('["x"]', '["x\\udfff"]')
    assert_names(reject(text, MEMBER_REQUESTS), "ownedShards[0]", 7)
    paired = json.dumps(HEARTBEAT).replace('"orders"', '"ord\\ud83d\\ude00ers"')
    assert decode(paired, MEMBER_REQUESTS).stream_prefix == "ord😀ers"  # type: ignore[attr-defined]


def test_unknown_status_in_a_response_is_rejected() -> None:
    for status in ("NOPE", "ok", "", None, 0, ["OK"]):
        error = reject({"type": "groups", "requestId": 2, "status": status, "groups": []})
        assert_names(error, "status", 2)


def test_nested_response_fields_name_their_path() -> None:
    response = {"type": "heartbeatResponse", "requestId": 7, "status": "OK", "memberId": MEMBER}
    assert_names(reject(with_(response, routing={"version": 1})), "routing.shardCount", 7)
    assert_names(reject(with_(response, routing=1)), "routing", 7)
    assert_names(reject(with_(response, assignment={"assignedShards": ["a", 2]})),
                 "assignment.assignedShards[1]", 7)
    description = {"type": "groupDescription", "requestId": 3, "status": "OK",
                   "streamPrefix": "orders", "consumerGroup": "billing"}
    assert_names(reject(with_(description, members=[{"memberId": "m"}])), "members[0].memberEpoch", 3)
    assert_names(reject(with_(description, targetAssignment=["m"])), "targetAssignment", 3)
    assert_names(reject(with_(description, targetAssignment={"m": ["a", 2]})),
                 'targetAssignment["m"][1]', 3)
    groups = {"type": "groups", "requestId": 2, "status": "OK"}
    assert_names(reject(with_(groups, groups=[{"streamPrefix": "o"}])), "groups[0].consumerGroup", 2)


# --- fuzz: decode never raises anything but ProtocolError ------------------------------------------

json_scalars = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True)
                | st.text(max_size=20) | st.sampled_from(["heartbeat", "REVOKED", "ordered", "OK"])
                | st.sampled_from(["\ud800", "a\udfffb", "{x}", "\x00", "x" * 201]))
json_values = st.recursive(
    json_scalars,
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=15) | st.sampled_from(["type", "requestId", "shard", "state"]),
                      children, max_size=4),
    max_leaves=12,
)
endpoints = st.sampled_from([MEMBER_REQUESTS, ADMIN_REQUESTS, None])
KNOWN = [*REQUESTS, *(json.loads(e[1]) for e in EXAMPLES)]


def check_decode(text: str | bytes, allowed: frozenset[str] | None) -> m.Message | None:
    """decode(text) returns a message or raises ProtocolError; either way it can be answered."""
    try:
        message = decode(text, allowed)
    except ProtocolError as error:
        assert isinstance(error.message, str) and error.message
        assert error.request_id is None or type(error.request_id) is int
        json.dumps({"error": error.message}, ensure_ascii=False).encode("utf-8")
        return None
    assert allowed is None or message.TYPE in allowed
    encode(message).encode("utf-8")
    return message


@settings(max_examples=300, deadline=None)
@given(value=json_values, allowed=endpoints)
def test_fuzz_json_values(value: Any, allowed: frozenset[str] | None) -> None:
    check_decode(json.dumps(value), allowed)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=60), allowed=endpoints)
def test_fuzz_text(text: str, allowed: frozenset[str] | None) -> None:
    check_decode(text, allowed)


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=40))
def test_fuzz_binary(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode(data)


@settings(max_examples=300, deadline=None)
@given(base=st.sampled_from(KNOWN), data=st.data(), value=json_values)
def test_fuzz_one_field_replaced(base: dict[str, Any], data: st.DataObject, value: Any) -> None:
    """Replace one field of a valid message: it still decodes, or the error names that field."""
    key = data.draw(st.sampled_from(sorted(base)))
    # another valid `type` makes it another message, whose own fields are then missing
    other_type = isinstance(value, str) and value in MESSAGE_TYPES and value != base["type"]
    assume(not (key == "type" and other_type))
    obj = with_(base, **{key: value})
    request_id = obj.get("requestId") if type(obj.get("requestId")) is int else None
    try:
        decode(json.dumps(obj))
    except ProtocolError as error:
        assert f"field '{key}" in error.message, (key, error.message)
        assert error.request_id == request_id


@settings(max_examples=300, deadline=None)
@given(base=st.sampled_from(REQUESTS), data=st.data(), value=json_values)
def test_fuzz_request_fields_on_their_endpoint(base: dict[str, Any], data: st.DataObject,
                                               value: Any) -> None:
    key = data.draw(st.sampled_from(sorted(set(base) - {"type"})))
    message = check_decode(json.dumps(with_(base, **{key: value})), endpoint_of(base))
    if message is not None:
        # Whatever was accepted is a valid instance: its validators hold on re-construction.
        assert attrs.evolve(message) == message  # type: ignore[misc]  # every Message is attrs


def test_k8_a_join_and_a_get_routing_carry_the_known_store_id_and_routing() -> None:
    known = m.KnownRouting(version=3, shard_count=8, hash="crc32")
    join = m.Heartbeat(request_id=1, stream_prefix="orders", consumer_group="billing",
                       member_id="m-1", member_epoch=0, known_store_id="ab12",
                       known_routing=known)
    wire = json.loads(encode(join))
    assert wire["knownStoreId"] == "ab12"
    assert wire["knownRouting"] == {"version": 3, "shardCount": 8, "hash": "crc32"}
    assert decode(encode(join), MEMBER_REQUESTS) == join  # through the converter, not dropped
    ask = m.GetRouting(request_id=2, stream_prefix="orders", known_store_id="ab12",
                       known_routing=known)
    assert decode(encode(ask), MEMBER_REQUESTS) == ask
    plain = m.GetRouting(request_id=2, stream_prefix="orders")
    assert "knownStoreId" not in json.loads(encode(plain))  # left out while unknown
    with pytest.raises(ProtocolError, match="shardCount.*>= 1"):
        decode('{"type": "getRouting", "requestId": 1, "streamPrefix": "o", '
               '"knownRouting": {"version": 1, "shardCount": 0, "hash": "crc32"}}')
