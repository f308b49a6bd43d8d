"""A message as a stream entry and back: the fields of docs/protocol.md M5 (pure).

- `key`: the key's bytes; absent for a keyless message (M3);
- `value`: the value's bytes;
- `h:<name>`: one field per header, the name UTF-8, the value bytes (M2).

`outgoing` checks what an application hands a producer (str or bytes for the key and the
value, a mapping of text names to str or bytes for the headers) and refuses, naming it, a
message larger than the producer's limit (M4) before anything is sent; `entry_fields` lays it
out for the produce script. `read_fields` takes an entry's fields as the server sends them
(bytes, or text from a client that decodes) and gives key, value and headers as bytes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from rsc.common.error_family import MessageTooLarge as MessageTooLarge  # re-exported

KEY_FIELD = b"key"
VALUE_FIELD = b"value"
HEADER_PREFIX = b"h:"
DEFAULT_MAX_MESSAGE_BYTES = 1 << 20  # 1 MiB (M4)


@attrs.frozen
class Outgoing:
    """A message checked for a producer: key (None: keyless), value and headers as bytes."""

    key: bytes | None
    value: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()

    @property
    def size(self) -> int:
        """Bytes as stored: the key, the value, and every header's name and value (M4)."""
        return ((len(self.key) if self.key is not None else 0) + len(self.value)
                + sum(len(name) + len(value) for name, value in self.headers))


def as_bytes(data: str | bytes, what: str) -> bytes:
    """`data` as bytes (a str as its UTF-8); TypeError naming `what` for anything else."""
    if data.__class__ is bytes:
        return data
    if isinstance(data, str):
        return utf8(data, what)
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise TypeError(f"{what}: expected str or bytes, got {type(data).__name__}")


def utf8(text: str, what: str) -> bytes:
    """`text` as UTF-8; ValueError naming `what` and where for a string that has none (a
    lone surrogate, as a JSON `\\ud800` escape gives)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what}: not encodable as UTF-8 ({exc.reason}: "
                         f"{text[exc.start:exc.end]!r} at character {exc.start})") from None


def outgoing(key: str | bytes | None, value: str | bytes,
             headers: Mapping[str, str | bytes] | None = None, *,
             limit: int = DEFAULT_MAX_MESSAGE_BYTES, where: str = "") -> Outgoing:
    """Check one message for a producer; `where` prefixes errors ("record 3: ")."""
    encoded_headers: tuple[tuple[bytes, bytes], ...] = ()
    if headers:
        pairs = []
        for name, header_value in headers.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"{where}header names must be non-empty str, got {name!r}")
            pairs.append((HEADER_PREFIX + utf8(name, f"{where}header name {name!r}"),
                          as_bytes(header_value, f"{where}header {name!r}")))
        encoded_headers = tuple(pairs)
    message = Outgoing(None if key is None else as_bytes(key, f"{where}key"),
                       as_bytes(value, f"{where}value"), encoded_headers)
    size = message.size
    if size > limit:
        raise MessageTooLarge(size, limit, where)
    return message


def entry_fields(message: Outgoing) -> list[bytes]:
    """The entry's fields, flat (field, value, ...): key (unless keyless), value, headers."""
    fields = [] if message.key is None else [KEY_FIELD, message.key]
    fields += [VALUE_FIELD, message.value]
    for name, value in message.headers:
        fields += [name, value]
    return fields


def read_fields(flat: Sequence[Any] | Mapping[Any, Any] | None
                ) -> tuple[bytes | None, bytes, dict[str, bytes]]:
    """(key, value, headers) of an entry's fields as the server sent them; a missing key
    field is a keyless message (None), a missing value an empty one."""
    if flat is None:
        return None, b"", {}
    items = flat.items() if isinstance(flat, Mapping) else zip(flat[::2], flat[1::2], strict=True)
    key: bytes | None = None
    value = b""
    headers: dict[str, bytes] = {}
    for raw_name, raw_value in items:
        name = raw_name if raw_name.__class__ is bytes else str(raw_name).encode("utf-8")
        data = raw_value if raw_value.__class__ is bytes else str(raw_value).encode("utf-8")
        if name == KEY_FIELD:
            key = data
        elif name == VALUE_FIELD:
            value = data
        elif name.startswith(HEADER_PREFIX):
            headers[name[len(HEADER_PREFIX):].decode("utf-8", "replace")] = data
    return key, value, headers
