"""Strict protocol objects: the `harness/1` version, `ProtocolError`, and the decoding rules.

Every protocol object (an agent card here, the engine's objects in `gateway.engine.protocol`)
is a frozen dataclass whose `to_json()` gives the spec's JSON shape with `"version"` added and
whose `from_json` decodes strictly through the field readers below, raising only
`ProtocolError`. `encode(obj)` is its one byte form (JCS); `decode(data, cls)` refuses bytes
that are not exactly canonical. The readers live here, beneath both the engine and the
Registry, so that cards and envelopes follow one set of rules.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Final, Protocol, Self, TypeVar

from harness_contract.ids import HashId, RandomId, agent_id_order_key
from harness_contract.jsonvalue import (
    JsonValue,
    JsonValueError,
    canonical_json,
    parse_canonical_json,
)

from gateway.identity.keys import is_signature_text

VERSION: Final = "harness/1"
"""The `version` of every protocol object; compared as an exact string, never negotiated."""


_TIMESTAMP: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")
_TIMESTAMP_FORMAT: Final = "%Y-%m-%dT%H:%M:%SZ"
_SHOW_LIMIT: Final = 40


class ProtocolError(ValueError):
    """A protocol object or its bytes are invalid; `detail` says where and why.

    Raised before any state change; the receiver drops what it was given.
    """

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


# --- Small formats ---------------------------------------------------------------------


def format_timestamp(moment: dt.datetime) -> str:
    """An `issuedAt` text: UTC `YYYY-MM-DDTHH:MM:SSZ`, sub-seconds dropped.

    Raises `ValueError` for a naive datetime.
    """
    if moment.tzinfo is None:
        raise ValueError("a timestamp needs a timezone")
    return moment.astimezone(dt.UTC).strftime(_TIMESTAMP_FORMAT)


def is_timestamp(text: object) -> bool:
    """True for a real UTC calendar time written `YYYY-MM-DDTHH:MM:SSZ` (ASCII digits)."""
    if not isinstance(text, str) or _TIMESTAMP.fullmatch(text) is None:
        return False
    try:
        dt.datetime.strptime(text, _TIMESTAMP_FORMAT)
    except ValueError:
        return False
    return True


def show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOW_LIMIT else text[: _SHOW_LIMIT - 3] + "..."


# --- Decoding primitives -----------------------------------------------------------------


def kind_of(value: JsonValue, at: str) -> str:
    if not isinstance(value, Mapping):
        raise ProtocolError(f"{at}: expected an object")
    if "kind" not in value:
        raise ProtocolError(f"{at}: missing field 'kind'")
    kind = value["kind"]
    if not isinstance(kind, str):
        raise ProtocolError(f"{at}: kind must be a string")
    return kind


def object_fields(
    value: JsonValue, kind: str, names: tuple[str, ...], at: str
) -> Mapping[str, JsonValue]:
    found = kind_of(value, at)
    assert isinstance(value, Mapping)
    if found != kind:
        raise ProtocolError(f"{at}: kind {show(found)} is not {kind!r}")
    if "version" not in value:
        raise ProtocolError(f"{at}: missing field 'version'")
    if value["version"] != VERSION:
        raise ProtocolError(f"{at}: version {show(value['version'])} is not {VERSION!r}")
    missing = [name for name in names if name not in value]
    if missing:
        raise ProtocolError(f"{at}: missing field {', '.join(map(repr, missing))}")
    allowed = {"kind", "version", *names}
    extra = sorted(key for key in value if key not in allowed)
    if extra:
        raise ProtocolError(f"{at}: unexpected field {', '.join(show(key) for key in extra)}")
    return value


def text_field(obj: Mapping[str, JsonValue], name: str, at: str) -> str:
    value = obj[name]
    if not isinstance(value, str):
        raise ProtocolError(f"{at}.{name}: expected a string")
    return value


def flag_field(obj: Mapping[str, JsonValue], name: str, at: str) -> bool:
    value = obj[name]
    if not isinstance(value, bool):
        raise ProtocolError(f"{at}.{name}: expected a boolean")
    return value


def random_id_field(obj: Mapping[str, JsonValue], name: str, kind: RandomId, at: str) -> str:
    value = obj[name]
    if not kind.is_valid(value):
        raise ProtocolError(f"{at}.{name}: not a valid {kind.name.lower()} identifier")
    assert isinstance(value, str)
    return value


def hash_id_field(obj: Mapping[str, JsonValue], name: str, kind: HashId, at: str) -> str:
    value = obj[name]
    if not kind.is_valid(value):
        raise ProtocolError(f"{at}.{name}: not a valid {kind.prefix} hash")
    assert isinstance(value, str)
    return value


def optional_hash_id_field(
    obj: Mapping[str, JsonValue], name: str, kind: HashId, at: str
) -> str | None:
    return None if obj[name] is None else hash_id_field(obj, name, kind, at)


def null_field(obj: Mapping[str, JsonValue], name: str, at: str) -> None:
    if obj[name] is not None:
        raise ProtocolError(f"{at}.{name}: must be null")


def signature_field(obj: Mapping[str, JsonValue], name: str, at: str) -> str:
    value = obj[name]
    if not is_signature_text(value):
        raise ProtocolError(f"{at}.{name}: not b64 of a 64-byte signature")
    assert isinstance(value, str)
    return value


def array_field(
    obj: Mapping[str, JsonValue], name: str, at: str, *, least: int, most: int
) -> Sequence[JsonValue]:
    value = obj[name]
    if isinstance(value, str | Mapping) or not isinstance(value, Sequence):
        raise ProtocolError(f"{at}.{name}: expected an array")
    if not least <= len(value) <= most:
        raise ProtocolError(f"{at}.{name}: expected {least} to {most} entries, got {len(value)}")
    return value


def strictly_byte_ordered(agent_ids: Sequence[str]) -> bool:
    keys = [agent_id_order_key(agent_id) for agent_id in agent_ids]
    return all(first < second for first, second in itertools.pairwise(keys))


# --- Bytes -------------------------------------------------------------------------------


class ProtocolObject(Protocol):
    """Any object of this module."""

    def to_json(self) -> dict[str, JsonValue]:
        """The spec's JSON object."""
        ...


class Decodable(Protocol):
    @classmethod
    def from_json(cls, value: JsonValue, *, at: str = ...) -> Self: ...


_D = TypeVar("_D", bound=Decodable)


def encode(obj: ProtocolObject) -> bytes:
    """`JCS(obj.to_json())`: the one byte form of an object, as sent and stored."""
    return canonical_json(obj.to_json())


def parse_object_bytes(data: bytes) -> JsonValue:
    if not isinstance(data, bytes):
        raise ProtocolError("protocol bytes must be bytes")
    try:
        return parse_canonical_json(data)
    except JsonValueError as error:
        raise ProtocolError(f"not canonical JSON: {error.detail}") from None


def decode(data: bytes, cls: type[_D]) -> _D:
    """Decode the JCS bytes of one object of type `cls` (a stored row, a Registry answer).

    Raises `ProtocolError` when the bytes are not exactly canonical or not such an object.
    """
    return cls.from_json(parse_object_bytes(data))
