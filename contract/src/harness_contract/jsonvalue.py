"""JsonValue rules and RFC 8785 canonical JSON (engine.md §0 and §2).

Every number in the core is an IEEE 754 binary64 `float`: `normalize_json` turns ints into
floats (so `rfc8785` never raises `IntegerDomainError` for 2**53 and above) and `-0` into `0`.
Strings and keys must be well-formed Unicode: a lone surrogate, which `json.loads` happily
makes from `"\\ud800"`, is refused. Nothing here raises anything but `JsonValueError`.

Hashing, signing and storing call `canonical_json` about twenty times a direct post and
`parse_canonical_json` three times, so both take `orjson` first, where its bytes provably
are the JCS bytes, and fall back to the exact paths otherwise (engine.md §0).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, TypeAlias

import orjson
import rfc8785

JsonValue: TypeAlias = bool | float | str | Sequence["JsonValue"] | Mapping[str, "JsonValue"] | None
"""A JSON value as the core holds it: numbers are floats, arrays are tuples or lists,
objects are mappings with string keys."""

DATA_VALUE_MAX_DEPTH: Final = 16
"""Deepest a data part's value may nest (engine.md §2): 0 for a scalar, `[]` is 1."""

PARSE_MAX_DEPTH: Final = 64
"""Deepest JSON the core parses from untrusted text before refusing it.

Python's own `json` module recurses; refusing deeper input first keeps a hostile
document from exhausting the stack."""


class JsonValueError(ValueError):
    """A value is not a JsonValue, or text is not the JSON we accept. `detail` says why."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


def is_well_formed_text(text: str) -> bool:
    """True when `text` has no lone surrogate (it encodes as UTF-8)."""
    if text.isascii():
        return True  # a flag on the string, no scan: ASCII holds no surrogate
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def normalize_json(value: object, *, max_depth: int = PARSE_MAX_DEPTH) -> JsonValue:
    """Return `value` as a JsonValue: ints as floats, `-0` as `0`, arrays as tuples.

    Raises `JsonValueError` for a non-finite number, a lone surrogate, a non-string key, a
    value of another Python type, or nesting deeper than `max_depth`.
    """
    return _normalize(value, max_depth, "")


def _normalize(value: object, budget: int, path: str) -> JsonValue:
    kind = type(value)
    # Every send's data parts come through here: the concrete types are tested first, and
    # ASCII text (`isascii` reads a flag, no scan) cannot hold a lone surrogate.
    if kind is str and value.isascii():  # type: ignore[attr-defined]
        return value  # type: ignore[return-value]
    if kind is dict and budget > 0:
        return _normalize_object(value, budget, path)  # type: ignore[arg-type]
    # bool before numbers: `True` is an `int` in Python, never a number in JSON.
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        number = float(value) if not isinstance(value, int) or abs(value) < 2**1023 else math.inf
        if not math.isfinite(number):
            raise JsonValueError(f"{_at(path)}numbers must be finite")
        return number + 0.0  # -0.0 + 0.0 == 0.0: JCS writes both as 0
    if isinstance(value, str):
        if not is_well_formed_text(value):
            raise JsonValueError(f"{_at(path)}text must be well-formed Unicode")
        return value
    if budget <= 0:
        raise JsonValueError(f"{_at(path)}nesting is too deep")
    if isinstance(value, list | tuple):
        return tuple(
            _normalize(item, budget - 1, f"{path}[{index}]") for index, item in enumerate(value)
        )
    if isinstance(value, Mapping):
        return _normalize_object(value, budget, path)
    raise JsonValueError(f"{_at(path)}{type(value).__name__} is not a JSON value")


def _normalize_object(value: Mapping[object, object], budget: int, path: str) -> JsonValue:
    result: dict[str, JsonValue] = {}
    for key, item in value.items():
        if type(key) is not str or not key.isascii():
            if not isinstance(key, str):
                raise JsonValueError(f"{_at(path)}object keys must be strings")
            if not is_well_formed_text(key):
                raise JsonValueError(f"{_at(path)}object keys must be well-formed Unicode")
        if type(item) is str and item.isascii():
            result[key] = item  # what `_normalize` returns for it, without the call
        else:
            result[key] = _normalize(item, budget - 1, f"{path}.{key}" if path else key)
    return result


def _at(path: str) -> str:
    return f"{path}: " if path else ""


def depth(value: JsonValue) -> int:
    """JSON nesting depth: 0 for a scalar, 1 + the deepest child for an array or object.

    Every data part is measured on every send, so concrete types are tested first and
    text is skipped without a call (a quarter of the time of ABC checks and `max`)."""
    kind = type(value)
    if kind is dict:
        children: Iterable[JsonValue] = value.values()  # type: ignore[union-attr]
    elif kind is tuple or kind is list:
        children = value  # type: ignore[assignment]
    elif (
        kind is float
        or value is None
        or isinstance(value, str | bool)
        or not isinstance(value, Sequence | Mapping)
    ):
        return 0
    else:
        children = value.values() if isinstance(value, Mapping) else value
    deepest = 0
    for child in children:
        if type(child) is not str:
            below = depth(child)
            if below > deepest:
                deepest = below
    return 1 + deepest


_EXACT_INTEGER: Final = 2.0**53
"""Below this magnitude an integral binary64 is written by JCS as its exact integer."""


class _NeedsReference(Exception):
    """The fast encoder met a value whose JCS form it does not reproduce."""


_ORJSON_OPTIONS: Final = (
    orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
)
"""Keys sorted by code point; a dataclass or datetime is refused (a `TypeError`), never
written as orjson would."""


def _fast_form(value: JsonValue) -> object:
    """The value as orjson should see it, or `_NeedsReference` (the value takes `rfc8785`).

    Containers come back as they are unless something inside changes (an integral float
    becomes its int, a str subclass its text): orjson writes tuples itself, and not copying
    the common case is a third of the encoding's time. Concrete types are tested first
    (`type(...) is`): ABC checks cost more than the encoding itself on this path."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is dict:
        mapping: dict[str, JsonValue] = value  # type: ignore[assignment]
        copy: dict[str, object] | None = None
        for key, item in mapping.items():
            # orjson sorts keys by code point, JCS by UTF-16 code unit: the two agree on
            # ASCII keys, which is every key of the protocol; others take the reference path.
            if type(key) is not str or not key.isascii():
                raise _NeedsReference
            if type(item) is not str:
                form = _fast_form(item)
                if form is not item:
                    if copy is None:
                        copy = dict(mapping)
                    copy[key] = form
        return mapping if copy is None else copy
    if kind is tuple or kind is list:
        items: Sequence[JsonValue] = value  # type: ignore[assignment]
        changed: list[object] | None = None
        for index, item in enumerate(items):
            if type(item) is not str:
                form = _fast_form(item)
                if form is not item:
                    if changed is None:
                        changed = list(items)
                    changed[index] = form
        return items if changed is None else changed
    if kind is float or kind is int:
        number = float(value) + 0.0  # type: ignore[arg-type]
        # JCS writes numbers as ECMAScript does; for integral values below 2**53 that is
        # the plain integer, which orjson writes the same way. Anything else (fractions,
        # exponents, larger integers) takes the reference encoder.
        if number.is_integer() and abs(number) < _EXACT_INTEGER:
            return int(number)
        raise _NeedsReference
    if isinstance(value, str):
        # A str subclass (a StrEnum member such as a failure's reason) is its text, never
        # the sequence of its characters.
        return str.__str__(value)
    if isinstance(value, Mapping):
        return _fast_form(dict(value))
    if isinstance(value, Sequence):
        return _fast_form(list(value))
    raise _NeedsReference


def canonical_json(value: JsonValue) -> bytes:
    """RFC 8785 (JCS) bytes of a JsonValue.

    The value should come from `normalize_json`; ints are still accepted and written as
    their float. Raises `JsonValueError` for anything JCS cannot encode.

    Hashing, signing and storing call this about twenty times a direct post, so values of
    the common shape (ASCII keys, integral numbers) go through orjson, whose output is
    byte-identical there: it escapes every code point as JCS does and sorts keys by code
    point, which is JCS's UTF-16 order for ASCII keys (engine.md §0; a property test pins it
    against `rfc8785`). Everything else takes `rfc8785`, the reference.
    """
    try:
        form = _fast_form(value)
    except _NeedsReference:
        pass
    except RecursionError:
        raise JsonValueError("nesting is too deep") from None
    else:
        try:
            return orjson.dumps(form, option=_ORJSON_OPTIONS)
        except TypeError:  # orjson.JSONEncodeError: lone surrogates, deep nesting
            pass  # the reference encoder reports them
    try:
        return bytes(rfc8785.dumps(_for_jcs(value)))  # type: ignore[arg-type]
    except (rfc8785.CanonicalizationError, UnicodeEncodeError, ValueError, TypeError) as error:
        raise JsonValueError(f"not canonicalizable JSON: {error}") from None


def reference_canonical_json(value: JsonValue) -> bytes:
    """RFC 8785 bytes from the reference encoder alone (tests pin the fast path to it)."""
    return bytes(rfc8785.dumps(_for_jcs(value)))  # type: ignore[arg-type]


def canonical_text(value: JsonValue) -> str:
    """`canonical_json` as text, for messages and error details."""
    return canonical_json(value).decode("utf-8")


def _for_jcs(value: JsonValue) -> object:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return float(value) + 0.0
    if isinstance(value, Mapping):
        return {key: _for_jcs(item) for key, item in value.items()}
    return [_for_jcs(item) for item in value]


def _reject_duplicate_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    result: dict[str, object] = {}
    for key, item in pairs:
        if key in result:
            raise JsonValueError(f"duplicate key {json.dumps(key)}")
        result[key] = item
    return result


def _reject_constant(name: str) -> object:
    raise JsonValueError(f"{name} is not JSON")


_JSON_STRING: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
"""A JSON string, or an unterminated one up to the end of the text.

Always matching from a quote keeps the scan linear on hostile text such as `"\\"\\"\\"…`."""
_NOT_BRACKET: Final = re.compile(r"[^\[\]{}]+")


def nests_deeper_than(text: str, limit: int) -> bool:
    """Whether the text's arrays and objects, outside strings, nest deeper than `limit`.

    Brackets inside strings never count: a message of 10,000 `[` characters is one string,
    depth 1 at most where it sits. Exact for valid JSON, where every quote outside a string
    opens one. For invalid text the scan is exact up to the first error, which is as far as
    a parser gets, so a parser handed text that passes never recurses past `limit`.
    """
    if text.count("[") + text.count("{") <= limit:
        return False  # cannot nest deeper than the brackets it has
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    level = 0
    for char in brackets:
        if char in "[{":
            level += 1
            if level > limit:
                return True
        else:
            level -= 1
    return False


def load_untrusted_json(
    text: str | bytes, *, duplicate_keys: str = "reject", max_depth: int = PARSE_MAX_DEPTH
) -> object:
    """Parse untrusted RFC 8259 JSON into plain Python values, numbers as floats.

    Refuses a BOM, `NaN`/`Infinity` literals and nesting past `max_depth`. Duplicate keys
    are refused (`duplicate_keys="reject"`, protocol bytes) or keep their last value
    (`"last"`, a model's message text). An overflowing number reads as infinite; the
    caller decides (`normalize_json` refuses it).
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError:
            raise JsonValueError("JSON text must be UTF-8") from None
    if text.startswith("\ufeff"):
        raise JsonValueError("JSON text must not start with a byte order mark")
    if nests_deeper_than(text, max_depth):
        raise JsonValueError("nesting is too deep")
    try:
        return json.loads(
            text,
            object_pairs_hook=_reject_duplicate_keys if duplicate_keys == "reject" else dict,
            parse_constant=_reject_constant,
            parse_int=float,
        )
    except JsonValueError:
        raise
    except (ValueError, RecursionError) as error:
        raise JsonValueError(f"not JSON: {error}") from None


def parse_json(text: str | bytes, *, max_depth: int = PARSE_MAX_DEPTH) -> JsonValue:
    """Parse untrusted JSON into a normalized JsonValue, refusing duplicate keys,
    non-finite numbers and lone surrogates as well as what `load_untrusted_json` refuses."""
    return normalize_json(load_untrusted_json(text, max_depth=max_depth), max_depth=max_depth)


def parse_canonical_json(data: bytes, *, max_depth: int = PARSE_MAX_DEPTH) -> JsonValue:
    """Parse received protocol bytes that MUST be exactly the JCS of what they decode to.

    This rejects whitespace, key disorder, BOMs and every other non-canonical spelling
    (engine.md §0), so one object has one byte form everywhere.

    orjson parses first, and its value is accepted only when encoding it gives `data` back
    byte for byte, which is the definition of canonical: with orjson itself when the value
    has no number and only ASCII keys (where orjson's bytes are JCS, as in `canonical_json`),
    else with `canonical_json`. Anything else (text orjson refuses, nesting past `max_depth`,
    a number past binary64, bytes that differ) takes the exact path below, so a refusal
    always says what `parse_json` says.
    """
    plain = [True]
    try:
        value = _from_parsed(orjson.loads(data), max_depth, plain)
        # With no number and ASCII keys, orjson's own bytes are the JCS bytes.
        encoded = orjson.dumps(value, option=_ORJSON_OPTIONS) if plain[0] else canonical_json(value)
    except (orjson.JSONDecodeError, orjson.JSONEncodeError, _NeedsReference, JsonValueError):
        pass
    else:
        if encoded == data:
            return value
    value = parse_json(data, max_depth=max_depth)
    if canonical_json(value) != data:
        raise JsonValueError("JSON bytes are not canonical (RFC 8785)")
    return value


def _from_parsed(value: object, budget: int, plain: list[bool]) -> JsonValue:
    """What orjson parsed, as `normalize_json` would return it: arrays as tuples, numbers as
    floats. `_NeedsReference` when nesting passes `budget` or a number is not finite;
    `plain[0]` becomes False at a number or a non-ASCII key.

    orjson's dicts are fresh and reused in place; its strings are well-formed (it refuses a
    lone surrogate)."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return value  # type: ignore[return-value]
    if kind is dict:
        if budget <= 0:
            raise _NeedsReference
        mapping: dict[str, object] = value  # type: ignore[assignment]
        if plain[0] and not "".join(mapping).isascii():
            plain[0] = False
        for key, item in mapping.items():
            if type(item) is not str:
                mapping[key] = _from_parsed(item, budget - 1, plain)
        return mapping  # type: ignore[return-value]
    if kind is list:
        if budget <= 0:
            raise _NeedsReference
        items: list[object] = value  # type: ignore[assignment]
        return tuple([_from_parsed(item, budget - 1, plain) for item in items])
    if kind is float or (kind is int and abs(value) < 2**1023):  # type: ignore[arg-type]
        plain[0] = False
        number = float(value)  # type: ignore[arg-type]
        if not math.isfinite(number):
            raise _NeedsReference
        return number + 0.0
    raise _NeedsReference  # past binary64, or a type orjson never returns
