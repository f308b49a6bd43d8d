"""Names are printed literally: never read as rich markup or emoji codes (pure, no I/O).

Every view is rendered on a console with markup and emoji ON (rich's defaults), so a
view that handed a name to rich as a markup string would fail here.
"""

from __future__ import annotations

import json

import pytest
from rich.console import Console, RenderableType

from rsc.admin.describe import describe_view
from rsc.admin.view_text import display_name
from rsc.admin.views import (
    groups_view,
    member_removed_view,
    response_view,
    shard_count_changed_view,
)
from rsc.admin.watch_view import change_lines, waiting_view, watch_header
from rsc.protocol import GroupDescription, Groups, MemberRemoved, Status, decode

MARKUP_LIKE = ["p[/]", "[red]x[/red]", "[bold]", "[/]", "a[b]c", "[link=http://x]y[/link]"]
EMOJI_LIKE = ["a:b", ":smile:", ":b:", "x:thumbs_up:y"]
CONTROL_LOOKING = ["\\x1b[31m", "\\n", "%s%n", "$(reboot)"]
LITERAL_NAMES = MARKUP_LIKE + EMOJI_LIKE + CONTROL_LOOKING
INVISIBLE = {"rtl\u202eoverride": "rtl\\u202eoverride", "zero\u200bwidth": "zero\\u200bwidth"}


def render(renderable: RenderableType, width: int = 200) -> str:
    """Render like a user's default console would: markup and emoji codes are interpreted."""
    console = Console(width=width, color_system=None, highlight=False, markup=True, emoji=True,
                      record=True)
    with console.capture() as capture:
        console.print(renderable)
    return capture.get()


def described(prefix: str, group: str, member_id: str) -> GroupDescription:
    shard = "{" + prefix + ":v1:0}"
    message = decode(json.dumps({
        "type": "groupDescription", "requestId": 1, "status": "OK", "streamPrefix": prefix,
        "consumerGroup": group, "state": "STABLE", "groupEpoch": 2, "assignmentEpoch": 2,
        "maxConcurrency": None, "routing": {"version": 1, "shardCount": 1}, "migration": None,
        "members": [{"memberId": member_id, "memberEpoch": 2, "state": "STABLE", "capacity": 1,
                     "lastHeartbeatMsAgo": 10, "assignedShards": [shard], "pendingShards": [],
                     "revokingShards": [], "targetShards": [shard]}],
        "targetAssignment": {}, "currentAssignment": {}}))
    assert isinstance(message, GroupDescription)
    return message


def listed(prefix: str, group: str) -> Groups:
    message = decode(json.dumps({"type": "groups", "requestId": 1, "status": "OK", "groups": [
        {"streamPrefix": prefix, "consumerGroup": group, "groupEpoch": 1, "members": 0,
         "shards": 1, "state": "EMPTY"}]}))
    assert isinstance(message, Groups)
    return message


@pytest.mark.parametrize("name", LITERAL_NAMES)
def test_list_prints_prefix_and_group_literally(name):
    text = render(groups_view(listed(name, name)))
    [row] = [line for line in text.splitlines() if "EMPTY" in line]
    assert row.count(name) == 2, row


# member ids may hold braces; prefixes and groups may not (docs/protocol.md Names)
@pytest.mark.parametrize("name", LITERAL_NAMES)
@pytest.mark.parametrize("width", [200, 80])
def test_describe_prints_every_name_literally(name, width):
    text = render(describe_view(described(name, name, name + "{m}")), width=width)
    assert f"{name} / {name}" in text
    rows_with_member = 2 if width == 80 else 1  # narrow: the members and the assignment table
    assert "".join(text.split()).count("".join((name + "{m}").split())) == rows_with_member
    shard_label = "v1:0"
    assert shard_label in text


@pytest.mark.parametrize("name", LITERAL_NAMES)
def test_watch_header_waiting_and_change_lines_print_names_literally(name):
    header = render(watch_header("ws://127.0.0.1:8765", name, name, "server pushes"))
    assert f"watching {name} / {name} on ws://127.0.0.1:8765" in header
    assert f"waiting for group {name} / {name}" in render(waiting_view(name, name))
    before = described(name, name, "m")
    after = described(name, name, name)
    assert f"member {name} joined" in change_lines(before, after)


@pytest.mark.parametrize("name", LITERAL_NAMES)
def test_change_responses_print_names_literally(name):
    removed = MemberRemoved(request_id=1, status=Status.OK, stream_prefix=name,
                            consumer_group=name, member_id=name, group_epoch=3)
    assert render(member_removed_view(removed)).strip() == (
        f"removed member {name} from {name} / {name} (group epoch 3)")
    deleted = {"type": "groupDeleted", "status": "OK", "streamPrefix": name, "consumerGroup": name}
    assert render(response_view(deleted)).strip() == (
        f"deleted group {name} / {name}\n"
        f"its dead letters, if any, are kept (rsc admin dead-letters {name} {name})")
    changed = decode(json.dumps({
        "type": "shardCountChanged", "requestId": 1, "status": "OK", "streamPrefix": name,
        "consumerGroup": name, "routing": None, "migration": None}))
    assert render(shard_count_changed_view(changed)).strip() == (
        f"routing of prefix {name}: unchanged")


@pytest.mark.parametrize(("name", "shown"), INVISIBLE.items())
def test_invisible_characters_are_shown_as_escapes(name, shown):
    assert display_name(name) == shown
    text = render(groups_view(listed(name, "g")))
    assert shown in text and name not in text
    assert shown in render(describe_view(described(name, "g", name)))


def test_ordinary_names_are_unchanged():
    for name in ("orders", "billing-eu", "10.0.0.7-4242-0-aaaa", "café", "注文"):
        assert display_name(name) == name
