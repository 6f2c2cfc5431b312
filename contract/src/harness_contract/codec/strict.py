"""The strict readers every JSON form uses, and `CodecError`, the one failure they raise.

Each reader checks one JSON value against the shape it expects and names `where` it looked,
so a row that does not decode is reported with its place, never half-read.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TypeVar

from harness_contract.jsonvalue import JsonValue

E = TypeVar("E")


class CodecError(ValueError):
    """A JSON value does not have the expected contract shape; `detail` says where."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def expect_object(
    value: JsonValue, where: str, required: set[str], optional: Collection[str] = ()
) -> Mapping[str, JsonValue]:
    """`value` as an object with every `required` key and no key beyond `optional`."""
    if not isinstance(value, Mapping):
        raise CodecError(f"{where}: expected an object")
    keys = set(value)
    if missing := required - keys:
        raise CodecError(f"{where}: missing {sorted(missing)}")
    if extra := keys - required - set(optional):
        raise CodecError(f"{where}: unexpected {sorted(extra)}")
    return value


def expect_str(value: JsonValue, where: str) -> str:
    """`value` as a string."""
    if not isinstance(value, str):
        raise CodecError(f"{where}: expected a string")
    return value


def expect_int(value: JsonValue, where: str) -> int:
    """`value` as an integer (a float with no fraction reads as one; a boolean does not)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise CodecError(f"{where}: expected an integer")
    return int(value)


def expect_list(value: JsonValue, where: str) -> Sequence[JsonValue]:
    """`value` as an array (a string is not one)."""
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise CodecError(f"{where}: expected an array")
    return value


def expect_strs(value: JsonValue, where: str) -> tuple[str, ...]:
    """`value` as an array of strings, as a tuple."""
    return tuple(expect_str(item, where) for item in expect_list(value, where))


def expect_enum(factory: Callable[[str], E], value: JsonValue, where: str) -> E:
    """`value` read by `factory` (an enum), an unknown value a `CodecError`."""
    try:
        return factory(expect_str(value, where))
    except ValueError:
        raise CodecError(f"{where}: unknown value {value!r}") from None


def expect_schema(value: JsonValue, where: str) -> Mapping[str, JsonValue]:
    """`value` as an object, kept whole (a requested schema is checked elsewhere)."""
    if not isinstance(value, Mapping):
        raise CodecError(f"{where}: expected an object")
    return value
