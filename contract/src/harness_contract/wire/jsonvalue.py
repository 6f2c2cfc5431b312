"""JSON values as `google.protobuf.Value` and content, both ways."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import assert_never

from google.protobuf import struct_pb2

from harness_contract._gen.harness.v1 import types_pb2
from harness_contract.errors import InvalidRequestError, SendError, SendErrorReason
from harness_contract.jsonvalue import JsonValue
from harness_contract.values import Content, ContentPart, DataPart, TextPart

# --- JSON values -------------------------------------------------------------------------


def json_value_to_proto(value: JsonValue) -> struct_pb2.Value:
    """A JsonValue as `google.protobuf.Value`; raises `ValueError` for a non-finite number."""
    result = struct_pb2.Value()
    _fill_value(result, value)
    return result


def _fill_value(target: struct_pb2.Value, value: JsonValue) -> None:
    # bool before numbers: `True` is an `int` in Python, never a number in JSON.
    if value is None:
        target.null_value = struct_pb2.NULL_VALUE
    elif isinstance(value, bool):
        target.bool_value = value
    elif isinstance(value, int | float):
        number = float(value)
        if not math.isfinite(number):
            raise ValueError("a JSON number must be finite")
        target.number_value = number
    elif isinstance(value, str):
        target.string_value = value
    elif isinstance(value, Mapping):
        _fill_struct(target.struct_value, value)
    else:
        target.list_value.SetInParent()
        for item in value:
            _fill_value(target.list_value.values.add(), item)


def _fill_struct(target: struct_pb2.Struct, value: Mapping[str, JsonValue]) -> None:
    target.SetInParent()
    for key, item in value.items():
        _fill_value(target.fields[key], item)


def struct_to_proto(value: Mapping[str, JsonValue]) -> struct_pb2.Struct:
    """A JSON object as `google.protobuf.Struct`."""
    result = struct_pb2.Struct()
    _fill_struct(result, value)
    return result


def json_value_from_proto(value: struct_pb2.Value, where: str = "value") -> JsonValue:
    """A `google.protobuf.Value` as a JsonValue (numbers float, lists tuples).

    Raises `InvalidRequestError` for a Value with no kind or a non-finite number."""
    kind = value.WhichOneof("kind")
    if kind == "null_value":
        return None
    if kind == "bool_value":
        return value.bool_value
    if kind == "number_value":
        number = value.number_value
        if not math.isfinite(number):
            raise InvalidRequestError.of_field(f"{where}: numbers must be finite")
        return number + 0.0  # -0.0 + 0.0 == 0.0, as the core normalizes numbers
    if kind == "string_value":
        return value.string_value
    if kind == "struct_value":
        return struct_from_proto(value.struct_value, where)
    if kind == "list_value":
        return tuple(
            json_value_from_proto(item, f"{where}[{index}]")
            for index, item in enumerate(value.list_value.values)
        )
    raise InvalidRequestError.of_field(f"{where}: a JSON value has no kind")


def struct_from_proto(value: struct_pb2.Struct, where: str = "value") -> dict[str, JsonValue]:
    """A `google.protobuf.Struct` as a JSON object."""
    return {
        key: json_value_from_proto(item, f"{where}.{key}") for key, item in value.fields.items()
    }


# --- content -----------------------------------------------------------------------------


def content_to_proto(content: Content) -> types_pb2.Content:
    """Content parts in order."""
    result = types_pb2.Content()
    for part in content:
        match part:
            case TextPart(text=text):
                result.parts.add().text.text = text
            case DataPart(value=value):
                result.parts.add().data.value.CopyFrom(json_value_to_proto(value))
            case _:
                assert_never(part)
    return result


def content_from_proto(content: types_pb2.Content) -> Content:
    """Content from protobuf; bad parts are `SendError` `content-invalid`."""
    parts: list[ContentPart] = []
    for part in content.parts:
        kind = part.WhichOneof("part")
        if kind == "text":
            parts.append(TextPart(text=part.text.text))
        elif kind == "data":
            try:
                value = json_value_from_proto(part.data.value, "data")
            except InvalidRequestError as error:
                raise SendError(
                    SendErrorReason.CONTENT_INVALID,
                    f"a data part is not a JSON value ({error.detail})",
                ) from None
            parts.append(DataPart(value=value))
        else:
            raise SendError(
                SendErrorReason.CONTENT_INVALID, "a content part is neither text nor data"
            )
    return tuple(parts)
