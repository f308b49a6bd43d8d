"""rsc/common/coordinator_url.py: one check of a coordinator URL and one hint table, for the
member tools (member/session.py) and the admin client (rsc/admin/client.py) alike."""

from __future__ import annotations

import pytest

from rsc.admin.client import AdminConnectError, parse_coordinator_url
from rsc.common.coordinator_url import handshake_hint, host_port, url_problem
from rsc.member.session import BadCoordinatorUrl, check_coordinator_url, refused


@pytest.mark.parametrize(("url", "problem"), [
    ("127.0.0.1:8765", "it has no scheme"),
    ("http://h:1", "the coordinator speaks WebSocket: use ws://h:1"),
    ("https://h:1", "use wss://h:1"),
    ("redis://:pw@h:6379/0", "that is a Redis URL"),
    ("redis+sentinel://h:26379/mymaster", "that is a Redis URL"),
    ("ftp://h:1", "the scheme is ftp://"),
    ("ws://:8765", "it has no host"),
    ("ws://h:0", "port 0 is not in 1..65535"),
    ("ws://h:x", "port x is not in 1..65535"),
    ("ws://h:1?a=b", "query or fragment"),
])
def test_both_clients_refuse_the_same_urls_for_the_same_reason(url, problem):
    found = url_problem(url)
    assert found is not None and problem in found
    with pytest.raises(BadCoordinatorUrl) as member:
        check_coordinator_url(url)
    with pytest.raises(AdminConnectError) as admin:
        parse_coordinator_url(url)
    assert str(member.value).endswith(found) and str(admin.value).endswith(found)
    assert "pw" not in str(member.value) + str(admin.value), "K7: a password in a Redis URL"


@pytest.mark.parametrize("url", ["ws://127.0.0.1:8765", "wss://coord.example:443/", "ws://[::1]:1",
                                 "ws://h"])
def test_good_urls_have_no_problem(url):
    assert url_problem(url) is None
    assert check_coordinator_url(url) == url.rstrip("/")
    parse_coordinator_url(url)


def test_the_hint_of_each_status_is_the_same_for_every_client():
    assert host_port("ws://h") == "h:80" and host_port("wss://h/x") == "h:443"
    for status in (400, 401, 404, 503):
        member = refused("ws://h:1", "member", status).line
        hint = handshake_hint(status, endpoint="member", hostport="h:1", token_given=False)
        assert hint is not None and member.endswith(hint)
    assert "needs its admin token" in (handshake_hint(401, endpoint="admin", hostport="h:1",
                                                      token_given=False) or "")
    assert "is not the coordinator's member token" in refused(
        "ws://h:1", "member", 401, token_given=True).line
    assert handshake_hint(500, endpoint="admin", hostport="h:1", token_given=False) is None
