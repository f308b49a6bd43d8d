"""Secrets stay secret (docs/protocol.md K7): what a URL or a line looks like once shown.

- `redact_url(url)`: the URL with its password (`scheme://user:PASSWORD@`) and every
  `password=` / `sentinel_password=` query value replaced by `***`. Every place that
  formats a Redis URL for people (log lines, error messages, metrics, admin answers,
  console pages) shows it through this.
- `redact_text(text)`: the safety net of every line writer and log formatter: the same
  replacement applied to any URL in a free text, and every password this process was
  given (`remember_secret`, fed by `rsc.common.redis_connect` with the passwords of the
  URLs and of RSC_REDIS_PASSWORD / RSC_SENTINEL_PASSWORD) replaced wherever it appears.
"""

from __future__ import annotations

import re
import threading

MASK = "***"
MIN_SECRET_LENGTH = 4  # shorter ones would mask ordinary words; the URL patterns still catch them

# scheme://user:password@ (user may be empty); the password runs to the last @ before a space
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s/@:]*:)(?P<secret>[^\s@]*)(?=@)")
# password=, sentinel_password= (a URL query, or a key=value log field)
_QUERY = re.compile(r"(?P<head>\b[A-Za-z_]*password=)(?P<secret>[^&\s'\",;]*)", re.IGNORECASE)

_secrets: set[str] = set()
_lock = threading.Lock()


def remember_secret(secret: str | None) -> None:
    """Mask `secret` in every `redact_text` from now on (a password this process was given)."""
    if secret and len(secret) >= MIN_SECRET_LENGTH and secret != MASK:
        with _lock:
            _secrets.add(secret)


def redact_url(url: str) -> str:
    """`url` as shown to people: its password and password query values replaced by ***."""
    return _redact_patterns(url)


def redact_text(text: str) -> str:
    """`text` with every URL password, password= value and remembered secret replaced by ***."""
    text = _redact_patterns(text)
    if _secrets:
        with _lock:
            secrets = sorted(_secrets, key=len, reverse=True)  # the longest first: no partial leak
        for secret in secrets:
            if secret in text:
                text = text.replace(secret, MASK)
    return text


def _redact_patterns(text: str) -> str:
    if "@" in text:
        text = _USERINFO.sub(lambda match: match["head"] + (MASK if match["secret"] else ""), text)
    if "assword=" in text or "ASSWORD=" in text:
        text = _QUERY.sub(lambda match: match["head"] + (MASK if match["secret"] else ""), text)
    return text
