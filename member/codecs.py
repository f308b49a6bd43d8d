"""Serializers: `codec=` on a listener or a producer turns values into bytes and back.

    from pydantic import BaseModel
    from rsc.member.listener import listener

    class Order(BaseModel):
        id: int
        amount: float

    @listener("orders", "billing", coordinator_url=..., redis_url=..., codec=Order)
    async def handle(order: Order) -> None:              # the decoded value
        ...

    @listener("orders", "audit", coordinator_url=..., redis_url=..., codec=Order)
    async def audit(order: Order, message: Message) -> None:   # and the message itself
        ...

`codec=` takes `"json"` (or `JSON`, built in), a pydantic model class (`[pydantic]` extra),
a msgspec `Struct` class (`[msgspec]` extra), or any object with `encode(value) -> bytes`,
`decode(bytes) -> value` and a `name` (the `Codec` protocol). With a codec a listener's
handler is called with the decoded value; a handler with two positional parameters gets
the `Message` as well (its headers, key, id, attempt). A producer with a codec encodes each
record's value (keys and headers stay str or bytes).

A value that does not decode fails the handler call with `DecodeFailed`, naming the message
and the codec's error, before the handler runs: the listener's retry policy takes it, but
without retrying in place (the same bytes would fail again): it goes to the dead-letter
stream, whose entry's `rsc-error` field records it (docs/protocol.md P2). A value the
producer cannot encode raises TypeError naming the record before anything is sent.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeGuard

from rsc.common.extras import require
from rsc.member.message import Handler, Message

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["JSON", "Codec", "DecodeFailed", "JsonCodec", "MsgspecCodec", "PydanticCodec",
           "codec_for", "typed_handler"]

AnyHandler = Callable[..., Awaitable[None] | None]
"""A handler: `(message)`, or with a codec `(value)` or `(value, message)`."""


class Codec(Protocol):
    """What `codec=` takes: a name (said in errors) and the two directions."""

    name: str

    def encode(self, value: Any) -> bytes: ...

    def decode(self, data: bytes) -> Any: ...


class DecodeFailed(ValueError):
    """A message's value does not decode with the listener's codec (no retry in place)."""

    def __init__(self, message: Message, codec_name: str, error: BaseException) -> None:
        super().__init__(f"the value of {message.shard} {message.id} does not decode as "
                         f"{codec_name}: {type(error).__name__}: {_one_line(error)}")
        self.error = error


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


class JsonCodec:
    """JSON (UTF-8, compact); decodes to dicts, lists, str, numbers, bools and None."""

    name = "json"

    def encode(self, value: object) -> bytes:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    def decode(self, data: bytes) -> object:
        return json.loads(data)


JSON = JsonCodec()


class PydanticCodec:
    """A pydantic (v2) model as JSON: `model_validate_json` / `model_dump_json`."""

    def __init__(self, model: type[BaseModel]) -> None:
        pydantic = require("pydantic", extra="pydantic", feature="a pydantic codec")
        if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
            raise TypeError(f"PydanticCodec takes a pydantic model class, got {model!r}")
        self.model = model
        self.name = f"pydantic {model.__name__}"

    def encode(self, value: object) -> bytes:
        if not isinstance(value, self.model):
            value = self.model.model_validate(value)
        return value.model_dump_json().encode("utf-8")

    def decode(self, data: bytes) -> BaseModel:
        return self.model.model_validate_json(data)


class MsgspecCodec:
    """A msgspec type (a `Struct` class, or any type msgspec handles) as JSON."""

    def __init__(self, type_: object) -> None:
        msgspec = require("msgspec", extra="msgspec", feature="a msgspec codec")
        self.type = type_
        self.name = f"msgspec {getattr(type_, '__name__', repr(type_))}"
        self._encoder = msgspec.json.Encoder()
        self._decoder = msgspec.json.Decoder(type_)

    def encode(self, value: object) -> bytes:
        data: bytes = self._encoder.encode(value)
        return data

    def decode(self, data: bytes) -> object:
        return self._decoder.decode(data)


def codec_for(spec: object) -> Codec:
    """The codec `codec=` names: "json", a pydantic model class, a msgspec Struct class, or
    a codec itself; TypeError naming what was given otherwise."""
    if isinstance(spec, str):
        if spec == "json":
            return JSON
        raise TypeError(f"codec={spec!r}: the only codec named by a string is 'json'")
    if isinstance(spec, type):
        if hasattr(spec, "model_validate_json"):
            return PydanticCodec(spec)
        if any(base.__module__.split(".", 1)[0] == "msgspec" for base in spec.__mro__[1:]):
            return MsgspecCodec(spec)
    if _is_codec(spec):
        return spec
    if _has_both_directions(spec):
        raise TypeError(f"codec={spec!r}: a codec needs a `name` (str), said in errors")
    raise TypeError(f"codec={spec!r}: expected 'json', a pydantic model class, a msgspec Struct "
                    "class, or an object with encode(value) -> bytes and decode(bytes)")


def _has_both_directions(spec: object) -> bool:
    return all(callable(getattr(spec, name, None)) for name in ("encode", "decode"))


def _is_codec(spec: object) -> TypeGuard[Codec]:
    """What the `Codec` protocol asks, checked: callable `encode` and `decode`, a str `name`."""
    return _has_both_directions(spec) and isinstance(getattr(spec, "name", None), str)


def wants_message(handler: Callable[..., object]) -> bool:
    """Whether a typed handler takes the message too: two positional parameters or more."""
    try:
        parameters = inspect.signature(handler).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: the value alone
        return False
    positional = [p for p in parameters
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in positional)


def typed_handler(handler: AnyHandler, codec: Codec) -> Handler:
    """The `Handler` the workers run for a handler of decoded values: decode, then call it
    with the value (and the message if it takes two parameters). An async handler stays
    async (awaited on the workers' loop), a plain one stays plain (run in a worker thread,
    the decoding with it)."""
    decode, name = codec.decode, codec.name
    both = wants_message(handler)

    def decoded(message: Message) -> object:
        try:
            return decode(message.value_bytes)
        except Exception as exc:  # noqa: BLE001 - any codec's failure is the value's
            raise DecodeFailed(message, name, exc) from exc

    if inspect.iscoroutinefunction(handler):
        async def run_async(message: Message) -> None:
            value = decoded(message)
            if both:
                await handler(value, message)
            else:
                await handler(value)

        return run_async

    def run_sync(message: Message) -> None:
        value = decoded(message)
        if both:
            handler(value, message)
        else:
            handler(value)

    return run_sync


def encode_value(codec: Codec, value: object, where: str) -> bytes:
    """A record's value through the producer's codec; TypeError naming the record otherwise."""
    try:
        data = codec.encode(value)
    except Exception as exc:  # noqa: BLE001 - said with the record it came from
        raise TypeError(f"{where}value does not encode as {codec.name}: "
                        f"{type(exc).__name__}: {_one_line(exc)}") from exc
    if not isinstance(data, bytes | bytearray | str):
        raise TypeError(f"{where}codec {codec.name} gave {type(data).__name__}, not bytes")
    return data.encode("utf-8") if isinstance(data, str) else bytes(data)


def encode_records(codec: Codec, records: Sequence[object]) -> list[object]:
    """A producer's records with each value through its codec (a record that is not a
    (key, value[, headers]) tuple is left for the producer's check to name)."""
    encoded: list[object] = []
    for index, record in enumerate(records):
        if isinstance(record, tuple | list) and len(record) in (2, 3):
            key, value, *rest = record
            record = (key, encode_value(codec, value, f"record {index}: "), *rest)
        encoded.append(record)
    return encoded
