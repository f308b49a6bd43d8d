"""K1 and K7 without I/O: Sentinel URLs parsed (errors name what is wrong), passwords from the
environment, and every password masked wherever a URL or a line is shown."""

from __future__ import annotations

import re

import pytest
import redis

from rsc.common.redact import redact_text, redact_url, remember_secret
from rsc.common.redis_connect import (
    REDIS_PASSWORD_ENV,
    SENTINEL_PASSWORD_ENV,
    SentinelServiceUnknown,
    check_redis_url,
    error_text,
    parse_sentinel_url,
)
from rsc.member.redis_io.unrecoverable import (
    redis_error_is_permanent,
    redis_unrecoverable_line,
    redis_url_problem,
)


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://user:S3cretPW@h:6379/0", "redis://user:***@h:6379/0"),
    ("redis://:S3cretPW@h:6379/0", "redis://:***@h:6379/0"),
    ("rediss://u:p%40ss@h/2?ssl_ca_certs=/x.pem", "rediss://u:***@h/2?ssl_ca_certs=/x.pem"),
    ("redis+sentinel://u:pw@a:1,b:2/svc/3?sentinel_password=spw&sentinel_username=s",
     "redis+sentinel://u:***@a:1,b:2/svc/3?sentinel_password=***&sentinel_username=s"),
    ("redis://h:6379/0?password=qp", "redis://h:6379/0?password=***"),
    ("redis://h:6379/0", "redis://h:6379/0"),
    ("redis://user@h/0", "redis://user@h/0"),
])
def test_k7_a_url_is_shown_with_every_password_masked(url, shown):
    assert redact_url(url) == shown


def test_k7_the_safety_net_masks_urls_and_remembered_passwords_in_free_text():
    remember_secret("Rem3mberedPW")
    line = ("cannot reach Redis at redis://app:Inl1nePW@h:1/0: AUTH Rem3mberedPW failed; "
            "sentinel_password=xyz9 left")
    shown = redact_text(line)
    for secret in ("Inl1nePW", "Rem3mberedPW", "xyz9"):
        assert secret not in shown
    assert "redis://app:***@h:1/0" in shown


def test_k1_a_sentinel_url_names_sentinels_service_db_and_credentials():
    target = parse_sentinel_url(
        "rediss+sentinel://app:pw@10.0.0.1:26379,[::1]:26380,sentinel-c/orders/4"
        "?sentinel_username=sen&sentinel_password=spw", environ={})
    assert target.sentinels == (("10.0.0.1", 26379), ("::1", 26380), ("sentinel-c", 26379))
    assert (target.service, target.db, target.tls) == ("orders", 4, True)
    assert (target.username, target.password) == ("app", "pw")
    assert (target.sentinel_username, target.sentinel_password) == ("sen", "spw")


def test_k7_passwords_come_from_the_environment_and_the_url_wins():
    environ = {REDIS_PASSWORD_ENV: "envpw", SENTINEL_PASSWORD_ENV: "envspw"}
    from_env = parse_sentinel_url("redis+sentinel://a:1/svc", environ=environ)
    assert (from_env.password, from_env.sentinel_password) == ("envpw", "envspw")
    in_url = parse_sentinel_url("redis+sentinel://:urlpw@a:1/svc?sentinel_password=urlspw",
                                environ=environ)
    assert (in_url.password, in_url.sentinel_password) == ("urlpw", "urlspw")
    empty = parse_sentinel_url("redis+sentinel://a:1/svc", environ={REDIS_PASSWORD_ENV: ""})
    assert empty.password is None  # empty = unset


@pytest.mark.parametrize(("url", "named"), [
    ("redis+sentinel://a:1", "no SERVICE"),
    ("redis+sentinel://a:1/", "no SERVICE"),
    ("redis+sentinel://a:1/svc/x", "only a db number"),
    ("redis+sentinel://a:1/svc/0/extra", "only a db number"),
    ("redis+sentinel://a:port/svc", "not a port number"),
    ("redis+sentinel://a:1,,b:2/svc", "sentinel address is empty"),
    ("redis+sentinel://a:1/svc?colour=red", "unknown query option 'colour'"),
    ("redis+sentinel://a:1/svc?ssl_ca_certs=/x.pem", "TLS options need rediss+sentinel://"),
    ("http://h/0", "a Redis URL starts with one of"),
])
def test_k1_a_bad_redis_url_names_what_is_wrong(url, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        check_redis_url(url)


def test_k1_every_url_check_accepts_sentinel_urls_and_masks_the_password():
    assert redis_url_problem("redis+sentinel://:pw@a:1,b:2/svc/0") is None
    problem = redis_url_problem("redis+sentinel://:S3cretPW@a:1/svc/notadb")
    assert problem is not None and "only a db number" in problem and "S3cretPW" not in problem
    problem = redis_url_problem("redis://:S3cretPW@h:1/notadb")
    assert problem is not None and "S3cretPW" not in problem


@pytest.mark.parametrize("error", [
    redis.exceptions.NoPermissionError("this user has no permissions to run the 'info' command"),
    redis.AuthenticationError("invalid username-password pair or user is disabled."),
    redis.AuthenticationError("Authentication required."),  # NOAUTH
    redis.exceptions.AuthorizationError("denied"),
    SentinelServiceUnknown("no sentinel at a:1 knows the service 'x'"),
])
def test_k6_permission_and_credential_errors_are_permanent(error):
    assert redis_error_is_permanent(error)
    line = redis_unrecoverable_line(error, "redis://u:S3cretPW@h:1/0")
    assert "S3cretPW" not in line and str(error) in line


@pytest.mark.parametrize("error", [
    redis.ConnectionError("Connection refused"), redis.TimeoutError("Timeout"),
    redis.ReadOnlyError("You can't write against a read only replica."),
    redis.BusyLoadingError("loading"),
])
def test_k2_outages_and_a_read_only_replica_are_not_permanent(error):
    assert not redis_error_is_permanent(error)


def test_k6_error_text_calls_a_permission_error_a_configuration_error():
    text = error_text(redis.exceptions.NoPermissionError("no permissions (command: XADD k)"))
    assert "configuration error" in text and "XADD k" in text
